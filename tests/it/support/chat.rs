//! A chat's life over the API: a workspace whose built-in agent runs a script, messages,
//! aborts, and waiting for and picking out a turn's events.

use reqwest::Method;
use serde_json::{Value, json};

use super::Api;

/// A workspace whose built-in agent runs `script`; a chat with it.
pub(crate) async fn chat_with(api: &Api, script: Value) -> (String, String) {
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Agents" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/agents"), None).await;
    let builtin = agents["agents"][0]["id"].as_str().unwrap().to_owned();
    api.ok(
        Method::PATCH,
        &format!("/v1/agents/{builtin}"),
        Some(json!({ "instruction": script.to_string(), "runtime": "scripted" })),
    )
    .await;
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await;
    (ws, chat["id"].as_str().unwrap().to_owned())
}

pub(crate) async fn all_events(api: &Api, chat: &str) -> Vec<Value> {
    let page = api
        .ok(
            Method::GET,
            &format!("/v1/sessions/{chat}/events?after=0&limit=1000"),
            None,
        )
        .await;
    page["events"].as_array().unwrap().clone()
}

/// Waits until the chat has an event of `kind_type` for `turn`; all events then.
pub(crate) async fn until(api: &Api, chat: &str, turn: &str, kind_type: &str) -> Vec<Value> {
    spool_tests::eventually(&format!("{kind_type} of {turn} in {chat}"), || async {
        let events = all_events(api, chat).await;
        events
            .iter()
            .any(|e| e["turn_id"] == turn && e["type"] == kind_type)
            .then_some(events)
    })
    .await
}

pub(crate) fn types_of(events: &[Value], turn: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["turn_id"] == turn)
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn one<'a>(events: &'a [Value], turn: &str, kind_type: &str) -> &'a Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| e["turn_id"] == turn && e["type"] == kind_type)
        .collect();
    assert_eq!(found.len(), 1, "{kind_type} of {turn}: {found:?}");
    found[0]
}

/// `POST …/control {"action": "abort"}`; its answer.
pub(crate) async fn abort(api: &Api, chat: &str) -> Value {
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/control"),
        Some(json!({ "action": "abort" })),
    )
    .await
}

pub(crate) async fn send(api: &Api, chat: &str, text: &str) -> String {
    let sent = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": text })),
        )
        .await;
    sent["turn_id"].as_str().unwrap().to_owned()
}
