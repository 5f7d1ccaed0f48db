//! Retries and claims over real HTTP, on both backends: a retried message answers exactly what
//! its first attempt did, however far the chat has moved since and however many copies race;
//! and a chat's pending-turn claim that a crash left behind (a claim without its message, a
//! message whose turn was never queued) never wedges the chat.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::session::{EventDraft, PendingTurn, Session, append_events};
use spool_log::clock::{Clock, SystemClock, rfc3339_ms};
use spool_tests::Harness;

use crate::support::{Stack, abort, all_events, chat_with, org_of, stack, until};

fn script() -> Value {
    json!({ "word_delay_ms": 5, "default": [{ "say": "one two three four five six seven eight" }] })
}

async fn post(stack: &Stack, chat: &str, body: Value) -> (reqwest::StatusCode, Value) {
    stack
        .api
        .call(Method::POST, &format!("/v1/sessions/{chat}/messages"), Some(body))
        .await
}

/// A person's message of `turn`, as the API appends it.
fn message(turn: &str, content: &str) -> EventDraft {
    spool_tests::draft(
        "user_message_submitted",
        json!({ "content": content, "author": "key:test" }),
        Some(turn),
    )
}

/// Plants the claim a process that died after claiming would have left, `age_ms` old.
async fn plant_claim(stack: &Stack, chat: &str, turn: &str, cmid: Option<&str>, age_ms: i64) {
    let claim = PendingTurn {
        turn_id: turn.to_owned(),
        client_message_id: cmid.map(str::to_owned),
        since_ms: SystemClock.now_ms() - age_ms,
    };
    let org = org_of(&stack.api);
    stack.metadata.claim_turn(&org, chat, &claim).await.unwrap().unwrap();
}

async fn pending(stack: &Stack, chat: &str) -> Value {
    stack.api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await["pending_turn_id"].clone()
}

/// A retry of a message after the chat moved on (its answer, another turn) answers the first
/// attempt's `seq` and `turn_id`, and runs nothing again.
pub(crate) async fn a_retry_answers_its_first_seq_and_turn_after_the_chat_moved_on<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    // GIVEN a message with a client id, answered, and another turn after it
    let (status, first) = post(&stack, &chat, json!({ "content": "first", "client_message_id": "c-1" })).await;
    assert_eq!(status, 202);
    let turn = first["turn_id"].as_str().unwrap();
    until(&stack.api, &chat, turn, "agent_end").await;
    let (_, second) = post(&stack, &chat, json!({ "content": "second" })).await;
    let events = until(&stack.api, &chat, second["turn_id"].as_str().unwrap(), "agent_end").await;
    // WHEN the first message is retried
    let (status, retry) = post(&stack, &chat, json!({ "content": "first", "client_message_id": "c-1" })).await;
    // THEN it answers exactly the first attempt's result
    assert_eq!(status, 202);
    assert_eq!(
        (&retry["seq"], &retry["turn_id"], &retry["duplicate"]),
        (&first["seq"], &first["turn_id"], &json!(true))
    );
    // AND nothing was written or run again
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(all_events(&stack.api, &chat).await.len(), events.len());
    assert_eq!(pending(&stack, &chat).await, Value::Null);
}

/// Twenty identical posts at once are one message: every answer has its `seq` and `turn_id`,
/// and the chat has it once, with one turn.
pub(crate) async fn identical_posts_at_once_are_one_message<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    let body = json!({ "content": "only once", "client_message_id": "c-race" });
    let answers = futures_util::future::join_all((0..20).map(|_| post(&stack, &chat, body.clone()))).await;
    let mut seen = std::collections::BTreeSet::new();
    for (status, answer) in &answers {
        assert_eq!(*status, 202, "{answer}");
        seen.insert((
            answer["seq"].as_u64().unwrap(),
            answer["turn_id"].as_str().unwrap().to_owned(),
        ));
    }
    assert_eq!(seen.len(), 1, "{answers:?}");
    let (seq, turn) = seen.into_iter().next().unwrap();
    let events = until(&stack.api, &chat, &turn, "agent_end").await;
    let messages: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "user_message_submitted")
        .collect();
    assert_eq!(messages.len(), 1);
    assert_eq!(
        (messages[0]["seq"].as_u64(), messages[0]["turn_id"].as_str()),
        (Some(seq), Some(turn.as_str()))
    );
    let starts = events.iter().filter(|e| e["type"] == "agent_start").count();
    assert_eq!(starts, 1);
    assert_eq!(pending(&stack, &chat).await, Value::Null);
}

/// A claim whose message never reached the chat (the process died in between) is released
/// once it is old enough: the next message is taken, not refused forever.
pub(crate) async fn a_claim_without_its_message_does_not_wedge_the_chat<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    // GIVEN a claim left by a crash a minute ago
    plant_claim(&stack, &chat, "turn_phantom", Some("c-lost"), 60_000).await;
    // WHEN a person writes
    let (status, sent) = post(&stack, &chat, json!({ "content": "anyone there?" })).await;
    // THEN the message is taken and answered
    assert_eq!(status, 202, "{sent}");
    let turn = sent["turn_id"].as_str().unwrap();
    until(&stack.api, &chat, turn, "agent_end").await;
    // AND the phantom never shows as a turn
    let turns = stack
        .api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns"), None)
        .await;
    assert!(!turns.to_string().contains("turn_phantom"), "{turns}");
    assert_eq!(pending(&stack, &chat).await, Value::Null);
}

/// A young claim is respected (its message may be on its way), a retry of its message adopts
/// it, and an abort releases a claim with nothing behind it.
pub(crate) async fn a_retry_adopts_its_claim_and_an_abort_releases_an_empty_one<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    // GIVEN a claim of a moment ago
    plant_claim(&stack, &chat, "turn_young", Some("c-young"), 0).await;
    // THEN another message is refused, naming it
    let (status, refused) = post(&stack, &chat, json!({ "content": "me too" })).await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused.to_string().contains("turn_young"), "{refused}");
    // WHEN the message that claimed it is retried, it takes the claimed turn and runs
    let (status, sent) = post(
        &stack,
        &chat,
        json!({ "content": "mine", "client_message_id": "c-young" }),
    )
    .await;
    assert_eq!(
        (status.as_u16(), sent["turn_id"].as_str()),
        (202, Some("turn_young")),
        "{sent}"
    );
    until(&stack.api, &chat, "turn_young", "agent_end").await;
    assert_eq!(pending(&stack, &chat).await, Value::Null);

    // GIVEN a claim of ten seconds ago with nothing behind it
    plant_claim(&stack, &chat, "turn_empty", None, 10_000).await;
    // WHEN the person aborts
    let aborted = abort(&stack.api, &chat).await;
    // THEN the claim is released (there was no turn to abort), and the chat takes messages
    assert_eq!(aborted["turn_id"], Value::Null, "{aborted}");
    assert_eq!(pending(&stack, &chat).await, Value::Null);
    let (status, _) = post(&stack, &chat, json!({ "content": "unstuck" })).await;
    assert_eq!(status, 202);
}

/// A message that was appended, but whose turn the crashed process never queued, is queued when
/// a later message finds its claim: it runs, and the chat is free after it.
pub(crate) async fn a_claimed_message_whose_turn_was_never_queued_runs<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    let org = org_of(&stack.api);
    // GIVEN a claim and its message, appended a minute ago, and no queued turn
    plant_claim(&stack, &chat, "turn_orphan", None, 60_000).await;
    let draft = message("turn_orphan", "was I heard?");
    let path = Session::stream(&org, &chat).unwrap();
    let at = rfc3339_ms(SystemClock.now_ms() - 60_000);
    append_events(stack.log.as_ref(), &path, &chat, &[draft], None, &at, None)
        .await
        .unwrap();
    // WHEN a person writes again
    let (status, refused) = post(&stack, &chat, json!({ "content": "hello?" })).await;
    // THEN that message waits its turn, and the orphaned one is answered
    assert_eq!(status, 409, "{refused}");
    let events = until(&stack.api, &chat, "turn_orphan", "agent_end").await;
    let end = events
        .iter()
        .find(|e| e["turn_id"] == "turn_orphan" && e["type"] == "agent_end")
        .unwrap();
    assert_eq!(end["payload"]["reason"], "complete");
    let (status, _) = post(&stack, &chat, json!({ "content": "hello again" })).await;
    assert_eq!(status, 202);
}

/// An answer whose process died after recording it, before it closed the question and
/// resumed the turn, is completed by its retry (the same seq); another answer to the same
/// question is refused, since the question has one.
pub(crate) async fn an_answer_cut_short_by_a_crash_is_completed_by_its_retry<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let script = json!({ "word_delay_ms": 0, "default": [
        { "say": "One question.", "tools": [{ "name": "ask_user", "arguments": { "question": "Which color?" } }] },
        { "say": "You chose {result}." }] });
    let (_, chat) = chat_with(&stack.api, script).await;
    let org = org_of(&stack.api);
    let (_, sent) = post(&stack, &chat, json!({ "content": "ask me" })).await;
    let turn = sent["turn_id"].as_str().unwrap().to_owned();
    let events = until(&stack.api, &chat, &turn, "ask_question").await;
    let question = events.iter().find(|e| e["type"] == "ask_question").unwrap()["payload"]["question_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // GIVEN the answer recorded as the API records it, and the process gone before the rest
    let payload = json!({ "question_id": question, "answer": "blue" });
    let draft = spool_tests::draft("question_answered", payload.clone(), Some(&turn));
    let producer = spool_log::stream::ProducerClaim {
        id: format!("answer:{question}"),
        epoch: 0,
        seq: 0,
    };
    let path = Session::stream(&org, &chat).unwrap();
    let now = rfc3339_ms(SystemClock.now_ms());
    let recorded = append_events(stack.log.as_ref(), &path, &chat, &[draft], Some(producer), &now, None)
        .await
        .unwrap();
    // WHEN the person's client retries the recorded answer
    let (status, retried) = stack
        .api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/question"),
            Some(payload.clone()),
        )
        .await;
    // THEN it is the same answer, and the turn carries on with it
    assert_eq!(
        (status.as_u16(), retried["seq"].as_u64()),
        (202, Some(recorded.first)),
        "{retried}"
    );
    let events = until(&stack.api, &chat, &turn, "agent_end").await;
    assert_eq!(events.iter().filter(|e| e["type"] == "question_answered").count(), 1);
    let said = events.iter().rev().find(|e| e["type"] == "message_end").unwrap();
    assert_eq!(said["payload"]["text"], "You chose blue.");

    // GIVEN another question, answered and cut short the same way
    let (_, sent) = post(&stack, &chat, json!({ "content": "ask again" })).await;
    let turn = sent["turn_id"].as_str().unwrap().to_owned();
    let events = until(&stack.api, &chat, &turn, "ask_question").await;
    let question = events.iter().rev().find(|e| e["type"] == "ask_question").unwrap()["payload"]["question_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let draft = spool_tests::draft(
        "question_answered",
        json!({ "question_id": question, "answer": "green" }),
        Some(&turn),
    );
    let producer = spool_log::stream::ProducerClaim {
        id: format!("answer:{question}"),
        epoch: 0,
        seq: 0,
    };
    append_events(stack.log.as_ref(), &path, &chat, &[draft], Some(producer), &now, None)
        .await
        .unwrap();
    // WHEN a different answer comes
    let (status, refused) = stack
        .api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/question"),
            Some(json!({ "question_id": question, "answer": "red" })),
        )
        .await;
    // THEN it is refused, the question having its answer, and the turn carries on with that one
    assert_eq!(
        (status.as_u16(), refused["error"]["code"].as_str()),
        (409, Some("answered_already")),
        "{refused}"
    );
    let events = until(&stack.api, &chat, &turn, "agent_end").await;
    let said = events.iter().rev().find(|e| e["type"] == "message_end").unwrap();
    assert_eq!(said["payload"]["text"], "You chose green.");
}

/// A turn whose job was lost while it ran (its record stands still, in progress, for longer
/// than a step can run) is queued again when its chat is found stuck, and runs to its end.
pub(crate) async fn a_running_turn_whose_job_was_lost_runs_again<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (_, chat) = chat_with(&stack.api, script()).await;
    let org = org_of(&stack.api);
    // GIVEN a claimed turn whose message is in the chat, recorded as running half an hour ago,
    // and no job for it anywhere
    plant_claim(&stack, &chat, "turn_lost", None, 40 * 60_000).await;
    let draft = message("turn_lost", "still there?");
    let path = Session::stream(&org, &chat).unwrap();
    let then = SystemClock.now_ms() - 40 * 60_000;
    let appended = append_events(
        stack.log.as_ref(),
        &path,
        &chat,
        &[draft],
        None,
        &rfc3339_ms(then),
        None,
    )
    .await
    .unwrap();
    let running = spool_chat::session::TurnRecord::at(
        "turn_lost",
        appended.first,
        spool_chat::session::TurnStatus::InProgress,
        None,
        then + 1000,
    );
    stack.metadata.record_turn(&org, &chat, &running).await.unwrap();
    // WHEN a person writes and is refused
    let (status, _) = post(&stack, &chat, json!({ "content": "hello?" })).await;
    assert_eq!(status, 409);
    // THEN the lost turn runs to its end and the chat is free
    until(&stack.api, &chat, "turn_lost", "agent_end").await;
    let (status, _) = post(&stack, &chat, json!({ "content": "hello again" })).await;
    assert_eq!(status, 202);
}

on_both_backends!(
    claims_http: a_retry_answers_its_first_seq_and_turn_after_the_chat_moved_on,
    a_running_turn_whose_job_was_lost_runs_again,
    an_answer_cut_short_by_a_crash_is_completed_by_its_retry,
    identical_posts_at_once_are_one_message,
    a_claim_without_its_message_does_not_wedge_the_chat,
    a_retry_adopts_its_claim_and_an_abort_releases_an_empty_one,
    a_claimed_message_whose_turn_was_never_queued_runs,
);
