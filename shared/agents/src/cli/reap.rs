//! CLIs left running by a process that died: found and stopped at the next start.
//!
//! A CLI runs in its own process group, which its Spool process kills when the reply is dropped.
//! A Spool process killed outright (`kill -9`, an out-of-memory kill) cannot: its CLIs live on
//! until their own time limit, working on a turn that is offered again. So each running CLI is
//! recorded under the work root (`.running/{group}`: the process that started it and the
//! CLI's input file), and [`CliAgents::reap_orphans`](super::CliAgents::reap_orphans) kills the
//! groups whose recorder is gone, once the group's leader is still the CLI it recorded (its
//! environment names that input file), so a reused process id is never killed.

use std::path::{Path, PathBuf};

use rustix::process::{Pid, Signal};

/// The folder of the records under a work root.
fn folder(work_root: &Path) -> PathBuf {
    work_root.join(".running")
}

/// A running CLI's record, removed when dropped (the CLI has exited or was killed).
pub(super) struct Running {
    path: Option<PathBuf>,
}

impl Running {
    /// Records the CLI whose process group is `group`, started with `input` as its input file.
    pub(super) fn record(work_root: &Path, group: u32, input: &Path) -> Self {
        let dir = folder(work_root);
        let path = dir.join(group.to_string());
        let text = format!("{}\n{}\n", std::process::id(), input.display());
        let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text));
        match written {
            Ok(()) => Self { path: Some(path) },
            Err(e) => {
                tracing::warn!(error = %e, dir = %dir.display(), "cannot record a running CLI; it is not stopped if this process dies");
                Self { path: None }
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
}

/// Whether process `pid` runs with `SPOOL_INPUT_FILE={input}` in its environment.
fn runs_with(pid: u32, input: &str) -> bool {
    let wanted = format!("SPOOL_INPUT_FILE={input}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(|var| var == wanted.as_bytes()))
}

/// Kills the recorded CLIs under `work_root` whose recorder is dead; how many groups it
/// killed. Records of live recorders are left alone (another process shares the work root).
/// A recorder whose process id a new process took (a container's first process, restarted)
/// looks alive: its CLIs end at their own time limit.
pub(super) fn reap(work_root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(folder(work_root)) else {
        return 0;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(group) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut lines = text.lines();
        let owner = lines.next().and_then(|l| l.parse::<u32>().ok());
        let input = lines.next().unwrap_or_default();
        // A live recorder (this process included: runners in one process) still owns it.
        if owner.is_some_and(alive) {
            continue;
        }
        if !input.is_empty() && runs_with(group, input) {
            let pid = i32::try_from(group).ok().and_then(Pid::from_raw);
            if let Some(pid) = pid
                && rustix::process::kill_process_group(pid, Signal::KILL).is_ok()
            {
                tracing::warn!(group, input, "stopped a CLI its dead Spool process left running");
                killed += 1;
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    fn write_record(root: &Path, group: u32, owner: u32, input: &Path) {
        std::fs::create_dir_all(folder(root)).unwrap();
        std::fs::write(
            folder(root).join(group.to_string()),
            format!("{owner}\n{}\n", input.display()),
        )
        .unwrap();
    }

    #[test]
    fn a_dead_recorders_cli_is_killed_and_a_live_ones_is_not() {
        let root = tempfile::tempdir().unwrap();
        let input = root.path().join("run.input.md");
        // A CLI: a shell in a group of its own, with the input file in its environment.
        let mut cli = std::process::Command::new("sh")
            .args(["-c", "sleep 30"])
            .env("SPOOL_INPUT_FILE", &input)
            .process_group(0)
            .spawn()
            .unwrap();
        // Its recorder, alive: the CLI is left alone.
        let mut recorder = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        write_record(root.path(), cli.id(), recorder.id(), &input);
        assert_eq!(reap(root.path()), 0);
        assert!(cli.try_wait().unwrap().is_none(), "a live recorder's CLI lives on");
        // Its recorder dies: the CLI is killed and its record removed.
        recorder.kill().unwrap();
        recorder.wait().unwrap();
        assert_eq!(reap(root.path()), 1);
        assert!(!cli.wait().unwrap().success(), "the CLI was killed");
        assert!(!folder(root.path()).join(cli.id().to_string()).exists());
        // A record whose group now runs something else (a reused id) is only removed.
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        write_record(root.path(), other.id(), u32::MAX - 1, &input);
        assert_eq!(reap(root.path()), 0);
        assert!(other.try_wait().unwrap().is_none(), "an unrelated process lives on");
        assert!(!folder(root.path()).join(other.id().to_string()).exists());
        other.kill().unwrap();
        let _ = other.wait();
    }

    #[test]
    fn a_record_goes_with_its_cli() {
        let root = tempfile::tempdir().unwrap();
        let running = Running::record(root.path(), 4242, Path::new("/x/in.md"));
        let path = folder(root.path()).join("4242");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n/x/in.md\n", std::process::id())
        );
        drop(running);
        assert!(!path.exists());
    }
}
