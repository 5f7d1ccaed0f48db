//! # Tasks
//!
//! `GET|POST /v1/workspaces/{id}/tasks` and `GET|PATCH|DELETE /v1/tasks/{id}`: the tasks agents
//! (or people, by hand) make in a workspace. The list comes in pages, newest first
//! ([`spool_chat::listing`]).

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use spool_chat::{
    listing::TaskQuery,
    service::{TaskAuthor, TaskEdit},
    workspace::Task,
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, PathOf, QueryOf, next_cursor, page_after, page_limit, rfc3339_ms},
};

/// A page of a workspace's tasks, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TaskList {
    tasks: Vec<TaskView>,
    /// Send as `cursor` (with the same filters) for the next page; `null` on the last page.
    next_cursor: Option<String>,
}

/// A task as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TaskView {
    id: String,
    workspace_id: String,
    session_id: Option<String>,
    title: String,
    description: String,
    #[schema(format = DateTime)]
    created_at: String,
}

impl From<Task> for TaskView {
    fn from(t: Task) -> Self {
        Self {
            created_at: rfc3339_ms(t.created_ms),
            id: t.id,
            workspace_id: t.workspace_id,
            session_id: t.session_id,
            title: t.title,
            description: t.description,
        }
    }
}

/// `GET /v1/workspaces/{id}/tasks`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct TaskListQuery {
    /// At most this many (1 to 1000, default 100).
    #[serde(default)]
    limit: Option<usize>,
    /// The `next_cursor` of the previous page, sent back with the same filters.
    #[serde(default)]
    cursor: Option<String>,
    /// Only the tasks made in this chat.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    session_id: Option<Id>,
}

/// `GET /v1/workspaces/{id}/tasks?session_id=&limit=&cursor=`: a page of tasks, newest first
/// (ties by id), and the cursor of the next.
#[utoipa::path(get, path = "/v1/workspaces/{id}/tasks", tag = "workspaces", params(("id" = String, Path, description = "The workspace"), TaskListQuery),
    responses((status = 200, description = "A page of the workspace's tasks, newest first, with the cursor of the next", body = TaskList),
        (status = 400, description = "A `limit` out of range, or a cursor this list did not give", body = ErrorBody),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_tasks(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
    QueryOf(query): QueryOf<TaskListQuery>,
) -> Result<Json<TaskList>, ApiError> {
    api.workspace_of(&caller, &workspace_id).await?;
    let mut select = TaskQuery {
        workspace_id: workspace_id.into(),
        session_id: query.session_id.map(String::from),
        limit: page_limit(query.limit)?,
        after: None,
    };
    select.after = page_after(&select.scope(caller.org()), query.cursor.as_deref())?;
    let page = api.workspaces.tasks(caller.org(), &select).await?;
    Ok(Json(TaskList {
        next_cursor: next_cursor(&select.scope(caller.org()), page.next.as_ref()),
        tasks: page.items.into_iter().map(TaskView::from).collect(),
    }))
}

/// `GET /v1/tasks/{id}`.
#[utoipa::path(get, path = "/v1/tasks/{id}", tag = "workspaces", params(("id" = String, Path, description = "The task")),
    responses((status = 200, description = "The task", body = TaskView), (status = 404, description = "No such task in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn get_task(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<TaskView>, ApiError> {
    Ok(Json(api.workspaces.task(caller.org(), &id).await?.into()))
}

/// A task made by hand.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTask {
    /// What it is (the design's `summary`, accepted too).
    #[serde(alias = "summary")]
    title: String,
    /// What to do.
    #[serde(default)]
    description: String,
    /// The workspace's chat it belongs to, if any.
    #[serde(default)]
    session_id: Option<Id>,
}

/// A change to a task: the fields given.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TaskPatch {
    #[serde(default, alias = "summary")]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// `POST /v1/workspaces/{id}/tasks` `{title, description?, session_id?}`: a task made by hand,
/// announced on the workspace's feed as an agent's is.
#[utoipa::path(post, path = "/v1/workspaces/{id}/tasks", tag = "workspaces", params(("id" = String, Path, description = "The workspace")),
    request_body = NewTask,
    responses((status = 201, description = "Made", body = TaskView),
        (status = 404, description = "No such workspace (or chat of it) in the caller's organization", body = ErrorBody),
        (status = 409, description = "The workspace has as many tasks as it may (`limit_reached`)", body = ErrorBody), Refusals))]
pub(crate) async fn create_task(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
    JsonBody(new): JsonBody<NewTask>,
) -> Result<impl IntoResponse, ApiError> {
    api.limit_create(&caller)?;
    let new = spool_chat::service::NewTask {
        title: new.title,
        description: new.description,
        session_id: new.session_id.map(String::from),
    };
    let by = TaskAuthor {
        person: Some(&caller.0.sub),
        agent: None,
    };
    let task = api.workspaces.create_task(caller.org(), &workspace_id, new, by).await?;
    Ok((StatusCode::CREATED, Json(TaskView::from(task))))
}

/// `PATCH /v1/tasks/{id}` `{title?, description?}`.
#[utoipa::path(patch, path = "/v1/tasks/{id}", tag = "workspaces", params(("id" = String, Path, description = "The task")),
    request_body = TaskPatch,
    responses((status = 200, description = "Changed", body = TaskView),
        (status = 404, description = "No such task in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn update_task(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(change): JsonBody<TaskPatch>,
) -> Result<Json<TaskView>, ApiError> {
    let edit = TaskEdit {
        title: change.title,
        description: change.description,
    };
    Ok(Json(api.workspaces.update_task(caller.org(), &id, edit).await?.into()))
}

/// `DELETE /v1/tasks/{id}`.
#[utoipa::path(delete, path = "/v1/tasks/{id}", tag = "workspaces", params(("id" = String, Path, description = "The task")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "No such task in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn delete_task(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<StatusCode, ApiError> {
    api.workspaces.delete_task(caller.org(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
