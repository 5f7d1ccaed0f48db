//! What the kill -9 chaos test shares with itself across its phases: a `spool serve` it kills
//! and restarts, a client that retries as browsers and SDKs do, and readers of the chats.

use std::{
    collections::BTreeSet,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::sync::RwLock;

/// A `spool serve` on a fixed address and data directory.
pub(crate) struct Server {
    child: Child,
}

impl Server {
    pub(crate) fn start(data: &Path, addr: &str) -> (Self, Option<String>) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(["serve", "--addr", addr, "--data-dir"])
            .arg(data)
            .env_remove("SPOOL_WEB_DIR")
            .env("RUST_LOG", "error")
            .env("SPOOL_RATE_LIMITS", "off")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn spool");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut key = None;
        for _ in 0..3 {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if key.is_none() {
                key = line
                    .split_whitespace()
                    .find(|w| w.starts_with("spool_"))
                    .map(str::to_owned);
            }
        }
        (Self { child }, key)
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A new key of the local organization for an outside agent (capability `agent`), made by
/// `spool admin` beside the running server.
pub(crate) fn agent_key(data: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args([
            "admin",
            "create-api-key",
            "local",
            "--capability",
            "agent",
            "--data-dir",
        ])
        .arg(data)
        .env("RUST_LOG", "error")
        .output()
        .expect("run spool admin");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let created: Value = serde_json::from_slice(&output.stdout).expect("the key as JSON");
    created["api_key"].as_str().expect("the key").to_owned()
}

/// HTTP requests sent, retries included.
pub(crate) static ATTEMPTS: AtomicU64 = AtomicU64::new(0);

/// A client that retries what the server could not answer (it was down, or died mid-request)
/// with the same request, as a browser or an SDK does; `None` after a minute of trying.
pub(crate) async fn call(
    http: &reqwest::Client,
    base: &RwLock<String>,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    for _ in 0..600 {
        ATTEMPTS.fetch_add(1, Ordering::Relaxed);
        let url = format!("{}{path}", base.read().await);
        let mut request = http
            .request(method.clone(), url)
            .bearer_auth(token)
            .timeout(Duration::from_secs(10));
        if let Some(body) = body {
            request = request.json(body);
        }
        match request.send().await {
            Ok(response) if response.status().is_server_error() => {}
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.json().await.unwrap_or(Value::Null);
                return Some((status, body));
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

pub(crate) async fn events(http: &reqwest::Client, base: &RwLock<String>, token: &str, chat: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let (_, page) = call(
            http,
            base,
            reqwest::Method::GET,
            &format!("/v1/sessions/{chat}/events?after={after}&limit=1000"),
            token,
            None,
        )
        .await
        .expect("the events of a chat");
        let batch = page["events"].as_array().cloned().unwrap_or_default();
        after = page["last_seq"].as_u64().unwrap_or(after);
        let done = batch.is_empty() || page["up_to_date"] == true;
        all.extend(batch);
        if done {
            return all;
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Figures {
    pub(crate) requests: AtomicU64,
    pub(crate) acknowledged: AtomicU64,
    pub(crate) answers: AtomicU64,
}

pub(crate) fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// An event's `ts` (RFC 3339) in ms since the Unix epoch.
pub(crate) fn ts_ms(ts: &str) -> Option<i64> {
    let at = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Each chat's last seq.
pub(crate) async fn tails(http: &reqwest::Client, base: &RwLock<String>, token: &str, chats: &[String]) -> Vec<u64> {
    let mut out = Vec::new();
    for chat in chats {
        let (_, page) = call(
            http,
            base,
            reqwest::Method::GET,
            &format!("/v1/sessions/{chat}/events?limit=1"),
            token,
            None,
        )
        .await
        .expect("a chat's last event");
        out.push(page["last_seq"].as_u64().unwrap_or(0));
    }
    out
}

/// How long after now until an agent writes in any of the chats past `tails` (the worker is
/// back at work); `None` if nothing runs for 30 s (every chat may be waiting on a person).
pub(crate) async fn resumed(
    http: &reqwest::Client,
    base: &RwLock<String>,
    token: &str,
    chats: &[String],
    tails: &[u64],
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        for (chat, tail) in chats.iter().zip(tails) {
            let path = format!("/v1/sessions/{chat}/events?after={tail}&limit=1000");
            if let Some((200, page)) = call(http, base, reqwest::Method::GET, &path, token, None).await
                && page["events"]
                    .as_array()
                    .is_some_and(|events| events.iter().any(|e| e["kind"] == "harness"))
            {
                return Some(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Answers the chat's open questions (the turns' `ask_question` events without an answer).
pub(crate) async fn answer_open_questions(
    http: &reqwest::Client,
    base: &RwLock<String>,
    token: &str,
    chat: &str,
    figures: &Figures,
) {
    let events = events(http, base, token, chat).await;
    let answered: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["type"] == "question_answered")
        .filter_map(|e| e["payload"]["question_id"].as_str())
        .collect();
    for asked in events.iter().filter(|e| e["type"] == "ask_question") {
        let Some(question) = asked["payload"]["question_id"].as_str() else {
            continue;
        };
        if answered.contains(question) {
            continue;
        }
        let body = json!({ "question_id": question, "answer": "the blue one" });
        if let Some((status, _)) = call(
            http,
            base,
            reqwest::Method::POST,
            &format!("/v1/sessions/{chat}/question"),
            token,
            Some(&body),
        )
        .await
            && status == 202
        {
            figures.answers.fetch_add(1, Ordering::SeqCst);
        }
    }
}
