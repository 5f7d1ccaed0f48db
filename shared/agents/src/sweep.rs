//! # The daily sweep of chats' folders
//!
//! A CLI agent works in its chat's own folder (`{work_root}/{org}/{chat}`: its input and
//! output files, `home/`, `tmp/`, `attachments/`). Those folders would pile up forever, so once
//! a day the worker removes each one whose chat is gone or has been idle longer than its
//! workspace's `cleanup.chat_folder_days` (7 by default). A chat with a turn in flight keeps
//! its folder whatever its age. Only folders Spool made (named like a chat, with the `home/`
//! it gives a CLI run) are removed: a workspace's `static`
//! working directory is the person's, never touched. (Finished turn records expire on their
//! own: each is written with its workspace's `cleanup.turn_record_days`.)

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use spool_chat::{confine::is_safe_segment, metadata::Metadata};
use spool_log::error::Error;

/// How often the sweep runs.
pub const SWEEP_EVERY: Duration = Duration::from_secs(24 * 60 * 60);

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Chats' folders looked at.
    pub seen: usize,
    /// Folders removed.
    pub removed: usize,
}

/// Sweeps the chats' folders under one work root.
pub struct FolderSweep {
    work_root: PathBuf,
    metadata: Arc<dyn Metadata>,
    last: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for FolderSweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FolderSweep")
            .field("work_root", &self.work_root)
            .finish_non_exhaustive()
    }
}

impl FolderSweep {
    /// A sweep of the folders under `work_root`, judged by the chats in `metadata`.
    pub fn new(work_root: PathBuf, metadata: Arc<dyn Metadata>) -> Self {
        Self {
            work_root,
            metadata,
            last: Mutex::new(None),
        }
    }

    /// Sweeps if it has not in the last [`SWEEP_EVERY`] (a worker calls this as it takes work,
    /// so a Lambda instance sweeps its own disk once a day it lives); logs what it did.
    pub async fn run_if_due(&self, now_ms: i64) {
        {
            let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < SWEEP_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        match self.sweep(now_ms).await {
            Ok(Swept { removed: 0, .. }) => {}
            Ok(swept) => tracing::info!(
                removed = swept.removed,
                seen = swept.seen,
                "removed idle chats' folders"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot sweep chats' folders; trying again tomorrow"),
        }
    }

    /// Removes every chat folder that is due, now. One that cannot be judged or removed is
    /// logged and left for the next sweep; the others are still swept.
    pub async fn sweep(&self, now_ms: i64) -> Result<Swept, Error> {
        let mut swept = Swept::default();
        for (org, chat, dir) in chat_folders(&self.work_root).await? {
            swept.seen += 1;
            match self.sweep_one(&org, &chat, &dir, now_ms).await {
                Ok(true) => swept.removed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(org, chat, error = %e, "cannot sweep a chat's folder; the next sweep tries again")
                }
            }
        }
        Ok(swept)
    }

    /// Removes `dir` if it is due. A turn may start between the check and the removal: the
    /// folder is first moved aside (atomically; a turn starting after that makes a fresh one),
    /// then the chat is checked again and the folder put back if a turn has started.
    async fn sweep_one(&self, org: &str, chat: &str, dir: &Path, now_ms: i64) -> Result<bool, Error> {
        if !self.due(org, chat, now_ms).await? {
            return Ok(false);
        }
        // A name no chat has (chat ids never start with a dot), swept itself if left behind.
        let aside = dir.with_file_name(format!(".swept-{chat}"));
        rename(dir, &aside).await?;
        if !self.due(org, chat, now_ms).await.unwrap_or(false) && rename(&aside, dir).await.is_ok() {
            return Ok(false);
        }
        remove(&aside).await?;
        Ok(true)
    }

    /// Whether `chat`'s folder may go: the chat is gone, or idle past its workspace's setting
    /// with no turn in flight.
    async fn due(&self, org: &str, chat: &str, now_ms: i64) -> Result<bool, Error> {
        let Some(session) = self.metadata.session(org, chat).await? else {
            return Ok(true);
        };
        if session.pending_turn.is_some() {
            return Ok(false);
        }
        let cleanup = match &session.workspace_id {
            Some(ws) => self.metadata.workspace(org, ws).await?.map(|w| w.cleanup),
            None => None,
        };
        let keep = cleanup.unwrap_or_default().chat_folder_ms();
        let active = session.last_active_ms.max(session.updated_ms);
        Ok(now_ms.saturating_sub(active) > keep)
    }
}

/// Every `{root}/{org}/{chat}` folder; names that Spool would not have made are left alone.
async fn chat_folders(root: &Path) -> Result<Vec<(String, String, PathBuf)>, Error> {
    let root = root.to_path_buf();
    let listed = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let orgs = match std::fs::read_dir(&root) {
            Ok(orgs) => orgs,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for org in orgs {
            let org = org?;
            let Some(org_name) = folder_name(&org)? else { continue };
            for chat in std::fs::read_dir(org.path())? {
                let chat = chat?;
                if let Some(chat_name) = folder_name(&chat)?
                    && spool_made(&chat.path())
                {
                    out.push((org_name.clone(), chat_name, chat.path()));
                }
            }
        }
        Ok(out)
    })
    .await;
    match listed {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(Error::unavailable("list chats' folders", e)),
        Err(e) => Err(Error::unavailable("list chats' folders", e)),
    }
}

/// The entry's name if it is a real folder (not a link) with a name Spool makes.
fn folder_name(entry: &std::fs::DirEntry) -> std::io::Result<Option<String>> {
    if !entry.file_type()?.is_dir() {
        return Ok(None);
    }
    Ok(entry
        .file_name()
        .to_str()
        .filter(|n| is_safe_segment(n))
        .map(str::to_owned))
}

/// Whether a chat's folder is one Spool made: it has the `home/` a CLI run gets.
fn spool_made(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("home")).is_ok_and(|m| m.is_dir())
}

/// Renames `from` to `to` (on one file system: atomic).
async fn rename(from: &Path, to: &Path) -> Result<(), Error> {
    let (from, to) = (from.to_path_buf(), to.to_path_buf());
    let shown = from.display().to_string();
    match tokio::task::spawn_blocking(move || std::fs::rename(&from, &to)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::unavailable(format!("move {shown} aside"), e)),
        Err(e) => Err(Error::unavailable(format!("move {shown} aside"), e)),
    }
}

/// Removes `dir` and everything in it; links inside are removed, never followed.
async fn remove(dir: &Path) -> Result<(), Error> {
    let dir = dir.to_path_buf();
    let shown = dir.display().to_string();
    match tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&dir)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Ok(Err(e)) => Err(Error::unavailable(format!("remove {shown}"), e)),
        Err(e) => Err(Error::unavailable(format!("remove {shown}"), e)),
    }
}
