//! # Headers every answer carries
//!
//! The names of the Durable Streams protocol's headers (one list, for the stream function's
//! parsers and answers and for the errors that carry them), CORS for any origin (requests carry
//! bearer tokens, never cookies) and the browser security headers of the protocol.

use axum::{
    extract::Request,
    http::{HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

/// The tail offset after a response (every successful answer carries it).
pub const STREAM_NEXT_OFFSET: &str = "stream-next-offset";
/// The response holds everything the stream had when it was generated.
pub const STREAM_UP_TO_DATE: &str = "stream-up-to-date";
/// The stream is closed (on a read: and the reader reached its end).
pub const STREAM_CLOSED: &str = "stream-closed";
/// The collapsing cursor of live responses.
pub const STREAM_CURSOR: &str = "stream-cursor";
/// A writer's lexicographic sequence.
pub const STREAM_SEQ: &str = "stream-seq";
/// A sliding expiry window, in seconds.
pub const STREAM_TTL: &str = "stream-ttl";
/// An absolute expiry time (RFC 3339).
pub const STREAM_EXPIRES_AT: &str = "stream-expires-at";
/// A fork's source stream (its URL path on this server).
pub const STREAM_FORKED_FROM: &str = "stream-forked-from";
/// Where a fork diverges from its source.
pub const STREAM_FORK_OFFSET: &str = "stream-fork-offset";
/// How far past the fork offset the fork inherits.
pub const STREAM_FORK_SUB_OFFSET: &str = "stream-fork-sub-offset";
/// Set to `base64` on SSE responses of binary streams.
pub const STREAM_SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";
/// An idempotent producer's id.
pub const PRODUCER_ID: &str = "producer-id";
/// An idempotent producer's epoch.
pub const PRODUCER_EPOCH: &str = "producer-epoch";
/// An idempotent producer's batch sequence.
pub const PRODUCER_SEQ: &str = "producer-seq";
/// On a producer sequence gap: the sequence the stream expected.
pub const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
/// On a producer sequence gap: the sequence it received.
pub const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";

/// Request headers a browser may send (CORS).
pub const ALLOWED_HEADERS: &str = "content-type, authorization, if-none-match, last-event-id, stream-seq, stream-ttl, \
    stream-expires-at, stream-closed, producer-id, producer-epoch, producer-seq, stream-forked-from, \
    stream-fork-offset, stream-fork-sub-offset";
/// Response headers a browser may read (CORS).
pub const EXPOSED_HEADERS: &str = "stream-next-offset, stream-cursor, stream-up-to-date, stream-closed, \
    stream-sse-data-encoding, stream-ttl, stream-expires-at, producer-epoch, producer-seq, producer-expected-seq, \
    producer-received-seq, etag, location, content-type, retry-after, x-request-id";

/// CORS and the protocol's browser security headers on every answer; a CORS preflight
/// (`OPTIONS` with `Access-Control-Request-Method`) is answered here, whatever the path.
pub async fn browser_headers(request: Request, next: Next) -> Response {
    let preflight =
        request.method() == Method::OPTIONS && request.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    let set = |h: &mut axum::http::HeaderMap, name: header::HeaderName, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(headers, header::ACCESS_CONTROL_ALLOW_ORIGIN, "*");
    set(
        headers,
        header::ACCESS_CONTROL_ALLOW_METHODS,
        "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS",
    );
    set(headers, header::ACCESS_CONTROL_ALLOW_HEADERS, ALLOWED_HEADERS);
    set(headers, header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSED_HEADERS);
    set(headers, header::ACCESS_CONTROL_MAX_AGE, "86400");
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    headers.insert(
        header::HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("cross-origin"),
    );
    response
}
