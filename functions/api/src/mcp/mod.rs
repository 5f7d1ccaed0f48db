//! # Spool as an MCP server: `POST /v1/mcp`
//!
//! Any MCP client (Claude Code, Cursor, the official SDKs, `spool mcp` on stdio) talks in the
//! organization's chats through the Model Context Protocol's Streamable HTTP transport, served
//! by rmcp's [`StreamableHttpService`]: stateless (no `Mcp-Session-Id`, so any Lambda instance
//! answers any request) and with JSON answers where a call sends nothing before its result, so
//! it works buffered behind API Gateway. A call that reports progress (`ask_user`, `wait_user`)
//! is answered as a short event stream that ends with its result.
//!
//! The route is behind the token as every other: the caller is verified before rmcp sees the
//! request (`401`, a runner's token `403`), and it needs the `agent` capability as posting as
//! an agent does (`403` without). The tools ([`tools`]) call the same handlers and services as
//! the HTTP routes, as the caller, so they follow the same rules and reach only the caller's
//! organization.

mod tools;
mod wait;

use std::{sync::Arc, time::Duration};

use axum::{
    body::Body,
    extract::{Request, State},
    response::{IntoResponse, Response},
};
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams,
        ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
    },
};
use spool_edge::{ApiError, ErrorBody};
use tower::ServiceExt as _;

use crate::{ChatApi, extract::Caller, global::AGENT_CAPABILITY};

/// The largest MCP request accepted (a message's text is up to 100,000 characters).
const MAX_MCP_BODY_BYTES: usize = 1024 * 1024;

/// How long one `ask_user` or `wait_user` call waits for a person before it answers "still
/// waiting" (resumable): within API Gateway's 29 s.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(25);

/// The hosts a `--no-auth` server answers MCP requests for: its loopback names only, so a page
/// that rebinds a name of its own to the developer's machine is refused.
const LOOPBACK_HOSTS: [&str; 4] = ["localhost", "127.0.0.1", "::1", "[::1]"];

/// How `/v1/mcp` is served.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// How long one call waits for a person before it answers "still waiting".
    pub wait: Duration,
    /// The `Host` values (names, or `name:port`) the route answers; `None`: any host when
    /// callers need a token (a token is the protection against DNS rebinding), the loopback
    /// names under `--no-auth`.
    pub hosts: Option<Vec<String>>,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            wait: DEFAULT_WAIT,
            hosts: None,
        }
    }
}

/// The MCP service over `settings` and the API's `access`.
pub(crate) type McpService = StreamableHttpService<SpoolMcp, NeverSessionManager>;

/// rmcp's service for `/v1/mcp`, stateless with JSON answers.
pub(crate) fn service(settings: &McpSettings, access: &spool_auth::Access) -> McpService {
    let hosts: Vec<String> = match (&settings.hosts, access) {
        (Some(hosts), _) => hosts.clone(),
        (None, spool_auth::Access::Open { .. }) => LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect(),
        (None, _) => Vec::new(),
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_MCP_BODY_BYTES);
    let config = if hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(hosts)
    };
    StreamableHttpService::new(|| Ok(SpoolMcp), Arc::new(NeverSessionManager::default()), config)
}

/// `POST /v1/mcp`: one JSON-RPC message of the Model Context Protocol (Streamable HTTP,
/// stateless): `initialize`, `tools/list`, `tools/call` and notifications. Answers are JSON,
/// or a short `text/event-stream` for calls that report progress while they wait.
#[utoipa::path(post, path = "/v1/mcp", tag = "mcp-server",
    request_body(content = serde_json::Value, content_type = "application/json",
        description = "A JSON-RPC 2.0 message of the Model Context Protocol; send `Accept: application/json, text/event-stream`"),
    responses(
        (status = 200, description = "The JSON-RPC answer (`application/json`), or for a call that reports progress an event stream of its notifications ending with the answer (`text/event-stream`)"),
        (status = 202, description = "A notification or response accepted"),
        (status = 400, description = "Not a JSON-RPC message, or a missing or malformed header the transport needs"),
        (status = 401, description = "No valid token", body = ErrorBody),
        (status = 403, description = "The token lacks the `agent` capability, is a runner's, or the `Host` is not one this server answers", body = ErrorBody),
        (status = 406, description = "The `Accept` header does not name both `application/json` and `text/event-stream`"),
        (status = 413, description = "The body is larger than 1 MiB"),
        (status = 429, description = "Too many writes", body = ErrorBody)))]
pub(crate) async fn mcp(State(api): State<Arc<ChatApi>>, caller: Caller, mut request: Request) -> Response {
    if !caller.0.can(AGENT_CAPABILITY) {
        return ApiError::Forbidden(format!(
            "Spool's MCP server needs a token with the `{AGENT_CAPABILITY}` capability \
             (spool admin create-api-key ORG --capability {AGENT_CAPABILITY})"
        ))
        .into_response();
    }
    request.extensions_mut().insert(Caller(caller.0));
    request.extensions_mut().insert(Served(api.clone()));
    let service = api
        .mcp_server
        .get_or_init(|| service(&api.mcp_settings, &api.access))
        .clone();
    match service.oneshot(request).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}

/// The API a request is served by, handed to the tools in the request's extensions.
#[derive(Clone)]
pub(crate) struct Served(pub(crate) Arc<ChatApi>);

/// The MCP server of one request: it holds nothing; each call finds its caller and the API in
/// the request (put there by [`mcp`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpoolMcp;

impl ServerHandler for SpoolMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("spool", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Spool: durable chats between people and AI agents. List and read chats, post as an \
                 agent, ask a person and wait for the answer (ask_user; when it answers `waiting`, call \
                 it again with the question_id), create tasks; post_agent, ask_user and wait_user work \
                 on the organization's global chat.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::all()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let found = parts.and_then(|p| Some((p.extensions.get::<Caller>()?, p.extensions.get::<Served>()?)));
        let Some((caller, Served(api))) = found else {
            return Err(ErrorData::internal_error("the request carries no caller", None));
        };
        let call = tools::Call {
            api: api.clone(),
            caller: caller.clone(),
            context: &context,
        };
        Ok(call.run(&request.name, request.arguments).await?.into())
    }
}
