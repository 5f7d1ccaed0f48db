//! # The person's library, indexed
//!
//! A folder of markdown (`.md`, `.markdown`) and text (`.txt`) notes, indexed into an SQLite
//! FTS5 table held in memory. [`Library::rescan`] brings the index up to date with the folder
//! (new, changed and removed files, judged by size and modification time); the companion calls
//! it every couple of seconds, so the index follows the files. Hidden files and folders, links
//! and files over [`MAX_NOTE_BYTES`] are left out.
//!
//! Notes have stable ids: `k_…` for markdown notes (knowledge), `d_…` for other documents, each a
//! hash of the note's path in the library. What leaves the library is bounded: a query answers
//! ids and short passages around the matching words ([`MAX_SUMMARY_CHARS`] in all), never a
//! whole note.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Mutex,
    time::SystemTime,
};

use rusqlite::{Connection, params};
use serde::Serialize;
use sha2::{Digest, Sha256};

mod text;

use text::{bounded, front_matter_open, partial, query_words, title_of, unchecked_items};

/// The largest note indexed, in bytes.
pub const MAX_NOTE_BYTES: u64 = 1024 * 1024;
/// The longest summary a query answers, in characters.
pub const MAX_SUMMARY_CHARS: usize = 600;
/// The most notes a query names.
const MAX_MATCHES: usize = 5;
/// The most words of a query used.
const MAX_QUERY_WORDS: usize = 16;

/// Why the library could not be read or indexed.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// The folder or a file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// What.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The index failed.
    #[error("the index failed: {0}")]
    Index(#[from] rusqlite::Error),
}

/// What a rescan changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rescan {
    /// Notes in the library.
    pub notes: usize,
    /// Notes added or changed.
    pub indexed: usize,
    /// Notes gone.
    pub removed: usize,
}

/// The answer to a question: which notes bear on it and what they say about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Context {
    /// The question.
    pub query: String,
    /// Markdown notes that match, best first.
    pub relevant_k_ids: Vec<String>,
    /// Other documents that match, best first.
    pub relevant_d_ids: Vec<String>,
    /// Passages around the matching words, `title: passage`, at most [`MAX_SUMMARY_CHARS`].
    pub summary: String,
    /// How well the best note covers the question, 0 to 1.
    pub confidence: f64,
}

/// Something the person left open: an unchecked `- [ ]` item, or a note marked `status: open`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenLoop {
    /// Its id (`l_…`).
    pub id: String,
    /// What is open.
    pub title: String,
    /// When its note was made (RFC 3339).
    pub created_at: String,
    /// When its note last changed (RFC 3339).
    pub last_mentioned: String,
}

/// Something the companion suggests the person pick up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suggestion {
    /// What, in a sentence.
    pub title: String,
    /// What to do: `open_note:{id}` or `review_loop:{id}`.
    pub action: String,
    /// How sure, 0 to 1.
    pub confidence: f64,
    /// The note or loop it comes from.
    pub source: String,
}

/// A library and its index.
pub struct Library {
    root: PathBuf,
    db: Mutex<Connection>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// A note as it is on disk.
struct OnDisk {
    rel: String,
    size: u64,
    mtime_ms: i64,
    created_ms: i64,
}

impl Library {
    /// The library at `root`, indexed once.
    pub fn open(root: &Path) -> Result<Self, LibraryError> {
        let root = root.canonicalize().map_err(|source| LibraryError::Io {
            path: root.display().to_string(),
            source,
        })?;
        let db = Connection::open_in_memory()?;
        db.execute_batch(
            "CREATE TABLE notes (n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, rel TEXT NOT NULL UNIQUE, title TEXT NOT NULL,
                                 size INTEGER NOT NULL, mtime_ms INTEGER NOT NULL, created_ms INTEGER NOT NULL,
                                 open INTEGER NOT NULL);
             CREATE VIRTUAL TABLE notes_fts USING fts5(id UNINDEXED, title, body, tokenize = 'porter unicode61');
             CREATE TABLE loops (id TEXT PRIMARY KEY, note_id TEXT NOT NULL, title TEXT NOT NULL);
             CREATE INDEX loops_by_note ON loops (note_id);",
        )?;
        let library = Self {
            root,
            db: Mutex::new(db),
        };
        library.rescan()?;
        Ok(library)
    }

    /// The library's folder, resolved.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many notes are indexed.
    pub fn notes(&self) -> Result<usize, LibraryError> {
        let db = self.db.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n: i64 = db.query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Brings the index up to date with the folder.
    pub fn rescan(&self) -> Result<Rescan, LibraryError> {
        let mut found = Vec::new();
        walk(&self.root, &self.root, &mut found)?;
        let mut db = self.db.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let known: HashMap<String, (i64, i64)> = {
            let mut statement = db.prepare_cached("SELECT rel, size, mtime_ms FROM notes")?;
            let rows = statement.query_map([], |r| Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?))))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut report = Rescan {
            notes: found.len(),
            ..Rescan::default()
        };
        let tx = db.transaction()?;
        let present: std::collections::HashSet<&str> = found.iter().map(|f| f.rel.as_str()).collect();
        for rel in known.keys().filter(|rel| !present.contains(rel.as_str())) {
            remove(&tx, &note_id(rel))?;
            report.removed += 1;
        }
        for file in &found {
            let size = i64::try_from(file.size).unwrap_or(i64::MAX);
            if known.get(&file.rel) == Some(&(size, file.mtime_ms)) {
                continue;
            }
            let path = self.root.join(&file.rel);
            let id = note_id(&file.rel);
            if known.contains_key(&file.rel) {
                remove(&tx, &id)?;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue; // not UTF-8, or gone since the walk: not a note (any more)
            };
            let title = title_of(&text, &file.rel);
            let open = front_matter_open(&text);
            tx.execute(
                "INSERT INTO notes (id, rel, title, size, mtime_ms, created_ms, open) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![id, file.rel, title, size, file.mtime_ms, file.created_ms, open],
            )?;
            // The text row shares the note's row id, so it is found (and removed) by it.
            tx.execute(
                "INSERT INTO notes_fts (rowid, id, title, body) VALUES (last_insert_rowid(), ?1, ?2, ?3)",
                params![id, title, text],
            )?;
            for item in unchecked_items(&text) {
                tx.execute(
                    "INSERT OR IGNORE INTO loops (id, note_id, title) VALUES (?1, ?2, ?3)",
                    params![short_hash("l_", &format!("{id}\n{item}")), id, item],
                )?;
            }
            report.indexed += 1;
        }
        tx.commit()?;
        Ok(report)
    }

    /// The notes that bear on `query`, and passages of them around its words.
    pub fn context(&self, query: &str) -> Result<Context, LibraryError> {
        let words = query_words(query);
        let mut context = Context {
            query: query.to_owned(),
            relevant_k_ids: Vec::new(),
            relevant_d_ids: Vec::new(),
            summary: String::new(),
            confidence: 0.0,
        };
        if words.is_empty() {
            return Ok(context);
        }
        let matcher = words
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" OR ");
        let db = self.db.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut statement = db.prepare_cached(
            "SELECT id, title, snippet(notes_fts, 2, '', '', '…', 10), body FROM notes_fts
             WHERE notes_fts MATCH ?1 ORDER BY bm25(notes_fts) LIMIT ?2",
        )?;
        let limit = i64::try_from(MAX_MATCHES).unwrap_or(5);
        let rows = statement.query_map(params![matcher, limit], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        let mut passages = Vec::new();
        for (i, row) in rows.enumerate() {
            let (id, title, snippet, body) = row?;
            if i == 0 {
                let lower = body.to_lowercase();
                let covered = words.iter().filter(|w| lower.contains(w.as_str())).count();
                #[allow(clippy::cast_precision_loss)]
                let coverage = covered as f64 / words.len() as f64;
                context.confidence = 0.7f64.mul_add(coverage, 0.3).min(1.0);
            }
            passages.push(format!("{title}: {}", partial(&snippet, &body)));
            if id.starts_with("k_") {
                context.relevant_k_ids.push(id);
            } else {
                context.relevant_d_ids.push(id);
            }
        }
        context.summary = bounded(&passages.join(" · "), MAX_SUMMARY_CHARS);
        Ok(context)
    }

    /// Every open loop, newest note first.
    pub fn open_loops(&self) -> Result<Vec<OpenLoop>, LibraryError> {
        let db = self.db.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut statement = db.prepare_cached(
            "SELECT l.id, l.title, n.created_ms, n.mtime_ms FROM loops l JOIN notes n ON n.id = l.note_id
             UNION ALL
             SELECT 'l_' || substr(id, 3), title, created_ms, mtime_ms FROM notes WHERE open = 1
             ORDER BY 4 DESC, 2",
        )?;
        let rows = statement.query_map([], |r| {
            Ok(OpenLoop {
                id: r.get(0)?,
                title: r.get(1)?,
                created_at: rfc3339(r.get(2)?),
                last_mentioned: rfc3339(r.get(3)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// What to pick up: notes changed in the last three days, then open loops.
    pub fn suggestions(&self, now_ms: i64) -> Result<Vec<Suggestion>, LibraryError> {
        const RECENT_MS: i64 = 3 * 24 * 3600 * 1000;
        let mut out = Vec::new();
        {
            let db = self.db.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut statement =
                db.prepare_cached("SELECT id, title FROM notes WHERE mtime_ms >= ?1 ORDER BY mtime_ms DESC LIMIT 5")?;
            let rows = statement.query_map(params![now_ms - RECENT_MS], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })?;
            for row in rows {
                let (id, title) = row?;
                out.push(Suggestion {
                    title: format!("Pick up where you left off: {title}"),
                    action: format!("open_note:{id}"),
                    confidence: 0.6,
                    source: id,
                });
            }
        }
        for open in self.open_loops()?.into_iter().take(5) {
            out.push(Suggestion {
                title: format!("Close the loop: {}", open.title),
                action: format!("review_loop:{}", open.id),
                confidence: 0.5,
                source: open.id,
            });
        }
        Ok(out)
    }
}

/// Removes a note from the index.
fn remove(tx: &rusqlite::Transaction<'_>, id: &str) -> Result<(), rusqlite::Error> {
    tx.execute(
        "DELETE FROM notes_fts WHERE rowid = (SELECT n FROM notes WHERE id = ?1)",
        params![id],
    )?;
    tx.execute("DELETE FROM notes WHERE id = ?1", params![id])?;
    tx.execute("DELETE FROM loops WHERE note_id = ?1", params![id])?;
    Ok(())
}

/// Every note under `dir`: not hidden, not a link, a note's extension, not too large. Only the
/// library's own folder must be readable: a folder or file inside that cannot be read (no
/// permission, gone since it was listed) is logged and left out.
fn walk(root: &Path, dir: &Path, out: &mut Vec<OnDisk>) -> Result<(), LibraryError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(source) if dir == root => {
            return Err(LibraryError::Io {
                path: dir.display().to_string(),
                source,
            });
        }
        Err(e) => {
            tracing::warn!(folder = %dir.display(), error = %e, "cannot read a folder of the library; leaving it out");
            return Ok(());
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else { continue };
        let path = entry.path();
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if kind.is_file() && is_note(name) {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.len() > MAX_NOTE_BYTES {
                continue;
            }
            let Ok(rel) = path.strip_prefix(root) else { continue };
            let Some(rel) = rel.to_str() else { continue };
            let mtime_ms = ms(meta.modified().ok());
            out.push(OnDisk {
                rel: rel.to_owned(),
                size: meta.len(),
                mtime_ms,
                created_ms: meta.created().ok().map_or(mtime_ms, |t| ms(Some(t))),
            });
        }
    }
    Ok(())
}

fn is_note(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".md", ".markdown", ".txt"].iter().any(|ext| lower.ends_with(ext))
}

fn ms(time: Option<SystemTime>) -> i64 {
    time.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A note's id: `k_` for markdown, `d_` for other documents, then a hash of its path.
pub(crate) fn note_id(rel: &str) -> String {
    let lower = rel.to_ascii_lowercase();
    let prefix = if lower.ends_with(".txt") { "d_" } else { "k_" };
    short_hash(prefix, rel)
}

fn short_hash(prefix: &str, text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

/// `ms` since the Unix epoch as RFC 3339.
pub fn rfc3339(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library(files: &[(&str, &str)]) -> (tempfile::TempDir, Library) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let library = Library::open(dir.path()).unwrap();
        (dir, library)
    }

    #[test]
    fn a_query_names_matching_notes_and_quotes_passages_never_a_whole_note() {
        let long = format!(
            "# Garden\n\n{} The tomatoes need water every morning in July. {}",
            "Soil and compost notes. ".repeat(30),
            "More about mulch and beds. ".repeat(30)
        );
        let (_dir, lib) = library(&[
            ("garden.md", &long),
            ("short.md", "Tomatoes: water them."),
            ("receipts/2026.txt", "Paid for tomato seeds and a watering can."),
            ("unrelated.md", "# Taxes\n\nFile by April."),
        ]);
        let context = lib.context("When do the tomatoes need water?").unwrap();
        assert_eq!(context.relevant_k_ids.len(), 2, "{context:?}");
        assert_eq!(context.relevant_d_ids.len(), 1, "{context:?}");
        assert!(context.relevant_k_ids.iter().all(|id| id.starts_with("k_")));
        assert!(context.summary.contains("tomatoes need water"), "{}", context.summary);
        assert!(context.summary.chars().count() <= MAX_SUMMARY_CHARS);
        for whole in [
            long.as_str(),
            "Tomatoes: water them.",
            "Paid for tomato seeds and a watering can.",
        ] {
            assert!(
                !context.summary.contains(whole),
                "a whole note leaked: {}",
                context.summary
            );
        }
        assert!(context.confidence > 0.5 && context.confidence <= 1.0);
        let none = lib.context("zebra").unwrap();
        assert!(none.relevant_k_ids.is_empty() && none.summary.is_empty() && none.confidence == 0.0);
        // Words only: FTS5's syntax in a query is text, not an operator.
        assert!(lib.context("\"NEAR(tomatoes* OR\" -- )").is_ok());
    }

    #[test]
    fn the_index_follows_the_folder() {
        let (dir, lib) = library(&[("a.md", "# Alpha\nkiwi"), (".hidden/b.md", "kiwi"), ("c.bin", "kiwi")]);
        assert_eq!(lib.context("kiwi").unwrap().relevant_k_ids.len(), 1);
        std::fs::write(dir.path().join("d.md"), "kiwi again").unwrap();
        std::fs::write(dir.path().join("a.md"), "# Alpha\nmango").unwrap();
        let report = lib.rescan().unwrap();
        assert_eq!((report.notes, report.indexed, report.removed), (2, 2, 0));
        assert_eq!(lib.context("kiwi").unwrap().relevant_k_ids.len(), 1);
        assert_eq!(lib.context("mango").unwrap().relevant_k_ids.len(), 1);
        std::fs::remove_file(dir.path().join("d.md")).unwrap();
        assert_eq!(lib.rescan().unwrap().removed, 1);
        assert!(lib.context("kiwi").unwrap().relevant_k_ids.is_empty());
        assert_eq!(lib.rescan().unwrap().indexed, 0, "nothing changed, nothing indexed");
    }

    #[test]
    fn an_unreadable_folder_is_left_out_and_an_unreadable_note_leaves_the_index() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, lib) = library(&[("a.md", "kiwi"), ("locked/b.md", "kiwi")]);
        assert_eq!(lib.context("kiwi").unwrap().relevant_k_ids.len(), 2);
        std::fs::set_permissions(dir.path().join("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();
        // Root reads every folder whatever its mode: then there is nothing to leave out.
        let unreadable = std::fs::read_dir(dir.path().join("locked")).is_err();
        let report = lib.rescan();
        std::fs::set_permissions(dir.path().join("locked"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let report = report.unwrap();
        if unreadable {
            assert_eq!((report.notes, report.removed), (1, 1));
        }
        // A note that stops being text is no longer answered from.
        std::fs::write(dir.path().join("a.md"), [0xff, 0xfe, 0x00]).unwrap();
        lib.rescan().unwrap();
        assert!(!lib.context("kiwi").unwrap().relevant_k_ids.contains(&note_id("a.md")));
    }

    #[test]
    fn open_loops_are_unchecked_items_and_open_notes() {
        let (_dir, lib) = library(&[
            (
                "todo.md",
                "# Week\n- [ ] Call the plumber\n- [x] Pay rent\n  * [ ] Book flights",
            ),
            ("project.md", "---\nstatus: open\n---\n# Launch plan\n"),
            ("done.md", "---\nstatus: done\n---\n# Old plan\n"),
        ]);
        let mut titles: Vec<String> = lib.open_loops().unwrap().into_iter().map(|l| l.title).collect();
        titles.sort();
        assert_eq!(titles, ["Book flights", "Call the plumber", "Launch plan"]);
        let suggestions = lib.suggestions(ms(Some(SystemTime::now()))).unwrap();
        assert!(
            suggestions
                .iter()
                .any(|s| s.title == "Close the loop: Call the plumber")
        );
        assert!(suggestions.iter().any(|s| s.action.starts_with("open_note:k_")));
    }
}
