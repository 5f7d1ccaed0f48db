//! Spool as an MCP server over real HTTP on both backends: `POST /v1/mcp` speaks the Model
//! Context Protocol's Streamable HTTP transport (stateless, JSON answers); an agent's token
//! lists the tools and chats, posts, asks a person and gets the answer the person posts
//! through the HTTP API (after a resumable `waiting`), makes a task and uses the global chat's
//! trio; other tokens are refused as on the agent-messages route; bad arguments are the
//! protocol's invalid params, never a 5xx. (The official SDK's client: `tests/mcp`.)

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_tests::Harness;

use crate::support::{Api, agent_client, all_events, setup};

/// The protocol version the raw requests speak.
const VERSION: &str = "2025-06-18";

/// One JSON-RPC message to `/v1/mcp` as `api`: the status and the JSON-RPC answer (the last
/// message of an event stream).
pub(crate) async fn rpc(api: &Api, body: &Value) -> (StatusCode, Value) {
    let mut request = api
        .http
        .post(format!("{}/v1/mcp", api.base))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", VERSION)
        .json(body);
    if let Some(token) = &api.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let stream = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
    let text = response.text().await.unwrap();
    let answer = if stream {
        text.lines()
            .rev()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or(Value::Null)
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, answer)
}

/// A tool call's result (`result` of the JSON-RPC answer), asserting the status is 200.
pub(crate) async fn call_tool(api: &Api, name: &str, arguments: Value) -> Value {
    let body =
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    let (status, answer) = rpc(api, &body).await;
    assert_eq!(status, 200, "{name}: {answer}");
    answer
}

/// The structured result of a call that succeeded.
async fn ok(api: &Api, name: &str, arguments: Value) -> Value {
    let answer = call_tool(api, name, arguments).await;
    assert_ne!(answer["result"]["isError"], true, "{name}: {answer}");
    answer["result"]["structuredContent"].clone()
}

/// An agent lists, reads, posts, asks (and keeps waiting after `waiting`), makes a task and
/// uses the global chat; a person's answers reach it.
pub(crate) async fn an_agent_works_in_chats_through_mcp<H: Harness>(harness: &H) {
    let (person, _, _) = setup(harness).await;
    let agent = agent_client(harness, &person).await;
    // GIVEN a workspace with a chat
    let ws = person
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "MCP" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let chat = person
        .ok(
            Method::POST,
            "/v1/sessions",
            Some(json!({ "workspace_id": ws, "title": "Deploys" })),
        )
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();

    // WHEN the client initializes: Spool answers, as JSON
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}});
    let (status, answer) = rpc(&agent, &init).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["serverInfo"]["name"], "spool", "{answer}");
    // THEN the tools are listed, with strict schemas
    let (_, tools) = rpc(&agent, &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    let mut names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "ask_user",
            "create_task",
            "list_chats",
            "post_agent",
            "post_message",
            "read_chat",
            "wait_user"
        ]
    );
    for tool in tools["result"]["tools"].as_array().unwrap() {
        assert_eq!(tool["inputSchema"]["additionalProperties"], false, "{tool}");
    }

    // WHEN it lists the workspace's chats: the chat is there
    let listed = ok(&agent, "list_chats", json!({ "workspace_id": ws })).await;
    assert_eq!(listed["sessions"][0]["id"], chat, "{listed}");
    // WHEN it posts: the chat holds an agent's message by its author
    let posted = ok(
        &agent,
        "post_message",
        json!({ "chat_id": chat, "author": "Claude Code", "text": "Deploying v2" }),
    )
    .await;
    let events = all_events(&person, &chat).await;
    let message = events.iter().find(|e| e["seq"] == posted["seq"]).unwrap();
    assert_eq!(
        (&message["type"], &message["payload"]["author"]),
        (&json!("agent_message"), &json!("Claude Code"))
    );
    let read = ok(&agent, "read_chat", json!({ "chat_id": chat, "after": 0 })).await;
    assert_eq!(read["messages"][0]["text"], "Deploying v2", "{read}");
    let read = ok(
        &agent,
        "read_chat",
        json!({ "chat_id": chat, "view": "events", "limit": 1 }),
    )
    .await;
    assert_eq!(read["events"].as_array().unwrap().len(), 1, "{read}");

    // WHEN it asks and nobody answers within the call: a resumable `waiting`
    let waiting = ok(
        &agent,
        "ask_user",
        json!({ "chat_id": chat, "author": "Claude Code", "question": "Roll back?" }),
    )
    .await;
    assert_eq!(waiting["status"], "waiting", "{waiting}");
    let question = waiting["question_id"].as_str().unwrap().to_owned();
    // WHEN the person answers in the chat, then the agent asks again with the question's id
    person
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": "No, keep v2" })),
        )
        .await;
    let resume = json!({ "chat_id": chat, "question_id": question, "after": waiting["after"] });
    let answered = ok(&agent, "ask_user", resume.clone()).await;
    // THEN the answer is the person's text
    assert_eq!(
        (&answered["status"], &answered["answer"], &answered["question_id"]),
        (&json!("answered"), &json!("No, keep v2"), &json!(question)),
        "{answered}"
    );
    // (and wait_user resumes the same question alike)
    assert_eq!(ok(&agent, "wait_user", resume).await["answer"], "No, keep v2");

    // WHEN it makes a task: the workspace lists it
    let task = ok(
        &agent,
        "create_task",
        json!({ "workspace_id": ws, "title": "Check v2", "chat_id": chat }),
    )
    .await;
    let tasks = person
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/tasks"), None)
        .await;
    assert!(tasks.to_string().contains(task["id"].as_str().unwrap()), "{tasks}");

    // WHEN it posts in the global chat and the person replies there: wait_user returns it
    let global = ok(
        &agent,
        "post_agent",
        json!({ "author": "Claude Code", "text": "v2 is out" }),
    )
    .await;
    assert_eq!(global["chat_id"], "global");
    person
        .ok(Method::POST, "/chat/user_message", Some(json!({ "text": "thanks" })))
        .await;
    let next = ok(&agent, "wait_user", json!({ "after": global["seq"] })).await;
    assert_eq!(
        (&next["status"], &next["answer"]),
        (&json!("answered"), &json!("thanks"))
    );
    let history = person.ok(Method::GET, "/chat/history", None).await;
    assert!(history.to_string().contains("v2 is out"));
}

/// The token decides as on the agent-messages route; arguments are checked; another
/// organization's chats are not there.
pub(crate) async fn mcp_refuses_what_the_routes_refuse<H: Harness>(harness: &H) {
    let (person, other, anonymous) = setup(harness).await;
    let agent = agent_client(harness, &person).await;
    let other_agent = agent_client(harness, &other).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // No token: 401; a person's token (no `agent`): 403, saying how to get one
    assert_eq!(rpc(&anonymous, &list).await.0, 401);
    let (status, refused) = rpc(&person, &list).await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused.to_string().contains("--capability agent"), "{refused}");
    // A runner's token: 403 as on every route but the runner's
    let metadata = harness.metadata().await;
    let org = crate::support::org_of(&person);
    let (_, key) = spool_api::admin::create_api_key(
        &metadata,
        &org,
        &["runner".to_owned()],
        spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock),
    )
    .await
    .unwrap();
    let jwt = crate::support::handshake(&person.http, &person.base, json!({ "api_key": key.reveal() }))
        .await
        .json::<Value>()
        .await
        .unwrap()["jwt"]
        .as_str()
        .unwrap()
        .to_owned();
    let runner = Api {
        http: person.http.clone(),
        base: person.base.clone(),
        token: Some(jwt),
    };
    assert_eq!(rpc(&runner, &list).await.0, 403);

    // Bad arguments: invalid params (-32602), not a 5xx
    for (name, arguments) in [
        ("read_chat", json!({ "chat": "x" })),
        ("read_chat", json!({ "chat_id": 5 })),
        (
            "post_message",
            json!({ "chat_id": "global", "author": "a", "text": "t", "extra": 1 }),
        ),
        ("list_chats", json!({ "limit": "many" })),
        ("no_such_tool", json!({})),
    ] {
        let answer = call_tool(&agent, name, arguments).await;
        assert_eq!(answer["error"]["code"], -32602, "{name}: {answer}");
    }
    // What the route refuses: a tool error with its reason
    for (name, arguments, says) in [
        ("read_chat", json!({ "chat_id": "ses_nope" }), "ses_nope"),
        ("read_chat", json!({ "chat_id": "global", "limit": 0 }), "limit"),
        ("read_chat", json!({ "chat_id": "../x" }), ""),
        (
            "post_message",
            json!({ "chat_id": "global", "author": "Spool", "text": "t" }),
            "built-in",
        ),
        ("post_agent", json!({ "author": "a", "text": "  " }), "blank"),
        ("ask_user", json!({ "author": "a" }), "question"),
        ("create_task", json!({ "workspace_id": "ws_nope", "title": "t" }), ""),
    ] {
        let answer = call_tool(&agent, name, arguments).await;
        assert_eq!(answer["result"]["isError"], true, "{name}: {answer}");
        assert!(answer.to_string().contains(says), "{name}: {answer}");
    }

    // Another organization's chat is not there, and its messages do not show
    let chat = person
        .ok(Method::POST, "/v1/sessions", Some(json!({ "title": "Private" })))
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    person
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": "A's secret plan", "on_busy": "enqueue" })),
        )
        .await;
    for (name, arguments) in [
        ("read_chat", json!({ "chat_id": chat, "after": 0 })),
        ("post_message", json!({ "chat_id": chat, "author": "b", "text": "hi" })),
        ("ask_user", json!({ "chat_id": chat, "author": "b", "question": "hi?" })),
        ("wait_user", json!({ "chat_id": chat, "after": 0 })),
    ] {
        let answer = call_tool(&other_agent, name, arguments).await;
        assert_eq!(answer["result"]["isError"], true, "{name}: {answer}");
        assert!(!answer.to_string().contains("A's secret plan"), "{name}: {answer}");
    }
    let listed = ok(&other_agent, "list_chats", json!({})).await;
    assert!(!listed.to_string().contains(&chat), "{listed}");
    let events = all_events(&person, &chat).await;
    assert!(!events.iter().any(|e| e["type"] == "agent_message"), "{events:?}");
}

on_both_backends!(mcp_http:
    an_agent_works_in_chats_through_mcp,
    mcp_refuses_what_the_routes_refuse,
);
