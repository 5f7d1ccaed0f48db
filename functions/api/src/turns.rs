//! # A chat's turns
//!
//! `GET /v1/sessions/{id}/turns` and `GET /v1/sessions/{id}/turns/{turn_id}`: where each agent
//! turn is (queued, in progress, completed or failed), from the turn records the chat service
//! and the worker keep.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};
use spool_domain::{Error, TurnRecord, TurnStatus, listing::TurnQuery};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ApiError, ChatApi, ErrorBody,
    error::Refusals,
    extract::{Caller, Id, PathOf, QueryOf, next_cursor, page_after, page_limit, rfc3339_ms},
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

/// A page of a chat's turns, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TurnList {
    turns: Vec<TurnView>,
    /// Send as `cursor` (with the same filters) for the next page; `null` on the last page.
    next_cursor: Option<String>,
}

/// `GET /v1/sessions/{id}/turns`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct TurnListQuery {
    /// At most this many (1 to 1000, default 100).
    #[serde(default)]
    limit: Option<usize>,
    /// The `next_cursor` of the previous page, sent back with the same filters.
    #[serde(default)]
    cursor: Option<String>,
    /// Only the turns in this state.
    #[serde(default)]
    status: Option<TurnStatus>,
}

/// `GET /v1/sessions/{id}/turns?status=&limit=&cursor=`: a page of the chat's turns, newest
/// first (ties by id; finished ones for 7 days), and the cursor of the next.
#[utoipa::path(get, path = "/v1/sessions/{id}/turns", tag = "sessions", params(("id" = String, Path, description = SESSION_ID), TurnListQuery),
    responses((status = 200, description = "A page of the chat's turns, newest first: queued, in_progress, completed or failed", body = TurnList),
        (status = 400, description = "A `limit` out of range, or a cursor this list did not give", body = ErrorBody),
        (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_turns(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    QueryOf(query): QueryOf<TurnListQuery>,
) -> Result<Json<TurnList>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let mut select = TurnQuery {
        session_id: session.id,
        status: query.status,
        now_ms: api.clock.now_ms(),
        limit: page_limit(query.limit)?,
        after: None,
    };
    select.after = page_after(&select.scope(caller.org()), query.cursor.as_deref())?;
    let page = api.metadata.turns(caller.org(), &select).await?;
    Ok(Json(TurnList {
        next_cursor: next_cursor(&select.scope(caller.org()), page.next.as_ref()),
        turns: page.items.into_iter().map(TurnView::from).collect(),
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
        .turns(caller.org(), &TurnQuery::all(&session.id, api.clock.now_ms()))
        .await?;
    let turn = turns
        .items
        .into_iter()
        .find(|t| *t.turn_id == *turn_id)
        .ok_or_else(|| {
            ApiError::Store(Error::Missing {
                what: format!("turn `{turn_id}`"),
            })
        })?;
    Ok(Json(turn.into()))
}
