//! Edit, regenerate and earlier versions over real HTTP, on both backends: the chat keeps every
//! event, and what the model is sent, `GET …/events` shows and a later message follows is the
//! active branch. The model is a fake OpenAI-compatible provider on loopback (its documented
//! streaming format) that numbers its answers, keeps every request, and takes its time over a
//! message that says `SLOW`.

use std::{sync::Arc, time::Duration};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_agents::{Runtimes, openai::OpenAi};
use spool_tests::Harness;

use crate::support::{Api, Stack, model::FakeModel, send, stack_with, until};

/// A stack whose agents answer through the fake model, and a chat with such an agent.
async fn chat_with_model<H: Harness>(harness: &H) -> (Stack, Arc<FakeModel>, String) {
    // Numbered answers, slow for a message that says SLOW.
    let (model, base) = FakeModel::serve((10, 2), |request, n| {
        let slow = request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["content"].as_str().is_some_and(|c| c.contains("SLOW")));
        let delay = if slow { Duration::from_secs(3) } else { Duration::ZERO };
        (format!("ANSWER {n}"), delay)
    })
    .await;
    let runtimes = Runtimes::scripted_only().with_openai(Arc::new(OpenAi::new(&format!("{base}/v1"), None, "fake")));
    let stack = stack_with(harness, runtimes).await;
    let api = &stack.api;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Branches" })))
        .await;
    let agent = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{}/agents", ws["id"].as_str().unwrap()),
            Some(json!({ "name": "Writer", "instruction": "Be brief.", "runtime": "openai", "model": "fake-1" })),
        )
        .await;
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "agent_id": agent["id"] })))
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    (stack, model, chat)
}

/// The texts of what the model was last sent, after its instruction.
fn last_sent(model: &FakeModel) -> Vec<String> {
    let requests = model.requests.lock().unwrap();
    let last = requests.last().expect("the model was asked");
    last["messages"].as_array().unwrap()[1..]
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The chat's events on `branch` (`active` or `all`).
async fn events(api: &Api, chat: &str, branch: &str) -> Vec<Value> {
    let path = format!("/v1/sessions/{chat}/events?after=0&limit=1000&branch={branch}");
    let page = api.ok(Method::GET, &path, None).await;
    page["events"].as_array().unwrap().clone()
}

/// The chat's people's messages and answers, in order, on `branch` (`active` or `all`).
async fn said(api: &Api, chat: &str, branch: &str) -> Vec<String> {
    events(api, chat, branch)
        .await
        .iter()
        .filter_map(|e| match e["type"].as_str() {
            Some("user_message_submitted") => e["payload"]["content"].as_str().map(str::to_owned),
            Some("message_end") => e["payload"]["text"].as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// The seq of the person's message `text`: its first version of that text, or its latest.
async fn seq_of_message(api: &Api, chat: &str, text: &str, latest: bool) -> u64 {
    let all = events(api, chat, "all").await;
    let mut found = all
        .iter()
        .filter(|e| e["type"] == "user_message_submitted" && e["payload"]["content"] == text)
        .filter_map(|e| e["seq"].as_u64());
    let seq = if latest { found.next_back() } else { found.next() };
    seq.unwrap_or_else(|| panic!("no message {text:?}"))
}

/// The seq of the person's message `text` (its latest version of that text).
async fn seq_of(api: &Api, chat: &str, text: &str) -> u64 {
    seq_of_message(api, chat, text, true).await
}

/// Posts a revision; answers its turn once it ended.
async fn revise(api: &Api, chat: &str, route: &str, body: Value) -> String {
    let (status, accepted) = api
        .call(Method::POST, &format!("/v1/sessions/{chat}/{route}"), Some(body))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{route}: {accepted}");
    let turn = accepted["turn_id"].as_str().unwrap().to_owned();
    until(api, chat, &turn, "agent_end").await;
    turn
}

async fn select(api: &Api, chat: &str, seq: u64) -> Value {
    let (status, chosen) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages/{seq}/select"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{chosen}");
    chosen
}

/// A regenerate answers the last message again and the model is not sent the answer it
/// replaces; an edit of the first message starts over from it; going back to a version brings
/// back what followed it; a new message follows the branch on show. Every answer stays in the
/// chat (`branch=all`).
pub(crate) async fn edits_and_regenerates_branch_the_chat<H: Harness>(harness: &H) {
    let (stack, model, chat) = chat_with_model(harness).await;
    let api = &stack.api;
    let turn = send(api, &chat, "A").await;
    until(api, &chat, &turn, "agent_end").await;
    let turn = send(api, &chat, "B").await;
    until(api, &chat, &turn, "agent_end").await;
    assert_eq!(said(api, &chat, "active").await, ["A", "ANSWER 1", "B", "ANSWER 2"]);

    // Regenerate (no body: the last message's answer)
    revise(api, &chat, "regenerate", json!({})).await;
    assert_eq!(
        last_sent(&model),
        ["A", "ANSWER 1", "B"],
        "the replaced answer is not sent"
    );
    assert_eq!(said(api, &chat, "active").await, ["A", "ANSWER 1", "B", "ANSWER 3"]);
    assert_eq!(
        said(api, &chat, "all").await,
        ["A", "ANSWER 1", "B", "ANSWER 2", "B", "ANSWER 3"]
    );

    // Edit the first message: the chat starts over from it; the edit's retry is the same edit
    let first = seq_of(api, &chat, "A").await;
    let route = format!("/v1/sessions/{chat}/messages/{first}/edit");
    let body = json!({ "content": "A2", "client_message_id": "edit-1" });
    let (status, accepted) = api.call(Method::POST, &route, Some(body.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    until(api, &chat, accepted["turn_id"].as_str().unwrap(), "agent_end").await;
    let (status, retried) = api.call(Method::POST, &route, Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{retried}");
    assert_eq!(
        (&retried["seq"], &retried["turn_id"], &retried["duplicate"]),
        (&accepted["seq"], &accepted["turn_id"], &json!(true))
    );
    assert_eq!(last_sent(&model), ["A2"]);
    assert_eq!(said(api, &chat, "active").await, ["A2", "ANSWER 4"]);

    // Back to the first version: as it was, with the regenerated answer
    let chosen = select(api, &chat, first).await;
    assert_eq!(chosen["changed"], true, "{chosen}");
    assert_eq!(said(api, &chat, "active").await, ["A", "ANSWER 1", "B", "ANSWER 3"]);
    let again = select(api, &chat, first).await;
    assert_eq!(again, json!({ "changed": false }));

    // Back to the first answer to B, then a new message follows it
    let original_b = seq_of_message(api, &chat, "B", false).await;
    select(api, &chat, original_b).await;
    assert_eq!(said(api, &chat, "active").await, ["A", "ANSWER 1", "B", "ANSWER 2"]);
    let turn = send(api, &chat, "C").await;
    until(api, &chat, &turn, "agent_end").await;
    assert_eq!(last_sent(&model), ["A", "ANSWER 1", "B", "ANSWER 2", "C"]);
    assert_eq!(
        said(api, &chat, "active").await,
        ["A", "ANSWER 1", "B", "ANSWER 2", "C", "ANSWER 5"]
    );

    // Regenerate an earlier message by its seq, then edit the new version (a version of a version)
    revise(api, &chat, "regenerate", json!({ "seq": original_b })).await;
    assert_eq!(last_sent(&model), ["A", "ANSWER 1", "B"]);
    let regenerated = seq_of(api, &chat, "B").await;
    revise(
        api,
        &chat,
        &format!("messages/{regenerated}/edit"),
        json!({ "content": "B2" }),
    )
    .await;
    assert_eq!(last_sent(&model), ["A", "ANSWER 1", "B2"]);
    assert_eq!(said(api, &chat, "active").await, ["A", "ANSWER 1", "B2", "ANSWER 7"]);
    // Every answer is still in the chat.
    let all = said(api, &chat, "all").await;
    for n in 1..=7 {
        assert!(all.contains(&format!("ANSWER {n}")), "ANSWER {n} in {all:?}");
    }
}

/// Bad revisions are refused with reasons and change nothing; a chat with a turn pending
/// refuses them with `409 turn_pending`.
pub(crate) async fn bad_revisions_are_refused_and_change_nothing<H: Harness>(harness: &H) {
    let (stack, _model, chat) = chat_with_model(harness).await;
    let api = &stack.api;
    let (status, refused) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/regenerate"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "nothing to regenerate: {refused}");
    let turn = send(api, &chat, "A").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let message = events.iter().find(|e| e["type"] == "user_message_submitted").unwrap()["seq"]
        .as_u64()
        .unwrap();
    let agent_start = events.iter().find(|e| e["type"] == "agent_start").unwrap()["seq"]
        .as_u64()
        .unwrap();
    let before = said(api, &chat, "all").await;
    let cases: Vec<(String, Value, StatusCode, &str)> = vec![
        (
            format!("messages/{message}/edit"),
            json!({ "content": "  " }),
            StatusCode::BAD_REQUEST,
            "blank",
        ),
        (
            format!("messages/{message}/edit"),
            json!({}),
            StatusCode::BAD_REQUEST,
            "content",
        ),
        (
            format!("messages/{message}/edit"),
            json!({ "content": "x", "extra": 1 }),
            StatusCode::BAD_REQUEST,
            "extra",
        ),
        (
            format!("messages/{agent_start}/edit"),
            json!({ "content": "x" }),
            StatusCode::BAD_REQUEST,
            "not a person's message",
        ),
        (
            "messages/99999/edit".to_owned(),
            json!({ "content": "x" }),
            StatusCode::NOT_FOUND,
            "99999",
        ),
        (
            "messages/x/edit".to_owned(),
            json!({ "content": "x" }),
            StatusCode::BAD_REQUEST,
            "path",
        ),
        (
            "regenerate".to_owned(),
            json!({ "seq": "1" }),
            StatusCode::BAD_REQUEST,
            "expected u64",
        ),
        (
            "regenerate".to_owned(),
            json!({ "seq": agent_start }),
            StatusCode::BAD_REQUEST,
            "not a person's message",
        ),
        (
            format!("messages/{agent_start}/select"),
            json!({}),
            StatusCode::BAD_REQUEST,
            "not a person's message",
        ),
        (
            "messages/99999/select".to_owned(),
            json!({}),
            StatusCode::NOT_FOUND,
            "99999",
        ),
    ];
    for (route, body, status, told) in cases {
        let (got, error) = api
            .call(
                Method::POST,
                &format!("/v1/sessions/{chat}/{route}"),
                Some(body.clone()),
            )
            .await;
        assert_eq!(got, status, "{route} {body}: {error}");
        assert!(error.to_string().contains(told), "{route} {body}: {error}");
    }
    // A version off the active branch cannot be edited until it is chosen
    revise(
        api,
        &chat,
        &format!("messages/{message}/edit"),
        json!({ "content": "A2" }),
    )
    .await;
    let (status, refused) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages/{message}/edit"),
            Some(json!({ "content": "A3" })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused.to_string().contains("select"), "{refused}");
    // Another chat's seq is not found in this one; another organization's chat is not found
    let other = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let (status, _) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{}/messages/{message}/edit", other["id"].as_str().unwrap()),
            Some(json!({ "content": "x" })),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = stack
        .other
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/regenerate"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // While a turn is pending, every revision is refused
    let edited = seq_of(api, &chat, "A2").await;
    let slow = send(api, &chat, "SLOW please").await;
    for route in [
        format!("messages/{message}/select"),
        "regenerate".to_owned(),
        format!("messages/{edited}/edit"),
    ] {
        let body = if route.ends_with("edit") {
            json!({ "content": "x" })
        } else {
            json!({})
        };
        let (status, refused) = api
            .call(Method::POST, &format!("/v1/sessions/{chat}/{route}"), Some(body))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{route}: {refused}");
        assert!(refused.to_string().contains("turn_pending"), "{route}: {refused}");
    }
    until(api, &chat, &slow, "agent_end").await;
    let after = said(api, &chat, "all").await;
    assert_eq!(
        after.len(),
        before.len() + 4,
        "one edit and one message, each answered: {after:?}"
    );
}

/// A new version whose request died after its append (before the chat's record heard of it,
/// and before its turn was queued): once its turn runs, the record knows the branch, and
/// `GET …/events` shows it.
pub(crate) async fn a_versions_turn_tells_the_record_of_its_branch<H: Harness>(harness: &H) {
    let (stack, model, chat) = chat_with_model(harness).await;
    let api = &stack.api;
    let turn = send(api, &chat, "A").await;
    until(api, &chat, &turn, "agent_end").await;
    let first = seq_of(api, &chat, "A").await;
    // The edit as the service would write it, then nothing more (the request died).
    let org = crate::support::org_of(api);
    let path = spool_chat::session::Session::stream(&org, &chat).unwrap();
    let revision = json!({ "of": first, "kind": "edit", "from_seq": first });
    let edit = spool_tests::draft(
        "user_message_submitted",
        json!({ "content": "A2", "author": "p", "revision": revision }),
        Some("t_orphan"),
    );
    let appended = spool_chat::session::append_events(
        stack.log.as_ref(),
        &path,
        &chat,
        &[edit],
        None,
        "2026-12-07T00:00:00Z",
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        said(api, &chat, "active").await,
        ["A", "ANSWER 1", "A2"],
        "the record has not heard of it"
    );
    // Its turn runs (as the claim's reconciliation queues it)
    let job = spool_chat::turns::TurnJob::new(&org, &chat, "t_orphan", appended.first);
    stack.turns.enqueue(&job).await.unwrap();
    until(api, &chat, "t_orphan", "agent_end").await;
    assert_eq!(last_sent(&model), ["A2"]);
    assert_eq!(said(api, &chat, "active").await, ["A2", "ANSWER 2"]);
}

on_both_backends!(
    branches: edits_and_regenerates_branch_the_chat,
    bad_revisions_are_refused_and_change_nothing,
    a_versions_turn_tells_the_record_of_its_branch,
);
