//! # A workspace's MCP servers
//!
//! `POST|GET /v1/workspaces/{id}/mcp-servers` add a server to a workspace and list them;
//! `GET|PATCH|DELETE /v1/mcp-servers/{id}` read, change and delete one; `POST
//! /v1/mcp-servers/{id}/test` connects to it and lists its tools with their policies. Header and
//! env values are secrets: they are sealed before they are kept and never answered: a view shows
//! each one's name with `"set"` (`"headers": {"Authorization": "set"}`). The rules are
//! [`spool_chat::service::McpServerService`]'s; these routes parse, call it and shape its answer.

use std::{collections::BTreeMap, sync::Arc};

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use spool_chat::{
    mcp::{McpToolInfo, McpTransport, ToolPolicy},
    service::{McpServerEdit, NewMcpServer, PlacedMcpServer, RunsOn},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, PathOf, rfc3339_ms},
};

/// A new MCP server.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewServer {
    /// Unique in the workspace: `^[a-z0-9][a-z0-9_-]{0,31}$` without `__` (its tools are
    /// offered as `{name}__{tool}`).
    name: String,
    /// `http` (Streamable HTTP, at `url`) or `stdio` (a program Spool starts).
    transport: McpTransport,
    /// `http`: its URL, `https` to a public address (`http://localhost` under a loopback-bound
    /// `spool serve`).
    #[serde(default)]
    url: Option<String>,
    /// `http`: headers sent with every request (secrets: never answered).
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// `stdio`: the program.
    #[serde(default)]
    command: Option<String>,
    /// `stdio`: its arguments.
    #[serde(default)]
    args: Vec<String>,
    /// `stdio`: its environment beyond the scrubbed one agents get (secrets: never answered).
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Policies per tool (by the tool's own name); a tool not named runs at once if its server
    /// marks it read-only, and asks first otherwise.
    #[serde(default)]
    tools: BTreeMap<String, ToolPolicy>,
    /// Whether its tools are offered (default `true`).
    #[serde(default)]
    enabled: Option<bool>,
}

/// A change to a server; what is left out stays. Its transport does not change.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerPatch {
    name: Option<String>,
    url: Option<String>,
    /// Each header named: a string replaces its value, `null` removes it; others stay.
    #[serde(default)]
    #[schema(value_type = BTreeMap<String, Option<String>>)]
    headers: BTreeMap<String, Option<String>>,
    command: Option<String>,
    /// All its arguments.
    args: Option<Vec<String>>,
    /// Each variable named: a string replaces its value, `null` removes it; others stay.
    #[serde(default)]
    #[schema(value_type = BTreeMap<String, Option<String>>)]
    env: BTreeMap<String, Option<String>>,
    /// Each tool named: a policy sets it, `null` returns it to its default; others stay.
    #[serde(default)]
    #[schema(value_type = BTreeMap<String, ToolPolicy>)]
    tools: BTreeMap<String, Option<ToolPolicy>>,
    enabled: Option<bool>,
}

/// Whether a secret has a value: always `set` (a secret removed is not listed).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SecretState {
    /// It has a value, which is never shown.
    Set,
}

/// A workspace's MCP server, without its secrets' values.
#[derive(Serialize, ToSchema)]
pub(crate) struct ServerView {
    id: String,
    workspace_id: String,
    name: String,
    transport: McpTransport,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    /// Its headers' names, each `"set"`.
    headers: BTreeMap<String, SecretState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    args: Vec<String>,
    /// Its variables' names, each `"set"`.
    env: BTreeMap<String, SecretState>,
    /// The policies set per tool.
    tools: BTreeMap<String, ToolPolicy>,
    enabled: bool,
    /// `stdio`: where its program runs: `worker` (whoever runs the turn) or `runners` (this
    /// deployment cannot start programs: it serves only the workspace's CLI agents on runners).
    #[serde(skip_serializing_if = "Option::is_none")]
    runs_on: Option<RunsOn>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

impl From<PlacedMcpServer> for ServerView {
    fn from(placed: PlacedMcpServer) -> Self {
        let s = placed.server;
        let set = |names: Vec<String>| names.into_iter().map(|n| (n, SecretState::Set)).collect();
        Self {
            headers: set(s.headers.into_keys().collect()),
            env: set(s.env.into_keys().collect()),
            id: s.id,
            workspace_id: s.workspace_id,
            name: s.name,
            transport: s.transport,
            url: s.url,
            command: s.command,
            args: s.args,
            tools: s.tools,
            enabled: s.enabled,
            runs_on: placed.runs_on,
            created_at: rfc3339_ms(s.created_ms),
            updated_at: rfc3339_ms(s.updated_ms),
        }
    }
}

/// A workspace's servers.
#[derive(Serialize, ToSchema)]
pub(crate) struct ServerList {
    mcp_servers: Vec<ServerView>,
}

/// A tool a test found, with the policy it has.
#[derive(Serialize, ToSchema)]
pub(crate) struct FoundTool {
    #[serde(flatten)]
    tool: McpToolInfo,
    /// Its policy: set on the server, or its default.
    policy: ToolPolicy,
}

/// A test's answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct TestView {
    /// Whether the server answered with its tools.
    ok: bool,
    tools: Vec<FoundTool>,
    /// Why it could not be reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `POST /v1/workspaces/{id}/mcp-servers`: a new MCP server of the workspace.
#[utoipa::path(post, path = "/v1/workspaces/{id}/mcp-servers", tag = "mcp", params(("id" = String, Path, description = "The workspace")),
    request_body = NewServer,
    responses((status = 201, description = "Made (its header and env values sealed, shown as `set`)", body = ServerView),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody),
        (status = 409, description = "The workspace has a server of this name (`conflict`), or as many as it may (`limit_reached`), or the deployment has no data key to seal header or env values with (`refused`)", body = ErrorBody),
        Refusals))]
pub(crate) async fn create_server(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
    JsonBody(new): JsonBody<NewServer>,
) -> Result<impl IntoResponse, ApiError> {
    api.limit_create(&caller)?;
    let new = NewMcpServer {
        name: new.name,
        transport: Some(new.transport),
        url: new.url,
        headers: new.headers,
        command: new.command,
        args: new.args,
        env: new.env,
        tools: new.tools,
        enabled: new.enabled,
    };
    let placed = api.mcp_servers.create(caller.org(), &workspace_id, new).await?;
    Ok((StatusCode::CREATED, Json(ServerView::from(placed))))
}

/// `GET /v1/workspaces/{id}/mcp-servers`: the workspace's MCP servers.
#[utoipa::path(get, path = "/v1/workspaces/{id}/mcp-servers", tag = "mcp", params(("id" = String, Path, description = "The workspace")),
    responses((status = 200, description = "Its servers, oldest first", body = ServerList),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_servers(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
) -> Result<Json<ServerList>, ApiError> {
    let servers = api.mcp_servers.servers(caller.org(), &workspace_id).await?;
    Ok(Json(ServerList {
        mcp_servers: servers.into_iter().map(ServerView::from).collect(),
    }))
}

/// `GET /v1/mcp-servers/{id}`.
#[utoipa::path(get, path = "/v1/mcp-servers/{id}", tag = "mcp", params(("id" = String, Path, description = "The server")),
    responses((status = 200, description = "The server", body = ServerView),
        (status = 404, description = "No such server in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn get_server(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<ServerView>, ApiError> {
    Ok(Json(api.mcp_servers.server(caller.org(), &id).await?.into()))
}

/// `PATCH /v1/mcp-servers/{id}`: changes what it names.
#[utoipa::path(patch, path = "/v1/mcp-servers/{id}", tag = "mcp", params(("id" = String, Path, description = "The server")),
    request_body = ServerPatch,
    responses((status = 200, description = "Changed", body = ServerView),
        (status = 404, description = "No such server in the caller's organization", body = ErrorBody),
        (status = 409, description = "The workspace has another server of this name", body = ErrorBody), Refusals))]
pub(crate) async fn update_server(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(change): JsonBody<ServerPatch>,
) -> Result<Json<ServerView>, ApiError> {
    let edit = McpServerEdit {
        name: change.name,
        url: change.url,
        headers: change.headers,
        command: change.command,
        args: change.args,
        env: change.env,
        tools: change.tools,
        enabled: change.enabled,
    };
    Ok(Json(api.mcp_servers.update(caller.org(), &id, edit).await?.into()))
}

/// `DELETE /v1/mcp-servers/{id}`.
#[utoipa::path(delete, path = "/v1/mcp-servers/{id}", tag = "mcp", params(("id" = String, Path, description = "The server")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "No such server in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn delete_server(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<StatusCode, ApiError> {
    api.mcp_servers.remove(caller.org(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/mcp-servers/{id}/test`: connects to the server and lists its tools.
#[utoipa::path(post, path = "/v1/mcp-servers/{id}/test", tag = "mcp", params(("id" = String, Path, description = "The server")),
    responses((status = 200, description = "Tested: its tools with their policies, or why it could not be reached or tested here (`ok: false`)", body = TestView),
        (status = 404, description = "No such server in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn test_server(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<TestView>, ApiError> {
    api.limit_create(&caller)?;
    let test = api.mcp_servers.test(caller.org(), &id).await?;
    Ok(Json(TestView {
        ok: test.ok,
        tools: test
            .tools
            .into_iter()
            .map(|(tool, policy)| FoundTool { tool, policy })
            .collect(),
        error: test.error,
    }))
}
