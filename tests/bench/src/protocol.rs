//! The Durable Streams protocol over HTTP, side by side: `spool serve` (embedded store, durable
//! on disk), the reference Node server `@durable-streams/server` in its in-memory and its
//! file-backed mode, and Electric's Rust server (`durable-streams-server` from the
//! `durable-streams` crate, in its default durable WAL mode), on the same workloads in the same
//! run.
//!
//! Every workload checks what it measured: appends are acknowledged, concurrent writers' messages
//! are all there in each writer's order, reads return every message, live readers get every
//! message once.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A server under test, stopped when dropped.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    /// The server's origin (`http://127.0.0.1:port`).
    pub(crate) origin: String,
    /// Where streams live: `{base}/bench/…`.
    base: String,
    /// The API key `spool serve` printed (with authorization on).
    pub(crate) api_key: Option<String>,
    /// From spawning the process to its printing the URL it serves on (it listens by then).
    pub(crate) start_to_ready: Duration,
    /// Its output after the URL line.
    output: std::sync::mpsc::Receiver<String>,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Target {
    /// `spool serve` on the embedded store in a temporary directory: without authorization (as
    /// the conformance suite runs it), or with it, keeping the API key it prints.
    pub(crate) fn spool(bin: &Path, authorized: bool) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut command = Command::new(bin);
        command
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .env("RUST_LOG", "warn")
            // Throughput is measured, not the abuse limits.
            .env("SPOOL_RATE_LIMITS", "off");
        if !authorized {
            command.arg("--no-auth");
        }
        let mut target = Self::start("spool", command, dir, "/v1/stream")?;
        if authorized {
            target.api_key = Some(target.banner_word("spool_")?);
        }
        Ok(target)
    }

    /// `spool serve --backend aws` on the emulator that `env_file` describes, signed in.
    pub(crate) fn spool_aws(bin: &Path, env_file: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut command = Command::new(bin);
        command
            .args(["serve", "--backend", "aws", "--addr", "127.0.0.1:0", "--env-file"])
            .arg(env_file)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("RUST_LOG", "warn")
            .env("SPOOL_RATE_LIMITS", "off");
        let mut target = Self::start("spool (aws)", command, dir, "/v1/stream")?;
        target.api_key = Some(target.banner_word("spool_")?);
        Ok(target)
    }

    /// The reference server (`tests/bench/reference/server.mjs`), file-backed when `file` is set.
    pub(crate) fn reference(script: &Path, file: bool) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut command = Command::new("node");
        command.arg(script);
        if file {
            command.arg(dir.path().join("streams"));
        }
        let name = if file { "reference (file)" } else { "reference (memory)" };
        Self::start(name, command, dir, "/v1/stream")
    }

    /// Electric's Rust Durable Streams server (`durable-streams-server`, built by `make bench`),
    /// durable (its default WAL mode) in a temporary directory; streams at `/{path}`. It prints
    /// the port it is given, not one it chose, so a free port is picked for it.
    pub(crate) fn electric(bin: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut command = Command::new(bin);
        command
            .args(["--port", &port.to_string(), "--data-dir"])
            .arg(dir.path().join("data"))
            .env("RUST_LOG", "warn");
        Self::start("electric (rust)", command, dir, "")
    }

    fn start(name: &'static str, mut command: Command, dir: tempfile::TempDir, prefix: &str) -> anyhow::Result<Self> {
        let started = Instant::now();
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {name} ({command:?})"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .with_context(|| format!("{name} exited before it printed its URL"))??;
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                break url.trim_end_matches('/').to_owned();
            }
        };
        let start_to_ready = started.elapsed();
        // Keep reading its output (so it never blocks on a full pipe), handing on what it says.
        let (said, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = said.send(line);
            }
        });
        Ok(Self {
            name,
            base: format!("{url}{prefix}"),
            origin: url,
            api_key: None,
            start_to_ready,
            output,
            child,
            _dir: dir,
        })
    }

    /// The first word starting with `prefix` in what the server prints next.
    fn banner_word(&self, prefix: &str) -> anyhow::Result<String> {
        loop {
            let line = self
                .output
                .recv_timeout(Duration::from_secs(10))
                .with_context(|| format!("{} printed no `{prefix}…`", self.name))?;
            if let Some(word) = line.split_whitespace().find(|w| w.starts_with(prefix)) {
                return Ok(word.to_owned());
            }
        }
    }

    /// The process's resident memory now (Linux `/proc`), in MB.
    pub(crate) fn resident_mb(&self) -> Option<f64> {
        self.memory_mb("VmRSS:")
    }

    /// The process's peak resident memory so far, in MB.
    pub(crate) fn peak_resident_mb(&self) -> Option<f64> {
        self.memory_mb("VmHWM:")
    }

    fn memory_mb(&self, field: &str) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb / 1024.0)
    }

    fn stream(&self, workload: &str) -> String {
        format!("{}/bench/{workload}-{}", self.base, uuid::Uuid::new_v4().simple())
    }
}

/// One target's figures.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ProtocolFigures {
    pub(crate) target: String,
    /// Spawn to listening, and resident memory after a second idle (before any workload).
    pub(crate) start_to_ready_ms: f64,
    pub(crate) idle_rss_mb: f64,
    pub(crate) sequential_appends_per_s: f64,
    pub(crate) concurrent_appends_per_s: f64,
    pub(crate) catch_up_small_mb_per_s: f64,
    pub(crate) catch_up_large_mb_per_s: f64,
    pub(crate) live_p50_ms: f64,
    pub(crate) live_p99_ms: f64,
    pub(crate) fan_out_p50_ms: f64,
    pub(crate) fan_out_p99_ms: f64,
    pub(crate) resume_p50_ms: f64,
    pub(crate) resume_p99_ms: f64,
}

/// How much each workload does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Sizes {
    pub(crate) appends: u64,
    pub(crate) small_read: u64,
    pub(crate) large_read: u64,
    pub(crate) live_messages: u64,
    pub(crate) fan_out_readers: usize,
    pub(crate) resume_stream: u64,
    pub(crate) resume_readers: usize,
}

const WRITERS: u64 = 8;
/// Appends per second of the live workloads.
const LIVE_RATE: u64 = 50;
/// The longest any single step may take before the workload is declared stuck.
const STEP: Duration = Duration::from_secs(60);

/// A 100-byte JSON message.
fn message(fields: &str) -> String {
    let head = format!("{{{fields},\"pad\":\"");
    format!("{head}{}\"}}", "x".repeat(100usize.saturating_sub(head.len() + 2)))
}

pub(crate) async fn run(target: &Target, sizes: &Sizes) -> anyhow::Result<ProtocolFigures> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
    let say = |step: &str| eprintln!("[{}] {step}", target.name);
    let mut f = ProtocolFigures {
        target: target.name.to_owned(),
        start_to_ready_ms: target.start_to_ready.as_secs_f64() * 1000.0,
        ..ProtocolFigures::default()
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    f.idle_rss_mb = target.resident_mb().unwrap_or(f64::NAN);

    say("sequential appends");
    let url = target.stream("sequential");
    create(&http, &url).await?;
    let started = Instant::now();
    for i in 0..sizes.appends {
        append(&http, &url, message(&format!("\"i\":{i}"))).await?;
    }
    f.sequential_appends_per_s = sizes.appends as f64 / started.elapsed().as_secs_f64();

    say("8 concurrent writers, one stream");
    f.concurrent_appends_per_s = concurrent(&http, target, sizes.appends).await?;

    for (messages, field) in [
        (sizes.small_read, &mut f.catch_up_small_mb_per_s),
        (sizes.large_read, &mut f.catch_up_large_mb_per_s),
    ] {
        say(&format!("catch-up read of {messages} messages"));
        let url = target.stream("catch-up");
        create(&http, &url).await?;
        fill(&http, &url, messages, 1000).await?;
        let started = Instant::now();
        let (bodies, _) = read_all(&http, &url, "-1").await?;
        let seconds = started.elapsed().as_secs_f64();
        let bytes: usize = bodies.iter().map(Vec::len).sum();
        ensure!(count(&bodies)? == messages, "{}: the read missed messages", target.name);
        *field = bytes as f64 / 1e6 / seconds;
    }

    say("live SSE latency at 50 appends/s");
    let (p50, p99) = live(&http, target, 1, sizes.live_messages).await?;
    (f.live_p50_ms, f.live_p99_ms) = (p50, p99);

    say(&format!("fan-out to {} SSE readers", sizes.fan_out_readers));
    let (p50, p99) = live(&http, target, sizes.fan_out_readers, sizes.live_messages.min(100)).await?;
    (f.fan_out_p50_ms, f.fan_out_p99_ms) = (p50, p99);

    say(&format!(
        "{} readers resuming at random offsets of {} messages",
        sizes.resume_readers, sizes.resume_stream
    ));
    let (p50, p99) = resume(&http, target, sizes.resume_stream, sizes.resume_readers).await?;
    (f.resume_p50_ms, f.resume_p99_ms) = (p50, p99);
    Ok(f)
}

async fn create(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let response = http.put(url).header("content-type", "application/json").send().await?;
    ensure!(response.status().is_success(), "PUT {url}: {}", response.status());
    Ok(())
}

/// Appends `body` (one JSON value, or an array of them); returns the next offset.
async fn append(http: &reqwest::Client, url: &str, body: String) -> anyhow::Result<String> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    ensure!(response.status().is_success(), "POST {url}: {}", response.status());
    Ok(header(&response, "stream-next-offset").unwrap_or_default())
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response.headers().get(name)?.to_str().ok().map(str::to_owned)
}

/// Appends `messages` messages in batches of `batch`; returns the offset after each batch.
async fn fill(http: &reqwest::Client, url: &str, messages: u64, batch: u64) -> anyhow::Result<Vec<String>> {
    let mut offsets = Vec::new();
    let mut i = 0;
    while i < messages {
        let n = batch.min(messages - i);
        let body: Vec<String> = (i..i + n).map(|k| message(&format!("\"i\":{k}"))).collect();
        offsets.push(append(http, url, format!("[{}]", body.join(","))).await?);
        i += n;
    }
    Ok(offsets)
}

/// Reads from `offset` (the protocol's offsets are URL-safe) to the end: the bodies, and how
/// many requests it took.
pub(crate) async fn read_all(http: &reqwest::Client, url: &str, offset: &str) -> anyhow::Result<(Vec<Vec<u8>>, usize)> {
    let mut offset = offset.to_owned();
    let mut bodies = Vec::new();
    for requests in 1.. {
        let response = tokio::time::timeout(STEP, http.get(format!("{url}?offset={offset}")).send()).await??;
        ensure!(response.status().is_success(), "GET {url}: {}", response.status());
        let next = header(&response, "stream-next-offset").context("no Stream-Next-Offset")?;
        let done = header(&response, "stream-up-to-date").as_deref() == Some("true");
        bodies.push(response.bytes().await?.to_vec());
        if done || next == offset {
            return Ok((bodies, requests));
        }
        offset = next;
    }
    unreachable!()
}

/// Messages in JSON-array bodies.
pub(crate) fn count(bodies: &[Vec<u8>]) -> anyhow::Result<u64> {
    let mut n = 0;
    for body in bodies.iter().filter(|b| !b.is_empty()) {
        n += serde_json::from_slice::<Vec<serde::de::IgnoredAny>>(body)?.len() as u64;
    }
    Ok(n)
}

async fn concurrent(http: &reqwest::Client, target: &Target, appends: u64) -> anyhow::Result<f64> {
    let url = target.stream("concurrent");
    create(http, &url).await?;
    let per_writer = appends / WRITERS;
    let started = Instant::now();
    let writers = (0..WRITERS).map(|w| {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            for k in 0..per_writer {
                append(&http, &url, message(&format!("\"w\":{w},\"k\":{k}"))).await?;
            }
            anyhow::Ok(())
        })
    });
    for writer in futures_util::future::join_all(writers).await {
        writer??;
    }
    let per_s = (per_writer * WRITERS) as f64 / started.elapsed().as_secs_f64();
    // Every message is there once, and each writer's in its order.
    let (bodies, _) = read_all(http, &url, "-1").await?;
    let mut next = vec![0u64; WRITERS as usize];
    for body in bodies.iter().filter(|b| !b.is_empty()) {
        for m in serde_json::from_slice::<Vec<Value>>(body)? {
            let (w, k) = (m["w"].as_u64().unwrap_or(u64::MAX), m["k"].as_u64().unwrap_or(u64::MAX));
            let expected = next.get_mut(w as usize).context("an unknown writer")?;
            ensure!(
                k == *expected,
                "{}: writer {w} wrote {k} after {}",
                target.name,
                *expected
            );
            *expected += 1;
        }
    }
    ensure!(
        next.iter().all(|&n| n == per_writer),
        "{}: messages are missing: {next:?}",
        target.name
    );
    Ok(per_s)
}

/// `readers` SSE readers follow a stream from its end while one writer appends `messages` at
/// 50 a second; the latency of every message at every reader (p50, p99, in ms).
async fn live(http: &reqwest::Client, target: &Target, readers: usize, messages: u64) -> anyhow::Result<(f64, f64)> {
    let url = target.stream("live");
    create(http, &url).await?;
    let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let mut tasks = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(readers);
    for _ in 0..readers {
        let (http, url, sent, ready) = (http.clone(), url.clone(), sent.clone(), ready_tx.clone());
        tasks.push(tokio::spawn(async move {
            follow(&http, &url, messages, &sent, ready).await
        }));
    }
    for _ in 0..readers {
        tokio::time::timeout(STEP, ready_rx.recv())
            .await?
            .context("a reader never connected")?;
    }
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / LIVE_RATE));
    for i in 0..messages {
        tick.tick().await;
        sent.lock().expect("unpoisoned").insert(i, Instant::now());
        append(http, &url, message(&format!("\"i\":{i}"))).await?;
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(tokio::time::timeout(STEP, task).await???);
    }
    samples.sort();
    Ok((percentile(&samples, 0.5), percentile(&samples, 0.99)))
}

/// One SSE reader from the stream's end until it has `messages` messages; the latency of each.
async fn follow(
    http: &reqwest::Client,
    url: &str,
    messages: u64,
    sent: &Mutex<HashMap<u64, Instant>>,
    ready: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<Vec<Duration>> {
    let mut response = http.get(format!("{url}?offset=now&live=sse")).send().await?;
    ensure!(response.status().is_success(), "SSE {url}: {}", response.status());
    let mut buffer = Vec::new();
    let (mut event, mut data) = (String::new(), String::new());
    let mut latencies = Vec::new();
    let mut ready = Some(ready);
    let mut seen = 0u64;
    while seen < messages {
        let chunk = tokio::time::timeout(STEP, response.chunk())
            .await??
            .context("the SSE response ended early")?;
        let arrived = Instant::now();
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(value) = line.strip_prefix("event:") {
                event = value.trim().to_owned();
            } else if let Some(value) = line.strip_prefix("data:") {
                data.push_str(value.strip_prefix(' ').unwrap_or(value));
            } else if line.is_empty() {
                if event == "control" {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(()).await;
                    }
                } else if event == "data" {
                    for m in serde_json::from_str::<Vec<Value>>(&data)? {
                        let i = m["i"].as_u64().context("a message without i")?;
                        let at = *sent
                            .lock()
                            .expect("unpoisoned")
                            .get(&i)
                            .context("a message never sent")?;
                        latencies.push(arrived - at);
                        seen += 1;
                    }
                }
                event.clear();
                data.clear();
            }
        }
    }
    Ok(latencies)
}

/// `readers` readers at once, each catching up from a random offset of a `messages`-message
/// stream (one of the offsets its writer was given, every 100 messages); the time each took.
async fn resume(http: &reqwest::Client, target: &Target, messages: u64, readers: usize) -> anyhow::Result<(f64, f64)> {
    let url = target.stream("resume");
    create(http, &url).await?;
    let offsets = fill(http, &url, messages, 100).await?;
    if offsets.is_empty() {
        bail!("no offsets");
    }
    let picks: Vec<(String, u64)> = pick(readers, offsets.len() as u64)
        .map(|k| (offsets[k as usize].clone(), messages - (k + 1) * 100))
        .collect();
    let tasks = picks.into_iter().map(|(offset, expected)| {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let (bodies, _) = read_all(&http, &url, &offset).await?;
            let took = started.elapsed();
            ensure!(count(&bodies)? == expected, "a resumed read got the wrong messages");
            anyhow::Ok(took)
        })
    });
    let mut samples = Vec::new();
    for task in futures_util::future::join_all(tasks).await {
        samples.push(task??);
    }
    samples.sort();
    Ok((percentile(&samples, 0.5), percentile(&samples, 0.99)))
}

/// `n` numbers below `below`, a fixed pseudo-random choice (an LCG): the same in every run and
/// for every server.
pub(crate) fn pick(n: usize, below: u64) -> impl Iterator<Item = u64> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..n).map(move |_| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (state >> 33) % below.max(1)
    })
}

/// The `p` quantile of sorted samples, in milliseconds (0 for none).
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}
