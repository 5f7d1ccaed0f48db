//! # A chat's turn as a front end's event stream
//!
//! What the AI SDK's routes and AG-UI's share (besides their writes, [`crate::writes`]): the
//! caller and their request's body; the turn to replay when a client comes back (the domain's
//! `current_turn`); and the SSE response that follows the turn's durable events ([`Follow`],
//! the one loop of every live reader) and hands each to a [`Translate`]r of the front end's
//! vocabulary, until the turn ends or waits on a person ([`respond`]).

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use futures_util::stream;
use serde::Serialize;
use spool_chat::{current_turn::find_back, session::Event};
use spool_log::{
    follow::{End, Follow, Followed},
    stream::{Chunk, Offset, Position, StreamPath},
};

use crate::wire::ui_message::{self, Progress};
use spool_edge::ApiError;

use crate::{Intent, StreamApi};

/// The longest a turn's stream stays open: under the stream function's 15-minute limit. A
/// turn still running then is resumed by the client.
const MAX_STREAM: Duration = Duration::from_secs(14 * 60);

/// The largest request body: the front ends send the whole conversation each time.
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// A front end's vocabulary: the frames one turn's events become.
pub(crate) trait Translate: Send + 'static {
    /// One frame (an SSE `data:` line's JSON).
    type Frame: Serialize + Send;
    /// The frames that open the stream.
    fn open(&mut self, out: &mut Vec<Self::Frame>);
    /// The frames `event` makes (none for other turns' events).
    fn push(&mut self, event: &Event, out: &mut Vec<Self::Frame>);
    /// After events a client has already seen: the frames that put it back where they were
    /// (a text part still open is opened again).
    fn reopen(&mut self, out: &mut Vec<Self::Frame>);
    /// Where the turn is.
    fn progress(&self) -> &Progress;
    /// The frames that end a stream the turn waits in.
    fn pause(&mut self, out: &mut Vec<Self::Frame>);
    /// The frames that end a stream cut short (its time was up, or the store failed) while
    /// the turn goes on: the client resumes.
    fn cut(&mut self, _out: &mut Vec<Self::Frame>) {}
    /// A last `data:` line after the frames, if the vocabulary has one (`[DONE]`).
    fn done_line(&self) -> Option<&'static str> {
        None
    }
}

/// The caller's session stream `sessions/{id}`, once they are known (a `401` before anything
/// of a body is read).
pub(crate) async fn authorize(api: &StreamApi, parts: &Parts, session: Option<&str>) -> Result<StreamPath, ApiError> {
    if parts.headers.get(header::AUTHORIZATION).is_none() && matches!(api.access, crate::Access::Tokens(_)) {
        return Err(ApiError::Unauthorized(
            "send a token as `Authorization: Bearer <jwt>` (get one from POST /v1/handshake)".to_owned(),
        ));
    }
    if let Some(id) = session {
        check_session_id(id)?;
    }
    let raw = session.map_or_else(|| "sessions".to_owned(), |id| format!("sessions/{id}"));
    api.resolve((&parts.headers, &parts.extensions), &parts.uri, &raw, Intent::Read)
        .await
}

/// The caller's session stream `sessions/{id}`, for a read (a resume): the token may also
/// come as `?token=`.
pub(crate) async fn session_for_read(
    api: &StreamApi,
    headers: &axum::http::HeaderMap,
    uri: &axum::http::Uri,
    id: &str,
) -> Result<StreamPath, ApiError> {
    check_session_id(id)?;
    api.resolve(
        (headers, &axum::http::Extensions::new()),
        uri,
        &format!("sessions/{id}"),
        Intent::Read,
    )
    .await
}

fn check_session_id(id: &str) -> Result<(), ApiError> {
    let ok = (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "the session id is 1 to 128 letters, digits, `_` or `-`",
        ))
    }
}

/// A front end's message id as a `client_message_id`: `{prefix}:` and a digest of the id, so
/// any id (long, empty, of any characters) is one the chat API accepts, and the same id is the
/// same message.
pub(crate) fn client_message_id(prefix: &str, id: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}:{hex}")
}

/// A request's body, up to [`MAX_BODY_BYTES`] (`413` over it).
pub(crate) async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|e| {
        let too_large = std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            ApiError::TooLarge(format!("the body is larger than {} MiB", MAX_BODY_BYTES >> 20))
        } else {
            ApiError::bad_request("the body was cut off; send it again")
        }
    })
}

/// The event in which the chat asked a person about the call `call_id` (an approval, a
/// question, a plan): `400` when it never did.
pub(crate) async fn request_event(api: &StreamApi, path: &StreamPath, call_id: &str) -> Result<Event, ApiError> {
    find_back(api.log.as_ref(), path, |e| {
        e.turn_id.is_some() && ui_message::asks_about(&e.event, call_id)
    })
    .await?
    .ok_or_else(|| ApiError::bad_request(format!("this chat never asked about `{call_id}`")))
}

/// Reads a front end's POST: the caller is known before the body is read (`401` first), then
/// the body is parsed as `what` (`400` with what was wrong).
pub(crate) async fn read_post<T: serde::de::DeserializeOwned>(
    api: &StreamApi,
    request: Request,
    what: &str,
) -> Result<(Parts, T), ApiError> {
    let (parts, body) = request.into_parts();
    authorize(api, &parts, None).await?;
    let body = read_body(body).await?;
    let parsed =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("the body is not {what}: {e}")))?;
    Ok((parts, parsed))
}

/// The turn `translate` follows, as SSE: its events after `after`, the frames of those up to
/// `seen` (a seq the client has) held back.
pub(crate) fn respond<T: Translate>(
    api: Arc<StreamApi>,
    path: StreamPath,
    translate: T,
    after: u64,
    seen: u64,
    headers: &[(&'static str, &'static str)],
) -> Response {
    let follow = api.follow(
        path.clone(),
        Position::At(Offset::after(after)),
        api.live.sse_keepalive,
        MAX_STREAM,
    );
    let reader = Reader {
        follow,
        path,
        translate,
        seen,
        started: false,
        done: false,
    };
    let body = stream::unfold(reader, |mut reader| async move {
        let bytes = reader.next().await?;
        Some((Ok::<_, std::convert::Infallible>(bytes), reader))
    });
    sse(Body::from_stream(body), headers)
}

/// A stream of `frames` alone (no turn to follow).
pub(crate) fn respond_frames<F: Serialize>(
    frames: &[F],
    done_line: Option<&str>,
    headers: &[(&'static str, &'static str)],
) -> Response {
    sse(Body::from(frame(frames, done_line)), headers)
}

fn sse(body: Body, headers: &[(&'static str, &'static str)]) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let out = response.headers_mut();
    out.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    out.insert("x-accel-buffering", HeaderValue::from_static("no"));
    for (name, value) in headers {
        out.insert(*name, HeaderValue::from_static(value));
    }
    response
}

/// `frames` as SSE `data:` lines, then `done_line` if given.
fn frame<F: Serialize>(frames: &[F], done_line: Option<&str>) -> Bytes {
    let mut out = String::new();
    for frame in frames {
        out.push_str("data: ");
        out.push_str(&serde_json::to_string(frame).unwrap_or_default());
        out.push_str("\n\n");
    }
    if let Some(line) = done_line {
        out.push_str("data: ");
        out.push_str(line);
        out.push_str("\n\n");
    }
    Bytes::from(out)
}

/// Where a turn's stream is.
struct Reader<T> {
    follow: Follow,
    path: StreamPath,
    translate: T,
    /// The last seq the client has: frames of events up to it are held back.
    seen: u64,
    started: bool,
    done: bool,
}

impl<T: Translate> Reader<T> {
    /// The next bytes to send, or `None` when the stream is over.
    async fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            self.translate.open(&mut out);
        }
        loop {
            let chunk = match self.follow.next().await {
                Followed::Chunk(chunk) => chunk,
                // Up to date, and nothing came for a keep-alive period: keep the line alive.
                Followed::KeepAlive if out.is_empty() => return Some(Bytes::from_static(b": keep-alive\n\n")),
                Followed::KeepAlive => return Some(frame(&out, None)),
                Followed::End(End::Stopped) => {
                    self.done = true;
                    return (!out.is_empty()).then(|| frame(&out, None));
                }
                Followed::End(why) => {
                    // Time is up, or the store failed (the client resumes): what was read, then
                    // the end. (A chat's stream is never closed.)
                    if let End::Failed(e) = why {
                        tracing::debug!(path = %self.path, error = %e, "ending a turn's stream");
                    }
                    return Some(self.cut(out));
                }
            };
            let events = match events(&chunk, &self.path) {
                Ok(events) => events,
                Err(e) => {
                    tracing::debug!(path = %self.path, error = %e, "ending a turn's stream");
                    return Some(self.cut(out));
                }
            };
            for event in &events {
                if event.seq <= self.seen {
                    self.translate.push(event, &mut Vec::new());
                    if event.seq == self.seen {
                        self.translate.reopen(&mut out);
                    }
                } else {
                    self.translate.push(event, &mut out);
                }
            }
            let up_to_date = chunk.up_to_date || chunk.closed;
            match self.translate.progress() {
                Progress::Ended => {
                    self.done = true;
                    return Some(frame(&out, self.translate.done_line()));
                }
                Progress::Waiting if up_to_date => {
                    self.translate.pause(&mut out);
                    self.done = true;
                    return Some(frame(&out, self.translate.done_line()));
                }
                _ if !out.is_empty() => return Some(frame(&out, None)),
                // Nothing to send: the follow reads on, or waits for the next append.
                _ => {}
            }
        }
    }

    /// `out`, then the frames of a stream cut short while the turn goes on; the end.
    fn cut(&mut self, mut out: Vec<T::Frame>) -> Bytes {
        self.done = true;
        self.translate.cut(&mut out);
        frame(&out, None)
    }
}

/// The events of the chat at `path` that `chunk` holds.
fn events(chunk: &Chunk, path: &StreamPath) -> Result<Vec<Event>, spool_log::error::Error> {
    chunk
        .messages
        .iter()
        .map(|message| {
            serde_json::from_slice(message).map_err(|e| spool_log::error::Error::Corrupt {
                what: format!("an event of `{path}`: {e}"),
            })
        })
        .collect()
}
