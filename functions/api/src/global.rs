//! # The global, agent-first chat
//!
//! Every organization has one chat outside workspaces that always exists: the session `global`
//! (`o/{org}/sessions/global`). Agents may write first (`POST /v1/sessions/{id}/agent-messages`,
//! with the `agent` capability), saying what they reply to and how they tag it (`meta`), and
//! may ask (`ask: true`): the question stays open until the next person's message, which answers
//! it (its `meta.reply_to`) for the agent to read. The second source design's routes work on it
//! as it has them: `GET /chat/history?after=<id>` (a JSON array of
//! [`Message`]s), `POST /chat/user_message {text}` (blank → `400`, nothing stored) and
//! `GET /chat/stream` (the same messages live, on the stream function).

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use spool_chat::{
    global::{AgentMeta, Message},
    service::{AgentPost, GLOBAL_SESSION},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ChatApi,
    extract::{BodyBytes, Caller, Id, JsonBody, PathOf, QueryOf, json_body},
    messages::{MAX_MESSAGE_CHARS, NewMessage},
};

/// The capability agent-first posting needs.
pub const AGENT_CAPABILITY: &str = "agent";

/// An agent's message.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewAgentMessage {
    /// Who writes (1 to 100 characters).
    author: String,
    /// The text; blank text is refused.
    text: String,
    /// Ask a question: the next person's message answers it.
    #[serde(default)]
    ask: bool,
    /// What the message replies to and how it is tagged.
    #[serde(default)]
    meta: Option<NewAgentMeta>,
}

/// What an agent says about its message: the message's `meta` carries it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewAgentMeta {
    /// The message or question it replies to (1 to 200 characters).
    #[serde(default)]
    reply_to: Option<String>,
    /// Its tags (up to 10, each 1 to 50 characters; not `question`, which `ask` sets).
    #[serde(default)]
    tags: Vec<String>,
}

/// A person's message in the global chat.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GlobalMessage {
    /// The text; blank text is refused.
    text: String,
    /// The client's id for this message: a retry with the same id answers the first result.
    #[serde(default)]
    client_message_id: Option<String>,
}

/// `?after=&limit=` of the history.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct HistoryQuery {
    /// Messages with `id` greater than this, oldest first; absent, the last `limit` messages.
    #[serde(default)]
    after: Option<u64>,
    /// How many messages at most (1 to 1000; 100 by default).
    #[serde(default)]
    limit: Option<usize>,
}

/// How many messages a history answers unless `limit` says otherwise.
const HISTORY_LIMIT: usize = 100;
/// The most it answers.
const MAX_HISTORY_LIMIT: usize = 1000;

/// An agent's message accepted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AgentMessageAccepted {
    /// The `agent_message` event's sequence number.
    seq: u64,
    /// With `ask`: the question the next person's message answers.
    question_id: Option<String>,
}

/// `POST /v1/sessions/{id}/agent-messages` `{author, text, ask?, meta?: {reply_to?, tags?}}` →
/// `202 {seq, question_id?}`.
#[utoipa::path(post, path = "/v1/sessions/{id}/agent-messages", tag = "global", params(("id" = String, Path, description = "The session (`global` for the global chat)")),
    request_body = NewAgentMessage,
    responses((status = 202, description = "Appended as `agent_message`", body = AgentMessageAccepted),
        (status = 403, description = "The token lacks the `agent` capability", body = ErrorBody),
        (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn agent_message(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    BodyBytes(body): BodyBytes,
) -> Result<impl IntoResponse, ApiError> {
    if !caller.0.can(AGENT_CAPABILITY) {
        return Err(ApiError::Forbidden(format!(
            "posting as an agent needs a token with the `{AGENT_CAPABILITY}` capability \
             (spool admin create-api-key ORG --capability {AGENT_CAPABILITY})"
        )));
    }
    let message: NewAgentMessage = json_body(&body)?;
    let author = message.author.trim();
    if author.is_empty() || author.chars().count() > 100 || author.chars().any(char::is_control) {
        return Err(ApiError::BadRequest(
            "`author` must be 1 to 100 characters, without control characters".to_owned(),
        ));
    }
    // Spool's own agent speaks through turns only; nobody else may sign as it.
    let folded: String = author.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    if folded == spool_chat::workspace::BUILTIN_AGENT_NAME.to_lowercase() {
        return Err(ApiError::Forbidden(format!(
            "`{}` is the built-in agent's name; post under your agent's own name",
            spool_chat::workspace::BUILTIN_AGENT_NAME
        )));
    }
    if message.text.trim().is_empty() {
        return Err(ApiError::BadRequest(
            "`text` is blank; send the message's text".to_owned(),
        ));
    }
    if message.text.chars().count() > MAX_MESSAGE_CHARS {
        return Err(ApiError::BadRequest("`text` is too long".to_owned()));
    }
    let meta = match message.meta {
        Some(m) => AgentMeta::new(m.reply_to, m.tags).map_err(ApiError::BadRequest)?,
        None => AgentMeta::default(),
    };
    let session = api.session_of(&caller, &id).await?;
    let post = AgentPost {
        author,
        text: &message.text,
        ask: message.ask,
        meta,
        // Which credential posted it, so readers can tell agents apart whatever they call
        // themselves.
        posted_by: &caller.0.sub,
    };
    let posted = api.chats.agent_message(caller.org(), &session, post).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(AgentMessageAccepted {
            seq: posted.seq,
            question_id: posted.question_id,
        }),
    ))
}

/// `GET /chat/history?after=<id>&limit=`: the global chat's messages (people's and their answers,
/// outside agents', Spool's replies, questions and notices) as a JSON array, oldest first.
#[utoipa::path(get, path = "/chat/history", tag = "global", params(HistoryQuery),
    responses((status = 200, description = "The messages after `after` (the last `limit` without it), oldest first; a poller's next `after` is the last one's `id`", body = Vec<Message>), Refusals))]
pub(crate) async fn history(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    QueryOf(query): QueryOf<HistoryQuery>,
) -> Result<Json<Vec<Message>>, ApiError> {
    let limit = query.limit.unwrap_or(HISTORY_LIMIT);
    if !(1..=MAX_HISTORY_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!("`limit` is 1 to {MAX_HISTORY_LIMIT}")));
    }
    let messages = api.chats.global_history(caller.org(), query.after, limit).await?;
    Ok(Json(messages))
}

/// `POST /chat/user_message` `{text, client_message_id?}`: a person's message in the global chat.
#[utoipa::path(post, path = "/chat/user_message", tag = "global", request_body = GlobalMessage,
    responses((status = 202, description = "Appended; answers the agent's open question, if any, or queues a turn", body = crate::messages::MessageAccepted),
        (status = 409, description = "A turn is pending (`turn_pending`, naming it)", body = ErrorBody), Refusals))]
pub(crate) async fn user_message(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    JsonBody(message): JsonBody<GlobalMessage>,
) -> Result<impl IntoResponse, ApiError> {
    let message = NewMessage::text(message.text, message.client_message_id);
    api.user_message(&caller, GLOBAL_SESSION, message).await
}
