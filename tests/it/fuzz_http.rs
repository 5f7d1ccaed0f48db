//! Hostile input on every chat API route, over real HTTP on both backends: malformed and
//! truncated JSON, wrong types, unknown fields, deep nesting, huge bodies, invalid UTF-8, odd ids
//! and odd headers. Every answer is a 4xx (never a 5xx; a connection closes only on a body over
//! the limit, after its 413), and nothing changes. Cases come from a seeded generator, so a failure names a case that can be replayed.

use reqwest::Method;
use serde_json::{Value, json};
use spool_log::clock::{Clock, SystemClock};
use spool_tests::Harness;

use crate::support::{org_of, setup, snapshot};

/// A body that is not a valid request for any route.
fn hostile_body(rng: &mut fastrand::Rng, case: usize) -> (Vec<u8>, &'static str) {
    match case % 12 {
        0 => {
            // Random bytes behind a byte that is neither UTF-8 nor JSON.
            let mut bytes = vec![0xff];
            bytes.extend((0..rng.usize(0..2000)).map(|_| rng.u8(..)));
            (bytes, "random bytes")
        }
        1 => (
            b"{\"name\": \"\xff\xfe\", \"content\": \"\xc3\x28\"}".to_vec(),
            "invalid UTF-8 in strings",
        ),
        2 => {
            let depth = 50_000;
            (
                format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes(),
                "deep nesting",
            )
        }
        3 => {
            let depth = 20_000;
            (
                format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)).into_bytes(),
                "deep objects",
            )
        }
        4 => (vec![b' '; 2 * 1024 * 1024], "a 2 MiB body"),
        5 => {
            let values = [
                json!(1),
                json!("text"),
                json!([1, 2]),
                // a struct's fields in order, which serde would read as the struct
                json!(["hello", [], null, "c-1"]),
                json!(["Docs"]),
                json!(null),
                json!(true),
                json!(1.5e300),
            ];
            (
                values[rng.usize(..values.len())].to_string().into_bytes(),
                "a JSON scalar or array",
            )
        }
        6 => {
            // Every field any route takes, each with a value of the wrong type.
            let wrong = [json!(5), json!([]), json!({}), json!(true)];
            let mut object = serde_json::Map::new();
            for field in [
                "name",
                "content",
                "text",
                "title",
                "api_key",
                "agent_ids",
                "decision",
                "tool_call_id",
                "question_id",
                "answer",
                "plan_id",
                "action",
                "library_id",
                "jwt",
                "capabilities",
                "author",
                "workspace_id",
                "agent_id",
                "instruction",
                "runtime",
                "cli_type",
                "transport",
                "url",
                "headers",
                "command",
                "args",
                "env",
                "tools",
                "enabled",
            ] {
                object.insert(field.to_owned(), wrong[rng.usize(..wrong.len())].clone());
            }
            (Value::Object(object).to_string().into_bytes(), "wrong types")
        }
        7 => (br#"{"name": "x", "content": "y""#.to_vec(), "truncated JSON"),
        8 => (
            br#"{"text": "\ud800", "content": "\udfff", "name": "\ud800"}"#.to_vec(),
            "lone surrogates",
        ),
        9 => {
            let key: String = (0..rng.usize(1..40)).map(|_| rng.alphabetic()).collect();
            (format!(r#"{{"zz_{key}": 1}}"#).into_bytes(), "an unknown field alone")
        }
        10 => (Vec::new(), "an empty body"),
        _ => (
            format!(
                r#"{{"name": "{}", "content": "{}"}}"#,
                "\u{0}".repeat(3),
                "x".repeat(300_000)
            )
            .into_bytes(),
            "control characters and a long string",
        ),
    }
}

/// Every route, every kind of hostile input: 4xx only, nothing changed.
pub(crate) async fn hostile_input_gets_4xx_and_changes_nothing<H: Harness>(harness: &H) {
    let (api, _, anonymous) = setup(harness).await;
    let org = org_of(&api);
    // An agent's token for Spool's MCP server (its handshake is audited before the snapshot).
    let mcp_agent = crate::support::agent_client(harness, &api).await;
    // GIVEN a workspace with an agent, a chat with a message and an open question
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Fuzz" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let agent = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(json!({ "name": "A" })),
        )
        .await;
    let agent = agent["id"].as_str().unwrap().to_owned();
    let mcp_server = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/mcp-servers"),
            Some(json!({ "name": "tools", "transport": "http", "url": "https://mcp.example/x" })),
        )
        .await;
    let mcp_server = mcp_server["id"].as_str().unwrap().to_owned();
    let session = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await;
    let session = session["id"].as_str().unwrap().to_owned();
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{session}/messages"),
        Some(json!({ "content": "hi" })),
    )
    .await;
    let question = spool_chat::session::OpenRequest {
        id: "q-1".to_owned(),
        kind: spool_chat::session::RequestKind::Question,
        turn_id: Some("turn_x".to_owned()),
        opened_seq: 1,
    };
    use spool_chat::metadata::Sessions;
    harness
        .metadata()
        .await
        .open_request(&org, &session, &question)
        .await
        .unwrap();
    api.ok(Method::GET, "/chat/history", None).await;
    let before = snapshot(&api, &ws, &session).await;
    let _ = SystemClock.now_ms();

    // Every operation of the document that takes a JSON body, on A's own ids.
    let spec = crate::support::spec::Spec::fetch(&api).await;
    let operations = spec.operations();
    let id_for = |template: &str| -> String {
        if template.starts_with("/v1/workspaces/") {
            ws.clone()
        } else if template.starts_with("/v1/agents/") {
            agent.clone()
        } else if template.starts_with("/v1/mcp-servers/") {
            mcp_server.clone()
        } else {
            session.clone()
        }
    };
    let writes: Vec<(Method, String)> = operations
        .iter()
        .filter(|op| {
            !spec.doc["paths"][&op.template][&op.method]["requestBody"]["content"]["application/json"].is_null()
        })
        // A message's seq is the chat's first event's (the route reads the body before the seq's event).
        .map(|op| {
            (
                op.method(),
                op.path(|param| {
                    if param == "seq" {
                        "1".to_owned()
                    } else {
                        id_for(&op.template)
                    }
                }),
            )
        })
        .collect();
    assert!(writes.len() >= 17, "{writes:?}");
    let content_types = [
        "application/json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin1",
        ";;=garbage/",
    ];
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    // A fresh connection per request: a server that refuses a body early (413) closes the
    // connection without reading it, which a pooled client would otherwise trip over.
    let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let mut cases = 0;
    for (method, path) in &writes {
        for case in 0..12 {
            let (body, what) = hostile_body(&mut rng, case);
            let content_type = content_types[rng.usize(..content_types.len())];
            let response = http
                .request(method.clone(), format!("{}{path}", api.base))
                .bearer_auth(api.token.as_deref().unwrap())
                .header("content-type", content_type)
                .body(body)
                .send()
                .await;
            let response = match response {
                Ok(response) => response,
                // A body over the limit is answered 413 at once and not read: a client still
                // writing it may see the connection close before it reads the answer.
                Err(_) if case % 12 == 4 => continue,
                Err(e) => panic!("{method} {path} with {what}: the connection failed: {e}"),
            };
            let status = response.status();
            assert!(
                status.is_client_error(),
                "{method} {path} with {what} ({content_type}): {status}"
            );
            cases += 1;
        }
    }

    // Spool's MCP server with an agent's token (the person's is refused above with 403):
    // hostile bodies, and tool calls with hostile arguments, are never a 5xx.
    for case in 0..24 {
        let (body, what) = hostile_body(&mut rng, case);
        let response = http
            .post(format!("{}/v1/mcp", api.base))
            .bearer_auth(mcp_agent.token.as_deref().unwrap())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
            .await;
        let Ok(response) = response else { continue };
        let status = response.status();
        assert!(status.as_u16() < 500, "POST /v1/mcp with {what}: {status}");
        cases += 1;
    }
    for case in 0..12 {
        let (body, what) = hostile_body(&mut rng, 5 + case % 5);
        let arguments: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        for tool in [
            "list_chats",
            "read_chat",
            "post_message",
            "ask_user",
            "wait_user",
            "post_agent",
            "create_task",
        ] {
            let call = json!({"jsonrpc": "2.0", "id": case, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
            let (status, answer) = crate::mcp_http::rpc(&mcp_agent, &call).await;
            assert!(status.as_u16() < 500, "{tool} with {what}: {status} {answer}");
            cases += 1;
        }
    }

    // Odd ids in paths: too long, encoded NULs, dots, unicode, spaces.
    let long = "x".repeat(3000);
    let odd_ids = [
        long.as_str(),
        "%00",
        "..",
        "%2e%2e",
        "\u{1F600}",
        "a%20b",
        "%FF",
        "ses_%0A",
    ];
    for id in odd_ids {
        for op in operations.iter().filter(|op| op.template.contains("{id}")) {
            let path = op.path(|_| id.to_owned());
            let body = crate::support::spec::valid_body(op, &|name| match name {
                "jwt" => api.token.clone().unwrap(),
                _ => ws.clone(),
            });
            // A client resolves `..` before sending (as a browser does): a path that becomes
            // another route of the document is that route's request, not an odd id.
            let sent = reqwest::Url::parse(&format!("{}{path}", api.base)).unwrap();
            if spec
                .operation_of(&op.method(), sent.path())
                .is_some_and(|other| other != *op)
            {
                continue;
            }
            let (status, body) = api.call(op.method(), &path, body).await;
            assert!(status.is_client_error(), "{op} at {path}: {status} {body}");
            cases += 1;
        }
        let (status, body) = api
            .call(Method::GET, &format!("/v1/sessions?workspace_id={id}"), None)
            .await;
        assert!(status.is_success() || status.is_client_error(), "{status} {body}");
        cases += 1;
    }

    // Bad query strings.
    for path in [
        format!("/v1/sessions?limit=x&workspace_id={ws}"),
        "/v1/sessions?limit=-1".to_owned(),
        format!("/v1/sessions/{session}/events?after=-1"),
        format!("/v1/sessions/{session}/events?limit=1e9"),
        "/chat/history?after=abc".to_owned(),
        format!("/v1/sessions/{session}/stream?after=zz"),
    ] {
        let (status, _) = api.call(Method::GET, &path, None).await;
        assert_eq!(status, 400, "{path}");
        cases += 1;
    }

    // Odd credentials: every route answers 401.
    let long_token = format!("Bearer {}", "a".repeat(6000));
    for authorization in [
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "bearer a.b.c",
        long_token.as_str(),
        "Bearer \u{7f}",
    ] {
        for (method, path) in writes.iter().filter(|(_, path)| path != "/v1/handshake") {
            let mut request = anonymous
                .http
                .request(method.clone(), format!("{}{path}", anonymous.base))
                .header("content-type", "application/json")
                .body("{}");
            if let Ok(value) = reqwest::header::HeaderValue::from_str(authorization) {
                request = request.header("authorization", value);
            }
            let status = request.send().await.unwrap().status();
            assert_eq!(
                status,
                401,
                "{method} {path} with `{}`",
                authorization.chars().take(20).collect::<String>()
            );
            cases += 1;
        }
    }
    // Odd headers with good credentials: never a 5xx.
    for (name, value) in [
        ("last-event-id", "not-a-number"),
        ("last-event-id", "99999999999999999999999"),
        ("content-length", "0"),
        ("x-huge", &"v".repeat(16 * 1024)[..]),
    ] {
        let response = api
            .http
            .get(format!("{}/v1/sessions/{session}/stream", api.base))
            .bearer_auth(api.token.as_deref().unwrap())
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_client_error() || response.status() == 200,
            "{name}: {}",
            response.status()
        );
        cases += 1;
    }

    // A struct's fields as an array (what serde would read as the struct): refused everywhere.
    for (path, body) in [
        (format!("/v1/sessions/{session}/messages"), json!(["hello"])),
        (
            format!("/v1/sessions/{session}/messages"),
            json!(["hello", [], null, "c-9"]),
        ),
        ("/v1/workspaces".to_owned(), json!(["Arrays"])),
        ("/v1/sessions".to_owned(), json!([null, null, "Array chat"])),
    ] {
        let (status, error) = api.call(Method::POST, &path, Some(body)).await;
        assert_eq!(status, 400, "{path}: {error}");
        assert!(
            error["error"]["message"].as_str().unwrap().contains("JSON object"),
            "{error}"
        );
        cases += 1;
    }

    // THEN nothing changed
    let after = snapshot(&api, &ws, &session).await;
    assert_eq!(after, before, "state changed after {cases} hostile requests");
    assert!(cases > 400, "{cases} cases");
}

on_both_backends!(fuzz_http: hostile_input_gets_4xx_and_changes_nothing);
