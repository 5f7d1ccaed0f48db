//! Model agents use a workspace's MCP servers: the real reference server
//! (`@modelcontextprotocol/server-everything`, from `tests/mcp/node_modules`) over stdio and
//! over Streamable HTTP, and the fake OpenAI-compatible and Anthropic providers of
//! [`crate::llm_http`]. The model is offered the server's tools, calls one, the server runs it
//! and its result reaches the model's next request; an `ask` tool waits for approval, across a
//! restart of the worker; a server that hangs or dies ends the call with an error, not the
//! turn; a stdio server is never started where programs may not be; no secret of a server
//! reaches an event. The servers come from a small catalog of the test's own (the registry's
//! store is another part's).

use std::{
    collections::BTreeMap,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::{
    Engine, Outcome, Settings,
    mcp::{McpSettings, Probe},
};
use spool_chat::{
    mcp::{McpCatalog, McpEndpoint, McpLaunch, McpProbe, McpSecret, ToolPolicy},
    metadata::Metadata,
    turns::TurnJob,
};
use spool_log::{clock::SystemClock, port::StreamLog, subscription::spec::UrlPolicy};
use spool_tests::{EmbeddedHarness, Harness};

use crate::{
    llm_http::{Answer, Fake, Provider, QUICK, fake},
    support::{
        Api, Stack, all_events, one, org_of, send, serve, setup_on, stack_with_mcp, test_settings, types_of, until,
    },
};

/// The reference server's entry point.
fn everything() -> String {
    format!(
        "{}/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        env!("CARGO_MANIFEST_DIR")
    )
}

const ENV_SECRET: &str = "env-s3cr3t-4f9a";
const HEADER_SECRET: &str = "Bearer hdr-s3cr3t-77b1";

/// The servers of every workspace.
struct Catalog(Vec<McpEndpoint>);

#[async_trait::async_trait]
impl McpCatalog for Catalog {
    async fn endpoints(&self, _org: &str, _ws: &str) -> Result<Vec<McpEndpoint>, spool_log::error::Error> {
        Ok(self.0.clone())
    }
}

/// The reference server over stdio, named `everything`, with a secret in its environment; its
/// process id is written to `pid_file` (it is `exec`ed by the shell that writes it).
fn stdio_server(pid_file: &Path, tools: &[(&str, ToolPolicy)]) -> McpEndpoint {
    McpEndpoint {
        id: "mcp_stdio".into(),
        name: "everything".into(),
        launch: McpLaunch::Stdio {
            command: "sh".into(),
            args: vec![
                "-c".into(),
                format!("echo $$ > '{}'; exec node '{}' stdio", pid_file.display(), everything()),
            ],
            env: BTreeMap::from([("EVERYTHING_SECRET".to_owned(), McpSecret::new(ENV_SECRET))]),
        },
        tools: tools.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect(),
    }
}

/// The reference server over Streamable HTTP on a free loopback port, killed when dropped.
struct HttpServer {
    _process: tokio::process::Child,
    url: String,
}

impl HttpServer {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let process = tokio::process::Command::new("node")
            .arg(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs the reference server");
        spool_tests::eventually("the reference server listens", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        Self {
            _process: process,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    fn endpoint(&self, tools: &[(&str, ToolPolicy)]) -> McpEndpoint {
        McpEndpoint {
            id: "mcp_http".into(),
            name: "everything".into(),
            launch: McpLaunch::Http {
                url: self.url.clone(),
                headers: BTreeMap::from([("Authorization".to_owned(), McpSecret::new(HEADER_SECRET))]),
            },
            tools: tools.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect(),
        }
    }
}

/// How the tests reach servers: programs may be started (as under `spool serve`), with
/// `node` on the path, calls stopped after `call_timeout`.
fn mcp_settings(call_timeout: Duration) -> McpSettings {
    McpSettings {
        call_timeout,
        spawn_stdio: true,
        env: vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())],
        work_root: std::env::temp_dir().join("spool-test-mcp"),
        // The reference server listens on loopback, as under `spool serve` on loopback.
        urls: UrlPolicy { loopback_http: true },
        ..McpSettings::default()
    }
}

/// A workspace with an agent of `provider`; a chat of it in the workspace.
async fn chat_of(api: &Api, provider: Provider) -> String {
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "MCP" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let agent = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(
                json!({ "name": "Tooler", "instruction": "Use tools.", "runtime": provider.runtime(), "model": "m-1" }),
            ),
        )
        .await;
    let chat = api
        .ok(
            Method::POST,
            "/v1/sessions",
            Some(json!({ "agent_id": agent["id"], "workspace_id": ws })),
        )
        .await;
    chat["id"].as_str().unwrap().to_owned()
}

struct Setup {
    _harness: EmbeddedHarness,
    stack: Stack,
    fake: Arc<Fake>,
    chat: String,
}

async fn setup(provider: Provider, answers: Vec<Answer>, servers: Vec<McpEndpoint>, mcp: McpSettings) -> Setup {
    let harness = EmbeddedHarness::new();
    let state = Arc::new(Fake::default());
    state.answers.lock().unwrap().extend(answers);
    let base = fake(state.clone()).await;
    let settings = Settings { mcp, ..test_settings() };
    let stack = stack_with_mcp(&harness, provider.runtimes(&base), settings, Arc::new(Catalog(servers))).await;
    let chat = chat_of(&stack.api, provider).await;
    Setup {
        _harness: harness,
        stack,
        fake: state,
        chat,
    }
}

fn requests(fake: &Fake) -> Vec<Value> {
    fake.requests
        .lock()
        .unwrap()
        .iter()
        .map(|(_, body)| body.clone())
        .collect()
}

/// The names of the tools a request offered.
fn offered(provider: Provider, request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| match provider {
            Provider::OpenAi => t["function"]["name"].as_str().unwrap().to_owned(),
            Provider::Anthropic => t["name"].as_str().unwrap().to_owned(),
        })
        .collect()
}

/// The tool's schema a request offered.
fn schema_of<'a>(provider: Provider, request: &'a Value, name: &str) -> &'a Value {
    let tool = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name || t["function"]["name"] == name)
        .unwrap();
    match provider {
        Provider::OpenAi => &tool["function"]["parameters"],
        Provider::Anthropic => &tool["input_schema"],
    }
}

/// Asserts that `events` hold each of `tools`' calls once, `tool_start` then `tool_end`, both
/// naming server `everything`; the `tool_end`s.
fn calls_ran_once(events: &[Value], turn: &str, count: usize) -> Vec<Value> {
    let types = types_of(events, turn);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["turn_id"] == turn && e["type"] == "tool_start")
        .collect();
    let ends: Vec<Value> = events
        .iter()
        .filter(|e| e["turn_id"] == turn && e["type"] == "tool_end")
        .cloned()
        .collect();
    assert_eq!((starts.len(), ends.len()), (count, count), "{types:?}");
    for (start, end) in starts.iter().zip(&ends) {
        assert_eq!(start["payload"]["server"], "everything", "{start}");
        assert_eq!(end["payload"]["server"], "everything", "{end}");
        assert_eq!(start["payload"]["tool_call_id"], end["payload"]["tool_call_id"]);
        assert!(start["seq"].as_u64() < end["seq"].as_u64());
    }
    ends
}

/// Asserts that no secret of the servers is in the chat's events.
async fn no_secret_in(api: &Api, chat: &str) {
    let text = serde_json::to_string(&all_events(api, chat).await).unwrap();
    assert!(!text.contains(ENV_SECRET), "the env secret leaked");
    assert!(!text.contains("hdr-s3cr3t"), "the header secret leaked");
}

/// Over stdio, with the OpenAI-compatible provider: the tools are offered (a denied one not),
/// `echo` (read-only: allowed by default) and `get-env` run on the server, their results reach
/// the model, the server's env secret is never in an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_calls_a_stdio_servers_tools() {
    let provider = Provider::OpenAi;
    let pid = tempfile::NamedTempFile::new().unwrap();
    let server = stdio_server(pid.path(), &[("get-sum", ToolPolicy::Deny)]);
    let answers = vec![
        provider.stream(
            &["Calling."],
            &[
                ("everything__echo", r#"{"message":"hi there"}"#),
                ("everything__get-env", "{}"),
            ],
            QUICK,
            true,
        ),
        provider.stream(&["Done."], &[], QUICK, true),
    ];
    let s = setup(provider, answers, vec![server], mcp_settings(Duration::from_secs(30))).await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "Echo something").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "agent_end")["payload"]["reason"],
        "complete",
        "{:?}",
        types_of(&events, &turn)
    );
    let ends = calls_ran_once(&events, &turn, 2);
    assert_eq!(ends[0]["payload"]["tool"], "everything__echo");
    assert_eq!(ends[0]["payload"]["result"]["text"], "Echo: hi there");
    assert!(
        ends[1]["payload"]["result"]["text"]
            .as_str()
            .unwrap()
            .contains("[secret]")
    );
    // The model was offered the server's tools with their schemas, the denied one left out,
    // the same list in both replies, and read the results in its next request.
    let requests = requests(&s.fake);
    assert_eq!(requests.len(), 2);
    let names = offered(provider, &requests[0]);
    assert!(names.contains(&"everything__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"everything__get-tiny-image".to_owned()), "{names:?}");
    assert!(!names.contains(&"everything__get-sum".to_owned()), "{names:?}");
    assert_eq!(names, offered(provider, &requests[1]));
    assert_eq!(
        schema_of(provider, &requests[0], "everything__echo")["properties"]["message"]["type"],
        "string"
    );
    let next = requests[1]["messages"].to_string();
    assert!(next.contains("Echo: hi there"), "{next}");
    assert!(!next.contains(ENV_SECRET));
    no_secret_in(api, &s.chat).await;
    // The step's server was stopped when the step ended.
    let pid: u32 = std::fs::read_to_string(pid.path()).unwrap().trim().parse().unwrap();
    spool_tests::eventually("the stdio server stops with its step", || async {
        (!alive(pid)).then_some(())
    })
    .await;
}

/// Over Streamable HTTP, with Anthropic: the header is sent (and never shown), `echo` and
/// `get-tiny-image` run, the image is described to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_calls_an_http_servers_tools() {
    let provider = Provider::Anthropic;
    let http = HttpServer::start().await;
    let answers = vec![
        provider.stream(
            &["Calling."],
            &[
                ("everything__echo", r#"{"message":"over http"}"#),
                ("everything__get-tiny-image", "{}"),
            ],
            QUICK,
            true,
        ),
        provider.stream(&["Done."], &[], QUICK, true),
    ];
    let s = setup(
        provider,
        answers,
        vec![http.endpoint(&[])],
        mcp_settings(Duration::from_secs(30)),
    )
    .await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "Echo over HTTP").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "agent_end")["payload"]["reason"],
        "complete",
        "{:?}",
        types_of(&events, &turn)
    );
    let ends = calls_ran_once(&events, &turn, 2);
    assert_eq!(ends[0]["payload"]["result"]["text"], "Echo: over http");
    let image = &ends[1]["payload"]["result"];
    assert_eq!(image["images"][0]["mime_type"], "image/png", "{image}");
    let requests = requests(&s.fake);
    assert!(offered(provider, &requests[0]).contains(&"everything__echo".to_owned()));
    let next = requests[1]["messages"].to_string();
    assert!(
        next.contains("Echo: over http") && next.contains("not shown to the model"),
        "{next}"
    );
    no_secret_in(api, &s.chat).await;
}

/// An `ask` tool waits for the person's approval: the step ends (its server stopped), the
/// worker is replaced by a new one (nothing kept in memory), the approval comes, and the new
/// worker connects again, runs the call once and carries the turn to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ask_tool_waits_for_approval_across_a_restart() {
    approve_across_a_restart(false).await;
}

/// An approved call whose server cannot be reached in the next step ends saying so (not as a
/// tool that does not exist), and the turn goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approved_call_whose_server_is_down_says_so() {
    approve_across_a_restart(true).await;
}

/// The approval flow across a restart; the server is down in the second step when `down`.
async fn approve_across_a_restart(down: bool) {
    let provider = Provider::OpenAi;
    let harness = EmbeddedHarness::new();
    let state = Arc::new(Fake::default());
    state.answers.lock().unwrap().extend([
        provider.stream(
            &["Adding."],
            &[("everything__get-sum", r#"{"a":2,"b":3}"#)],
            QUICK,
            true,
        ),
        provider.stream(&["It is 5."], &[], QUICK, true),
    ]);
    let base = fake(state.clone()).await;
    // No worker drains the queue: the test runs the steps, each with an engine of its own.
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let api_base = serve(
        log.clone(),
        metadata.clone(),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let (api, _, _) = setup_on(metadata.as_ref(), &api_base).await;
    let chat = chat_of(&api, provider).await;
    let pid = tempfile::NamedTempFile::new().unwrap();
    let catalog = Arc::new(Catalog(vec![stdio_server(pid.path(), &[("get-sum", ToolPolicy::Ask)])]));
    let down_catalog = Arc::new(Catalog(vec![McpEndpoint {
        launch: McpLaunch::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: BTreeMap::new(),
        },
        ..stdio_server(pid.path(), &[("get-sum", ToolPolicy::Ask)])
    }]));
    let engine = |catalog: Arc<Catalog>| {
        let settings = Settings {
            mcp: mcp_settings(Duration::from_secs(30)),
            workspace_roots: spool_tests::workspace_roots(metadata.clone()),
            ..test_settings()
        };
        Engine::new(
            log.clone(),
            metadata.clone(),
            Arc::new(provider.runtimes(&base)),
            Arc::new(SystemClock),
            settings,
        )
        .with_mcp(catalog)
    };
    let turn = send(&api, &chat, "Add 2 and 3").await;
    let message_seq = all_events(&api, &chat)
        .await
        .iter()
        .find(|e| e["type"] == "user_message_submitted")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    // WHEN the first worker runs the step
    let first = engine(catalog.clone());
    let job = TurnJob::new(&org_of(&api), &chat, &turn, message_seq);
    assert_eq!(first.run(&job, 1).await.unwrap(), Outcome::Waiting);
    drop(first);
    // THEN it asks, naming the server, and nothing ran; its server is stopped
    let events = all_events(&api, &chat).await;
    let asked = one(&events, &turn, "tool_approval_required")["payload"].clone();
    assert_eq!(
        (asked["server"].as_str(), asked["tool"].as_str()),
        (Some("everything"), Some("everything__get-sum"))
    );
    assert!(!types_of(&events, &turn).contains(&"tool_start".to_owned()));
    let first_pid: u32 = std::fs::read_to_string(pid.path()).unwrap().trim().parse().unwrap();
    spool_tests::eventually("the stdio server stops with its step", || async {
        (!alive(first_pid)).then_some(())
    })
    .await;
    // WHEN the person approves, and a new worker runs the next step
    let approved = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/approval"),
            Some(json!({ "decision": "approve", "tool_call_id": asked["tool_call_id"] })),
        )
        .await;
    let next = TurnJob::new(&org_of(&api), &chat, &turn, approved["seq"].as_u64().unwrap());
    let outcome = engine(if down { down_catalog } else { catalog })
        .run(&next, 1)
        .await
        .unwrap();
    // THEN the call runs once on a server started again, and the turn completes
    assert_eq!(outcome, Outcome::Ended(spool_agents::EndReason::Complete));
    let events = all_events(&api, &chat).await;
    if down {
        // (or, its server down, it ends saying the server could not be reached)
        let end = one(&events, &turn, "tool_end")["payload"].clone();
        let error = end["error"].as_str().unwrap();
        assert!(error.contains("`everything` could not be reached"), "{error}");
        assert_eq!(end["server"], "everything");
        assert!(
            requests(&state)[1]["messages"]
                .to_string()
                .contains("could not be reached")
        );
        return;
    }
    let ends = calls_ran_once(&events, &turn, 1);
    assert_eq!(ends[0]["payload"]["result"]["text"], "The sum of 2 and 3 is 5.");
    let second_pid: u32 = std::fs::read_to_string(pid.path()).unwrap().trim().parse().unwrap();
    assert_ne!(first_pid, second_pid, "the approved call's step connected again");
    let requests = requests(&state);
    assert!(requests[1]["messages"].to_string().contains("The sum of 2 and 3 is 5."));
    no_secret_in(&api, &chat).await;
}

fn alive(pid: u32) -> bool {
    // A zombie (killed, not yet reaped) is not alive.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or_default()
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

mod cli;
mod failures;
mod reach;
