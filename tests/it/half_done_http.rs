//! Writes a crash cuts in half, over real HTTP on both backends: a person's answer to an
//! agent's question, and a message queued behind a turn (`on_busy: "enqueue"`) without a
//! client id. A fail point stops the chat service between one write and the next, leaving the
//! stores as a killed process would (the client gets a `500`); then the client retries, or
//! never does. Nothing the chat acknowledged is lost, and nothing is done twice.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::{EndReason, Outcome};
use spool_chat::{
    session::{Session, append_events},
    turns::TurnJob,
};
use spool_log::{
    clock::{Clock, SystemClock, rfc3339_ms},
    failpoint::{ANSWER_MIDWAY, MESSAGE_APPENDED, MESSAGE_QUEUED_FIRST},
};
use spool_tests::Harness;

use crate::support::{Api, Stack, agent_client, all_events, chat_with, engine, org_of, stack, until};

fn script() -> Value {
    json!({ "word_delay_ms": 0, "default": [{ "say": "Heard you." }] })
}

async fn post(stack: &Stack, chat: &str, body: Value) -> (reqwest::StatusCode, Value) {
    stack
        .api
        .call(Method::POST, &format!("/v1/sessions/{chat}/messages"), Some(body))
        .await
}

/// `body` posted while `point` is armed: the service stops there, as a crash would.
async fn post_crashing<H: Harness>(harness: &H, stack: &Stack, chat: &str, point: &'static str, body: Value) {
    harness.fail_points().arm(point);
    let (status, answer) = post(stack, chat, body).await;
    harness.fail_points().disarm(point);
    assert_eq!(status, 500, "{answer}");
}

/// An agent's question in `chat`; its id.
async fn agent_asks(agent: &Api, chat: &str) -> String {
    let asked = agent
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/agent-messages"),
            Some(json!({ "author": "deploy-bot", "text": "Which color?", "ask": true })),
        )
        .await;
    asked["question_id"].as_str().unwrap().to_owned()
}

/// The chat's people's messages saying `content`.
fn messages<'a>(events: &'a [Value], content: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "user_message_submitted" && e["payload"]["content"] == content)
        .collect()
}

/// An answer whose process died after its first write is the question's answer when the
/// client retries it: once, starting no turn; a retry after that is answered the same.
pub(crate) async fn an_answer_cut_short_by_a_crash_is_answered_by_its_retry<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    let agent = agent_client(harness, &stack.api).await;
    let question = agent_asks(&agent, &chat).await;
    // GIVEN a person's answer whose process died midway
    let body = json!({ "content": "blue", "client_message_id": "c-blue" });
    post_crashing(harness, &stack, &chat, ANSWER_MIDWAY, body.clone()).await;
    // WHEN the client retries it
    let (status, retried) = post(&stack, &chat, body.clone()).await;
    // THEN it answers the question and starts no turn
    assert_eq!(
        (status.as_u16(), retried["answers"].as_str(), &retried["turn_id"]),
        (202, Some(question.as_str()), &Value::Null),
        "{retried}"
    );
    // AND the chat has the answer once, at the seq the retry was told
    let events = all_events(&stack.api, &chat).await;
    let blue = messages(&events, "blue");
    assert_eq!(blue.len(), 1, "{events:?}");
    assert_eq!(
        (blue[0]["seq"].as_u64(), blue[0]["payload"]["answers"].as_str()),
        (retried["seq"].as_u64(), Some(question.as_str()))
    );
    // WHEN it is retried once more, after the question was closed
    let (status, again) = post(&stack, &chat, body).await;
    // THEN it is the same answer, and still nothing else was written
    assert_eq!(
        (status.as_u16(), &again["seq"], &again["duplicate"]),
        (202, &retried["seq"], &json!(true)),
        "{again}"
    );
    assert_eq!(all_events(&stack.api, &chat).await.len(), events.len());
    // AND the next message, no question being open, starts a turn that runs
    let (status, next) = post(&stack, &chat, json!({ "content": "thanks" })).await;
    assert!(status == 202 && next["answers"].is_null(), "{next}");
    until(&stack.api, &chat, next["turn_id"].as_str().unwrap(), "agent_end").await;
}

/// An answer whose process died after its first write, never retried, is still the
/// question's answer: the next person's message is a message of its own.
pub(crate) async fn an_answer_cut_short_by_a_crash_is_kept_without_a_retry<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    let agent = agent_client(harness, &stack.api).await;
    let question = agent_asks(&agent, &chat).await;
    // GIVEN a person's answer, without a client id, whose process died midway
    post_crashing(harness, &stack, &chat, ANSWER_MIDWAY, json!({ "content": "green" })).await;
    // WHEN another message comes, and the first is never retried
    let (status, next) = post(&stack, &chat, json!({ "content": "anything else?" })).await;
    // THEN that one is a message of its own, with a turn
    assert!(status == 202 && next["answers"].is_null(), "{next}");
    until(&stack.api, &chat, next["turn_id"].as_str().unwrap(), "agent_end").await;
    // AND the question's answer is the first, once
    let events = all_events(&stack.api, &chat).await;
    let answers: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["answers"] == question.as_str())
        .collect();
    assert_eq!(answers.len(), 1, "{events:?}");
    assert_eq!(answers[0]["payload"]["content"], "green");
}

/// A message queued behind a turn without a client id, whose process died after appending it,
/// gets its turn although nobody writes again.
pub(crate) async fn an_enqueued_message_cut_short_by_a_crash_gets_its_turn<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    // GIVEN a message queued without a client id, whose process died after appending it
    let body = json!({ "content": "queued", "on_busy": "enqueue" });
    post_crashing(harness, &stack, &chat, MESSAGE_APPENDED, body).await;
    // THEN it is in the chat once, and its turn runs to its end, once
    let events = all_events(&stack.api, &chat).await;
    let queued = messages(&events, "queued");
    assert_eq!(queued.len(), 1, "{events:?}");
    let turn = queued[0]["turn_id"].as_str().unwrap().to_owned();
    let events = until(&stack.api, &chat, &turn, "agent_end").await;
    let starts = events
        .iter()
        .filter(|e| e["turn_id"] == turn.as_str() && e["type"] == "agent_start")
        .count();
    assert_eq!(starts, 1);
    // AND the chat takes the next message
    let (status, next) = post(&stack, &chat, json!({ "content": "and now?" })).await;
    assert_eq!(status, 202, "{next}");
    until(&stack.api, &chat, next["turn_id"].as_str().unwrap(), "agent_end").await;
}

/// A message queued without a client id whose process died after queueing its turn, before
/// appending it, leaves nothing: its job waits a while for it, then does nothing, and the chat's
/// next turns run.
pub(crate) async fn an_enqueued_message_whose_crash_came_before_its_append_leaves_nothing<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    // GIVEN a message queued without a client id, whose process died before appending it
    let body = json!({ "content": "lost", "on_busy": "enqueue" });
    post_crashing(harness, &stack, &chat, MESSAGE_QUEUED_FIRST, body).await;
    // WHEN the next message is queued the same way
    let (status, next) = post(&stack, &chat, json!({ "content": "here", "on_busy": "enqueue" })).await;
    assert_eq!(status, 202, "{next}");
    // THEN it runs (once the job before it stopped waiting), and the lost one left no event
    // and no turn
    let events = until(&stack.api, &chat, next["turn_id"].as_str().unwrap(), "agent_end").await;
    assert!(messages(&events, "lost").is_empty(), "{events:?}");
    let turns = stack
        .api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns"), None)
        .await;
    assert_eq!(turns["turns"].as_array().map(Vec::len), Some(1), "{turns}");
}

/// A step whose job was queued before its message starts before the message is there: it
/// waits for it and runs the turn; and a step whose message never comes does nothing, and
/// giving it up writes nothing either.
pub(crate) async fn a_step_queued_before_its_message_waits_for_it<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    let org = org_of(&stack.api);
    let path = Session::stream(&org, &chat).unwrap();
    let engine = engine(stack.log.clone(), stack.metadata.clone());
    let job = |turn: &str| {
        let mut job = TurnJob::new(&org, &chat, turn, 0);
        job.before_message_ms = Some(SystemClock.now_ms());
        job
    };
    // GIVEN a step of a turn whose message is not appended yet
    let late = job("turn_late");
    let step = tokio::spawn({
        let (engine, late) = (engine.clone(), late.clone());
        async move { engine.run(&late, 1).await }
    });
    // WHEN the message comes a moment later
    tokio::time::sleep(Duration::from_millis(300)).await;
    let draft = spool_tests::draft(
        "user_message_submitted",
        json!({ "content": "late", "author": "key:test" }),
        Some("turn_late"),
    );
    let now = rfc3339_ms(SystemClock.now_ms());
    append_events(stack.log.as_ref(), &path, &chat, &[draft], None, &now, None)
        .await
        .unwrap();
    // THEN the step runs the turn to its end
    assert_eq!(step.await.unwrap().unwrap(), Outcome::Ended(EndReason::Complete));
    let events = all_events(&stack.api, &chat).await;
    let start = events.iter().find(|e| e["type"] == "agent_start").unwrap();
    assert_eq!(
        start["payload"]["trigger_seq"],
        messages(&events, "late")[0]["seq"],
        "the message, not the tail before it"
    );
    // WHEN a step's message never comes
    let lost = job("turn_lost");
    // THEN it does nothing once it stopped waiting, and giving it up writes nothing
    assert_eq!(engine.run(&lost, 1).await.unwrap(), Outcome::Nothing);
    engine.give_up(&lost, 5, "failed").await.unwrap();
    assert_eq!(all_events(&stack.api, &chat).await.len(), events.len());
}

on_both_backends!(
    half_done_http: an_answer_cut_short_by_a_crash_is_answered_by_its_retry,
    an_answer_cut_short_by_a_crash_is_kept_without_a_retry,
    an_enqueued_message_cut_short_by_a_crash_gets_its_turn,
    an_enqueued_message_whose_crash_came_before_its_append_leaves_nothing,
    a_step_queued_before_its_message_waits_for_it,
);
