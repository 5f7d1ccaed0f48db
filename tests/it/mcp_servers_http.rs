//! A workspace's MCP servers over HTTP on both backends: made, listed, changed and deleted by
//! the registry's rules; their header and env values sealed in the store, opened only for the
//! catalog, and never in an answer or a log line; deleted with their workspace; and, in a
//! deployment like Lambda's (no data key, no programs), refused where they could not work.

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::{
    mcp::{McpCatalog, McpLaunch, McpServerStore, SecretBox},
    metadata::Metadata,
    service::McpServerService,
};
use spool_log::{clock::SystemClock, port::StreamLog};
use spool_tests::Harness;

use crate::support::{Api, DATA_KEY, SECRET, org_of, setup, setup_on};

const HEADER_SECRET: &str = "Bearer hdr-s3cr3t-7f1c";
const NEW_HEADER_SECRET: &str = "Bearer hdr-n3w-s3cr3t-90ab";
const ENV_SECRET: &str = "env-s3cr3t-41d2";

async fn workspace(api: &Api) -> String {
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Tools" })))
        .await;
    ws["id"].as_str().unwrap().to_owned()
}

fn http_server(name: &str) -> Value {
    json!({
        "name": name,
        "transport": "http",
        "url": "https://mcp.example/mcp",
        "headers": { "Authorization": HEADER_SECRET },
        "tools": { "echo": "allow" },
    })
}

fn stdio_server(name: &str) -> Value {
    json!({
        "name": name,
        "transport": "stdio",
        "command": "node",
        "args": ["server.js", "stdio"],
        "env": { "API_KEY": ENV_SECRET },
    })
}

/// The catalog and the store a test reads behind the API: the same store, the same key.
fn service<H: Harness>(metadata: H::Metadata) -> McpServerService
where
    H::Metadata: Metadata + 'static,
{
    McpServerService::new(
        Arc::new(metadata),
        Arc::new(SystemClock),
        Some(Arc::new(SecretBox::new(&DATA_KEY))),
        true,
    )
}

/// Made, listed, changed, tested and deleted, by the rules; secrets sealed at rest and opened
/// for the catalog only; a workspace's deletion takes its servers.
pub(crate) async fn servers_are_kept_by_the_rules_and_their_secrets_sealed<H: Harness>(harness: &H)
where
    H::Metadata: Metadata + 'static,
{
    let (api, _, _) = setup(harness).await;
    let org = org_of(&api);
    let ws = workspace(&api).await;
    let path = format!("/v1/workspaces/{ws}/mcp-servers");

    // WHEN an http server and a stdio server are made
    let (status, http) = api.call(Method::POST, &path, Some(http_server("docs"))).await;
    assert_eq!(status, 201, "{http}");
    let (status, stdio) = api.call(Method::POST, &path, Some(stdio_server("local"))).await;
    assert_eq!(status, 201, "{stdio}");

    // THEN their views name their secrets as set, and say where a program runs
    assert_eq!(http["headers"], json!({ "Authorization": "set" }));
    assert_eq!(http["tools"], json!({ "echo": "allow" }));
    assert_eq!(http["enabled"], true);
    assert!(http.get("runs_on").is_none(), "{http}");
    assert_eq!(stdio["env"], json!({ "API_KEY": "set" }));
    assert_eq!(stdio["runs_on"], "worker");
    let (http_id, stdio_id) = (http["id"].as_str().unwrap(), stdio["id"].as_str().unwrap());

    // AND the store holds them sealed
    let metadata = harness.metadata().await;
    let stored = metadata.mcp_server(&org, http_id).await.unwrap().unwrap();
    let sealed = &stored.headers["Authorization"].0;
    assert!(sealed.starts_with("v1.") && !sealed.contains("s3cr3t"), "{sealed}");

    // AND a second server of a name is refused, and so is each broken rule
    let (status, body) = api.call(Method::POST, &path, Some(http_server("docs"))).await;
    assert_eq!(
        (status.as_u16(), body["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );
    let refused = [
        json!({ "name": "Docs", "transport": "http", "url": "https://mcp.example/mcp" }),
        json!({ "name": "a__b", "transport": "http", "url": "https://mcp.example/mcp" }),
        json!({ "name": "x", "transport": "http" }),
        json!({ "name": "x", "transport": "http", "url": "https://mcp.example/mcp", "command": "node" }),
        json!({ "name": "x", "transport": "stdio" }),
        json!({ "name": "x", "transport": "stdio", "command": "node", "url": "https://mcp.example/mcp" }),
        json!({ "name": "x", "transport": "http", "url": "http://mcp.example/mcp" }),
        json!({ "name": "x", "transport": "http", "url": "https://10.1.2.3/mcp" }),
        json!({ "name": "x", "transport": "http", "url": "https://mcp.example/mcp", "headers": { "Bad Header": "v" } }),
        json!({ "name": "x", "transport": "http", "url": "https://mcp.example/mcp", "headers": { "Host": "v" } }),
        json!({ "name": "x", "transport": "http", "url": "https://mcp.example/mcp", "headers": { "X-A": "a\r\nb" } }),
        json!({ "name": "x", "transport": "stdio", "command": "node", "env": { "1BAD": "v" } }),
        json!({ "name": "x", "transport": "http", "url": "https://mcp.example/mcp", "headers": { "Mcp-Session-Id": "v" } }),
        json!({ "name": "x", "transport": "http", "url": "https://mcp.example/mcp", "headers": { "mcp-other": "v" } }),
        json!({ "name": "x", "transport": "http", "url": "https://mcp.example/mcp", "headers": { "Last-Event-Id": "v" } }),
        json!({ "name": "x", "transport": "stdio", "command": "node", "env": { "LD_PRELOAD": "/x.so" } }),
        json!({ "name": "x", "transport": "stdio", "command": "node", "env": { "PATH": "/tmp" } }),
        json!({ "name": "x", "transport": "stdio", "command": "node", "env": { "SPOOL_DATA_KEY": "v" } }),
        json!({ "name": "x", "transport": "ftp", "url": "https://mcp.example/mcp" }),
        json!({ "name": "x", "transport": "http", "url": "https://mcp.example/mcp", "tools": { "t": "maybe" } }),
    ];
    for body in refused {
        let (status, answer) = api.call(Method::POST, &path, Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    // AND a reserved header is refused saying so, in a change too
    let (status, answer) = api
        .call(
            Method::PATCH,
            &format!("/v1/mcp-servers/{http_id}"),
            Some(json!({ "headers": { "Mcp-Protocol-Version": "v" } })),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("reserved"),
        "{answer}"
    );

    // WHEN the http server's headers and tools are changed, some set and some removed
    let server_path = format!("/v1/mcp-servers/{http_id}");
    let change = json!({
        "headers": { "Authorization": NEW_HEADER_SECRET, "X-Extra": "extra-s3cr3t" },
        "tools": { "echo": "deny", "get-sum": "ask" },
    });
    let changed = api.ok(Method::PATCH, &server_path, Some(change)).await;
    assert_eq!(changed["headers"], json!({ "Authorization": "set", "X-Extra": "set" }));
    let change = json!({ "headers": { "X-Extra": null }, "tools": { "echo": null }, "name": "docs2" });
    let changed = api.ok(Method::PATCH, &server_path, Some(change)).await;

    // THEN only what was named changed
    assert_eq!(changed["headers"], json!({ "Authorization": "set" }));
    assert_eq!(changed["tools"], json!({ "get-sum": "ask" }));
    assert_eq!(
        (changed["name"].as_str(), changed["url"].as_str()),
        (Some("docs2"), Some("https://mcp.example/mcp"))
    );
    // AND a rename to another's name, or a change of transport, is refused
    let (status, _) = api
        .call(Method::PATCH, &server_path, Some(json!({ "name": "local" })))
        .await;
    assert_eq!(status, 409);
    let (status, _) = api
        .call(Method::PATCH, &server_path, Some(json!({ "transport": "stdio" })))
        .await;
    assert_eq!(status, 400);
    let (status, _) = api
        .call(Method::PATCH, &server_path, Some(json!({ "command": "node" })))
        .await;
    assert_eq!(status, 400);
    // AND the old name is free again
    let (status, again) = api.call(Method::POST, &path, Some(http_server("docs"))).await;
    assert_eq!(status, 201, "{again}");

    // THEN the list is oldest first, and the catalog opens the secrets of the enabled ones
    let listed = api.ok(Method::GET, &path, None).await;
    let names: Vec<&str> = listed["mcp_servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["docs2", "local", "docs"]);
    api.ok(
        Method::PATCH,
        &format!("/v1/mcp-servers/{}", again["id"].as_str().unwrap()),
        Some(json!({ "enabled": false })),
    )
    .await;
    let catalog = service::<H>(harness.metadata().await);
    let endpoints = catalog.endpoints(&org, &ws).await.unwrap();
    assert_eq!(
        endpoints.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["docs2", "local"]
    );
    match &endpoints[0].launch {
        McpLaunch::Http { url, headers } => {
            assert_eq!(url, "https://mcp.example/mcp");
            assert_eq!(headers["Authorization"].expose(), NEW_HEADER_SECRET);
            assert_eq!(headers.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    match &endpoints[1].launch {
        McpLaunch::Stdio { command, args, env } => {
            assert_eq!((command.as_str(), args.len()), ("node", 2));
            assert_eq!(env["API_KEY"].expose(), ENV_SECRET);
        }
        other => panic!("{other:?}"),
    }
    // AND a catalog with another data key opens neither: it leaves both out
    let stranger = McpServerService::new(
        Arc::new(harness.metadata().await),
        Arc::new(SystemClock),
        Some(Arc::new(SecretBox::new(&[9; 32]))),
        true,
    );
    assert!(stranger.endpoints(&org, &ws).await.unwrap().is_empty());

    // WHEN it is tested in a deployment without a probe, THEN it says so
    let body = api.ok(Method::POST, &format!("{server_path}/test"), None).await;
    assert_eq!(body["ok"], false, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("not available in this deployment"),
        "{body}"
    );

    // WHEN one is deleted, THEN it is gone
    api.ok(Method::DELETE, &server_path, None).await;
    assert_eq!(api.call(Method::GET, &server_path, None).await.0, 404);
    assert_eq!(api.call(Method::DELETE, &server_path, None).await.0, 404);

    // WHEN the workspace is deleted, THEN its servers go with it
    api.ok(Method::DELETE, &format!("/v1/workspaces/{ws}"), None).await;
    assert_eq!(
        api.call(Method::GET, &format!("/v1/mcp-servers/{stdio_id}"), None)
            .await
            .0,
        404
    );
    assert!(metadata.mcp_servers(&org, &ws).await.unwrap().is_empty());
    assert!(metadata.mcp_server(&org, stdio_id).await.unwrap().is_none());
}

/// A writer the test's tracing subscriber writes every log line to.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every answer about servers with secrets, and every log line of the process meanwhile (at
/// every level), holds none of their values.
pub(crate) async fn no_secret_shows_in_answers_or_logs<H: Harness>(harness: &H)
where
    H::Metadata: Metadata + 'static,
{
    // GIVEN every log line of this process captured (each test runs in its own process)
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .try_init()
        .unwrap();
    let (api, _, _) = setup(harness).await;
    let ws = workspace(&api).await;
    let path = format!("/v1/workspaces/{ws}/mcp-servers");

    // WHEN servers with secrets are made, read, listed, changed, refused, tested and deleted
    let mut answers = Vec::new();
    for body in [http_server("docs"), stdio_server("local")] {
        let (status, answer) = api.call(Method::POST, &path, Some(body)).await;
        assert_eq!(status, 201, "{answer}");
        answers.push(answer);
    }
    let id = answers[0]["id"].as_str().unwrap().to_owned();
    let server_path = format!("/v1/mcp-servers/{id}");
    answers.push(api.ok(Method::GET, &server_path, None).await);
    answers.push(api.ok(Method::GET, &path, None).await);
    let change = json!({ "headers": { "Authorization": NEW_HEADER_SECRET } });
    answers.push(api.ok(Method::PATCH, &server_path, Some(change)).await);
    // (a refused value is not repeated either)
    let bad = json!({ "headers": { "Authorization": format!("{NEW_HEADER_SECRET}\n") } });
    answers.push(api.call(Method::PATCH, &server_path, Some(bad)).await.1);
    answers.push(api.call(Method::POST, &path, Some(http_server("docs"))).await.1);
    answers.push(api.call(Method::POST, &format!("{server_path}/test"), None).await.1);
    // (a catalog that cannot open the stdio server leaves it out, saying which, not its value)
    let local = answers[1]["id"].as_str().unwrap().to_owned();
    let stranger = McpServerService::new(
        Arc::new(harness.metadata().await),
        Arc::new(SystemClock),
        Some(Arc::new(SecretBox::new(&[9; 32]))),
        true,
    );
    assert!(stranger.endpoints(&org_of(&api), &ws).await.unwrap().is_empty());
    api.ok(Method::DELETE, &server_path, None).await;

    // THEN no answer and no log line holds a value
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("MCP server made"), "the logs were not captured: {logs}");
    assert!(
        logs.lines()
            .any(|l| l.contains("MCP server left out") && l.contains(&local)),
        "the left-out server is not named: {logs}"
    );
    for secret in [HEADER_SECRET, NEW_HEADER_SECRET, ENV_SECRET, "s3cr3t"] {
        for answer in &answers {
            assert!(
                !answer.to_string().contains(secret),
                "an answer shows `{secret}`: {answer}"
            );
        }
        assert!(!logs.contains(secret), "the logs show `{secret}`");
    }
}

/// A deployment like Lambda's: no data key, and a worker that cannot start programs.
async fn lambda_like<H: Harness>(harness: &H) -> Api {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let keys = spool_auth::TokenKeys::new(SECRET).unwrap();
    let access = spool_auth::Access::Tokens(Box::new(keys.clone()));
    let stores = spool_api::Stores {
        metadata: metadata.clone(),
        log,
        turns: harness.turns().await,
        files: harness.files().await,
    };
    let api = spool_api::ChatApi::new(stores, keys, access, Arc::new(SystemClock))
        .with_default_cli_host(spool_chat::settings::CliHost::Server)
        .with_mcp_servers(None, false);
    let base = spool_tests::serve_on_loopback(spool_api::router(api)).await;
    setup_on(metadata.as_ref(), &base).await.0
}

/// Without a data key, a server with secrets is a clear 409 and one without is made; without
/// programs, a stdio server is refused unless the workspace's CLI agents run on runners.
pub(crate) async fn a_deployment_without_key_or_programs_refuses_what_it_cannot_do<H: Harness>(harness: &H) {
    let api = lambda_like(harness).await;
    let ws = workspace(&api).await;
    let path = format!("/v1/workspaces/{ws}/mcp-servers");

    // WHEN a server with a secret header is made, THEN it is refused, saying why
    let (status, body) = api.call(Method::POST, &path, Some(http_server("docs"))).await;
    assert_eq!(
        (status.as_u16(), body["error"]["code"].as_str()),
        (409, Some("refused")),
        "{body}"
    );
    assert!(
        body["error"]["message"].as_str().unwrap().contains("SPOOL_DATA_KEY"),
        "{body}"
    );
    assert!(!body.to_string().contains("s3cr3t"));
    // AND one without secrets is made
    let plain = json!({ "name": "open", "transport": "http", "url": "https://mcp.example/mcp" });
    assert_eq!(api.call(Method::POST, &path, Some(plain)).await.0, 201);

    // WHEN a stdio server is made where CLI agents run on the server, THEN it is refused
    let program = json!({ "name": "local", "transport": "stdio", "command": "node" });
    let (status, body) = api.call(Method::POST, &path, Some(program.clone())).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("runners"), "{body}");

    // WHEN the workspace's CLI agents run on runners, THEN it is made, for them only
    api.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{ws}"),
        Some(json!({ "cli_host": "runners" })),
    )
    .await;
    let (status, body) = api.call(Method::POST, &path, Some(program)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["runs_on"], "runners");
}

on_both_backends!(mcp_servers_http:
    servers_are_kept_by_the_rules_and_their_secrets_sealed,
    no_secret_shows_in_answers_or_logs,
    a_deployment_without_key_or_programs_refuses_what_it_cannot_do,
);
