//! `spool serve` killed with `kill -9` in the middle of traffic, again and again, and restarted
//! on the same data directory: people posting messages (retrying until they are acknowledged,
//! as clients do), agents answering, questions answered. Afterwards every acknowledged message
//! is in its chat exactly once at the seq it was acknowledged with, each chat's events are
//! numbered without a gap, every turn ended, and every chat takes a new message.
//!
//! `make test` runs a few cycles; `make soak` runs many (`CHAOS_CYCLES`) and prints the figures.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::sync::RwLock;

/// The agent: streams a few words slowly enough to be killed mid-answer, and asks a question
/// when told to.
const SCRIPT: &str = r#"{"word_delay_ms": 25, "rules": [
  {"match": ["ask"], "rounds": [
    {"say": "A question for you.", "tools": [{"name": "ask_user", "arguments": {"question": "Which one?"}}]},
    {"say": "You said {result}; noted."}]}],
 "default": [{"say": "one two three four five six seven eight nine ten eleven twelve"}]}"#;

fn cycles() -> usize {
    std::env::var("CHAOS_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(4)
}

/// A `spool serve` on a fixed address and data directory.
struct Server {
    child: Child,
}

impl Server {
    fn start(data: &Path, addr: &str) -> (Self, Option<String>) {
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

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// HTTP requests sent, retries included.
static ATTEMPTS: AtomicU64 = AtomicU64::new(0);

/// A client that retries what the server could not answer (it was down, or died mid-request)
/// with the same request, as a browser or an SDK does; `None` after a minute of trying.
async fn call(
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

async fn events(http: &reqwest::Client, base: &RwLock<String>, token: &str, chat: &str) -> Vec<Value> {
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
struct Figures {
    requests: AtomicU64,
    acknowledged: AtomicU64,
    answers: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_traffic_loses_and_repeats_nothing_and_wedges_no_chat() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let (mut server, key) = Server::start(&data, &addr);
    let key = key.expect("the local API key");
    let base = Arc::new(RwLock::new(format!("http://{addr}")));
    let http = reqwest::Client::new();
    let handshake: Value = http
        .post(format!("{}/v1/handshake", base.read().await))
        .json(&json!({ "api_key": key }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = handshake["jwt"].as_str().unwrap().to_owned();
    // GIVEN a workspace whose agent runs the script, and four chats with it
    let (_, ws) = call(
        &http,
        &base,
        reqwest::Method::POST,
        "/v1/workspaces",
        &token,
        Some(&json!({ "name": "Chaos" })),
    )
    .await
    .unwrap();
    let ws = ws["id"].as_str().unwrap().to_owned();
    let (_, agents) = call(
        &http,
        &base,
        reqwest::Method::GET,
        &format!("/v1/workspaces/{ws}/agents"),
        &token,
        None,
    )
    .await
    .unwrap();
    let builtin = agents["agents"][0]["id"].as_str().unwrap().to_owned();
    call(
        &http,
        &base,
        reqwest::Method::PATCH,
        &format!("/v1/agents/{builtin}"),
        &token,
        Some(&json!({ "instruction": SCRIPT, "runtime": "scripted" })),
    )
    .await
    .unwrap();
    let mut chats = Vec::new();
    for _ in 0..4 {
        let (_, chat) = call(
            &http,
            &base,
            reqwest::Method::POST,
            "/v1/sessions",
            &token,
            Some(&json!({ "workspace_id": ws })),
        )
        .await
        .unwrap();
        chats.push(chat["id"].as_str().unwrap().to_owned());
    }

    // WHEN people post (every fourth message asks for a question) and answer questions, while the
    // server is killed and restarted
    let stop = Arc::new(AtomicBool::new(false));
    let figures = Arc::new(Figures::default());
    let mut writers = Vec::new();
    for (c, chat) in chats.iter().enumerate() {
        let (http, base, token, chat, stop, figures) = (
            http.clone(),
            base.clone(),
            token.clone(),
            chat.clone(),
            stop.clone(),
            figures.clone(),
        );
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 0;
            // The first chat is used as the web UI does: one turn at a time, each message
            // claiming the chat (`409` while a turn runs); the others queue behind their turns.
            let claims = c == 0;
            while !stop.load(Ordering::SeqCst) {
                let cmid = format!("c{c}-m{i}");
                let text = if i % 4 == 3 {
                    format!("ask me {i}")
                } else {
                    format!("message {i}")
                };
                let mut body = json!({ "content": text, "client_message_id": cmid });
                if !claims {
                    body["on_busy"] = json!("enqueue");
                }
                figures.requests.fetch_add(1, Ordering::SeqCst);
                let Some((status, answer)) = call(
                    &http,
                    &base,
                    reqwest::Method::POST,
                    &format!("/v1/sessions/{chat}/messages"),
                    &token,
                    Some(&body),
                )
                .await
                else {
                    continue;
                };
                if claims && status == 409 {
                    // Its previous turn still runs (or waits on its question): try again soon.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                assert_eq!(status, 202, "{cmid}: {answer}");
                figures.acknowledged.fetch_add(1, Ordering::SeqCst);
                acked.push((
                    cmid,
                    answer["seq"].as_u64().unwrap(),
                    answer["turn_id"].as_str().unwrap().to_owned(),
                ));
                i += 1;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            (chat, acked)
        }));
    }
    let answerer = {
        let (http, base, token, chats, stop, figures) = (
            http.clone(),
            base.clone(),
            token.clone(),
            chats.clone(),
            stop.clone(),
            figures.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                for chat in &chats {
                    answer_open_questions(&http, &base, &token, chat, &figures).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let started = Instant::now();
    let mut rng = fastrand::Rng::with_seed(7);
    let mut recoveries = Vec::new();
    let mut restarts = Vec::new();
    for _ in 0..cycles() {
        tokio::time::sleep(Duration::from_millis(rng.u64(700..2000))).await;
        let tails = tails(&http, &base, &token, &chats).await;
        server.kill();
        let (restarted, _) = Server::start(&data, &addr);
        server = restarted;
        restarts.push(now_ms());
        // How soon the worker writes again: an agent's event past where each chat was.
        if let Some(after) = resumed(&http, &base, &token, &chats, &tails).await {
            recoveries.push(after);
        }
    }
    recoveries.sort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acked: BTreeMap<String, Vec<(String, u64, String)>> = BTreeMap::new();
    for writer in writers {
        let (chat, list) = writer.await.unwrap();
        acked.insert(chat, list);
    }
    answerer.await.unwrap();
    let traffic = started.elapsed();

    // THEN, once the last questions are answered, every turn ends
    let settle = Instant::now();
    let mut pending = usize::MAX;
    for _ in 0..300 {
        pending = 0;
        for chat in &chats {
            answer_open_questions(&http, &base, &token, chat, &figures).await;
            let events = events(&http, &base, &token, chat).await;
            let ended: BTreeSet<&str> = events
                .iter()
                .filter(|e| e["type"] == "agent_end")
                .filter_map(|e| e["turn_id"].as_str())
                .collect();
            pending += acked[chat]
                .iter()
                .filter(|(_, _, turn)| !ended.contains(turn.as_str()))
                .count();
        }
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled = settle.elapsed();
    assert_eq!(pending, 0, "turns still running a minute after the last restart");

    let mut found = 0;
    let mut pickups = Vec::new();
    let mut interrupted = 0;
    for chat in &chats {
        let events = events(&http, &base, &token, chat).await;
        // AND the chat's events are numbered 1, 2, 3, … with no gap and no repeat
        let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "{chat}");
        // AND every acknowledged message is there once, at its acknowledged seq, with its turn
        for (cmid, seq, turn) in &acked[chat] {
            let copies: Vec<&Value> = events
                .iter()
                .filter(|e| e["type"] == "user_message_submitted" && e["client_message_id"] == cmid.as_str())
                .collect();
            assert_eq!(copies.len(), 1, "{chat} {cmid}: {copies:?}");
            assert_eq!(
                (copies[0]["seq"].as_u64(), copies[0]["turn_id"].as_str()),
                (Some(*seq), Some(turn.as_str())),
                "{cmid}"
            );
            found += 1;
        }
        // AND every turn started at most once and ended once
        let turns: BTreeSet<&str> = acked[chat].iter().map(|(_, _, t)| t.as_str()).collect();
        for turn in &turns {
            let count = |kind: &str| {
                events
                    .iter()
                    .filter(|e| e["turn_id"] == *turn && e["type"] == kind)
                    .count()
            };
            assert!(count("agent_start") <= 1, "{turn} started twice");
            assert_eq!(count("agent_end"), 1, "{turn}");
        }
        let notes: Vec<&Value> = events
            .iter()
            .filter(|e| {
                e["type"] == "system"
                    && e["payload"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("picked up again"))
            })
            .collect();
        interrupted += notes.len();
        pickups.extend(notes.iter().filter_map(|e| e["ts"].as_str().and_then(ts_ms)));
        // AND the chat takes a new message and answers it
        let (status, sent) = call(
            &http,
            &base,
            reqwest::Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            &token,
            Some(&json!({ "content": "still there?" })),
        )
        .await
        .unwrap();
        assert_eq!(status, 202, "{chat} refuses messages: {sent}");
    }
    // How long after each restart its first interrupted turn was picked up again.
    let mut taken_back: Vec<i64> = restarts
        .iter()
        .enumerate()
        .filter_map(|(i, at)| {
            let next = restarts.get(i + 1).copied().unwrap_or(i64::MAX);
            pickups
                .iter()
                .filter(|p| **p >= *at && **p < next)
                .min()
                .map(|p| p - at)
        })
        .collect();
    taken_back.sort_unstable();
    let acknowledged = figures.acknowledged.load(Ordering::SeqCst);
    assert_eq!(found, acknowledged);
    assert!(acknowledged >= 8, "too little traffic to mean anything: {acknowledged}");
    eprintln!(
        "chaos (embedded, kill -9): {} cycles in {:.1} s; {} HTTP requests; {} messages sent, {acknowledged} acknowledged, {found} found exactly once; {} answers; {interrupted} interrupted turns picked up again; the worker wrote again {} after a restart (median; slowest {}), and took back an interrupted turn {} after it (median of the {} restarts that interrupted one; slowest {}); the backlog drained {:.1} s after the last restart",
        cycles(),
        traffic.as_secs_f64(),
        ATTEMPTS.load(Ordering::Relaxed),
        figures.requests.load(Ordering::SeqCst),
        figures.answers.load(Ordering::SeqCst),
        recoveries
            .get(recoveries.len() / 2)
            .map_or_else(|| "—".to_owned(), |d| format!("{} ms", d.as_millis())),
        recoveries
            .last()
            .map_or_else(|| "—".to_owned(), |d| format!("{} ms", d.as_millis())),
        taken_back
            .get(taken_back.len() / 2)
            .map_or_else(|| "—".to_owned(), |d| format!("{d} ms")),
        taken_back.len(),
        taken_back.last().map_or_else(|| "—".to_owned(), |d| format!("{d} ms")),
        settled.as_secs_f64(),
    );
    // A restart takes back its interrupted turns at once, not after their leases (2 minutes).
    assert!(
        recoveries.last().is_some_and(|d| *d < Duration::from_secs(30)),
        "{recoveries:?}"
    );
    assert!(taken_back.last().is_none_or(|d| *d < 30_000), "{taken_back:?}");
}

fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// An event's `ts` (RFC 3339) in ms since the Unix epoch.
fn ts_ms(ts: &str) -> Option<i64> {
    let at = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Each chat's last seq.
async fn tails(http: &reqwest::Client, base: &RwLock<String>, token: &str, chats: &[String]) -> Vec<u64> {
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
async fn resumed(
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
async fn answer_open_questions(
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
