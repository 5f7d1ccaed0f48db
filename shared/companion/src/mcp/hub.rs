//! The running servers: each started on first use, kept for the next calls, stopped (its whole
//! process group) when it dies, hangs or the companion stops.

use std::{
    collections::{BTreeMap, VecDeque},
    process::Stdio,
    sync::{Arc, Mutex as StdMutex},
    time::Duration,
};

use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, Tool},
    service::{RunningService, ServiceError},
};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::{io::AsyncBufReadExt, sync::Mutex};

use super::{KEPT_ENV, McpConfig, OfferedTool, StdioServer, offered_name, shape_result};

/// How long a server has to start and answer the protocol's handshake (`npx` may fetch it).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server has to list its tools.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call may take unless the hub is given another bound.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How many of a server's last lines on stderr are kept, to say why it failed to start.
const STDERR_LINES: usize = 20;

/// Why a call did not run or failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No server of that name is configured.
    #[error("the companion runs no MCP server `{0}`")]
    UnknownServer(String),
    /// The server could not be reached, died, or did not answer in time.
    #[error("{0}")]
    Failed(String),
}

/// A server's tools, as `GET /mcp/tools` lists them.
#[derive(Debug, Clone, Serialize)]
pub struct ServerTools {
    /// The server's name.
    pub name: String,
    /// Its tools that a chat may be offered.
    pub tools: Vec<OfferedTool>,
    /// Its tools whose names cannot be a client tool's (too long, or with other characters).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Why it has no tools now (it did not start, or did not answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The companion's MCP servers, started on first use and stopped with it.
#[derive(Debug, Default)]
pub struct McpHub {
    servers: BTreeMap<String, Arc<Server>>,
    call_timeout: Option<Duration>,
}

struct Server {
    name: String,
    config: StdioServer,
    running: Mutex<Option<Arc<Running>>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish()
    }
}

/// A started server: the protocol's client over its stdio, the tools it listed, and its
/// process group, killed when this is dropped.
struct Running {
    client: RunningService<RoleClient, ClientConfig>,
    tools: Vec<Tool>,
    group: Group,
}

/// A process group, killed when dropped: a server's own children (`npx` starts `node`) go
/// with it.
struct Group {
    pid: Option<u32>,
    child: StdMutex<tokio::process::Child>,
}

impl Running {
    /// Whether it is still there: its client open and its process not exited (a server killed
    /// between calls is noticed here, before a call is sent to it).
    fn alive(&self) -> bool {
        !self.client.is_closed()
            && self
                .group
                .child
                .lock()
                .is_ok_and(|mut child| matches!(child.try_wait(), Ok(None)))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(group) = self
            .pid
            .take()
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            // Gone already (ESRCH) is fine: nothing is left to kill.
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

impl McpHub {
    /// The servers of `config`, none started yet.
    pub fn new(config: McpConfig) -> Self {
        let servers = config
            .servers
            .into_iter()
            .map(|(name, config)| {
                let server = Server {
                    name: name.clone(),
                    config,
                    running: Mutex::new(None),
                };
                (name, Arc::new(server))
            })
            .collect();
        Self {
            servers,
            call_timeout: None,
        }
    }

    /// The same, with calls bounded by `timeout` rather than [`CALL_TIMEOUT`].
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// The configured servers' names.
    pub fn names(&self) -> Vec<String> {
        self.servers.keys().cloned().collect()
    }

    /// Every server's tools, starting those not running (all at once, each bounded in time).
    pub async fn tools(&self) -> Vec<ServerTools> {
        let mut tasks = tokio::task::JoinSet::new();
        for server in self.servers.values() {
            let server = server.clone();
            tasks.spawn(async move { server.tools().await });
        }
        let mut all = Vec::new();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(listed) => all.push(listed),
                Err(e) => tracing::error!(error = %e, "listing an MCP server's tools failed"),
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Calls `tool` of `server` with `arguments`; its result shaped for the chat
    /// ([`shape_result`]). A server that died or did not answer in time is stopped, and started
    /// again on next use.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<Map<String, Value>>,
    ) -> Result<Value, CallError> {
        let Some(server) = self.servers.get(server) else {
            return Err(CallError::UnknownServer(server.to_owned()));
        };
        let running = server.running().await.map_err(CallError::Failed)?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let timeout = self.call_timeout.unwrap_or(CALL_TIMEOUT);
        let name = &server.name;
        match tokio::time::timeout(timeout, running.client.call_tool(params)).await {
            Ok(Ok(result)) => {
                let mut shaped = shape_result(&serde_json::to_value(result).unwrap_or_default());
                server.redact_value(&mut shaped);
                Ok(shaped)
            }
            // The server answered with an error (no such tool, bad arguments): it is still up.
            Ok(Err(ServiceError::McpError(e))) => Err(CallError::Failed(format!(
                "the MCP server `{name}` refused the call of `{tool}`: {}",
                server.redact(&e.message)
            ))),
            Ok(Err(e)) => {
                server.stop(&running).await;
                let e = server.redact(&e.to_string());
                tracing::warn!(server = %name, tool, error = %e, "an MCP server failed; it starts again on next use");
                Err(CallError::Failed(format!(
                    "the MCP server `{name}` failed during the call of `{tool}` ({e}); it is started again on next use"
                )))
            }
            Err(_) => {
                server.stop(&running).await;
                tracing::warn!(server = %name, tool, "an MCP server did not answer in time; stopped");
                Err(CallError::Failed(format!(
                    "the MCP server `{name}` did not answer the call of `{tool}` within {} s; it was stopped, and is started again on next use",
                    timeout.as_secs()
                )))
            }
        }
    }

    /// Stops every running server.
    pub async fn shutdown(&self) {
        for server in self.servers.values() {
            server.running.lock().await.take();
        }
    }
}

impl Server {
    async fn tools(&self) -> ServerTools {
        let mut listed = ServerTools {
            name: self.name.clone(),
            tools: Vec::new(),
            skipped: Vec::new(),
            error: None,
        };
        match self.running().await {
            Ok(running) => {
                for tool in &running.tools {
                    match offered_name(&self.name, &tool.name) {
                        Some(name) => listed.tools.push(OfferedTool {
                            name,
                            server: self.name.clone(),
                            tool: tool.name.to_string(),
                            description: tool.description.as_deref().map(|d| d.chars().take(1024).collect()),
                            input_schema: Value::Object((*tool.input_schema).clone()),
                            read_only: tool
                                .annotations
                                .as_ref()
                                .and_then(|a| a.read_only_hint)
                                .unwrap_or(false),
                        }),
                        None => listed.skipped.push(tool.name.to_string()),
                    }
                }
            }
            Err(e) => listed.error = Some(e),
        }
        listed
    }

    /// The running server, started when it is not (or no longer) running.
    async fn running(&self) -> Result<Arc<Running>, String> {
        let mut slot = self.running.lock().await;
        if let Some(running) = slot.as_ref()
            && running.alive()
        {
            return Ok(running.clone());
        }
        // A closed one is dropped first: its group is killed.
        slot.take();
        let running = Arc::new(self.start().await?);
        *slot = Some(running.clone());
        Ok(running)
    }

    /// Stops `running` if it is still this server's current one.
    async fn stop(&self, running: &Arc<Running>) {
        let mut slot = self.running.lock().await;
        if slot.as_ref().is_some_and(|current| Arc::ptr_eq(current, running)) {
            slot.take();
        }
    }

    async fn start(&self) -> Result<Running, String> {
        let name = &self.name;
        let config = &self.config;
        let mut command = tokio::process::Command::new(&config.command);
        command
            .args(&config.args)
            // Nothing of the companion's environment (its API key) but the allow-list.
            .env_clear()
            .envs(KEPT_ENV.iter().filter_map(|k| std::env::var_os(k).map(|v| (*k, v))))
            .envs(&config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start the MCP server `{name}` (`{}`): {e}", config.command))?;
        let (Some(stdout), Some(stdin), stderr) = (child.stdout.take(), child.stdin.take(), child.stderr.take()) else {
            return Err(format!("cannot talk to the MCP server `{name}`"));
        };
        let said = Arc::new(StdMutex::new(VecDeque::new()));
        if let Some(stderr) = stderr {
            tokio::spawn(keep_last_lines(stderr, said.clone()));
        }
        let group = Group {
            pid: child.id(),
            child: StdMutex::new(child),
        };
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("spool-companion", env!("CARGO_PKG_VERSION")),
        );
        let failed = |why: String| {
            let lines: Vec<String> = said.lock().map(|l| l.iter().cloned().collect()).unwrap_or_default();
            let mut message = format!("the MCP server `{name}` {why}");
            if !lines.is_empty() {
                message.push_str(&format!("; it said: {}", self.redact(&lines.join(" / "))));
            }
            tracing::warn!(server = %name, "{message}");
            message
        };
        let client = match tokio::time::timeout(CONNECT_TIMEOUT, info.serve((stdout, stdin))).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(failed(format!("did not start: {e}"))),
            Err(_) => return Err(failed(format!("did not answer within {} s", CONNECT_TIMEOUT.as_secs()))),
        };
        let tools = match tokio::time::timeout(LIST_TIMEOUT, client.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => return Err(failed(format!("did not list its tools: {e}"))),
            Err(_) => {
                return Err(failed(format!(
                    "did not list its tools within {} s",
                    LIST_TIMEOUT.as_secs()
                )));
            }
        };
        tracing::info!(server = %name, tools = tools.len(), "MCP server started");
        Ok(Running { client, tools, group })
    }

    /// `text` without this server's env values (its secrets).
    fn redact(&self, text: &str) -> String {
        self.config
            .env
            .values()
            .filter(|v| v.len() >= 4)
            .fold(text.to_owned(), |text, secret| {
                // Raw, and as it reads inside JSON text (a result that quotes its environment).
                let quoted = serde_json::to_string(secret).unwrap_or_default();
                let quoted = quoted.trim_matches('"');
                text.replace(secret.as_str(), "…").replace(quoted, "…")
            })
    }

    /// `value` without this server's env values in any of its strings.
    fn redact_value(&self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.redact(text),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(fields) => fields.values_mut().for_each(|v| self.redact_value(v)),
            _ => {}
        }
    }
}

/// Keeps the last [`STDERR_LINES`] lines a server writes on stderr.
async fn keep_last_lines(stderr: tokio::process::ChildStderr, said: Arc<StdMutex<VecDeque<String>>>) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(mut said) = said.lock() {
            if said.len() == STDERR_LINES {
                said.pop_front();
            }
            said.push_back(line.chars().take(300).collect());
        }
    }
}
