//! `spool serve` killed with `kill -9` in the middle of traffic, again and again, and restarted
//! on the same data directory: people posting messages (retrying until they are acknowledged,
//! as clients do; in one chat without client ids, as a script might), agents answering, an
//! outside agent asking questions that people's next messages answer, turns' questions
//! answered. Afterwards every acknowledged message is in its chat at the seq it was
//! acknowledged with (exactly once when it had a client id), every agent's question has at most
//! one answer and every acknowledged answer is it, each chat's events are numbered without a
//! gap, every message's turn ran once and ended (acknowledged or not: a message a crash left
//! in a chat still gets its turn), and every chat takes a new message.
//!
//! `make test` runs a few cycles; `make soak` runs many (`CHAOS_CYCLES`) and prints the figures.

mod chaos_support;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use chaos_support::{ATTEMPTS, Figures, Server, answer_open_questions, call, events, now_ms, resumed, tails, ts_ms};
use serde_json::{Value, json};
use tokio::sync::RwLock;

/// The agent: streams a few words slowly enough to be killed mid-answer, and asks a question
/// when told to.
const SCRIPT: &str = r#"{"word_delay_ms": 25, "rules": [
  {"match": ["ask"], "rounds": [
    {"say": "A question for you.", "tools": [{"name": "ask_user", "arguments": {"question": "Which one?"}}]},
    {"say": "You said {result}; noted."}]}],
 "default": [{"say": "one two three four five six seven eight nine ten eleven twelve"}]}"#;

/// The chats an outside agent asks questions in (one queueing messages with client ids, one
/// without), and the chat whose messages have no client id.
const ASKED: [usize; 2] = [1, 3];
const BARE: usize = 3;

fn cycles() -> usize {
    std::env::var("CHAOS_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(4)
}

/// A message a chat acknowledged (`202`).
#[derive(Debug, Clone)]
struct Acked {
    /// Its client id, if it was sent with one.
    cmid: Option<String>,
    /// Its text, which no other message of the chat has.
    content: String,
    seq: u64,
    /// The turn it started; none when it answered an agent's question.
    turn: Option<String>,
    /// The agent's question it answered.
    answers: Option<String>,
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
    let token = handshake(&http, &base, &key).await;
    let agent_token = handshake(&http, &base, &chaos_support::agent_key(&data)).await;
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

    // WHEN people post (every fourth message asks for a question) and answer questions, and an
    // outside agent asks questions in two chats, while the server is killed and restarted
    let stop = Arc::new(AtomicBool::new(false));
    let figures = Arc::new(Figures::default());
    let mut writers = Vec::new();
    for (c, chat) in chats.iter().enumerate() {
        let writer = Writer {
            http: http.clone(),
            base: base.clone(),
            token: token.clone(),
            chat: chat.clone(),
            stop: stop.clone(),
            figures: figures.clone(),
        };
        writers.push(tokio::spawn(writer.write(c)));
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
    let asked = Arc::new(AtomicU64::new(0));
    let asker = {
        let (http, base, chats, stop, asked) = (http.clone(), base.clone(), chats.clone(), stop.clone(), asked.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                for c in ASKED {
                    let body = json!({ "author": "chaos-bot", "text": format!("Which way, {n}?"), "ask": true });
                    let path = format!("/v1/sessions/{}/agent-messages", chats[c]);
                    let posted = call(&http, &base, reqwest::Method::POST, &path, &agent_token, Some(&body)).await;
                    if posted.is_some_and(|(status, _)| status == 202) {
                        asked.fetch_add(1, Ordering::SeqCst);
                    }
                    n += 1;
                }
                tokio::time::sleep(Duration::from_millis(900)).await;
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
    let mut acked: BTreeMap<String, Vec<Acked>> = BTreeMap::new();
    for writer in writers {
        let (chat, list) = writer.await.unwrap();
        acked.insert(chat, list);
    }
    answerer.await.unwrap();
    asker.await.unwrap();
    let traffic = started.elapsed();

    // THEN, once the last questions are answered, the turn of every message in every chat
    // ends (a message a crash left unacknowledged too), within a minute and a half and a few
    // seconds a cycle (the backlog the queueing chats piled up; a job queued before a message
    // that never came holds its chat a minute)
    let settle = Instant::now();
    let patience = Duration::from_secs(90) + Duration::from_secs(3) * u32::try_from(cycles()).unwrap_or(u32::MAX);
    let mut pending = Vec::new();
    while settle.elapsed() < patience {
        pending.clear();
        for chat in &chats {
            answer_open_questions(&http, &base, &token, chat, &figures).await;
            let events = events(&http, &base, &token, chat).await;
            let ended = turns_of(&events, "agent_end");
            pending.extend(
                turns_of(&events, "user_message_submitted")
                    .into_iter()
                    .filter(|turn| !ended.contains(turn))
                    .map(str::to_owned),
            );
        }
        if pending.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled = settle.elapsed();
    assert!(
        pending.is_empty(),
        "turns still running 90 s after the last restart: {pending:?}"
    );

    let mut found = 0;
    let mut agent_answers = 0;
    let mut copies = 0;
    let mut pickups = Vec::new();
    let mut interrupted = 0;
    for chat in &chats {
        let events = events(&http, &base, &token, chat).await;
        let checked = check_chat(chat, &events, &acked[chat]);
        found += checked.found;
        agent_answers += checked.answers;
        copies += checked.copies;
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
        "chaos (embedded, kill -9): {} cycles in {:.1} s; {} HTTP requests; {} messages sent, {acknowledged} acknowledged, {found} found where acknowledged ({agent_answers} of them answers to the {} questions an agent asked; {copies} copies of messages without a client id whose first attempt was cut short, each with its own turn); {} answers to turns' questions; {interrupted} interrupted turns picked up again; the worker wrote again {} after a restart (median; slowest {}), and took back an interrupted turn {} after it (median of the {} restarts that interrupted one; slowest {}); the backlog drained {:.1} s after the last restart",
        cycles(),
        traffic.as_secs_f64(),
        ATTEMPTS.load(Ordering::Relaxed),
        figures.requests.load(Ordering::SeqCst),
        asked.load(Ordering::SeqCst),
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

/// A token for `key`.
async fn handshake(http: &reqwest::Client, base: &RwLock<String>, key: &str) -> String {
    let answer: Value = http
        .post(format!("{}/v1/handshake", base.read().await))
        .json(&json!({ "api_key": key }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["jwt"].as_str().unwrap().to_owned()
}

/// A person posting to one chat until told to stop.
struct Writer {
    http: reqwest::Client,
    base: Arc<RwLock<String>>,
    token: String,
    chat: String,
    stop: Arc<AtomicBool>,
    figures: Arc<Figures>,
}

impl Writer {
    /// Posts messages to chat number `c`, each until it is acknowledged; what was acknowledged.
    async fn write(self, c: usize) -> (String, Vec<Acked>) {
        let mut acked = Vec::new();
        let mut i = 0;
        // The first chat is used as the web UI does: one turn at a time, each message claiming
        // the chat (`409` while a turn runs); the others queue behind their turns, one of them
        // without client ids.
        let claims = c == 0;
        while !self.stop.load(Ordering::SeqCst) {
            let cmid = (c != BARE).then(|| format!("c{c}-m{i}"));
            let content = if i % 4 == 3 {
                format!("ask me {i}")
            } else {
                format!("message {i}")
            };
            let mut body = json!({ "content": content });
            if let Some(cmid) = &cmid {
                body["client_message_id"] = json!(cmid);
            }
            if !claims {
                body["on_busy"] = json!("enqueue");
            }
            self.figures.requests.fetch_add(1, Ordering::SeqCst);
            let path = format!("/v1/sessions/{}/messages", self.chat);
            let posted = call(
                &self.http,
                &self.base,
                reqwest::Method::POST,
                &path,
                &self.token,
                Some(&body),
            )
            .await;
            let Some((status, answer)) = posted else {
                continue;
            };
            if claims && status == 409 {
                // Its previous turn still runs (or waits on its question): try again soon.
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            assert_eq!(status, 202, "{content}: {answer}");
            self.figures.acknowledged.fetch_add(1, Ordering::SeqCst);
            acked.push(Acked {
                cmid,
                content,
                seq: answer["seq"].as_u64().unwrap(),
                turn: answer["turn_id"].as_str().map(str::to_owned),
                answers: answer["answers"].as_str().map(str::to_owned),
            });
            i += 1;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        (self.chat, acked)
    }
}

/// The turns named by a chat's events of `kind`.
fn turns_of<'a>(events: &'a [Value], kind: &str) -> BTreeSet<&'a str> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .filter_map(|e| e["turn_id"].as_str())
        .collect()
}

/// What one chat's checks counted.
struct Checked {
    /// Acknowledged messages found where they were acknowledged.
    found: u64,
    /// Of those, answers to an agent's questions.
    answers: u64,
    /// Messages in the chat no acknowledgement names: first attempts, without a client id, of
    /// messages a crash cut short (their retry is another message).
    copies: u64,
}

/// Checks one chat's events against what it acknowledged.
fn check_chat(chat: &str, events: &[Value], acked: &[Acked]) -> Checked {
    // The chat's events are numbered 1, 2, 3, … with no gap and no repeat
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "{chat}");
    let messages: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "user_message_submitted")
        .collect();
    let mut checked = Checked {
        found: 0,
        answers: 0,
        copies: 0,
    };
    for message in acked {
        // Every acknowledged message is there at its acknowledged seq, with its turn or the
        // question it answers; exactly once when it has a client id
        let at = messages
            .iter()
            .find(|e| e["seq"].as_u64() == Some(message.seq))
            .unwrap_or_else(|| panic!("{chat}: no message at {message:?}"));
        assert_eq!(
            (
                at["payload"]["content"].as_str(),
                at["turn_id"].as_str(),
                at["payload"]["answers"].as_str()
            ),
            (
                Some(message.content.as_str()),
                message.turn.as_deref(),
                message.answers.as_deref()
            ),
            "{chat} {message:?}"
        );
        if let Some(cmid) = &message.cmid {
            let copies = messages
                .iter()
                .filter(|e| e["client_message_id"] == cmid.as_str())
                .count();
            assert_eq!(copies, 1, "{chat} {cmid}");
        }
        if message.answers.is_some() {
            checked.answers += 1;
        }
        checked.found += 1;
    }
    checked.copies = (messages.len() - acked.len()) as u64;
    // Every agent's question has at most one answer
    let mut answers: BTreeMap<&str, usize> = BTreeMap::new();
    for question in messages.iter().filter_map(|e| e["payload"]["answers"].as_str()) {
        *answers.entry(question).or_default() += 1;
    }
    assert!(answers.values().all(|n| *n == 1), "{chat}: {answers:?}");
    // Every message's turn started at most once and ended once
    for turn in turns_of(events, "user_message_submitted") {
        let count = |kind: &str| {
            events
                .iter()
                .filter(|e| e["turn_id"] == turn && e["type"] == kind)
                .count()
        };
        assert!(count("agent_start") <= 1, "{turn} started twice");
        assert_eq!(count("agent_end"), 1, "{turn}");
    }
    checked
}
