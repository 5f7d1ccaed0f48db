//! # Workspaces and agents
//!
//! `POST|GET /v1/workspaces`, `GET|PATCH|DELETE /v1/workspaces/{id}`,
//! `POST|GET /v1/workspaces/{id}/agents`, `PATCH|DELETE /v1/agents/{id}` and
//! `PUT /v1/workspaces/{id}/agents/order` (its tasks are [`crate::tasks`]). A workspace is made
//! with its built-in Spool agent,
//! which can be changed but not deleted. Everything is scoped to the caller's organization:
//! another organization's ids answer `404`.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use spool_chat::{
    notifier::NotificationStatus,
    service::{AgentEdit, WorkspaceService},
    settings::CliHost,
    settings::{Cleanup, CleanupChange, Notifications, NotificationsChange, WorkingDirMode, WorkspaceChange},
    workspace::{Agent, CliType, Runtime, Workspace},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, Patch, PathOf, rfc3339_ms},
};

/// A workspace as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WorkspaceView {
    id: String,
    /// Its title (the third source design's word).
    title: String,
    /// The same as `title` (the name it had before).
    name: String,
    description: String,
    /// `static` (every chat's CLI runs in `working_directory_path`) or `temp` (a folder of
    /// each chat's own).
    working_directory_mode: WorkingDirMode,
    working_directory_path: Option<String>,
    /// The same as `working_directory_path` (the name it had before).
    working_dir: Option<String>,
    cleanup: Cleanup,
    notifications: NotificationsView,
    /// Where its CLI agents run: its own setting, or the deployment's default.
    cli_host: CliHost,
    /// The most input and output tokens its chats' models may use in a UTC month; past it new
    /// turns are refused (`429 budget_exceeded`). `null`: no budget.
    monthly_token_budget: Option<u64>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

/// A workspace's notification settings, and what they do on this deployment.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NotificationsView {
    #[serde(flatten)]
    settings: Notifications,
    status: NotificationStatus,
}

impl WorkspaceView {
    pub(crate) fn new(w: Workspace, service: &WorkspaceService) -> Self {
        let status = service.notification_status(&w);
        Self {
            cli_host: service.cli_host(&w),
            created_at: rfc3339_ms(w.created_ms),
            updated_at: rfc3339_ms(w.updated_ms),
            working_directory_mode: w.working_dir_mode(),
            id: w.id,
            title: w.name.clone(),
            name: w.name,
            description: w.description,
            working_directory_path: w.working_dir.clone(),
            working_dir: w.working_dir,
            cleanup: w.cleanup,
            monthly_token_budget: w.monthly_token_budget,
            notifications: NotificationsView {
                settings: w.notifications,
                status,
            },
        }
    }
}

/// An agent as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AgentView {
    id: String,
    workspace_id: String,
    name: String,
    instruction: String,
    runtime: Option<Runtime>,
    model: Option<String>,
    cli_type: Option<CliType>,
    /// Its context budget in tokens; `null`: its runtime's own.
    context_tokens: Option<u64>,
    position: u32,
    builtin: bool,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

impl From<Agent> for AgentView {
    fn from(a: Agent) -> Self {
        Self {
            created_at: rfc3339_ms(a.created_ms),
            updated_at: rfc3339_ms(a.updated_ms),
            id: a.id,
            workspace_id: a.workspace_id,
            name: a.name,
            instruction: a.instruction,
            runtime: a.runtime,
            model: a.model,
            cli_type: a.cli_type,
            context_tokens: a.context_tokens,
            position: a.position,
            builtin: a.builtin,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewWorkspace {
    /// Its title (`name` is accepted too).
    #[serde(alias = "name")]
    title: String,
    #[serde(default)]
    description: String,
    /// `temp` unless a `working_directory_path` is given.
    #[serde(default)]
    working_directory_mode: Option<WorkingDirMode>,
    /// The folder of a `static` working directory (`working_dir` is accepted too).
    #[serde(default, alias = "working_dir")]
    working_directory_path: Option<String>,
    #[serde(default)]
    cleanup: Option<CleanupChange>,
    #[serde(default)]
    notifications: Option<NotificationsChange>,
    /// `server` or `runners`; the deployment's default when absent.
    #[serde(default)]
    cli_host: Option<CliHost>,
    /// The most input and output tokens its chats' models may use in a UTC month (none by
    /// default).
    #[serde(default)]
    #[schema(minimum = 1)]
    monthly_token_budget: Option<u64>,
}

impl NewWorkspace {
    /// Everything but its title, as a change to a new workspace's defaults.
    fn settings(self) -> WorkspaceChange {
        WorkspaceChange {
            title: Some(self.title),
            description: Some(self.description),
            working_directory_mode: self.working_directory_mode,
            working_directory_path: self.working_directory_path.map_or(Patch::Keep, Patch::Set),
            cleanup: self.cleanup,
            notifications: self.notifications,
            cli_host: self.cli_host.map_or(Patch::Keep, Patch::Set),
            monthly_token_budget: self.monthly_token_budget.map_or(Patch::Keep, Patch::Set),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewAgent {
    name: String,
    #[serde(default)]
    instruction: String,
    #[serde(default)]
    runtime: Option<Runtime>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    cli_type: Option<CliType>,
    /// How many tokens of the chat's history it is given before the oldest part is summarised
    /// (256 to 2,000,000); absent: its runtime's own budget.
    #[serde(default)]
    context_tokens: Option<u64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentPatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    instruction: Option<String>,
    /// `null` clears it.
    #[serde(default)]
    #[schema(value_type = Option<Runtime>)]
    runtime: Patch<Runtime>,
    /// `null` clears it.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    model: Patch<String>,
    /// `null` clears it.
    #[serde(default)]
    #[schema(value_type = Option<CliType>)]
    cli_type: Patch<CliType>,
    /// `null` returns to the runtime's own budget.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    context_tokens: Patch<u64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentOrder {
    agent_ids: Vec<Id>,
}

/// Workspaces, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WorkspaceList {
    workspaces: Vec<WorkspaceView>,
}

/// A workspace's agents, by position.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AgentList {
    agents: Vec<AgentView>,
}

impl ChatApi {
    /// The caller's workspace `id`, or `404`.
    pub(crate) async fn workspace_of(&self, caller: &Caller, id: &str) -> Result<Workspace, ApiError> {
        Ok(self.workspaces.workspace(caller.org(), id).await?)
    }

    /// The caller's agent `id`, or `404`.
    pub(crate) async fn agent_of(&self, caller: &Caller, id: &str) -> Result<Agent, ApiError> {
        Ok(self.workspaces.agent(caller.org(), id).await?)
    }
}

fn agent_list(agents: Vec<Agent>) -> Json<AgentList> {
    Json(AgentList {
        agents: agents.into_iter().map(AgentView::from).collect(),
    })
}

/// `POST /v1/workspaces`.
#[utoipa::path(post, path = "/v1/workspaces", tag = "workspaces", request_body = NewWorkspace,
    responses((status = 201, description = "The workspace, made with its built-in Spool agent", body = WorkspaceView), Refusals))]
pub(crate) async fn create_workspace(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    JsonBody(new): JsonBody<NewWorkspace>,
) -> Result<impl IntoResponse, ApiError> {
    api.limit_create(&caller)?;
    let workspace = api.workspaces.create(caller.org(), new.settings()).await?;
    Ok((
        StatusCode::CREATED,
        Json(WorkspaceView::new(workspace, &api.workspaces)),
    ))
}

/// `GET /v1/workspaces`.
#[utoipa::path(get, path = "/v1/workspaces", tag = "workspaces",
    responses((status = 200, description = "The organization's workspaces", body = WorkspaceList), Refusals))]
pub(crate) async fn list_workspaces(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
) -> Result<Json<WorkspaceList>, ApiError> {
    let list: Vec<WorkspaceView> = api
        .workspaces
        .workspaces(caller.org())
        .await?
        .into_iter()
        .map(|w| WorkspaceView::new(w, &api.workspaces))
        .collect();
    Ok(Json(WorkspaceList { workspaces: list }))
}

/// `GET /v1/workspaces/{id}`.
#[utoipa::path(get, path = "/v1/workspaces/{id}", tag = "workspaces", params(("id" = String, Path, description = "The workspace")),
    responses((status = 200, description = "The workspace", body = WorkspaceView), (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn get_workspace(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<WorkspaceView>, ApiError> {
    Ok(Json(WorkspaceView::new(
        api.workspace_of(&caller, &id).await?,
        &api.workspaces,
    )))
}

/// `PATCH /v1/workspaces/{id}`.
#[utoipa::path(patch, path = "/v1/workspaces/{id}", tag = "workspaces", params(("id" = String, Path, description = "The workspace")), request_body = WorkspaceChange,
    responses((status = 200, description = "The changed workspace", body = WorkspaceView), (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn update_workspace(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(change): JsonBody<WorkspaceChange>,
) -> Result<Json<WorkspaceView>, ApiError> {
    let workspace = api.workspaces.update(caller.org(), &id, change).await?;
    Ok(Json(WorkspaceView::new(workspace, &api.workspaces)))
}

/// `DELETE /v1/workspaces/{id}`: the workspace, its chats (records, streams and pages) and its
/// agents.
#[utoipa::path(delete, path = "/v1/workspaces/{id}", tag = "workspaces", params(("id" = String, Path, description = "The workspace")),
    responses((status = 204, description = "Deleted, with its chats, agents and tasks"), (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn delete_workspace(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<StatusCode, ApiError> {
    api.workspaces.delete(caller.org(), &id, &api.chats).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/workspaces/{id}/agents`: a new agent, last in the list.
#[utoipa::path(post, path = "/v1/workspaces/{id}/agents", tag = "workspaces", params(("id" = String, Path, description = "The workspace")), request_body = NewAgent,
    responses((status = 201, description = "The agent, last in the list", body = AgentView), (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody),
        (status = 409, description = "The workspace has as many agents as it may (`limit_reached`)", body = ErrorBody), Refusals))]
pub(crate) async fn create_agent(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
    JsonBody(new): JsonBody<NewAgent>,
) -> Result<impl IntoResponse, ApiError> {
    api.limit_create(&caller)?;
    let fields = spool_chat::service::NewAgent {
        name: new.name,
        instruction: new.instruction,
        runtime: new.runtime,
        model: new.model,
        cli_type: new.cli_type,
        context_tokens: new.context_tokens,
        order: None,
    };
    let agent = api.workspaces.add_agent(caller.org(), &workspace_id, fields).await?;
    Ok((StatusCode::CREATED, Json(AgentView::from(agent))))
}

/// `GET /v1/workspaces/{id}/agents`: by position.
#[utoipa::path(get, path = "/v1/workspaces/{id}/agents", tag = "workspaces", params(("id" = String, Path, description = "The workspace")),
    responses((status = 200, description = "The workspace's agents by position, the built-in one among them", body = AgentList), (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_agents(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
) -> Result<Json<AgentList>, ApiError> {
    Ok(agent_list(api.workspaces.agents(caller.org(), &workspace_id).await?))
}

/// `PATCH /v1/agents/{id}`.
#[utoipa::path(patch, path = "/v1/agents/{id}", tag = "workspaces", params(("id" = String, Path, description = "The agent")), request_body = AgentPatch,
    responses((status = 200, description = "The changed agent", body = AgentView), (status = 404, description = "No such agent in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn update_agent(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(change): JsonBody<AgentPatch>,
) -> Result<Json<AgentView>, ApiError> {
    let edit = AgentEdit {
        name: change.name,
        instruction: change.instruction,
        runtime: change.runtime,
        model: change.model,
        cli_type: change.cli_type,
        context_tokens: change.context_tokens,
    };
    Ok(Json(api.workspaces.update_agent(caller.org(), &id, edit).await?.into()))
}

/// `DELETE /v1/agents/{id}`: its chats move to the built-in agent; the built-in agent itself
/// is refused with `409`.
#[utoipa::path(delete, path = "/v1/agents/{id}", tag = "workspaces", params(("id" = String, Path, description = "The agent")),
    responses((status = 204, description = "Deleted; its chats moved to the built-in agent"), (status = 404, description = "No such agent in the caller's organization", body = ErrorBody),
        (status = 409, description = "The built-in agent cannot be deleted", body = ErrorBody), Refusals))]
pub(crate) async fn delete_agent(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<StatusCode, ApiError> {
    api.workspaces.remove_agent(caller.org(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /v1/workspaces/{id}/agents/order` `{agent_ids}`: every agent of the workspace, once,
/// in the new order.
#[utoipa::path(put, path = "/v1/workspaces/{id}/agents/order", tag = "workspaces", params(("id" = String, Path, description = "The workspace")), request_body = AgentOrder,
    responses((status = 200, description = "The agents in their new order", body = AgentList), (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn reorder_agents(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
    JsonBody(order): JsonBody<AgentOrder>,
) -> Result<Json<AgentList>, ApiError> {
    let ids: Vec<String> = order.agent_ids.into_iter().map(String::from).collect();
    Ok(agent_list(
        api.workspaces.reorder_agents(caller.org(), &workspace_id, ids).await?,
    ))
}
