//! The chat API under `spool serve`: latency of `POST /v1/sessions/{id}/messages`.
//!
//! Starts the real `spool` binary on the embedded backend (a temporary data directory, a free
//! loopback port), takes the local organization's key from its banner, exchanges it for a token
//! and posts messages: one client one after the other, then eight clients at once on eight chats.
//! Each message is appended as an event (with its seq) and its turn queued, as in production.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::Serialize;
use serde_json::{Value, json};

/// Latencies of one workload.
#[derive(Debug, Serialize)]
pub(crate) struct Latency {
    /// The workload.
    pub(crate) workload: String,
    /// Requests measured.
    pub(crate) requests: usize,
    /// Median, in milliseconds.
    pub(crate) p50_ms: f64,
    /// 99th percentile, in milliseconds.
    pub(crate) p99_ms: f64,
    /// Requests per second over the whole workload.
    pub(crate) per_s: f64,
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn latency(workload: &str, mut samples: Vec<Duration>, elapsed: Duration) -> Latency {
    samples.sort();
    Latency {
        workload: workload.to_owned(),
        requests: samples.len(),
        p50_ms: percentile(&samples, 0.50),
        p99_ms: percentile(&samples, 0.99),
        per_s: samples.len() as f64 / elapsed.as_secs_f64(),
    }
}

async fn post(http: &reqwest::Client, url: &str, token: &str, body: &Value) -> anyhow::Result<Value> {
    let response = http.post(url).bearer_auth(token).json(body).send().await?;
    let status = response.status();
    let value: Value = response.json().await?;
    anyhow::ensure!(status.is_success(), "{url}: {status} {value}");
    Ok(value)
}

/// Runs the workloads against `spool` (the binary) with `messages` messages each.
pub(crate) async fn run(spool: &Path, messages: usize) -> anyhow::Result<Vec<Latency>> {
    let dir = tempfile::tempdir()?;
    let mut child = Command::new(spool)
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| {
            format!(
                "cannot start {}; build it with cargo build --release -p spool-local",
                spool.display()
            )
        })?;
    let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
    let server = Server(child);
    let banner = lines.next().context("no banner")??;
    let key_line = lines.next().context("no key line")??;
    let base = banner
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .context("no URL in the banner")?
        .to_owned();
    let key = key_line
        .split_whitespace()
        .find(|w| w.starts_with("spool_"))
        .context("no API key in the banner")?
        .to_owned();

    let http = reqwest::Client::new();
    let handshake = post(&http, &format!("{base}/v1/handshake"), "", &json!({ "api_key": key })).await?;
    let token = handshake["jwt"].as_str().context("no token")?.to_owned();
    let new_session = || {
        let (http, base, token) = (http.clone(), base.clone(), token.clone());
        async move {
            let session = post(
                &http,
                &format!("{base}/v1/sessions"),
                &token,
                &json!({ "title": "bench" }),
            )
            .await?;
            anyhow::Ok(session["id"].as_str().context("no session id")?.to_owned())
        }
    };

    let mut out = Vec::new();
    // One client, one message after the other.
    let session = new_session().await?;
    let url = format!("{base}/v1/sessions/{session}/messages");
    // The chats have no worker here: each message queues behind the pending turn.
    let body = json!({ "content": "x".repeat(100), "on_busy": "enqueue" });
    for _ in 0..50 {
        post(&http, &url, &token, &body).await?; // warm-up
    }
    let started = Instant::now();
    let mut samples = Vec::with_capacity(messages);
    for _ in 0..messages {
        let t = Instant::now();
        post(&http, &url, &token, &body).await?;
        samples.push(t.elapsed());
    }
    out.push(latency("POST messages, 1 client", samples, started.elapsed()));

    // Eight clients at once, each on its own chat.
    let mut chats = Vec::new();
    for _ in 0..8 {
        chats.push(new_session().await?);
    }
    let started = Instant::now();
    let per_client = messages / 8;
    let clients = chats.into_iter().map(|chat| {
        let (http, token, body) = (http.clone(), token.clone(), body.clone());
        let url = format!("{base}/v1/sessions/{chat}/messages");
        tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per_client);
            for _ in 0..per_client {
                let t = Instant::now();
                post(&http, &url, &token, &body).await?;
                samples.push(t.elapsed());
            }
            anyhow::Ok(samples)
        })
    });
    let mut samples = Vec::new();
    for client in futures_util::future::join_all(clients).await {
        samples.extend(client??);
    }
    out.push(latency(
        "POST messages, 8 clients on 8 chats",
        samples,
        started.elapsed(),
    ));
    drop(server);
    Ok(out)
}
