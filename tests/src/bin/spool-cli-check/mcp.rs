//! The MCP part of the CLI check: each real CLI, run exactly as a turn runs it, is given the
//! reference MCP server (`@modelcontextprotocol/server-everything` over stdio, from
//! `tests/mcp`) in its own MCP configuration, with a secret in the server's environment, a
//! tool denied and one allowed, and what the engine would list of its tools (the reference
//! server's read-only hints, listed with Spool's client), and talks to a fake model provider of its own wire format on localhost
//! (claude and opencode: Anthropic's; codex: OpenAI's Responses; gemini: Google's). The
//! provider records each request and refuses it (`400`), so the CLI ends there.
//!
//! For each CLI it checks that:
//! 1. the provider's request lists the server's tools it may run (`echo`,
//!    `toggle-simulated-logging`), under the names that CLI gives them: the CLI read Spool's configuration, started the server (the node program, under the
//!    chat's confinement) and listed its tools;
//! 2. the tools it may not run unattended are not offered: the denied `get-env`, and
//!    `toggle-subscriber-updates`, which has no policy and is not read-only (`ask`); the
//!    explicitly allowed `toggle-simulated-logging` (not read-only) is offered, and so is the
//!    read-only `echo` (no policy);
//! 3. the secret is nowhere in the chat's folder after the run (its input and context files
//!    included), and the private folder that held the configuration is gone.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use axum::{Router, body::Bytes, http::StatusCode, response::IntoResponse, routing::any};
use spool_agents::{
    cli::{CliAgents, program},
    mcp::{McpSettings, Probe},
    runtimes::CliRuntimes,
};
use spool_chat::{
    mcp::{McpEndpoint, McpLaunch, McpProbe, McpSecret, ToolPolicy},
    workspace::CliType,
};

use super::{Discard, RUN_TIMEOUT, gist, request};

/// The secret in the server's environment: it must reach the server only.
const SECRET: &str = "spool-cli-check-mcp-s3cr3t";

/// The reference server, started over stdio.
fn everything() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// A fake model provider on localhost: what it was sent, and its address.
async fn provider() -> (Arc<Mutex<Vec<String>>>, SocketAddr) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let app = Router::new().fallback(any(move |body: Bytes| {
        let record = record.clone();
        async move {
            if let Ok(mut seen) = record.lock() {
                seen.push(String::from_utf8_lossy(&body).into_owned());
            }
            let refusal = r#"{"error": {"type": "invalid_request_error", "code": 400, "message": "spool-cli-check: the request is recorded, no answer is given"}}"#;
            (
                StatusCode::BAD_REQUEST,
                [("content-type", "application/json")],
                refusal,
            )
                .into_response()
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a local port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (seen, addr)
}

/// The tools offered (`echo`, read-only with no policy; `toggle-simulated-logging`, allowed)
/// and not offered (`get-env`, denied; `toggle-subscriber-updates`, `ask` by default).
const OFFERED: [&str; 2] = ["echo", "toggle-simulated-logging"];
const WITHHELD: [&str; 2] = ["get-env", "toggle-subscriber-updates"];

/// The name `cli` gives the server's `tool` in a model request, quoted.
fn tool_name(cli: CliType, tool: &str) -> String {
    match cli {
        CliType::Claude => format!("\"mcp__everything__{tool}\""),
        CliType::Gemini => format!("\"mcp_everything_{tool}\""),
        // codex 0.169 groups a server's tools in a namespace (`mcp__everything`) of their own
        // names, `-` made `_`.
        CliType::Codex => format!("\"{}\"", tool.replace('-', "_")),
        CliType::Opencode => format!("\"everything_{tool}\""),
    }
}

/// The variables that point `cli` at the provider at `addr`.
fn provider_env(cli: CliType, addr: SocketAddr) -> Vec<(String, String)> {
    let pairs: Vec<(&str, String)> = match cli {
        CliType::Claude => vec![
            ("ANTHROPIC_BASE_URL", format!("http://{addr}")),
            ("ANTHROPIC_API_KEY", "sk-ant-cli-check".into()),
        ],
        CliType::Opencode => vec![
            ("ANTHROPIC_BASE_URL", format!("http://{addr}/v1")),
            ("ANTHROPIC_API_KEY", "sk-ant-cli-check".into()),
        ],
        CliType::Gemini => vec![
            ("GOOGLE_GEMINI_BASE_URL", format!("http://{addr}")),
            ("GEMINI_API_KEY", "cli-check".into()),
        ],
        CliType::Codex => vec![("OPENAI_API_KEY", "sk-cli-check".into())],
    };
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The folder `cli` is found in: the real CLIs' folder, or for codex (which takes its provider
/// only from its configuration, and Spool's configuration is Spool's) a `codex` that runs the
/// real one with the provider set first, then exactly Spool's command line.
fn search_path(cli: CliType, bin: &Path, own: &Path, addr: SocketAddr) -> PathBuf {
    if cli != CliType::Codex {
        return bin.to_path_buf();
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = own.join("codex-bin");
    std::fs::create_dir_all(&dir).expect("a folder for codex");
    let script = format!(
        "#!/bin/sh\nexec '{}' -c 'model_provider=\"cli-check\"' -c 'model_providers.cli-check={{name=\"cli-check\",base_url=\"http://{addr}/v1\",wire_api=\"responses\",env_key=\"OPENAI_API_KEY\"}}' \"$@\"\n",
        bin.join("codex").display()
    );
    let path = dir.join("codex");
    std::fs::write(&path, script).expect("the codex wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("its mode");
    dir
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => found.extend(files_holding(&path, needle)),
            Ok(t)
                if t.is_file() && std::fs::read(&path).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle)) =>
            {
                found.push(path);
            }
            _ => {}
        }
    }
    found
}

/// Checks one CLI with the reference server; its report and what failed.
async fn check_one(bin: &Path, work: &Path, cli: CliType) -> (String, Vec<String>) {
    let name = program(cli);
    let mut failures = Vec::new();
    let (seen, addr) = provider().await;
    let own = work.join(name);
    let root = own.join("chats");
    let agents = CliAgents::new(vec![search_path(cli, bin, &own, addr)], root.clone(), RUN_TIMEOUT * 3)
        .with_env(provider_env(cli, addr));
    let mut request = request(cli);
    request.context.session_id = format!("ses_mcp_{name}");
    request.workspace_context = Some("The check's workspace.".to_owned());
    let server = McpEndpoint {
        id: "mcp_everything".to_owned(),
        name: "everything".to_owned(),
        launch: McpLaunch::Stdio {
            command: "node".to_owned(),
            args: vec![everything().display().to_string(), "stdio".to_owned()],
            env: BTreeMap::from([("SPOOL_CHECK_TOKEN".to_owned(), McpSecret::new(SECRET))]),
        },
        tools: BTreeMap::from([
            ("get-env".to_owned(), ToolPolicy::Deny),
            ("toggle-simulated-logging".to_owned(), ToolPolicy::Allow),
        ]),
    };
    // What the engine lists for a CLI's request: the tools and their read-only hints.
    let probe = Probe::new(McpSettings {
        env: vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())],
        work_root: own.join("probe"),
        spawn_stdio: true,
        ..McpSettings::default()
    });
    match probe.probe(&server).await {
        Ok(tools) => {
            let tools = tools.into_iter().map(|t| (t.name, t.read_only)).collect();
            request.mcp_listed = BTreeMap::from([(server.id.clone(), tools)]);
        }
        Err(e) => failures.push(format!("{name}: Spool's client could not list the server's tools: {e}")),
    }
    request.mcp_servers = vec![server];
    let chat = root.join(&request.context.org).join(&request.context.session_id);
    if cli == CliType::Gemini {
        // gemini takes `GOOGLE_GEMINI_BASE_URL` as a gateway it then refuses headless; with the
        // API key's method chosen in the chat's home it uses both.
        let settings = chat.join("home/.gemini");
        std::fs::create_dir_all(&settings).expect("gemini's settings folder");
        std::fs::write(
            settings.join("settings.json"),
            r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
        )
        .expect("gemini's settings");
    }
    let said = match agents.runtime(cli) {
        Ok(runtime) => match runtime.respond(&request, &mut Discard).await {
            Ok(reply) => format!("answered: {}", reply.text),
            Err(e) => e.to_string(),
        },
        Err(e) => e,
    };
    let bodies = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let names = |tools: [&str; 2]| tools.map(|t| tool_name(cli, t));
    let (offers, withheld) = (names(OFFERED), names(WITHHELD));
    let offered = bodies.iter().any(|b| {
        offers.iter().all(|t| b.contains(t.as_str())) && (cli != CliType::Codex || b.contains("\"mcp__everything\""))
    });
    let mut report = format!("cli-check: {name} with the MCP server `everything` (stdio):\n");
    if offered {
        report.push_str(&format!(
            "  its model request lists the server's tools it may run ({}), from {} request(s)\n",
            offers.join(", "),
            bodies.len()
        ));
    } else {
        failures.push(format!(
            "{name}: no model request listed the MCP server's {} ({} request(s) seen); it ended: {}",
            offers.join(" and "),
            bodies.len(),
            said.lines()
                .filter(|l| l.to_lowercase().contains("mcp"))
                .collect::<Vec<_>>()
                .join(" | ")
                + &gist(&said)
        ));
    }

    let leaked: Vec<&String> = withheld
        .iter()
        .filter(|t| bodies.iter().any(|b| b.contains(t.as_str())))
        .collect();
    if !leaked.is_empty() {
        failures.push(format!(
            "{name}: tools it may not run were offered to the model: {leaked:?}"
        ));
    } else if offered {
        report.push_str(&format!(
            "  the tools it may not run ({}) are not offered\n",
            withheld.join(", ")
        ));
    }
    let leaked = files_holding(&chat, SECRET);
    if leaked.is_empty() {
        report.push_str("  the server's secret is nowhere in the chat's folder\n");
    } else {
        failures.push(format!("{name}: the MCP server's secret is in {leaked:?}"));
    }
    let left: Vec<PathBuf> = std::fs::read_dir(root.join(".mcp"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    if left.is_empty() {
        report.push_str("  its private MCP configuration is removed after the run\n");
    } else {
        failures.push(format!("{name}: the MCP configuration is left behind: {left:?}"));
    }
    (report, failures)
}

/// Checks every CLI with the reference MCP server, all at once; the report and what failed.
pub(super) async fn check(bin: &Path) -> (String, Vec<String>) {
    // Not under /tmp: gemini skips a settings file below a folder others may write.
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target");
    let work = tempfile::tempdir_in(&base).expect("a folder under target/");
    if !everything().exists() {
        return (
            String::new(),
            vec![format!(
                "the reference MCP server is not installed at {} (npm ci --prefix tests/mcp)",
                everything().display()
            )],
        );
    }
    // One after another: on a busy machine codex sends its first request without waiting
    // for a server slow to start, and four CLIs with their servers at once make one slow.
    let only = std::env::var("SPOOL_CLI_CHECK_ONLY").ok();
    let mut report = String::new();
    let mut failures = Vec::new();
    for cli in CliType::ALL {
        if only.as_deref().is_some_and(|o| o != program(cli)) {
            continue;
        }
        let (r, f) = check_one(bin, work.path(), cli).await;
        report.push_str(&r);
        failures.extend(f);
    }
    (report, failures)
}
