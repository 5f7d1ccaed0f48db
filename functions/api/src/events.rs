//! # A chat's events, as pages
//!
//! `GET /v1/sessions/{id}/events?after=&limit=&branch=`: the history as JSON pages, for clients
//! that do not read the chat's stream (`/v1/stream/sessions/{id}`, on the stream function,
//! which holds every event): the chat's active branch ([`spool_chat::branch`]), or every event.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};
use spool_chat::session::Event;
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ChatApi,
    extract::{Caller, Id, PathOf, QueryOf},
    sessions::SESSION_ID,
};

/// Events returned by one history call at most, and by default.
const MAX_EVENTS: usize = 1000;
const DEFAULT_EVENTS: usize = 100;

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
    /// `active` (the default): the events of the chat's active branch only (an edited
    /// message's earlier versions and what followed them are left out, so a page may hold
    /// fewer than `limit`); `all`: every event.
    #[serde(default)]
    #[param(inline)]
    branch: Option<BranchFilter>,
}

/// Which of a chat's branches a read shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BranchFilter {
    /// The active branch.
    #[default]
    Active,
    /// Every event.
    All,
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
    let limit = query.limit.unwrap_or(DEFAULT_EVENTS).clamp(1, MAX_EVENTS);
    let after = match query.after {
        Some(after) => after,
        None => {
            let tail = api.chats.last_seq(caller.org(), &session).await?;
            tail.saturating_sub(limit as u64)
        }
    };
    let mut page = api.chats.events(caller.org(), &session, after, limit).await?;
    if query.branch.unwrap_or_default() == BranchFilter::Active {
        let branch = api.chats.branch_now(caller.org(), &session).await?;
        page.events.retain(|e| branch.shows(e.seq));
    }
    Ok(Json(EventList {
        up_to_date: page.next >= page.tail,
        last_seq: page.next,
        events: page.events,
    }))
}
