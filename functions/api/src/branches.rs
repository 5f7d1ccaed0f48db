//! # Edit, regenerate, and earlier versions
//!
//! - `POST /v1/sessions/{id}/messages/{seq}/edit {content}`: a new version of a person's
//!   message, with new text, answered as a message is.
//! - `POST /v1/sessions/{id}/regenerate {seq?}`: the answer to the message `seq` (the active
//!   branch's last message when absent) answered again, from the same text.
//! - `POST /v1/sessions/{id}/messages/{seq}/select`: an earlier version back on the active
//!   branch, with what followed it.
//!
//! The chat keeps every event; each of these starts a branch, and what agents see and
//! `GET …/events` shows is the active one ([`spool_chat::branch`]). The rules are the chat
//! service's ([`spool_chat::service::Revise`]); here the requests are read.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use spool_chat::service::{Revise, Selected};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{BodyBytes, Caller, Id, JsonBody, PathOf, optional_json_body},
    messages::{MAX_MESSAGE_CHARS, MessageAccepted, accepted, busy, check_client_message_id},
    sessions::SESSION_ID,
};

/// What a busy chat's refusal of a branch tells the caller to do.
const WAIT: &str = "wait for its agent_end or abort it, then try again";

/// A message's new text.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Edit {
    /// The new text; blank text is refused.
    content: String,
    /// The client's id for the new version: a retry with the same id answers the first result.
    #[serde(default)]
    client_message_id: Option<String>,
}

/// What to answer again; every field may be left out (a request with no body is `{}`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Regenerate {
    /// The person's message whose answer to make again: the `seq` of a `user_message_submitted`
    /// on the active branch; its last one when absent.
    #[serde(default)]
    seq: Option<u64>,
    /// The client's id for the new version: a retry with the same id answers the first result.
    #[serde(default)]
    client_message_id: Option<String>,
}

/// An earlier version chosen.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BranchChosen {
    /// Whether the active branch changed (`false`: the version was on it already).
    changed: bool,
    /// The `branch_selected` event's seq, when it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
}

/// `POST /v1/sessions/{id}/messages/{seq}/edit`.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages/{seq}/edit", tag = "sessions",
    params(("id" = String, Path, description = SESSION_ID), ("seq" = u64, Path, description = "The person's message (a `user_message_submitted`'s seq) on the active branch")),
    request_body = Edit,
    responses((status = 202, description = "Appended as a new version (`user_message_submitted` with a `revision`); its turn is queued", body = MessageAccepted),
        (status = 400, description = "Blank or too long text; the seq is not a person's message, or not on the active branch", body = ErrorBody),
        (status = 404, description = "No such session, or no event at that seq", body = ErrorBody),
        (status = 409, description = "A turn is pending (`turn_pending`, naming it)", body = ErrorBody), Refusals))]
pub(crate) async fn edit(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf((id, seq)): PathOf<(Id, u64)>,
    JsonBody(edit): JsonBody<Edit>,
) -> Result<impl IntoResponse, ApiError> {
    let revise = Revise::Edit {
        seq,
        content: edit.content,
        client_message_id: edit.client_message_id,
    };
    api.revise(&caller, &id, revise).await
}

/// `POST /v1/sessions/{id}/regenerate`.
#[utoipa::path(post, path = "/v1/sessions/{id}/regenerate", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)),
    request_body(content = Regenerate, description = "Which message's answer to make again; optional"),
    responses((status = 202, description = "The message appended again as a new version (`revision.kind` `regenerate`); its turn is queued", body = MessageAccepted),
        (status = 400, description = "The seq is not a person's message, or not on the active branch; the chat has no message", body = ErrorBody),
        (status = 404, description = "No such session, or no event at that seq", body = ErrorBody),
        (status = 409, description = "A turn is pending (`turn_pending`, naming it)", body = ErrorBody), Refusals))]
pub(crate) async fn regenerate(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    headers: axum::http::HeaderMap,
    BodyBytes(body): BodyBytes,
) -> Result<impl IntoResponse, ApiError> {
    let request: Regenerate = optional_json_body(&headers, &body)?;
    let revise = Revise::Regenerate {
        seq: request.seq,
        client_message_id: request.client_message_id,
    };
    api.revise(&caller, &id, revise).await
}

/// `POST /v1/sessions/{id}/messages/{seq}/select`.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages/{seq}/select", tag = "sessions",
    params(("id" = String, Path, description = SESSION_ID), ("seq" = u64, Path, description = "A person's message (a `user_message_submitted`'s seq): an earlier version, or any message off the active branch")),
    responses((status = 200, description = "The message is on the active branch, with what followed it when it was last shown (`branch_selected` appended, unless it was there already)", body = BranchChosen),
        (status = 400, description = "The seq is not a person's message", body = ErrorBody),
        (status = 404, description = "No such session, or no event at that seq", body = ErrorBody),
        (status = 409, description = "A turn is pending (`turn_pending`, naming it)", body = ErrorBody), Refusals))]
pub(crate) async fn select(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf((id, seq)): PathOf<(Id, u64)>,
) -> Result<Json<BranchChosen>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    match api
        .chats
        .select_version(caller.org(), &session, seq, &caller.0.sub)
        .await?
    {
        Selected::Appended { seq } => Ok(Json(BranchChosen {
            changed: true,
            seq: Some(seq),
        })),
        Selected::Shown => Ok(Json(BranchChosen {
            changed: false,
            seq: None,
        })),
        Selected::Busy(holder) => Err(busy(holder, WAIT)),
    }
}

impl ChatApi {
    /// A new version of a person's message in the caller's session `session_id`: its text
    /// and client id checked as a message's are, then the chat service's rules.
    pub(crate) async fn revise(
        &self,
        caller: &Caller,
        session_id: &str,
        revise: Revise,
    ) -> Result<(StatusCode, Json<MessageAccepted>), ApiError> {
        let client_message_id = match &revise {
            Revise::Edit {
                content,
                client_message_id,
                ..
            } => {
                if content.trim().is_empty() {
                    return Err(ApiError::bad_request("`content` is blank; send the message's new text"));
                }
                if content.chars().count() > MAX_MESSAGE_CHARS {
                    return Err(ApiError::BadRequest(format!(
                        "`content` is longer than {MAX_MESSAGE_CHARS} characters"
                    )));
                }
                client_message_id
            }
            Revise::Regenerate { client_message_id, .. } => client_message_id,
        };
        if let Some(cmid) = client_message_id {
            check_client_message_id(cmid)?;
        }
        let session = self.session_of(caller, session_id).await?;
        match self.chats.revise(caller.org(), &session, revise, &caller.0.sub).await? {
            spool_chat::service::Posted::Busy(holder) => Err(busy(holder, WAIT)),
            posted => accepted(posted),
        }
    }
}
