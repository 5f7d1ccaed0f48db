//! # The MCP client: a workspace's servers, as a turn reaches them
//!
//! A workspace's MCP servers ([`spool_chat::mcp`]) are reached with the protocol's official
//! SDK (`rmcp`): over Streamable HTTP (on the workspace's `reqwest`, with the server's headers
//! sent on every request), or over stdio, where Spool starts the program itself, confined as
//! CLI agents are ([`stdio`]): a cleared environment plus `PATH`, the locale and the server's own
//! `env`, the chat's working directory, its own process group, killed when the connection is
//! dropped.
//!
//! - [`Connection`] is one server connected: its tools listed, a tool called, closed;
//! - [`Probe`] implements [`McpProbe`] (a workspace's "test the connection");
//! - [`outcome`] maps a call's result into what the events and the model get.
//!
//! Every wait is bounded: connecting and listing by [`McpSettings::connect_timeout`], each call
//! by [`McpSettings::call_timeout`]. What a server says in an error or a result never carries
//! one of its secrets (header and env values are replaced by [`scrub`]).

use std::{collections::HashMap, path::PathBuf, sync::Arc, time::Duration};

use async_trait::async_trait;
use rmcp::{
    RoleClient, ServiceExt,
    model::CallToolRequestParams,
    service::RunningService,
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};
use serde_json::Value;
use spool_chat::mcp::{McpEndpoint, McpLaunch, McpProbe, McpToolInfo};
use spool_log::subscription::spec::UrlPolicy;

pub mod outcome;
pub mod stdio;

/// How the engine and the probe reach MCP servers.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// The longest connecting (the protocol's handshake) and listing tools may take.
    pub connect_timeout: Duration,
    /// The longest one tool call may take (`SPOOL_MCP_CALL_TIMEOUT_MS`); past it the call
    /// ends with an error the model sees.
    pub call_timeout: Duration,
    /// Whether this process may start programs: stdio servers are connected only where it
    /// may (`spool serve`), never on Lambda.
    pub spawn_stdio: bool,
    /// What a stdio server keeps of Spool's environment (`PATH`, the locale), before its own
    /// `env`.
    pub env: Vec<(String, String)>,
    /// Where a stdio server of a chat without a working directory runs (and has its `HOME`
    /// and `TMPDIR`): `{work_root}/{org}/{chat}`.
    pub work_root: PathBuf,
    /// Which URLs an http server may be reached at: checked as written, and every address its
    /// name resolves to ([`crate::outbound`]); loopback only where the deployment allows it
    /// (`spool serve` bound to loopback).
    pub urls: UrlPolicy,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(60),
            spawn_stdio: false,
            env: Vec::new(),
            work_root: std::env::temp_dir().join("spool-mcp"),
            urls: UrlPolicy { loopback_http: false },
        }
    }
}

/// One server, connected.
pub struct Connection {
    /// The server's name.
    name: String,
    service: RunningService<RoleClient, ()>,
    /// The server's secret values, kept out of what it says.
    secrets: Vec<String>,
    /// A stdio server's process group, killed when the connection goes.
    _process: Option<stdio::Spawned>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects to `endpoint` within [`McpSettings::connect_timeout`]; a stdio server runs in
    /// `dir` (already confined) with its home in `home`. The error is said for a person.
    pub async fn open(
        endpoint: &McpEndpoint,
        settings: &McpSettings,
        place: Option<&stdio::Place>,
    ) -> Result<Self, String> {
        let secrets: Vec<String> = endpoint
            .launch
            .secrets()
            .map(|s| s.expose().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        let scrubbed = |e: String| scrub(&e, &secrets);
        let (service, process) = match &endpoint.launch {
            McpLaunch::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("the header name `{name}` is not valid"))?;
                    let mut value = reqwest::header::HeaderValue::from_str(value.expose())
                        .map_err(|_| format!("the value of the header `{name}` is not valid"))?;
                    value.set_sensitive(true);
                    custom.insert(name, value);
                }
                crate::outbound::check_webhook_url(url, settings.urls)
                    .map_err(|r| r.message.replacen("webhook.url", "its `url`", 1))?;
                // No idle pooling, as rmcp's own client (a half-read answer stalls a reused
                // connection).
                let client = crate::outbound::client_builder(settings.urls)
                    .pool_max_idle_per_host(0)
                    .build()
                    .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let service = tokio::time::timeout(settings.connect_timeout, ().serve(transport))
                    .await
                    .map_err(|_| timed_out("connect", settings.connect_timeout))?
                    .map_err(|e| scrubbed(format!("cannot connect to {url}: {e}")))?;
                (service, None)
            }
            McpLaunch::Stdio { command, args, env } => {
                if !settings.spawn_stdio {
                    return Err(STDIO_NOT_HERE.to_owned());
                }
                let place = place.ok_or_else(|| "a stdio server needs a folder to run in".to_owned())?;
                let (process, stdout, stdin) = stdio::spawn(command, args, env, settings, place)?;
                let service = tokio::time::timeout(settings.connect_timeout, ().serve((stdout, stdin)))
                    .await
                    .map_err(|_| timed_out("start", settings.connect_timeout))?
                    .map_err(|e| scrubbed(format!("`{command}` did not answer as an MCP server: {e}")))?;
                (service, Some(process))
            }
        };
        Ok(Self {
            name: endpoint.name.clone(),
            service,
            secrets,
            _process: process,
        })
    }

    /// The server's tools, within [`McpSettings::connect_timeout`].
    pub async fn tools(&self, settings: &McpSettings) -> Result<Vec<McpToolInfo>, String> {
        let tools = tokio::time::timeout(settings.connect_timeout, self.service.list_all_tools())
            .await
            .map_err(|_| timed_out("list its tools", settings.connect_timeout))?
            .map_err(|e| scrub(&format!("cannot list its tools: {e}"), &self.secrets))?;
        Ok(tools
            .into_iter()
            .map(|tool| McpToolInfo {
                name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()),
                read_only: tool
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
                input_schema: Value::Object((*tool.input_schema).clone()),
            })
            .collect())
    }

    /// Calls `tool` with `arguments`, within `timeout`: its result as the events and the model
    /// get it ([`outcome::Outcome`]), or why the server did not answer (said for a person).
    pub async fn call(&self, tool: &str, arguments: &Value, timeout: Duration) -> Result<outcome::Outcome, String> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Value::Object(map) = arguments {
            params = params.with_arguments(map.clone());
        }
        let result = tokio::time::timeout(timeout, self.service.call_tool(params))
            .await
            .map_err(|_| timed_out(&format!("answer `{tool}`"), timeout))?
            .map_err(|e| scrub(&format!("`{tool}` failed: {e}"), &self.secrets))?;
        let value = serde_json::to_value(&result).map_err(|e| format!("its answer cannot be read: {e}"))?;
        Ok(outcome::Outcome::of(&value, &self.secrets))
    }

    /// Closes the connection (an HTTP session is ended; a stdio server's group is killed when
    /// this returns), waiting a second at most.
    pub async fn close(mut self) {
        if let Err(e) = self.service.close_with_timeout(Duration::from_secs(1)).await {
            tracing::debug!(server = %self.name, error = %e, "closing an MCP connection failed");
        }
    }
}

/// Why a stdio server is not connected where programs may not be started.
pub const STDIO_NOT_HERE: &str = "stdio servers are not started here (a Lambda deployment never starts programs); \
     use an http server, or run the workspace's agents under `spool serve` or on runners";

fn timed_out(what: &str, limit: Duration) -> String {
    format!("it did not {what} within {:.0} s", limit.as_secs_f64())
}

/// A secret's credential part this short is not scrubbed on its own (it would blank common
/// words).
const MIN_CREDENTIAL: usize = 8;

/// `text` with every one of `secrets` replaced: the whole value, its credential part after an
/// auth scheme (`Bearer X`: `X`, when at least [`MIN_CREDENTIAL`] bytes), and each as written
/// inside a JSON string and percent-encoded.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut forms: Vec<String> = Vec::new();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let mut parts = vec![secret.as_str()];
        if let Some((_, credential)) = secret.split_once(' ') {
            let credential = credential.trim();
            if credential.len() >= MIN_CREDENTIAL {
                parts.push(credential);
            }
        }
        for part in parts {
            let json = serde_json::to_string(part).unwrap_or_default();
            let json = json.get(1..json.len().saturating_sub(1)).unwrap_or_default().to_owned();
            forms.extend([
                part.to_owned(),
                json,
                percent_encoded(part, false),
                percent_encoded(part, true),
            ]);
        }
    }
    // Longest first, so a whole value goes before its credential part.
    forms.retain(|f| !f.is_empty());
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms.dedup();
    let mut text = text.to_owned();
    for form in &forms {
        if text.contains(form.as_str()) {
            text = text.replace(form.as_str(), "[secret]");
        }
    }
    text
}

/// `text` percent-encoded (every byte but the unreserved ones, `A-Z a-z 0-9 - . _ ~`), in upper
/// or `lower` case hex digits.
fn percent_encoded(text: &str, lower: bool) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ if lower => format!("%{b:02x}"),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Tests servers: connects, lists their tools, closes ([`McpProbe`]).
#[derive(Debug, Clone)]
pub struct Probe {
    settings: Arc<McpSettings>,
}

impl Probe {
    /// A probe that reaches servers as `settings` say (stdio ones only where
    /// [`McpSettings::spawn_stdio`]; they run in a folder of the probe's own).
    pub fn new(settings: McpSettings) -> Self {
        Self {
            settings: Arc::new(settings),
        }
    }
}

#[async_trait]
impl McpProbe for Probe {
    async fn probe(&self, endpoint: &McpEndpoint) -> Result<Vec<McpToolInfo>, String> {
        let place = match &endpoint.launch {
            McpLaunch::Stdio { .. } if self.settings.spawn_stdio => {
                Some(stdio::Place::own(&self.settings.work_root, "probe", &endpoint.id).await?)
            }
            _ => None,
        };
        let connection = Connection::open(endpoint, &self.settings, place.as_ref()).await?;
        let tools = connection.tools(&self.settings).await;
        connection.close().await;
        tools
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed_whole_by_credential_escaped_and_encoded() {
        let secrets = vec!["Bearer Tok/en\"quoted\"-1234".to_owned(), "Basic abc".to_owned()];
        let said = "header Bearer Tok/en\"quoted\"-1234; echoed Tok/en\"quoted\"-1234; \
                    json \"Tok/en\\\"quoted\\\"-1234\"; url ?t=Tok%2Fen%22quoted%22-1234 or Tok%2fen%22quoted%22-1234";
        let clean = scrub(said, &secrets);
        assert!(!clean.contains("Tok/en"), "{clean}");
        assert!(!clean.contains("quoted"), "{clean}");
        assert!(!clean.contains("Tok%2"), "{clean}");
        assert_eq!(clean.matches("[secret]").count(), 5, "{clean}");
        // A short credential part is not scrubbed alone (it would blank common words); the
        // whole value is.
        assert_eq!(scrub("abc and Basic abc", &secrets), "abc and [secret]");
    }
}
