//! The AWS backend under injected faults (the `FaultInjector` SDK interceptor, on every
//! DynamoDB, S3 and SQS request): requests refused before they are sent (throttling past the
//! SDK's retries) and requests applied whose answer is lost (a `500` after the commit, which the
//! SDK retries), while people post messages (retrying until acknowledged), agents answer, turns
//! are redelivered by SQS, and questions are answered. Once the faults stop, every acknowledged
//! message is in its chat exactly once at its seq, chats are gapless, every turn ended, and
//! every chat takes a new message.
//!
//! `make test` runs a short burst; `make soak` a longer one (`CHAOS_MESSAGES`).

#![cfg(feature = "emulator")]

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_agents::Runtimes;
use spool_aws::{AwsClients, AwsLog, AwsMetadata, FaultInjector, FaultPlan, SqsTurnQueue};
use spool_chat::{metadata::Metadata, turns::TurnQueue};
use spool_log::port::StreamLog;
use spool_tests::{AwsHarness, Harness};

use crate::support::{Api, engine_with, serve, setup_on, test_poll};

const SCRIPT: &str = r#"{"word_delay_ms": 10, "rules": [
  {"match": ["ask"], "rounds": [
    {"say": "A question for you.", "tools": [{"name": "ask_user", "arguments": {"question": "Which one?"}}]},
    {"say": "You said {result}; noted."}]}],
 "default": [{"say": "one two three four five six seven eight"}]}"#;

fn messages_per_chat() -> usize {
    std::env::var("CHAOS_MESSAGES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(8)
}

/// A call retried while the server answers `5xx` (the store failed under the faults), as a
/// client does; the first answer that is not a `5xx`.
async fn retried(api: &Api, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    for _ in 0..400 {
        let (status, value) = api.call(method.clone(), path, body.clone()).await;
        if !status.is_server_error() {
            return (status, value);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{method} {path} failed for 20 s");
}

async fn events(api: &Api, chat: &str) -> Vec<Value> {
    let (_, page) = retried(
        api,
        Method::GET,
        &format!("/v1/sessions/{chat}/events?after=0&limit=1000"),
        None,
    )
    .await;
    page["events"].as_array().cloned().unwrap_or_default()
}

async fn answer_open_questions(api: &Api, chat: &str) -> usize {
    let events = events(api, chat).await;
    let answered: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["type"] == "question_answered")
        .filter_map(|e| e["payload"]["question_id"].as_str())
        .collect();
    let mut count = 0;
    for asked in events.iter().filter(|e| e["type"] == "ask_question") {
        let Some(question) = asked["payload"]["question_id"].as_str() else {
            continue;
        };
        if !answered.contains(question) {
            let body = json!({ "question_id": question, "answer": "the blue one" });
            let (status, _) = retried(api, Method::POST, &format!("/v1/sessions/{chat}/question"), Some(body)).await;
            count += usize::from(status == 202);
        }
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn injected_aws_faults_lose_and_repeat_nothing_and_wedge_no_chat() {
    // GIVEN the AWS backend on clients whose every request may fail, off for now
    let harness = AwsHarness::new();
    let faults = FaultInjector::new(20261124, FaultPlan::NONE);
    let clients = AwsClients::with_faults(&harness.config().aws, None, Some(faults.clone())).await;
    let log: Arc<dyn StreamLog> = Arc::new(AwsLog::new(clients.clone(), harness.options()));
    let table = harness.config().aws.metadata_table.clone().unwrap();
    let metadata: Arc<dyn Metadata> = Arc::new(AwsMetadata::new(clients.dynamodb.clone(), table));
    let queue_url = clients
        .sqs
        .create_queue()
        .queue_name(format!("chaos-turns-{}.fifo", uuid::Uuid::now_v7().simple()))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let turns: Arc<dyn TurnQueue> = Arc::new(SqsTurnQueue::new(clients.sqs.clone(), queue_url));
    let engine = engine_with(log.clone(), metadata.clone(), Runtimes::scripted_only());
    let worker = spool_worker::Worker::new(log.clone()).with_turns(engine, 8);
    let poll = spool_worker::PollSettings {
        lease: Duration::from_secs(4),
        ..test_poll()
    };
    tokio::spawn(spool_worker::poll_turns(Arc::new(worker), turns.clone(), poll));
    let base = serve(log.clone(), metadata.clone(), turns, harness.files().await).await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let api = Arc::new(api);
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Chaos" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/agents"), None).await;
    let builtin = agents["agents"][0]["id"].as_str().unwrap().to_owned();
    let script: Value = serde_json::from_str(SCRIPT).unwrap();
    api.ok(
        Method::PATCH,
        &format!("/v1/agents/{builtin}"),
        Some(json!({ "instruction": script.to_string(), "runtime": "scripted" })),
    )
    .await;
    let mut chats = Vec::new();
    for _ in 0..3 {
        let chat = api
            .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
            .await;
        chats.push(chat["id"].as_str().unwrap().to_owned());
    }

    // WHEN the faults start, and people post and answer
    faults.set_plan(FaultPlan {
        refuse: 0.03,
        lose_answer: 0.03,
    });
    let started = Instant::now();
    let mut writers = Vec::new();
    for (c, chat) in chats.iter().enumerate() {
        let (api, chat) = (api.clone(), chat.clone());
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut answers = 0;
            for i in 0..messages_per_chat() {
                let text = if i % 4 == 3 {
                    format!("ask me {i}")
                } else {
                    format!("message {i}")
                };
                let body = json!({ "content": text, "client_message_id": format!("c{c}-m{i}"), "on_busy": "enqueue" });
                let (status, sent) =
                    retried(&api, Method::POST, &format!("/v1/sessions/{chat}/messages"), Some(body)).await;
                assert_eq!(status, 202, "{sent}");
                acked.push((
                    format!("c{c}-m{i}"),
                    sent["seq"].as_u64().unwrap(),
                    sent["turn_id"].as_str().unwrap().to_owned(),
                ));
                answers += answer_open_questions(&api, &chat).await;
            }
            (chat, acked, answers)
        }));
    }
    let mut acked: BTreeMap<String, Vec<(String, u64, String)>> = BTreeMap::new();
    let mut answers = 0;
    for writer in writers {
        let (chat, list, answered) = writer.await.unwrap();
        acked.insert(chat, list);
        answers += answered;
    }
    let traffic = started.elapsed();
    // AND the faults stop
    faults.set_plan(FaultPlan::NONE);
    let injected = faults.counts();

    // THEN every turn ends once its questions are answered
    let settle = Instant::now();
    let mut pending = usize::MAX;
    // Each chat's turns run one after the other, each a few seconds on the emulator (moto's
    // FIFO long-poll holds a group until the poll ends): time enough for all of them.
    let patience = Duration::from_secs(60 + 15 * messages_per_chat() as u64);
    while settle.elapsed() < patience {
        pending = 0;
        for chat in &chats {
            answers += answer_open_questions(&api, chat).await;
            let events = events(&api, chat).await;
            let ended: BTreeSet<&str> = events
                .iter()
                .filter(|e| e["type"] == "agent_end")
                .filter_map(|e| e["turn_id"].as_str())
                .collect();
            pending += acked[chat]
                .iter()
                .filter(|(_, _, t)| !ended.contains(t.as_str()))
                .count();
        }
        if pending == 0 {
            break;
        }
        // Reading whole chats competes with the worker for the emulator: not too often.
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    assert_eq!(pending, 0, "turns still unended {patience:?} after the faults stopped");
    let settled = settle.elapsed();

    let (mut found, mut failed_turns, mut picked_up) = (0, 0, 0);
    for chat in &chats {
        let events = events(&api, chat).await;
        // AND the chat's events are gapless, every acknowledged message there once at its seq
        let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "{chat}");
        for (cmid, seq, turn) in &acked[chat] {
            let copies: Vec<&Value> = events
                .iter()
                .filter(|e| e["type"] == "user_message_submitted" && e["client_message_id"] == cmid.as_str())
                .collect();
            assert_eq!(copies.len(), 1, "{cmid}: {copies:?}");
            assert_eq!(
                (copies[0]["seq"].as_u64(), copies[0]["turn_id"].as_str()),
                (Some(*seq), Some(turn.as_str()))
            );
            found += 1;
            let ends: Vec<&Value> = events
                .iter()
                .filter(|e| e["turn_id"] == turn.as_str() && e["type"] == "agent_end")
                .collect();
            assert_eq!(ends.len(), 1, "{turn}");
            failed_turns += usize::from(ends[0]["payload"]["reason"] == "error");
            let starts = events
                .iter()
                .filter(|e| e["turn_id"] == turn.as_str() && e["type"] == "agent_start")
                .count();
            assert!(starts <= 1, "{turn} started {starts} times");
        }
        picked_up += events
            .iter()
            .filter(|e| {
                e["type"] == "system"
                    && e["payload"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("picked up again"))
            })
            .count();
        // AND the chat takes a new message
        let (status, sent) = api
            .call(
                Method::POST,
                &format!("/v1/sessions/{chat}/messages"),
                Some(json!({ "content": "still there?" })),
            )
            .await;
        assert_eq!(status, 202, "{sent}");
    }
    assert!(injected.refused > 0 && injected.answers_lost > 0, "{injected:?}");
    eprintln!(
        "chaos (aws, injected faults): {} attempts to AWS, {} refused, {} answers lost, in {:.1} s; {found} messages acknowledged and found exactly once; {answers} answers; {picked_up} interrupted steps picked up again by a redelivery; {failed_turns} turns ended with an error; every turn ended {:.1} s after the faults stopped",
        injected.attempts,
        injected.refused,
        injected.answers_lost,
        traffic.as_secs_f64(),
        settled.as_secs_f64()
    );
}
