//! # Where agents may run: working directories confined to each organization's roots
//!
//! A CLI agent runs with its permission prompts off (`--yolo`, codex's workspace-write
//! sandbox), so the folder it runs in is the whole of what it may touch; file search and
//! folder-based slash commands read the same folder. A workspace's working directory is
//! therefore confined to the roots an operator configures (`SPOOL_WORKSPACE_ROOTS`); with none
//! configured, which is the default, only the per-chat folders Spool makes itself are used.
//!
//! A folder belongs to one organization. A root is either
//! - **one organization's own**: a root with `{org}` as one of its components
//!   (`/srv/repos/{org}`) is, for each organization, that organization's folder; or
//! - **shared**, a plain folder: the first organization that uses a folder under it claims the
//!   whole root ([`Directory::claim_root`], one atomic write), and no other organization may
//!   use anything under it afterwards. A server with one organization notices no difference.
//!
//! Roots never nest ([`check_roots`], at start-up), so every folder lies under at most one.
//! Paths are resolved (symlinks, `..`) before they are compared, so a link inside a root that
//! points out of it is refused; and Spool's own folders (the data directory with every
//! organization's chats, keys and attachments, the CLI work directory, the web UI) are never a
//! working directory, nor inside one, whatever the roots say.
//!
//! A refusal says no more than the caller sent: every path outside what the organization may
//! use gets the same answer, decided on the path as written before the file system is touched
//! (so `/etc/passwd` and `/etc/passwd-nope` read alike), and never echoes a resolved path or
//! the configured roots. Only inside the organization's own roots does it say "does not exist"
//! or "is not a directory". The operator's log line says which rule refused.
//!
//! The check runs when a person or an agent sets the directory (a clear `400`), and again each
//! time the folder is used (a CLI starts there, files are searched, command files are read):
//! the directory, a link in it, or the claim may have changed.

use std::{
    path::{Component, Path, PathBuf},
    sync::Arc,
};

use crate::directory::Directory;
use spool_log::error::Error;

/// The component of a root that stands for the organization's id.
pub const ORG_PLACEHOLDER: &str = "{org}";

const WHAT: &str = "working directory";

/// One configured root.
#[derive(Debug, Clone)]
enum Root {
    /// A plain folder, claimed by the first organization that uses it: as configured, and
    /// resolved at start-up.
    Shared { configured: PathBuf, resolved: PathBuf },
    /// `{before}/{org}/{after}`, each organization's own.
    PerOrg { before: PathBuf, after: PathBuf },
}

impl Root {
    fn parse(root: &Path) -> Self {
        let mut before = PathBuf::new();
        let mut after = PathBuf::new();
        let mut seen = false;
        for component in lexical(root).components() {
            if component.as_os_str() == ORG_PLACEHOLDER {
                seen = true;
            } else if seen {
                after.push(component);
            } else {
                before.push(component);
            }
        }
        if seen {
            Self::PerOrg { before, after }
        } else {
            let configured = lexical(root);
            let resolved = resolve(&configured).unwrap_or_else(|_| configured.clone());
            Self::Shared { configured, resolved }
        }
    }

    /// This root for `org`, as configured (not resolved).
    fn for_org(&self, org: &str) -> PathBuf {
        match self {
            Self::Shared { configured, .. } => configured.clone(),
            // (`after` may be empty: joined, it would leave a trailing `/`.)
            Self::PerOrg { before, after } => before.join(org).components().chain(after.components()).collect(),
        }
    }
}

/// The folders under which workspaces' working directories may be, and who owns them.
#[derive(Clone, Default)]
pub struct WorkspaceRoots {
    roots: Vec<Root>,
    forbidden: Vec<PathBuf>,
    claims: Option<Arc<dyn Directory>>,
    /// Only one organization ever asks (a runner's, its key's): shared roots need no claims.
    one_org: bool,
}

impl std::fmt::Debug for WorkspaceRoots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkspaceRoots")
            .field("roots", &self.roots)
            .field("forbidden", &self.forbidden)
            .finish_non_exhaustive()
    }
}

/// Checks configured roots: absolute, `{org}` at most once and as a whole component, and no
/// root inside another (a `{org}` root counts as the folder before `{org}`), so that every
/// folder lies under one root at most and one organization's root is never inside another's.
pub fn check_roots(roots: &[PathBuf]) -> Result<(), String> {
    let mut zones: Vec<(PathBuf, &PathBuf)> = Vec::new();
    for root in roots {
        let text = root.to_string_lossy();
        if !root.is_absolute() {
            return Err(format!("`{text}` is not an absolute path"));
        }
        let whole = root.components().filter(|c| c.as_os_str() == ORG_PLACEHOLDER).count();
        if text.matches(ORG_PLACEHOLDER).count() != whole || whole > 1 {
            return Err(format!(
                "`{text}`: `{ORG_PLACEHOLDER}` may stand once, as a whole folder name (`/srv/repos/{ORG_PLACEHOLDER}`)"
            ));
        }
        let zone = match Root::parse(root) {
            Root::Shared { configured, .. } => configured,
            Root::PerOrg { before, .. } => before,
        };
        if let Some((_, other)) = zones.iter().find(|(z, _)| z.starts_with(&zone) || zone.starts_with(z)) {
            return Err(format!(
                "`{text}` and `{}` overlap; give roots that are not inside one another",
                other.to_string_lossy()
            ));
        }
        zones.push((zone, root));
    }
    Ok(())
}

impl WorkspaceRoots {
    /// Roots (as [`check_roots`] accepts them), with `forbidden` folders (Spool's own) kept
    /// out, and `claims` recording which organization owns each shared root.
    pub fn new(roots: &[PathBuf], forbidden: &[PathBuf], claims: Arc<dyn Directory>) -> Self {
        Self {
            roots: roots
                .iter()
                .map(|root| {
                    let parsed = Root::parse(root);
                    if let Root::Shared { resolved, .. } = &parsed
                        && !resolved.is_dir()
                    {
                        tracing::warn!(root = %root.display(), "a workspace root that does not exist confines nothing until it is made");
                    }
                    parsed
                })
                .collect(),
            forbidden: forbidden
                .iter()
                .map(|p| resolve(p).unwrap_or_else(|_| lexical(p)))
                .collect(),
            claims: Some(claims),
            one_org: false,
        }
    }

    /// Roots for a process that serves one organization only (a runner, whose key is of one):
    /// a shared root needs no claim, since no other organization ever uses it here.
    pub fn for_one_org(roots: &[PathBuf], forbidden: &[PathBuf]) -> Self {
        Self {
            roots: roots.iter().map(|root| Root::parse(root)).collect(),
            forbidden: forbidden
                .iter()
                .map(|p| resolve(p).unwrap_or_else(|_| lexical(p)))
                .collect(),
            claims: None,
            one_org: true,
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

    /// The roots under which `org` may set a working directory, as configured (its own roots
    /// with `{org}` filled in, and the shared roots no other organization has claimed), for a
    /// person to choose from: nothing of another organization's is named.
    pub async fn allowed(&self, org: &str) -> Result<Vec<String>, Error> {
        let mut allowed = Vec::new();
        if !is_safe_segment(org) {
            return Ok(allowed);
        }
        for root in &self.roots {
            if let Root::Shared { resolved, .. } = root
                && !self.one_org
                && let Some(claims) = &self.claims
                && claims
                    .root_owner(&resolved.to_string_lossy())
                    .await?
                    .is_some_and(|owner| owner != org)
            {
                continue;
            }
            allowed.push(root.for_org(org).to_string_lossy().into_owned());
        }
        Ok(allowed)
    }

    /// The directory `dir` resolved, if `org` may use it: an existing directory under one of
    /// the organization's roots (claiming a shared root the first time), clear of Spool's own
    /// folders. Otherwise an [`Error::Invalid`] that names only `dir`.
    pub async fn confine(&self, org: &str, dir: &str) -> Result<PathBuf, Error> {
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
        let refuse = |why: &str| {
            tracing::info!(org, dir, why, "a working directory was refused");
            Error::invalid(
                WHAT,
                format!(
                    "`{dir}` is not a folder this organization may use; pick one under the workspace roots \
                     your operator set up for it"
                ),
            )
        };
        if !is_safe_segment(org) {
            return Err(refuse("the organization's id cannot name a folder"));
        }
        // Decided on the path as written: nothing outside the organization's roots is looked at.
        let written = lexical(path);
        let Some(root) = self.roots.iter().find(|root| {
            let mine = root.for_org(org);
            written.starts_with(&mine) || resolve(&mine).is_ok_and(|r| written.starts_with(r))
        }) else {
            return Err(refuse("outside every root of the organization"));
        };
        let root_resolved = match root {
            Root::Shared { resolved, .. } => resolved.clone(),
            Root::PerOrg { .. } => resolve(&root.for_org(org)).map_err(|_| {
                Error::invalid(
                    WHAT,
                    format!("`{dir}` does not exist; create it first (the organization's own root has no folders yet)"),
                )
            })?,
        };
        let resolved = match resolve(path) {
            Ok(resolved) => resolved,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::invalid(WHAT, format!("`{dir}` does not exist; create it first")));
            }
            Err(_) => return Err(Error::invalid(WHAT, format!("`{dir}` cannot be read by Spool"))),
        };
        if !resolved.starts_with(&root_resolved) {
            return Err(refuse("it resolves (through a link) to a folder outside its root"));
        }
        if !resolved.is_dir() {
            return Err(Error::invalid(WHAT, format!("`{dir}` is not a directory")));
        }
        if self
            .forbidden
            .iter()
            .any(|f| resolved.starts_with(f) || f.starts_with(&resolved))
        {
            return Err(refuse(
                "it overlaps Spool's own folders (data, CLI work directory, web UI)",
            ));
        }
        if let Root::Shared { .. } = root
            && !self.one_org
        {
            let claims = self
                .claims
                .as_ref()
                .ok_or_else(|| Error::unavailable("claim a workspace root", "no store for root claims"))?;
            let owner = claims.claim_root(&root_resolved.to_string_lossy(), org).await?;
            if owner != org {
                tracing::warn!(
                    org,
                    owner,
                    root = %root_resolved.display(),
                    "a shared workspace root belongs to the organization that used it first; give each \
                     organization its own root with `{{org}}` in SPOOL_WORKSPACE_ROOTS"
                );
                return Err(refuse("its root belongs to another organization"));
            }
        }
        Ok(resolved)
    }
}

/// The path with symlinks and `..` resolved (it must exist).
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    std::fs::canonicalize(path)
}

/// `path` made absolute and normalized without touching the file system.
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
#[path = "confine_tests.rs"]
pub(crate) mod tests;
