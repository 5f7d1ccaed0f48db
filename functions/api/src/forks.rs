//! # Forks
//!
//! `POST /v1/sessions/{id}/fork {at_seq?, title?}`: a new chat whose history is this one's up to
//! and including the event `at_seq` (its last event when absent), made with the log's own stream
//! forks so nothing is copied ([`spool_chat::service::ChatService::fork`] says what the fork
//! owns: its turns, its files, its title).

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spool_chat::service::NewFork;
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{BodyBytes, Caller, Id, PathOf, optional_json_body},
    sessions::{SESSION_ID, SessionView},
};

/// What to fork; every field may be left out (a request with no body is `{}`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkRequest {
    /// The last event the fork inherits: the `seq` of an event of this chat, or 0 for none;
    /// its last event when absent.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 0)]
    at_seq: Option<Value>,
    /// The fork's title; "<this chat's title> (fork)" when absent.
    #[serde(default)]
    title: Option<String>,
}

/// A fork: the new chat's record, and what it inherited.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ForkView {
    /// The new chat.
    #[serde(flatten)]
    session: SessionView,
    /// The chat it was forked from.
    forked_from: String,
    /// The last event of that chat it inherited; its own events follow from `at_seq + 1`.
    at_seq: u64,
    /// The turns that were running at `at_seq`, which the fork ended with `agent_end`
    /// (`aborted`) so it takes messages at once.
    ended_turns: Vec<String>,
    /// How many files its inherited events name, copied into it.
    files_copied: usize,
}

/// `at_seq` as sent: a whole number from 0, or a `400` that says so.
fn at_seq(raw: Option<Value>) -> Result<Option<u64>, ApiError> {
    match raw {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(other) => Err(ApiError::BadRequest(format!(
            "`at_seq` is the seq of an event of this chat, a whole number from 0 (not {other}); leave it out to \
             fork at the chat's last event"
        ))),
    }
}

/// `POST /v1/sessions/{id}/fork`.
#[utoipa::path(post, path = "/v1/sessions/{id}/fork", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)),
    request_body(content = ForkRequest, description = "Where to fork and the fork's title; optional"),
    responses((status = 201, description = "The new chat, with where it was forked", body = ForkView),
        (status = 400, description = "An `at_seq` that is not a whole number, or beyond the chat's last event; a bad title", body = ErrorBody),
        (status = 404, description = "No such session in the caller's organization (or it was deleted)", body = ErrorBody),
        (status = 409, description = "The global chat cannot be forked; the fork would have more files than a chat may", body = ErrorBody), Refusals))]
pub(crate) async fn fork_session(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    headers: axum::http::HeaderMap,
    BodyBytes(body): BodyBytes,
) -> Result<impl IntoResponse, ApiError> {
    let request: ForkRequest = optional_json_body(&headers, &body)?;
    let at_seq = at_seq(request.at_seq)?;
    api.limit_create(&caller)?;
    let source = api.session_of(&caller, &id).await?;
    let new = NewFork {
        at_seq,
        title: request.title,
        created_by: caller.0.sub.clone(),
    };
    let forked = api.chats.fork(caller.org(), &source, new).await?;
    let view = ForkView {
        session: api.view(&caller, forked.session).await?,
        forked_from: source.id,
        at_seq: forked.at_seq,
        ended_turns: forked.ended_turns,
        files_copied: forked.files,
    };
    Ok((StatusCode::CREATED, Json(view)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_seq_is_a_whole_number_or_absent() {
        assert_eq!(at_seq(None).unwrap(), None);
        assert_eq!(at_seq(Some(Value::Null)).unwrap(), None);
        assert_eq!(at_seq(Some(serde_json::json!(7))).unwrap(), Some(7));
        for bad in [serde_json::json!(-1), serde_json::json!(1.5), serde_json::json!("3")] {
            let ApiError::BadRequest(told) = at_seq(Some(bad.clone())).unwrap_err() else {
                panic!("{bad}")
            };
            assert!(
                told.contains("whole number") && told.contains(&bad.to_string()),
                "{told}"
            );
        }
    }
}
