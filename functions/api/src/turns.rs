//! # A chat's turns
//!
//! `GET /v1/sessions/{id}/turns` and `GET /v1/sessions/{id}/turns/{turn_id}`: where each agent
//! turn is (queued, in progress, completed or failed), from the turn records the chat service
//! and the worker keep. A queued turn that waits for its organization's bound on turns running at
//! once (`SPOOL_ORG_TURN_CONCURRENCY`, under `spool serve`) says how many of the organization's
//! turns must finish before it starts (`queued_behind`), as the queue counts them when asked:
//! the UI shows "Queued behind N turns" from it. Nothing is written for it: it is read from the
//! queue, so it is never stale and costs nothing while no one looks. On AWS the turns queue has
//! no such bound (SQS hands every chat's turn to the worker function as it comes, up to the
//! template's `TurnsMaximumConcurrency`), and a queued turn carries none.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};
use spool_chat::{
    listing::TurnQuery,
    session::{TurnRecord, TurnStatus},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ChatApi,
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
    /// A queued turn waiting for its organization's bound on turns running at once: how many
    /// of the organization's turns must finish before it starts (0: it is next). Absent when
    /// it waits on nothing of the kind (it runs, its chat's earlier turn holds it, or the
    /// queue has no such bound, as on AWS).
    #[serde(skip_serializing_if = "Option::is_none")]
    queued_behind: Option<u64>,
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
            queued_behind: None,
        }
    }
}

impl ChatApi {
    /// The view of `turn` of chat `session_id`, with its place in its organization's line
    /// when it is queued.
    async fn turn_view(&self, org: &str, session_id: &str, turn: TurnRecord) -> Result<TurnView, ApiError> {
        let queued = turn.status == TurnStatus::Queued;
        let mut view = TurnView::from(turn);
        if queued {
            view.queued_behind = self
                .turns
                .queued_behind(org, session_id, &view.turn_id, self.org_turn_concurrency)
                .await?;
        }
        Ok(view)
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
    responses((status = 200, description = "A page of the chat's turns, newest first: queued (with `queued_behind` when it waits for its organization's bound), in_progress, completed or failed", body = TurnList),
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
    let page = api.chats.turns(caller.org(), &select).await?;
    let mut turns = Vec::with_capacity(page.items.len());
    for turn in page.items {
        turns.push(api.turn_view(caller.org(), &select.session_id, turn).await?);
    }
    Ok(Json(TurnList {
        next_cursor: next_cursor(&select.scope(caller.org()), page.next.as_ref()),
        turns,
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
    let turn = api.chats.turn(caller.org(), &session.id, &turn_id).await?;
    Ok(Json(api.turn_view(caller.org(), &session.id, turn).await?))
}
