//! Long chats: what an agent sees of a chat of more than 10,000 events, and compaction, on both
//! backends. The model is a fake OpenAI-compatible provider on loopback (its documented
//! streaming format) that answers a summarising request with a summary and anything else with
//! "OK", and keeps every request it got.

use std::{sync::Arc, time::Duration};

use axum::body::Bytes;
use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::{Runtimes, openai::OpenAi};
use spool_chat::session::{EventDraft, Session, append_events};
use spool_tests::{Harness, draft};

use spool_tests::counting::{CountingLog, Counts};

use crate::support::{Stack, model::FakeModel, org_of, send, stack_watching};

/// What the fake model writes when asked to summarise.
const SUMMARY: &str = "SUMMARY: the launch is on Tuesday; Ada owns the slides.";
/// The chat's first message.
const FIRST: &str = "FIRST: the launch is on Tuesday and Ada owns the slides.";

struct Setup {
    stack: Stack,
    model: Arc<FakeModel>,
    chat: String,
    /// The seq of the last event written before the test's own.
    tail: u64,
    /// What the worker read of the log.
    counts: Arc<Counts>,
}

/// Up to 1,000 of the chat's events after seq `after`.
async fn events_after(api: &crate::support::Api, chat: &str, after: u64, limit: usize) -> Vec<Value> {
    let page = api
        .ok(
            Method::GET,
            &format!("/v1/sessions/{chat}/events?after={after}&limit={limit}"),
            None,
        )
        .await;
    page["events"].as_array().unwrap().clone()
}

/// The chat's events after `after`, once `turn` has a `kind_type` among them.
async fn until(api: &crate::support::Api, chat: &str, after: u64, turn: &str, kind_type: &str) -> Vec<Value> {
    spool_tests::eventually(&format!("{kind_type} of {turn}"), || async {
        let events = events_after(api, chat, after, 1000).await;
        events
            .iter()
            .any(|e| e["turn_id"] == turn && e["type"] == kind_type)
            .then_some(events)
    })
    .await
}

/// A chat with an OpenAI-compatible agent of `context_tokens`, whose stream already holds
/// `exchanges` finished turns, each a question and an answer streamed in `deltas` pieces of
/// `words` words.
async fn long_chat<H: Harness>(
    harness: &H,
    context_tokens: u64,
    exchanges: usize,
    deltas: usize,
    words: usize,
) -> Setup {
    // A summarising request gets a summary; anything else "OK".
    let (model, base) = FakeModel::serve((20, 5), |request, _| {
        let summarising = request["messages"][0]["content"]
            .as_str()
            .is_some_and(|s| s.starts_with("You summarise"));
        let text = if summarising { SUMMARY } else { "OK" };
        (text.to_owned(), Duration::ZERO)
    })
    .await;
    let runtimes = Runtimes::scripted_only().with_openai(Arc::new(OpenAi::new(&format!("{base}/v1"), None, "fake")));
    let counts = Arc::new(Counts::default());
    let counted = counts.clone();
    let wrap = move |inner| -> Arc<dyn spool_log::port::StreamLog> {
        Arc::new(CountingLog {
            inner,
            counts: counted.clone(),
        })
    };
    let stack = stack_watching(harness, runtimes, &wrap).await;
    let api = &stack.api;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Long" })))
        .await;
    let agent = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{}/agents", ws["id"].as_str().unwrap()),
            Some(
                json!({ "name": "Writer", "instruction": "Be brief.", "runtime": "openai", "model": "fake-1",
                "context_tokens": context_tokens }),
            ),
        )
        .await;
    assert_eq!(agent["context_tokens"], context_tokens);
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "agent_id": agent["id"] })))
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    let path = Session::stream(&org_of(api), &chat).unwrap();
    for i in 0..exchanges {
        let turn = format!("t_old{i}");
        let t = Some(turn.as_str());
        let question = if i == 0 {
            FIRST.to_owned()
        } else {
            format!("Question {i}: what next?")
        };
        let mut drafts: Vec<EventDraft> = vec![
            draft(
                "user_message_submitted",
                json!({ "content": question, "author": "p" }),
                t,
            ),
            draft(
                "agent_start",
                json!({ "runtime": "openai:fake-1", "agent_name": "Writer", "trigger_seq": 1 }),
                t,
            ),
            draft("message_start", json!({ "message_id": format!("m{i}") }), t),
        ];
        let piece = "word ".repeat(words);
        let piece = piece.as_str();
        for _ in 0..deltas {
            drafts.push(draft(
                "message_update",
                json!({ "message_id": format!("m{i}"), "delta": piece }),
                t,
            ));
        }
        drafts.push(draft(
            "message_end",
            json!({ "message_id": format!("m{i}"), "text": format!("Answer {i}: {}", piece.repeat(deltas)) }),
            t,
        ));
        drafts.push(draft("agent_end", json!({ "reason": "complete" }), t));
        append_events(
            stack.log.as_ref(),
            &path,
            &chat,
            &drafts,
            None,
            "2026-12-07T00:00:00Z",
            None,
        )
        .await
        .unwrap();
    }
    let tail = (exchanges * (deltas + 5)) as u64;
    Setup {
        stack,
        model,
        chat,
        tail,
        counts,
    }
}

fn contents(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind_type: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind_type).collect()
}

/// A chat of more than 10,000 events (long streamed answers): the model's request still holds
/// the first message, and every answer whole, and no delta twice.
pub(crate) async fn the_first_message_of_a_long_chat_reaches_the_model<H: Harness>(harness: &H) {
    let s = long_chat(harness, 1_000_000, 100, 100, 2).await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "What did we decide first?").await;
    let events = until(api, &s.chat, s.tail, &turn, "agent_end").await;
    assert!(
        events
            .iter()
            .any(|e| e["turn_id"] == turn.as_str() && e["type"] == "message_end")
    );
    let last_seq = events.last().unwrap()["seq"].as_u64().unwrap();
    assert!(last_seq > 10_000, "the chat holds {last_seq} events");
    let requests = s.model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "no summary was needed");
    let sent = contents(&requests[0]);
    assert_eq!(sent[0], "Be brief.");
    assert_eq!(sent[1], FIRST, "the first message is there after {last_seq} events");
    assert_eq!(
        sent.len(),
        1 + 100 * 2 + 1,
        "every question and answer once, then the new one"
    );
    assert!(sent[2].starts_with("Answer 0: word word"));
    assert_eq!(sent.last().unwrap(), "What did we decide first?");
    // The message index holds the chat without its deltas, byte for byte.
    let org = org_of(api);
    let index = spool_chat::history::index_path(&org, &s.chat).unwrap();
    let indexed = s.stack.log.metadata(&index).await.unwrap().tail.seq();
    assert!(
        (100 * 5..100 * 5 + 8).contains(&indexed),
        "the index holds the old turns without their deltas, and the new turn's first events: {indexed}"
    );
}

/// With a small budget the oldest part is summarised once by the model, into a
/// `history_compacted` that names its range; the next steps' requests hold the summary and
/// everything after it, and no summary is written again while the rest fits.
pub(crate) async fn a_long_history_is_compacted_once_and_the_summary_is_sent<H: Harness>(harness: &H) {
    // 40 exchanges of about 130 tokens each: about 5,000 tokens against a budget of 2,000.
    let s = long_chat(harness, 2_000, 40, 5, 20).await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "And now?").await;
    let events = until(api, &s.chat, s.tail, &turn, "agent_end").await;
    let compacted = of_type(&events, "history_compacted");
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    let c = &compacted[0]["payload"];
    assert_eq!(c["from_seq"], 1);
    assert_eq!(c["summary"], SUMMARY);
    assert_eq!(c["by"], "openai:fake-1");
    assert_eq!(c["reason"], "budget");
    let through = c["through_seq"].as_u64().unwrap();
    // The range ends right before a person's message, before the turn.
    let next = events_after(api, &s.chat, through, 1).await.remove(0);
    assert_eq!(next["type"], "user_message_submitted", "{next}");
    let turn_start = events.iter().find(|e| e["turn_id"] == turn.as_str()).unwrap()["seq"]
        .as_u64()
        .unwrap();
    assert!(through < turn_start);
    let requests = s.model.requests.lock().unwrap().clone();
    let answer = requests.last().unwrap();
    let sent = contents(answer);
    assert!(
        sent[1].contains(SUMMARY) && sent[1].contains(&format!("events 1–{through}")),
        "{}",
        sent[1]
    );
    assert!(
        !sent.iter().any(|m| m.contains("FIRST:")),
        "the summarised part is not sent again"
    );
    assert_eq!(
        sent[2],
        next["payload"]["content"].as_str().unwrap(),
        "everything after the range follows"
    );
    assert_eq!(sent.last().unwrap(), "And now?");
    // The summarising request held the first message.
    let summarised = requests
        .iter()
        .filter(|r| contents(r)[0].starts_with("You summarise"))
        .collect::<Vec<_>>();
    assert!(!summarised.is_empty());
    assert!(contents(summarised[0])[1].contains(FIRST));
    // The next turn sends the summary again and summarises nothing more.
    let before = s.model.requests.lock().unwrap().len();
    let again = send(api, &s.chat, "Thanks").await;
    let events = until(api, &s.chat, s.tail, &again, "agent_end").await;
    assert_eq!(of_type(&events, "history_compacted").len(), 1);
    let requests = s.model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), before + 1);
    let sent = contents(requests.last().unwrap());
    assert!(sent[1].contains(SUMMARY));
    assert_eq!(sent.last().unwrap(), "Thanks");
    // Nothing was deleted: the chat still holds the first message.
    let first = events_after(api, &s.chat, 0, 1).await;
    assert_eq!(first[0]["payload"]["content"], FIRST);
}

/// `/compact` summarises everything before it on demand, answers nothing, and the next turn
/// sees the summary and not the old messages.
pub(crate) async fn compact_on_demand_summarises_what_came_before<H: Harness>(harness: &H) {
    let s = long_chat(harness, 1_000_000, 5, 3, 2).await;
    let api = &s.stack.api;
    let invoked = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{}/slash-commands/invoke", s.chat),
            Some(json!({ "input": "/compact keep the dates" })),
        )
        .await;
    let turn = invoked["turn_id"].as_str().unwrap().to_owned();
    let events = until(api, &s.chat, s.tail, &turn, "agent_end").await;
    let compacted = of_type(&events, "history_compacted");
    assert_eq!(compacted.len(), 1);
    assert_eq!(compacted[0]["payload"]["reason"], "command");
    assert_eq!(
        compacted[0]["payload"]["through_seq"], s.tail,
        "everything before the command"
    );
    assert!(
        !events
            .iter()
            .any(|e| e["turn_id"] == turn.as_str() && e["type"] == "message_end"),
        "nothing is answered"
    );
    let requests = s.model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert!(contents(&requests[0])[0].contains("keep in particular: keep the dates"));
    let next = send(api, &s.chat, "Where were we?").await;
    until(api, &s.chat, s.tail, &next, "agent_end").await;
    let requests = s.model.requests.lock().unwrap().clone();
    let sent = contents(requests.last().unwrap());
    assert_eq!(sent.len(), 3, "the instruction, the summary, the message: {sent:?}");
    assert!(sent[1].contains(SUMMARY));
    assert!(
        !sent.iter().any(|m| m.contains("Compact this chat")),
        "the command's prompt is not the agent's"
    );
}

/// Deleting a chat deletes its message index.
pub(crate) async fn a_deleted_chat_takes_its_index_along<H: Harness>(harness: &H) {
    let s = long_chat(harness, 1_000_000, 2, 2, 2).await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "hi").await;
    until(api, &s.chat, s.tail, &turn, "agent_end").await;
    let index = spool_chat::history::index_path(&org_of(api), &s.chat).unwrap();
    assert!(s.stack.log.metadata(&index).await.is_ok());
    api.call(Method::DELETE, &format!("/v1/sessions/{}", s.chat), None)
        .await;
    assert!(
        s.stack.log.metadata(&index).await.is_err(),
        "the index is gone with its chat"
    );
}

/// What the worker reads of the log for a step of the second turn in a chat of `exchanges`
/// streamed answers (the first turn builds the chat's index and summarises its history):
/// (reads, bytes).
async fn second_step_reads<H: Harness>(harness: &H, exchanges: usize) -> (u64, u64) {
    second_step(harness, exchanges).await.0
}

/// [`second_step_reads`], and how long the second turn took from its message to its end.
async fn second_step<H: Harness>(harness: &H, exchanges: usize) -> ((u64, u64), std::time::Duration) {
    let s = long_chat(harness, 1_500, exchanges, 100, 2).await;
    // Sealed first, as the background sealer would have: the first turn's end then does not
    // seal the whole chat while the second waits behind it.
    let path = Session::stream(&org_of(&s.stack.api), &s.chat).unwrap();
    s.stack
        .log
        .seal(&path, spool_log::stream::SealMode::Full)
        .await
        .unwrap();
    let api = &s.stack.api;
    let first = send(api, &s.chat, "First").await;
    until(api, &s.chat, s.tail, &first, "agent_end").await;
    // The first step's end and the second turn's start both count: let the first finish.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    s.counts.take();
    let started = std::time::Instant::now();
    let second = send(api, &s.chat, "Second").await;
    until(api, &s.chat, s.tail, &second, "agent_end").await;
    (s.counts.take(), started.elapsed())
}

/// `make bench`: a step's cost at 1,000, 10,000 and 100,000 events of history (the second
/// turn's, on the embedded backend): its log reads, bytes read and time, as a table and in
/// `target/bench/history.json`. Not a test: `--run-ignored only`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: make bench runs it"]
async fn step_cost_bench() {
    let harness = spool_tests::EmbeddedHarness::new();
    let mut rows = Vec::new();
    println!("| history (events) | log reads | bytes read | step (ms, message to agent_end) |");
    println!("|---:|---:|---:|---:|");
    for exchanges in [10, 100, 1_000] {
        let ((reads, bytes), took) = second_step(&harness, exchanges).await;
        let events = exchanges * 105;
        println!("| {events} | {reads} | {bytes} | {} |", took.as_millis());
        rows.push(json!({ "events": events, "reads": reads, "bytes": bytes, "ms": took.as_millis() as u64 }));
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench/history.json");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    std::fs::write(&out, serde_json::to_vec_pretty(&json!({ "step_cost": rows })).unwrap()).unwrap();
}

/// A step reads about as much of a chat of 10,500 events as of one of 1,050: counted reads
/// and bytes, not time. On the embedded backend only: on the emulator, sealing the 10,500
/// events the test writes at once takes minutes (AWS reads go through the same index code).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_of_a_long_chat_reads_what_a_step_of_a_short_one_does() {
    let harness = spool_tests::EmbeddedHarness::new();
    let (short_reads, short_bytes) = second_step_reads(&harness, 10).await;
    let (long_reads, long_bytes) = second_step_reads(&harness, 100).await;
    eprintln!(
        "a step's reads: 1,050 events {short_reads} reads, {short_bytes} B; 10,500 events {long_reads} reads, {long_bytes} B"
    );
    assert!(
        long_reads <= short_reads + 2,
        "{long_reads} reads against {short_reads}"
    );
    assert!(
        long_bytes <= short_bytes * 2,
        "{long_bytes} bytes against {short_bytes}"
    );
}

on_both_backends!(
    history: the_first_message_of_a_long_chat_reaches_the_model,
    concurrent_catch_ups_index_each_event_once,
    a_long_history_is_compacted_once_and_the_summary_is_sent,
    compact_on_demand_summarises_what_came_before,
    a_deleted_chat_takes_its_index_along,
);

/// Workers catching a chat's index up at once write each event once, in order, and a catch-up
/// after more events adds only those: the index is the chat without its deltas, byte for byte.
pub(crate) async fn concurrent_catch_ups_index_each_event_once<H: Harness>(harness: &H) {
    let s = long_chat(harness, 1_000_000, 30, 20, 2).await;
    let org = org_of(&s.stack.api);
    let log = s.stack.log.clone();
    let catch_ups: Vec<_> = (0..4)
        .map(|_| {
            let (log, org, chat) = (log.clone(), org.clone(), s.chat.clone());
            tokio::spawn(async move { spool_chat::history::catch_up(log.as_ref(), &org, &chat).await })
        })
        .collect();
    for catch_up in catch_ups {
        catch_up.await.unwrap().unwrap();
    }
    let chat = Session::stream(&org, &s.chat).unwrap();
    let index = spool_chat::history::index_path(&org, &s.chat).unwrap();
    let read_all = |path: spool_log::stream::StreamPath| {
        let log = log.clone();
        async move {
            let mut out = Vec::new();
            let mut at = spool_log::stream::Offset::START;
            loop {
                let chunk = log
                    .read(&path, spool_log::stream::Position::At(at), None)
                    .await
                    .unwrap();
                out.extend(chunk.messages.iter().cloned());
                at = chunk.next_offset;
                if chunk.up_to_date {
                    return out;
                }
            }
        }
    };
    let expected: Vec<Bytes> = read_all(chat.clone())
        .await
        .into_iter()
        .filter(|m| !String::from_utf8_lossy(m).contains("\"type\":\"message_update\""))
        .collect();
    assert_eq!(
        read_all(index.clone()).await,
        expected,
        "each event once, in order, byte for byte"
    );
    // More events: a catch-up adds just those.
    let more = [draft("system", json!({ "level": "info", "message": "later" }), None)];
    append_events(log.as_ref(), &chat, &s.chat, &more, None, "2026-12-07T00:00:01Z", None)
        .await
        .unwrap();
    spool_chat::history::catch_up(log.as_ref(), &org, &s.chat)
        .await
        .unwrap();
    let indexed = read_all(index).await;
    assert_eq!(indexed.len(), expected.len() + 1);
    assert!(String::from_utf8_lossy(indexed.last().unwrap()).contains("later"));
}
