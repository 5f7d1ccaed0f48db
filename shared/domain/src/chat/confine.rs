//! # Where agents may run: working directories confined to configured roots
//!
//! A CLI agent runs with its permission prompts off (`--yolo`, codex's workspace-write
//! sandbox), so the folder it runs in is the whole of what it may touch. A workspace's working directory is therefore
//! confined to the roots an operator configures (`SPOOL_WORKSPACE_ROOTS`); with none
//! configured, which is the default, only the per-chat folders Spool makes itself are used.
//! Paths are resolved (symlinks, `..`) before they are compared, so a link inside a root that
//! points out of it is refused; and the data directory (every organization's chats and keys)
//! is never a working directory, nor inside one, whatever the roots say.
//!
//! The check runs twice: when a person or an agent sets the directory (a clear `400`), and
//! again each time a CLI is started there (the directory, or a link in it, may have changed).

use std::path::{Component, Path, PathBuf};

use crate::Error;

/// The folders under which workspaces' working directories may be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkspaceRoots {
    roots: Vec<PathBuf>,
    forbidden: Vec<PathBuf>,
}

const WHAT: &str = "working directory";

impl WorkspaceRoots {
    /// Roots (resolved now; a root that does not exist is skipped with a warning, since it
    /// can confine nothing), with `forbidden` folders (Spool's data directory) kept out.
    pub fn new(roots: &[PathBuf], forbidden: &[PathBuf]) -> Self {
        let resolve = |p: &PathBuf| resolve(p).ok();
        Self {
            roots: roots
                .iter()
                .filter_map(|root| {
                    let resolved = resolve(root);
                    if resolved.is_none() {
                        tracing::warn!(root = %root.display(), "a workspace root that does not exist confines nothing; skipped");
                    }
                    resolved
                })
                .collect(),
            forbidden: forbidden
                .iter()
                .map(|p| resolve(p).unwrap_or_else(|| lexical(p)))
                .collect(),
        }
    }

    /// No roots: only per-chat folders.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether any working directory can be set at all.
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    /// The directory `dir` resolved, if it is an existing directory under a root and does not
    /// overlap a forbidden folder; otherwise an [`Error::Invalid`] that says why and what to do.
    pub fn check(&self, dir: &str) -> Result<PathBuf, Error> {
        if self.roots.is_empty() {
            return Err(Error::invalid(
                WHAT,
                "working directories are turned off here, so agents run in a folder of each chat's own; \
                 an operator can allow folders under roots listed in SPOOL_WORKSPACE_ROOTS",
            ));
        }
        let path = Path::new(dir);
        if !path.is_absolute() {
            return Err(Error::invalid(WHAT, format!("`{dir}` is not an absolute path")));
        }
        let outside = |resolved: &Path| {
            let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
            Error::invalid(
                WHAT,
                format!(
                    "`{dir}` (resolved: `{}`) is outside the workspace roots ({}); pick a folder under one of them",
                    resolved.display(),
                    roots.join(", ")
                ),
            )
        };
        let resolved = match resolve(path) {
            Ok(resolved) => resolved,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let lexical = lexical(path);
                if !self.roots.iter().any(|root| lexical.starts_with(root)) {
                    return Err(outside(&lexical));
                }
                return Err(Error::invalid(
                    WHAT,
                    format!("`{dir}` does not exist; create it first (under one of the workspace roots)"),
                ));
            }
            Err(e) => return Err(Error::invalid(WHAT, format!("`{dir}` cannot be read: {e}"))),
        };
        if !resolved.is_dir() {
            return Err(Error::invalid(WHAT, format!("`{dir}` is not a directory")));
        }
        if !self.roots.iter().any(|root| resolved.starts_with(root)) {
            return Err(outside(&resolved));
        }
        if self
            .forbidden
            .iter()
            .any(|f| resolved.starts_with(f) || f.starts_with(&resolved))
        {
            return Err(Error::invalid(
                WHAT,
                format!("`{dir}` overlaps Spool's own data directory, which agents may never reach"),
            ));
        }
        Ok(resolved)
    }
}

/// The path with symlinks and `..` resolved (it must exist).
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    std::fs::canonicalize(path)
}

/// `path` made absolute and normalized without touching the file system (for a forbidden
/// folder that does not exist yet).
fn lexical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Whether `segment` can be one component of a path Spool builds (an organization or a
/// chat id): not empty, not `.` or `..`, no separator or control character.
pub fn is_safe_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment.len() <= 128
        && !segment.chars().any(|c| c == '/' || c == '\\' || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid_reason(result: Result<PathBuf, Error>) -> String {
        match result {
            Err(Error::Invalid { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn without_roots_no_directory_is_accepted() {
        let roots = WorkspaceRoots::none();
        let reason = invalid_reason(roots.check("/tmp"));
        assert!(reason.contains("SPOOL_WORKSPACE_ROOTS"), "{reason}");
    }

    #[test]
    fn only_existing_directories_under_a_root_are_accepted() {
        // GIVEN a root with a project in it, and a data directory beside it
        let base = tempfile_dir();
        let root = base.join("projects");
        std::fs::create_dir_all(root.join("app")).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        let data = base.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let roots = WorkspaceRoots::new(std::slice::from_ref(&root), std::slice::from_ref(&data));
        // THEN a folder under the root is accepted, resolved
        let app = root.join("app");
        assert_eq!(roots.check(app.to_str().unwrap()).unwrap(), app.canonicalize().unwrap());
        // AND everything else is refused, saying why
        assert!(invalid_reason(roots.check("/")).contains("outside the workspace roots"));
        assert!(invalid_reason(roots.check("relative/dir")).contains("not an absolute path"));
        let missing = root.join("missing");
        assert!(invalid_reason(roots.check(missing.to_str().unwrap())).contains("does not exist"));
        let file = root.join("file");
        assert!(invalid_reason(roots.check(file.to_str().unwrap())).contains("not a directory"));
        let escape = format!("{}/app/../../data", root.display());
        assert!(invalid_reason(roots.check(&escape)).contains("outside"));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn links_are_resolved_before_the_check() {
        // GIVEN a link inside the root that points out of it
        let base = tempfile_dir();
        let root = base.join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink("/", root.join("escape")).unwrap();
        let roots = WorkspaceRoots::new(std::slice::from_ref(&root), &[]);
        // THEN it is refused as the folder it resolves to
        let link = root.join("escape");
        let reason = invalid_reason(roots.check(link.to_str().unwrap()));
        assert!(reason.contains("resolved: `/`"), "{reason}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_data_directory_is_never_a_working_directory() {
        // GIVEN an operator who made the data directory's parent a root
        let base = tempfile_dir();
        let data = base.join("spool-data");
        std::fs::create_dir_all(data.join("cli")).unwrap();
        let roots = WorkspaceRoots::new(std::slice::from_ref(&base), std::slice::from_ref(&data));
        // THEN neither the data directory, nor a folder in it, nor the folder holding it is one
        for dir in [&data, &data.join("cli"), &base] {
            let reason = invalid_reason(roots.check(dir.to_str().unwrap()));
            assert!(reason.contains("data directory"), "{reason}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn path_segments_are_checked() {
        for bad in ["", ".", "..", "a/b", "a\\b", "a\nb"] {
            assert!(!is_safe_segment(bad), "{bad:?}");
        }
        assert!(is_safe_segment("ses_0193") && is_safe_segment("global"));
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("spool-confine-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
