//! # `spool runner`: a deployment's CLI turns, run on this machine
//!
//! A runner connects out to a Spool deployment (only outbound HTTP(S): no inbound port, no
//! cloud credentials) with an API key of the `runner` capability, and takes the CLI turns of
//! its organization's workspaces whose CLI agents run on runners ([`spool_chat::runner`]). It
//! runs each CLI here, the way `spool serve`'s worker runs them (the same search path, chats'
//! folders, workspace roots, passed-through variables and time limit, from the same
//! variables), and sends back what the CLI answered.
//!
//! - **The loop.** `--concurrency` claim loops each long-poll for a job
//!   ([`CLAIM_WAIT_MS`]), run it ([`run`]) and claim again. Network failures and the
//!   deployment's own (5xx) are retried with a bounded, jittered backoff ([`Backoff`]); a key
//!   the deployment refuses (`401`, `403`) stops the runner, saying how to make one.
//! - **What it can run** is probed at start (no CLI: it stops, saying where it looked) and
//!   every few minutes, and reported in every claim, so the deployment offers it only turns of
//!   CLIs it has.

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use secrecy::{ExposeSecret, SecretString};
use spool_agents::cli::{CliAgents, program};
use spool_chat::{
    clis::{CliProbe, CliStatus},
    confine::WorkspaceRoots,
    runner::{CLAIM_WAIT_MS, wire::Claim},
};
use spool_platform::Config;

pub(crate) mod client;
mod files;
mod run;

use client::{CallError, Client};

/// How often the CLIs are probed again.
const PROBE_EVERY: Duration = Duration::from_secs(300);

/// `spool runner --url URL --api-key KEY [--workspace ID]… [--name NAME] [--concurrency N]`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
The CLIs are found and run as `spool serve` runs them, from the same variables, on this machine:
  SPOOL_CLI_PATH         where claude, gemini, codex and opencode are looked for (default: PATH)
  SPOOL_CLI_WORK_DIR     where chats' own folders are made (default: .spool/runner, under
                         SPOOL_DATA_DIR if set, in the current directory)
  SPOOL_WORKSPACE_ROOTS  the folders workspaces' working directories may be under (none: each
                         chat runs in a folder of its own)
  SPOOL_CLI_ENV          the variables passed through to the CLIs (provider keys)
  SPOOL_CLI_TIMEOUT_MS   how long one CLI run may take

Make a key with `spool admin create-api-key ORG --capability runner`.")]
pub struct RunnerArgs {
    /// The Spool deployment's URL (its API's base, with any path prefix or stage), e.g.
    /// https://d111111abcdef8.cloudfront.net or http://127.0.0.1:8080.
    #[arg(long)]
    pub url: String,
    /// An API key of the `runner` capability.
    #[arg(long, env = "SPOOL_API_KEY", hide_env_values = true)]
    pub api_key: SecretString,
    /// A workspace to serve (repeatable); none: every workspace of the key's organization.
    #[arg(long = "workspace", value_name = "ID")]
    pub workspaces: Vec<String>,
    /// The runner's name in its organization [default: this machine's host name].
    #[arg(long)]
    pub name: Option<String>,
    /// How many turns it runs at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
}

/// Runs the runner with the configuration of the environment until Ctrl-C or SIGTERM (a
/// container's stop), or until the deployment refuses its key. Stopping kills the CLIs it
/// runs; their turns are offered again once their leases run out.
pub async fn run(args: RunnerArgs) -> anyhow::Result<()> {
    // The CLIs run as this user: without this, one could read the runner's key from
    // `/proc/{runner}/environ`.
    crate::hide_from_children();
    if rustix::process::geteuid().is_root() {
        tracing::warn!(
            "spool runner runs as root: the CLIs it runs can read anything on this machine, this runner's key included; \
             run it as a user of its own (docs/DEPLOY.md, \"Runners\")"
        );
    }
    let config = Config::from_env().context("invalid configuration")?;
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        result = run_with(args, &config) => result,
        _ = tokio::signal::ctrl_c() => stopped(),
        () = terminate => stopped(),
    }
}

fn stopped() -> anyhow::Result<()> {
    tracing::info!("stopped; the turns it ran are offered again once their leases run out");
    Ok(())
}

/// Runs the runner with `config`'s CLI settings until the deployment refuses its key.
/// Dropping the future stops it, and the CLIs it runs.
pub async fn run_with(args: RunnerArgs, config: &Config) -> anyhow::Result<()> {
    let base = client::check_url(&args.url).map_err(anyhow::Error::msg)?;
    let agents = cli_agents(config);
    let reaped = agents.reap_orphans();
    if reaped > 0 {
        tracing::warn!(clis = reaped, "stopped the CLIs a runner that died here left running");
    }
    let clis = agents.clis().await;
    if !clis.iter().any(|c| c.healthy) {
        anyhow::bail!("{}", no_cli(config, &clis));
    }
    let name = args.name.clone().unwrap_or_else(host_name);
    check_name(&name).map_err(anyhow::Error::msg)?;
    let key = args.api_key.expose_secret().trim();
    if key.is_empty() {
        anyhow::bail!(
            "give a runner key in --api-key or SPOOL_API_KEY (make one with `spool admin create-api-key ORG --capability runner`)"
        );
    }
    let client = Arc::new(Client::new(base, key.to_owned().into()));
    let org = connect(&client).await?;
    tracing::info!(
        "runner `{name}` connected to {} as {org}; runs: {}",
        client.base(),
        describe(&clis)
    );
    let shared = Arc::new(Shared {
        client,
        agents,
        name,
        workspaces: args.workspaces.clone(),
        clis: std::sync::RwLock::new(clis),
    });
    let mut loops = tokio::task::JoinSet::new();
    loops.spawn(reprobe(shared.clone()));
    for _ in 0..args.concurrency {
        loops.spawn(claim_loop(shared.clone()));
    }
    while let Some(ended) = loops.join_next().await {
        match ended {
            Ok(Err(fatal)) => return Err(anyhow::Error::msg(fatal.0)),
            Ok(Ok(())) => {}
            Err(e) => return Err(anyhow::Error::msg(format!("a claim loop stopped: {e}"))),
        }
    }
    Ok(())
}

/// What the claim loops share.
pub(crate) struct Shared {
    pub(crate) client: Arc<Client>,
    pub(crate) agents: CliAgents,
    pub(crate) name: String,
    workspaces: Vec<String>,
    clis: std::sync::RwLock<Vec<CliStatus>>,
}

impl Shared {
    fn claim(&self) -> Claim {
        Claim {
            name: self.name.clone(),
            version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            clis: self
                .clis
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            workspaces: self.workspaces.clone(),
            wait_ms: Some(CLAIM_WAIT_MS),
        }
    }
}

/// Why the runner stops: what the person is told.
#[derive(Debug)]
pub(crate) struct Fatal(String);

impl Fatal {
    /// The deployment refused the key.
    pub(crate) fn refused_key(e: &CallError) -> Self {
        Self(format!(
            "the key is not valid or not a runner key: make one with `spool admin create-api-key ORG --capability runner` ({e})"
        ))
    }
}

/// A bounded exponential backoff with jitter: from about half a second, doubling to 30 s.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    attempt: u32,
}

impl Backoff {
    const FIRST_MS: u64 = 500;
    const MAX_MS: u64 = 30_000;

    /// The sleep before the next try: a random one between half the cap and the cap, the cap
    /// doubling with each try up to [`Self::MAX_MS`].
    pub(crate) fn next_delay(&mut self) -> Duration {
        let cap = (Self::FIRST_MS << self.attempt.min(10)).min(Self::MAX_MS);
        self.attempt = self.attempt.saturating_add(1);
        Duration::from_millis(fastrand::u64(cap / 2..=cap))
    }

    /// After a success: the next failure waits the least again.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// The CLIs as the worker has them (functions/worker's `cli_agents`), but with chats' folders
/// under `.spool/runner` by default, and the workspace roots of one organization, the key's.
fn cli_agents(config: &Config) -> CliAgents {
    let settings = &config.agents;
    let env = settings.cli_environment();
    let work_dir = work_dir(config);
    let roots = WorkspaceRoots::for_one_org(&settings.workspace_roots, std::slice::from_ref(&work_dir));
    CliAgents::new(settings.cli_path.clone(), work_dir, settings.cli_timeout)
        .with_env(env)
        .with_roots(roots)
}

/// Where chats' folders are made: `SPOOL_CLI_WORK_DIR`, or `runner` in the data directory.
fn work_dir(config: &Config) -> PathBuf {
    let dir = config
        .agents
        .cli_work_dir
        .clone()
        .unwrap_or_else(|| config.data_dir.join("runner"));
    std::path::absolute(&dir).unwrap_or(dir)
}

/// Why no CLI can run here, where it looked, and how to fix it.
fn no_cli(config: &Config, clis: &[CliStatus]) -> String {
    let looked: Vec<String> = config.agents.cli_path.iter().map(|p| p.display().to_string()).collect();
    let why: Vec<String> = clis
        .iter()
        .map(|c| format!("{}: {}", program(c.cli), c.reason.as_deref().unwrap_or("cannot run")))
        .collect();
    format!(
        "no CLI agent can run here: looked for claude, gemini, codex and opencode in {} ({}); install one, \
         or set SPOOL_CLI_PATH to the folders that hold them",
        if looked.is_empty() {
            "nothing (the search path is empty)".to_owned()
        } else {
            looked.join(":")
        },
        why.join("; ")
    )
}

/// "claude 2.0.1, codex 0.9 (gemini, opencode: not installed)".
fn describe(clis: &[CliStatus]) -> String {
    let runs: Vec<String> = clis
        .iter()
        .filter(|c| c.healthy)
        .map(|c| {
            format!("{} {}", program(c.cli), c.version.as_deref().unwrap_or(""))
                .trim_end()
                .to_owned()
        })
        .collect();
    let missing: Vec<&str> = clis.iter().filter(|c| !c.installed).map(|c| program(c.cli)).collect();
    let broken: Vec<String> = clis
        .iter()
        .filter(|c| c.installed && !c.healthy)
        .map(|c| format!("{}: {}", program(c.cli), c.reason.as_deref().unwrap_or("not answering")))
        .collect();
    let mut text = if runs.is_empty() {
        "nothing".to_owned()
    } else {
        runs.join(", ")
    };
    let mut notes = Vec::new();
    if !missing.is_empty() {
        notes.push(format!("{}: not installed", missing.join(", ")));
    }
    notes.extend(broken);
    if !notes.is_empty() {
        text.push_str(&format!(" ({})", notes.join("; ")));
    }
    text
}

/// A runner's name as the deployment takes it: 1 to 64 letters, digits, `.`, `_` or `-`.
fn check_name(name: &str) -> Result<(), String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 64 || !name.chars().all(fits) {
        return Err(format!(
            "`{name}` cannot name a runner: give --name 1 to 64 letters, digits, `.`, `_` or `-`"
        ));
    }
    Ok(())
}

/// This machine's host name, or `runner`.
fn host_name() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy().trim().to_owned();
    if !name.is_empty() {
        return name;
    }
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "runner".to_owned())
}

/// The handshake, tried until the deployment answers; the key's organization.
async fn connect(client: &Client) -> anyhow::Result<String> {
    let mut backoff = Backoff::default();
    loop {
        match client.org().await {
            Ok(org) => return Ok(org),
            Err(e) if e.is_refused_key() => return Err(anyhow::Error::msg(Fatal::refused_key(&e).0)),
            Err(e) if e.is_transient() => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    error = %e,
                    retry_in_ms = delay.as_millis(),
                    "cannot reach the deployment; check --url, the network, and that Spool runs there"
                );
                tokio::time::sleep(delay).await;
            }
            Err(e) => anyhow::bail!("the deployment refused the handshake: {e}"),
        }
    }
}

/// Probes the CLIs every [`PROBE_EVERY`], so claims report what runs now.
async fn reprobe(shared: Arc<Shared>) -> Result<(), Fatal> {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let clis = shared.agents.clis().await;
        if !clis.iter().any(|c| c.healthy) {
            tracing::warn!(clis = %describe(&clis), "no CLI answers here any more; turns wait for another runner");
        }
        *shared.clis.write().unwrap_or_else(std::sync::PoisonError::into_inner) = clis;
    }
}

/// Claims jobs and runs them, one at a time, until the key is refused.
async fn claim_loop(shared: Arc<Shared>) -> Result<(), Fatal> {
    let mut backoff = Backoff::default();
    loop {
        match shared.client.claim(&shared.claim()).await {
            Ok(Some(assignment)) => {
                backoff.reset();
                run::run(&shared, assignment).await?;
            }
            Ok(None) => backoff.reset(),
            Err(e) if e.is_refused_key() => return Err(Fatal::refused_key(&e)),
            Err(e) if e.is_transient() => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    error = %e,
                    retry_in_ms = delay.as_millis(),
                    "cannot claim a turn; check the network, --url, and the deployment's health"
                );
                tokio::time::sleep(delay).await;
            }
            Err(e) if e.status() == Some(404) => {
                return Err(Fatal(format!(
                    "the deployment at {} serves no runners ({e}); check --url (the API's base) and update Spool there",
                    shared.client.base()
                )));
            }
            Err(e) => return Err(Fatal(format!("the deployment refused the runner's claim: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use spool_chat::workspace::CliType;

    use super::*;

    #[test]
    fn backoff_grows_to_a_bound_with_jitter_and_resets() {
        let mut backoff = Backoff::default();
        let first = backoff.next_delay();
        assert!((250..=500).contains(&first.as_millis()), "{first:?}");
        let later: Vec<Duration> = (0..20).map(|_| backoff.next_delay()).collect();
        assert!(later.iter().all(|d| *d <= Duration::from_secs(30)));
        assert!(later[10..].iter().all(|d| *d >= Duration::from_secs(15)));
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(500));
    }

    #[test]
    fn names_are_those_the_deployment_takes() {
        assert!(check_name("build-box_2.example").is_ok());
        for bad in ["", "my laptop", "ä", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_log_says_what_runs_and_what_does_not() {
        let healthy = |cli, version: &str| CliStatus {
            cli,
            installed: true,
            version: Some(version.to_owned()),
            healthy: true,
            reason: None,
        };
        let clis = [
            healthy(CliType::Claude, "2.0.1"),
            CliStatus::unavailable(CliType::Gemini, "not on the search path"),
            healthy(CliType::Codex, "0.9"),
            CliStatus::unavailable(CliType::Opencode, "not on the search path"),
        ];
        assert_eq!(
            describe(&clis),
            "claude 2.0.1, codex 0.9 (gemini, opencode: not installed)"
        );
    }

    #[tokio::test]
    async fn no_cli_stops_the_runner_saying_where_it_looked() {
        let empty = tempfile::tempdir().unwrap();
        let config = Config::from_vars([
            ("SPOOL_CLI_PATH".to_owned(), empty.path().display().to_string()),
            (
                "SPOOL_DATA_DIR".to_owned(),
                empty.path().join("data").display().to_string(),
            ),
        ])
        .unwrap();
        let args = RunnerArgs {
            url: "http://127.0.0.1:9".into(),
            api_key: String::from("spool_x_y").into(),
            workspaces: Vec::new(),
            name: None,
            concurrency: 1,
        };
        let error = run_with(args, &config).await.unwrap_err().to_string();
        assert!(error.contains("no CLI agent can run here"), "{error}");
        assert!(
            error.contains(&empty.path().display().to_string()) && error.contains("SPOOL_CLI_PATH"),
            "{error}"
        );
    }
}
