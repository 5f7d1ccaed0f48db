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

use axum::{Json, body::Bytes, extract::State, http::StatusCode, response::IntoResponse};
use serde::Deserialize;
use serde_json::{Value, json};
use spool_domain::{
    ContentType, CreateStream, Error, Metadata, OpenRequest, RequestKind, Session, StreamLog,
    session::{EventDraft, EventKind, append_events, preview},
    workspace::new_id,
};

use crate::{
    ApiError, ChatApi,
    extract::{Caller, Id, PathOf, QueryOf, json_body, rfc3339_ms},
    sessions::NewMessage,
};

/// The global chat's session id.
pub const GLOBAL_SESSION: &str = "global";

/// The capability agent-first posting needs.
pub const AGENT_CAPABILITY: &str = "agent";

/// Makes the organization's global chat unless it exists; returns it.
pub async fn ensure_global_session(
    metadata: &dyn Metadata,
    log: &dyn StreamLog,
    org: &str,
    now_ms: i64,
) -> Result<Session, Error> {
    if let Some(session) = metadata.session(org, GLOBAL_SESSION).await? {
        return Ok(session);
    }
    log.create(
        &Session::stream(org, GLOBAL_SESSION)?,
        CreateStream::new(ContentType::parse("application/json")?),
    )
    .await?;
    let session = Session {
        id: GLOBAL_SESSION.to_owned(),
        workspace_id: None,
        agent_id: None,
        title: "Global chat".to_owned(),
        cli_override: None,
        global: true,
        capabilities: Vec::new(),
        created_ms: now_ms,
        last_active_ms: now_ms,
        preview: String::new(),
        pending_turn: None,
    };
    match metadata.create_session(org, &session).await {
        Ok(()) => Ok(session),
        Err(Error::Exists { .. }) => metadata
            .session(org, GLOBAL_SESSION)
            .await?
            .ok_or_else(|| Error::Missing {
                what: "the global session".to_owned(),
            }),
        Err(e) => Err(e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentMessage {
    author: String,
    text: String,
    #[serde(default)]
    ask: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserMessage {
    text: String,
    #[serde(default)]
    client_message_id: Option<String>,
}

/// `?after=` of the history.
#[derive(Debug, Deserialize)]
pub(crate) struct HistoryQuery {
    #[serde(default)]
    after: Option<u64>,
}

/// `POST /v1/sessions/{id}/agent-messages` `{author, text, ask?}` → `202 {seq, question_id?}`.
pub(crate) async fn agent_message(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    if !caller.0.can(AGENT_CAPABILITY) {
        return Err(ApiError::Forbidden(format!(
            "posting as an agent needs a token with the `{AGENT_CAPABILITY}` capability \
             (spool admin create-api-key ORG --capability {AGENT_CAPABILITY})"
        )));
    }
    let message: AgentMessage = json_body(&body)?;
    if message.author.trim().is_empty() || message.author.chars().count() > 100 {
        return Err(ApiError::BadRequest("`author` must be 1 to 100 characters".to_owned()));
    }
    if message.text.trim().is_empty() {
        return Err(ApiError::BadRequest(
            "`text` is blank; send the message's text".to_owned(),
        ));
    }
    if message.text.chars().count() > crate::sessions::MAX_MESSAGE_CHARS {
        return Err(ApiError::BadRequest("`text` is too long".to_owned()));
    }
    let session = api.session_of(&caller, &id).await?;
    let question_id = message.ask.then(|| new_id("q"));
    let mut payload = json!({ "author": message.author.trim(), "text": message.text, "ask": message.ask });
    if let Some(q) = &question_id {
        payload["question_id"] = Value::String(q.clone());
    }
    let draft = EventDraft {
        kind: EventKind::Harness,
        kind_type: "agent_message".to_owned(),
        payload,
        client_message_id: None,
        turn_id: None,
    };
    let now = api.clock.now_ms();
    let path = Session::stream(caller.org(), &session.id)?;
    let appended = append_events(api.log.as_ref(), &path, &session.id, &[draft], None, &rfc3339_ms(now)).await?;
    if let Some(q) = &question_id {
        let request = OpenRequest {
            id: q.clone(),
            kind: RequestKind::Question,
            turn_id: None,
            opened_seq: appended.first,
        };
        api.metadata.open_request(caller.org(), &session.id, &request).await?;
    }
    api.metadata
        .touch_session(caller.org(), &session.id, now, &preview(&message.text))
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "seq": appended.first, "question_id": question_id })),
    ))
}

/// `GET /chat/history?after=<id>`: the global chat's messages after `id`, people's and agents'.
pub(crate) async fn history(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    QueryOf(query): QueryOf<HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    let session = api.session_of(&caller, GLOBAL_SESSION).await?;
    let path = Session::stream(caller.org(), &session.id)?;
    let page = api.read_events(&path, query.after.unwrap_or(0), 1000).await?;
    let messages: Vec<Value> = page
        .events
        .iter()
        .filter_map(|event| {
            let p = &event.payload;
            match event.kind_type.as_str() {
                "user_message_submitted" => Some(json!({
                    "id": event.seq, "role": "user", "author": p["author"], "text": p["content"],
                    "ts": event.ts, "answers": p.get("answers"),
                })),
                "agent_message" => Some(json!({
                    "id": event.seq, "role": "agent", "author": p["author"], "text": p["text"],
                    "ts": event.ts, "ask": p["ask"], "question_id": p.get("question_id"),
                })),
                _ => None,
            }
        })
        .collect();
    let next = page.next;
    Ok(Json(json!({ "messages": messages, "last_id": next })))
}

/// `POST /chat/user_message` `{text, client_message_id?}`: a person's message in the global chat.
pub(crate) async fn user_message(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let message: UserMessage = json_body(&body)?;
    let message = NewMessage::text(message.text, message.client_message_id);
    api.user_message(&caller, GLOBAL_SESSION, message).await
}
