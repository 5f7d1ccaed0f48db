//! The companion's MCP servers over its loopback routes, with the real reference server
//! (`@modelcontextprotocol/server-everything`) over real stdio: its tools are listed under the
//! names chats declare, calls run, and a server that dies, hangs or never starts is an error
//! that says so, never a wedged call; it starts again on next use.

use std::{path::PathBuf, sync::Arc, time::Duration};

use serde_json::{Value, json};
use spool_companion::{
    CompanionState, Library,
    mcp::{McpConfig, McpHub},
    router,
    spool::SpoolLink,
};

const SECRET: &str = "s3cr3t-env-value-7781";

fn everything() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.join("tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .canonicalize()
        .expect("the MCP reference server is installed (tests/mcp: npm ci)")
        .display()
        .to_string()
}

/// The companion's routes with `config`'s servers: its URL and the hub.
async fn serve(config: &str, call_timeout: Duration) -> (String, Arc<McpHub>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let hub = Arc::new(McpHub::new(McpConfig::parse(config).unwrap()).with_call_timeout(call_timeout));
    let state = Arc::new(CompanionState {
        library: Arc::new(Library::open(dir.path()).unwrap()),
        spool: SpoolLink::new("http://127.0.0.1:9", "spool_k_s".to_owned(), "lib_1".to_owned()),
        origins: Vec::new(),
        mcp: hub.clone(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    (url, hub, dir)
}

/// The processes whose environment holds `marker`: the server this test started.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(environ) = std::fs::read(entry.path().join("environ"))
            && environ.split(|b| *b == 0).any(|v| v == marker.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}

async fn call(url: &str, body: Value) -> (u16, Value) {
    let answer = reqwest::Client::new()
        .post(format!("{url}/mcp/call"))
        .header("origin", "http://127.0.0.1:8080")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_companions_servers_tools_are_listed_and_run_and_a_failing_server_is_an_error() {
    // GIVEN the reference server with a secret in its env, and a server that dies at start
    // saying its secret
    let marker = format!("SPOOL_MCP_TEST_MARKER={}", std::process::id());
    let config = json!({ "mcpServers": {
        "everything": { "command": "node", "args": [everything(), "stdio"],
                        "env": { "SPOOL_MCP_TEST_SECRET": SECRET, "SPOOL_MCP_TEST_MARKER": std::process::id().to_string() } },
        "broken": { "command": "node", "args": ["-e", "console.error('no config for ' + process.env.TOKEN); process.exit(3)"],
                    "env": { "TOKEN": SECRET } },
    }});
    let (url, hub, _dir) = serve(&config.to_string(), Duration::from_secs(3)).await;
    let http = reqwest::Client::new();

    // WHEN a loopback page lists the tools
    let listed: Value = http
        .get(format!("{url}/mcp/tools"))
        .header("origin", "http://localhost:8080")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // THEN the reference server's tools are there under the names chats declare, with schemas
    let servers = listed["servers"].as_array().unwrap();
    let everything = servers.iter().find(|s| s["name"] == "everything").unwrap();
    let tools = everything["tools"].as_array().unwrap();
    let echo = tools.iter().find(|t| t["tool"] == "echo").expect("echo is listed");
    assert_eq!(echo["name"], "companion__everything__echo");
    assert_eq!(echo["server"], "everything");
    assert_eq!(echo["input_schema"]["type"], "object");
    assert!(echo["input_schema"]["properties"]["message"].is_object(), "{echo}");
    for tool in ["get-sum", "get-env", "get-tiny-image", "trigger-long-running-operation"] {
        assert!(tools.iter().any(|t| t["tool"] == tool), "{tool} in {everything}");
    }
    let env_tool = tools.iter().find(|t| t["tool"] == "get-env").unwrap();
    assert_eq!(env_tool["read_only"], true);
    // AND the server that died is an error with what it said, its secret left out
    let broken = servers.iter().find(|s| s["name"] == "broken").unwrap();
    assert_eq!(broken["tools"], json!([]));
    let why = broken["error"].as_str().unwrap();
    assert!(
        why.contains("`broken` did not start") && why.contains("no config for"),
        "{why}"
    );
    assert!(!listed.to_string().contains(SECRET), "{listed}");

    // WHEN calls run
    let (status, echoed) = call(
        &url,
        json!({ "server": "everything", "tool": "echo", "arguments": { "message": "hello there" } }),
    )
    .await;
    assert_eq!(status, 200, "{echoed}");
    assert_eq!(text(&echoed), "Echo: hello there");
    assert_eq!(echoed["is_error"], false);
    let (_, sum) = call(
        &url,
        json!({ "server": "everything", "tool": "get-sum", "arguments": { "a": 2, "b": 40 } }),
    )
    .await;
    assert!(text(&sum).contains("42"), "{sum}");
    let (_, image) = call(&url, json!({ "server": "everything", "tool": "get-tiny-image" })).await;
    let shown = image["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "image")
        .unwrap();
    assert_eq!(shown["mime_type"], "image/png");
    assert!(shown.get("data").is_none(), "{image}");
    // THEN the server's env is its own and the allow-list: nothing of the companion's
    // (the server has its env values, and the answer never shows them)
    let (_, answer) = call(&url, json!({ "server": "everything", "tool": "get-env" })).await;
    assert!(!answer.to_string().contains(SECRET), "{answer}");
    let env: Value = serde_json::from_str(&text(&answer)).unwrap();
    assert_eq!(env["SPOOL_MCP_TEST_SECRET"], "…");
    assert!(
        env.get("CARGO_MANIFEST_DIR").is_none() && env.get("CARGO").is_none(),
        "{env}"
    );
    assert!(env.get("PATH").is_some(), "{env}");

    // AND bad calls are clear errors
    let (status, answer) = call(&url, json!({ "server": "nope", "tool": "echo" })).await;
    assert_eq!(status, 404, "{answer}");
    // (a tool the server does not have is its own error result, the model's to read)
    let (status, answer) = call(&url, json!({ "server": "everything", "tool": "no-such-tool" })).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["is_error"], true, "{answer}");
    assert!(text(&answer).contains("no-such-tool"), "{answer}");
    let (status, answer) = call(&url, json!({ "server": "broken", "tool": "x" })).await;
    assert_eq!(status, 502, "{answer}");
    assert!(!answer.to_string().contains(SECRET), "{answer}");
    let (status, _) = call(&url, json!({ "tool": "echo" })).await;
    assert_eq!(status, 400);
    let evil = http
        .post(format!("{url}/mcp/call"))
        .header("origin", "https://evil.example")
        .json(&json!({ "server": "everything", "tool": "echo", "arguments": { "message": "x" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(evil.status(), 403);

    // WHEN the server dies between calls
    let pids = processes_with(&marker);
    assert_eq!(pids.len(), 1, "one server process: {pids:?}");
    std::process::Command::new("kill")
        .args(["-9", &pids[0].to_string()])
        .status()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // THEN the next call is started on a new one (it found the old one closed), and works
    let (status, again) = call(
        &url,
        json!({ "server": "everything", "tool": "echo", "arguments": { "message": "back" } }),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(text(&again), "Echo: back");
    let restarted = processes_with(&marker);
    assert!(
        restarted.len() == 1 && restarted != pids,
        "{restarted:?} after {pids:?}"
    );

    // WHEN it dies during a call (a long operation, killed while it runs)
    let long = tokio::spawn({
        let url = url.clone();
        async move {
            call(&url, json!({ "server": "everything", "tool": "trigger-long-running-operation", "arguments": { "duration": 2, "steps": 2 } })).await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::process::Command::new("kill")
        .args(["-9", &restarted[0].to_string()])
        .status()
        .unwrap();
    let (status, died) = long.await.unwrap();
    // THEN the call is an error that says so
    assert_eq!(status, 502, "{died}");
    assert!(
        died["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`everything` failed"),
        "{died}"
    );

    // WHEN a call runs past the bound
    let started = std::time::Instant::now();
    let (status, slow) = call(&url, json!({ "server": "everything", "tool": "trigger-long-running-operation", "arguments": { "duration": 30, "steps": 3 } })).await;
    // THEN it ends at the bound, the server stopped, and the next call starts it again
    assert_eq!(status, 502, "{slow}");
    assert!(
        slow["error"]["message"].as_str().unwrap().contains("within 3 s"),
        "{slow}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    let hung = processes_with(&marker);
    let (status, _) = call(
        &url,
        json!({ "server": "everything", "tool": "echo", "arguments": { "message": "x" } }),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        !hung.iter().any(|p| processes_with(&marker).contains(p)),
        "the hung server was stopped"
    );

    // AND when the companion stops, its servers stop
    hub.shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(processes_with(&marker).is_empty(), "no server left");
}
