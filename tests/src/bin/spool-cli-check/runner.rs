//! The runner's part of the CLI check: the same real CLIs, run through a runner as on Lambda.
//!
//! A real `spool serve` (target/debug/spool) whose workspaces' CLI agents run on runners and
//! whose own search path holds no CLI, and a real `spool runner` named `cli-check` with a runner
//! key and the CLIs' folder as its search path. Through the API, with the local organization's
//! key:
//! 1. `GET /v1/clis` lists the runner online with each CLI healthy and its version;
//! 2. a chat of a workspace per CLI (its `cli_type` set, its model set with `/model`) gets a
//!    message, all four at once; each turn must be run by the runner (`agent_start`'s runtime
//!    is `cli:<name>` and the runner's log says it took the turn) and must not end with a usage
//!    error. Ending for want of credentials or a network, or at the runner's time limit, is
//!    accepted, as in the first phase.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::cli::program;
use spool_chat::workspace::CliType;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use super::{RUN_TIMEOUT, gist, model, usage_error};

/// The runner's name, as `GET /v1/clis` lists it.
const NAME: &str = "cli-check";

/// How long the runner may take to be listed online with its CLIs (it probes each first).
const ONLINE_DEADLINE: Duration = Duration::from_secs(30);

/// How long one chat's turn may take, from the message to `agent_end`.
const TURN_DEADLINE: Duration = Duration::from_secs(120);

fn spool() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/spool")
}

/// A `spool` process, stopped when dropped: asked with SIGTERM first, so a runner stops the CLIs
/// it runs, then killed.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(pid) = self.0.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let stopped = Instant::now();
            while stopped.elapsed() < Duration::from_secs(10) {
                if matches!(self.0.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.0.start_kill();
    }
}

/// `spool serve` on a free port over `data`, its workspaces' CLI agents on runners and `empty`
/// its CLIs' search path, its log in `log`: the process, its URL and the local organization's
/// key, from its banner.
async fn serve(data: &Path, empty: &Path, log: &Path) -> Result<(Process, String, String)> {
    let mut child = Command::new(spool())
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .env_remove("SPOOL_ADDR")
        .env_remove("SPOOL_WEB_DIR")
        .env("SPOOL_CLI_HOST", "runners")
        .env("SPOOL_CLI_PATH", empty)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {} serve (cargo build -p spool-local)", spool().display()))?;
    let stdout = child.stdout.take().context("serve's output")?;
    let process = Process(child);
    let mut lines = BufReader::new(stdout).lines();
    let mut next = async |what: &str| -> Result<String> {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .with_context(|| format!("spool serve printed no {what} in 30 s"))??;
        line.with_context(|| format!("spool serve ended before its {what}"))
    };
    let address = next("address").await?;
    let url = address
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .with_context(|| format!("no URL in the banner {address:?}"))?
        .to_owned();
    let key_line = next("key").await?;
    let key = key_line
        .split_whitespace()
        .find(|w| w.starts_with("spool_"))
        .with_context(|| format!("no API key in the banner {key_line:?}"))?
        .to_owned();
    // The rest of its output is read so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((process, url, key))
}

/// `spool admin create-api-key local --capability runner` over `data`, beside the running
/// server: the key.
async fn runner_key(data: &Path) -> Result<String> {
    let out = Command::new(spool())
        .args([
            "admin",
            "create-api-key",
            "local",
            "--capability",
            "runner",
            "--data-dir",
        ])
        .arg(data)
        .output()
        .await
        .context("run spool admin")?;
    ensure!(
        out.status.success(),
        "spool admin create-api-key failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout)?;
    Ok(created["api_key"].as_str().context("the runner's api_key")?.to_owned())
}

/// `spool runner` against `url` with `key`, `bin` its CLIs' search path, one claim loop per CLI
/// so the four chats run at once; its log in `log`.
fn runner(url: &str, key: &str, bin: &Path, work: &Path, log: &Path) -> Result<Process> {
    let log = std::fs::File::create(log)?;
    let child = Command::new(spool())
        .args(["runner", "--url", url, "--name", NAME, "--concurrency"])
        .arg(CliType::ALL.len().to_string())
        .current_dir(work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SPOOL_API_KEY", key)
        .env("SPOOL_CLI_PATH", bin)
        .env("SPOOL_CLI_WORK_DIR", work.join("chats"))
        .env("SPOOL_CLI_TIMEOUT_MS", RUN_TIMEOUT.as_millis().to_string())
        .env("RUST_LOG", "info")
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("start spool runner")?;
    Ok(Process(child))
}

/// The API, as the local organization's key.
struct Api {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Api {
    async fn new(url: &str, key: &str) -> Result<Self> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
        let answer: Value = http
            .post(format!("{url}/v1/handshake"))
            .json(&json!({ "api_key": key }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let token = answer["jwt"].as_str().context("the handshake's jwt")?.to_owned();
        Ok(Self {
            http,
            url: url.to_owned(),
            token,
        })
    }

    /// A request; its JSON, if it succeeded.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        ensure!(status.is_success(), "{method} {path}: {status} {text}");
        Ok(serde_json::from_str(&text)?)
    }
}

/// Waits until `GET /v1/clis` lists the runner online with every CLI healthy and a version:
/// what it says of each.
async fn online(api: &Api, runner: &mut Process) -> Result<String> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = runner.0.try_wait() {
            bail!("spool runner stopped ({status}) before it was online");
        }
        let list = api.call(Method::GET, "/v1/clis", None).await?;
        let runner = list["runners"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == NAME))
            .cloned();
        let versions: Option<Vec<String>> = runner.as_ref().filter(|r| r["online"] == true).and_then(|r| {
            CliType::ALL
                .iter()
                .map(|&cli| {
                    let status = r["clis"].as_array()?.iter().find(|c| c["cli"] == program(cli))?;
                    let version = status["version"].as_str().filter(|_| status["healthy"] == true)?;
                    Some(format!("{} {version}", program(cli)))
                })
                .collect()
        });
        if let Some(versions) = versions {
            return Ok(versions.join(", "));
        }
        if started.elapsed() > ONLINE_DEADLINE {
            bail!(
                "GET /v1/clis did not list the runner `{NAME}` online with every CLI healthy in {} s: {}",
                ONLINE_DEADLINE.as_secs(),
                runner.unwrap_or(list)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs one message in a new chat of `workspace` answered by `cli`, its model set with
/// `/model`; the report line, or what failed.
async fn chat(api: &Api, workspace: &str, cli: CliType, runner_log: &Path) -> Result<String> {
    let name = program(cli);
    let chat = api
        .call(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": workspace })))
        .await?;
    let chat = chat["id"].as_str().context("the chat's id")?.to_owned();
    api.call(
        Method::PATCH,
        &format!("/v1/sessions/{chat}"),
        Some(json!({ "cli_type": name })),
    )
    .await?;
    let set = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/slash-commands/invoke"),
            Some(json!({ "input": format!("/model {}", model(cli)) })),
        )
        .await?;
    ensure!(
        set["session"]["model"] == model(cli),
        "`/model {}` did not set the chat's model: {set}",
        model(cli)
    );
    let sent = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": "Say hello. Answer in one word." })),
        )
        .await?;
    let turn = sent["turn_id"].as_str().context("the message's turn_id")?.to_owned();
    let started = Instant::now();
    let events = loop {
        let page = api
            .call(
                Method::GET,
                &format!("/v1/sessions/{chat}/events?after=0&limit=1000"),
                None,
            )
            .await?;
        let events: Vec<Value> = page["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["turn_id"] == turn.as_str())
            .cloned()
            .collect();
        if events.iter().any(|e| e["type"] == "agent_end") {
            break events;
        }
        ensure!(
            started.elapsed() < TURN_DEADLINE,
            "the turn did not end in {} s: {}",
            TURN_DEADLINE.as_secs(),
            Value::from(events)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let of = |kind: &str| events.iter().find(|e| e["type"] == kind);
    let runtime = of("agent_start").map_or(&Value::Null, |e| &e["payload"]["runtime"]);
    ensure!(
        *runtime == format!("cli:{name}").as_str(),
        "the turn was answered by {runtime}, not cli:{name}"
    );
    let log = std::fs::read_to_string(runner_log).unwrap_or_default();
    let needle = format!("turn={turn}");
    ensure!(
        log.lines().any(|l| l.contains("took a turn") && l.contains(&needle)),
        "the runner's log does not say it took the turn {turn}"
    );
    let said: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "system")
        .filter_map(|e| e["payload"]["message"].as_str())
        .chain(of("agent_end").and_then(|e| e["payload"]["error"].as_str()))
        .collect();
    if let Some(refusal) = said.iter().find(|s| usage_error(s)) {
        bail!("refused Spool's command line: {}", gist(refusal));
    }
    let ends = match of("message_end") {
        Some(reply) => format!("answered: {}", reply["payload"]["text"].as_str().unwrap_or_default()),
        None => said.first().copied().unwrap_or("no reply, no error").to_owned(),
    };
    Ok(format!(
        "cli-check: through a runner: {name}: the runner took the turn, and Spool's command line was accepted (here it ends: {})\n",
        gist(&ends)
    ))
}

/// The last lines of the runner's log, for a failure.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The runner phase: what it printed, and what failed.
pub(crate) async fn check(bin: &Path) -> (String, Vec<String>) {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            return (
                String::new(),
                vec![format!("through a runner: a temporary folder: {e}")],
            );
        }
    };
    let runner_log = dir.path().join("runner.log");
    let mut report = String::new();
    let mut failures = Vec::new();
    if let Err(e) = phase(dir.path(), bin, &runner_log, &mut report, &mut failures).await {
        failures.push(format!("through a runner: {e:#}"));
    }
    if !failures.is_empty() {
        failures.push(format!(
            "through a runner: the runner's log ends:\n{}",
            tail(&runner_log)
        ));
    }
    (report, failures)
}

async fn phase(
    dir: &Path,
    bin: &Path,
    runner_log: &Path,
    report: &mut String,
    failures: &mut Vec<String>,
) -> Result<()> {
    let (data, empty, work) = (dir.join("data"), dir.join("server-bin"), dir.join("runner"));
    std::fs::create_dir_all(&empty)?;
    std::fs::create_dir_all(&work)?;
    let (_server, url, local_key) = serve(&data, &empty, &dir.join("serve.log")).await?;
    let key = runner_key(&data).await?;
    let mut runner = runner(&url, &key, bin, &work, runner_log)?;
    let api = Api::new(&url, &local_key).await?;
    let versions = online(&api, &mut runner).await?;
    report.push_str(&format!(
        "cli-check: through a runner: `spool runner` {NAME} is online for spool serve (which has no CLI), with {versions}\n"
    ));
    let workspace = api
        .call(Method::POST, "/v1/workspaces", Some(json!({ "name": "CLI check" })))
        .await?;
    ensure!(
        workspace["cli_host"] == "runners",
        "the workspace's CLI agents do not run on runners: {workspace}"
    );
    let workspace = workspace["id"].as_str().context("the workspace's id")?.to_owned();
    let [a, b, c, d] = CliType::ALL.map(|cli| chat(&api, &workspace, cli, runner_log));
    let (a, b, c, d) = tokio::join!(a, b, c, d);
    for (cli, outcome) in CliType::ALL.into_iter().zip([a, b, c, d]) {
        match outcome {
            Ok(line) => report.push_str(&line),
            Err(e) => failures.push(format!("through a runner: {}: {e:#}", program(cli))),
        }
    }
    Ok(())
}
