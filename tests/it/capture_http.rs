//! An agent's proposed capture (the fourth source design's `capture_ingest`), over real HTTP on
//! both backends: in a chat whose companion enabled `capture_ingest`, an agent's
//! `propose_capture {title, text}` waits for the person's approval (the UI saves the note into
//! the companion as the person approves) and ends with what was captured; in a chat without the
//! capability it fails at once, asking nobody.

use reqwest::Method;
use serde_json::{Value, json};
use spool_log::clock::{Clock, SystemClock};
use spool_tests::Harness;

use crate::support::{Api, chat_with, handshake, one, org_of, send, stack, until};

fn script() -> Value {
    json!({"word_delay_ms": 1, "rules": [{"match": ["remember"], "rounds": [
        {"say": "Shall I keep it?", "tools": [{"name": "propose_capture",
            "arguments": {"title": "Ferry times", "text": "The ferry leaves at 7:40."}}]},
        {"say": "Done: {result}"}]}]})
}

/// Turns `capabilities` on for `chat` with a companion's token from a key that carries them.
async fn enable(api: &Api, harness: &impl Harness, chat: &str, capabilities: &[&str]) -> Value {
    let metadata = harness.metadata().await;
    let owned: Vec<String> = capabilities.iter().map(|c| (*c).to_owned()).collect();
    let (_, key) = spool_api::admin::create_api_key(&metadata, &org_of(api), &owned, SystemClock.now_ms())
        .await
        .unwrap();
    let shake: Value = handshake(
        &api.http,
        &api.base,
        json!({ "api_key": key.reveal(), "library_id": "lib-1" }),
    )
    .await
    .json()
    .await
    .unwrap();
    api.ok(
        Method::PUT,
        &format!("/v1/sessions/{chat}/capabilities"),
        Some(json!({ "library_id": "lib-1", "jwt": shake["jwt"], "capabilities": capabilities })),
    )
    .await
}

pub(crate) async fn an_agents_capture_waits_for_the_persons_approval<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    // GIVEN a chat whose companion enabled `capture_ingest`
    let (_, chat) = chat_with(api, script()).await;
    let enabled = enable(api, harness, &chat, &["capture_ingest"]).await;
    assert_eq!(enabled["capabilities_enabled"], json!(["capture_ingest"]), "{enabled}");
    // WHEN its agent proposes a capture
    let turn = send(api, &chat, "remember the ferry").await;
    let events = until(api, &chat, &turn, "tool_approval_required").await;
    // THEN the person is asked, with the note as proposed, and nothing ran yet
    let asked = one(&events, &turn, "tool_approval_required")["payload"].clone();
    assert_eq!(asked["tool"], "propose_capture");
    assert_eq!(
        asked["arguments"],
        json!({ "title": "Ferry times", "text": "The ferry leaves at 7:40." })
    );
    assert!(!events.iter().any(|e| e["type"] == "tool_end"), "ran before approval");
    // WHEN the person approves (the UI has saved the note into the companion by then)
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/approval"),
        Some(json!({ "tool_call_id": asked["tool_call_id"], "decision": "approve" })),
    )
    .await;
    // THEN the call ends with what was captured, and the agent goes on
    let events = until(api, &chat, &turn, "agent_end").await;
    let end = one(&events, &turn, "tool_end")["payload"].clone();
    assert_eq!(end["result"]["captured"], true, "{end}");
    assert_eq!(end["result"]["title"], "Ferry times", "{end}");
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
}

pub(crate) async fn a_chat_without_capture_ingest_cannot_propose_a_capture<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    // GIVEN a chat whose companion enabled only `context_for_query`
    let (_, chat) = chat_with(api, script()).await;
    enable(api, harness, &chat, &["context_for_query"]).await;
    // WHEN its agent proposes a capture
    let turn = send(api, &chat, "remember the ferry").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    // THEN nobody is asked, and the call fails saying why
    assert!(!events.iter().any(|e| e["type"] == "tool_approval_required"));
    let end = one(&events, &turn, "tool_end")["payload"].clone();
    assert!(end["error"].as_str().unwrap().contains("capture_ingest"), "{end}");
}

on_both_backends!(capture_http: an_agents_capture_waits_for_the_persons_approval, a_chat_without_capture_ingest_cannot_propose_a_capture);
