//! Forks over real HTTP on both backends (`POST /v1/sessions/{id}/fork`): the fork's history is
//! the source's up to `at_seq`, byte for byte, then its own; writes to either never show in the
//! other; the demo agent answers in the fork only; a turn open at `at_seq` is ended in the fork;
//! files its history names stay readable when the source is deleted; bad input is refused.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json, value::RawValue};
use spool_tests::Harness;

use crate::{
    attachments_http::{download, upload},
    support::{Api, all_events, one, send, stack, until},
};

/// A workspace and a chat with its built-in agent (the demo script).
async fn demo_chat(api: &Api) -> (String, String) {
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "title": "Forks" })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let chat = api
        .ok(
            Method::POST,
            "/v1/sessions",
            Some(json!({ "workspace_id": ws, "title": "Launch" })),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (ws, chat)
}

async fn fork(api: &Api, chat: &str, body: Value) -> Value {
    let (status, forked) = api
        .call(Method::POST, &format!("/v1/sessions/{chat}/fork"), Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{forked}");
    forked
}

/// The chat's stream as stored: each event's JSON exactly as the log holds it, read the way a
/// Durable Streams client reads it (from each answer's `Stream-Next-Offset` until up to date).
async fn raw_events(api: &Api, chat: &str) -> Vec<String> {
    let mut offset = "-1".to_owned();
    let mut out = Vec::new();
    loop {
        let response = api.get(&format!("/v1/stream/sessions/{chat}?offset={offset}")).await;
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers().clone();
        let bytes = response.bytes().await.unwrap();
        let messages: Vec<Box<RawValue>> = serde_json::from_slice(&bytes).unwrap();
        out.extend(messages.into_iter().map(|m| m.get().to_owned()));
        if headers.contains_key("stream-up-to-date") {
            return out;
        }
        offset = headers["stream-next-offset"].to_str().unwrap().to_owned();
    }
}

fn seq_of(event: &Value) -> u64 {
    event["seq"].as_u64().unwrap()
}

fn texts(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            e["payload"]["content"]
                .as_str()
                .or_else(|| e["payload"]["text"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

/// A fork at an event inherits the history up to it byte for byte, then goes its own way: the
/// demo agent answers there only, and what the source says next never shows in it.
pub(crate) async fn a_fork_inherits_the_history_byte_for_byte_and_goes_its_own_way<H: Harness>(harness: &H) {
    // GIVEN a chat with two answered turns
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = demo_chat(api).await;
    let first = send(api, &chat, "Please rename this chat to Launch planning").await;
    let events = until(api, &chat, &first, "agent_end").await;
    let at = seq_of(one(&events, &first, "agent_end"));
    let second = send(api, &chat, "Only in the source, before the fork").await;
    until(api, &chat, &second, "agent_end").await;
    // WHEN it is forked after the first turn's end
    let forked = fork(api, &chat, json!({ "at_seq": at, "title": "Plan B" })).await;
    let copy = forked["id"].as_str().unwrap().to_owned();
    // THEN the fork is a new chat of the workspace, with the same agent, and says where it comes from
    assert_ne!(copy, chat);
    assert_eq!(forked["title"], "Plan B");
    assert_eq!(forked["workspace_id"], ws.as_str());
    let source = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(forked["agent_id"], source["agent_id"]);
    assert_eq!(
        (forked["forked_from"].as_str(), forked["at_seq"].as_u64()),
        (Some(&*chat), Some(at))
    );
    assert_eq!(forked["ended_turns"], json!([]));
    assert_eq!(forked["pending_turn_id"], Value::Null);
    // AND its history up to `at_seq` is the source's, byte for byte, in the stream and the events
    let (source_raw, fork_raw) = (raw_events(api, &chat).await, raw_events(api, &copy).await);
    let n = usize::try_from(at).unwrap();
    assert!(source_raw.len() > n && fork_raw.len() > n);
    assert_eq!(fork_raw[..n], source_raw[..n]);
    let source_events = all_events(api, &chat).await;
    let fork_events = all_events(api, &copy).await;
    assert_eq!(fork_events[..n], source_events[..n]);
    // AND after it only its own note, numbered on without a gap
    let own = &fork_events[n..];
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!((seq_of(&own[0]), own[0]["type"].as_str()), (at + 1, Some("system")));
    assert_eq!(own[0]["session_id"], copy.as_str());
    assert!(!texts(&fork_events).iter().any(|t| t.contains("Only in the source")));
    // WHEN a message is posted to the fork
    let source_tail = source_events.len();
    let third = send(api, &copy, "Please rename this chat to Fork only").await;
    let fork_events = until(api, &copy, &third, "agent_end").await;
    // THEN the demo agent answers it there, numbered on from the fork's tail
    let asked = one(&fork_events, &third, "user_message_submitted");
    assert_eq!(seq_of(asked), at + 2);
    assert_eq!(one(&fork_events, &third, "agent_end")["payload"]["reason"], "complete");
    let renamed = api.ok(Method::GET, &format!("/v1/sessions/{copy}"), None).await;
    assert_eq!(renamed["title"], "Fork only");
    // AND the source neither sees it nor changes
    let source_events = all_events(api, &chat).await;
    assert_eq!(source_events.len(), source_tail);
    assert!(!texts(&source_events).iter().any(|t| t.contains("Fork only")));
    let source = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(source["title"], "Launch planning");
    // WHEN the source takes another message, THEN the fork does not see it
    let fourth = send(api, &chat, "After the fork, in the source").await;
    until(api, &chat, &fourth, "agent_end").await;
    let fork_events = all_events(api, &copy).await;
    assert!(!texts(&fork_events).iter().any(|t| t.contains("After the fork")));
    assert!(fork_events.iter().all(|e| e["turn_id"] != fourth.as_str()));
}

/// Without `at_seq` a fork takes the whole history; a turn waiting on a person there is ended in
/// the fork (which takes a message at once) and still waits in the source.
pub(crate) async fn a_fork_at_the_tail_ends_the_turn_left_open<H: Harness>(harness: &H) {
    // GIVEN a chat whose turn waits on the person's answer
    let stack = stack(harness).await;
    let api = &stack.api;
    let (_, chat) = demo_chat(api).await;
    let turn = send(api, &chat, "Could you set up a team of agents?").await;
    let events = until(api, &chat, &turn, "ask_question").await;
    let tail = seq_of(events.last().unwrap());
    // WHEN it is forked with no body (an empty body that says it is JSON is not JSON: 400)
    let (status, _) = api.raw(Method::POST, &format!("/v1/sessions/{chat}/fork"), b"").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let response = api
        .http
        .post(format!("{}/v1/sessions/{chat}/fork", api.base))
        .bearer_auth(api.token.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    let status = response.status();
    let forked: Value = response.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{forked}");
    let copy = forked["id"].as_str().unwrap().to_owned();
    // THEN it inherits everything, is titled after its source, and ended the waiting turn
    assert_eq!(forked["at_seq"].as_u64(), Some(tail));
    assert_eq!(forked["title"], "Launch (fork)");
    assert_eq!(forked["ended_turns"], json!([turn]));
    let fork_events = all_events(api, &copy).await;
    let n = usize::try_from(tail).unwrap();
    assert_eq!(fork_events[..n], events[..n]);
    let own: Vec<&str> = fork_events[n..].iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(own, ["agent_end", "system"]);
    assert_eq!(fork_events[n]["turn_id"], turn.as_str());
    assert_eq!(fork_events[n]["payload"]["reason"], "aborted");
    // AND the fork answers a new message at once
    let next = send(api, &copy, "Please rename this chat to Fresh start").await;
    let fork_events = until(api, &copy, &next, "agent_end").await;
    assert_eq!(one(&fork_events, &next, "agent_end")["payload"]["reason"], "complete");
    // AND the source's turn still waits for its answer
    let source_events = all_events(api, &chat).await;
    assert!(
        !source_events
            .iter()
            .any(|e| e["turn_id"] == turn.as_str() && e["type"] == "agent_end")
    );
    let source = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(source["pending_turn_id"], turn.as_str());
}

/// The source deleted, the fork still reads its history and its files; the fork deleted, the
/// source is untouched.
pub(crate) async fn forks_and_sources_outlive_each_other<H: Harness>(harness: &H) {
    // GIVEN a chat with a file, forked, and a file uploaded after the fork
    let stack = stack(harness).await;
    let api = &stack.api;
    let (_, chat) = demo_chat(api).await;
    let file = upload(api, &chat, "notes.txt", "text/plain", b"kept in the fork").await;
    let file_id = file["attachment"]["id"].as_str().unwrap().to_owned();
    let forked = fork(api, &chat, json!({})).await;
    let copy = forked["id"].as_str().unwrap().to_owned();
    assert_eq!(forked["files_copied"], 1);
    let later = upload(api, &chat, "later.txt", "text/plain", b"source only").await;
    let later_id = later["attachment"]["id"].as_str().unwrap().to_owned();
    let before = all_events(api, &copy).await;
    let files = api
        .ok(Method::GET, &format!("/v1/sessions/{copy}/attachments"), None)
        .await;
    let ids: Vec<&str> = files["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [file_id.as_str()]);
    // WHEN the source is deleted
    api.ok(Method::DELETE, &format!("/v1/sessions/{chat}"), None).await;
    // THEN the fork reads its whole history and its file, and the later file is not its
    assert_eq!(all_events(api, &copy).await, before);
    let (status, _, bytes) = download(api, &copy, &file_id).await;
    assert!(status.is_success() || status == StatusCode::FOUND, "{status}");
    assert_eq!(bytes, b"kept in the fork");
    let (status, _) = api
        .call(
            Method::GET,
            &format!("/v1/sessions/{copy}/attachments/{later_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // AND the deleted source can no longer be forked
    let (status, _) = api
        .call(Method::POST, &format!("/v1/sessions/{chat}/fork"), Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // AND the fork takes a message and is answered
    let turn = send(api, &copy, "Please rename this chat to Survivor").await;
    until(api, &copy, &turn, "agent_end").await;
    // AND a fork of the fork reads the history both inherited, and has the file too
    let grandchild = fork(api, &copy, json!({})).await;
    let grandchild = grandchild["id"].as_str().unwrap().to_owned();
    let (parent_raw, child_raw) = (raw_events(api, &copy).await, raw_events(api, &grandchild).await);
    assert_eq!(child_raw[..parent_raw.len()], parent_raw[..]);
    let (_, _, bytes) = download(api, &grandchild, &file_id).await;
    assert_eq!(bytes, b"kept in the fork");

    // GIVEN another chat and a fork of it
    let (_, chat) = demo_chat(api).await;
    let turn = send(api, &chat, "Please rename this chat to Original").await;
    until(api, &chat, &turn, "agent_end").await;
    let forked = fork(api, &chat, json!({})).await;
    let copy = forked["id"].as_str().unwrap();
    let before = raw_events(api, &chat).await;
    // WHEN the fork is deleted, THEN the source is untouched and takes messages
    api.ok(Method::DELETE, &format!("/v1/sessions/{copy}"), None).await;
    assert_eq!(raw_events(api, &chat).await, before);
    let turn = send(api, &chat, "Please rename this chat to Still here").await;
    until(api, &chat, &turn, "agent_end").await;
}

/// Bad input is a clear `400`; another organization's chat, an unknown or a deleted one is a
/// `404`; the global chat is a `409`.
pub(crate) async fn bad_forks_are_refused_with_reasons<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = demo_chat(api).await;
    let turn = send(api, &chat, "Please rename this chat to Refusals").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let tail = seq_of(events.last().unwrap());
    let route = format!("/v1/sessions/{chat}/fork");
    for (body, told) in [
        (json!({ "at_seq": tail + 1 }), "beyond this chat's last event"),
        (json!({ "at_seq": -1 }), "whole number"),
        (json!({ "at_seq": "3" }), "whole number"),
        (json!({ "at_seq": 1.5 }), "whole number"),
        (json!({ "at": 1 }), "unknown field"),
        (json!({ "title": " " }), "chat title"),
    ] {
        let (status, refused) = api.call(Method::POST, &route, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        assert!(refused.to_string().contains(told), "{body}: {refused}");
    }
    let (status, _) = api.raw(Method::POST, &route, b"[1]").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Another organization's chat, and an unknown one.
    let (status, _) = stack.other.call(Method::POST, &route, Some(json!({}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api
        .call(Method::POST, "/v1/sessions/ses_nope/fork", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The global chat.
    let (status, refused) = api
        .call(Method::POST, "/v1/sessions/global/fork", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused.to_string().contains("global chat cannot be forked"),
        "{refused}"
    );
    // Nothing was made by any of these: the workspace lists the one chat.
    let listed = api
        .ok(Method::GET, &format!("/v1/sessions?workspace_id={ws}"), None)
        .await;
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
    // At 0 a fork has no history but its note.
    let forked = fork(api, &chat, json!({ "at_seq": 0 })).await;
    let own = all_events(api, forked["id"].as_str().unwrap()).await;
    assert_eq!(own.len(), 1);
    assert_eq!((seq_of(&own[0]), own[0]["type"].as_str()), (1, Some("system")));
}

on_both_backends!(
    fork_http: a_fork_inherits_the_history_byte_for_byte_and_goes_its_own_way,
    a_fork_at_the_tail_ends_the_turn_left_open,
    forks_and_sources_outlive_each_other,
    bad_forks_are_refused_with_reasons,
);
