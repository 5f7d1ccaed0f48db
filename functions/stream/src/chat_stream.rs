//! # A chat's live reads
//!
//! `GET /v1/sessions/{id}/stream` serves a chat's events and `GET /chat/stream` the global
//! chat's messages, both as server-sent events over [`sse`]'s live reader, each SSE event's
//! `id:` a seq, so a reconnecting `EventSource` resumes strictly after what it saw.

use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::{Extensions, HeaderMap, Uri},
    response::Response,
};
use spool_chat::{
    global,
    service::{GLOBAL_SESSION, ensure_global_stream},
};
use spool_edge::ApiError;
use spool_log::stream::StreamPath;

use crate::{Intent, StreamApi, handlers::Api, protocol, sse};

/// `GET /v1/sessions/{id}/stream`: a chat's events as server-sent events, `id: <seq>` each,
/// from after `Last-Event-ID` (what a browser's `EventSource` sends when it reconnects), else
/// `?after=<seq>`, else the start.
#[utoipa::path(get, path = "/v1/sessions/{id}/stream", tag = "sessions",
    params(("id" = String, Path, description = "The session"),
        ("after" = Option<u64>, Query, description = "Events with `seq` greater than this"),
        ("Last-Event-ID" = Option<u64>, Header, description = "What `EventSource` sends when it reconnects; wins over `after`"),
        ("token" = Option<String>, Query, description = "The bearer token (`EventSource` cannot set headers)")),
    responses((status = 200, description = "Server-sent events, one per event, `id: <seq>`, `data:` the event's JSON", content_type = "text/event-stream"),
        (status = 404, description = "No such session in the caller's organization", body = spool_edge::ErrorBody), (status = 400, description = "A malformed header, query or body", body = spool_edge::ErrorBody), (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 503, description = "The store is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn chat_events(
    State(api): Api,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    session_events(api, &id, &uri, &headers).await
}

/// How many messages `GET /chat/stream` starts with when it resumes from nothing.
const CHAT_STREAM_LAST: usize = 50;
/// The most it starts with (`?limit=`).
const MAX_CHAT_STREAM_LAST: usize = 1000;

/// `GET /chat/stream`: the global chat's messages (as `GET /chat/history` answers them) as
/// server-sent events, `id: <message id>` each: after `Last-Event-ID` (what a browser's
/// `EventSource` sends when it reconnects), else `?after=<id>`, else the last `limit` (50)
/// messages; then each new one live.
#[utoipa::path(get, path = "/chat/stream", tag = "global",
    params(("after" = Option<u64>, Query, description = "Messages with `id` greater than this"),
        ("limit" = Option<usize>, Query, description = "Without `after` or `Last-Event-ID`: how many of the last messages to start with (1 to 1000; 50 by default)"),
        ("Last-Event-ID" = Option<u64>, Header, description = "What `EventSource` sends when it reconnects; wins over `after`"),
        ("token" = Option<String>, Query, description = "The bearer token (`EventSource` cannot set headers)")),
    responses((status = 200, description = "The global chat's messages as server-sent events: `id:` the message's `id`, `data:` the message `{id, ts, role, author, text, meta}`", content_type = "text/event-stream"), (status = 400, description = "A malformed header, query or body", body = spool_edge::ErrorBody), (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 503, description = "The store is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn global_events(State(api): Api, uri: Uri, headers: HeaderMap) -> Result<Response, ApiError> {
    let (path, resume) = chat_stream_start(&api, GLOBAL_SESSION, &uri, &headers).await?;
    let after = match resume {
        Some(after) => after,
        None => {
            let limit = limit_param(uri.query())?.unwrap_or(CHAT_STREAM_LAST);
            let last = global::last_messages(api.log.as_ref(), &path, limit).await?;
            last.first().map_or(0, |first| first.id - 1)
        }
    };
    sse::respond_messages(api.clone(), path, after).await
}

/// `?limit=` of `GET /chat/stream`, checked.
fn limit_param(query: Option<&str>) -> Result<Option<usize>, ApiError> {
    let mut found = None;
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if key == "limit" {
            let limit = value
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_CHAT_STREAM_LAST).contains(n))
                .ok_or_else(|| ApiError::bad_request(format!("`limit` is 1 to {MAX_CHAT_STREAM_LAST}")))?;
            if found.replace(limit).is_some() {
                return Err(ApiError::bad_request("give `limit` at most once"));
            }
        }
    }
    Ok(found)
}

async fn session_events(api: Arc<StreamApi>, id: &str, uri: &Uri, headers: &HeaderMap) -> Result<Response, ApiError> {
    let (path, after) = chat_stream_start(&api, id, uri, headers).await?;
    sse::respond_events(api.clone(), path, after.unwrap_or(0)).await
}

/// The stream of the caller's session `id`, and where a live read of it resumes: after
/// `Last-Event-ID`, else `?after=`, else `None`; refused past the chat's last event.
async fn chat_stream_start(
    api: &StreamApi,
    id: &str,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(StreamPath, Option<u64>), ApiError> {
    // Reads take no rate-limit token: no extensions needed.
    let path = api
        .resolve(
            (headers, &Extensions::new()),
            uri,
            &format!("sessions/{id}"),
            Intent::Read,
        )
        .await?;
    if id == GLOBAL_SESSION
        && let Err(spool_log::error::Error::NotFound { .. }) = api.log.metadata(&path).await
    {
        // The global chat exists from start-up: a read before anyone wrote in it makes its
        // stream (as its first write would).
        ensure_global_stream(api.log.as_ref(), &path).await?;
    }
    let last_event_id = headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be the seq of an event"))
        })
        .transpose()?;
    let after = match last_event_id {
        Some(seq) => Some(seq),
        None => protocol::after_param(uri.query())?,
    };
    if let Some(after) = after {
        let tail = api.log.metadata(&path).await?.tail.seq();
        if after > tail {
            return Err(ApiError::bad_request(format!(
                "the chat has {tail} events; resume from a seq up to that"
            )));
        }
    }
    Ok((path, after))
}
