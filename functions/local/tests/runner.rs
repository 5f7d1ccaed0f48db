//! `spool runner` as people run it: a real process beside a real `spool serve`, with a fake
//! `claude` on the runner's search path only (the server has none). A runner killed with
//! `kill -9` mid-turn loses nothing: once its lease runs out, the restarted runner takes the
//! turn again and it ends once.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// A child process, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `spool serve` on a free port over `data`, its workspaces' CLI agents on runners and no CLI
/// of its own: its URL and the local organization's key.
fn serve(data: &Path, empty: &Path) -> (Process, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .env_remove("SPOOL_ADDR")
        .env_remove("SPOOL_WEB_DIR")
        .env("SPOOL_CLI_HOST", "runners")
        .env("SPOOL_CLI_PATH", empty)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn spool serve");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = |what: &str| {
        let mut line = String::new();
        stdout.read_line(&mut line).expect(what);
        line
    };
    let url = line("the banner's address")
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the server's URL")
        .to_owned();
    let key = line("the banner's key")
        .split_whitespace()
        .find(|w| w.starts_with("spool_"))
        .expect("the local key")
        .to_owned();
    (Process(child), url, key)
}

/// `spool admin create-api-key local --capability runner` over `data`: the key.
fn runner_key(data: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
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
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let created: Value = serde_json::from_slice(&output.stdout).unwrap();
    created["api_key"].as_str().unwrap().to_owned()
}

/// `spool runner` with only `PATH` of this environment: the key in `SPOOL_API_KEY`, `bin` its
/// CLI search path, its log in `log`.
fn runner(url: &str, key: &str, bin: &Path, work: &Path, log: &Path) -> Process {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["runner", "--url", url, "--name", "box", "--concurrency", "1"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SPOOL_API_KEY", key)
        .env("SPOOL_CLI_PATH", bin)
        .env("SPOOL_CLI_WORK_DIR", work)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn spool runner");
    Process(child)
}

/// A `claude` that sleeps (its pid in `pid`) the first time it runs, and answers at once
/// afterwards; every run's turn is appended to `runs`.
const CLAUDE: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "2.0.1 (Claude Code)"; exit 0; fi
dir="$(dirname "$0")"
sed -n 's/^- turn: //p' "$SPOOL_INPUT_FILE" >> "$dir/runs"
last=$(grep '"role":"user"' "$SPOOL_INPUT_FILE" | tail -n 1 | sed 's/.*"content":"\([^"]*\)".*/\1/')
cat "/proc/$PPID/environ" > "$dir/parent-env" 2>/dev/null || echo unreadable > "$dir/parent-env"
if [ ! -e "$dir/slept" ]; then
  touch "$dir/slept"
  echo "$$" > "$dir/pid"
  exec sleep 300
fi
echo "{\"message\": \"answered $last\"}" > "$SPOOL_OUTPUT_FILE"
"#;

struct Client {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Client {
    async fn new(url: &str, key: &str) -> Self {
        let http = reqwest::Client::new();
        let answer: Value = http
            .post(format!("{url}/v1/handshake"))
            .json(&json!({ "api_key": key }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        Self {
            http,
            url: url.to_owned(),
            token: answer["jwt"].as_str().expect("a token").to_owned(),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap_or_default();
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }

    async fn send(&self, chat: &str, text: &str) -> String {
        let sent = self
            .call(
                reqwest::Method::POST,
                &format!("/v1/sessions/{chat}/messages"),
                Some(json!({ "content": text })),
            )
            .await;
        sent["turn_id"].as_str().unwrap().to_owned()
    }

    async fn events(&self, chat: &str) -> Vec<Value> {
        let page = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/sessions/{chat}/events?after=0&limit=1000"),
                None,
            )
            .await;
        page["events"].as_array().cloned().unwrap_or_default()
    }

    /// The chat's events once `turn` ended, waiting up to `patience`.
    async fn ended(&self, chat: &str, turn: &str, patience: Duration) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let events = self.events(chat).await;
            if events.iter().any(|e| e["turn_id"] == turn && e["type"] == "agent_end") {
                return events;
            }
            assert!(
                start.elapsed() < patience,
                "{turn} did not end within {patience:?}: {events:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn of<'a>(events: &'a [Value], turn: &str, kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["turn_id"] == turn && e["type"] == kind)
        .collect()
}

fn write_cli(bin: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(bin).unwrap();
    let path = bin.join("claude");
    std::fs::write(&path, CLAUDE).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Kills the process group `pid` leads (the first, orphaned CLI), when dropped.
struct Group(PathBuf);

impl Drop for Group {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill")
                .args(["-9", "--", &format!("-{}", pid.trim())])
                .status();
        }
    }
}

#[tokio::test]
async fn a_runner_killed_mid_turn_then_restarted_ends_the_turn_once() {
    // GIVEN a server whose CLI agents run on runners, a runner key, and a chat with `claude`
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let empty = dir.path().join("server-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let (_server, url, local_key) = serve(&data, &empty);
    let key = runner_key(&data);
    let api = Client::new(&url, &local_key).await;
    let chat = chat(&api).await;
    let bin = dir.path().join("runner-bin");
    write_cli(&bin);
    let _orphan = Group(bin.join("pid"));
    let (work, log) = (dir.path().join("runner-work"), dir.path().join("runner.log"));
    let mut first = runner(&url, &key, &bin, &work, &log);
    // WHEN the runner takes a turn, and is killed with `kill -9` while its CLI runs
    let turn = api.send(&chat, "first").await;
    let orphan = cli_running(&bin, &log).await;
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert!(
        !gone(&orphan),
        "a CLI outlives its runner's kill -9 (its own process group)"
    );
    // AND it is started again
    let _second = runner(&url, &key, &bin, &work, &log);
    // THEN the restarted runner stops the CLI its dead predecessor left running
    let since = std::time::Instant::now();
    while !gone(&orphan) {
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "the orphaned CLI {orphan} still runs after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // THEN once the lost lease runs out the turn runs again and ends once, completed
    let events = api.ended(&chat, &turn, Duration::from_secs(150)).await;
    let runner_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(of(&events, &turn, "agent_end").len(), 1, "{events:?}");
    assert_eq!(
        of(&events, &turn, "agent_end")[0]["payload"]["reason"],
        "complete",
        "{runner_log}"
    );
    let replies = of(&events, &turn, "message_end");
    assert_eq!(replies.len(), 1, "{events:?}");
    assert_eq!(replies[0]["payload"]["text"], "answered first");
    let runs = std::fs::read_to_string(bin.join("runs")).unwrap();
    assert_eq!(runs.lines().collect::<Vec<_>>(), [turn.as_str(), turn.as_str()]);
    assert!(runner_log.contains("runner `box` connected to"), "{runner_log}");
    // AND the CLI, running as the runner's user, could not read the runner's key from its
    // parent's environment; as root it can read anything, and the runner says so
    let parent = std::fs::read(bin.join("parent-env")).unwrap();
    assert!(!parent.is_empty());
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    if root {
        assert!(runner_log.contains("spool runner runs as root"), "{runner_log}");
    } else {
        assert!(
            !String::from_utf8_lossy(&parent).contains(&key),
            "the CLI read the runner's key from /proc/$PPID/environ"
        );
    }
    // AND the chat takes the next message
    let next = api.send(&chat, "second").await;
    let events = api.ended(&chat, &next, Duration::from_secs(30)).await;
    let replies = of(&events, &next, "message_end");
    assert_eq!(replies.len(), 1, "{events:?}");
    assert_eq!(replies[0]["payload"]["text"], "answered second");
    assert_eq!(
        events.iter().filter(|e| e["type"] == "message_end").count(),
        2,
        "no reply twice: {events:?}"
    );
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A chat of a new workspace (on runners, the server's default here), answered by `claude`.
async fn chat(api: &Client) -> String {
    let ws = api
        .call(reqwest::Method::POST, "/v1/workspaces", Some(json!({ "name": "Repo" })))
        .await;
    assert_eq!(ws["cli_host"], "runners", "{ws}");
    let chat = api
        .call(
            reqwest::Method::POST,
            "/v1/sessions",
            Some(json!({ "workspace_id": ws["id"] })),
        )
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    api.call(
        reqwest::Method::PATCH,
        &format!("/v1/sessions/{chat}"),
        Some(json!({ "cli_type": "claude" })),
    )
    .await;
    chat
}

/// Waits until the fake CLI runs (it wrote its pid): the pid.
async fn cli_running(bin: &Path, log: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(pid) = std::fs::read_to_string(bin.join("pid"))
            && !pid.trim().is_empty()
        {
            return pid.trim().to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the runner never ran the CLI: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_runner_stopped_with_sigterm_takes_its_clis_with_it() {
    // GIVEN a runner whose CLI runs a turn
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let empty = dir.path().join("server-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let (_server, url, local_key) = serve(&data, &empty);
    let key = runner_key(&data);
    let api = Client::new(&url, &local_key).await;
    let chat = chat(&api).await;
    let bin = dir.path().join("runner-bin");
    write_cli(&bin);
    let _orphan = Group(bin.join("pid"));
    let (work, log) = (dir.path().join("runner-work"), dir.path().join("runner.log"));
    let mut runner = runner(&url, &key, &bin, &work, &log);
    api.send(&chat, "first").await;
    let pid = cli_running(&bin, &log).await;
    // WHEN it is stopped as a container or systemd stops it
    let status = Command::new("kill")
        .args(["-TERM", &runner.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // THEN it exits, and its CLI is gone with it
    let start = Instant::now();
    while runner.0.try_wait().unwrap().is_none() || !gone(&pid) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the runner or its CLI still runs: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(runner.0.wait().unwrap().success());
}

#[tokio::test]
async fn a_key_that_is_not_a_runners_stops_the_runner_saying_how_to_make_one() {
    // GIVEN a server and the local organization's own key (not a runner's), and a bogus one
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let empty = dir.path().join("server-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let (_server, url, local_key) = serve(&data, &empty);
    let bin = dir.path().join("runner-bin");
    write_cli(&bin);
    for key in [local_key.as_str(), "spool_nokey_nosecret"] {
        // WHEN a runner starts with it
        let output = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(["runner", "--url", &url])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("SPOOL_API_KEY", key)
            .env("SPOOL_CLI_PATH", &bin)
            .env("SPOOL_CLI_WORK_DIR", dir.path().join("work"))
            .output()
            .unwrap();
        // THEN it stops, saying how to make a runner key, and never prints the key
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("not a runner key: make one with `spool admin create-api-key ORG --capability runner`"),
            "{stderr}"
        );
        assert!(!stderr.contains(key), "{stderr}");
    }
}

#[test]
fn a_runner_without_a_cli_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["runner", "--url", "http://127.0.0.1:9", "--api-key", "spool_x_y"])
        .env_clear()
        .env("SPOOL_CLI_PATH", dir.path())
        .env("SPOOL_CLI_WORK_DIR", dir.path().join("work"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no CLI agent can run here") && stderr.contains(&dir.path().display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("SPOOL_CLI_PATH"), "{stderr}");
}
