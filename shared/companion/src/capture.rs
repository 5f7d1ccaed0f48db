//! # Capturing a note into the library (`capture_ingest`)
//!
//! The fourth source design's companion takes in what the person wants kept: `POST /capture
//! {title?, text, source?}` writes a markdown note into the library and indexes it at once, so
//! the next `/context-for-query` finds it. The note is `<library>/<slug>.md`, with front matter
//! (`title`, `source`, `captured_at`) and the title as its heading.
//!
//! Nothing the client sends is used as a path: the file's name is a slug of the title (or of the
//! text's first words) made of `a-z`, `0-9` and `-` only, so it can name nothing outside the
//! library, no folder and no hidden file. A note is never overwritten: the file is created only
//! if its name is free (`O_EXCL`, which also refuses a link left at that name), and a taken name
//! becomes `<slug>-2.md`, `<slug>-3.md`, ….

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::{
    Library,
    library::{LibraryError, MAX_NOTE_BYTES, note_id, rfc3339},
};

/// The longest text captured, in bytes (a note's front matter and heading fit beside it under
/// [`MAX_NOTE_BYTES`], the largest note indexed).
pub const MAX_CAPTURE_TEXT_BYTES: usize = 256 * 1024;
/// The longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// The longest source (a chat's address, a URL), in characters.
pub const MAX_SOURCE_CHARS: usize = 2000;
/// The longest slug, in characters.
const MAX_SLUG_CHARS: usize = 60;
/// How many words of the text make a title when none is given.
const TITLE_WORDS: usize = 8;
/// How many numbered names are tried before giving up.
const MAX_SUFFIX: u32 = 1000;

const _: () = assert!((MAX_CAPTURE_TEXT_BYTES as u64) < MAX_NOTE_BYTES / 2);

/// What to capture.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    /// The note's title; the text's first words when absent.
    #[serde(default)]
    pub title: Option<String>,
    /// The note's text (markdown).
    pub text: String,
    /// Where it comes from (a chat's address, a URL), recorded in the front matter.
    #[serde(default)]
    pub source: Option<String>,
}

/// A captured note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Captured {
    /// Its id, as `/context-for-query` names it (`k_…`).
    pub id: String,
    /// Its file, relative to the library (`<slug>.md`).
    pub path: String,
    /// Its title.
    pub title: String,
    /// When it was captured (RFC 3339).
    pub captured_at: String,
}

/// Why a note was not captured.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The request cannot be captured as it is; the message says what to change.
    #[error("{0}")]
    Invalid(String),
    /// The note could not be written or indexed.
    #[error(transparent)]
    Library(#[from] LibraryError),
}

impl Capture {
    /// Checks the request: a text of 1 to [`MAX_CAPTURE_TEXT_BYTES`] bytes that is not blank, a
    /// title of at most [`MAX_TITLE_CHARS`] characters on one line, a source of at most
    /// [`MAX_SOURCE_CHARS`] on one line.
    pub fn check(&self) -> Result<(), CaptureError> {
        if self.text.trim().is_empty() {
            return Err(CaptureError::Invalid(
                "`text` is blank: give the note's text".to_owned(),
            ));
        }
        if self.text.len() > MAX_CAPTURE_TEXT_BYTES {
            return Err(CaptureError::Invalid(format!(
                "`text` is {} bytes; a captured note holds at most {MAX_CAPTURE_TEXT_BYTES}: save a shorter part",
                self.text.len()
            )));
        }
        one_line("title", self.title.as_deref(), MAX_TITLE_CHARS)?;
        one_line("source", self.source.as_deref(), MAX_SOURCE_CHARS)
    }

    /// The note's title: the one given, else the text's first words.
    fn title(&self) -> String {
        match self.title.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            Some(title) => title.to_owned(),
            None => {
                let words: Vec<&str> = self
                    .text
                    .split_whitespace()
                    .map(|w| w.trim_start_matches('#'))
                    .filter(|w| !w.is_empty())
                    .take(TITLE_WORDS)
                    .collect();
                let title: String = words.join(" ").chars().take(MAX_TITLE_CHARS).collect();
                if title.is_empty() {
                    "Captured note".to_owned()
                } else {
                    title
                }
            }
        }
    }
}

fn one_line(field: &str, value: Option<&str>, max: usize) -> Result<(), CaptureError> {
    let Some(value) = value else { return Ok(()) };
    if value.chars().count() > max {
        return Err(CaptureError::Invalid(format!(
            "`{field}` is longer than {max} characters"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(CaptureError::Invalid(format!(
            "`{field}` must be one line, without control characters"
        )));
    }
    Ok(())
}

/// A file name's stem from `title`: lower-case ASCII letters and digits, runs of anything else
/// one `-`, at most [`MAX_SLUG_CHARS`]; `note` when nothing is left.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= MAX_SLUG_CHARS {
            break;
        }
    }
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        "note".to_owned()
    } else {
        out.to_owned()
    }
}

/// The note's file: front matter, the title as a heading, the text.
fn render(title: &str, source: Option<&str>, captured_at: &str, text: &str) -> String {
    // JSON strings are YAML's double-quoted scalars: any title reads back as written.
    let quote = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    let mut note = format!("---\ntitle: {}\n", quote(title));
    if let Some(source) = source.map(str::trim).filter(|s| !s.is_empty()) {
        note.push_str(&format!("source: {}\n", quote(source)));
    }
    note.push_str(&format!(
        "captured_at: {captured_at}\n---\n\n# {title}\n\n{}\n",
        text.trim_end()
    ));
    note
}

impl Library {
    /// Writes `capture` as a new note of the library at `now_ms` and indexes it before
    /// answering. Never writes outside the library and never replaces a file.
    pub fn capture(&self, capture: &Capture, now_ms: i64) -> Result<Captured, CaptureError> {
        capture.check()?;
        let title = capture.title();
        let captured_at = rfc3339(now_ms);
        let body = render(&title, capture.source.as_deref(), &captured_at, &capture.text);
        let stem = slug(&title);
        let mut written = None;
        for n in 1..=MAX_SUFFIX {
            let name = if n == 1 {
                format!("{stem}.md")
            } else {
                format!("{stem}-{n}.md")
            };
            let path = self.root().join(&name);
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    let wrote = file.write_all(body.as_bytes()).and_then(|()| file.sync_all());
                    if let Err(source) = wrote {
                        // A half-written note is not left behind to be indexed.
                        let _ = std::fs::remove_file(&path);
                        return Err(LibraryError::Io {
                            path: path.display().to_string(),
                            source,
                        }
                        .into());
                    }
                    written = Some(name);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(LibraryError::Io {
                        path: path.display().to_string(),
                        source,
                    }
                    .into());
                }
            }
        }
        let Some(path) = written else {
            return Err(CaptureError::Invalid(format!(
                "{MAX_SUFFIX} notes are already named `{stem}`: give this one another title"
            )));
        };
        self.rescan()?;
        tracing::info!(note = %path, "captured a note");
        Ok(Captured {
            id: note_id(&path),
            path,
            title,
            captured_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(title: Option<&str>, text: &str) -> Capture {
        Capture {
            title: title.map(str::to_owned),
            text: text.to_owned(),
            source: None,
        }
    }

    #[test]
    fn a_slug_is_letters_digits_and_dashes_only() {
        assert_eq!(slug("Release plan: Q3 (draft)"), "release-plan-q3-draft");
        assert_eq!(slug("../../etc/x"), "etc-x");
        assert_eq!(slug("/etc/passwd"), "etc-passwd");
        assert_eq!(slug(".hidden"), "hidden");
        assert_eq!(slug("C:\\Windows\\win.ini"), "c-windows-win-ini");
        assert_eq!(slug("…"), "note");
        assert_eq!(slug(&"a".repeat(500)).len(), MAX_SLUG_CHARS);
    }

    #[test]
    fn a_captured_note_stays_in_the_library_is_never_overwritten_and_is_found_at_once() {
        let outside = tempfile::tempdir().unwrap();
        let root = outside.path().join("library");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc-x.md"), "# Mine\n\nkept as it is").unwrap();
        let library = Library::open(&root).unwrap();
        // GIVEN titles that name paths outside the library, and one that names a taken file
        let mut paths = Vec::new();
        for title in ["../../etc/x", "/etc/x", "etc/x", "..", ".env"] {
            let note = library.capture(&capture(Some(title), "walrus migration"), 0).unwrap();
            paths.push(note.path);
        }
        // THEN every note is a new file directly in the library; the taken one is untouched
        assert_eq!(paths, ["etc-x-2.md", "etc-x-3.md", "etc-x-4.md", "note.md", "env.md"]);
        assert_eq!(
            std::fs::read_to_string(root.join("etc-x.md")).unwrap(),
            "# Mine\n\nkept as it is"
        );
        let outside_files: Vec<_> = std::fs::read_dir(outside.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(outside_files, ["library"]);
        assert_eq!(std::fs::read_dir(root.join("etc")).unwrap().count(), 0);
        // AND a note is found by the next question at once
        let note = library
            .capture(
                &Capture {
                    title: None,
                    text: "The zebrafish assay moved to Thursday.".to_owned(),
                    source: Some("http://127.0.0.1:8080/#/chats/ses_1".to_owned()),
                },
                1_700_000_000_000,
            )
            .unwrap();
        assert_eq!(note.title, "The zebrafish assay moved to Thursday.");
        let context = library.context("zebrafish assay").unwrap();
        assert_eq!(context.relevant_k_ids.first(), Some(&note.id));
        let text = std::fs::read_to_string(root.join(&note.path)).unwrap();
        assert!(text.starts_with("---\ntitle: \"The zebrafish assay moved to Thursday.\"\nsource: \"http://127.0.0.1:8080/#/chats/ses_1\"\ncaptured_at: 2023-11-14T22:13:20"), "{text}");
    }

    #[test]
    fn a_link_at_the_name_is_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        let root = outside.path().join("library");
        std::fs::create_dir_all(&root).unwrap();
        let target = outside.path().join("secret.md");
        std::os::unix::fs::symlink(&target, root.join("plan.md")).unwrap();
        let library = Library::open(&root).unwrap();
        let note = library.capture(&capture(Some("Plan"), "text"), 0).unwrap();
        assert_eq!(note.path, "plan-2.md");
        assert!(!target.exists());
    }

    #[test]
    fn bad_captures_are_refused_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let library = Library::open(dir.path()).unwrap();
        let long_title = "t".repeat(MAX_TITLE_CHARS + 1);
        let big = "x".repeat(MAX_CAPTURE_TEXT_BYTES + 1);
        for (title, text) in [
            (None, "   "),
            (Some(long_title.as_str()), "text"),
            (Some("two\nlines"), "text"),
            (None, big.as_str()),
        ] {
            let refused = library.capture(&capture(title, text), 0);
            assert!(matches!(refused, Err(CaptureError::Invalid(_))), "{refused:?}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
