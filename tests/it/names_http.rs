//! Names people choose are stored without Unicode format characters, on every route that takes
//! one: a right-to-left override cannot make `txt.exe` show as `exe.txt`, to people or agents.

use reqwest::Method;
use serde_json::json;
use spool_tests::Harness;

use crate::support::setup;

/// A right-to-left override before `txt.exe`: shown as `exe.txt`.
const REVERSED: &str = "\u{202e}txt.exe";

pub(crate) async fn names_are_stored_without_format_characters<H: Harness>(harness: &H) {
    let (api, _, _) = setup(harness).await;

    // WHEN a workspace, an agent, a task, a chat and a file are named with format characters
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": REVERSED })))
        .await;
    let ws_id = ws["id"].as_str().unwrap().to_owned();
    let agent = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws_id}/agents"),
            Some(json!({ "name": REVERSED })),
        )
        .await;
    let agent_id = agent["id"].as_str().unwrap().to_owned();
    let task = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws_id}/tasks"),
            Some(json!({ "title": REVERSED })),
        )
        .await;
    let chat = api
        .ok(
            Method::POST,
            "/v1/sessions",
            Some(json!({ "title": REVERSED, "workspace_id": ws_id })),
        )
        .await;
    let chat_id = chat["id"].as_str().unwrap().to_owned();
    let file = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat_id}/attachments"),
            Some(json!({ "filename": REVERSED, "content_type": "text/plain", "size": 1 })),
        )
        .await;

    // THEN each is stored and shown as `txt.exe`
    assert_eq!(ws["name"], "txt.exe");
    assert_eq!(agent["name"], "txt.exe");
    assert_eq!(task["title"], "txt.exe");
    assert_eq!(chat["title"], "txt.exe");
    assert_eq!(file["attachment"]["filename"], "txt.exe");
    let files = api
        .ok(Method::GET, &format!("/v1/sessions/{chat_id}/attachments"), None)
        .await;
    assert_eq!(files["attachments"][0]["filename"], "txt.exe");
    let agents = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws_id}/agents"), None)
        .await;
    assert!(
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "txt.exe"),
        "{agents}"
    );

    // WHEN they are renamed with zero-width and bidirectional characters
    let renamed = "\u{200b}notes\u{2066}.md\u{2069}";
    let ws = api
        .ok(
            Method::PATCH,
            &format!("/v1/workspaces/{ws_id}"),
            Some(json!({ "name": renamed })),
        )
        .await;
    let agent = api
        .ok(
            Method::PATCH,
            &format!("/v1/agents/{agent_id}"),
            Some(json!({ "name": renamed })),
        )
        .await;
    let chat = api
        .ok(
            Method::PATCH,
            &format!("/v1/sessions/{chat_id}"),
            Some(json!({ "title": renamed })),
        )
        .await;
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat_id}/slash-commands/invoke"),
        Some(json!({ "input": format!("/rename {REVERSED}") })),
    )
    .await;

    // THEN the characters are gone from what is stored
    assert_eq!(ws["name"], "notes.md");
    assert_eq!(agent["name"], "notes.md");
    assert_eq!(chat["title"], "notes.md");
    let chat = api.ok(Method::GET, &format!("/v1/sessions/{chat_id}"), None).await;
    assert_eq!(chat["title"], "txt.exe", "after /rename");

    // AND a name of nothing but format characters is blank: refused
    let (status, body) = api
        .call(
            Method::POST,
            "/v1/sessions",
            Some(json!({ "title": "\u{202e}\u{200b}" })),
        )
        .await;
    assert_eq!(status, 400, "{body}");
}

on_both_backends!(names_http: names_are_stored_without_format_characters);
