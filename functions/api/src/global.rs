//! # The global, agent-first chat
//!
//! Every organization has one chat outside workspaces that always exists: the session `global`
//! (`o/{org}/sessions/global`). Agents may write first (`POST /v1/sessions/{id}/agent-messages`,
//! with the `agent` capability) and may ask (`ask: true`): the question stays open until the
//! next person's message, which answers it (`payload.answers`) for the agent to read. The
//! second source design's routes work on it as they were: `GET /chat/history?after=<id>`,
//! `POST /chat/user_message {text}` (blank → `400`, nothing stored) and `GET /chat/stream` (on
//! the stream function).

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use spool_domain::ChatEvent;
use spool_domain::service::GLOBAL_SESSION;
use utoipa::{IntoParams, ToSchema};

use crate::{
    ApiError, ChatApi, ErrorBody,
    error::Refusals,
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

/// Who wrote a message of the global chat.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Role {
    /// A person.
    User,
    /// An agent.
    Agent,
    /// Spool itself (a notice, an error).
    System,
}

/// What else a message says, as the second source design has it.
#[derive(Debug, Default, Serialize, ToSchema)]
pub(crate) struct Meta {
    /// The question (its id) this message answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_to: Option<String>,
    /// `question` for a message that asks (answered by the next person's message).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
}

/// A message of the global chat: `{id, ts, role, author, text, meta?}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HistoryMessage {
    /// Its event's sequence number: `after` for the next poll.
    id: u64,
    /// When it was written, RFC 3339.
    #[schema(format = DateTime)]
    ts: String,
    role: Role,
    /// Who wrote it: a person's token subject, an agent's name, or `Spool`.
    author: String,
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<Meta>,
    /// A person's message: the agent's question it answers (also `meta.reply_to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    answers: Option<String>,
    /// An agent's question: its id, which the next person's message answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    question_id: Option<String>,
}

/// The global chat's messages after `after`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct History {
    /// Oldest first.
    messages: Vec<HistoryMessage>,
    /// The last event read: `after` for the next poll.
    last_id: u64,
}

/// `POST /v1/sessions/{id}/agent-messages` `{author, text, ask?}` → `202 {seq, question_id?}`.
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
    if folded == spool_domain::workspace::BUILTIN_AGENT_NAME.to_lowercase() {
        return Err(ApiError::Forbidden(format!(
            "`{}` is the built-in agent's name; post under your agent's own name",
            spool_domain::workspace::BUILTIN_AGENT_NAME
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
    let session = api.session_of(&caller, &id).await?;
    // Which credential posted it, so readers can tell agents apart whatever they call
    // themselves.
    let posted = api
        .chats
        .agent_message(
            caller.org(),
            &session,
            author,
            &message.text,
            message.ask,
            &caller.0.sub,
        )
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(AgentMessageAccepted {
            seq: posted.seq,
            question_id: posted.question_id,
        }),
    ))
}

/// `GET /chat/history?after=<id>`: the global chat's messages after `id`: people's (and their
/// answers), agents' and Spool's own (its replies and questions).
#[utoipa::path(get, path = "/chat/history", tag = "global", params(HistoryQuery),
    responses((status = 200, description = "People's and agents' messages, oldest first", body = History), Refusals))]
pub(crate) async fn history(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    QueryOf(query): QueryOf<HistoryQuery>,
) -> Result<Json<History>, ApiError> {
    let limit = query.limit.unwrap_or(HISTORY_LIMIT);
    if !(1..=MAX_HISTORY_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!("`limit` is 1 to {MAX_HISTORY_LIMIT}")));
    }
    let session = api.session_of(&caller, GLOBAL_SESSION).await?;
    let org = caller.org();
    let (messages, last_id) = match query.after {
        Some(after) => {
            // Oldest first after `after`, a window of events at a time, until `limit` messages.
            let mut messages = Vec::new();
            let mut from = after;
            loop {
                let page = api.chats.events(org, &session, from, 1000).await?;
                let done = page.events.is_empty() || page.next >= page.tail;
                for event in &page.events {
                    if messages.len() == limit {
                        break;
                    }
                    from = event.seq;
                    messages.extend(history_message(event));
                }
                if done || messages.len() == limit {
                    break;
                }
            }
            (messages, from)
        }
        None => {
            // The last `limit` messages: windows of events read back from the tail.
            let tail = api.chats.last_seq(org, &session).await?;
            let mut messages: Vec<HistoryMessage> = Vec::new();
            let mut end = tail;
            while end > 0 && messages.len() < limit {
                let start = end.saturating_sub(1000);
                let page = api
                    .chats
                    .events(org, &session, start, usize::try_from(end - start).unwrap_or(1000))
                    .await?;
                let mut window: Vec<HistoryMessage> = page.events.iter().filter_map(history_message).collect();
                window.append(&mut messages);
                messages = window;
                end = start;
            }
            let skip = messages.len().saturating_sub(limit);
            (messages.split_off(skip), tail)
        }
    };
    Ok(Json(History { messages, last_id }))
}

/// An event of the global chat as a message of its history, if it is one: people's messages
/// (and their answers), agents', and Spool's own replies, questions and notices.
fn history_message(event: &spool_domain::Event) -> Option<HistoryMessage> {
    let message = |role, author: &str, text: &str| HistoryMessage {
        id: event.seq,
        ts: event.ts.clone(),
        role,
        author: author.to_owned(),
        text: text.to_owned(),
        meta: None,
        answers: None,
        question_id: None,
    };
    let asks = || Meta {
        reply_to: None,
        tags: vec!["question".to_owned()],
    };
    Some(match &event.event {
        ChatEvent::UserMessageSubmitted(m) => HistoryMessage {
            meta: m.answers.as_ref().map(|q| Meta {
                reply_to: Some(q.clone()),
                tags: Vec::new(),
            }),
            answers: m.answers.clone(),
            ..message(Role::User, &m.author, &m.content)
        },
        ChatEvent::QuestionAnswered(a) => HistoryMessage {
            meta: Some(Meta {
                reply_to: Some(a.question_id.clone()),
                tags: Vec::new(),
            }),
            answers: Some(a.question_id.clone()),
            ..message(Role::User, "", &a.answer)
        },
        ChatEvent::AgentMessage(m) => HistoryMessage {
            meta: m.ask.then(asks),
            question_id: m.question_id.clone(),
            ..message(Role::Agent, &m.author, &m.text)
        },
        // Spool's own replies, questions and notices.
        ChatEvent::MessageEnd(end) if !end.interrupted && !end.text.is_empty() => {
            message(Role::Agent, "Spool", &end.text)
        }
        ChatEvent::AskQuestion(q) => HistoryMessage {
            meta: Some(asks()),
            question_id: Some(q.question_id.clone()),
            ..message(Role::Agent, "Spool", &q.question)
        },
        ChatEvent::System(note) => message(Role::System, "Spool", &note.message),
        _ => return None,
    })
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
