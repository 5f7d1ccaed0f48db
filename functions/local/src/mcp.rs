//! # `spool mcp`: Spool's MCP server on stdio
//!
//! `spool mcp --url URL [--api-key KEY | SPOOL_API_KEY]` is the MCP server that Claude Code,
//! Cursor and other clients start as a process: it answers the handshake on stdio itself and
//! hands every `tools/list` and `tools/call` to the deployment's `POST /v1/mcp` (an rmcp client
//! over Streamable HTTP), with a token from the key's handshake, renewed an hour before it
//! expires or when the deployment refuses it. `/v1/mcp` answers a long wait for a person with a
//! resumable `waiting` result (it has to, on Lambda); here `ask_user` and `wait_user` call again
//! until the answer comes, sending their client a progress notification every few seconds.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::Args;
use rmcp::{
    ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt as _,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
        PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    },
    service::{Peer, RequestContext, RunningService, ServiceError},
    transport::{
        StreamableHttpClientTransport,
        streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError},
    },
};
use secrecy::{ExposeSecret as _, SecretString};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::runner::client::{check_url, join};

/// How often a client hears that a call still waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long connecting to `/v1/mcp` (the key's handshake, then MCP's) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long before its expiry a token is replaced.
const RENEW_BEFORE_MS: i64 = 60 * 60 * 1000;
/// What to do about a key the deployment refuses.
const MAKE_A_KEY: &str = "make a key with the `agent` capability (`spool admin create-api-key ORG --capability agent`, \
                          or in the web UI's settings) and pass it in SPOOL_API_KEY or --api-key";

/// `spool mcp --url URL [--api-key KEY]`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The deployment's base URL (as `spool runner` takes it), e.g. `http://127.0.0.1:8080`.
    #[arg(long)]
    pub url: String,
    /// An API key with the `agent` capability (`SPOOL_API_KEY`); none for a `--no-auth` server.
    #[arg(long, env = "SPOOL_API_KEY", hide_env_values = true)]
    pub api_key: Option<SecretString>,
}

/// Serves MCP on stdio until the client closes it. A key or deployment that does not work is an
/// error before anything is served, saying what to do.
pub async fn run(args: McpArgs) -> anyhow::Result<()> {
    let base = check_url(&args.url).map_err(anyhow::Error::msg)?;
    let key = args.api_key.filter(|k| !k.expose_secret().trim().is_empty());
    let upstream = Arc::new(Upstream {
        http: reqwest::Client::new(),
        base,
        key,
        live: Mutex::new(None),
        connect_timeout: CONNECT_TIMEOUT,
    });
    upstream.peer(false).await?;
    tracing::info!(url = %upstream.base, "serving Spool's MCP tools on stdio");
    let server = Proxy { upstream }
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP client's handshake on stdio failed")?;
    server.waiting().await?;
    Ok(())
}

/// The deployment's `/v1/mcp`, connected with a live token.
struct Upstream {
    http: reqwest::Client,
    base: String,
    key: Option<SecretString>,
    live: Mutex<Option<Live>>,
    /// How long connecting may take ([`CONNECT_TIMEOUT`]): every call waits for it.
    connect_timeout: Duration,
}

/// A connection and when its token is due.
struct Live {
    client: RunningService<RoleClient, ()>,
    renew_at_ms: i64,
}

impl Upstream {
    /// A client of `/v1/mcp`: the one held, or (`fresh`, none yet, closed, or its token due) a
    /// new one with a new token, within [`Upstream::connect_timeout`] (calls wait on it).
    async fn peer(&self, fresh: bool) -> anyhow::Result<Peer<RoleClient>> {
        let mut live = self.live.lock().await;
        if !fresh
            && let Some(l) = live.as_ref()
            && crate::now_ms() < l.renew_at_ms
            && !l.client.is_closed()
            && !l.client.peer().is_transport_closed()
        {
            return Ok(l.client.peer().clone());
        }
        *live = None;
        let url = join(&self.base, "/v1/mcp");
        let (client, renew_at_ms) = tokio::time::timeout(self.connect_timeout, self.connect(&url))
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "{url} did not answer within {} s; check --url and that Spool runs there",
                    self.connect_timeout.as_secs_f64()
                )
            })??;
        let peer = client.peer().clone();
        *live = Some(Live { client, renew_at_ms });
        Ok(peer)
    }

    /// A new connection to `url` (`/v1/mcp`) with a new token, and when to renew it.
    async fn connect(&self, url: &str) -> anyhow::Result<(RunningService<RoleClient, ()>, i64)> {
        let (jwt, renew_at_ms) = match &self.key {
            Some(key) => self.handshake(key).await?,
            None => (None, i64::MAX),
        };
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        if let Some(jwt) = jwt {
            config = config.auth_header(jwt);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        match ().serve(transport).await {
            Ok(client) => Ok((client, renew_at_ms)),
            Err(e) => Err(self.explain(url, config_error(&e)).await),
        }
    }

    /// Drops the connection held, so that the next call makes a new one.
    async fn forget(&self) {
        *self.live.lock().await = None;
    }

    /// The key's token and when to renew it.
    async fn handshake(&self, key: &SecretString) -> anyhow::Result<(Option<String>, i64)> {
        let url = join(&self.base, "/v1/handshake");
        let body = json!({"version": "1", "api_key": key.expose_secret().trim(), "user_agent": concat!("spool-mcp/", env!("CARGO_PKG_VERSION"))});
        let response = self
            .http
            .post(&url)
            .timeout(Duration::from_secs(30))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("cannot reach {url}; check --url and that Spool runs there"))?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            anyhow::bail!(
                "the deployment refused the API key ({}); {MAKE_A_KEY}",
                message(&answer)
            );
        }
        if !status.is_success() {
            anyhow::bail!(
                "the handshake at {url} answered {status} ({}); check --url",
                message(&answer)
            );
        }
        let now = crate::now_ms();
        let expires = answer["expires_at"]
            .as_str()
            .and_then(|at| time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).ok())
            .and_then(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok())
            .unwrap_or(now + 2 * RENEW_BEFORE_MS);
        let renew_at = expires - RENEW_BEFORE_MS.min((expires - now).max(0) / 2);
        Ok((answer["jwt"].as_str().map(str::to_owned), renew_at))
    }

    /// Why connecting to `url` failed, in words that say what to do: the route's own refusal
    /// when it answers one (a key without `agent`), else `cause`.
    async fn explain(&self, url: &str, cause: String) -> anyhow::Error {
        let probe = self.http.post(url).timeout(Duration::from_secs(30)).json(&json!({}));
        let probe = match self.live_token().await {
            Some(jwt) => probe.bearer_auth(jwt),
            None => probe,
        };
        if let Ok(response) = probe.send().await {
            let status = response.status();
            let answer: Value = response.json().await.unwrap_or(Value::Null);
            if status == reqwest::StatusCode::FORBIDDEN || status == reqwest::StatusCode::UNAUTHORIZED {
                return anyhow::anyhow!("{url} refused the key ({}); {MAKE_A_KEY}", message(&answer));
            }
            if status == reqwest::StatusCode::NOT_FOUND {
                return anyhow::anyhow!("{url} is not there: the deployment predates Spool's MCP server; update it");
            }
        }
        anyhow::anyhow!("cannot connect to {url} ({cause}); check --url and that Spool runs there")
    }

    /// A token for the probe (without holding the connection's lock).
    async fn live_token(&self) -> Option<String> {
        let key = self.key.as_ref()?;
        self.handshake(key).await.ok()?.0
    }

    /// Calls a tool upstream; a transport failure (an expired token, a lost connection) is
    /// tried once more on a fresh connection, except for a write (a message, a question, a task)
    /// that the deployment may have done before the failure: that one is an error saying so.
    async fn call(&self, params: CallToolRequestParams) -> Result<CallToolResult, ErrorData> {
        let peer = self.peer(false).await.map_err(internal)?;
        match peer.call_tool(params.clone()).await {
            Ok(result) => Ok(result),
            Err(ServiceError::McpError(e)) => Err(e),
            Err(e) if writes(&params.name, params.arguments.as_ref()) && !refused_unseen(&e) => {
                tracing::debug!(error = %e, tool = %params.name, "a write to /v1/mcp failed; not sending it again");
                self.forget().await;
                Err(internal(anyhow::anyhow!(
                    "Spool's /v1/mcp failed while `{}` was sent ({e}); it may have been done: read the chat \
                     (read_chat) or the workspace's tasks before calling it again",
                    params.name
                )))
            }
            Err(e) => {
                tracing::debug!(error = %e, "calling /v1/mcp failed; reconnecting");
                let peer = self.peer(true).await.map_err(internal)?;
                peer.call_tool(params).await.map_err(|e| match e {
                    ServiceError::McpError(e) => e,
                    other => internal(anyhow::anyhow!("Spool's /v1/mcp failed: {other}")),
                })
            }
        }
    }
}

/// `spool mcp`'s MCP server: Spool's tools, run by the deployment.
struct Proxy {
    upstream: Arc<Upstream>,
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("spool", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Spool: durable chats between people and AI agents. List and read chats, post as an agent, \
                 ask a person and wait for the answer (ask_user), create tasks; post_agent, ask_user and \
                 wait_user work on the organization's global chat.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let peer = self.upstream.peer(false).await.map_err(internal)?;
        let tools = match peer.list_all_tools().await {
            Ok(tools) => tools,
            Err(_) => {
                let peer = self.upstream.peer(true).await.map_err(internal)?;
                peer.list_all_tools()
                    .await
                    .map_err(|e| internal(anyhow::anyhow!("{e}")))?
            }
        };
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.clone();
        let mut params = CallToolRequestParams::new(name.clone());
        params.arguments = request.arguments;
        let progress = context.meta.get_progress_token();
        let mut ticks = 0u32;
        // Its first tick is at once: the client hears at the start that the call is under way.
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        loop {
            let call = self.upstream.call(params.clone());
            tokio::pin!(call);
            let result = loop {
                tokio::select! {
                    result = &mut call => break result?,
                    _ = tick.tick() => {
                        ticks += 1;
                        if let Some(token) = progress.as_ref().filter(|_| matches!(name.as_ref(), "ask_user" | "wait_user")) {
                            let note = ProgressNotificationParam::new(token.clone(), f64::from(ticks))
                                .with_message("waiting for a person's answer");
                            if let Err(e) = context.peer.notify_progress(note).await {
                                tracing::debug!(error = %e, "a progress notification was not delivered");
                            }
                        }
                    }
                    () = context.ct.cancelled() => {
                        return Err(ErrorData::internal_error("the call was cancelled", None));
                    }
                }
            };
            match resumed(&name, &result) {
                Some(arguments) => params.arguments = Some(arguments),
                None => return Ok(result.into()),
            }
        }
    }
}

/// The arguments that keep waiting after `result`, if it is a `waiting` answer of `ask_user`
/// or `wait_user`.
fn resumed(tool: &str, result: &CallToolResult) -> Option<rmcp::model::JsonObject> {
    if !matches!(tool, "ask_user" | "wait_user") || result.is_error == Some(true) {
        return None;
    }
    let answer = result.structured_content.as_ref()?;
    if answer["status"] != "waiting" {
        return None;
    }
    let mut arguments = rmcp::model::JsonObject::new();
    for field in ["chat_id", "question_id", "after"] {
        if !answer[field].is_null() {
            arguments.insert(field.to_owned(), answer[field].clone());
        }
    }
    Some(arguments)
}

/// Whether calling `tool` with `arguments` writes something (a message, a question, a task)
/// that a second call would write again.
fn writes(tool: &str, arguments: Option<&rmcp::model::JsonObject>) -> bool {
    match tool {
        "post_message" | "post_agent" | "create_task" => true,
        // A new question; with `question_id` it only waits on one asked before.
        "ask_user" => !arguments.is_some_and(|a| a.contains_key("question_id")),
        _ => false,
    }
}

/// Whether `e` is the deployment refusing a request before acting on it: its token (401 or
/// 403) or its MCP session (404, expired).
fn refused_unseen(e: &ServiceError) -> bool {
    if e.auth_challenge().is_some() || e.is_authorization_required() {
        return true;
    }
    let ServiceError::TransportSend(e) = e else {
        return false;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e.error.as_ref());
    while let Some(current) = source {
        match current.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::SessionExpired) => return true,
            Some(StreamableHttpError::UnexpectedServerResponse(text))
                if text.starts_with("HTTP 401") || text.starts_with("HTTP 403") =>
            {
                return true;
            }
            _ => {}
        }
        source = current.source();
    }
    false
}

fn message(answer: &Value) -> String {
    answer["error"]["message"]
        .as_str()
        .unwrap_or("no reason given")
        .to_owned()
}

fn config_error(e: &impl std::fmt::Display) -> String {
    e.to_string()
}

fn internal(e: anyhow::Error) -> ErrorData {
    ErrorData::internal_error(format!("{e:#}"), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(value: Value) -> rmcp::model::JsonObject {
        value.as_object().cloned().unwrap_or_default()
    }

    /// A lost connection after a write was sent is not sent again (the deployment may have
    /// posted it); reads and waits are, and so is a write the deployment refused unseen.
    #[test]
    fn only_reads_and_refused_writes_are_sent_again() {
        for tool in ["post_message", "post_agent", "create_task"] {
            assert!(writes(tool, None), "{tool} writes");
        }
        let ask = arguments(json!({"author": "bot", "question": "ok?"}));
        assert!(writes("ask_user", Some(&ask)), "a new question writes");
        let resume = arguments(json!({"question_id": "q_1", "chat_id": "global", "after": 3}));
        assert!(!writes("ask_user", Some(&resume)), "waiting on a question does not");
        for tool in ["list_chats", "read_chat", "wait_user"] {
            assert!(!writes(tool, None), "{tool} only reads");
        }
        assert!(
            !refused_unseen(&ServiceError::TransportClosed),
            "a lost connection may have been acted on"
        );
        assert!(!refused_unseen(&ServiceError::Timeout {
            timeout: Duration::from_secs(1)
        }));
    }

    /// A deployment that accepts connections and never answers is an error within the connect
    /// timeout, not a wait forever that holds every later call.
    #[tokio::test]
    async fn a_stalled_deployment_is_an_error_within_the_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let held = tokio::spawn(async move {
            let mut sockets = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                sockets.push(socket);
            }
        });
        let upstream = Upstream {
            http: reqwest::Client::new(),
            base: format!("http://{address}"),
            key: None,
            live: Mutex::new(None),
            connect_timeout: Duration::from_millis(300),
        };
        let outcome = tokio::time::timeout(Duration::from_secs(10), upstream.peer(false)).await;
        held.abort();
        let error = match outcome {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => panic!("a deployment that never answers was connected"),
            Err(_) => panic!("connecting to a stalled deployment did not end"),
        };
        assert!(error.contains("did not answer within"), "{error}");
        // The lock is free again: a second call ends the same way rather than waiting.
        let again = tokio::time::timeout(Duration::from_secs(10), upstream.peer(false)).await;
        assert!(matches!(again, Ok(Err(_))), "a second call waited");
    }
}
