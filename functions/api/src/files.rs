//! # File search in a workspace
//!
//! `GET /v1/workspaces/{id}/files?q=` finds files by name in the workspace's working directory,
//! for `@` mentions: fuzzy and ranked (helix's matcher, in its path mode), at most `limit`
//! answers, skipping what `.gitignore` (and `.ignore`, and hidden files) leave out, as
//! ripgrep's walker does. It stays in the directory: the directory is confined like a CLI's
//! ([`spool_domain::confine`]), links are not followed, and the walk is bounded. A workspace
//! without a directory this process can read gets a `409` that says so, never an empty list.

use std::{path::Path, sync::Arc};

use axum::{Json, extract::State};
use nucleo_matcher::{
    Config, Matcher, Utf32Str,
    pattern::{CaseMatching, Normalization, Pattern},
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ApiError, ChatApi, ErrorBody,
    error::Refusals,
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
}

/// A file that matches.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FileMatch {
    /// Its path relative to the working directory (where CLI agents run).
    path: String,
    /// How well it matches: higher is better.
    score: u32,
}

/// The files that match, best first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FileMatches {
    files: Vec<FileMatch>,
    /// The directory held more files than one search looks at: some were not considered.
    truncated: bool,
}

/// `GET /v1/workspaces/{id}/files?q=&limit=`.
#[utoipa::path(get, path = "/v1/workspaces/{id}/files", tag = "workspaces", params(("id" = String, Path, description = "The workspace"), FileQuery),
    responses((status = 200, description = "Matching files, best first", body = FileMatches),
        (status = 400, description = "A missing or overlong query, or a bad limit", body = ErrorBody),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody),
        (status = 409, description = "The workspace has no working directory this server can read (`no_working_directory`)", body = ErrorBody), Refusals))]
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
    let Some(dir) = ws.working_dir.as_deref() else {
        return Err(ApiError::NoWorkingDirectory(
            "this workspace has no working directory to search; set one in its settings".to_owned(),
        ));
    };
    let root = api.workspace_roots.confine(caller.org(), dir).await.map_err(|e| {
        ApiError::NoWorkingDirectory(format!(
            "this server cannot search the workspace's working directory: {e}"
        ))
    })?;
    let found = tokio::task::spawn_blocking(move || search(&root, &q, limit))
        .await
        .map_err(|e| ApiError::Store(spool_domain::Error::unavailable("search files", e)))?;
    Ok(Json(found))
}

/// The files under `root` whose relative paths match `query`, best first.
fn search(root: &Path, query: &str, limit: usize) -> FileMatches {
    let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
    let mut config = Config::DEFAULT;
    config.set_match_paths();
    let mut matcher = Matcher::new(config);
    let mut buf = Vec::new();
    let mut scored: Vec<(u32, String)> = Vec::new();
    let mut visited = 0;
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
            scored.push((score, path.to_owned()));
        }
    }
    // Best first; among equals, shorter (nearer the top) paths, then by name.
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.len().cmp(&b.1.len())).then(a.1.cmp(&b.1)));
    FileMatches {
        files: scored
            .into_iter()
            .take(limit)
            .map(|(score, path)| FileMatch { path, score })
            .collect(),
        truncated: visited > MAX_VISITED,
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
        let found = search(dir.path(), "srclib", 10);
        let paths: Vec<&str> = found.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths.first(), Some(&"src/lib.rs"), "{paths:?}");
        assert!(paths.contains(&"src/library/mod.rs"), "{paths:?}");
        assert!(!paths.iter().any(|p| p.starts_with("target/")), "gitignored: {paths:?}");
        let all = search(dir.path(), "lib", 10);
        assert!(
            !all.files
                .iter()
                .any(|f| f.path.starts_with("target/") || f.path == ".env")
        );
        assert_eq!(search(dir.path(), "lib", 1).files.len(), 1, "bounded");
        assert!(search(dir.path(), "zzzz", 10).files.is_empty());
    }

    #[test]
    fn links_out_of_the_directory_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        files(outside.path(), &["secret/passwords.txt"]);
        files(dir.path(), &["README.md"]);
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret/passwords.txt"), dir.path().join("pw.txt")).unwrap();
        let found = search(dir.path(), "passwords", 10);
        assert!(found.files.is_empty(), "{:?}", found.files);
    }
}
