//! # Sessions (chats)
//!
//! `POST|GET /v1/sessions` and `GET|PATCH|DELETE /v1/sessions/{id}`. A session's events live in
//! its stream (`/v1/stream/sessions/{id}` for Durable Streams clients); its record keeps what
//! lists need. Its messages ([`crate::messages`]), answers ([`crate::answers`]), events
//! ([`crate::events`]) and turns ([`crate::turns`]) have routes of their own.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use spool_chat::{
    listing::SessionQuery,
    service::{ChatChange, NewChat},
    session::Session,
    workspace::{Agent, CliType},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, Patch, PathOf, QueryOf, next_cursor, page_after, page_limit, rfc3339_ms},
};

/// A session as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionView {
    /// The turn running or waiting to run, if any.
    pending_turn_id: Option<String>,
    id: String,
    workspace_id: Option<String>,
    agent_id: Option<String>,
    agent_name: Option<String>,
    title: String,
    cli_type: Option<CliType>,
    /// The model answers use instead of the agent's (`/model`).
    model: Option<String>,
    /// The mode the agent is told of (`/mode`).
    mode: Option<String>,
    global: bool,
    capabilities: Vec<String>,
    /// Who made it (the token's subject: `key:{key_id}`); empty for the global chat.
    created_by: String,
    #[schema(format = DateTime)]
    created_at: String,
    /// When it last changed: its record, or something in it.
    #[schema(format = DateTime)]
    updated_at: String,
    #[schema(format = DateTime)]
    last_active_at: String,
    last_message_preview: String,
    /// The session's events as a Durable Stream (on the stream function's host).
    stream_url: String,
    /// The session's events as server-sent events with `id: <seq>` (on the stream function's
    /// host).
    events_url: String,
}

impl SessionView {
    fn new(s: Session, agent_name: Option<String>) -> Self {
        Self {
            stream_url: format!("/v1/stream/sessions/{}", s.id),
            events_url: format!("/v1/sessions/{}/stream", s.id),
            created_at: rfc3339_ms(s.created_ms),
            updated_at: rfc3339_ms(s.updated_ms.max(s.last_active_ms).max(s.created_ms)),
            last_active_at: rfc3339_ms(s.last_active_ms),
            created_by: s.created_by,
            id: s.id,
            workspace_id: s.workspace_id,
            agent_id: s.agent_id,
            agent_name,
            title: s.title,
            cli_type: s.cli_override,
            model: s.model,
            mode: s.mode,
            global: s.global,
            capabilities: s.capabilities,
            last_message_preview: s.preview,
            pending_turn_id: s.pending_turn.map(|p| p.turn_id),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewSession {
    #[serde(default)]
    workspace_id: Option<Id>,
    #[serde(default)]
    agent_id: Option<Id>,
    #[serde(default)]
    title: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionPatch {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    agent_id: Option<Id>,
    /// The CLI that answers in this chat instead of the agent's; `null` clears it.
    #[serde(default)]
    #[schema(value_type = Option<CliType>)]
    cli_type: Patch<CliType>,
}

/// `GET /v1/sessions`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// The workspace whose chats to list; without it, the chats outside workspaces.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    workspace_id: Option<Id>,
    /// At most this many (1 to 1000, default 100).
    #[serde(default)]
    limit: Option<usize>,
    /// The `next_cursor` of the previous page, sent back with the same filters; without it,
    /// the list starts at the most recently active chat.
    #[serde(default)]
    cursor: Option<String>,
    /// Only the chats this token subject made (`key:{key_id}`).
    #[serde(default)]
    #[param(value_type = Option<String>)]
    created_by: Option<Id>,
    /// Only the chats this agent answers in.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    agent_id: Option<Id>,
    /// Only the chats whose title contains this, ignoring case (up to 200 characters).
    #[serde(default)]
    q: Option<String>,
}

/// The longest title search.
const MAX_SEARCH_CHARS: usize = 200;

/// A page of chats, newest activity first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionList {
    sessions: Vec<SessionView>,
    /// Send as `cursor` (with the same filters) for the next page; `null` on the last page.
    next_cursor: Option<String>,
}

/// The session in a path.
pub(crate) const SESSION_ID: &str = "The session (`global` is the organization's global chat)";

impl ChatApi {
    /// The caller's session `id`, or `404` (the global chat is made on first use).
    pub(crate) async fn session_of(&self, caller: &Caller, id: &str) -> Result<Session, ApiError> {
        Ok(self.chats.session(caller.org(), id).await?)
    }

    pub(crate) async fn view(&self, caller: &Caller, session: Session) -> Result<SessionView, ApiError> {
        let name = self.records.agent_name(caller.org(), &session).await?;
        Ok(SessionView::new(session, name))
    }

    /// The agent a new or changed session uses: `agent_id` (in `workspace_id`, when given),
    /// else the workspace's built-in agent. Returns the agent and its workspace.
    async fn pick_agent(
        &self,
        caller: &Caller,
        workspace_id: Option<&str>,
        agent_id: Option<&str>,
    ) -> Result<Option<Agent>, ApiError> {
        if let Some(id) = agent_id {
            let agent = self.agent_of(caller, id).await?;
            if let Some(ws) = workspace_id
                && ws != agent.workspace_id
            {
                return Err(ApiError::BadRequest(format!(
                    "agent `{id}` belongs to another workspace than `{ws}`"
                )));
            }
            return Ok(Some(agent));
        }
        let Some(ws) = workspace_id else { return Ok(None) };
        let agents = self.workspaces.agents(caller.org(), ws).await?;
        Ok(agents.into_iter().find(|a| a.builtin))
    }
}

/// `POST /v1/sessions`.
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = NewSession,
    responses((status = 201, description = "The chat, with the agent it talks to", body = SessionView),
        (status = 404, description = "No such workspace or agent in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn create_session(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    JsonBody(new): JsonBody<NewSession>,
) -> Result<impl IntoResponse, ApiError> {
    api.limit_create(&caller)?;
    let agent = api
        .pick_agent(&caller, new.workspace_id.as_deref(), new.agent_id.as_deref())
        .await?;
    let name = agent.as_ref().map(|a| a.name.clone());
    let new = NewChat {
        workspace_id: new.workspace_id.map(String::from),
        agent,
        title: new.title,
        id: None,
        created_by: caller.0.sub.clone(),
    };
    let session = api.chats.create(caller.org(), new).await?;
    let view = SessionView::new(session, name);
    Ok((StatusCode::CREATED, Json(view)))
}

/// `GET /v1/sessions?workspace_id=&created_by=&agent_id=&q=&limit=&cursor=`: a page of chats,
/// most recently active first (ties by id), and the cursor of the next ([`spool_domain::listing`]).
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(ListQuery),
    responses((status = 200, description = "A page of chats, newest activity first, with the cursor of the next", body = SessionList),
        (status = 400, description = "A `limit` out of range, a `q` too long, or a cursor this list did not give", body = ErrorBody), Refusals))]
pub(crate) async fn list_sessions(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    QueryOf(query): QueryOf<ListQuery>,
) -> Result<Json<SessionList>, ApiError> {
    let q = query.q.as_deref().map(str::trim).filter(|q| !q.is_empty());
    if q.is_some_and(|q| q.chars().count() > MAX_SEARCH_CHARS) {
        return Err(ApiError::BadRequest(format!(
            "`q` is at most {MAX_SEARCH_CHARS} characters of a chat's title"
        )));
    }
    let mut select = SessionQuery {
        workspace_id: query.workspace_id.map(String::from),
        created_by: query.created_by.map(String::from),
        agent_id: query.agent_id.map(String::from),
        title_contains: q.map(str::to_owned),
        limit: page_limit(query.limit)?,
        after: None,
    };
    select.after = page_after(&select.scope(caller.org()), query.cursor.as_deref())?;
    let page = api.records.list(caller.org(), &select).await?;
    let next_cursor = next_cursor(&select.scope(caller.org()), page.next.as_ref());
    let sessions: Vec<SessionView> = page
        .items
        .into_iter()
        .map(|c| SessionView::new(c.session, c.agent_name))
        .collect();
    Ok(Json(SessionList { sessions, next_cursor }))
}

/// `GET /v1/sessions/{id}`.
#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)),
    responses((status = 200, description = "The chat", body = SessionView), (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn get_session(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<SessionView>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    Ok(Json(api.view(&caller, session).await?))
}

/// `PATCH /v1/sessions/{id}` `{title?, agent_id?, cli_type?}`. Changing the agent clears the
/// CLI override unless the same request sets one.
#[utoipa::path(patch, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)), request_body = SessionPatch,
    responses((status = 200, description = "The changed chat", body = SessionView),
        (status = 404, description = "No such session, or agent, in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn update_session(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(change): JsonBody<SessionPatch>,
) -> Result<Json<SessionView>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let mut edit = ChatChange {
        title: change.title,
        agent: None,
        cli_type: change.cli_type,
    };
    if let Some(agent_id) = change.agent_id
        && session.agent_id.as_deref() != Some(&*agent_id)
    {
        edit.agent = api
            .pick_agent(&caller, session.workspace_id.as_deref(), Some(&agent_id))
            .await?;
    }
    let session = api.records.change(caller.org(), session, edit).await?;
    Ok(Json(api.view(&caller, session).await?))
}

/// `DELETE /v1/sessions/{id}`: its record, its stream and its pages.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)),
    responses((status = 204, description = "Deleted, with its events"), (status = 404, description = "No such session in the caller's organization", body = ErrorBody),
        (status = 409, description = "The global chat cannot be deleted", body = ErrorBody), Refusals))]
pub(crate) async fn delete_session(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<StatusCode, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    if session.global {
        return Err(ApiError::Conflict(
            "the organization's global chat always exists and cannot be deleted".to_owned(),
        ));
    }
    api.chats.remove(caller.org(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
