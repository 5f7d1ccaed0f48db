//! Controls and answers over real HTTP on both backends: each appends its own submit event, an
//! answer takes the open request it names (once, even when answers race), and unknown, stale or
//! mistyped ids get 409 and append nothing.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::{
    metadata::Sessions,
    session::{OpenRequest, RequestKind},
};
use spool_tests::Harness;

use crate::support::{Api, org_of, setup};

fn request(id: &str, kind: RequestKind, seq: u64) -> OpenRequest {
    OpenRequest {
        id: id.to_owned(),
        kind,
        turn_id: Some("turn_a".to_owned()),
        opened_seq: seq,
    }
}

async fn event_types(api: &Api, id: &str) -> Vec<String> {
    let events = api
        .ok(Method::GET, &format!("/v1/sessions/{id}/events?after=0"), None)
        .await;
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Each answer route takes its own kind of open request, once, and resumes the waiting turn.
pub(crate) async fn answers_take_their_open_request_once<H: Harness>(harness: &H) {
    let (api, b, _) = setup(harness).await;
    let org = org_of(&api);
    let session = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let id = session["id"].as_str().unwrap().to_owned();
    // GIVEN a turn waiting on an approval, a question, a plan and a tool's output
    let metadata = harness.metadata().await;
    for (rid, kind) in [
        ("call-1", RequestKind::Approval),
        ("q-1", RequestKind::Question),
        ("plan-1", RequestKind::Plan),
        ("call-2", RequestKind::ToolOutput),
    ] {
        metadata.open_request(&org, &id, &request(rid, kind, 1)).await.unwrap();
    }
    let path = |route: &str| format!("/v1/sessions/{id}/{route}");

    // Another organization cannot answer them, control the chat or post in it (404; posting as an
    // agent needs a capability its token lacks: 403), and nothing is taken or appended.
    for (route, body) in [
        ("approval", json!({ "decision": "approve", "tool_call_id": "call-1" })),
        ("question", json!({ "question_id": "q-1", "answer": "x" })),
        ("plan", json!({ "plan_id": "plan-1", "action": "approve" })),
        (
            "tool-output",
            json!({ "tool": "t", "tool_call_id": "call-2", "output": 1 }),
        ),
        ("control", json!({ "action": "abort" })),
        ("agent-messages", json!({ "author": "a", "text": "t" })),
        (
            "capabilities",
            json!({ "library_id": "l", "jwt": "j", "capabilities": [] }),
        ),
    ] {
        let method = if route == "capabilities" {
            Method::PUT
        } else {
            Method::POST
        };
        let (status, error) = b.call(method, &path(route), Some(body)).await;
        let expected = if route == "agent-messages" { 403 } else { 404 };
        assert_eq!(status, expected, "{route}: {error}");
    }
    assert!(event_types(&api, &id).await.is_empty());
    assert_eq!(metadata.open_requests(&org, &id).await.unwrap().len(), 4);

    // WHEN the approval is answered
    let (status, body) = api
        .call(
            Method::POST,
            &path("approval"),
            Some(json!({ "decision": "approve", "tool_call_id": "call-1" })),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["turn_id"], "turn_a");
    let approval_seq = body["seq"].as_u64().unwrap();
    // THEN a second answer to it, and an answer to an unknown id, get 409
    for (route, answer) in [
        ("approval", json!({ "decision": "decline", "tool_call_id": "call-1" })),
        ("approval", json!({ "decision": "approve", "tool_call_id": "nope" })),
        ("question", json!({ "question_id": "call-2", "answer": "wrong kind" })),
        ("plan", json!({ "plan_id": "q-1", "action": "approve" })),
    ] {
        let (status, error) = api.call(Method::POST, &path(route), Some(answer.clone())).await;
        assert_eq!(status, 409, "{route} {answer}: {error}");
        assert_eq!(error["error"]["code"], "conflict");
    }
    // AND the others are answered, each with its event
    for (route, answer) in [
        ("question", json!({ "question_id": "q-1", "answer": "blue" })),
        (
            "plan",
            json!({ "plan_id": "plan-1", "action": "reject", "feedback": "smaller steps" }),
        ),
        (
            "tool-output",
            json!({ "tool": "grep", "tool_call_id": "call-2", "output": { "lines": 3 } }),
        ),
        ("control", json!({ "action": "abort" })),
    ] {
        let (status, body) = api.call(Method::POST, &path(route), Some(answer.clone())).await;
        assert_eq!(status, 202, "{route} {answer}: {body}");
    }
    assert_eq!(
        event_types(&api, &id).await,
        [
            "approval_submitted",
            "question_answered",
            "plan_submitted",
            "tool_output_submitted",
            "control_submitted"
        ]
    );
    let events = api
        .ok(Method::GET, &format!("/v1/sessions/{id}/events?after=0"), None)
        .await;
    assert_eq!(
        events["events"][0]["payload"],
        json!({ "decision": "approve", "tool_call_id": "call-1" })
    );
    assert_eq!(events["events"][0]["turn_id"], "turn_a");
    assert_eq!(events["events"][2]["payload"]["feedback"], "smaller steps");
    assert!(metadata.open_requests(&org, &id).await.unwrap().is_empty());

    // AND each answer enqueued the waiting turn again, from the answer's seq
    let queue = harness.turns().await;
    let got = queue
        .receive(&spool_chat::turns::Receive::new(
            10,
            spool_chat::turns::Lease::new(Duration::from_secs(60), "test"),
            Duration::from_secs(1),
        ))
        .await
        .unwrap();
    let first = got.first().expect("the turn is resumed");
    assert_eq!(
        (first.job.turn_id.as_str(), first.job.trigger_seq),
        ("turn_a", approval_seq)
    );

    // Bad bodies: 400, nothing appended.
    for (route, bad) in [
        ("control", json!({ "action": "explode" })),
        ("control", json!({})),
        ("approval", json!({ "decision": "maybe", "tool_call_id": "x" })),
        ("question", json!({ "question_id": "x", "answer": "  " })),
        ("plan", json!({ "plan_id": "x", "action": "approve", "extra": 1 })),
        ("tool-output", json!({ "tool": "t", "tool_call_id": "x" })),
        (
            "tool-output",
            json!({ "tool": "t", "tool_call_id": "x", "output": 1, "error": "e" }),
        ),
        ("question", json!({ "question_id": "", "answer": "a" })),
    ] {
        let (status, error) = api.call(Method::POST, &path(route), Some(bad.clone())).await;
        assert_eq!(status, 400, "{route} {bad}: {error}");
    }
    assert_eq!(event_types(&api, &id).await.len(), 5);
}

/// Of answers racing for one request, exactly one wins.
pub(crate) async fn racing_answers_take_a_request_once<H: Harness>(harness: &H) {
    let (api, _, _) = setup(harness).await;
    let org = org_of(&api);
    let session = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let id = session["id"].as_str().unwrap().to_owned();
    harness
        .metadata()
        .await
        .open_request(&org, &id, &request("q-race", RequestKind::Question, 1))
        .await
        .unwrap();
    let path = format!("/v1/sessions/{id}/question");
    let answers = (0..6).map(|i| {
        api.call(
            Method::POST,
            &path,
            Some(json!({ "question_id": "q-race", "answer": format!("a{i}") })),
        )
    });
    let results: Vec<(reqwest::StatusCode, Value)> = futures_util::future::join_all(answers).await;
    let won = results.iter().filter(|(s, _)| *s == 202).count();
    let lost = results.iter().filter(|(s, _)| *s == 409).count();
    assert_eq!((won, lost), (1, 5), "{results:?}");
    assert_eq!(event_types(&api, &id).await, ["question_answered"]);
}

on_both_backends!(answers_http: answers_take_their_open_request_once, racing_answers_take_a_request_once);
