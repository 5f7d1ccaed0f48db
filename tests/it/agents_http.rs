//! Agent turns end to end, over real HTTP on both backends: the chat API, the stream function
//! and the worker draining the turn queue, as `spool serve` runs them, with the scripted
//! runtime. A message starts a turn whose events follow it in the stream; approvals, questions
//! and plans wait across invocations for the person's answer; an abort stops a turn mid-answer;
//! a worker that dies mid-turn is replaced without an event written twice.

use std::{sync::Arc, time::Duration};

use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::{Outcome, Runtimes, Settings};
use spool_chat::{metadata::Metadata, turns::TurnJob};
use spool_log::port::StreamLog;
use spool_tests::Harness;

use crate::support::{
    abort, all_events, chat_with, engine, engine_with, one, org_of, send, serve, setup_on, stack, stack_configured,
    stack_polling, test_poll, test_settings, types_of, until,
};

const ASKING: &str = r#"{"word_delay_ms": 0, "rules": [
  {"match": ["color"], "rounds": [
    {"say": "One question.", "tools": [{"name": "ask_user", "arguments": {"question": "Which color?"}}]},
    {"say": "You chose {result}."}]},
  {"match": ["plan"], "rounds": [
    {"say": "A plan.", "tools": [{"name": "propose_plan", "arguments": {"plan": "1. paint"}}]},
    {"say": "The plan was {result}."}]},
  {"match": ["helper"], "rounds": [
    {"say": "May I?", "tools": [{"name": "create_agent", "arguments": {"name": "Helper {input}"}}]},
    {"say": "Result: {result}"}]},
  {"match": ["task"], "rounds": [
    {"say": "Noted.", "tools": [{"name": "create_task", "arguments": {"title": "Do it"}},
                                {"name": "rename_chat", "arguments": {"title": 7}},
                                {"name": "create_task", "arguments": {"title": ""}}]},
    {"say": "Done."}]},
  {"match": ["slow"], "rounds": [{"say": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty", "sleep_ms": 0}]},
  {"match": ["fail"], "rounds": [{"fail": "the model is down"}]}],
 "default": [{"say": "Hello there, {input}!"}]}"#;

fn script() -> Value {
    serde_json::from_str(ASKING).unwrap()
}

/// A message starts a turn: its events follow the message in order, the answer streams in
/// updates, the chat is free again at the end, and the workspace's feed says so.
pub(crate) async fn a_message_gets_a_streamed_answer_and_frees_the_chat<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = chat_with(api, script()).await;
    // WHEN a person writes
    let turn = send(api, &chat, "Ada").await;
    // THEN the turn runs: submit before anything the runtime does
    let events = until(api, &chat, &turn, "agent_end").await;
    let types = types_of(&events, &turn);
    assert_eq!(types[0], "user_message_submitted");
    assert_eq!(types[1], "agent_start");
    assert_eq!(types[2], "message_start");
    assert!(types.contains(&"message_update".to_owned()), "{types:?}");
    assert_eq!(&types[types.len() - 2..], ["message_end", "agent_end"]);
    assert_eq!(one(&events, &turn, "agent_start")["payload"]["runtime"], "scripted");
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let end = one(&events, &turn, "message_end");
    assert_eq!(end["payload"]["text"], "Hello there, Ada!");
    let streamed: String = events
        .iter()
        .filter(|e| e["type"] == "message_update")
        .map(|e| e["payload"]["delta"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, "Hello there, Ada!");
    // AND every seq is its place in the stream
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    // AND the chat is free: no pending turn, a new message is taken, the preview is the answer
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["pending_turn_id"], Value::Null);
    assert_eq!(session["last_message_preview"], "Hello there, Ada!");
    let next = send(api, &chat, "again").await;
    until(api, &chat, &next, "agent_end").await;
    // AND both turns show as completed, newest first
    let turns = api.ok(Method::GET, &format!("/v1/sessions/{chat}/turns"), None).await;
    let states: Vec<(&str, &str)> = turns["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["turn_id"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [(next.as_str(), "completed"), (turn.as_str(), "completed")]);
    assert!(turns["turns"][0]["expires_at"].is_string());
    // AND the worker sealed the chat's pages to its end after the turn
    let path = spool_chat::session::Session::stream(&org_of(api), &chat).unwrap();
    spool_tests::eventually("the chat's pages sealed after agent_end", || async {
        let meta = stack.log.metadata(&path).await.unwrap();
        (meta.sealed == meta.tail).then_some(())
    })
    .await;
    // AND the workspace feed told the list
    let feed = api.get(&format!("/v1/stream/workspaces/{ws}/feed?offset=-1")).await;
    let feed: Vec<Value> = feed.json().await.unwrap();
    let kinds: Vec<&str> = feed.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for kind in [
        "chat.created",
        "chat.message_added",
        "chat.processing_started",
        "chat.processing_finished",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    // AND each carries exactly the third source design's fields, with its id and time
    let keys = |e: &Value| {
        let mut keys: Vec<String> = e.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let of = |kind: &str| feed.iter().filter(move |e| e["type"] == kind).collect::<Vec<_>>();
    for added in of("chat.message_added") {
        assert_eq!(
            keys(added),
            [
                "author_type",
                "chat_id",
                "chat_title",
                "id",
                "ts",
                "type",
                "workspace_id"
            ]
        );
        assert_eq!(added["chat_id"], chat.as_str());
        assert_eq!(added["workspace_id"], ws.as_str());
    }
    let authors: Vec<&str> = of("chat.message_added")
        .iter()
        .map(|e| e["author_type"].as_str().unwrap())
        .collect();
    assert!(authors.contains(&"user") && authors.contains(&"agent"), "{authors:?}");
    let started = of("chat.processing_started")[0];
    assert_eq!(
        keys(started),
        [
            "agent_name",
            "chat_id",
            "chat_title",
            "id",
            "ts",
            "type",
            "workspace_id"
        ]
    );
    let finished = of("chat.processing_finished")[0];
    assert_eq!(
        keys(finished),
        [
            "agent_name",
            "chat_id",
            "chat_title",
            "id",
            "reason",
            "ts",
            "type",
            "workspace_id"
        ]
    );
    assert_eq!(finished["reason"], "complete");
}

/// A question waits across invocations; the answer binds to its id and resumes the turn.
pub(crate) async fn a_question_waits_for_its_answer<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (_, chat) = chat_with(api, script()).await;
    let turn = send(api, &chat, "pick a color").await;
    let events = until(api, &chat, &turn, "ask_question").await;
    let asked = one(&events, &turn, "ask_question")["payload"].clone();
    assert_eq!(asked["question"], "Which color?");
    // WHILE it waits, the chat is busy with the turn and nothing more happens
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(all_events(api, &chat).await.len(), events.len());
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["pending_turn_id"], turn.as_str());
    let state = api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns/{turn}"), None)
        .await;
    assert_eq!(state["status"], "in_progress");
    assert!(
        state["detail"].as_str().unwrap().starts_with("waiting for an answer"),
        "{state}"
    );
    // WHEN a wrong id is answered: 409; the right one: the turn resumes with it
    let path = format!("/v1/sessions/{chat}/question");
    let (status, _) = api
        .call(
            Method::POST,
            &path,
            Some(json!({ "question_id": "nope", "answer": "red" })),
        )
        .await;
    assert_eq!(status, 409);
    api.ok(
        Method::POST,
        &path,
        Some(json!({ "question_id": asked["question_id"], "answer": "teal" })),
    )
    .await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let texts: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "message_end")
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["One question.", "You chose teal."]);
    assert_eq!(one(&events, &turn, "agent_start")["seq"], 2, "one agent_start per turn");
}

/// An abort while the turn waits on a question ends it; the question can no longer be answered.
pub(crate) async fn an_abort_ends_a_waiting_turn<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (_, chat) = chat_with(api, script()).await;
    let turn = send(api, &chat, "pick a color").await;
    let events = until(api, &chat, &turn, "ask_question").await;
    let question = one(&events, &turn, "ask_question")["payload"]["question_id"].clone();
    let aborted = abort(api, &chat).await;
    assert_eq!(aborted["turn_id"], turn.as_str());
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "aborted");
    // A cancelled turn is recorded as failed, with the reason (the third source design).
    let state = api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns/{turn}"), None)
        .await;
    assert_eq!(
        (state["status"].as_str(), state["detail"].as_str()),
        (Some("failed"), Some("aborted"))
    );
    let (status, _) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/question"),
            Some(json!({ "question_id": question, "answer": "late" })),
        )
        .await;
    assert_eq!(status, 409);
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["pending_turn_id"], Value::Null);
}

/// The global chat, as the second source design has it: Spool (the demo script) asks, and the
/// person's next plain message answers; `/chat/history` shows people's and Spool's messages.
pub(crate) async fn in_the_global_chat_the_next_message_answers_spool<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let sent = api
        .ok(
            Method::POST,
            "/chat/user_message",
            Some(json!({ "text": "ask me a question" })),
        )
        .await;
    let turn = sent["turn_id"].as_str().unwrap().to_owned();
    until(api, "global", &turn, "ask_question").await;
    let answered = api
        .ok(Method::POST, "/chat/user_message", Some(json!({ "text": "Ada" })))
        .await;
    assert_eq!(answered["turn_id"], turn.as_str());
    assert!(answered["answers"].is_string(), "{answered}");
    until(api, "global", &turn, "agent_end").await;
    let history = api.ok(Method::GET, "/chat/history?after=0", None).await;
    let lines: Vec<(String, String)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_eq!(lines[0], ("user".to_owned(), "ask me a question".to_owned()));
    assert_eq!(lines[2], ("agent".to_owned(), "What should I call you?".to_owned()));
    assert_eq!(lines[3], ("user".to_owned(), "Ada".to_owned()));
    assert!(lines[4].1.contains("Nice to meet you, **Ada**"), "{lines:?}");
}

/// A plan is approved, or rejected with feedback the agent reads.
pub(crate) async fn plans_are_approved_or_rejected_with_feedback<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (_, chat) = chat_with(api, script()).await;
    for (answer, expected) in [
        (json!({ "action": "approve" }), "The plan was approved."),
        (
            json!({ "action": "reject", "feedback": "too short" }),
            "The plan was rejected: too short.",
        ),
    ] {
        let turn = send(api, &chat, "make a plan").await;
        let events = until(api, &chat, &turn, "plan_approval_required").await;
        let plan = one(&events, &turn, "plan_approval_required")["payload"].clone();
        assert_eq!(plan["plan"], "1. paint");
        let mut body = answer.clone();
        body["plan_id"] = plan["plan_id"].clone();
        api.ok(Method::POST, &format!("/v1/sessions/{chat}/plan"), Some(body))
            .await;
        let events = until(api, &chat, &turn, "agent_end").await;
        let last = events
            .iter()
            .rfind(|e| e["turn_id"] == turn.as_str() && e["type"] == "message_end")
            .unwrap();
        assert_eq!(last["payload"]["text"], expected);
    }
}

/// A call that needs approval runs only when approved; a declined one never runs.
pub(crate) async fn approved_calls_run_and_declined_ones_never_do<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = chat_with(api, script()).await;
    for (decision, runs) in [("decline", false), ("approve", true)] {
        let turn = send(api, &chat, &format!("helper {decision}")).await;
        let events = until(api, &chat, &turn, "tool_approval_required").await;
        let request = one(&events, &turn, "tool_approval_required")["payload"].clone();
        assert_eq!(request["tool"], "create_agent");
        assert!(!types_of(&events, &turn).contains(&"tool_start".to_owned()));
        api.ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/approval"),
            Some(json!({ "decision": decision, "tool_call_id": request["tool_call_id"] })),
        )
        .await;
        let events = until(api, &chat, &turn, "agent_end").await;
        let end = one(&events, &turn, "tool_end")["payload"].clone();
        let list = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/agents"), None).await;
        let made = list["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == format!("Helper helper {decision}"));
        assert_eq!(made, runs, "{decision}: {end}");
        assert_eq!(types_of(&events, &turn).contains(&"tool_start".to_owned()), runs);
        if !runs {
            assert_eq!(end["declined"], true);
        }
    }
}

/// Actions run at once; an invalid one becomes a system event naming what was wrong; a task
/// is announced on the workspace feed, its `actor` the person who asked and its `agent` the
/// agent.
pub(crate) async fn actions_run_and_invalid_ones_are_reported<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = chat_with(api, script()).await;
    let turn = send(api, &chat, "a task please").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let tasks = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/tasks"), None).await;
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 1, "{tasks}");
    assert_eq!(tasks["tasks"][0]["title"], "Do it");
    let systems: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "system")
        .map(|e| e["payload"]["message"].as_str().unwrap())
        .collect();
    assert_eq!(systems.len(), 2, "{systems:?}");
    assert!(
        systems[0].contains("`rename_chat` failed: `title` must be"),
        "{systems:?}"
    );
    assert!(
        systems[1].contains("`create_task` failed: `summary` must be"),
        "{systems:?}"
    );
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let feed: Vec<Value> = api
        .get(&format!("/v1/stream/workspaces/{ws}/feed?offset=-1"))
        .await
        .json()
        .await
        .unwrap();
    // AND the task's `actor` is the person whose message the agent answered, the agent in its
    // own field (the third source design: "with the actor being the user")
    let person = one(&events, &turn, "user_message_submitted")["payload"]["author"].clone();
    assert!(person.as_str().is_some_and(|p| !p.is_empty()), "{person}");
    let created = feed
        .iter()
        .find(|e| e["type"] == "task.created" && e["summary"] == "Do it")
        .unwrap_or_else(|| panic!("{feed:?}"));
    assert_eq!(created["actor"], person, "{created}");
    assert_eq!(created["agent"], "Spool", "{created}");
}

/// An abort stops a turn mid-answer: the partial message is kept, the turn ends `aborted`;
/// an abort with nothing running changes nothing but its own event.
pub(crate) async fn an_abort_stops_the_answer_and_keeps_what_was_said<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let mut slow = script();
    slow["word_delay_ms"] = json!(150);
    let (_, chat) = chat_with(api, slow).await;
    let turn = send(api, &chat, "slow please").await;
    until(api, &chat, &turn, "message_update").await;
    abort(api, &chat).await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "aborted");
    let end = one(&events, &turn, "message_end")["payload"].clone();
    assert_eq!(end["aborted"], true);
    let text = end["text"].as_str().unwrap();
    assert!(text.starts_with("one "), "{text}");
    assert!(!text.contains("twenty"), "stopped early: {text}");
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["pending_turn_id"], Value::Null);

    // WHEN nothing runs, an abort is only its own event
    let before = all_events(api, &chat).await.len();
    abort(api, &chat).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(all_events(api, &chat).await.len(), before + 1);
}

/// A runtime that fails ends the turn with a system event and `agent_end{reason: error}`.
pub(crate) async fn a_failing_runtime_ends_the_turn_with_an_error<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (_, chat) = chat_with(api, script()).await;
    let turn = send(api, &chat, "fail now").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let end = one(&events, &turn, "agent_end")["payload"].clone();
    assert_eq!(end["reason"], "error");
    let system = one(&events, &turn, "system")["payload"].clone();
    assert!(
        system["message"].as_str().unwrap().contains("the model is down"),
        "{system}"
    );
    let state = api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns/{turn}"), None)
        .await;
    assert_eq!(
        (state["status"].as_str(), state["detail"].as_str()),
        (Some("failed"), Some("error"))
    );
}

/// A worker that dies mid-turn is replaced by the redelivery: what it wrote stays, once; the
/// open message is ended as interrupted, and the turn completes. A redelivery of a finished
/// step writes nothing.
pub(crate) async fn a_redelivered_step_writes_nothing_twice<H: Harness>(harness: &H) {
    // No worker drains the queue here: the test is the worker.
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let base = serve(
        log.clone(),
        metadata.clone(),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let mut slow = script();
    slow["word_delay_ms"] = json!(40);
    let (_, chat) = chat_with(&api, slow).await;
    let turn = send(&api, &chat, "slow").await;
    let job = TurnJob::new(&org_of(&api), &chat, &turn, 1);
    let engine = engine(log.clone(), metadata.clone());
    // WHEN the first delivery dies after some of the answer was written
    let first = tokio::spawn({
        let (engine, job) = (engine.clone(), job.clone());
        async move { engine.run(&job, 1).await }
    });
    until(&api, &chat, &turn, "message_update").await;
    first.abort();
    let _ = first.await;
    let written = all_events(&api, &chat).await;
    // AND SQS delivers the step again
    let outcome = engine.run(&job, 2).await.unwrap();
    // THEN the turn completes, with what the first wrote kept once and its message ended
    assert_eq!(outcome, Outcome::Ended(spool_agents::EndReason::Complete));
    let events = all_events(&api, &chat).await;
    assert_eq!(&events[..written.len()], &written[..], "nothing written is rewritten");
    let types = types_of(&events, &turn);
    assert_eq!(types.iter().filter(|t| *t == "agent_start").count(), 1, "{types:?}");
    assert_eq!(types.iter().filter(|t| *t == "agent_end").count(), 1, "{types:?}");
    let ends: Vec<&Value> = events.iter().filter(|e| e["type"] == "message_end").collect();
    assert_eq!(ends.len(), 2, "{types:?}");
    assert_eq!(ends[0]["payload"]["interrupted"], true);
    assert!(ends[1]["payload"]["text"].as_str().unwrap().ends_with("twenty"));
    // AND a delivery of the finished step (an ack that was lost) writes nothing
    assert_eq!(engine.run(&job, 3).await.unwrap(), Outcome::Nothing);
    assert_eq!(all_events(&api, &chat).await.len(), events.len());
}

/// A step that failed on every attempt ends its turn: a system event that says so, and
/// `agent_end{reason: error}` (its message then goes to the dead-letter queue).
pub(crate) async fn a_turn_given_up_says_so_in_the_chat<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let base = serve(
        log.clone(),
        metadata.clone(),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let (_, chat) = chat_with(&api, script()).await;
    let turn = send(&api, &chat, "pick a color").await;
    let job = TurnJob::new(&org_of(&api), &chat, &turn, 1);
    let engine = engine(log, metadata);
    assert_eq!(engine.run(&job, 1).await.unwrap(), Outcome::Waiting);
    engine.give_up(&job, 3, "the store was unavailable").await.unwrap();
    let events = all_events(&api, &chat).await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "error");
    let system = one(&events, &turn, "system")["payload"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("failed 3 times") && system.contains("the store was unavailable"),
        "{system}"
    );
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["pending_turn_id"], Value::Null);
    // Giving up twice writes nothing more.
    engine.give_up(&job, 3, "again").await.unwrap();
    assert_eq!(all_events(&api, &chat).await.len(), events.len());
}

/// One record of a batch as Lambda's SQS event source mapping hands it over (the fixture
/// `functions/worker/events/turn.json`), of FIFO group `group`, with `body`.
fn sqs_record(group: &str, body: String) -> Value {
    let fixture: Value = serde_json::from_str(include_str!("../../functions/worker/events/turn.json")).unwrap();
    let mut record = fixture["Records"][0].clone();
    record["attributes"]["MessageGroupId"] = json!(group);
    record["body"] = json!(body);
    record
}

/// The record of a job the turn queue delivered, with its receipt.
fn delivered_record(delivery: &spool_chat::turns::Delivery) -> Value {
    let mut record = sqs_record(&delivery.job.group(), serde_json::to_string(&delivery.job).unwrap());
    record["receiptHandle"] = json!(delivery.receipt);
    record
}

/// A batch of `records`, as the worker's Lambda handler receives it.
fn sqs_batch(records: Vec<Value>) -> aws_lambda_events::event::sqs::SqsEvent {
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

/// Attempts are runs, not deliveries: a job the queue delivered five times, four of them to a
/// throttled function that never ran it, runs its step (it is not given up as a fifth attempt);
/// a step whose runs are used up is given up; and the last delivery before the dead-letter
/// queue ends the turn rather than leave the chat waiting.
pub(crate) async fn throttled_deliveries_use_no_attempts<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let base = serve(
        log.clone(),
        metadata.clone(),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let org = org_of(&api);
    let engine = engine(log.clone(), metadata.clone());
    let worker = Arc::new(
        spool_worker::Worker::new(log)
            .with_turns(engine.clone(), 3)
            .with_max_deliveries(8),
    );
    let batch = |chat: &str, turn: &str, delivery: u32| {
        let job = json!({ "org": org, "session_id": chat, "turn_id": turn, "trigger_seq": 1 });
        let mut record = sqs_record(chat, job.to_string());
        record["attributes"]["ApproximateReceiveCount"] = json!(delivery.to_string());
        sqs_batch(vec![record])
    };
    // WHEN a turn's first run comes on its fifth delivery
    let (_, chat) = chat_with(&api, script()).await;
    let turn = send(&api, &chat, "Ada").await;
    let response = worker.handle_batch(batch(&chat, &turn, 5)).await;
    // THEN the step runs and the turn completes
    assert!(response.batch_item_failures.is_empty());
    let events = all_events(&api, &chat).await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    assert!(!types_of(&events, &turn).contains(&"system".to_owned()));

    // WHEN a step's three runs were used up by earlier runs
    let (_, chat) = chat_with(&api, script()).await;
    let turn = send(&api, &chat, "Grace").await;
    let job = TurnJob::new(&org, &chat, &turn, 1);
    for _ in 0..3 {
        engine.count_run(&job).await.unwrap();
    }
    let response = worker.handle_batch(batch(&chat, &turn, 4)).await;
    // THEN the next delivery gives the turn up, saying so, and the job goes to the dead-letter queue
    assert_eq!(response.batch_item_failures.len(), 1);
    let events = all_events(&api, &chat).await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "error");
    assert!(types_of(&events, &turn).contains(&"system".to_owned()));
}

/// A Lambda batch from the FIFO turns queue: chats run their turns in order; after a failure
/// the rest of that chat's records are reported failed too (so SQS keeps their order), and other
/// chats' turns run.
pub(crate) async fn a_fifo_batch_fails_only_the_rest_of_a_failing_group<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let base = serve(
        log.clone(),
        metadata.clone(),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let org = org_of(&api);
    let (_, first) = chat_with(&api, script()).await;
    let (_, second) = chat_with(&api, script()).await;
    let t1 = send(&api, &first, "one").await;
    let t2 = send(&api, &second, "two").await;
    let record = |id: &str, group: &str, body: String| {
        let mut record = sqs_record(group, body);
        record["messageId"] = json!(id);
        record
    };
    let job = |chat: &str, turn: &str| {
        json!({ "org": org, "session_id": chat, "turn_id": turn, "trigger_seq": 1 }).to_string()
    };
    let event = sqs_batch(vec![
        record("a-1", "group-a", "not a job".to_owned()),
        record("a-2", "group-a", job(&first, &t1)),
        record("b-1", "group-b", job(&second, &t2)),
    ]);
    let worker = Arc::new(spool_worker::Worker::new(log.clone()).with_turns(engine(log, metadata), 3));
    let response = worker.handle_batch(event).await;
    let mut failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    failed.sort_unstable();
    assert_eq!(failed, ["a-1", "a-2"]);
    assert!(!types_of(&all_events(&api, &first).await, &t1).contains(&"agent_start".to_owned()));
    let events = all_events(&api, &second).await;
    assert_eq!(one(&events, &t2, "agent_end")["payload"]["reason"], "complete");
}

/// An agent never starts on empty input: a turn whose message is blank (written past the API,
/// which refuses it) ends with a system event and no `agent_start`.
pub(crate) async fn an_agent_never_starts_on_empty_input<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let base = serve(
        log.clone(),
        metadata.clone(),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let (_, chat) = chat_with(&api, script()).await;
    let (status, _) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": " \n " })),
        )
        .await;
    assert_eq!(status, 400);
    let org = org_of(&api);
    let path = spool_chat::session::Session::stream(&org, &chat).unwrap();
    let draft = spool_tests::draft(
        "user_message_submitted",
        json!({ "content": "   ", "author": "key:test" }),
        Some("turn_blank"),
    );
    spool_chat::session::append_events(log.as_ref(), &path, &chat, &[draft], None, "2026-11-23T00:00:00Z", None)
        .await
        .unwrap();
    let job = TurnJob::new(&org, &chat, "turn_blank", 1);
    let outcome = engine(log, metadata).run(&job, 1).await.unwrap();
    assert_eq!(outcome, Outcome::Ended(spool_agents::EndReason::Error));
    let events = all_events(&api, &chat).await;
    let types = types_of(&events, "turn_blank");
    assert_eq!(types, ["user_message_submitted", "system", "agent_end"]);
}

/// Every runtime lives under the turn's time limit: a script that would pause for a minute, or
/// speak one word a minute, is stopped at the limit and the turn ends with an error saying so,
/// keeping what was said.
pub(crate) async fn a_runtime_past_the_turn_time_limit_is_stopped<H: Harness>(harness: &H) {
    let settings = Settings {
        step_timeout: Duration::from_millis(1500),
        ..test_settings()
    };
    let stack = stack_configured(harness, Runtimes::scripted_only(), settings).await;
    let api = &stack.api;
    let script = json!({ "word_delay_ms": 60000, "rules": [
        { "match": ["pause"], "rounds": [{ "say": "never", "sleep_ms": 60000 }] }],
        "default": [{ "say": "first second third" }] });
    let (_, chat) = chat_with(api, script).await;
    for (text, said) in [("pause please", ""), ("talk slowly", "first")] {
        let started = std::time::Instant::now();
        let turn = send(api, &chat, text).await;
        let events = until(api, &chat, &turn, "agent_end").await;
        assert!(started.elapsed() < Duration::from_secs(20), "{text}: not stopped");
        assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "error", "{text}");
        let system = events
            .iter()
            .rev()
            .find(|e| e["turn_id"] == turn.as_str() && e["type"] == "system")
            .unwrap();
        let message = system["payload"]["message"].as_str().unwrap();
        assert!(message.contains("time limit"), "{text}: {message}");
        let written: String = events
            .iter()
            .filter(|e| e["turn_id"] == turn.as_str() && e["type"] == "message_update")
            .map(|e| e["payload"]["delta"].as_str().unwrap())
            .collect();
        assert_eq!(written.trim(), said, "{text}");
    }
}

/// A model that thinks for a while (3.5 s unless told) before it answers, and counts how often
/// it was asked.
pub(crate) struct Slow(
    pub(crate) Arc<std::sync::atomic::AtomicUsize>,
    pub(crate) Option<Duration>,
);

#[async_trait::async_trait]
impl spool_agents::runtime::Runtime for Slow {
    fn describe(&self, _: &spool_agents::runtime::Request) -> String {
        "slow".to_owned()
    }

    async fn respond(
        &self,
        _: &spool_agents::runtime::Request,
        sink: &mut dyn spool_agents::runtime::Sink,
    ) -> Result<spool_agents::runtime::Reply, spool_agents::runtime::Error> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(self.1.unwrap_or(Duration::from_millis(3500))).await;
        sink.text("after a long think").await?;
        Ok(spool_agents::runtime::Reply {
            text: "after a long think".to_owned(),
            ..Default::default()
        })
    }
}

/// A step that runs longer than its lease keeps it by heartbeats: nobody else picks the turn
/// up meanwhile, so the model is asked once.
pub(crate) async fn a_step_longer_than_its_lease_keeps_it<H: Harness>(harness: &H) {
    let poll = spool_worker::PollSettings {
        lease: Duration::from_secs(1),
        ..test_poll()
    };
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runtimes = Runtimes::scripted_only().with_openai(Arc::new(Slow(asked.clone(), None)));
    let stack = stack_polling(harness, runtimes, test_settings(), poll).await;
    let api = &stack.api;
    let chat = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    let turn = send(api, &chat, "think hard").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let types = types_of(&events, &turn);
    assert_eq!(types.iter().filter(|t| *t == "agent_start").count(), 1, "{types:?}");
    assert_eq!(types.iter().filter(|t| *t == "message_end").count(), 1, "{types:?}");
    assert!(!types.contains(&"system".to_owned()), "picked up again: {types:?}");
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    assert_eq!(
        asked.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "another worker took the turn over"
    );
}

/// On Lambda, the turns of a batch stay leased while the batch runs: the function extends their
/// A Lambda invocation about to reach its deadline: the running step ends its partial message
/// as interrupted and a new job on the turns queue carries the turn on, which the next
/// invocation finishes, with one start, one end and nothing written twice.
pub(crate) async fn a_step_at_the_lambda_deadline_carries_over_to_a_new_job<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let queue = harness.turns().await;
    let base = serve(log.clone(), metadata.clone(), queue.clone(), harness.files().await).await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let slow = json!({ "word_delay_ms": 250, "rules": [],
        "default": [{ "say": "one two three four five six seven eight nine ten eleven twelve" }] });
    let (_, chat) = chat_with(&api, slow).await;
    let turn = send(&api, &chat, "talk").await;
    let lease = spool_chat::turns::Lease::new(Duration::from_secs(60), "lambda");
    let receive = |queue: Arc<dyn spool_chat::turns::TurnQueue>| {
        let lease = lease.clone();
        async move {
            let delivered = queue
                .receive(&spool_chat::turns::Receive::new(1, lease, Duration::from_secs(5)))
                .await
                .unwrap();
            assert_eq!(delivered.len(), 1, "{delivered:?}");
            delivered.into_iter().next().unwrap()
        }
    };
    let event = |delivery: &spool_chat::turns::Delivery| sqs_batch(vec![delivered_record(delivery)]);
    let worker = Arc::new(
        spool_worker::Worker::new(log.clone())
            .with_turns(engine(log, metadata), 3)
            .with_heartbeats(queue.clone(), Duration::from_secs(60)),
    );
    // WHEN the turn's job reaches an invocation that ends before the answer can
    let first = receive(queue.clone()).await;
    // (an invocation of 1.5 s keeps a fifth as its margin: 1.2 s are left for the step)
    let deadline = std::time::SystemTime::now() + Duration::from_millis(1500);
    let response = worker.handle_batch_until(event(&first), Some(deadline)).await;
    // THEN it is done with (the event source mapping deletes it) and the turn has not ended
    assert!(response.batch_item_failures.is_empty());
    queue.ack(&first.receipt).await.unwrap();
    let events = all_events(&api, &chat).await;
    let types = types_of(&events, &turn);
    assert!(!types.contains(&"agent_end".to_owned()), "{types:?}");
    let cut = one(&events, &turn, "message_end");
    assert_eq!(cut["payload"]["interrupted"], true, "{cut}");
    // AND a new job carries it on, which the next invocation finishes
    let next = receive(queue.clone()).await;
    assert_eq!(
        next.job,
        first
            .job
            .continued(next.job.step_started_ms.expect("when the step began"))
    );
    let response = worker.handle_batch(event(&next)).await;
    assert!(response.batch_item_failures.is_empty());
    queue.ack(&next.receipt).await.unwrap();
    let events = until(&api, &chat, &turn, "agent_end").await;
    let types = types_of(&events, &turn);
    assert_eq!(types.iter().filter(|t| *t == "agent_start").count(), 1, "{types:?}");
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["turn_id"] == turn.as_str() && e["type"] == "message_end")
        .collect();
    assert_eq!(ends.len(), 2);
    assert_eq!(
        ends[1]["payload"]["text"],
        "one two three four five six seven eight nine ten eleven twelve"
    );
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

/// visibility, so a short visibility timeout never hands a running turn to another invocation.
pub(crate) async fn a_lambda_batch_keeps_its_turns_leased<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let queue = harness.turns().await;
    let base = serve(log.clone(), metadata.clone(), queue.clone(), harness.files().await).await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let chat = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    let turn = send(&api, &chat, "think hard").await;
    // GIVEN the turn delivered to a function with a one-second lease
    let ttl = Duration::from_secs(1);
    let delivered = queue
        .receive(&spool_chat::turns::Receive::new(
            1,
            spool_chat::turns::Lease::new(ttl, "lambda"),
            Duration::from_secs(5),
        ))
        .await
        .unwrap();
    assert_eq!(delivered.len(), 1);
    let event = sqs_batch(vec![delivered_record(&delivered[0])]);
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runtimes = Runtimes::scripted_only().with_openai(Arc::new(Slow(asked, None)));
    let worker = spool_worker::Worker::new(log.clone())
        .with_turns(engine_with(log, metadata, runtimes), 3)
        .with_heartbeats(queue.clone(), ttl);
    // WHEN its step runs longer than the lease
    let running = tokio::spawn(async move { Arc::new(worker).handle_batch(event).await });
    tokio::time::sleep(Duration::from_millis(2000)).await;
    // THEN nobody else can receive it meanwhile
    let stolen = queue
        .receive(&spool_chat::turns::Receive::new(
            1,
            spool_chat::turns::Lease::new(Duration::from_secs(60), "other"),
            Duration::from_millis(500),
        ))
        .await
        .unwrap();
    assert!(stolen.is_empty(), "{stolen:?}");
    let response = running.await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    let events = all_events(&api, &chat).await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
}

/// One organization's flood of chats does not hold up another's: with two slots and one per
/// organization, the second organization's turn runs beside the first's, not after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_organizations_flood_does_not_hold_up_another() {
    let harness = spool_tests::EmbeddedHarness::new();
    let poll = spool_worker::PollSettings {
        concurrency: 2,
        per_org: 1,
        ..test_poll()
    };
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runtimes = Runtimes::scripted_only().with_openai(Arc::new(Slow(asked, Some(Duration::from_millis(2000)))));
    let stack = stack_polling(&harness, runtimes, test_settings(), poll).await;
    let mut chats = Vec::new();
    for _ in 0..6 {
        let chat = stack.api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
        chats.push(chat["id"].as_str().unwrap().to_owned());
    }
    let chat = stack.other.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    // GIVEN one organization's six chats asking at once
    let turns = futures_util::future::join_all(chats.iter().map(|c| send(&stack.api, c, "me first"))).await;
    let flood: Vec<(String, String)> = chats.into_iter().zip(turns).collect();
    // WHEN another organization asks after them
    let turn = send(&stack.other, &chat, "my turn?").await;
    until(&stack.other, &chat, &turn, "agent_end").await;
    // THEN at most the one turn of the flood that started beside it has finished
    let mut finished = 0;
    for (chat, turn) in &flood {
        let events = all_events(&stack.api, chat).await;
        finished += usize::from(
            events
                .iter()
                .any(|e| e["turn_id"] == turn.as_str() && e["type"] == "agent_end"),
        );
    }
    assert!(
        finished <= 1,
        "{finished} of the flood's turns ran before the other organization's"
    );
    for (chat, turn) in &flood {
        until(&stack.api, chat, turn, "agent_end").await;
    }
}

/// Messages queued behind a turn (`on_busy: enqueue`) are answered each by its own turn, in
/// order: a turn does not see the messages sent after its own.
pub(crate) async fn queued_messages_are_answered_each_by_its_own_turn<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let turns = harness.turns().await;
    let base = serve(log.clone(), metadata.clone(), turns.clone(), harness.files().await).await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let (_, chat) = chat_with(&api, script()).await;
    // GIVEN three messages queued before any worker runs
    let mut sent = Vec::new();
    for name in ["Ada", "Grace", "Edsger"] {
        let answer = api
            .ok(
                Method::POST,
                &format!("/v1/sessions/{chat}/messages"),
                Some(json!({ "content": name, "on_busy": "enqueue" })),
            )
            .await;
        sent.push((name, answer["turn_id"].as_str().unwrap().to_owned()));
    }
    // WHEN the worker starts
    let worker = spool_worker::Worker::new(log.clone()).with_turns(engine(log, metadata), 3);
    tokio::spawn(spool_worker::poll_turns(Arc::new(worker), turns, test_poll()));
    // THEN each turn answers its own message
    let events = until(&api, &chat, &sent[2].1, "agent_end").await;
    for (name, turn) in &sent {
        let said = one(&events, turn, "message_end")["payload"]["text"].clone();
        assert_eq!(said, format!("Hello there, {name}!"), "{turn}");
    }
}

/// The demo agent defines a team from a conversation, as the third source design's AI-assisted
/// agent definition does: it asks what the team is for, proposes three agents whose
/// instructions say their role, inputs, outputs and limits, and adds each one approved, in
/// order, with no key.
pub(crate) async fn the_demo_agent_defines_a_team_from_a_conversation<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "title": "Newsroom" })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let turn = send(api, &chat, "please set up a team for me").await;
    let events = until(api, &chat, &turn, "ask_question").await;
    let question = one(&events, &turn, "ask_question")["payload"]["question_id"].clone();
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/question"),
        Some(json!({ "question_id": question, "answer": "a weekly newsletter" })),
    )
    .await;
    // Each agent waits for its own approval.
    for approved in 1..=3 {
        let call = spool_tests::eventually("the next approval request", || async {
            let events = all_events(api, &chat).await;
            let asked: Vec<&Value> = events
                .iter()
                .filter(|e| e["type"] == "tool_approval_required")
                .collect();
            (asked.len() == approved).then(|| asked[approved - 1]["payload"]["tool_call_id"].clone())
        })
        .await;
        api.ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/approval"),
            Some(json!({ "tool_call_id": call, "decision": "approve" })),
        )
        .await;
    }
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/agents"), None).await;
    let agents = agents["agents"].as_array().unwrap();
    let names: Vec<&str> = agents.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Spool", "Planner", "Writer", "Reviewer"]);
    for agent in &agents[1..] {
        let instruction = agent["instruction"].as_str().unwrap();
        for part in [
            "## Role",
            "## What you read",
            "## What you produce",
            "## Boundaries",
            "a weekly newsletter",
        ] {
            assert!(
                instruction.contains(part),
                "{} lacks {part}: {instruction}",
                agent["name"]
            );
        }
    }
}

/// A tool the client declares with its message: the agent's call of it is a `tool_start`
/// marked `client`, the turn waits for its output, and goes on with it; bad declarations are
/// refused and change nothing.
pub(crate) async fn a_clients_own_tool_waits_for_its_output<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let script = json!({ "word_delay_ms": 0, "rules": [{ "match": ["where"], "rounds": [
        { "say": "Let me look.", "tools": [{ "name": "get_location", "arguments": { "precise": true } }] },
        { "say": "You are in {result}." }] }] });
    let (_, chat) = chat_with(api, script).await;
    let messages = format!("/v1/sessions/{chat}/messages");
    let post = |body: Value| api.call(Method::POST, &messages, Some(body));
    for bad in [
        json!([{ "name": "has space" }]),
        json!([{ "name": "t" }, { "name": "t" }]),
        json!([{ "name": "t", "input_schema": [] }]),
        json!([{ "name": "t", "input_schema": { "type": "string" } }]),
        json!([{ "name": "delete_agent" }]),
        json!([{ "name": "t", "server": "has space" }]),
    ] {
        let (status, body) = post(json!({ "content": "where am I?", "client_tools": bad })).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    assert!(
        all_events(api, &chat).await.is_empty(),
        "a refused message changes nothing"
    );
    let tools = json!([{ "name": "get_location", "description": "Where the person is", "server": "gps",
        "input_schema": { "type": "object", "properties": { "precise": { "type": "boolean" } } } }]);
    let (status, sent) = post(json!({ "content": "where am I?", "client_tools": tools })).await;
    assert_eq!(status, 202, "{sent}");
    let turn = sent["turn_id"].as_str().unwrap().to_owned();
    let events = until(api, &chat, &turn, "tool_start").await;
    let start = one(&events, &turn, "tool_start");
    assert_eq!(start["payload"]["client"], true);
    assert_eq!(start["payload"]["arguments"], json!({ "precise": true }));
    // The client named where it runs the tool: its call says so, as the client's (never as a
    // workspace's server).
    assert_eq!(start["payload"]["server"], "companion:gps");
    let call = start["payload"]["tool_call_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !types_of(&all_events(api, &chat).await, &turn).contains(&"agent_end".to_owned()),
        "the turn waits for the tool's output"
    );
    // Another call id, or a second output, is refused.
    let output = |id: &str| json!({ "tool": "get_location", "tool_call_id": id, "output": { "city": "Paris" } });
    let (status, _) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/tool-output"),
            Some(output("nope")),
        )
        .await;
    assert_eq!(status, 409);
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/tool-output"),
        Some(output(&call)),
    )
    .await;
    let (status, _) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/tool-output"),
            Some(output(&call)),
        )
        .await;
    assert_eq!(status, 409);
    let events = until(api, &chat, &turn, "agent_end").await;
    let said: String = events
        .iter()
        .filter(|e| e["turn_id"] == turn.as_str() && e["type"] == "message_end")
        .map(|e| e["payload"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(said.contains("Paris"), "{said}");
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
}

on_both_backends!(
    agents_http: a_message_gets_a_streamed_answer_and_frees_the_chat,
    queued_messages_are_answered_each_by_its_own_turn,
    a_lambda_batch_keeps_its_turns_leased,
    a_step_at_the_lambda_deadline_carries_over_to_a_new_job,
    a_step_longer_than_its_lease_keeps_it,
    a_runtime_past_the_turn_time_limit_is_stopped,
    a_question_waits_for_its_answer,
    an_abort_ends_a_waiting_turn,
    in_the_global_chat_the_next_message_answers_spool,
    plans_are_approved_or_rejected_with_feedback,
    approved_calls_run_and_declined_ones_never_do,
    actions_run_and_invalid_ones_are_reported,
    an_abort_stops_the_answer_and_keeps_what_was_said,
    a_failing_runtime_ends_the_turn_with_an_error,
    a_redelivered_step_writes_nothing_twice,
    a_turn_given_up_says_so_in_the_chat,
    a_fifo_batch_fails_only_the_rest_of_a_failing_group,
    throttled_deliveries_use_no_attempts,
    an_agent_never_starts_on_empty_input,
    the_demo_agent_defines_a_team_from_a_conversation,
    a_clients_own_tool_waits_for_its_output,
);
