//! # A chat's turns
//!
//! `GET /v1/sessions/{id}/turns` and `GET /v1/sessions/{id}/turns/{turn_id}`: where each agent
//! turn is (queued, in progress, completed or failed), from the turn records the chat service
//! and the worker keep.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::Serialize;
use spool_domain::{Error, TurnRecord, TurnStatus};
use utoipa::ToSchema;

use crate::{
    ApiError, ChatApi, ErrorBody,
    error::Refusals,
    extract::{Caller, Id, PathOf, rfc3339_ms},
    sessions::SESSION_ID,
};

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
