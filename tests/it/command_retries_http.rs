//! Retried settings over real HTTP on both backends: `/model`, `/mode` and `/rename` invoked
//! again with the same `client_message_id`, one after the other or two at once, run once (one
//! `slash_command_invoked`, one change of the chat, one `chat.renamed` on the workspace's feed)
//! and answer as the first did; one whose first attempt crashed before it changed the chat is
//! made by its retry; a model name that could be a flag is refused with what to do.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_log::failpoint::COMMAND_INVOKED;
use spool_tests::Harness;

use crate::support::{Api, all_events, chat_with, stack};

async fn invoke(api: &Api, chat: &str, body: Value) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        &format!("/v1/sessions/{chat}/slash-commands/invoke"),
        Some(body),
    )
    .await
}

/// The answer without what says it was a retry.
fn first_answer(mut answer: Value) -> Value {
    answer.as_object_mut().unwrap().remove("duplicate");
    answer
}

async fn feed(api: &Api, ws: &str) -> Vec<Value> {
    api.get(&format!("/v1/stream/workspaces/{ws}/feed?offset=-1"))
        .await
        .json()
        .await
        .unwrap()
}

/// Each setting, retried after it ran and then twice at once, runs once and answers the same.
pub(crate) async fn a_retried_setting_runs_once<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = chat_with(api, json!({ "word_delay_ms": 0, "default": [{ "say": "ok" }] })).await;
    let cases = [
        ("/model tiny-1", "model", json!("tiny-1")),
        ("/mode plan", "mode", json!("plan")),
        ("/rename Q3 plan", "title", json!("Q3 plan")),
    ];
    for (i, (input, field, value)) in cases.iter().enumerate() {
        // One after the other: the retry appends nothing, changes nothing, answers the same.
        let body = json!({ "input": input, "client_message_id": format!("seq-{i}") });
        let (status, first) = invoke(api, &chat, body.clone()).await;
        assert_eq!(status, 202, "{first}");
        assert_eq!(first["session"][field], *value, "{first}");
        assert_eq!(first["duplicate"], false);
        let (status, again) = invoke(api, &chat, body).await;
        assert_eq!(status, 202, "{again}");
        assert_eq!(again["duplicate"], true, "{again}");
        assert_eq!(first_answer(again), first_answer(first.clone()), "{input}");
        // Two at once, after the chat moved on (so each would change it if it ran).
        api.ok(
            Method::PATCH,
            &format!("/v1/sessions/{chat}"),
            Some(json!({ "title": "Reset" })),
        )
        .await;
        invoke(api, &chat, json!({ "input": "/model other-1" })).await;
        invoke(api, &chat, json!({ "input": "/mode act" })).await;
        let body = json!({ "input": input, "client_message_id": format!("twice-{i}") });
        let ((s1, a), (s2, b)) = tokio::join!(invoke(api, &chat, body.clone()), invoke(api, &chat, body.clone()));
        assert_eq!((s1.as_u16(), s2.as_u16()), (202, 202), "{a} {b}");
        let duplicates = [&a, &b].iter().filter(|x| x["duplicate"] == true).count();
        assert_eq!(duplicates, 1, "one ran, one was its retry: {a} {b}");
        assert_eq!(a["seq"], b["seq"]);
        assert_eq!(a["session"][field], *value, "{a}");
        assert_eq!(b["session"][field], *value, "{b}");
        let now = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
        assert_eq!(now[field], *value, "{now}");
        // And a third, later: still the same answer.
        let (_, later) = invoke(api, &chat, body).await;
        assert_eq!(later["duplicate"], true);
        assert_eq!(
            later["session"]["updated_at"], now["updated_at"],
            "the retry changed nothing"
        );
        let invoked = |events: &[Value], cmid: &str| {
            events
                .iter()
                .filter(|e| e["type"] == "slash_command_invoked" && e["client_message_id"] == cmid)
                .count()
        };
        let events = all_events(api, &chat).await;
        assert_eq!(invoked(&events, &format!("seq-{i}")), 1, "{input}");
        assert_eq!(invoked(&events, &format!("twice-{i}")), 1, "{input}");
    }
    // The feed announced each rename once: the first one and the one made twice at once.
    let renames: Vec<Value> = feed(api, &ws)
        .await
        .into_iter()
        .filter(|e| e["type"] == "chat.renamed" && e["chat_title"] == "Q3 plan")
        .collect();
    assert_eq!(renames.len(), 2, "{renames:?}");
}

/// A setting whose process died after its invoked event, before it changed the chat, is made
/// by its retry: once, answered as asked.
pub(crate) async fn a_setting_cut_short_by_a_crash_is_made_by_its_retry<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (_, chat) = chat_with(api, json!({ "word_delay_ms": 0, "default": [{ "say": "ok" }] })).await;
    let body = json!({ "input": "/rename Cut short", "client_message_id": "crash-1" });
    harness.fail_points().arm(COMMAND_INVOKED);
    let (status, answer) = invoke(api, &chat, body.clone()).await;
    harness.fail_points().disarm(COMMAND_INVOKED);
    assert_eq!(status, 500, "{answer}");
    let before = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_ne!(before["title"], "Cut short", "the crash came first");
    let (status, again) = invoke(api, &chat, body).await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["session"]["title"], "Cut short", "{again}");
    let events = all_events(api, &chat).await;
    let invoked = events
        .iter()
        .filter(|e| e["type"] == "slash_command_invoked" && e["client_message_id"] == "crash-1")
        .count();
    assert_eq!(invoked, 1);
}

/// A model name that could be read as a flag, or is not one word, is refused before anything is
/// recorded, saying what a model name is.
pub(crate) async fn a_model_name_that_could_be_a_flag_is_refused<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = chat_with(api, json!({ "word_delay_ms": 0, "default": [{ "say": "ok" }] })).await;
    for bad in ["--dangerously-skip-permissions", "-m", "$(id)", "a;b"] {
        let (status, body) = invoke(api, &chat, json!({ "input": format!("/model {bad}") })).await;
        assert_eq!(status, 400, "{bad}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("model name"), "{message}");
    }
    let now = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(now["model"], Value::Null, "nothing changed");
    let events = all_events(api, &chat).await;
    assert!(
        !events.iter().any(|e| e["type"] == "slash_command_invoked"),
        "only failures recorded"
    );
    // An agent's model follows the same rule.
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(json!({ "name": "Flagged", "model": "--yolo" })),
        )
        .await;
    assert_eq!(status, 400, "{body}");
}

on_both_backends!(command_retries_http:
    a_retried_setting_runs_once,
    a_setting_cut_short_by_a_crash_is_made_by_its_retry,
    a_model_name_that_could_be_a_flag_is_refused,
);
