//! A stdio server's program, started by Spool and confined as CLI agents are
//! ([`crate::cli`]): a cleared environment plus `PATH` and the locale
//! ([`McpSettings::env`]), `HOME` and `TMPDIR` in a private folder of the chat's, then the
//! server's own `env`; the chat's working directory (confined to the workspace roots) or that
//! folder; its own process group, killed as a whole when [`Spawned`] is dropped. Its stdin and
//! stdout are the protocol's transport; what it writes on stderr is dropped.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
};

use spool_chat::{
    confine::{WorkspaceRoots, is_safe_segment},
    mcp::McpSecret,
};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::McpSettings;

/// Where a stdio server runs.
#[derive(Debug, Clone)]
pub struct Place {
    /// Its working directory.
    pub dir: PathBuf,
    /// The private folder that holds its `home/` and `tmp/`.
    pub own: PathBuf,
}

impl Place {
    /// `{work_root}/{org}/{chat}`, made private (mode 0700), as working directory too.
    pub async fn own(work_root: &Path, org: &str, chat: &str) -> Result<Self, String> {
        if !is_safe_segment(org) || !is_safe_segment(chat) {
            return Err(format!("the chat `{chat}` of `{org}` cannot name a folder"));
        }
        let own = work_root.join(org).join(chat);
        let dirs = vec![
            work_root.to_path_buf(),
            work_root.join(org),
            own.clone(),
            own.join("home"),
            own.join("tmp"),
        ];
        let made = tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            for dir in dirs {
                std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
            }
            Ok::<_, std::io::Error>(())
        })
        .await;
        match made {
            Ok(Ok(())) => Ok(Self { dir: own.clone(), own }),
            Ok(Err(e)) => Err(format!("cannot make a folder for the server: {e}")),
            Err(e) => Err(format!("cannot make a folder for the server: {e}")),
        }
    }

    /// [`Self::own`], running in the workspace's `working_dir` when there is one, confined to
    /// `roots` (links resolved, checked again now).
    pub async fn for_chat(
        settings: &McpSettings,
        roots: &WorkspaceRoots,
        org: &str,
        chat: &str,
        working_dir: Option<&str>,
    ) -> Result<Self, String> {
        let mut place = Self::own(&settings.work_root, org, chat).await?;
        if let Some(dir) = working_dir {
            place.dir = roots.confine(org, dir).await.map_err(|e| match e {
                spool_log::error::Error::Invalid { reason, .. } => {
                    format!("the workspace's working directory cannot be used: {reason}")
                }
                other => format!("the workspace's working directory cannot be used: {other}"),
            })?;
        }
        Ok(place)
    }
}

/// A started server: its whole process group is killed when this is dropped.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            // Its children (a shell's, `npx`'s node) are in its group too; the group may be gone
            // already (ESRCH).
            if let Some(group) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
        }
        let _ = self.child.start_kill();
    }
}

/// The `PATH` a server gets: the one of [`McpSettings::env`], then the system's folders.
fn path_var(settings: &McpSettings) -> std::ffi::OsString {
    let inherited = settings
        .env
        .iter()
        .filter(|(k, _)| k == "PATH")
        .flat_map(|(_, v)| std::env::split_paths(v).collect::<Vec<_>>());
    let system = ["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from);
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in inherited.chain(system) {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// Starts `command` with `args` at `place`: the process, its stdout and its stdin.
pub fn spawn(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, McpSecret>,
    settings: &McpSettings,
    place: &Place,
) -> Result<(Spawned, ChildStdout, ChildStdin), String> {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .current_dir(&place.dir)
        // Nothing of Spool's environment (its signing secret, cloud credentials) but the
        // allow-list, then the server's own variables.
        .env_clear()
        .envs(settings.env.iter().filter(|(k, _)| k != "PATH").map(|(k, v)| (k, v)))
        .env("PATH", path_var(settings))
        .env("HOME", place.own.join("home"))
        .env("TMPDIR", place.own.join("tmp"))
        .envs(env.iter().map(|(k, v)| (k, v.expose())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .process_group(0);
    // The command's name is the person's configuration, not a secret; its error may name it.
    let mut child = cmd.spawn().map_err(|e| format!("cannot start `{command}`: {e}"))?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(format!("`{command}` started without its pipes"));
    };
    Ok((Spawned { child }, stdout, stdin))
}
