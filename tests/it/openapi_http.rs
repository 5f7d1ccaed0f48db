//! `GET /v1/openapi.json` against the real answers, over real HTTP on both backends: a
//! walk-through calls every operation of the document, successfully and with the usual mistakes,
//! and every answer must be one the document lists for its operation, with a body that matches
//! the listed schema (and every successful request body the request schema). At the end every
//! operation of the document has answered at least once with success, so the document names
//! no route that does not work, and the router (`utoipa_axum::routes!`) serves none it does not
//! name.

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::{
    metadata::Sessions,
    session::{OpenRequest, RequestKind},
};
use spool_tests::Harness;

use crate::support::{
    Api, agent_client, org_of, setup,
    spec::{Checked, Spec},
};

fn id(value: &Value) -> String {
    value["id"].as_str().unwrap().to_owned()
}

/// Every operation answers as the document says, and every one works.
pub(crate) async fn every_answer_is_one_the_document_promises<H: Harness>(harness: &H) {
    let (a, b, anonymous) = setup(harness).await;
    let spec = Spec::fetch(&a).await;
    let org = org_of(&a);
    let agent = agent_client(harness, &a).await;
    let api = Checked { api: &a, spec: &spec };
    let other = Checked { api: &b, spec: &spec };
    let nobody = Checked {
        api: &anonymous,
        spec: &spec,
    };
    let bot = Checked {
        api: &agent,
        spec: &spec,
    };

    // Meta and handshake.
    nobody.ok(Method::GET, "/healthz", None).await;
    nobody.ok(Method::GET, "/v1/openapi.json", None).await;
    let docs = nobody.ok(Method::GET, "/v1/docs", None).await;
    assert_eq!(docs["docs"].as_array().unwrap().len(), 3, "{docs}");
    let (status, headers, body) = nobody
        .raw(
            a.http.get(format!("{}/v1/docs/workspace-setup", a.base)),
            Method::GET,
            "/v1/docs/workspace-setup",
        )
        .await;
    assert_eq!(status, 200);
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/markdown"));
    assert!(String::from_utf8_lossy(&body).starts_with("# Setting up a workspace"));
    nobody.refused(404, Method::GET, "/v1/docs/nope", None).await;
    nobody
        .refused(
            401,
            Method::POST,
            "/v1/handshake",
            Some(json!({ "api_key": "spool_0_x" })),
        )
        .await;
    nobody
        .refused(400, Method::POST, "/v1/handshake", Some(json!({})))
        .await;
    let now = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock);
    let capabilities = ["context_for_query".to_owned()];
    let (_, key) = spool_api::admin::create_api_key(&harness.metadata().await, &org, &capabilities, now)
        .await
        .unwrap();
    let key = key.reveal();
    let token = nobody
        .ok(
            Method::POST,
            "/v1/handshake",
            Some(json!({ "api_key": key, "version": "1", "library_id": "lib-1" })),
        )
        .await;
    nobody.refused(401, Method::GET, "/v1/workspaces", None).await;

    // Workspaces, agents, tasks.
    let ws = id(&api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "title": "Docs" })))
        .await);
    api.refused(400, Method::POST, "/v1/workspaces", Some(json!({ "title": " " })))
        .await;
    api.ok(Method::GET, "/v1/workspaces", None).await;
    api.ok(Method::GET, &format!("/v1/workspaces/{ws}"), None).await;
    api.refused(404, Method::GET, "/v1/workspaces/ws_missing", None).await;
    api.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{ws}"),
        Some(json!({ "description": "Team docs", "working_directory_mode": "temp", "cleanup": { "turn_record_days": 14 }, "notifications": { "email": "ops@example.com", "on_task": false } })),
    )
    .await;
    let helper = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(json!({ "name": "Helper", "instruction": "Be brief", "runtime": "scripted", "cli_type": "claude" })),
        )
        .await;
    let helper = id(&helper);
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/agents"), None).await;
    let builtin = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["builtin"] == true)
        .map(id)
        .unwrap();
    api.ok(
        Method::PUT,
        &format!("/v1/workspaces/{ws}/agents/order"),
        Some(json!({ "agent_ids": [helper, builtin] })),
    )
    .await;
    api.refused(
        400,
        Method::PUT,
        &format!("/v1/workspaces/{ws}/agents/order"),
        Some(json!({ "agent_ids": [helper] })),
    )
    .await;
    api.ok(
        Method::PATCH,
        &format!("/v1/agents/{helper}"),
        Some(json!({ "model": "small", "runtime": null })),
    )
    .await;
    api.refused(409, Method::DELETE, &format!("/v1/agents/{builtin}"), None)
        .await;
    api.ok(Method::GET, &format!("/v1/workspaces/{ws}/tasks"), None).await;
    let task = spool_chat::workspace::Task {
        id: "task_1".to_owned(),
        workspace_id: ws.clone(),
        session_id: None,
        title: "Write the guide".to_owned(),
        description: String::new(),
        created_ms: 1,
    };
    use spool_chat::metadata::Workspaces;
    harness.metadata().await.create_task(&org, &task).await.unwrap();
    let clis = api.ok(Method::GET, "/v1/clis", None).await;
    assert_eq!(clis["clis"].as_array().unwrap().len(), 4, "{clis}");
    assert!(clis["workspace_roots"].is_array(), "{clis}");
    api.ok(Method::GET, "/v1/tasks/task_1", None).await;
    api.refused(404, Method::GET, "/v1/tasks/task_2", None).await;
    let by_hand = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/tasks"),
            Some(json!({ "title": "By hand", "description": "Made in the UI" })),
        )
        .await;
    api.refused(
        400,
        Method::POST,
        &format!("/v1/workspaces/{ws}/tasks"),
        Some(json!({ "title": " " })),
    )
    .await;
    let by_hand = id(&by_hand);
    api.ok(
        Method::PATCH,
        &format!("/v1/tasks/{by_hand}"),
        Some(json!({ "description": "Changed" })),
    )
    .await;
    api.refused(404, Method::PATCH, "/v1/tasks/task_2", Some(json!({ "title": "x" })))
        .await;
    api.ok(Method::DELETE, &format!("/v1/tasks/{by_hand}"), None).await;
    api.refused(404, Method::DELETE, &format!("/v1/tasks/{by_hand}"), None)
        .await;

    // Sessions and messages.
    let chat = api
        .ok(
            Method::POST,
            "/v1/sessions",
            Some(json!({ "workspace_id": ws, "agent_id": helper, "title": "Plans" })),
        )
        .await;
    let chat = id(&chat);
    api.refused(
        404,
        Method::POST,
        "/v1/sessions",
        Some(json!({ "workspace_id": "ws_nope" })),
    )
    .await;
    api.ok(Method::GET, &format!("/v1/sessions?workspace_id={ws}&limit=10"), None)
        .await;
    api.refused(400, Method::GET, "/v1/sessions?limit=many", None).await;
    api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    api.ok(
        Method::PATCH,
        &format!("/v1/sessions/{chat}"),
        Some(json!({ "title": "Roadmap", "cli_type": "gemini" })),
    )
    .await;
    let messages = format!("/v1/sessions/{chat}/messages");
    let first = api
        .ok(
            Method::POST,
            &messages,
            Some(json!({ "content": "hello", "client_message_id": "m-1", "metadata": { "lang": "en" } })),
        )
        .await;
    api.ok(
        Method::POST,
        &messages,
        Some(json!({ "content": "hello", "client_message_id": "m-1" })),
    )
    .await;
    let busy = api
        .refused(409, Method::POST, &messages, Some(json!({ "content": "again" })))
        .await;
    assert_eq!(busy["error"]["pending_turn_id"], first["turn_id"]);
    api.ok(
        Method::POST,
        &messages,
        Some(json!({ "content": "queued", "on_busy": "enqueue" })),
    )
    .await;
    api.refused(400, Method::POST, &messages, Some(json!({ "content": "  " })))
        .await;
    // A body over the limit is refused before it is read, and the connection closed: a client
    // of its own, so no pooled connection is left broken. The client may still be writing when
    // the connection closes (HTTP/1.1 allows it), so a send that fails is tried again.
    let big = json!({ "content": "x".repeat(2 * 1024 * 1024) });
    let unpooled = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let mut refused = None;
    for _ in 0..10 {
        let request = unpooled.post(format!("{}{messages}", a.base)).json(&big);
        if let Ok(response) = request.bearer_auth(a.token.as_deref().unwrap()).send().await {
            let status = response.status();
            let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
            let body = response.bytes().await.unwrap_or_default();
            spec.check(&Method::POST, &messages, None, status, &content_type, &body)
                .unwrap();
            refused = Some(status);
            break;
        }
    }
    assert_eq!(refused, Some(reqwest::StatusCode::PAYLOAD_TOO_LARGE));
    let events = api
        .ok(
            Method::GET,
            &format!("/v1/sessions/{chat}/events?after=0&limit=2"),
            None,
        )
        .await;
    assert_eq!(events["events"].as_array().unwrap().len(), 2);
    api.ok(Method::GET, &format!("/v1/sessions/{chat}/events"), None).await;
    api.refused(400, Method::GET, &format!("/v1/sessions/{chat}/events?after=x"), None)
        .await;
    // A fork, and its refusals.
    let fork = format!("/v1/sessions/{chat}/fork");
    let forked = api
        .ok(Method::POST, &fork, Some(json!({ "at_seq": 1, "title": "Fork" })))
        .await;
    assert_eq!(forked["at_seq"], 1, "{forked}");
    api.refused(400, Method::POST, &fork, Some(json!({ "at_seq": -1 })))
        .await;
    other.refused(404, Method::POST, &fork, Some(json!({}))).await;
    api.refused(409, Method::POST, "/v1/sessions/global/fork", Some(json!({})))
        .await;
    // Versions, in forks of the chat's first message (no turn pending there).
    let fork_of_first = || async {
        let forked = api.ok(Method::POST, &fork, Some(json!({ "at_seq": 1 }))).await;
        forked["id"].as_str().unwrap().to_owned()
    };
    let edited = fork_of_first().await;
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{edited}/messages/1/edit"),
        Some(json!({ "content": "Hello again" })),
    )
    .await;
    api.refused(409, Method::POST, &format!("/v1/sessions/{edited}/regenerate"), None)
        .await;
    api.refused(
        400,
        Method::POST,
        &format!("/v1/sessions/{edited}/messages/1/edit"),
        Some(json!({ "content": "" })),
    )
    .await;
    let regenerated = fork_of_first().await;
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{regenerated}/regenerate"),
        Some(json!({ "seq": 1 })),
    )
    .await;
    api.refused(
        404,
        Method::POST,
        &format!("/v1/sessions/{regenerated}/messages/999/select"),
        None,
    )
    .await;
    let chosen = fork_of_first().await;
    let shown = api
        .ok(Method::POST, &format!("/v1/sessions/{chosen}/messages/1/select"), None)
        .await;
    assert_eq!(shown, json!({ "changed": false }));
    api.refused(
        409,
        Method::POST,
        &format!("/v1/sessions/{chat}/messages/1/select"),
        None,
    )
    .await;
    api.refused(
        400,
        Method::POST,
        &format!("/v1/sessions/{regenerated}/messages/2/select"),
        None,
    )
    .await;
    other
        .refused(404, Method::POST, &format!("/v1/sessions/{chat}/regenerate"), None)
        .await;
    // No worker runs here: the first turn is queued.
    let turns = api.ok(Method::GET, &format!("/v1/sessions/{chat}/turns"), None).await;
    assert_eq!(turns["turns"].as_array().unwrap().len(), 2, "{turns}");
    let turn = first["turn_id"].as_str().unwrap();
    let got = api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns/{turn}"), None)
        .await;
    assert_eq!(
        (got["status"].as_str(), got["trigger_seq"].as_u64()),
        (Some("queued"), Some(1))
    );
    api.refused(404, Method::GET, &format!("/v1/sessions/{chat}/turns/turn_nope"), None)
        .await;
    // Usage (no model ran here: all zeros).
    let usage = api.ok(Method::GET, &format!("/v1/sessions/{chat}/usage"), None).await;
    assert_eq!(usage["input_tokens"], 0, "{usage}");
    let usage = api
        .ok(
            Method::GET,
            &format!("/v1/workspaces/{ws}/usage?from=2026-01-01&to=2026-02-01"),
            None,
        )
        .await;
    assert_eq!(usage["by_chat"], json!([]), "{usage}");
    api.refused(
        400,
        Method::GET,
        &format!("/v1/workspaces/{ws}/usage?from=2026-02-30"),
        None,
    )
    .await;

    // Controls and answers.
    let metadata = harness.metadata().await;
    for (rid, kind) in [
        ("call-a", RequestKind::Approval),
        ("q-1", RequestKind::Question),
        ("plan-1", RequestKind::Plan),
        ("call-t", RequestKind::ToolOutput),
    ] {
        let request = OpenRequest {
            id: rid.to_owned(),
            kind,
            turn_id: Some("turn_x".to_owned()),
            opened_seq: 1,
        };
        metadata.open_request(&org, &chat, &request).await.unwrap();
    }
    let route = |r: &str| format!("/v1/sessions/{chat}/{r}");
    api.ok(Method::POST, &route("control"), Some(json!({ "action": "abort" })))
        .await;
    api.refused(400, Method::POST, &route("control"), Some(json!({ "action": "pause" })))
        .await;
    for (r, body) in [
        ("approval", json!({ "decision": "approve", "tool_call_id": "call-a" })),
        ("question", json!({ "question_id": "q-1", "answer": "blue" })),
        (
            "plan",
            json!({ "plan_id": "plan-1", "action": "reject", "feedback": "smaller" }),
        ),
        (
            "tool-output",
            json!({ "tool": "grep", "tool_call_id": "call-t", "error": "no match" }),
        ),
    ] {
        api.ok(Method::POST, &route(r), Some(body.clone())).await;
        api.refused(409, Method::POST, &route(r), Some(body)).await;
    }
    other
        .refused(404, Method::POST, &route("control"), Some(json!({ "action": "abort" })))
        .await;

    // Capabilities: a companion token for `lib-1` from the same organization.
    let companion = token["jwt"].as_str().unwrap();
    let outcome = api
        .ok(
            Method::PUT,
            &route("capabilities"),
            Some(json!({ "library_id": "lib-1", "jwt": companion, "capabilities": ["context_for_query"] })),
        )
        .await;
    assert_eq!(outcome["status"], "authenticated");
    let outcome = api
        .ok(
            Method::PUT,
            &route("capabilities"),
            Some(json!({ "library_id": "lib-2", "jwt": companion, "capabilities": ["context_for_query"] })),
        )
        .await;
    assert_eq!(outcome["status"], "rejected");

    // A read grant for the chat's stream, and none for a stream that does not exist.
    let grant = api
        .ok(
            Method::POST,
            "/v1/read-tokens",
            Some(json!({ "path": format!("sessions/{chat}") })),
        )
        .await;
    assert!(grant["read_token"].as_str().is_some_and(|t| !t.is_empty()), "{grant}");
    api.refused(404, Method::POST, "/v1/read-tokens", Some(json!({ "path": "no/such" })))
        .await;
    api.refused(400, Method::POST, "/v1/read-tokens", Some(json!({ "paths": "x" })))
        .await;

    // The global chat and agent-first posting.
    api.refused(
        403,
        Method::POST,
        "/v1/sessions/global/agent-messages",
        Some(json!({ "author": "bot", "text": "hi" })),
    )
    .await;
    bot.ok(
        Method::POST,
        "/v1/sessions/global/agent-messages",
        Some(json!({ "author": "bot", "text": "Deploy now?", "ask": true })),
    )
    .await;
    api.ok(Method::POST, "/chat/user_message", Some(json!({ "text": "yes" })))
        .await;
    api.refused(400, Method::POST, "/chat/user_message", Some(json!({ "text": "" })))
        .await;
    let history = api.ok(Method::GET, "/chat/history?after=0", None).await;
    assert_eq!(history.as_array().unwrap().len(), 2, "{history}");
    // Spool as an MCP server: an agent's token lists the tools; a person's is refused.
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    api.refused(403, Method::POST, "/v1/mcp", Some(list.clone())).await;
    let request = bot
        .api
        .http
        .post(format!("{}/v1/mcp", bot.api.base))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&list);
    let (status, _, body) = bot.raw(request, Method::POST, "/v1/mcp").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("ask_user"));
    api.ok(Method::GET, "/chat/history", None).await;

    // Live events (the stream function).
    for path in [format!("/v1/sessions/{chat}/stream?after=1"), "/chat/stream".to_owned()] {
        let (status, headers, _) = api
            .raw(a.http.get(format!("{}{path}", a.base)), Method::GET, &path)
            .await;
        assert_eq!(status, 200, "{path}");
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
    }
    // The AI SDK's routes (tests/frontends drives them with the `ai` package itself): a fresh
    // chat has nothing to resume, and a message answers with its turn's stream.
    let fresh = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/ai-sdk/chat/{fresh}/stream");
    let (status, _, _) = api
        .raw(a.http.get(format!("{}{path}", a.base)), Method::GET, &path)
        .await;
    assert_eq!(status, 204);
    let body = json!({ "id": fresh, "messages": [{ "id": "m1", "role": "user", "parts": [{ "type": "text", "text": "hi" }] }] });
    let path = "/v1/ai-sdk/chat";
    let (status, headers, _) = api
        .raw(a.http.post(format!("{}{path}", a.base)).json(&body), Method::POST, path)
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-vercel-ai-ui-message-stream"], "v1");
    // And AG-UI's (tests/frontends drives them with `@ag-ui/client`).
    let path = format!("/v1/ag-ui/chat/{fresh}/stream?after=0");
    let (status, _, _) = api
        .raw(a.http.get(format!("{}{path}", a.base)), Method::GET, &path)
        .await;
    assert_eq!(status, 200, "the turn the message above started runs or waits");
    let other = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/ag-ui/chat/{other}/stream");
    let (status, _, _) = api
        .raw(a.http.get(format!("{}{path}", a.base)), Method::GET, &path)
        .await;
    assert_eq!(status, 204);
    let body =
        json!({ "threadId": other, "runId": "r1", "messages": [{ "id": "m1", "role": "user", "content": "hi" }] });
    let path = "/v1/ag-ui/chat";
    let (status, _, _) = api
        .raw(a.http.post(format!("{}{path}", a.base)).json(&body), Method::POST, path)
        .await;
    assert_eq!(status, 200);
    let path = "/v1/sessions/ses_missing/stream";
    let (status, _, _) = api
        .raw(a.http.get(format!("{}{path}", a.base)), Method::GET, path)
        .await;
    assert_eq!(status, 404);

    // Durable Streams of the organization's own.
    let notes = "/v1/stream/notes/today";
    let url = format!("{}{notes}", a.base);
    let json_type = |r: reqwest::RequestBuilder| r.header("content-type", "application/json");
    for (request, method, expected) in [
        (json_type(a.http.put(&url)), Method::PUT, 201),
        (
            json_type(a.http.post(&url)).body(r#"[{"n":1},{"n":2}]"#),
            Method::POST,
            204,
        ),
        (a.http.head(&url), Method::HEAD, 200),
        (a.http.get(format!("{url}?offset=-1")), Method::GET, 200),
        (a.http.get(format!("{url}?offset=nope")), Method::GET, 400),
        (
            json_type(a.http.post(format!("{}/v1/stream/sessions/{chat}", a.base))).body("{}"),
            Method::POST,
            403,
        ),
        (a.http.delete(&url), Method::DELETE, 204),
        (a.http.get(format!("{url}?offset=-1")), Method::GET, 404),
    ] {
        let (status, _, body) = api.raw(request, method.clone(), notes).await;
        assert_eq!(status, expected, "{method} {notes}: {}", String::from_utf8_lossy(&body));
    }

    // A workspace's chat webhooks.
    chat_webhooks(&api, &ws).await;
    mcp_servers(&api, &ws).await;

    // The protocol's subscriptions: a pull-wake one, claimed, acked, released; a webhook one
    // (its receiver never called here); the JWKS.
    subscriptions(&api, &spec).await;

    // Files: declared, sent, completed, listed, fetched.
    let files = format!("/v1/sessions/{chat}/attachments");
    api.refused(
        413,
        Method::POST,
        &files,
        Some(json!({ "filename": "big.bin", "size": 1u64 << 40 })),
    )
    .await;
    api.refused(400, Method::POST, &files, Some(json!({ "filename": "..", "size": 1 })))
        .await;
    let declare = || {
        api.ok(
            Method::POST,
            &files,
            Some(json!({ "filename": "notes.txt", "content_type": "text/plain", "size": 5 })),
        )
    };
    let declared = declare().await;
    let file = declared["attachment_id"].as_str().unwrap();
    api.refused(409, Method::POST, &format!("{files}/{file}/complete"), None)
        .await;
    let through_spool = declared["upload"]["url"].as_str().unwrap().starts_with('/');
    let declared = if through_spool {
        // A mangled grant, the wrong size, and the right bytes after it (the refusal used the
        // URL up); then a new declaration's upload, and the same upload again.
        let mut declared = declared;
        for (suffix, body, expected, declare_again) in [
            ("x", "hello", 403, false),
            ("", "hello!", 400, false),
            ("", "hello", 403, true),
            ("", "hello", 204, false),
            ("", "hello", 409, false),
        ] {
            let path = format!("{}{suffix}", declared["upload"]["url"].as_str().unwrap());
            let put = a
                .http
                .put(format!("{}{path}", a.base))
                .header("content-type", "text/plain")
                .body(body);
            let (status, _, _) = api.raw(put, Method::PUT, &path).await;
            assert_eq!(status, expected, "PUT {path} with {body:?}");
            if declare_again {
                declared = declare().await;
            }
        }
        declared
    } else {
        let mut put = reqwest::Client::new()
            .put(declared["upload"]["url"].as_str().unwrap())
            .body("hello");
        for (name, value) in declared["upload"]["headers"].as_object().unwrap() {
            put = put.header(name.as_str(), value.as_str().unwrap());
        }
        assert!(put.send().await.unwrap().status().is_success());
        declared
    };
    let file = declared["attachment_id"].as_str().unwrap();
    let complete = format!("{files}/{file}/complete");
    api.ok(Method::POST, &complete, None).await;
    api.refused(404, Method::POST, &format!("{files}/att_missing/complete"), None)
        .await;
    api.ok(Method::GET, &files, None).await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let fetch = format!("{files}/{file}");
    let (status, headers, _) = api
        .raw(no_redirects.get(format!("{}{fetch}", a.base)), Method::GET, &fetch)
        .await;
    assert!(status == 200 || status == 302, "{status}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    api.refused(404, Method::GET, &format!("{files}/att_missing"), None)
        .await;

    // Runners: a claim (none, then a job), a heartbeat, a file and a settle; the list.
    runners(harness, &a, &spec, &chat, file).await;

    // Deletes last.
    api.ok(Method::DELETE, &format!("/v1/agents/{helper}"), None).await;
    api.refused(404, Method::DELETE, &format!("/v1/agents/{helper}"), None)
        .await;
    // File search: nothing without a working directory, matches with one, 409 with one that
    // cannot be read.
    let none = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/files?q=lib"), None)
        .await;
    assert_eq!(none["working_directory"], false, "{none}");
    let gone = spool_tests::workspace_dir(&crate::support::org_of(api.api));
    let ws_gone = api
        .ok(
            Method::POST,
            "/v1/workspaces",
            Some(json!({ "title": "Gone", "working_directory_path": gone.path().to_str().unwrap() })),
        )
        .await;
    std::fs::remove_dir_all(gone.path()).unwrap();
    let refused = api
        .refused(
            409,
            Method::GET,
            &format!("/v1/workspaces/{}/files?q=lib", ws_gone["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("settings"),
        "says what to do: {refused}"
    );
    let dir = spool_tests::workspace_dir(&crate::support::org_of(api.api));
    std::fs::write(dir.path().join("lib.rs"), "x").unwrap();
    api.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{ws}"),
        Some(json!({ "working_directory_path": dir.path().to_str().unwrap() })),
    )
    .await;
    let found = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/files?q=lib"), None)
        .await;
    assert_eq!(found["files"][0]["path"], "lib.rs");
    // Slash commands: stored (as markdown), listed, resolved, previewed, invoked.
    let markdown = |method: Method, path: &str, body: &'static str| {
        a.http
            .request(method, format!("{}{path}", a.base))
            .header("content-type", "text/markdown")
            .body(body)
    };
    for path in [
        "/v1/slash-commands/git:commit".to_owned(),
        format!("/v1/workspaces/{ws}/slash-commands/review"),
    ] {
        let (status, _, _) = api
            .raw(
                markdown(Method::PUT, &path, "---\ndescription: D\n---\nDo $1"),
                Method::PUT,
                &path,
            )
            .await;
        assert_eq!(status, 200, "{path}");
        let (status, _, body) = api
            .raw(a.http.get(format!("{}{path}", a.base)), Method::GET, &path)
            .await;
        assert_eq!(
            (status.as_u16(), &body[..]),
            (200, &b"---\ndescription: D\n---\nDo $1"[..])
        );
        let (status, _, _) = api
            .raw(
                markdown(Method::PUT, &path, "---\naction: nope\n---\n"),
                Method::PUT,
                &path,
            )
            .await;
        assert_eq!(status, 400, "{path}");
    }
    api.ok(Method::GET, "/v1/slash-commands", None).await;
    let listed = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/slash-commands"), None)
        .await;
    assert!(
        listed["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "review"),
        "{listed}"
    );
    let input = json!({ "input": "/review src/lib.rs" });
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/slash-commands/resolve"),
        Some(input.clone()),
    )
    .await;
    api.refused(
        404,
        Method::POST,
        &format!("/v1/sessions/{chat}/slash-commands/resolve"),
        Some(json!({ "input": "/nope" })),
    )
    .await;
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/slash-commands/preview"),
        Some(input),
    )
    .await;
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/slash-commands/invoke"),
        Some(json!({ "input": "/rename Commands" })),
    )
    .await;
    api.refused(
        400,
        Method::POST,
        &format!("/v1/sessions/{chat}/slash-commands/invoke"),
        Some(json!({ "input": "/mode" })),
    )
    .await;
    for path in [
        "/v1/slash-commands/git:commit".to_owned(),
        format!("/v1/workspaces/{ws}/slash-commands/review"),
    ] {
        api.ok(Method::DELETE, &path, None).await;
        api.refused(404, Method::DELETE, &path, None).await;
    }
    api.refused(409, Method::DELETE, "/v1/sessions/global", None).await;
    api.ok(Method::DELETE, &format!("/v1/sessions/{chat}"), None).await;
    api.refused(404, Method::GET, &format!("/v1/sessions/{chat}"), None)
        .await;
    api.ok(Method::DELETE, &format!("/v1/workspaces/{ws}"), None).await;
    api.refused(404, Method::DELETE, &format!("/v1/workspaces/{ws}"), None)
        .await;

    // THEN every operation of the document answered with success (or its redirect) at least
    // once; on AWS, uploads go to S3, never to `spool serve`'s upload route.
    let seen = spec.seen();
    let never: Vec<String> = spec
        .operations()
        .into_iter()
        .filter(|op| through_spool || op.template != "/v1/uploads/{grant}")
        .filter(|op| {
            !seen
                .get(op)
                .is_some_and(|statuses| statuses.iter().any(|s| (200..400).contains(s)))
        })
        .map(|op| op.to_string())
        .collect();
    assert!(never.is_empty(), "operations never exercised with success: {never:?}");
    let answers: usize = seen.values().map(|s| s.len()).sum();
    assert!(answers >= 60, "{answers} distinct (operation, status) answers checked");
}

/// The runner routes' answers, with a runner's token, and the list of runners.
async fn runners<H: Harness>(harness: &H, a: &Api, spec: &Spec, chat: &str, file: &str) {
    use crate::runners_http::{claim, offer, runner_client};
    let runner = runner_client(harness, a).await;
    let bot = Checked { api: &runner, spec };
    let person = Checked { api: a, spec };
    person
        .refused(403, Method::POST, "/v1/runner/claim", Some(claim("box-1", 0)))
        .await;
    let (status, _) = bot
        .call(Method::POST, "/v1/runner/claim", Some(claim("box-1", 0)))
        .await;
    assert_eq!(status, 204);
    bot.refused(400, Method::POST, "/v1/runner/claim", Some(claim("a b", 0)))
        .await;
    offer(harness, a, chat, "turn_doc").await;
    let got = bot.ok(Method::POST, "/v1/runner/claim", Some(claim("box-1", 0))).await;
    assert_eq!(got["turn_id"], "turn_doc", "{got}");
    let beat = bot
        .ok(
            Method::POST,
            "/v1/runner/turns/turn_doc/heartbeat",
            Some(json!({ "epoch": 1, "wait_ms": 0 })),
        )
        .await;
    assert_eq!(beat["cancel"], false);
    let path = format!("/v1/runner/turns/turn_doc/files/{file}?epoch=1");
    let (status, headers, bytes) = bot
        .raw(runner.http.get(format!("{}{path}", runner.base)), Method::GET, &path)
        .await;
    assert_eq!((status.as_u16(), bytes.as_ref()), (200, b"hello".as_ref()));
    assert_eq!(headers["content-type"], "text/plain");
    bot.refused(
        409,
        Method::GET,
        &format!("/v1/runner/turns/turn_doc/files/{file}?epoch=2"),
        None,
    )
    .await;
    bot.refused(
        404,
        Method::GET,
        "/v1/runner/turns/turn_doc/files/att_missing?epoch=1",
        None,
    )
    .await;
    let reply = json!({ "epoch": 1, "outcome": { "status": "reply", "message": "Done.", "actions": [] } });
    bot.ok(Method::POST, "/v1/runner/turns/turn_doc/result", Some(reply))
        .await;
    let late = json!({ "epoch": 1, "outcome": { "status": "failed", "reason": "late" } });
    bot.refused(409, Method::POST, "/v1/runner/turns/turn_doc/result", Some(late))
        .await;
    let listed = person.ok(Method::GET, "/v1/runners", None).await;
    assert_eq!(listed["runners"][0]["name"], "box-1", "{listed}");
    person
        .refused(404, Method::GET, "/v1/runners?workspace_id=ws_missing", None)
        .await;
}

on_both_backends!(openapi_http: every_answer_is_one_the_document_promises);

/// Every route's document: the chat API's merged with the stream function's.
fn document() -> utoipa::openapi::OpenApi {
    let mut doc = spool_api::openapi();
    doc.merge(spool_stream::openapi());
    doc
}

/// `docs/openapi.json`, which `GET /v1/openapi.json` serves, is the document the two functions'
/// handlers describe; `SPOOL_BLESS=1` rewrites it after a change to a route.
#[test]
fn the_checked_in_document_is_the_routes() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
    let made = format!("{}\n", document().to_pretty_json().unwrap());
    if std::env::var_os("SPOOL_BLESS").is_some() {
        std::fs::write(path, &made).unwrap();
    }
    let served = spool_api::OPENAPI_JSON;
    assert!(
        served == made,
        "docs/openapi.json is not the routes' document: run `SPOOL_BLESS=1 cargo nextest run -p spool-tests the_checked_in_document` and commit it"
    );
}

/// Every operation has an `operationId` of its own, as OpenAPI requires: generators (the
/// TypeScript client's openapi-typescript among them) name operations by it.
#[test]
fn operation_ids_are_unique() {
    let doc = serde_json::to_value(document()).unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if let Some(id) = op.get("operationId").and_then(serde_json::Value::as_str) {
                let here = format!("{} {path}", method.to_uppercase());
                if let Some(first) = seen.insert(id.to_owned(), here.clone()) {
                    panic!("operationId `{id}` names both {first} and {here}");
                }
            }
        }
    }
    assert!(seen.len() > 30, "{} operations", seen.len());
}

/// The web UI's types are the document's: `web/src/api.ts` takes them from `@spool/client`,
/// which generates them from this document at every build (so `npm run check` type-checks the
/// UI against the routes), and keeps none of the API's types by hand.
#[test]
fn the_web_uis_types_are_the_documents() {
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../web/src/api.ts")).unwrap();
    assert!(
        source.contains(r#"from "@spool/client""#),
        "web/src/api.ts does not use @spool/client"
    );
    for (name, schema) in [
        ("ChatEvent", "Event"),
        ("Workspace", "WorkspaceView"),
        ("Session", "SessionView"),
        ("Agent", "AgentView"),
        ("Task", "TaskView"),
    ] {
        let generated = format!(r#"export type {name} = Schemas["{schema}"];"#);
        assert!(source.contains(&generated), "web/src/api.ts should say `{generated}`");
        assert!(
            !source.contains(&format!("export interface {name} ")),
            "{name} is kept by hand in web/src/api.ts"
        );
    }
    let doc = serde_json::to_value(document()).unwrap();
    for schema in ["Event", "WorkspaceView", "SessionView", "AgentView", "TaskView"] {
        assert!(
            doc["components"]["schemas"].get(schema).is_some(),
            "the document has no `{schema}`"
        );
    }
}

/// The chat API and the stream function answer a domain error with the same status and code,
/// and never with a 5xx for an error the caller caused (a walk through every variant).
#[test]
fn both_functions_answer_a_domain_error_the_same_way() {
    use axum::response::IntoResponse;
    use spool_log::error::Error;
    let errors = Error::one_of_each;
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let answer = |response: axum::response::Response| {
        let status = response.status();
        let body = runtime
            .block_on(axum::body::to_bytes(response.into_body(), 1 << 16))
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        (status, body["error"]["code"].as_str().unwrap().to_owned())
    };
    for (api, stream) in errors().into_iter().zip(errors()) {
        let caller_error = api.is_client_error();
        let label = api.to_string();
        let from_api = answer(spool_edge::ApiError::Domain(api).into_response());
        let from_stream = answer(spool_edge::ApiError::Domain(stream).into_response());
        assert_eq!(from_api, from_stream, "{label}");
        assert_eq!(from_api.0.is_client_error(), caller_error, "{label}: {from_api:?}");
    }
}

/// Every subscription route, through the checked client (the wake's own token for the routes
/// that take it).
async fn subscriptions(api: &Checked<'_>, spec: &Spec) {
    let a = api.api;
    let json_type = |r: reqwest::RequestBuilder| r.header("content-type", "application/json");
    for (path, method) in [
        ("/v1/stream/jobs/pool", Method::PUT),
        ("/v1/stream/jobs/1", Method::PUT),
    ] {
        let (status, _, _) = api
            .raw(
                json_type(a.http.request(method.clone(), format!("{}{path}", a.base))),
                method,
                path,
            )
            .await;
        assert_eq!(status, 201, "{path}");
    }
    let sub = "/v1/stream/__ds/subscriptions/pull-1";
    let config = json!({"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "jobs/pool", "lease_ttl_ms": 60000});
    api.ok(Method::PUT, sub, Some(config.clone())).await;
    api.ok(Method::PUT, sub, Some(config)).await;
    api.refused(
        409,
        Method::PUT,
        sub,
        Some(json!({"type": "pull-wake", "pattern": "x/*", "wake_stream": "jobs/pool"})),
    )
    .await;
    api.refused(
        400,
        Method::PUT,
        "/v1/stream/__ds/subscriptions/bad",
        Some(json!({"type": "webhook", "pattern": "x/*", "webhook": {"url": "http://10.0.0.1/h"}})),
    )
    .await;
    api.ok(Method::GET, sub, None).await;
    api.ok(
        Method::POST,
        &format!("{sub}/streams"),
        Some(json!({"streams": ["jobs/extra"]})),
    )
    .await;
    api.ok(Method::DELETE, &format!("{sub}/streams/jobs%2Fextra"), None)
        .await;
    api.refused(
        409,
        Method::POST,
        &format!("{sub}/claim"),
        Some(json!({"worker": "w1"})),
    )
    .await;
    let (status, _, _) = api
        .raw(
            json_type(a.http.post(format!("{}/v1/stream/jobs/1", a.base))).body(r#"{"n":1}"#),
            Method::POST,
            "/v1/stream/jobs/1",
        )
        .await;
    assert_eq!(status, 204);
    let claimed = api
        .ok(Method::POST, &format!("{sub}/claim"), Some(json!({"worker": "w1"})))
        .await;
    let worker = Api {
        http: a.http.clone(),
        base: a.base.clone(),
        token: claimed["token"].as_str().map(str::to_owned),
    };
    let as_worker = Checked { api: &worker, spec };
    let wake = json!({"wake_id": claimed["wake_id"], "generation": claimed["generation"]});
    let mut heartbeat = wake.clone();
    heartbeat["acks"] = json!([{"stream": "jobs/1", "offset": claimed["streams"][0]["tail_offset"]}]);
    let ack = as_worker.ok(Method::POST, &format!("{sub}/ack"), Some(heartbeat)).await;
    assert_eq!(ack, json!({"ok": true, "next_wake": false}));
    as_worker
        .ok(Method::POST, &format!("{sub}/release"), Some(wake.clone()))
        .await;
    as_worker
        .refused(409, Method::POST, &format!("{sub}/release"), Some(wake.clone()))
        .await;
    as_worker
        .refused(409, Method::POST, &format!("{sub}/ack"), Some(wake.clone()))
        .await;
    // A webhook subscription: its wake (to a receiver on loopback) finished by its callback;
    // a token for no wake of it refused.
    let (receiver, url) = crate::subscriptions_http::Receiver::start(&[]).await;
    let hook = "/v1/stream/__ds/subscriptions/hook-1";
    let config = json!({"type": "webhook", "streams": ["jobs/2"], "webhook": {"url": url}});
    api.ok(Method::PUT, hook, Some(config)).await;
    let callback = format!("{hook}/callback");
    as_worker
        .refused(401, Method::POST, &callback, Some(wake.clone()))
        .await;
    let path = "/v1/stream/jobs/2";
    let (status, _, _) = api
        .raw(
            json_type(a.http.put(format!("{}{path}", a.base))).body(r#"{"n":1}"#),
            Method::PUT,
            path,
        )
        .await;
    assert_eq!(status, 201);
    let (woken, _, _) = receiver.nth(1).await;
    let receiver_api = Api {
        http: a.http.clone(),
        base: a.base.clone(),
        token: woken["callback_token"].as_str().map(str::to_owned),
    };
    let done = json!({"wake_id": woken["wake_id"], "generation": woken["generation"], "done": true});
    let finished = Checked {
        api: &receiver_api,
        spec,
    }
    .ok(Method::POST, &callback, Some(done))
    .await;
    assert_eq!(finished["ok"], true);
    let stranger = Api {
        http: a.http.clone(),
        base: a.base.clone(),
        token: None,
    };
    let keys = Checked { api: &stranger, spec }
        .ok(Method::GET, "/v1/stream/__ds/jwks.json", None)
        .await;
    assert_eq!(keys["keys"][0]["kty"], "OKP");
    api.ok(Method::DELETE, hook, None).await;
    api.ok(Method::DELETE, sub, None).await;
    api.refused(404, Method::GET, sub, None).await;
}

/// The chat webhook routes, through the checked client.
async fn chat_webhooks(api: &Checked<'_>, ws: &str) {
    let hooks = format!("/v1/workspaces/{ws}/webhooks");
    let made = api
        .ok(
            Method::POST,
            &hooks,
            Some(json!({"url": "https://hooks.example/spool", "events": ["task.created"]})),
        )
        .await;
    assert!(made["secret"].as_str().unwrap().starts_with("whsec_"));
    api.refused(
        400,
        Method::POST,
        &hooks,
        Some(json!({"url": "http://169.254.169.254/"})),
    )
    .await;
    api.refused(
        400,
        Method::POST,
        &hooks,
        Some(json!({"url": "https://hooks.example/x", "events": []})),
    )
    .await;
    api.refused(
        400,
        Method::POST,
        &hooks,
        Some(json!({"url": "https://hooks.example/x", "events": ["nope"]})),
    )
    .await;
    api.ok(Method::GET, &hooks, None).await;
    let hook = format!("/v1/webhooks/{}", id(&made));
    api.ok(Method::GET, &hook, None).await;
    let changed = api.ok(Method::PATCH, &hook, Some(json!({"enabled": false}))).await;
    assert_eq!(changed["enabled"], false);
    api.ok(Method::GET, &format!("{hook}/deliveries"), None).await;
    api.ok(Method::DELETE, &hook, None).await;
    api.refused(404, Method::GET, &hook, None).await;
    api.refused(404, Method::GET, "/v1/workspaces/ws_missing/webhooks", None)
        .await;
}

/// A workspace's MCP servers: made, refused, listed, read, changed, tested and deleted.
async fn mcp_servers(api: &Checked<'_>, ws: &str) {
    let servers = format!("/v1/workspaces/{ws}/mcp-servers");
    let made = api
        .ok(
            Method::POST,
            &servers,
            Some(json!({
                "name": "docs",
                "transport": "http",
                "url": "https://mcp.example/mcp",
                "headers": {"Authorization": "Bearer documented"},
                "tools": {"echo": "allow"},
            })),
        )
        .await;
    assert_eq!(made["headers"]["Authorization"], "set");
    let local = api
        .ok(
            Method::POST,
            &servers,
            Some(json!({"name": "local", "transport": "stdio", "command": "node", "env": {"K": "v"}})),
        )
        .await;
    assert_eq!(local["runs_on"], "worker");
    api.refused(
        400,
        Method::POST,
        &servers,
        Some(json!({"name": "Bad", "transport": "http"})),
    )
    .await;
    api.refused(
        409,
        Method::POST,
        &servers,
        Some(json!({"name": "docs", "transport": "http", "url": "https://mcp.example/mcp"})),
    )
    .await;
    api.ok(Method::GET, &servers, None).await;
    let server = format!("/v1/mcp-servers/{}", id(&made));
    api.ok(Method::GET, &server, None).await;
    let changed = api
        .ok(
            Method::PATCH,
            &server,
            Some(json!({"headers": {"Authorization": null}, "tools": {"echo": "deny"}})),
        )
        .await;
    assert_eq!(changed["tools"]["echo"], "deny");
    let tested = api.ok(Method::POST, &format!("{server}/test"), None).await;
    assert_eq!(tested["ok"], false);
    api.ok(Method::DELETE, &server, None).await;
    api.refused(404, Method::GET, &server, None).await;
    api.refused(404, Method::GET, "/v1/workspaces/ws_missing/mcp-servers", None)
        .await;
}
