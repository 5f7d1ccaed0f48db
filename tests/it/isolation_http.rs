//! Tenant isolation as one matrix over every operation of the OpenAPI document, over real HTTP on
//! both backends: a token of organization B, naming organization A's workspace, agent, task,
//! chat or stream (in the path or in a valid body), gets `404`, the answer a missing id gets;
//! operations that name nothing of A's answer only B's own data; and A's state, as A's own
//! token sees it, is the same afterwards. The operations come from the document, so a new route
//! is in the matrix the day it is added (and `spec::valid_body` must know its body).

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::metadata::Workspaces;
use spool_tests::Harness;

use crate::support::{
    Api, agent_client, org_of, setup, snapshot,
    spec::{Spec, valid_body},
};

/// What A has, made through A's own token.
struct Fixture {
    ws: String,
    agent: String,
    task: String,
    chat: String,
    turn: String,
    companion: String,
    attachment: String,
    webhook: String,
    mcp_server: String,
}

async fn fixture<H: Harness>(harness: &H, a: &Api) -> Fixture {
    let ws = a
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "A's" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let agent = a
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(json!({ "name": "A's agent" })),
        )
        .await;
    let agent = agent["id"].as_str().unwrap().to_owned();
    let chat = a
        .ok(Method::POST, "/v1/sessions", Some(json!({ "agent_id": agent })))
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    let sent = a
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": "A's secret plan" })),
        )
        .await;
    let turn = sent["turn_id"].as_str().unwrap().to_owned();
    let file = crate::attachments_http::upload(a, &chat, "a.txt", "text/plain", b"A's file").await;
    let attachment = file["attachment"]["id"].as_str().unwrap().to_owned();
    a.ok(
        Method::POST,
        "/chat/user_message",
        Some(json!({ "text": "A's global note" })),
    )
    .await;
    let org = org_of(a);
    let task = spool_chat::workspace::Task {
        id: "task_a".to_owned(),
        workspace_id: ws.clone(),
        session_id: Some(chat.clone()),
        title: "A's task".to_owned(),
        description: String::new(),
        created_ms: 1,
    };
    harness.metadata().await.create_task(&org, &task).await.unwrap();
    let stream = format!("{}/v1/stream/notes/a", a.base);
    let token = a.token.as_deref().unwrap();
    let webhook = a
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/webhooks"),
            Some(json!({ "url": "https://hooks.example/a", "description": "A's webhook" })),
        )
        .await;
    let webhook = webhook["id"].as_str().unwrap().to_owned();
    let mcp_server = a
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/mcp-servers"),
            Some(json!({
                "name": "a-tools",
                "transport": "http",
                "url": "https://mcp.example/a",
                "headers": { "Authorization": "Bearer A's mcp token" },
            })),
        )
        .await;
    let mcp_server = mcp_server["id"].as_str().unwrap().to_owned();
    a.ok(
        Method::PUT,
        "/v1/stream/__ds/subscriptions/sub-a",
        Some(json!({ "type": "pull-wake", "streams": ["notes/a"], "wake_stream": "notes/a", "description": "A's subscription" })),
    )
    .await;
    for request in [
        a.http.put(&stream),
        a.http.post(&stream).body(r#"{"note":"A's stream"}"#),
    ] {
        let response = request
            .bearer_auth(token)
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
    }
    // The append wakes A's subscription, whose wake event lands in the same stream a moment
    // later (where a worker delivers wakes): A's data is compared only once it has settled.
    for _ in 0..100 {
        let notes = a.get("/v1/stream/notes/a?offset=-1").await.text().await.unwrap();
        if notes.contains(r#""type":"wake""#) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for path in [
        "/v1/slash-commands/a-secret".to_owned(),
        format!("/v1/workspaces/{ws}/slash-commands/a-cmd"),
    ] {
        let response = a
            .http
            .put(format!("{}{path}", a.base))
            .bearer_auth(token)
            .header("content-type", "text/markdown")
            .body("A's command")
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{path}: {}", response.status());
    }
    Fixture {
        ws,
        agent,
        task: task.id,
        chat,
        turn,
        companion: token.to_owned(),
        attachment,
        webhook,
        mcp_server,
    }
}

/// Every operation, with organization B's token on A's ids: 404, and A's data unchanged.
pub(crate) async fn another_organization_gets_404_on_every_route_and_changes_nothing<H: Harness>(harness: &H) {
    let (a, b_person, _) = setup(harness).await;
    // B's token may post as an agent, so that agent-messages gets as far as the session lookup.
    let b = agent_client(harness, &b_person).await;
    let spec = Spec::fetch(&a).await;
    let mine = fixture(harness, &a).await;
    let before = snapshot(&a, &mine.ws, &mine.chat).await;
    let notes_before = a.get("/v1/stream/notes/a?offset=-1").await.text().await.unwrap();
    let subscription_before = a.ok(Method::GET, "/v1/stream/__ds/subscriptions/sub-a", None).await;
    let mcp_before = a
        .ok(Method::GET, &format!("/v1/mcp-servers/{}", mine.mcp_server), None)
        .await;
    // Strings that appear only in A's data: none may reach B.
    let secrets = [
        mine.ws.as_str(),
        mine.agent.as_str(),
        mine.chat.as_str(),
        "A's secret plan",
        "A's global note",
        "A's task",
        "A's stream",
        "A's command",
        "A's file",
        "A's subscription",
        "A's webhook",
        "A's mcp token",
        "mcp.example/a",
    ];

    let fill = |name: &str| -> String {
        match name {
            "workspace_id" => mine.ws.clone(),
            "agent_id" => mine.agent.clone(),
            "jwt" => mine.companion.clone(),
            "stream_path" => "notes/a".to_owned(),
            "session_id" => mine.chat.clone(),
            other => panic!("no value for `{other}`"),
        }
    };
    let mut checked = Vec::new();
    for op in spec.operations() {
        let template = op.template.as_str();
        // Routes that take no token act for no organization (an upload's grant is its own
        // credential: `attachments_http.rs` refuses forged and expired ones).
        if matches!(
            template,
            "/healthz"
                | "/v1/openapi.json"
                | "/v1/handshake"
                | "/v1/uploads/{grant}"
                | "/v1/docs"
                | "/v1/docs/{name}"
                | "/v1/stream/__ds/jwks.json"
        ) {
            continue;
        }
        // Spool's MCP server: B's agent calls every tool on A's ids.
        if template == "/v1/mcp" {
            for (name, arguments) in [
                ("read_chat", json!({ "chat_id": mine.chat, "after": 0 })),
                (
                    "post_message",
                    json!({ "chat_id": mine.chat, "author": "b", "text": "B's" }),
                ),
                (
                    "ask_user",
                    json!({ "chat_id": mine.chat, "author": "b", "question": "B's?" }),
                ),
                ("wait_user", json!({ "chat_id": mine.chat, "after": 0 })),
                (
                    "create_task",
                    json!({ "workspace_id": mine.ws, "title": "B's task", "chat_id": mine.chat }),
                ),
            ] {
                let answer = crate::mcp_http::call_tool(&b, name, arguments).await;
                assert_eq!(answer["result"]["isError"], true, "{op} {name} as B on A's: {answer}");
                let text = answer.to_string();
                for secret in secrets.iter().filter(|s| *s != &mine.chat && *s != &mine.ws) {
                    assert!(!text.contains(secret), "{op} {name} as B showed A's `{secret}`: {text}");
                }
            }
            let listed = crate::mcp_http::call_tool(&b, "list_chats", json!({ "workspace_id": mine.ws })).await;
            assert!(
                !listed.to_string().contains(&mine.chat),
                "{op} list_chats as B: {listed}"
            );
            checked.push(op.to_string());
            continue;
        }
        let path = op.path(|param| match (template, param) {
            (t, "id") if t.starts_with("/v1/workspaces/") => mine.ws.clone(),
            (t, "id") if t.starts_with("/v1/agents/") => mine.agent.clone(),
            (t, "id") if t.starts_with("/v1/tasks/") => mine.task.clone(),
            (t, "id") if t.starts_with("/v1/webhooks/") => mine.webhook.clone(),
            (t, "id") if t.starts_with("/v1/mcp-servers/") => mine.mcp_server.clone(),
            (t, "id") if t.starts_with("/v1/sessions/") => mine.chat.clone(),
            (t, "seq") if t.starts_with("/v1/sessions/") => "1".to_owned(),
            (t, "id") if t.starts_with("/v1/ai-sdk/chat/") => mine.chat.clone(),
            (t, "id") if t.starts_with("/v1/ag-ui/chat/") => mine.chat.clone(),
            ("/v1/stream/{path}", "path") => "notes/a".to_owned(),
            // B's PUT makes B's own subscription, of another name (so B's later reads of
            // `sub-a` still name A's).
            ("/v1/stream/__ds/subscriptions/{id}", "id") if op.method == "put" => "sub-b".to_owned(),
            (t, "id") if t.starts_with("/v1/stream/__ds/subscriptions/") => "sub-a".to_owned(),
            (t, "path") if t.starts_with("/v1/stream/__ds/subscriptions/") => "notes%2Fa".to_owned(),
            ("/v1/slash-commands/{name}", "name") => "a-secret".to_owned(),
            (_, "name") => "a-cmd".to_owned(),
            (_, "turn_id") => mine.turn.clone(),
            (_, "attachment_id" | "file_id") => mine.attachment.clone(),
            (t, p) => panic!("{t}: no value for `{{{p}}}`"),
        });
        let path = match template {
            "/v1/sessions" if op.method == "get" => format!("{path}?workspace_id={}", mine.ws),
            "/v1/stream/{path}" if op.method == "get" => format!("{path}?offset=-1"),
            "/v1/runner/turns/{turn_id}/files/{file_id}" => format!("{path}?epoch=1"),
            _ => path,
        };
        let body = valid_body(&op, &fill);
        let names_a = template.contains('{')
            || (template == "/v1/sessions" && op.method == "post")
            || template == "/v1/read-tokens"
            || template == "/v1/ai-sdk/chat"
            || template == "/v1/ag-ui/chat";
        let mut request = b
            .http
            .request(op.method(), format!("{}{path}", b.base))
            .bearer_auth(b.token.as_deref().unwrap());
        request = match &body {
            Some(body) => request.json(body),
            None if template == "/v1/stream/{path}" => request
                .header("content-type", "application/json")
                .body(r#"{"note":"B's"}"#),
            None if template.contains("/slash-commands/{name}") && op.method == "put" => {
                request.header("content-type", "text/markdown").body("B's command")
            }
            None => request,
        };
        let response = request.send().await.unwrap();
        let status = response.status();
        let live = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
        let text = if live {
            // A live stream of B's own (the global chat): its first events, then let go.
            crate::support::sse_events(response, 0).await;
            String::new()
        } else {
            response.text().await.unwrap()
        };
        // PUT on a stream path makes B's own stream of that name: B's namespace, not A's stream;
        // so does PUT of a global command of A's name.
        let own_stream = matches!(
            template,
            "/v1/stream/{path}" | "/v1/slash-commands/{name}" | "/v1/stream/__ds/subscriptions/{id}"
        ) && op.method == "put";
        // A wake's routes take the wake's own token, which B's is not.
        let wake_route =
            template.ends_with("/callback") || template.ends_with("/ack") || template.ends_with("/release");
        // The runner routes take only runners' tokens (B's runner: `another_organizations_runner_never_takes_a_turn`).
        let runner_route = template.starts_with("/v1/runner/");
        if wake_route {
            assert_eq!(status, 401, "{op} with B's token: {text}");
        } else if runner_route {
            assert_eq!(status, 403, "{op} with B's person's token: {text}");
        } else if names_a && !own_stream {
            assert_eq!(status, 404, "{op} as B on A's {path}: {text}");
        } else {
            assert!(
                status.is_success(),
                "{op} as B ({path}) on B's own data: {status} {text}"
            );
        }
        // (An error may repeat the id B sent; nothing else of A's may show.)
        let sent = format!("{path} {}", body.as_ref().map(Value::to_string).unwrap_or_default());
        for secret in secrets.iter().filter(|s| !sent.contains(*s)) {
            assert!(!text.contains(secret), "{op} as B showed A's `{secret}`: {text}");
        }
        checked.push(op.to_string());
    }

    // THEN A's data is as it was
    assert_eq!(snapshot(&a, &mine.ws, &mine.chat).await, before, "A's state changed");
    let notes_after = a.get("/v1/stream/notes/a?offset=-1").await.text().await.unwrap();
    assert_eq!(notes_after, notes_before);
    let subscription_after = a.ok(Method::GET, "/v1/stream/__ds/subscriptions/sub-a", None).await;
    assert_eq!(subscription_after, subscription_before, "A's subscription changed");
    let mcp_after = a
        .ok(Method::GET, &format!("/v1/mcp-servers/{}", mine.mcp_server), None)
        .await;
    assert_eq!(mcp_after, mcp_before, "A's MCP server changed");
    let listed: Value = a.ok(Method::GET, "/v1/tasks/task_a", None).await;
    assert_eq!(listed["title"], "A's task");
    assert!(checked.len() >= 30, "{} operations checked: {checked:?}", checked.len());
}

/// Working directories, two organizations and one set of roots: a folder belongs to one
/// organization. B can neither set A's folder (nor any other under the shared root A uses, nor
/// A's own root), nor reach it through a record that names it already: B's file search and
/// B's slash commands see nothing of A's folder. Every refusal reads the same.
pub(crate) async fn a_working_directory_belongs_to_one_organization<H: Harness>(harness: &H) {
    let (a, b, _) = setup(harness).await;
    let (org_a, org_b) = (org_of(&a), org_of(&b));
    // GIVEN A's project under the shared root, with a secret, and a command file that is a
    // link to it
    let shared = spool_tests::shared_root();
    let project = shared.join(format!("a-{org_a}"));
    std::fs::create_dir_all(project.join(".claude/commands")).unwrap();
    std::fs::write(project.join(".env"), "A_SECRET=hunter2").unwrap();
    std::fs::write(project.join("a-private.rs"), "x").unwrap();
    std::os::unix::fs::symlink(project.join(".env"), project.join(".claude/commands/leak.md")).unwrap();
    let own = spool_tests::workspace_dir(&org_a);
    let ws_a = a
        .ok(
            Method::POST,
            "/v1/workspaces",
            Some(json!({ "name": "A's", "working_directory_path": project })),
        )
        .await;
    assert!(ws_a["working_directory_path"].as_str().is_some(), "{ws_a}");
    // WHEN B names A's folder, another folder under the same shared root, A's own root, or
    // the shared root itself
    let ws_b = b
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "B's" })))
        .await;
    let ws_b = ws_b["id"].as_str().unwrap().to_owned();
    let elsewhere = shared.join(format!("b-{org_b}"));
    std::fs::create_dir_all(&elsewhere).unwrap();
    for dir in [&project, &elsewhere, &own.path().to_path_buf(), &shared] {
        let dir = dir.to_str().unwrap();
        let (status, error) = b
            .call(
                Method::PATCH,
                &format!("/v1/workspaces/{ws_b}"),
                Some(json!({ "working_directory_path": dir })),
            )
            .await;
        // THEN it is refused, with one answer that names only what B sent
        assert_eq!(status, 400, "{dir}: {error}");
        assert_eq!(
            error["error"]["message"],
            format!(
                "invalid working directory: `{dir}` is not a folder this organization may use; pick one under \
                 the workspace roots your operator set up for it"
            ),
        );
        let (status, error) = b
            .call(
                Method::POST,
                "/v1/workspaces",
                Some(json!({ "name": "B's too", "working_directory_path": dir })),
            )
            .await;
        assert_eq!(status, 400, "{dir}: {error}");
    }
    // WHEN B's workspace names A's folder already (stored before folders had owners)
    let metadata = harness.metadata().await;
    let mut record = metadata.workspace(&org_b, &ws_b).await.unwrap().unwrap();
    record.working_dir = Some(project.canonicalize().unwrap().to_str().unwrap().to_owned());
    metadata.update_workspace(&org_b, &record).await.unwrap();
    // THEN B's file search finds nothing of it
    let (status, body) = b
        .call(Method::GET, &format!("/v1/workspaces/{ws_b}/files?q=private"), None)
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(!body.to_string().contains("a-private.rs"), "{body}");
    // AND B's slash commands read none of its files
    let listed = b
        .ok(Method::GET, &format!("/v1/workspaces/{ws_b}/slash-commands"), None)
        .await;
    assert!(!listed.to_string().contains("leak"), "{listed}");
    let chat = b
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws_b })))
        .await;
    let chat = chat["id"].as_str().unwrap();
    let (status, preview) = b
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/slash-commands/preview"),
            Some(json!({ "input": "/leak" })),
        )
        .await;
    assert_eq!(status, 404, "{preview}");
    assert!(!preview.to_string().contains("hunter2"), "{preview}");
    // AND A still uses its folder, and its own root
    let found = a
        .ok(
            Method::GET,
            &format!("/v1/workspaces/{}/files?q=private", ws_a["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(found["files"][0]["path"], "a-private.rs", "{found}");
    a.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{}", ws_a["id"].as_str().unwrap()),
        Some(json!({ "working_directory_path": own.path() })),
    )
    .await;
    std::fs::remove_dir_all(&project).unwrap();
    std::fs::remove_dir_all(&elsewhere).unwrap();
}

/// Runners, two organizations: B's runner never claims A's job, and its heartbeats, file
/// fetches and settles of A's turn are refused as if the turn were not there; A's runner takes
/// it, and B's list of runners does not show A's.
pub(crate) async fn another_organizations_runner_never_takes_a_turn<H: Harness>(harness: &H) {
    use crate::runners_http::{claim, offer, runner_client};
    let (a, b, _) = setup(harness).await;
    let (runner_a, runner_b) = (runner_client(harness, &a).await, runner_client(harness, &b).await);
    let chat = a.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    let file = crate::attachments_http::upload(&a, &chat, "a.txt", "text/plain", b"A's file").await;
    let file = file["attachment"]["id"].as_str().unwrap().to_owned();
    offer(harness, &a, &chat, "turn_a").await;
    // WHEN B's runner claims, waiting a moment
    let (status, body) = runner_b
        .call(Method::POST, "/v1/runner/claim", Some(claim("box-b", 300)))
        .await;
    // THEN it gets nothing
    assert_eq!(status, 204, "{body}");
    // AND for A's turn, whatever epoch it names, it is told to stop, and refused
    for epoch in [0, 1] {
        let beat = runner_b
            .ok(
                Method::POST,
                "/v1/runner/turns/turn_a/heartbeat",
                Some(json!({ "epoch": epoch, "wait_ms": 0 })),
            )
            .await;
        assert_eq!(beat["cancel"], true, "{beat}");
        let (status, body) = runner_b
            .call(
                Method::GET,
                &format!("/v1/runner/turns/turn_a/files/{file}?epoch={epoch}"),
                None,
            )
            .await;
        assert_eq!(status, 409, "{body}");
        let settle = json!({ "epoch": epoch, "outcome": { "status": "reply", "message": "B's answer" } });
        let (status, body) = runner_b
            .call(Method::POST, "/v1/runner/turns/turn_a/result", Some(settle))
            .await;
        assert_eq!(status, 409, "{body}");
    }
    // AND A's runner takes it, untouched
    let got = runner_a
        .ok(Method::POST, "/v1/runner/claim", Some(claim("box-a", 0)))
        .await;
    assert_eq!(
        (got["turn_id"].as_str(), got["epoch"].as_u64()),
        (Some("turn_a"), Some(1))
    );
    let job = harness.metadata().await;
    let job = spool_chat::runner::RunnerStore::runner_job(&job, &org_of(&a), "turn_a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((job.outcome, job.runner.as_deref()), (None, Some("box-a")));
    // AND each organization's people see only their own runners
    let listed_b = b.ok(Method::GET, "/v1/runners", None).await;
    let names: Vec<&str> = listed_b["runners"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["box-b"], "{listed_b}");
}

on_both_backends!(isolation_http:
    another_organization_gets_404_on_every_route_and_changes_nothing,
    a_working_directory_belongs_to_one_organization,
    another_organizations_runner_never_takes_a_turn,
);
