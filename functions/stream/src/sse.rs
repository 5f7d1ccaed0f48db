//! # Live reads as server-sent events
//!
//! One response carries `data` events (a chunk of messages each) and, after each, a `control`
//! event with the next offset, the cursor and `upToDate`. It ends at the stream's end
//! (`streamClosed: true`), or after [`LiveSettings::sse_max`](crate::LiveSettings), when the
//! client resumes from the last `streamNextOffset` it saw. While idle it sends a comment line
//! every `sse_keepalive`, so no proxy on the way drops it as idle.
//!
//! The same machinery serves a chat's events ([`respond_events`]): one SSE event per chat event,
//! `id: <seq>` and `data: <the event's JSON>`, so a browser's `EventSource` resumes by itself
//! with `Last-Event-ID`; and the global chat's messages ([`respond_messages`]): one SSE event per
//! [`Message`], `id: <its id>`, the events that are no message skipped.
//!
//! Each is a formatter over the one follow loop ([`Follow`]): what it reads, waits for and when
//! it ends are the loop's; how a chunk looks on the wire is this module's. The body is a stream
//! polled by the HTTP server: when the client goes away it is dropped, and with it any wait in
//! progress. Nothing runs in the background.

use std::{sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use bytes::{Bytes, BytesMut};
use futures_util::stream;
use serde_json::{Map, Value};
use spool_chat::{global::Message, session::Event};
use spool_edge::{ApiError, headers::STREAM_SSE_DATA_ENCODING};
use spool_log::{
    follow::{End, Follow, Followed},
    stream::{Chunk, Offset, Position, StreamPath},
};
use tokio::time::Instant;

use crate::{
    StreamApi,
    body::{SseData, sse_data_event, sse_data_lines, sse_event},
    protocol::{self, now_ms},
};

/// The comment an idle response sends every keep-alive period.
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// What an SSE response carries.
enum Format {
    /// The Durable Streams protocol's `data` and `control` events.
    Protocol {
        encoding: SseData,
        client_cursor: Option<String>,
    },
    /// A chat's events, one SSE event each with its `seq` as the id.
    ChatEvents,
    /// The global chat's messages ([`Message`]), one SSE event each with its `id` as the id;
    /// the events that are no message are skipped.
    Messages,
}

/// Where an SSE response is.
struct Reader {
    follow: Follow,
    path: StreamPath,
    format: Format,
    keep_alive: Duration,
    /// A chunk read but not sent yet (the first one is read before the response starts, so a
    /// missing stream is a plain `404`).
    pending: Option<Chunk>,
    done: bool,
    /// When it last sent something (`None` before the first): a chunk with nothing to send
    /// (events that are no message) sends nothing, unless the response has been silent for a
    /// keep-alive period.
    sent_at: Option<Instant>,
}

/// Starts an SSE response at `from`.
pub(crate) async fn respond(
    api: Arc<StreamApi>,
    path: StreamPath,
    from: Position,
    client_cursor: Option<String>,
) -> Result<Response, ApiError> {
    let (first, follow) = live(&api, path.clone(), from).start().await?;
    let encoding = SseData::for_type(&first.content_type);
    let format = Format::Protocol {
        encoding,
        client_cursor,
    };
    let mut response = sse_response(&api, path, format, first, follow);
    if encoding == SseData::Base64 {
        response.headers_mut().insert(
            HeaderName::from_static(STREAM_SSE_DATA_ENCODING),
            HeaderValue::from_static("base64"),
        );
    }
    Ok(response)
}

/// Starts an SSE response of a chat's events after `after` (a seq).
pub(crate) async fn respond_events(api: Arc<StreamApi>, path: StreamPath, after: u64) -> Result<Response, ApiError> {
    let (first, follow) = live(&api, path.clone(), Position::At(Offset::after(after)))
        .start()
        .await?;
    Ok(sse_response(&api, path, Format::ChatEvents, first, follow))
}

/// Starts an SSE response of a chat's messages after `after` (a seq).
pub(crate) async fn respond_messages(api: Arc<StreamApi>, path: StreamPath, after: u64) -> Result<Response, ApiError> {
    let (first, follow) = live(&api, path.clone(), Position::At(Offset::after(after)))
        .start()
        .await?;
    Ok(sse_response(&api, path, Format::Messages, first, follow))
}

/// The follow loop of an SSE response: a keep-alive period at a time, for `sse_max`.
fn live(api: &StreamApi, path: StreamPath, from: Position) -> Follow {
    api.follow(path, from, api.live.sse_keepalive, api.live.sse_max)
}

fn sse_response(api: &StreamApi, path: StreamPath, format: Format, first: Chunk, follow: Follow) -> Response {
    let reader = Reader {
        follow,
        path,
        format,
        keep_alive: api.live.sse_keepalive,
        pending: Some(first),
        done: false,
        sent_at: None,
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
    response
}

impl Reader {
    /// The next bytes to send, or `None` when the response is over.
    async fn next_events(&mut self) -> Option<Bytes> {
        let bytes = self.next_bytes().await?;
        self.sent_at = Some(Instant::now());
        Some(bytes)
    }

    async fn next_bytes(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            let chunk = match self.pending.take() {
                Some(chunk) => chunk,
                None => match self.follow.next().await {
                    Followed::Chunk(chunk) => chunk,
                    // Idle for a keep-alive period: a comment keeps the connection open.
                    Followed::KeepAlive => return Some(Bytes::from_static(KEEP_ALIVE)),
                    Followed::End(End::Failed(e)) => {
                        tracing::debug!(path = %self.path, error = %e, "ending an SSE response");
                        return None;
                    }
                    // Time to recycle the connection, or the server is stopping: the client
                    // resumes from its last offset. (A closed stream ended at its last chunk.)
                    Followed::End(End::Deadline | End::Stopped | End::Closed) => return None,
                },
            };
            let out = self.frame(&chunk);
            self.done = chunk.closed;
            if !out.is_empty() {
                // When the chunk was not the tail, the follow reads on at once.
                return Some(out.freeze());
            }
            match self.sent_at {
                // The first read of an up-to-date chat: a comment starts the response.
                None => return Some(Bytes::from_static(b": up to date\n\n")),
                // Only events that are no message for a keep-alive period (a long answer's deltas).
                Some(at) if at.elapsed() >= self.keep_alive => return Some(Bytes::from_static(KEEP_ALIVE)),
                // Nothing to send: wait for more.
                Some(_) => {}
            }
        }
    }

    /// `chunk` in the response's format (empty when it has nothing to send).
    fn frame(&self, chunk: &Chunk) -> BytesMut {
        let mut out = BytesMut::new();
        match &self.format {
            Format::Protocol {
                encoding,
                client_cursor,
            } => {
                if !chunk.messages.is_empty() {
                    sse_data_event(&mut out, &chunk.content_type, *encoding, &chunk.messages);
                }
                let mut control = Map::new();
                control.insert("streamNextOffset".into(), Value::String(chunk.next_offset.to_string()));
                if chunk.closed {
                    control.insert("streamClosed".into(), Value::Bool(true));
                    control.insert("upToDate".into(), Value::Bool(true));
                } else {
                    let cursor = protocol::cursor(client_cursor.as_deref(), now_ms(), chunk.next_offset.seq());
                    control.insert("streamCursor".into(), Value::String(cursor));
                    if chunk.up_to_date {
                        control.insert("upToDate".into(), Value::Bool(true));
                    }
                }
                sse_event(&mut out, "control", &Value::Object(control).to_string());
            }
            Format::ChatEvents => {
                for (seq, message) in (chunk.start.seq() + 1..).zip(&chunk.messages) {
                    out.extend_from_slice(format!("id: {seq}\n").as_bytes());
                    sse_data_lines(&mut out, &String::from_utf8_lossy(message));
                }
            }
            Format::Messages => {
                for raw in &chunk.messages {
                    let event: Event = match serde_json::from_slice(raw) {
                        Ok(event) => event,
                        Err(e) => {
                            tracing::error!(path = %self.path, error = %e, "an event of a chat that does not decode");
                            continue;
                        }
                    };
                    if let Some(message) = Message::of(&event) {
                        out.extend_from_slice(format!("id: {}\n", message.id).as_bytes());
                        let json = serde_json::to_string(&message).expect("a message serializes");
                        sse_data_lines(&mut out, &json);
                    }
                }
            }
        }
        out
    }
}
