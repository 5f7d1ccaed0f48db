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
use spool_domain::{
    Agent, CliType, Error, Runtime, Workspace,
    listing::{self, SessionQuery},
    manage,
    notifier::{NotificationStatus, Notifier},
    settings::{Cleanup, CleanupChange, Notifications, NotificationsChange, WorkingDirMode, WorkspaceChange},
    workspace::new_id,
};
use utoipa::ToSchema;

use crate::{
    ApiError, ChatApi, ErrorBody,
    error::Refusals,
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
    pub(crate) fn new(w: Workspace, notifier: &dyn Notifier) -> Self {
        let status = spool_domain::notifier::status(&w.notifications, notifier);
        Self {
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

pub(crate) use spool_domain::manage::feed_path;

pub(crate) fn not_found(what: &str, id: &str) -> ApiError {
    ApiError::Store(Error::Missing {
        what: format!("{what} `{id}`"),
    })
}

impl ChatApi {
    /// The caller's workspace `id`, or `404`.
    pub(crate) async fn workspace_of(&self, caller: &Caller, id: &str) -> Result<Workspace, ApiError> {
        self.metadata
            .workspace(caller.org(), id)
            .await?
            .ok_or_else(|| not_found("workspace", id))
    }

    /// The caller's agent `id`, or `404`.
    pub(crate) async fn agent_of(&self, caller: &Caller, id: &str) -> Result<Agent, ApiError> {
        self.metadata
            .agent(caller.org(), id)
            .await?
            .ok_or_else(|| not_found("agent", id))
    }

    async fn agent_list(&self, caller: &Caller, workspace_id: &str) -> Result<Json<AgentList>, ApiError> {
        let agents: Vec<AgentView> = self
            .metadata
            .agents(caller.org(), workspace_id)
            .await?
            .into_iter()
            .map(AgentView::from)
            .collect();
        Ok(Json(AgentList { agents }))
    }
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
    let now = api.clock.now_ms();
    let mut workspace = Workspace::new(new_id("ws"), String::new(), now);
    new.settings()
        .apply(caller.org(), &mut workspace, &api.workspace_roots)
        .await?;
    let builtin = Agent::builtin(new_id("ag"), workspace.id.clone(), now);
    let json = spool_domain::ContentType::parse("application/json")?;
    api.log
        .create(
            &feed_path(caller.org(), &workspace.id)?,
            spool_domain::CreateStream::new(json),
        )
        .await?;
    api.metadata
        .create_workspace(caller.org(), &workspace, &builtin)
        .await?;
    tracing::info!(org = %caller.org(), workspace = %workspace.id, "workspace created");
    Ok((
        StatusCode::CREATED,
        Json(WorkspaceView::new(workspace, api.notifier.as_ref())),
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
        .metadata
        .workspaces(caller.org())
        .await?
        .into_iter()
        .map(|w| WorkspaceView::new(w, api.notifier.as_ref()))
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
        api.notifier.as_ref(),
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
    let mut workspace = api.workspace_of(&caller, &id).await?;
    change.apply(caller.org(), &mut workspace, &api.workspace_roots).await?;
    workspace.updated_ms = api.clock.now_ms();
    api.metadata.update_workspace(caller.org(), &workspace).await?;
    Ok(Json(WorkspaceView::new(workspace, api.notifier.as_ref())))
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
    api.workspace_of(&caller, &id).await?;
    // Its chats first (streams and records), then the workspace with its agents: a delete
    // interrupted half-way is finished by repeating it.
    loop {
        let first = SessionQuery::in_workspace(Some(&id), listing::DEFAULT_LIMIT);
        let chats = api.metadata.sessions(caller.org(), &first).await?.items;
        if chats.is_empty() {
            break;
        }
        for chat in chats {
            api.chats.remove(caller.org(), &chat.id).await?;
        }
    }
    // Its webhooks, before its feed: nothing more is delivered for it.
    for hook in api.metadata.hooks(caller.org(), &id).await? {
        match api.metadata.delete_hook(caller.org(), &hook.id).await {
            Ok(()) | Err(Error::Missing { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match api.log.delete(&feed_path(caller.org(), &id)?).await {
        Ok(()) | Err(Error::NotFound { .. } | Error::Gone { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    api.metadata.delete_workspace(caller.org(), &id).await?;
    tracing::info!(org = %caller.org(), workspace = %id, "workspace deleted");
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
    api.workspace_of(&caller, &workspace_id).await?;
    let fields = manage::NewAgent {
        name: new.name,
        instruction: new.instruction,
        runtime: new.runtime,
        model: new.model,
        cli_type: new.cli_type,
    };
    let agent = manage::add_agent(
        api.metadata.as_ref(),
        caller.org(),
        &workspace_id,
        fields,
        api.clock.now_ms(),
    )
    .await?;
    api.announce(
        caller.org(),
        &agent.workspace_id,
        manage::agent_event(&agent, manage::AgentChange::Created),
    )
    .await?;
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
    api.workspace_of(&caller, &workspace_id).await?;
    api.agent_list(&caller, &workspace_id).await
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
    let mut agent = api.agent_of(&caller, &id).await?;
    if let Some(name) = change.name {
        agent.name = spool_domain::names::clean(&name);
    }
    if let Some(instruction) = change.instruction {
        agent.instruction = instruction;
    }
    change.runtime.apply(&mut agent.runtime);
    change.model.apply(&mut agent.model);
    change.cli_type.apply(&mut agent.cli_type);
    agent.validate()?;
    agent.updated_ms = api.clock.now_ms();
    api.metadata.update_agent(caller.org(), &agent).await?;
    api.announce(
        caller.org(),
        &agent.workspace_id,
        manage::agent_event(&agent, manage::AgentChange::Updated),
    )
    .await?;
    Ok(Json(agent.into()))
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
    let agent = api.agent_of(&caller, &id).await?;
    if agent.builtin {
        return Err(ApiError::Conflict(
            "the built-in Spool agent cannot be deleted; change its instruction or runtime instead".to_owned(),
        ));
    }
    manage::remove_agent(api.metadata.as_ref(), caller.org(), &agent).await?;
    api.announce(
        caller.org(),
        &agent.workspace_id,
        manage::agent_event(&agent, manage::AgentChange::Deleted),
    )
    .await?;
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
    api.workspace_of(&caller, &workspace_id).await?;
    let ids: Vec<String> = order.agent_ids.into_iter().map(String::from).collect();
    manage::reorder_agents(api.metadata.as_ref(), caller.org(), &workspace_id, &ids).await?;
    let event = spool_domain::FeedEvent::AgentsReordered {
        agent_ids: ids,
        workspace_id: workspace_id.to_string(),
    };
    api.announce(caller.org(), &workspace_id, event).await?;
    api.agent_list(&caller, &workspace_id).await
}

impl ChatApi {
    /// Announces `event` on the workspace's feed.
    pub(crate) async fn announce(
        &self,
        org: &str,
        workspace_id: &str,
        event: spool_domain::FeedEvent,
    ) -> Result<(), ApiError> {
        let now = spool_domain::clock::rfc3339_ms(self.clock.now_ms());
        Ok(manage::announce(self.aggregates.as_ref(), org, workspace_id, &event, &now).await?)
    }
}
