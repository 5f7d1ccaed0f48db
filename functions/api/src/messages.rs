//! # A person's message
//!
//! `POST /v1/sessions/{id}/messages` (and the global chat's `POST /chat/user_message`): the
//! request is checked here and handed to the chat service
//! ([`spool_chat::service::ChatService::post_message`]), whose result is the answer.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spool_chat::service::{Accepted, Message, Posted};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, PathOf},
    sessions::SESSION_ID,
};

/// The longest message accepted, in characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 100_000;
/// The largest `client_context` accepted, as JSON.
const MAX_CONTEXT_BYTES: usize = 64 * 1024;
/// The largest message request body.
pub(crate) const MAX_MESSAGE_BODY_BYTES: usize = 1024 * 1024;
/// The most files one message may attach.
const MAX_FILES: usize = 20;

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
    /// The chat's completed files it refers to (`att_…` ids from `POST …/attachments`), at most
    /// 20; its event carries their names.
    #[serde(default)]
    files: Vec<Id>,
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
    /// Tools this client runs (the AI SDK's client tools), at most 16: the agent may call them
    /// in this message's turn; a call is a `tool_start` marked `client`, and the turn waits for
    /// `POST /v1/sessions/{id}/tool-output`.
    #[serde(default)]
    client_tools: Vec<spool_chat::event::ClientTool>,
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
            client_tools: Vec::new(),
        }
    }

    /// The same, declaring `client_tools` for its turn.
    pub(crate) fn with_client_tools(mut self, client_tools: Vec<spool_chat::event::ClientTool>) -> Self {
        self.client_tools = client_tools;
        self
    }

    /// The message the chat service takes, from `author`; `400` for what it may not be.
    fn checked(self, author: &str) -> Result<Message, ApiError> {
        if self.content.trim().is_empty() {
            return Err(ApiError::BadRequest(
                "`content` is blank; send the message's text".to_owned(),
            ));
        }
        if self.content.chars().count() > MAX_MESSAGE_CHARS {
            return Err(ApiError::BadRequest(format!(
                "`content` is longer than {MAX_MESSAGE_CHARS} characters"
            )));
        }
        if self
            .client_context
            .as_ref()
            .is_some_and(|c| c.to_string().len() > MAX_CONTEXT_BYTES)
        {
            return Err(ApiError::BadRequest(format!(
                "`client_context` is larger than {MAX_CONTEXT_BYTES} bytes as JSON"
            )));
        }
        if self.files.len() > MAX_FILES {
            return Err(ApiError::BadRequest(format!(
                "attach at most {MAX_FILES} files to a message"
            )));
        }
        if let Some(cmid) = &self.client_message_id {
            check_client_message_id(cmid)?;
        }
        spool_chat::event::ClientTool::check(&self.client_tools)?;
        Ok(Message {
            content: self.content,
            author: author.to_owned(),
            files: self.files.into_iter().map(String::from).collect(),
            metadata: self.metadata,
            client_message_id: self.client_message_id,
            queue_if_busy: matches!(self.on_busy, Some(OnBusy::Enqueue)),
            client_context: self.client_context,
            command: None,
            client_tools: self.client_tools,
            revision: None,
        })
    }
}

/// A message accepted: its event's `seq` and the turn it starts.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MessageAccepted {
    /// The `user_message_submitted` event's sequence number.
    pub(crate) seq: u64,
    /// The agent turn it queued; `null` when it answered an agent's question instead.
    pub(crate) turn_id: Option<String>,
    /// Whether this was a retry of an earlier message (same `client_message_id`).
    pub(crate) duplicate: bool,
    /// The agent's question this message answered, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    answers: Option<String>,
}

impl From<Accepted> for MessageAccepted {
    fn from(a: Accepted) -> Self {
        Self {
            seq: a.seq,
            turn_id: a.turn_id,
            duplicate: a.duplicate,
            answers: a.answers,
        }
    }
}

pub(crate) fn check_client_message_id(id: &str) -> Result<(), ApiError> {
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

/// `POST /v1/sessions/{id}/messages` `{content, files?, metadata?, client_message_id?}` →
/// `202 {seq, turn_id}`: the event is appended, then the turn is enqueued for the worker.
/// Blank content is refused and nothing is stored; a repeated `client_message_id` answers the
/// first message's `seq` and appends nothing.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)), request_body = NewMessage,
    responses((status = 202, description = "Appended as `user_message_submitted`; its turn is queued", body = MessageAccepted), (status = 404, description = "No such session in the caller's organization", body = ErrorBody),
        (status = 409, description = "A turn is pending (`turn_pending`, naming it)", body = ErrorBody),
        (status = 413, description = "The body is larger than 1 MiB", body = ErrorBody), Refusals,
        (status = 429, description = "Over a rate limit (`rate_limited`), or the workspace's monthly token budget is used up (`budget_exceeded`: nothing was appended; raise the budget or wait for the next month)", body = ErrorBody)))]
pub(crate) async fn post_message(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(message): JsonBody<NewMessage>,
) -> Result<impl IntoResponse, ApiError> {
    api.user_message(&caller, &id, message).await
}

impl ChatApi {
    /// A person's message to the caller's session `session_id`.
    pub(crate) async fn user_message(
        &self,
        caller: &Caller,
        session_id: &str,
        message: NewMessage,
    ) -> Result<(StatusCode, Json<MessageAccepted>), ApiError> {
        let message = message.checked(&caller.0.sub)?;
        let session = self.session_of(caller, session_id).await?;
        accepted(self.chats.post_message(caller.org(), &session, message).await?)
    }
}

/// A message's `202`, or the `409 turn_pending` of a chat that is busy with another turn.
pub(crate) fn accepted(posted: Posted) -> Result<(StatusCode, Json<MessageAccepted>), ApiError> {
    match posted {
        Posted::Accepted(accepted) => Ok((StatusCode::ACCEPTED, Json(accepted.into()))),
        Posted::Busy(holder) => Err(busy(
            holder,
            "wait for its agent_end, abort it, or send the message with \"on_busy\": \"enqueue\"",
        )),
    }
}

/// The `409 turn_pending` of a chat whose turn `holder` is pending, saying what to do (`next`).
pub(crate) fn busy(holder: spool_chat::session::PendingTurn, next: &str) -> ApiError {
    ApiError::Busy {
        message: format!("turn `{}` is still pending in this chat; {next}", holder.turn_id),
        turn_id: holder.turn_id,
    }
}
