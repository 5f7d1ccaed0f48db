//! # Live reads as server-sent events
//!
//! One response carries `data` events (a chunk of messages each) and, after each, a `control`
//! event with the next offset, the cursor and `upToDate`. It ends at the stream's end
//! (`streamClosed: true`), or after [`LiveSettings::sse_max`](crate::LiveSettings), when the
//! client resumes from the last `streamNextOffset` it saw. While idle it sends a comment line
//! every `sse_keepalive`, so no proxy on the way drops it as idle.
//!
//! The body is a stream polled by the HTTP server: when the client goes away it is dropped, and
//! with it any wait in progress. Nothing runs in the background.

use std::sync::Arc;

use axum::{
    body::Body,
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use bytes::{Bytes, BytesMut};
use futures_util::stream;
use serde_json::{Map, Value};
use spool_domain::{Chunk, Offset, Position, StreamPath, WaitOutcome};
use tokio::time::Instant;

use crate::{
    ApiError, StreamApi,
    body::{SseData, sse_data_event, sse_event},
    handlers::now_ms,
    protocol::{self, STREAM_SSE_DATA_ENCODING},
};

/// Where an SSE response is.
struct Reader {
    api: Arc<StreamApi>,
    path: StreamPath,
    encoding: SseData,
    client_cursor: Option<String>,
    deadline: Instant,
    /// A chunk read but not sent yet (the first one is read before the response starts, so a
    /// missing stream is a plain `404`).
    pending: Option<Chunk>,
    /// The offset after the last message sent.
    offset: Offset,
    done: bool,
}

/// Starts an SSE response at `from`.
pub(crate) async fn respond(
    api: Arc<StreamApi>,
    path: StreamPath,
    from: Position,
    client_cursor: Option<String>,
) -> Result<Response, ApiError> {
    let first = api.log.read(&path, from, None).await?;
    let encoding = SseData::for_type(&first.content_type);
    let reader = Reader {
        deadline: Instant::now() + api.live.sse_max,
        api,
        path,
        encoding,
        client_cursor,
        offset: first.start,
        pending: Some(first),
        done: false,
    };
    let events = stream::unfold(reader, |mut reader| async move {
        let bytes = reader.next_events().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(bytes), reader))
    });
    let mut response = (StatusCode::OK, Body::from_stream(events)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Ask proxies such as nginx not to buffer the events.
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    if encoding == SseData::Base64 {
        headers.insert(
            HeaderName::from_static(STREAM_SSE_DATA_ENCODING),
            HeaderValue::from_static("base64"),
        );
    }
    Ok(response)
}

impl Reader {
    /// The next bytes to send, or `None` when the response is over.
    async fn next_events(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let chunk = match self.pending.take() {
            Some(chunk) => chunk,
            None => match self.wait_and_read().await {
                Ok(Some(chunk)) => chunk,
                // Idle for a keep-alive period: a comment keeps the connection open.
                Ok(None) if Instant::now() < self.deadline => return Some(Bytes::from_static(b": keep-alive\n\n")),
                // Time to recycle the connection; the client resumes from its last offset.
                Ok(None) => return None,
                Err(e) => {
                    tracing::debug!(path = %self.path, error = %e, "ending an SSE response");
                    return None;
                }
            },
        };
        let mut out = BytesMut::new();
        if !chunk.messages.is_empty() {
            sse_data_event(&mut out, &chunk.content_type, self.encoding, &chunk.messages);
        }
        self.offset = chunk.next_offset;
        let mut control = Map::new();
        control.insert("streamNextOffset".into(), Value::String(chunk.next_offset.to_string()));
        if chunk.closed {
            control.insert("streamClosed".into(), Value::Bool(true));
            control.insert("upToDate".into(), Value::Bool(true));
            self.done = true;
        } else {
            let cursor = protocol::cursor(self.client_cursor.as_deref(), now_ms());
            control.insert("streamCursor".into(), Value::String(cursor));
            if chunk.up_to_date {
                control.insert("upToDate".into(), Value::Bool(true));
            }
        }
        sse_event(&mut out, "control", &Value::Object(control).to_string());
        // When the chunk was not the tail, the next wait returns at once and reads on.
        Some(out.freeze())
    }

    /// Waits for data past the offset (up to a keep-alive period or the deadline) and reads it;
    /// `None` when nothing came.
    async fn wait_and_read(&mut self) -> Result<Option<Chunk>, ApiError> {
        let now = Instant::now();
        if now >= self.deadline {
            return Ok(None);
        }
        let nap = self.api.live.sse_keepalive.min(self.deadline - now);
        match self.api.log.wait(&self.path, self.offset, nap).await? {
            WaitOutcome::TimedOut { .. } => Ok(None),
            WaitOutcome::Ready { .. } => Ok(Some(
                self.api.log.read(&self.path, Position::At(self.offset), None).await?,
            )),
        }
    }
}
