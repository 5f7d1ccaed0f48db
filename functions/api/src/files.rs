//! # File search for `@` mentions
//!
//! `GET /v1/workspaces/{id}/files?q=&session_id=` finds files by name for `@` mentions, where
//! the chat's agents find them: the chat's own files (its attachments, with `session_id`:
//! the newest completed file of each name, as agents get them) and the workspace's working
//! directory, when it has one. Fuzzy and ranked (helix's matcher, in its path mode), at most
//! `limit` answers, best first. The working directory is walked as ripgrep's walker does,
//! skipping what `.gitignore` (and `.ignore`, and hidden files) leave out; it stays in the
//! directory: the directory is confined like a CLI's ([`spool_chat::confine`]), links are not
//! followed, and the walk is bounded. A workspace without a working directory (on AWS, say)
//! answers the chat's files alone, or nothing; one whose directory this server cannot read gets
//! a `409` that says what to do, never a silently partial list.

use std::{path::Path, sync::Arc};

use axum::{Json, extract::State};
use nucleo_matcher::{
    Config, Matcher, Utf32Str,
    pattern::{CaseMatching, Normalization, Pattern},
};
use serde::{Deserialize, Serialize};
use spool_chat::attachment::Attachment;
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ChatApi,
    extract::{Caller, Id, PathOf, QueryOf},
};

/// At most this many files are looked at in one search.
const MAX_VISITED: usize = 50_000;
/// The longest query.
const MAX_QUERY_CHARS: usize = 200;
/// The most answers one search gives.
const MAX_LIMIT: usize = 50;

/// A search.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileQuery {
    /// What to look for in file paths (fuzzy: `srclib` finds `src/lib.rs`); required.
    #[serde(default)]
    q: Option<String>,
    /// How many answers (1–50, 20 by default).
    #[serde(default)]
    limit: Option<usize>,
    /// A chat of the workspace whose files (attachments) are searched too.
    #[serde(default)]
    session_id: Option<String>,
}

/// Where a file that matches is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FileSource {
    /// In the workspace's working directory, where CLI agents run.
    WorkingDirectory,
    /// A file uploaded to the chat: a message names it by id in its `files`.
    Attachment,
}

/// A chat's file that matches.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttachedFile {
    /// Its id (`att_…`), for a message's `files`.
    id: String,
    /// Its name.
    filename: String,
    /// Its media type.
    content_type: String,
    /// Its size in bytes.
    size: u64,
}

/// A file that matches.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FileMatch {
    /// Its path relative to the working directory; for a chat's file, its name.
    path: String,
    /// How well it matches: higher is better.
    score: u32,
    /// Where it is.
    source: FileSource,
    /// The chat's file, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    attachment: Option<AttachedFile>,
}

/// The files that match, best first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FileMatches {
    files: Vec<FileMatch>,
    /// The directory held more files than one search looks at: some were not considered.
    truncated: bool,
    /// Whether a working directory was searched (`false`: the workspace has none).
    working_directory: bool,
}

/// `GET /v1/workspaces/{id}/files?q=&limit=&session_id=`.
#[utoipa::path(get, path = "/v1/workspaces/{id}/files", tag = "workspaces", params(("id" = String, Path, description = "The workspace"), FileQuery),
    responses((status = 200, description = "Matching files, best first: the chat's files and the working directory's", body = FileMatches),
        (status = 400, description = "A missing or overlong query, or a bad limit", body = ErrorBody),
        (status = 404, description = "No such workspace in the caller's organization, or no such chat in it", body = ErrorBody),
        (status = 409, description = "The workspace has a working directory this server cannot read (`no_working_directory`)", body = ErrorBody), Refusals))]
pub(crate) async fn search_files(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    QueryOf(query): QueryOf<FileQuery>,
) -> Result<Json<FileMatches>, ApiError> {
    // The workspace first: another organization's gets 404 whatever it asks.
    let ws = api.workspace_of(&caller, &id).await?;
    let q = query.q.unwrap_or_default().trim().to_owned();
    if q.is_empty() || q.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::BadRequest(format!(
            "`q` is what to look for: 1 to {MAX_QUERY_CHARS} characters"
        )));
    }
    let limit = query.limit.unwrap_or(20);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!("`limit` is 1 to {MAX_LIMIT}")));
    }
    let attachments = match query.session_id.as_deref() {
        Some(session_id) => {
            let session = api.session_of(&caller, session_id).await?;
            if session.workspace_id.as_deref() != Some(ws.id.as_str()) {
                return Err(ApiError::Domain(spool_log::error::Error::Missing {
                    what: format!("chat `{session_id}` in workspace `{}`", ws.id),
                }));
            }
            let records = api.chats.attachments(caller.org(), &session.id).await?;
            spool_chat::service::current_files(records)
        }
        None => Vec::new(),
    };
    let root = match ws.working_dir.as_deref() {
        Some(dir) => Some(api.workspace_roots.confine(caller.org(), dir).await.map_err(|e| {
            ApiError::NoWorkingDirectory(format!(
                "this server cannot search the workspace's working directory: {e}; change it in the workspace's settings, or clear it to search the chat's files alone"
            ))
        })?),
        None => None,
    };
    let found = tokio::task::spawn_blocking(move || search(root.as_deref(), &attachments, &q, limit))
        .await
        .map_err(|e| ApiError::Domain(spool_log::error::Error::unavailable("search files", e)))?;
    Ok(Json(found))
}

/// The chat's `attachments` (by name) and the files under `root` (by relative path) that match
/// `query`, best first.
fn search(root: Option<&Path>, attachments: &[Attachment], query: &str, limit: usize) -> FileMatches {
    let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
    let mut config = Config::DEFAULT;
    config.set_match_paths();
    let mut matcher = Matcher::new(config);
    let mut buf = Vec::new();
    let mut scored: Vec<FileMatch> = Vec::new();
    for a in attachments {
        if let Some(score) = pattern.score(Utf32Str::new(&a.filename, &mut buf), &mut matcher) {
            scored.push(FileMatch {
                path: a.filename.clone(),
                score,
                source: FileSource::Attachment,
                attachment: Some(AttachedFile {
                    id: a.id.clone(),
                    filename: a.filename.clone(),
                    content_type: a.content_type.clone(),
                    size: a.size,
                }),
            });
        }
    }
    let mut visited = 0;
    if let Some(root) = root {
        let walk = ignore::WalkBuilder::new(root)
            .follow_links(false)
            .require_git(false)
            .max_depth(Some(32))
            .build();
        for entry in walk.flatten() {
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            visited += 1;
            if visited > MAX_VISITED {
                break;
            }
            let Ok(relative) = entry.path().strip_prefix(root) else {
                continue;
            };
            let Some(path) = relative.to_str() else { continue };
            if let Some(score) = pattern.score(Utf32Str::new(path, &mut buf), &mut matcher) {
                scored.push(FileMatch {
                    path: path.to_owned(),
                    score,
                    source: FileSource::WorkingDirectory,
                    attachment: None,
                });
            }
        }
    }
    // Best first; among equals the chat's own files, then shorter (nearer the top) paths, then
    // by name.
    scored.sort_by(|a, b| {
        b.score
            .cmp(&a.score)
            .then((a.source != FileSource::Attachment).cmp(&(b.source != FileSource::Attachment)))
            .then(a.path.len().cmp(&b.path.len()))
            .then(a.path.cmp(&b.path))
    });
    scored.truncate(limit);
    FileMatches {
        files: scored,
        truncated: visited > MAX_VISITED,
        working_directory: root.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(root: &Path, paths: &[&str]) {
        for p in paths {
            let path = root.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
    }

    #[test]
    fn matches_are_ranked_and_ignored_files_left_out() {
        let dir = tempfile::tempdir().unwrap();
        files(
            dir.path(),
            &[
                "src/lib.rs",
                "src/library/mod.rs",
                "docs/slides.md",
                "target/debug/lib.rs",
                ".env",
                "notes/lib.txt",
            ],
        );
        std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
        let found = search(Some(dir.path()), &[], "srclib", 10);
        let paths: Vec<&str> = found.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths.first(), Some(&"src/lib.rs"), "{paths:?}");
        assert!(paths.contains(&"src/library/mod.rs"), "{paths:?}");
        assert!(!paths.iter().any(|p| p.starts_with("target/")), "gitignored: {paths:?}");
        let all = search(Some(dir.path()), &[], "lib", 10);
        assert!(
            !all.files
                .iter()
                .any(|f| f.path.starts_with("target/") || f.path == ".env")
        );
        assert_eq!(search(Some(dir.path()), &[], "lib", 1).files.len(), 1, "bounded");
        assert!(search(Some(dir.path()), &[], "zzzz", 10).files.is_empty());
    }

    #[test]
    fn the_chats_files_are_found_by_name_with_or_without_a_directory() {
        let attachment = |id: &str, filename: &str| Attachment {
            id: id.to_owned(),
            session_id: "ses_1".to_owned(),
            filename: filename.to_owned(),
            content_type: "text/plain".to_owned(),
            size: 7,
            sha256: None,
            status: spool_chat::attachment::AttachmentStatus::Complete,
            author: "u".to_owned(),
            created_ms: 1,
            completed_ms: Some(2),
            upload_expires_ms: 3,
        };
        let chat = [attachment("att_1", "report.pdf"), attachment("att_2", "notes.txt")];
        let found = search(None, &chat, "report", 10);
        assert_eq!(found.files.len(), 1, "{:?}", found.files);
        let f = &found.files[0];
        assert_eq!((f.path.as_str(), f.source), ("report.pdf", FileSource::Attachment));
        assert_eq!(
            f.attachment.as_ref().map(|a| (a.id.as_str(), a.size)),
            Some(("att_1", 7))
        );
        assert!(!found.working_directory);
        assert!(
            search(None, &[], "report", 10).files.is_empty(),
            "nothing, not an error"
        );
        let dir = tempfile::tempdir().unwrap();
        files(dir.path(), &["docs/report.md"]);
        let both = search(Some(dir.path()), &chat, "report", 10);
        let sources: Vec<FileSource> = both.files.iter().map(|f| f.source).collect();
        assert!(sources.contains(&FileSource::Attachment) && sources.contains(&FileSource::WorkingDirectory));
        assert!(both.working_directory);
    }

    #[test]
    fn links_out_of_the_directory_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        files(outside.path(), &["secret/passwords.txt"]);
        files(dir.path(), &["README.md"]);
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret/passwords.txt"), dir.path().join("pw.txt")).unwrap();
        let found = search(Some(dir.path()), &[], "passwords", 10);
        assert!(found.files.is_empty(), "{:?}", found.files);
    }
}
