//! # Sessions (chats), their messages and their events
//!
//! `POST|GET /v1/sessions`, `GET|PATCH|DELETE /v1/sessions/{id}`,
//! `POST /v1/sessions/{id}/messages` and `GET /v1/sessions/{id}/events`. A session's events
//! live in its stream (`/v1/stream/sessions/{id}` for Durable Streams clients); its record
//! keeps what lists need. Every write becomes an event in the stream before anything acts on
//! it: a message is `user_message_submitted`, numbered with its `seq`.

use std::{collections::HashMap, sync::Arc};

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spool_domain::{
    Agent, ChatEvent, ContentType, CreateStream, Error, Event, FeedEvent, PendingTurn, ProducerClaim, RequestKind,
    Session, StreamPath, TurnJob, TurnRecord, TurnStatus,
    chat::event::{QuestionAnswered, UserMessage},
    claim::{self, CLAIM_GRACE_MS, ClaimStores, Reconciled},
    session::{EventDraft, EventPage, append_events, preview},
    workspace::{CliType, new_id},
};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ApiError, ChatApi, ErrorBody,
    error::Refusals,
    extract::{Caller, Id, JsonBody, Patch, PathOf, QueryOf, rfc3339_ms},
};

/// The longest message accepted, in characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 100_000;
/// The largest `client_context` accepted, as JSON.
const MAX_CONTEXT_BYTES: usize = 64 * 1024;
/// The largest message request body.
pub(crate) const MAX_MESSAGE_BODY_BYTES: usize = 1024 * 1024;
/// Events returned by one history call at most, and by default.
const MAX_EVENTS: usize = 1000;
const DEFAULT_EVENTS: usize = 100;

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
    global: bool,
    capabilities: Vec<String>,
    #[schema(format = DateTime)]
    created_at: String,
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
            last_active_at: rfc3339_ms(s.last_active_ms),
            id: s.id,
            workspace_id: s.workspace_id,
            agent_id: s.agent_id,
            agent_name,
            title: s.title,
            cli_type: s.cli_override,
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
}

/// What a message does while another turn is pending.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OnBusy {
    /// Refuse it with `409 turn_pending` (the default).
    Reject,
    /// Queue it behind the pending turn.
    Enqueue,
}

/// A person's message.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewMessage {
    /// The text; blank text is refused.
    content: String,
    /// Attachments (references to uploaded files), at most 20.
    #[serde(default)]
    files: Vec<Value>,
    /// The client's own data, kept with the event.
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
    /// The client's id for this message: a retry with the same id answers the first result.
    #[serde(default)]
    client_message_id: Option<String>,
    #[serde(default)]
    on_busy: Option<OnBusy>,
    /// Context from the person's local companion (a selection, the open file, …), kept with
    /// the event; it reaches the agent's prompt only in a chat with the `context_for_query`
    /// capability. At most 64 KiB as JSON.
    #[serde(default)]
    client_context: Option<Value>,
}

impl NewMessage {
    /// A plain text message.
    pub(crate) fn text(content: String, client_message_id: Option<String>) -> Self {
        Self {
            content,
            files: Vec::new(),
            metadata: None,
            client_message_id,
            on_busy: None,
            client_context: None,
        }
    }
}

/// `GET /v1/sessions/{id}/events`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// Events with `seq` greater than this; without it, the last `limit` events.
    #[serde(default)]
    after: Option<u64>,
    /// At most this many (1 to 1000, default 100).
    #[serde(default)]
    limit: Option<usize>,
}

/// Chats, newest activity first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionList {
    sessions: Vec<SessionView>,
}

/// A message accepted: its event's `seq` and the turn it starts.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MessageAccepted {
    /// The `user_message_submitted` event's sequence number.
    seq: u64,
    /// The agent turn it queued; `null` when it answered an agent's question instead.
    turn_id: Option<String>,
    /// Whether this was a retry of an earlier message (same `client_message_id`).
    duplicate: bool,
    /// The agent's question this message answered, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    answers: Option<String>,
}

/// A page of a session's events.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventList {
    /// The events, oldest first.
    events: Vec<Event>,
    /// The `seq` of the last event returned (`after` of the next page).
    last_seq: u64,
    /// Whether the page reaches the stream's end.
    up_to_date: bool,
}

/// The session in a path.
const SESSION_ID: &str = "The session (`global` is the organization's global chat)";

fn check_client_message_id(id: &str) -> Result<(), ApiError> {
    let ok = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(
            "`client_message_id` must be 1 to 128 letters, digits, `-`, `_`, `.` or `:`".to_owned(),
        ))
    }
}

impl ChatApi {
    /// The caller's session `id`, or `404`.
    pub(crate) async fn session_of(&self, caller: &Caller, id: &str) -> Result<Session, ApiError> {
        if id == crate::global::GLOBAL_SESSION {
            let now = self.clock.now_ms();
            return Ok(crate::global::ensure_global_session(
                self.metadata.as_ref(),
                self.log.as_ref(),
                caller.org(),
                now,
            )
            .await?);
        }
        self.metadata.session(caller.org(), id).await?.ok_or_else(|| {
            ApiError::Store(Error::Missing {
                what: format!("session `{id}`"),
            })
        })
    }

    async fn view(&self, caller: &Caller, session: Session) -> Result<SessionView, ApiError> {
        let name = match &session.agent_id {
            Some(id) => self.metadata.agent(caller.org(), id).await?.map(|a| a.name),
            None => None,
        };
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
        self.workspace_of(caller, ws).await?;
        let agents = self.metadata.agents(caller.org(), ws).await?;
        Ok(agents.into_iter().find(|a| a.builtin))
    }

    /// Deletes a session: its stream, then its record.
    pub(crate) async fn remove_session(&self, org: &str, id: &str) -> Result<(), ApiError> {
        match self.log.delete(&Session::stream(org, id)?).await {
            Ok(()) | Err(Error::NotFound { .. } | Error::Gone { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.metadata.delete_session(org, id).await?;
        Ok(())
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
    let now = api.clock.now_ms();
    let session = Session {
        id: new_id("ses"),
        workspace_id: agent
            .as_ref()
            .map(|a| a.workspace_id.clone())
            .or(new.workspace_id.map(String::from)),
        agent_id: agent.as_ref().map(|a| a.id.clone()),
        title: new.title.map_or_else(|| "New chat".to_owned(), |t| t.trim().to_owned()),
        cli_override: None,
        global: false,
        capabilities: Vec::new(),
        created_ms: now,
        last_active_ms: now,
        preview: String::new(),
        pending_turn: None,
    };
    session.validate()?;
    let json = ContentType::parse("application/json")?;
    api.log
        .create(&Session::stream(caller.org(), &session.id)?, CreateStream::new(json))
        .await?;
    api.metadata.create_session(caller.org(), &session).await?;
    tracing::info!(org = %caller.org(), session = %session.id, "session created");
    let view = SessionView::new(session, agent.map(|a| a.name));
    Ok((StatusCode::CREATED, Json(view)))
}

/// `GET /v1/sessions?workspace_id=&limit=`: newest activity first.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(ListQuery),
    responses((status = 200, description = "Chats, newest activity first", body = SessionList), Refusals))]
pub(crate) async fn list_sessions(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    QueryOf(query): QueryOf<ListQuery>,
) -> Result<Json<SessionList>, ApiError> {
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let sessions = api
        .metadata
        .sessions(caller.org(), query.workspace_id.as_deref(), limit)
        .await?;
    let names: HashMap<String, String> = match &query.workspace_id {
        Some(ws) => api
            .metadata
            .agents(caller.org(), ws)
            .await?
            .into_iter()
            .map(|a| (a.id, a.name))
            .collect(),
        None => HashMap::new(),
    };
    let list: Vec<SessionView> = sessions
        .into_iter()
        .map(|s| {
            let name = s.agent_id.as_ref().and_then(|id| names.get(id).cloned());
            SessionView::new(s, name)
        })
        .collect();
    Ok(Json(SessionList { sessions: list }))
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
    let mut session = api.session_of(&caller, &id).await?;
    if let Some(title) = change.title {
        session.title = title.trim().to_owned();
    }
    if let Some(agent_id) = change.agent_id
        && session.agent_id.as_deref() != Some(&*agent_id)
    {
        let agent = api
            .pick_agent(&caller, session.workspace_id.as_deref(), Some(&agent_id))
            .await?;
        session.agent_id = agent.map(|a| a.id);
        session.cli_override = None;
    }
    change.cli_type.apply(&mut session.cli_override);
    session.validate()?;
    api.metadata.update_session(caller.org(), &session).await?;
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
    api.remove_session(caller.org(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/sessions/{id}/messages` `{content, files?, metadata?, client_message_id?}` →
/// `202 {seq, turn_id}`: the event is appended, then the turn is enqueued for the worker.
/// Blank content is refused and nothing is stored; a repeated `client_message_id` answers the
/// first message's `seq` and appends nothing.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)), request_body = NewMessage,
    responses((status = 202, description = "Appended as `user_message_submitted`; its turn is queued", body = MessageAccepted), (status = 404, description = "No such session in the caller's organization", body = ErrorBody),
        (status = 409, description = "A turn is pending (`turn_pending`, naming it)", body = ErrorBody),
        (status = 413, description = "The body is larger than 1 MiB", body = ErrorBody), Refusals))]
pub(crate) async fn post_message(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(message): JsonBody<NewMessage>,
) -> Result<impl IntoResponse, ApiError> {
    api.user_message(&caller, &id, message).await
}

impl ChatApi {
    /// Appends a person's message to a session and asks for the turn it starts. A message in a
    /// session where an agent asked a question (`agent-messages` with `ask`) answers the oldest
    /// such question instead (`payload.answers`), for the asking agent to read; it starts no
    /// turn of Spool's own.
    pub(crate) async fn user_message(
        &self,
        caller: &Caller,
        session_id: &str,
        message: NewMessage,
    ) -> Result<(StatusCode, Json<MessageAccepted>), ApiError> {
        if message.content.trim().is_empty() {
            return Err(ApiError::BadRequest(
                "`content` is blank; send the message's text".to_owned(),
            ));
        }
        if message.content.chars().count() > MAX_MESSAGE_CHARS {
            return Err(ApiError::BadRequest(format!(
                "`content` is longer than {MAX_MESSAGE_CHARS} characters"
            )));
        }
        if message
            .client_context
            .as_ref()
            .is_some_and(|c| c.to_string().len() > MAX_CONTEXT_BYTES)
        {
            return Err(ApiError::BadRequest(format!(
                "`client_context` is larger than {MAX_CONTEXT_BYTES} bytes as JSON"
            )));
        }
        if message.files.len() > 20 {
            return Err(ApiError::BadRequest("attach at most 20 files to a message".to_owned()));
        }
        if let Some(cmid) = &message.client_message_id {
            check_client_message_id(cmid)?;
        }
        let session = self.session_of(caller, session_id).await?;
        let path = Session::stream(caller.org(), &session.id)?;
        let producer = message.client_message_id.as_ref().map(|cmid| ProducerClaim {
            id: format!("msg:{cmid}"),
            epoch: 0,
            seq: 0,
        });
        // An agent's open question (one no turn of Spool's waits on) is what this answers.
        let open = self.metadata.open_requests(caller.org(), &session.id).await?;
        // In the global chat, a plain window onto the agent-first chat, the next message answers
        // Spool's own open question too (elsewhere clients answer with `POST …/question`).
        if session.global
            && let Some(question) = open
                .iter()
                .find(|r| r.kind == RequestKind::Question && r.turn_id.is_some())
        {
            let answer = ChatEvent::QuestionAnswered(QuestionAnswered {
                question_id: question.id.clone(),
                answer: message.content.clone(),
            });
            let answered = self
                .answer(caller, &session.id, RequestKind::Question, &question.id, answer)
                .await;
            match answered {
                Ok((status, Json(done))) => {
                    let accepted = MessageAccepted {
                        seq: done.seq,
                        turn_id: done.turn_id,
                        duplicate: false,
                        answers: Some(question.id.clone()),
                    };
                    return Ok((status, Json(accepted)));
                }
                // The question had its answer already (a crash left it listed): this message
                // is a message of its own.
                Err(ApiError::AnsweredAlready(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let mut answers = None;
        for request in open {
            if request.kind == RequestKind::Question
                && request.turn_id.is_none()
                && let Some(taken) = self
                    .metadata
                    .take_request(caller.org(), &session.id, &request.id, Some(RequestKind::Question))
                    .await?
            {
                answers = Some(taken);
                break;
            }
        }
        let mut turn_id = answers.is_none().then(|| new_id("turn"));
        let now = self.clock.now_ms();
        // One pending turn per session: a message while one is pending is refused, unless it asks
        // to queue behind it, or it is a retry of the very message that started it (which takes
        // that turn's id, so whichever attempt's append wins, the event names the claimed turn).
        let mut claimed = None;
        let mut adopted = None;
        if let Some(turn_id) = &turn_id
            && !matches!(message.on_busy, Some(OnBusy::Enqueue))
        {
            let claim = PendingTurn {
                turn_id: turn_id.clone(),
                client_message_id: message.client_message_id.clone(),
                since_ms: now,
            };
            let mut result = self.metadata.claim_turn(caller.org(), &session.id, &claim).await?;
            // A claim a crash may have left behind (its message never appended, or its turn
            // never queued) is questioned once it is old enough.
            if let Err(holder) = &result
                && holder
                    .client_message_id
                    .as_ref()
                    .is_none_or(|c| Some(c) != message.client_message_id.as_ref())
                && self
                    .reconcile_claim(caller.org(), &session.id, holder, CLAIM_GRACE_MS)
                    .await?
                    == Reconciled::Released
            {
                result = self.metadata.claim_turn(caller.org(), &session.id, &claim).await?;
            }
            match result {
                Ok(()) => claimed = Some(turn_id.clone()),
                Err(holder)
                    if holder.client_message_id.is_some() && holder.client_message_id == message.client_message_id =>
                {
                    adopted = Some(holder.turn_id);
                }
                Err(holder) => {
                    if let Some(question) = &answers {
                        self.metadata.open_request(caller.org(), &session.id, question).await?;
                    }
                    return Err(ApiError::Busy {
                        turn_id: holder.turn_id.clone(),
                        message: format!(
                            "turn `{}` is still pending in this chat; wait for its agent_end, abort it, \
                             or send the message with \"on_busy\": \"enqueue\"",
                            holder.turn_id
                        ),
                    });
                }
            }
        }
        if adopted.is_some() {
            turn_id = adopted;
        }
        let content = UserMessage {
            content: message.content.clone(),
            author: caller.0.sub.clone(),
            files: message.files,
            metadata: message.metadata,
            client_context: message.client_context.filter(|c| !c.is_null()),
            answers: answers.as_ref().map(|q| q.id.clone()),
        };
        let draft = EventDraft {
            event: ChatEvent::UserMessageSubmitted(content),
            client_message_id: message.client_message_id.clone(),
            turn_id: turn_id.clone(),
        };
        let appended = match append_events(
            self.log.as_ref(),
            &path,
            &session.id,
            std::slice::from_ref(&draft),
            producer,
            &rfc3339_ms(now),
            None,
        )
        .await
        {
            Ok(appended) => appended,
            Err(e) => {
                if let Some(question) = &answers {
                    self.metadata.open_request(caller.org(), &session.id, question).await?;
                }
                if let Some(turn) = &claimed {
                    self.metadata.release_turn(caller.org(), &session.id, turn).await?;
                }
                return Err(e.into());
            }
        };
        if appended.duplicate {
            // The first message's answer: its seq and its turn, enqueued again in case the first
            // attempt failed after its append (the queue drops a turn it already has).
            let first = self.event_at(&path, appended.first).await?;
            let turn = first.and_then(|e| e.turn_id);
            if let Some(claim) = &claimed
                && turn.as_ref() != Some(claim)
            {
                // This retry claimed the chat after the first attempt's turn ended: give it back.
                self.metadata.release_turn(caller.org(), &session.id, claim).await?;
            }
            if let Some(question) = &answers {
                // A retry: the first attempt answered whatever it answered.
                self.metadata.open_request(caller.org(), &session.id, question).await?;
            }
            if let Some(turn_id) = &turn {
                self.enqueue_turn(caller.org(), &session.id, turn_id, appended.first)
                    .await?;
            }
            let accepted = MessageAccepted {
                seq: appended.first,
                turn_id: turn,
                duplicate: true,
                answers: None,
            };
            return Ok((StatusCode::ACCEPTED, Json(accepted)));
        }
        if let Some(turn_id) = &turn_id {
            self.enqueue_turn(caller.org(), &session.id, turn_id, appended.first)
                .await?;
        }
        let preview = preview(&message.content);
        self.metadata
            .touch_session(caller.org(), &session.id, now, &preview)
            .await?;
        if let Some(ws) = &session.workspace_id {
            let event = FeedEvent::MessageAdded {
                session_id: session.id.clone(),
                seq: appended.first,
                preview,
            };
            self.feed(caller.org(), ws, &event).await?;
        }
        let accepted = MessageAccepted {
            seq: appended.first,
            turn_id,
            duplicate: false,
            answers: answers.map(|q| q.id),
        };
        Ok((StatusCode::ACCEPTED, Json(accepted)))
    }
}

impl ChatApi {
    /// Reconciles the session's claim `holder` ([`spool_domain::claim`]), if it is older than
    /// `grace_ms`.
    pub(crate) async fn reconcile_claim(
        &self,
        org: &str,
        session_id: &str,
        holder: &PendingTurn,
        grace_ms: i64,
    ) -> Result<Reconciled, ApiError> {
        let stores = ClaimStores {
            sessions: self.metadata.as_ref(),
            log: self.log.as_ref(),
            turns: self.turns.as_ref(),
        };
        let now = self.clock.now_ms();
        Ok(claim::reconcile(&stores, org, session_id, holder, now, grace_ms).await?)
    }

    /// Asks the worker for the turn `turn_id` of a session, triggered by event `seq`.
    pub(crate) async fn enqueue_turn(
        &self,
        org: &str,
        session_id: &str,
        turn_id: &str,
        seq: u64,
    ) -> Result<(), ApiError> {
        let job = TurnJob {
            org: org.to_owned(),
            session_id: session_id.to_owned(),
            turn_id: turn_id.to_owned(),
            trigger_seq: seq,
        };
        // Queued, unless the turn is further along already (a resume, a retried message).
        let record = TurnRecord::at(turn_id, seq, TurnStatus::Queued, None, self.clock.now_ms());
        self.metadata.record_turn(org, session_id, &record).await?;
        self.turns.enqueue(&job).await?;
        Ok(())
    }

    /// The event with sequence number `seq` of a session stream.
    async fn event_at(&self, path: &StreamPath, seq: u64) -> Result<Option<Event>, ApiError> {
        Ok(self.read_events(path, seq.saturating_sub(1), 1).await?.events.pop())
    }

    /// Up to `limit` events of a session stream after `after` (a seq), oldest first.
    pub(crate) async fn read_events(&self, path: &StreamPath, after: u64, limit: usize) -> Result<EventPage, ApiError> {
        Ok(spool_domain::session::read_events(self.log.as_ref(), path, after, limit).await?)
    }
}

/// `GET /v1/sessions/{id}/events?after=&limit=`: events with `seq > after`, oldest first (the
/// last 100 when `after` is absent).
#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "sessions", params(("id" = String, Path, description = SESSION_ID), EventsQuery),
    responses((status = 200, description = "Events with `seq > after`, oldest first", body = EventList), (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_events(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    QueryOf(query): QueryOf<EventsQuery>,
) -> Result<Json<EventList>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let path = Session::stream(caller.org(), &session.id)?;
    let limit = query.limit.unwrap_or(DEFAULT_EVENTS).clamp(1, MAX_EVENTS);
    let after = match query.after {
        Some(after) => after,
        None => {
            let tail = api.log.metadata(&path).await?.tail.seq();
            tail.saturating_sub(limit as u64)
        }
    };
    let page = api.read_events(&path, after, limit).await?;
    Ok(Json(EventList {
        up_to_date: page.next >= page.tail,
        last_seq: page.next,
        events: page.events,
    }))
}

/// A turn as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TurnView {
    turn_id: String,
    status: TurnStatus,
    /// How it ended (`complete`, `aborted`, `error`), or what it waits on.
    detail: Option<String>,
    /// The seq of the message that started it.
    trigger_seq: u64,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
    /// When a finished turn's record goes (7 days after it finished).
    #[schema(format = DateTime)]
    expires_at: Option<String>,
}

impl From<TurnRecord> for TurnView {
    fn from(t: TurnRecord) -> Self {
        Self {
            created_at: rfc3339_ms(t.created_ms),
            updated_at: rfc3339_ms(t.updated_ms),
            expires_at: t.expires_ms.map(rfc3339_ms),
            turn_id: t.turn_id,
            status: t.status,
            detail: t.detail,
            trigger_seq: t.trigger_seq,
        }
    }
}

/// A chat's turns, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TurnList {
    turns: Vec<TurnView>,
}

/// `GET /v1/sessions/{id}/turns`: the chat's turns, newest first (finished ones for 7 days).
#[utoipa::path(get, path = "/v1/sessions/{id}/turns", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)),
    responses((status = 200, description = "The chat's turns, newest first: queued, in_progress, completed or failed", body = TurnList),
        (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_turns(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<TurnList>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let turns = api
        .metadata
        .turns(caller.org(), &session.id, api.clock.now_ms(), 100)
        .await?;
    Ok(Json(TurnList {
        turns: turns.into_iter().map(TurnView::from).collect(),
    }))
}

/// `GET /v1/sessions/{id}/turns/{turn_id}`.
#[utoipa::path(get, path = "/v1/sessions/{id}/turns/{turn_id}", tag = "sessions",
    params(("id" = String, Path, description = SESSION_ID), ("turn_id" = String, Path, description = "The turn")),
    responses((status = 200, description = "Where the turn is", body = TurnView),
        (status = 404, description = "No such session or turn in the caller's organization (or it expired)", body = ErrorBody), Refusals))]
pub(crate) async fn get_turn(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf((id, turn_id)): PathOf<(Id, Id)>,
) -> Result<Json<TurnView>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let turns = api
        .metadata
        .turns(caller.org(), &session.id, api.clock.now_ms(), usize::MAX)
        .await?;
    let turn = turns.into_iter().find(|t| *t.turn_id == *turn_id).ok_or_else(|| {
        ApiError::Store(Error::Missing {
            what: format!("turn `{turn_id}`"),
        })
    })?;
    Ok(Json(turn.into()))
}
