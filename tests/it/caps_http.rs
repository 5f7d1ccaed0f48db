//! Caps under concurrency, over HTTP on both backends: 40 creates at once never leave more
//! than a cap allows, each one refused is a `409 limit_reached` that changed nothing, and a
//! delete gives its place back. The caps are the stores' own ([`Caps`]): the webhook test
//! runs with the deployed ones, the others with smaller ones, so 40 creates pass them.

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_chat::{caps::Caps, metadata::Metadata};
use spool_log::port::StreamLog;
use spool_tests::Harness;

use crate::support::{Api, chat_with, one, send, serve, setup, setup_on, stack_capped, until};

/// Fires `count` requests at once (`request(i)` makes the `i`-th); their statuses and bodies.
async fn at_once<F, Fut>(count: usize, request: F) -> Vec<(u16, Value)>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = (StatusCode, Value)>,
{
    let answers = futures_util::future::join_all((0..count).map(request)).await;
    answers.into_iter().map(|(s, v)| (s.as_u16(), v)).collect()
}

/// Each answer is a success (`made`) or a `409 limit_reached`; how many were made.
fn made_or_capped(answers: &[(u16, Value)], made: u16) -> usize {
    for (status, body) in answers {
        assert!(
            *status == made || (*status == 409 && body["error"]["code"] == "limit_reached"),
            "{status} {body}"
        );
    }
    answers.iter().filter(|(s, _)| *s == made).count()
}

/// Caps small enough for 40 creates to pass each of them.
fn small() -> Caps {
    Caps {
        hooks_per_workspace: 20,
        mcp_servers_per_workspace: 8,
        agents_per_workspace: 10,
        tasks_per_workspace: 15,
        attachments_per_chat: 12,
        commands_per_scope: 10,
        command_bytes_per_scope: 6_000,
        commands_per_org: 25,
        command_bytes_per_org: 1 << 30,
        subscriptions_per_org: 10,
    }
}

/// A served Spool whose store holds records to `caps`; a client of one organization.
async fn capped<H: Harness>(harness: &H, caps: Caps) -> Api {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.capped_metadata(caps).await);
    let base = serve(log, metadata.clone(), harness.turns().await, harness.files().await).await;
    setup_on(metadata.as_ref(), &base).await.0
}

async fn workspace(api: &Api) -> String {
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Capped" })))
        .await;
    ws["id"].as_str().unwrap().to_owned()
}

fn count(listed: &Value, key: &str) -> usize {
    listed[key].as_array().unwrap().len()
}

/// 40 webhooks at once in one workspace: at most 20 are made, whatever the interleaving.
pub(crate) async fn forty_webhooks_at_once_make_at_most_twenty<H: Harness>(harness: &H) {
    // GIVEN a workspace with no endpoint, and the deployed caps
    let (api, _, _) = setup(harness).await;
    let ws = workspace(&api).await;

    // WHEN 40 are registered at once
    let path = format!("/v1/workspaces/{ws}/webhooks");
    let answers = at_once(40, |i| {
        let body = json!({ "url": format!("http://localhost:9/hook/{i}") });
        api.call(Method::POST, &path, Some(body))
    })
    .await;

    // THEN exactly 20 were made and the rest refused, and 20 are stored
    assert_eq!(made_or_capped(&answers, 201), 20);
    let listed = api.ok(Method::GET, &path, None).await;
    assert_eq!(count(&listed, "webhooks"), 20);

    // WHEN one is deleted
    let first = listed["webhooks"][0]["id"].as_str().unwrap();
    api.ok(Method::DELETE, &format!("/v1/webhooks/{first}"), None).await;
    // THEN one more can be made, and no second
    let another = |i: usize| json!({ "url": format!("http://localhost:9/again/{i}") });
    assert_eq!(api.call(Method::POST, &path, Some(another(1))).await.0, 201);
    assert_eq!(api.call(Method::POST, &path, Some(another(2))).await.0, 409);
}

/// 40 MCP servers at once (each with a secret header): the workspace holds 8; 10 creates of
/// one name at once make one; a deleted server gives its place back.
pub(crate) async fn forty_mcp_servers_at_once_stop_at_the_cap<H: Harness>(harness: &H) {
    // GIVEN a workspace whose MCP servers are capped at 8
    let api = capped(harness, small()).await;
    let ws = workspace(&api).await;
    let path = format!("/v1/workspaces/{ws}/mcp-servers");
    let server = |name: String| {
        json!({
            "name": name,
            "transport": "http",
            "url": "https://mcp.example/mcp",
            "headers": { "Authorization": "Bearer capped" },
        })
    };

    // WHEN 40 of distinct names are added at once
    let answers = at_once(40, |i| api.call(Method::POST, &path, Some(server(format!("s{i}"))))).await;

    // THEN 8 were made, and the workspace lists 8
    assert_eq!(made_or_capped(&answers, 201), 8);
    let listed = api.ok(Method::GET, &path, None).await;
    assert_eq!(count(&listed, "mcp_servers"), 8);

    // WHEN one is deleted and 10 creates of one name race for its place
    let first = listed["mcp_servers"][0]["id"].as_str().unwrap();
    api.ok(Method::DELETE, &format!("/v1/mcp-servers/{first}"), None).await;
    let answers = at_once(10, |_| api.call(Method::POST, &path, Some(server("same".to_owned())))).await;

    // THEN exactly one was made; the others were refused as a taken name or a full workspace
    for (status, body) in &answers {
        assert!(
            *status == 201
                || (*status == 409 && ["conflict", "limit_reached"].contains(&body["error"]["code"].as_str().unwrap())),
            "{status} {body}"
        );
    }
    assert_eq!(answers.iter().filter(|(s, _)| *s == 201).count(), 1, "{answers:?}");
    let listed = api.ok(Method::GET, &path, None).await;
    assert_eq!(count(&listed, "mcp_servers"), 8);
}

/// Two creates of one name at once, with room for both: never both made.
pub(crate) async fn two_mcp_servers_of_one_name_never_both_made<H: Harness>(harness: &H) {
    let api = capped(harness, small()).await;
    let ws = workspace(&api).await;
    let path = format!("/v1/workspaces/{ws}/mcp-servers");
    for round in 0..5 {
        let name = format!("twin{round}");
        let answers = at_once(2, |_| {
            api.call(
                Method::POST,
                &path,
                Some(json!({ "name": name, "transport": "http", "url": "https://mcp.example/mcp" })),
            )
        })
        .await;
        let made = answers.iter().filter(|(s, _)| *s == 201).count();
        assert_eq!(made, 1, "{answers:?}");
        assert!(
            answers
                .iter()
                .any(|(s, b)| *s == 409 && b["error"]["code"] == "conflict"),
            "{answers:?}"
        );
    }
    let listed = api.ok(Method::GET, &path, None).await;
    assert_eq!(count(&listed, "mcp_servers"), 5);
}

/// 40 agents at once: the workspace holds 10 with its built-in one; a deleted one frees a place.
pub(crate) async fn forty_agents_at_once_stop_at_the_cap<H: Harness>(harness: &H) {
    // GIVEN a workspace whose agents are capped at 10, its built-in agent one of them
    let api = capped(harness, small()).await;
    let ws = workspace(&api).await;
    let path = format!("/v1/workspaces/{ws}/agents");

    // WHEN 40 agents are added at once
    let answers = at_once(40, |i| {
        api.call(Method::POST, &path, Some(json!({ "name": format!("Agent {i}") })))
    })
    .await;

    // THEN 9 were made, and the workspace has 10
    assert_eq!(made_or_capped(&answers, 201), 9);
    let listed = api.ok(Method::GET, &path, None).await;
    assert_eq!(count(&listed, "agents"), 10);

    // WHEN one is deleted, THEN one more can be made, and no second
    let last = listed["agents"][9]["id"].as_str().unwrap();
    api.ok(Method::DELETE, &format!("/v1/agents/{last}"), None).await;
    let one = |name: &str| json!({ "name": name });
    assert_eq!(api.call(Method::POST, &path, Some(one("Again"))).await.0, 201);
    let (status, refused) = api.call(Method::POST, &path, Some(one("Too many"))).await;
    assert_eq!(status, 409);
    assert_eq!(
        refused["error"]["message"],
        "a workspace has at most 10 agents; delete one first"
    );
}

/// An agent's `create_agent` action meets the same cap as a person's request.
pub(crate) async fn an_agents_action_meets_the_same_agent_cap<H: Harness>(harness: &H) {
    // GIVEN a workspace at its cap of one agent (its built-in one), which asks to add another
    let stack = stack_capped(
        harness,
        Caps {
            agents_per_workspace: 1,
            ..small()
        },
    )
    .await;
    let api = &stack.api;
    let script = json!({ "word_delay_ms": 0, "rules": [{ "match": ["helper"], "rounds": [
        { "say": "May I?", "tools": [{ "name": "create_agent", "arguments": { "name": "Helper" } }] },
        { "say": "Result: {result}" }] }], "default": [{ "say": "Hello." }] });
    let (ws, chat) = chat_with(api, script).await;

    // WHEN a person asks for a helper and approves the call
    let turn = send(api, &chat, "a helper please").await;
    let events = until(api, &chat, &turn, "tool_approval_required").await;
    let request = one(&events, &turn, "tool_approval_required")["payload"].clone();
    let approval = json!({ "decision": "approve", "tool_call_id": request["tool_call_id"] });
    api.ok(Method::POST, &format!("/v1/sessions/{chat}/approval"), Some(approval))
        .await;
    let events = until(api, &chat, &turn, "agent_end").await;

    // THEN the action is refused with the cap's reason, and the workspace keeps one agent
    let end = one(&events, &turn, "tool_end")["payload"].clone();
    assert!(end.to_string().contains("at most 1 agents"), "{end}");
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/agents"), None).await;
    assert_eq!(count(&agents, "agents"), 1);
}

/// 40 tasks at once: at most the cap, and a deleted one frees a place.
pub(crate) async fn forty_tasks_at_once_stop_at_the_cap<H: Harness>(harness: &H) {
    // GIVEN a workspace whose tasks are capped at 15
    let api = capped(harness, small()).await;
    let ws = workspace(&api).await;
    let path = format!("/v1/workspaces/{ws}/tasks");

    // WHEN 40 are made at once
    let answers = at_once(40, |i| {
        api.call(Method::POST, &path, Some(json!({ "title": format!("Task {i}") })))
    })
    .await;

    // THEN 15 were made and stored
    assert_eq!(made_or_capped(&answers, 201), 15);
    let listed = api.ok(Method::GET, &path, None).await;
    assert_eq!(count(&listed, "tasks"), 15);

    // WHEN one is deleted, THEN one more can be made, and no second
    let first = listed["tasks"][0]["id"].as_str().unwrap();
    api.ok(Method::DELETE, &format!("/v1/tasks/{first}"), None).await;
    let one = |title: &str| json!({ "title": title });
    assert_eq!(api.call(Method::POST, &path, Some(one("Again"))).await.0, 201);
    assert_eq!(api.call(Method::POST, &path, Some(one("Too many"))).await.0, 409);
}

/// 40 files declared at once in one chat: at most the cap are recorded.
pub(crate) async fn forty_files_at_once_stop_at_the_cap<H: Harness>(harness: &H) {
    // GIVEN a chat whose files are capped at 12
    let api = capped(harness, small()).await;
    let chat = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let path = format!("/v1/sessions/{}/attachments", chat["id"].as_str().unwrap());

    // WHEN 40 are declared at once
    let answers = at_once(40, |i| {
        let body = json!({ "filename": format!("f{i}.txt"), "content_type": "text/plain", "size": 5 });
        api.call(Method::POST, &path, Some(body))
    })
    .await;

    // THEN 12 were recorded, and the chat lists 12
    assert_eq!(made_or_capped(&answers, 201), 12);
    assert_eq!(count(&api.ok(Method::GET, &path, None).await, "attachments"), 12);
}

/// `PUT` of a command's markdown file.
async fn put_command(api: &Api, path: String, markdown: String) -> (StatusCode, Value) {
    let response = api
        .http
        .put(format!("{}{path}", api.base))
        .bearer_auth(api.token.as_deref().unwrap())
        .header("content-type", "text/markdown")
        .body(markdown)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// How many commands a workspace has stored (its list has the built-in ones too).
async fn stored_in(api: &Api, ws: &str) -> usize {
    let listed = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/slash-commands"), None)
        .await;
    let commands = listed["commands"].as_array().unwrap();
    commands.iter().filter(|c| c["source"] == "workspace").count()
}

/// 40 commands at once stop at a scope's count and at its bytes; a replaced command counts
/// once and with its new size; the organization's bound holds across scopes, and a deleted
/// workspace's commands leave it.
pub(crate) async fn forty_commands_at_once_stop_at_counts_and_bytes<H: Harness>(harness: &H) {
    // GIVEN 10 commands and 6,000 bytes a scope, 25 commands an organization
    let api = capped(harness, small()).await;
    let (small_ws, big_ws) = (workspace(&api).await, workspace(&api).await);
    let in_ws = |ws: &str, name: String| format!("/v1/workspaces/{ws}/slash-commands/{name}");

    // WHEN 40 small commands are stored at once in one workspace
    let answers = at_once(40, |i| {
        put_command(&api, in_ws(&small_ws, format!("c{i}")), "x".repeat(100))
    })
    .await;
    // THEN 10 were stored (1,000 bytes: the count decided)
    assert_eq!(made_or_capped(&answers, 200), 10);
    assert_eq!(stored_in(&api, &small_ws).await, 10);
    // AND one of them can be replaced while the scope is full: it counts once
    let kept = answers.iter().find(|(s, _)| *s == 200).unwrap().1["name"]
        .as_str()
        .unwrap();
    let (status, _) = put_command(&api, in_ws(&small_ws, kept.to_owned()), "Changed".to_owned()).await;
    assert_eq!(status, 200);

    // WHEN 40 commands of 1,000 bytes are stored at once in another
    let answers = at_once(40, |i| {
        put_command(&api, in_ws(&big_ws, format!("c{i}")), "y".repeat(1_000))
    })
    .await;
    // THEN 6 were stored (6,000 bytes: the bytes decided)
    assert_eq!(made_or_capped(&answers, 200), 6);
    assert_eq!(stored_in(&api, &big_ws).await, 6);
    // AND a command that grows past the bytes is refused, one that shrinks is taken, and the
    // bytes it gave back take a new command of that size and no more
    let stored: Vec<&str> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, v)| v["name"].as_str().unwrap())
        .collect();
    let put = |name: &str, bytes: usize| put_command(&api, in_ws(&big_ws, name.to_owned()), "z".repeat(bytes));
    assert_eq!(put(stored[0], 1_001).await.0, 409);
    assert_eq!(put(stored[0], 500).await.0, 200);
    assert_eq!(put("fresh", 501).await.0, 409);
    assert_eq!(put("fresh", 500).await.0, 200);
    assert_eq!(put("more", 1).await.0, 409);

    // WHEN 40 global commands are stored at once, with 17 stored in workspaces
    let answers = at_once(40, |i| {
        put_command(&api, format!("/v1/slash-commands/g{i}"), "g".to_owned())
    })
    .await;
    // THEN the organization's 25 decided: 8 were stored
    assert_eq!(made_or_capped(&answers, 200), 8);
    let global = api.ok(Method::GET, "/v1/slash-commands", None).await;
    assert_eq!(count(&global, "commands"), 8);

    // WHEN a workspace is deleted, THEN its commands leave the organization's count
    api.ok(Method::DELETE, &format!("/v1/workspaces/{small_ws}"), None)
        .await;
    let answers = at_once(40, |i| {
        put_command(&api, format!("/v1/slash-commands/h{i}"), "h".to_owned())
    })
    .await;
    assert_eq!(made_or_capped(&answers, 200), 2, "the global scope's own 10 decide now");
}

/// 40 subscriptions at once in one organization: at most the cap; re-confirming one is no
/// create, and a deleted one frees a place.
pub(crate) async fn forty_subscriptions_at_once_stop_at_the_cap<H: Harness>(harness: &H) {
    // GIVEN an organization whose subscriptions are capped at 10
    let api = capped(harness, small()).await;
    let path = |id: String| format!("/v1/stream/__ds/subscriptions/{id}");
    let config = json!({ "type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wake/pool" });

    // WHEN 40 are made at once
    let paths: Vec<String> = (0..40).map(|i| path(format!("s{i}"))).collect();
    let answers = at_once(40, |i| api.call(Method::PUT, &paths[i], Some(config.clone()))).await;

    // THEN 10 were made
    assert_eq!(made_or_capped(&answers, 201), 10);
    let made = (0..40).find(|i| answers[*i].0 == 201).unwrap();
    // AND one made is re-confirmed while full, but a new one is refused
    let again = api
        .call(Method::PUT, &path(format!("s{made}")), Some(config.clone()))
        .await;
    assert_eq!(again.0, 200, "{}", again.1);
    assert_eq!(
        api.call(Method::PUT, &path("new".to_owned()), Some(config.clone()))
            .await
            .0,
        409
    );

    // WHEN one is deleted, THEN one more can be made, and no second
    let (deleted, _) = api.call(Method::DELETE, &path(format!("s{made}")), None).await;
    assert_eq!(deleted, 204);
    assert_eq!(
        api.call(Method::PUT, &path("new".to_owned()), Some(config.clone()))
            .await
            .0,
        201
    );
    assert_eq!(
        api.call(Method::PUT, &path("newer".to_owned()), Some(config)).await.0,
        409
    );
}

on_both_backends!(caps_http:
    forty_webhooks_at_once_make_at_most_twenty,
    forty_mcp_servers_at_once_stop_at_the_cap,
    two_mcp_servers_of_one_name_never_both_made,
    forty_agents_at_once_stop_at_the_cap,
    an_agents_action_meets_the_same_agent_cap,
    forty_tasks_at_once_stop_at_the_cap,
    forty_files_at_once_stop_at_the_cap,
    forty_commands_at_once_stop_at_counts_and_bytes,
    forty_subscriptions_at_once_stop_at_the_cap,
);
