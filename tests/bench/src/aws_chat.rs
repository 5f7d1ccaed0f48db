//! Chat on the AWS backend, over the emulator: what each thousand chat events costs in DynamoDB,
//! S3 and SQS requests, counted in the SDK.
//!
//! Spool runs in this process exactly as `spool serve --backend aws` runs it
//! ([`spool_local::app`]: the API, the stream routes, the worker taking turns from the SQS FIFO
//! queue and sealing jobs from the maintenance queue), its SDK clients carrying a
//! [`RequestCounter`]. A client drives it over loopback HTTP as the web UI does, in phases
//! counted apart:
//!
//! 1. **Writing**: `turns` messages, round three chats, each answered by the scripted agent
//!    calling a tool (the workspace's context) and then streaming a 300-word answer at 50 words
//!    a second (the engine writes an update at most every 100 ms), one after the other. The worker seals full pages as they fill and each
//!    chat's last page once the chat has been idle (30 s here, 10 s with a turn a chat, 10 minutes deployed), so this
//!    counts sealing too. The benchmark waits for each turn's `agent_end` through a log of its own
//!    that is not counted.
//! 2. **Catching up**: one reader reads a whole chat from its start over the Durable Streams
//!    route, from the sealed pages.
//! 3. **An idle live reader**: one SSE connection to a chat, open 15 s with nothing new.
//! 4. **The naive designs** ([`crate::naive`]): the same turns' events, written and read the
//!    naive ways.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool_aws::RequestCounter;
use spool_chat::session::Session;
use spool_log::{
    port::StreamReader,
    stream::{Offset, Position, StreamPath},
};
use spool_platform::{Backend, Config};

use crate::chat::Client;

/// What one phase sent, scaled to a unit of work (a thousand events, a reader-minute).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Usage {
    /// Requests by `"Service Operation"`.
    pub(crate) requests: BTreeMap<String, f64>,
    /// DynamoDB read capacity units consumed, as DynamoDB reports them.
    pub(crate) read_units: f64,
    /// DynamoDB write capacity units consumed, as DynamoDB reports them.
    pub(crate) write_units: f64,
    /// DynamoDB capacity units (read or write) by operation.
    #[serde(default)]
    pub(crate) units_by_operation: BTreeMap<String, f64>,
    /// DynamoDB requests by operation and the shape of the keys they address.
    #[serde(default)]
    pub(crate) targets: BTreeMap<String, f64>,
    /// The capacity units they consumed, by the same.
    #[serde(default)]
    pub(crate) target_units: BTreeMap<String, f64>,
}

impl Usage {
    /// What `counter` counted, divided by `per`.
    pub(crate) fn of(counter: &RequestCounter, per: f64) -> Self {
        let requests = counter
            .snapshot()
            .into_iter()
            .map(|((service, op), n)| (format!("{service} {op}"), n as f64 / per))
            .collect();
        let (read, write) = counter.capacity_units();
        Self {
            requests,
            read_units: read / per,
            write_units: write / per,
            units_by_operation: counter
                .capacity_by_operation()
                .into_iter()
                .map(|(op, units)| (op, units / per))
                .collect(),
            targets: counter
                .targets()
                .into_iter()
                .map(|(target, n)| (target, n as f64 / per))
                .collect(),
            target_units: counter
                .target_units()
                .into_iter()
                .map(|(target, units)| (target, units / per))
                .collect(),
        }
    }

    /// Requests to `service` whose operation satisfies `filter`.
    pub(crate) fn requests(&self, service: &str, filter: impl Fn(&str) -> bool) -> f64 {
        self.requests
            .iter()
            .filter_map(|(key, n)| {
                let (s, op) = key.split_once(' ')?;
                (s.eq_ignore_ascii_case(service) && filter(op)).then_some(*n)
            })
            .sum()
    }
}

/// The chat workload's figures.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct AwsChat {
    pub(crate) turns: u64,
    /// Events the turns wrote to the chat's stream.
    pub(crate) events: u64,
    /// Their mean size in bytes.
    pub(crate) mean_event_bytes: f64,
    /// Per 1,000 events: the API taking the messages and the worker running the turns and
    /// sealing them.
    pub(crate) write: Usage,
    /// Per 1,000 events read: one reader catching up on the whole chat from its sealed page.
    pub(crate) catch_up: Usage,
    /// Per minute: one live reader (SSE) with nothing new to read.
    pub(crate) idle_reader_minute: Usage,
    /// Per 1,000 events: Lambda invocations of the API (one per request) and of the worker (one
    /// per turn job).
    pub(crate) api_invocations: f64,
    pub(crate) worker_invocations: f64,
    /// Per 1,000 events read: the catch-up reader's HTTP requests (stream function invocations).
    pub(crate) catch_up_requests: f64,
    /// Mean times measured here: a `POST …/messages`, a turn's run in the worker (`agent_start`
    /// to `agent_end`), a catch-up request.
    pub(crate) api_request_ms: f64,
    pub(crate) turn_seconds: f64,
    /// From `POST …/messages` to the turn's `agent_end` read back (queueing included).
    pub(crate) message_to_end_seconds: f64,
    pub(crate) catch_up_request_ms: f64,
    /// Medians and the slowest of the same, so one stall of the emulator shows as one: the
    /// cost model prices Lambda time at the medians.
    #[serde(default)]
    pub(crate) api_request_p50_ms: f64,
    #[serde(default)]
    pub(crate) api_request_max_ms: f64,
    #[serde(default)]
    pub(crate) turn_p50_seconds: f64,
    #[serde(default)]
    pub(crate) turn_max_seconds: f64,
    /// CPU time of this whole process (the API, the worker, the stream routes and the SDK
    /// clients) while the turns were written, per turn: more than the worker's alone.
    #[serde(default)]
    pub(crate) cpu_seconds_per_turn: f64,
    /// How long a chat waited, idle, before its last page was sealed.
    #[serde(default)]
    pub(crate) idle_seal_seconds: f64,
    /// The same turns' events in the two naive designs.
    #[serde(default)]
    pub(crate) naive: Vec<crate::naive::Naive>,
}

/// The median and the largest of `samples`.
fn median_and_max(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort_unstable();
    let median = samples.get(samples.len() / 2).copied().unwrap_or_default();
    (median, samples.last().copied().unwrap_or_default())
}

/// Words in a turn's answer (a word of the scripted agent stands for a model's token).
pub(crate) const ANSWER_WORDS: usize = 300;
/// Words a second the answer streams at.
pub(crate) const WORDS_PER_SECOND: u64 = 50;

/// The turn of issue #39's fixed shape: a tool call (the workspace's context, which runs at
/// once), then a 300-word answer streamed at 50 words a second.
fn script() -> Value {
    let words = (0..ANSWER_WORDS)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    json!({
        "word_delay_ms": 1000 / WORDS_PER_SECOND,
        "default": [
            { "say": "Let me look.", "tools": [{ "name": "get_workspace_context", "arguments": {} }] },
            { "say": words },
        ],
    })
}

/// CPU seconds this process has used (user and system), from `/proc/self/stat`; 0 where there
/// is none.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // After the command's closing parenthesis: state is field 3, utime 14 and stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // The kernel's USER_HZ is 100 on Linux.
    (ticks(14) + ticks(15)) / 100.0
}

/// Runs the phases with `turns` turns on the emulator `config` points at.
pub(crate) async fn run(config: &Config, turns: u64) -> anyhow::Result<AwsChat> {
    let dir = tempfile::tempdir()?;
    let mut config = config.clone();
    config.backend = Backend::Aws;
    config.data_dir = dir.path().join("data");
    // Requests are counted, not the abuse limits.
    config.rate_limits = spool_auth::RateLimits::OFF;
    // A chat's last page is sealed once the chat has been idle this long (10 minutes in a
    // deployment): short enough to see here, long past the pause between two turns of a chat.
    let idle_seal = idle_seal(turns);
    config.limits.idle_seal = idle_seal;
    let counter = RequestCounter::default();
    let app = spool_local::app(&config, false, Some(counter.clone()))
        .await
        .context("cannot start Spool on the emulator")?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app.router).await });

    let client = Client::sign_in(&base, &app.api_key).await?;
    let ws = client.workspace(&script()).await?;
    // The benchmark's own view of the chats, not counted.
    let watcher = spool_aws::Stores::connect(&config, None).await?.log();
    let mut chats = Vec::new();
    for _ in 0..CHATS {
        let id = client.chat(&ws).await?;
        let path = Session::stream(spool_local::LOCAL_ORG, &id)?;
        let first = watcher.metadata(&path).await?.tail;
        chats.push(Chat {
            id,
            path,
            first,
            at: first,
        });
    }

    // 1. Writing.
    crate::progress("aws chat", &format!("{turns} turns"));
    counter.reset();
    let cpu_before = cpu_seconds();
    let mut written = Vec::new();
    let mut bytes = 0usize;
    let (mut posting, mut turning, mut waiting) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut posts, mut runs) = (Vec::new(), Vec::new());
    for i in 0..turns {
        let chat = &mut chats[i as usize % CHATS];
        let started = Instant::now();
        let sent = client
            .post(
                &format!("/v1/sessions/{}/messages", chat.id),
                &json!({ "content": format!("Question {i}: what is the state of the build?") }),
            )
            .await?;
        posting += started.elapsed();
        posts.push(started.elapsed());
        let turn = sent["turn_id"].as_str().context("no turn id")?.to_owned();
        let seen = until_turn_ends(&*watcher, &chat.path, chat.at, &turn).await?;
        turning += seen.ran;
        runs.push(seen.ran);
        waiting += started.elapsed();
        chat.at = seen.at;
        bytes += seen.bytes;
        written.push(crate::naive::Turn {
            chat: i as usize % CHATS,
            events: seen.messages,
            seconds: seen.ran.as_secs_f64(),
        });
    }
    let cpu_seconds_per_turn = (cpu_seconds() - cpu_before) / turns as f64;
    // The worker acknowledges a turn's job and seals its page after the turn's last event: wait
    // until Spool is quiet (the queues' idle long polls aside), at most 10 s.
    let busy = |c: &RequestCounter| {
        c.snapshot()
            .into_iter()
            .filter(|((_, op), _)| op != "ReceiveMessage")
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    // Each chat's idle seal comes within two idle periods of its last turn (the check armed by
    // its first write finds it moved, and arms the next): wait for them, then for quiet.
    for chat in &chats {
        let mut meta = watcher.metadata(&chat.path).await?;
        for _ in 0..(idle_seal.as_millis() * 2 / 100 + 300) {
            if meta.sealed == meta.tail {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            meta = watcher.metadata(&chat.path).await?;
        }
        anyhow::ensure!(
            meta.sealed == meta.tail,
            "chat {} was not sealed to its end once idle: sealed {}, tail {}",
            chat.id,
            meta.sealed,
            meta.tail
        );
    }
    for _ in 0..20 {
        let before = busy(&counter);
        tokio::time::sleep(Duration::from_millis(500)).await;
        if busy(&counter) == before {
            break;
        }
    }
    let events: u64 = chats.iter().map(|c| c.at.seq() - c.first.seq()).sum();
    anyhow::ensure!(events > 0, "the turns wrote no events");
    let per_thousand = events as f64 / 1000.0;
    let write = Usage::of(&counter, per_thousand);

    let mean_event_bytes = bytes as f64 / events as f64;

    // 2. Catching up.
    crate::progress("aws chat", "one reader catches up");
    counter.reset();
    let started = Instant::now();
    let chat = &chats[0];
    // Over the Durable Streams route, as a client catching up does.
    let url = format!("{base}/v1/stream/sessions/{}", chat.id);
    let (bodies, requests) = crate::protocol::read_all(&client.http, &url, "-1").await?;
    let read = crate::protocol::count(&bodies)?;
    let catch_up_request_ms = started.elapsed().as_secs_f64() * 1000.0 / requests as f64;
    anyhow::ensure!(read == chat.at.seq(), "read {read} events of {}", chat.at.seq());
    let catch_up = Usage::of(&counter, read as f64 / 1000.0);

    // 3. An idle live reader.
    crate::progress("aws chat", "one idle live reader, 15 s");
    let idle = Duration::from_secs(15);
    counter.reset();
    let response = client
        .http
        .get(format!("{base}/v1/sessions/{}/stream?after={}", chat.id, chat.at.seq()))
        .send()
        .await?;
    anyhow::ensure!(response.status().is_success(), "SSE: {}", response.status());
    tokio::time::sleep(idle).await;
    drop(response);
    let mut idle_reader_minute = Usage::of(&counter, idle.as_secs_f64() / 60.0);
    // The worker's idle long polls of its queues are a fixed cost, not the reader's.
    idle_reader_minute.requests.retain(|op, _| !op.starts_with("SQS"));

    server.abort();
    // 4. The same turns in the naive designs.
    let naive = crate::naive::run(&config, &written, CHATS).await?;
    Ok(AwsChat {
        turns,
        events,
        mean_event_bytes,
        write,
        catch_up,
        idle_reader_minute,
        api_invocations: turns as f64 / per_thousand,
        worker_invocations: turns as f64 / per_thousand,
        catch_up_requests: requests as f64 / (read as f64 / 1000.0),
        api_request_ms: posting.as_secs_f64() * 1000.0 / turns as f64,
        turn_seconds: turning.as_secs_f64() / turns as f64,
        message_to_end_seconds: waiting.as_secs_f64() / turns as f64,
        catch_up_request_ms,
        api_request_p50_ms: median_and_max(posts.clone()).0.as_secs_f64() * 1000.0,
        api_request_max_ms: median_and_max(posts).1.as_secs_f64() * 1000.0,
        turn_p50_seconds: median_and_max(runs.clone()).0.as_secs_f64(),
        turn_max_seconds: median_and_max(runs).1.as_secs_f64(),
        cpu_seconds_per_turn,
        idle_seal_seconds: idle_seal.as_secs_f64(),
        naive,
    })
}

/// How long a chat waits, idle, before its last page is sealed in this workload: longer than
/// the pause between two turns of one chat (two other chats' turns, about 13 s), when a chat
/// has more than one.
fn idle_seal(turns: u64) -> Duration {
    if turns > CHATS as u64 {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(10)
    }
}

/// The turns go round this many chats, as a worker serving several chats sees them. (It also
/// keeps the emulator's queueing out of the way: moto's FIFO long poll holds back a group that
/// was in flight when the poll began until the poll ends.)
const CHATS: usize = 3;

/// A chat the benchmark writes to, and how far it has read it.
struct Chat {
    id: String,
    path: StreamPath,
    first: Offset,
    at: Offset,
}

/// What the watcher saw of one turn.
struct Seen {
    /// Where the stream got to.
    at: Offset,
    /// Bytes of the events read.
    bytes: usize,
    /// The events read.
    messages: Vec<bytes::Bytes>,
    /// From the turn's `agent_start` to its `agent_end`, by their timestamps: how long the
    /// worker ran it (on Lambda, the billed duration, queueing aside).
    ran: Duration,
}

/// Reads the chat's stream from `at` until `turn`'s `agent_end`. Bounded: 2,400 reads or waits of
/// at most a second.
async fn until_turn_ends(
    log: &impl StreamReader,
    path: &StreamPath,
    mut at: Offset,
    turn: &str,
) -> anyhow::Result<Seen> {
    let stamp = |event: &Value| {
        event["ts"]
            .as_str()
            .and_then(|ts| time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok())
    };
    let mut bytes = 0;
    let mut messages = Vec::new();
    let mut started = None;
    for _ in 0..2400 {
        let chunk = log.read(path, Position::At(at), None).await?;
        at = chunk.next_offset;
        for message in &chunk.messages {
            bytes += message.len();
            messages.push(message.clone());
            let event: Value = serde_json::from_slice(message)?;
            if event["turn_id"] != turn {
                continue;
            }
            match event["type"].as_str() {
                Some("agent_start") => started = stamp(&event),
                Some("agent_end") => {
                    let (Some(start), Some(end)) = (started, stamp(&event)) else {
                        anyhow::bail!("turn {turn} ended without a timed agent_start");
                    };
                    let ran = Duration::try_from(end - start).unwrap_or_default();
                    return Ok(Seen {
                        at,
                        bytes,
                        messages,
                        ran,
                    });
                }
                _ => {}
            }
        }
        if chunk.up_to_date {
            // Waits for more without a read every few milliseconds: this process's CPU time
            // is what the cost model's worker memory starts from.
            log.wait(path, at, Duration::from_secs(1)).await?;
        }
    }
    anyhow::bail!("turn {turn} did not end within two minutes")
}
