//! The chat API under `spool serve`: latency of `POST /v1/sessions/{id}/messages`, and of agent
//! turns with the scripted runtime.
//!
//! Starts the real `spool` binary on the embedded backend (a temporary data directory, a free
//! loopback port), takes the local organization's key from its banner, exchanges it for a token
//! and posts messages: one client one after the other, then eight clients at once on eight chats.
//! Each message is appended as an event (with its seq) and its turn queued and run by the
//! worker in the same process, as in production (the agent's script answers "ok" at once).
//! Then, following a chat's events over SSE as a browser does: the time from `POST …/messages`
//! to the turn's `agent_start` arriving, and from `POST …/control {abort}` (sent once the answer
//! is streaming) to `agent_end{aborted}` arriving.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::protocol::percentile;

/// Latencies of one workload.
#[derive(Debug, Serialize, Deserialize)]
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

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<Value> {
    let response = http.post(url).json(body).send().await?;
    let status = response.status();
    let value: Value = response.json().await?;
    anyhow::ensure!(status.is_success(), "{url}: {status} {value}");
    Ok(value)
}

/// A signed-in client of the chat API.
#[derive(Clone)]
pub(crate) struct Client {
    /// Sends the token with every request.
    pub(crate) http: reqwest::Client,
    /// The server's origin.
    pub(crate) base: String,
}

impl Client {
    /// Exchanges `api_key` for a token at `base`.
    pub(crate) async fn sign_in(base: &str, api_key: &str) -> anyhow::Result<Self> {
        let url = format!("{base}/v1/handshake");
        let handshake = post(&reqwest::Client::new(), &url, &json!({ "api_key": api_key })).await?;
        let token = handshake["jwt"].as_str().context("no token")?;
        let mut bearer = reqwest::header::HeaderValue::try_from(format!("Bearer {token}"))?;
        bearer.set_sensitive(true);
        let headers = reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, bearer)]);
        Ok(Self {
            http: reqwest::Client::builder().default_headers(headers).build()?,
            base: base.to_owned(),
        })
    }

    /// `POST {base}{path}` with `body`; the JSON answer of a 2xx, else an error.
    pub(crate) async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        post(&self.http, &format!("{}{path}", self.base), body).await
    }

    /// A new workspace whose built-in agent runs `script` on the scripted runtime.
    pub(crate) async fn workspace(&self, script: &Value) -> anyhow::Result<String> {
        let ws = self.post("/v1/workspaces", &json!({ "name": "bench" })).await?;
        let ws = ws["id"].as_str().context("no workspace id")?.to_owned();
        let agents: Value = self
            .http
            .get(format!("{}/v1/workspaces/{ws}/agents", self.base))
            .send()
            .await?
            .json()
            .await?;
        let builtin = agents["agents"][0]["id"].as_str().context("no agent")?.to_owned();
        let change = json!({ "instruction": script.to_string(), "runtime": "scripted" });
        let response = self
            .http
            .patch(format!("{}/v1/agents/{builtin}", self.base))
            .json(&change)
            .send()
            .await?;
        anyhow::ensure!(response.status().is_success(), "cannot script the agent");
        Ok(ws)
    }

    /// A new chat in workspace `ws`; its id.
    pub(crate) async fn chat(&self, ws: &str) -> anyhow::Result<String> {
        let session = self
            .post("/v1/sessions", &json!({ "title": "bench", "workspace_id": ws }))
            .await?;
        Ok(session["id"].as_str().context("no session id")?.to_owned())
    }
}

/// Runs the workloads against `spool` (the binary) with `messages` messages each.
pub(crate) async fn run(spool: &Path, messages: usize) -> anyhow::Result<Vec<Latency>> {
    let server = crate::protocol::Target::spool(spool, true)?;
    let key = server.api_key.clone().context("no API key in the banner")?;
    let client = Client::sign_in(&server.origin, &key).await?;
    let Client { http, base } = client.clone();
    // A workspace whose built-in agent answers at once, and one that answers slowly.
    let quick = client
        .workspace(&json!({ "word_delay_ms": 0, "default": [{ "say": "ok" }] }))
        .await?;
    let words = "word ".repeat(400);
    let slow = client
        .workspace(&json!({ "word_delay_ms": 20, "default": [{ "say": words }] }))
        .await?;
    let new_session = |ws: String| {
        let client = client.clone();
        async move { client.chat(&ws).await }
    };

    let mut out = Vec::new();
    // Turns first, followed over SSE, while no backlog of queued turns loads the worker.
    out.push(turn_start(&http, &base, &new_session(quick.clone()).await?, messages / 10).await?);
    out.push(abort_to_end(&http, &base, &new_session(slow.clone()).await?, messages / 40).await?);
    // One client, one message after the other.
    let session = new_session(quick.clone()).await?;
    let url = format!("{base}/v1/sessions/{session}/messages");
    // Messages come faster than turns end: each queues behind the pending turn.
    let body = json!({ "content": "x".repeat(100), "on_busy": "enqueue" });
    for _ in 0..50 {
        post(&http, &url, &body).await?; // warm-up
    }
    let started = Instant::now();
    let mut samples = Vec::with_capacity(messages);
    for _ in 0..messages {
        let t = Instant::now();
        post(&http, &url, &body).await?;
        samples.push(t.elapsed());
    }
    out.push(latency("POST messages, 1 client", samples, started.elapsed()));

    // Eight clients at once, each on its own chat.
    let mut chats = Vec::new();
    for _ in 0..8 {
        chats.push(new_session(quick.clone()).await?);
    }
    let started = Instant::now();
    let per_client = messages / 8;
    let clients = chats.into_iter().map(|chat| {
        let (http, body) = (http.clone(), body.clone());
        let url = format!("{base}/v1/sessions/{chat}/messages");
        tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per_client);
            for _ in 0..per_client {
                let t = Instant::now();
                post(&http, &url, &body).await?;
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

/// A chat's events as the SSE route sends them.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn open(http: &reqwest::Client, base: &str, chat: &str) -> anyhow::Result<Self> {
        let response = http.get(format!("{base}/v1/sessions/{chat}/stream")).send().await?;
        anyhow::ensure!(response.status().is_success(), "SSE: {}", response.status());
        Ok(Self {
            response,
            buffer: String::new(),
        })
    }

    /// The next event (its JSON), within 30 s.
    async fn next(&mut self) -> anyhow::Result<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let data: String = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if block.lines().any(|l| l.starts_with("id:")) && !data.is_empty() {
                    return Ok(serde_json::from_str(&data)?);
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk())
                .await
                .context("no event within 30 s")??
                .context("the event stream ended")?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Reads events until one of `turn` has type `kind`.
    async fn until(&mut self, turn: &str, kind: &str) -> anyhow::Result<Value> {
        loop {
            let event = self.next().await?;
            if event["turn_id"] == turn && event["type"] == kind {
                return Ok(event);
            }
        }
    }
}

/// `POST …/messages` to the turn's `agent_start` on the SSE stream, `count` times.
async fn turn_start(http: &reqwest::Client, base: &str, chat: &str, count: usize) -> anyhow::Result<Latency> {
    let mut events = Events::open(http, base, chat).await?;
    let url = format!("{base}/v1/sessions/{chat}/messages");
    let mut samples = Vec::with_capacity(count);
    let started = Instant::now();
    for i in 0..count + 5 {
        let t = Instant::now();
        let sent = post(http, &url, &json!({ "content": "hello" })).await?;
        let turn = sent["turn_id"].as_str().context("no turn")?.to_owned();
        events.until(&turn, "agent_start").await?;
        if i >= 5 {
            samples.push(t.elapsed());
        }
        events.until(&turn, "agent_end").await?;
    }
    Ok(latency(
        "message to agent_start (SSE), scripted",
        samples,
        started.elapsed(),
    ))
}

/// `POST …/control {abort}` (once the answer streams) to `agent_end{aborted}` on the SSE
/// stream, `count` times.
async fn abort_to_end(http: &reqwest::Client, base: &str, chat: &str, count: usize) -> anyhow::Result<Latency> {
    let mut events = Events::open(http, base, chat).await?;
    let messages = format!("{base}/v1/sessions/{chat}/messages");
    let control = format!("{base}/v1/sessions/{chat}/control");
    let mut samples = Vec::with_capacity(count);
    let started = Instant::now();
    for i in 0..count + 2 {
        let sent = post(http, &messages, &json!({ "content": "talk" })).await?;
        let turn = sent["turn_id"].as_str().context("no turn")?.to_owned();
        events.until(&turn, "message_update").await?;
        let t = Instant::now();
        post(http, &control, &json!({ "action": "abort" })).await?;
        let end = events.until(&turn, "agent_end").await?;
        anyhow::ensure!(end["payload"]["reason"] == "aborted", "not aborted: {end}");
        if i >= 2 {
            samples.push(t.elapsed());
        }
    }
    Ok(latency(
        "abort to agent_end{aborted} (SSE), scripted",
        samples,
        started.elapsed(),
    ))
}
