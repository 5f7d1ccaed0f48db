//! # Which CLIs are here, and whether they answer
//!
//! A CLI is installed when the search path has it; it is healthy when `{cli} --version`, run as
//! a turn would run it, answers. Probes are reused for a minute.

use std::{process::Stdio, time::Duration};

use async_trait::async_trait;
use spool_chat::{
    clis::{CliProbe, CliStatus},
    workspace::CliType,
};

use super::{CliAgents, GroupGuard, ORDER, program};

/// A probe of the CLIs, and when it ran.
pub(super) type Probed = (std::time::Instant, Vec<CliStatus>);

/// How long `--version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a probe's answer is reused.
const PROBE_FRESH: Duration = Duration::from_secs(60);

impl CliAgents {
    /// Runs `{cli} --version` as a turn would run the CLI (the cleared environment, the search
    /// path), within [`VERSION_TIMEOUT`].
    async fn probe(&self, cli: CliType) -> CliStatus {
        let Some(path) = self.find(cli) else {
            return CliStatus::unavailable(
                cli,
                format!("`{}` is not on the CLI search path (SPOOL_CLI_PATH)", program(cli)),
            );
        };
        let mut command = tokio::process::Command::new(&path);
        command
            .arg("--version")
            .env_clear()
            .env("PATH", self.path_var())
            .envs(self.env.iter().filter(|(k, _)| k != "PATH").map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let failed = |reason: String| CliStatus {
            cli,
            installed: true,
            version: None,
            healthy: false,
            reason: Some(reason),
        };
        let child = match command.spawn() {
            Ok(child) => child,
            Err(e) => return failed(format!("`{} --version` could not start: {e}", program(cli))),
        };
        // Whatever it started goes with it, however this ends.
        let _group = GroupGuard { pid: child.id() };
        let output = match tokio::time::timeout(VERSION_TIMEOUT, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return failed(format!("`{} --version` failed: {e}", program(cli))),
            Err(_) => {
                return failed(format!(
                    "`{} --version` did not answer within {} s",
                    program(cli),
                    VERSION_TIMEOUT.as_secs()
                ));
            }
        };
        let first_line = |bytes: &[u8]| {
            String::from_utf8_lossy(bytes)
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(|l| l.chars().take(200).collect::<String>())
        };
        if !output.status.success() {
            let code = output
                .status
                .code()
                .map_or_else(|| "a signal".to_owned(), |c| c.to_string());
            let said = first_line(&output.stderr)
                .or_else(|| first_line(&output.stdout))
                .unwrap_or_default();
            return failed(format!("`{} --version` exited with {code}: {said}", program(cli)));
        }
        match first_line(&output.stdout).or_else(|| first_line(&output.stderr)) {
            Some(version) => CliStatus {
                cli,
                installed: true,
                version: Some(version),
                healthy: true,
                reason: None,
            },
            None => failed(format!("`{} --version` printed nothing", program(cli))),
        }
    }
}

#[async_trait]
impl CliProbe for CliAgents {
    async fn clis(&self) -> Vec<CliStatus> {
        {
            let cached = self.probed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((at, statuses)) = cached.as_ref()
                && at.elapsed() < PROBE_FRESH
            {
                return statuses.clone();
            }
        }
        let [a, b, c, d] = ORDER;
        let (a, b, c, d) = tokio::join!(self.probe(a), self.probe(b), self.probe(c), self.probe(d));
        let statuses = vec![a, b, c, d];
        *self.probed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((std::time::Instant::now(), statuses.clone()));
        statuses
    }
}

impl CliAgents {
    /// What is known of the CLIs without running any: the last probe's answer, or which are on
    /// the search path.
    pub(super) fn known(&self) -> Vec<CliStatus> {
        if let Some((_, statuses)) = self
            .probed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            return statuses.clone();
        }
        ORDER
            .map(|cli| match self.find(cli) {
                Some(_) => CliStatus {
                    cli,
                    installed: true,
                    version: None,
                    healthy: false,
                    reason: None,
                },
                None => CliStatus::unavailable(cli, "not on the CLI search path"),
            })
            .to_vec()
    }
}
