//! # The protocol's operations
//!
//! Each handler parses the request into a stream-log call and the answer into the protocol's
//! status and headers. Nothing is written before the whole request has been validated.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{Path, State},
    http::{Extensions, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use spool_edge::{
    ApiError,
    headers::{
        PRODUCER_EPOCH, PRODUCER_SEQ, STREAM_CLOSED, STREAM_CURSOR, STREAM_EXPIRES_AT, STREAM_NEXT_OFFSET, STREAM_TTL,
        STREAM_UP_TO_DATE,
    },
};
use spool_log::{
    follow::{End, Followed},
    stream::{Append, Chunk, ContentType, CreateStream, Created, Expiry, ForkRequest, Position},
};

use crate::{
    Intent, Sharing, StreamApi,
    body::{self, Use},
    protocol::{self, Live, ReadQuery},
    sse,
};

pub(crate) type Api = State<Arc<StreamApi>>;

/// Cache-Control of answers made only of sealed pages: they never change.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Cache-Control of a chunk that is not the stream's tail: its bytes never change, but a later
/// read may cut the chunk differently.
const STABLE: &str = "public, max-age=60, stale-while-revalidate=300";
/// Cache-Control of a tail answer of an open stream: revalidate (cheaply, by ETag) every time,
/// so a reader never misses an append.
const REVALIDATE: &str = "no-cache";
const NO_STORE: &str = "no-store";
/// Cache-Control of an answer to the bearers of a read grant that is not immutable (a tail, a
/// long-poll's data or its `204`): a shared cache keyed on the grant serves it to every reader
/// of the stream who asks within 5 s, and holds the readers who ask while it is on its way
/// (request collapsing). It is never wrong, only up to 5 s old: messages are a prefix of what
/// follows, and the next read starts at its `Stream-Next-Offset` with its new `Stream-Cursor`,
/// which no earlier answer was cached under.
const SHARED: &str = "public, max-age=5";

/// Response headers under construction.
#[derive(Default)]
struct Headers(HeaderMap);

impl Headers {
    fn set(&mut self, name: &'static str, value: impl ToString) -> &mut Self {
        if let Ok(value) = HeaderValue::from_str(&value.to_string()) {
            self.0.insert(HeaderName::from_static(name), value);
        }
        self
    }

    fn flag(&mut self, name: &'static str, on: bool) -> &mut Self {
        if on {
            self.set(name, "true");
        }
        self
    }

    fn respond(self, status: StatusCode, body: impl Into<Body>) -> Response {
        (status, self.0, body.into()).into_response()
    }
}

/// `OPTIONS`: a CORS preflight (the headers are added by the router's layer).
pub(crate) async fn preflight() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// The request's own URL, absolute (for `Location`): the scheme from `X-Forwarded-Proto` when a
/// proxy or Lambda's front end set it, the host from `Host`. Both come from the client, so only
/// `http`/`https` and a plain `host[:port]` are taken (no user info, path or odd characters
/// that could make the header point elsewhere); otherwise the path alone.
fn absolute_url(headers: &HeaderMap, uri: &Uri) -> String {
    url_on(
        headers,
        header::HOST.as_str(),
        uri.authority().map(|a| a.as_str()),
        uri.path(),
    )
}

/// `path` on the host the header `host_header` names (else `fallback`), as [`absolute_url`].
fn url_on(headers: &HeaderMap, host_header: &str, fallback: Option<&str>, path: &str) -> String {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let scheme = match text("x-forwarded-proto") {
        Some("https") => "https",
        _ => "http",
    };
    let plain = |host: &&str| is_plain_host(host);
    match text(host_header).filter(plain).or(fallback.filter(plain)) {
        Some(host) => format!("{scheme}://{host}{path}"),
        None => path.to_owned(),
    }
}

/// The absolute URL of `path` on this server, as clients reach it: the host a proxy names in
/// `X-Forwarded-Host` (the deployment's CloudFront Function sets it on the subscription routes,
/// whose URLs must name the distribution), else `Host`.
pub(crate) fn root_url(headers: &HeaderMap, path: &'static str) -> String {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).map(str::trim);
    url_on(headers, "x-forwarded-host", host, path)
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`, of at most 255 characters.
fn is_plain_host(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(':') && (name.starts_with('[') || !name.contains(':')) => {
            (name, Some(port))
        }
        _ => (host, None),
    };
    let name_ok = if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host.len() <= 255 && name_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_takes_only_plain_hosts_and_known_schemes() {
        let url = |host: &str, proto: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            headers.insert("x-forwarded-proto", HeaderValue::from_str(proto).unwrap());
            absolute_url(&headers, &Uri::from_static("/v1/stream/a"))
        };
        assert_eq!(
            url("spool.example:8080", "https"),
            "https://spool.example:8080/v1/stream/a"
        );
        assert_eq!(url("[::1]:80", "http"), "http://[::1]:80/v1/stream/a");
        assert_eq!(url("spool.example", "javascript"), "http://spool.example/v1/stream/a");
        let mut proxied = HeaderMap::new();
        proxied.insert(header::HOST, HeaderValue::from_static("origin.internal"));
        assert_eq!(root_url(&proxied, "/v1/stream/"), "http://origin.internal/v1/stream/");
        proxied.insert("x-forwarded-host", HeaderValue::from_static("d1.cloudfront.net"));
        proxied.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(
            root_url(&proxied, "/v1/stream/"),
            "https://d1.cloudfront.net/v1/stream/"
        );
        proxied.insert("x-forwarded-host", HeaderValue::from_static("evil/x?"));
        assert_eq!(root_url(&proxied, "/v1/stream/"), "https://origin.internal/v1/stream/");
        for evil in [
            "evil.example/x?",
            "user@evil.example",
            "evil.example:80:80",
            "a b",
            "[zz]",
        ] {
            assert_eq!(url(evil, "https"), "/v1/stream/a", "{evil}");
        }
    }
}

/// `PUT`: create the stream, or confirm that it exists with this configuration.
#[utoipa::path(put, path = "/v1/stream/{path}", tag = "streams", params(("path" = String, Path, description = "The stream's path; it may contain `/`. `sessions/{id}`, `workspaces/{id}/feed` and `audit` are read-only.")),
    request_body(description = "Optional first messages", content_type = "application/octet-stream"),
    responses((status = 201, description = "Created (headers: `Location`, `Stream-Next-Offset`)"),
        (status = 200, description = "It exists with this configuration"),
        (status = 403, description = "A read-only stream", body = spool_edge::ErrorBody),
        (status = 409, description = "It exists with another configuration", body = spool_edge::ErrorBody), (status = 400, description = "A malformed header, query or body", body = spool_edge::ErrorBody), (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 503, description = "The store is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn create(
    State(api): Api,
    Path(raw): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
) -> Result<Response, ApiError> {
    let path = api.resolve((&headers, &extensions), &uri, &raw, Intent::Create).await?;
    let content_type = protocol::content_type(&headers)?;
    let expiry = protocol::expiry(&headers)?;
    let fork = match protocol::fork(&headers)? {
        None => None,
        Some(fork) => {
            let raw_source = fork.source.strip_prefix(spool_edge::STREAM_PREFIX).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Stream-Forked-From `{}` must be a path on this server, like {}{{path}}",
                    fork.source,
                    spool_edge::STREAM_PREFIX
                ))
            })?;
            Some(ForkRequest {
                source: api
                    .resolve((&headers, &extensions), &uri, raw_source, Intent::Read)
                    .await?,
                offset: fork.offset,
                sub_offset: fork.sub_offset,
                content_type: content_type.clone(),
                expiry: (expiry != Expiry::Never).then_some(expiry),
            })
        }
    };
    let content_type = content_type.unwrap_or_else(ContentType::octet_stream);
    let closed = protocol::closed_flag(&headers);
    let initial = body::messages(&content_type, body, Use::Create)?;
    let initial_count = initial.len() as u64;
    let created = api
        .log
        .create(
            &path,
            CreateStream {
                content_type,
                expiry,
                closed,
                initial,
                fork,
            },
        )
        .await?;
    let meta = created.meta();
    // A fork's inherited messages were there before: only the initial ones are new.
    if let Created::New(_) = &created {
        let tail = meta.tail.seq();
        api.appended(&path, tail.saturating_sub(initial_count), tail).await;
    }
    let mut out = Headers::default();
    out.set(header::CONTENT_TYPE.as_str(), &meta.content_type)
        .set(STREAM_NEXT_OFFSET, meta.tail)
        .flag(STREAM_CLOSED, meta.closed)
        .set(header::CACHE_CONTROL.as_str(), NO_STORE);
    let status = match created {
        Created::New(_) => {
            out.set(header::LOCATION.as_str(), absolute_url(&headers, &uri));
            StatusCode::CREATED
        }
        Created::Existing(_) => StatusCode::OK,
    };
    Ok(out.respond(status, Body::empty()))
}

/// `POST`: append a batch, close the stream, or both at once.
#[utoipa::path(post, path = "/v1/stream/{path}", tag = "streams", params(("path" = String, Path, description = "The stream's path; it may contain `/`. `sessions/{id}`, `workspaces/{id}/feed` and `audit` are read-only.")),
    request_body(description = "Messages; a JSON stream takes one value or an array of them", content_type = "application/octet-stream"),
    responses((status = 204, description = "Appended (header `Stream-Next-Offset`)"),
        (status = 200, description = "A retried idempotent-producer batch, already appended"),
        (status = 403, description = "A read-only stream, or a stale producer epoch", body = spool_edge::ErrorBody),
        (status = 404, description = "No such stream", body = spool_edge::ErrorBody),
        (status = 409, description = "Closed, another content type, or a sequence conflict", body = spool_edge::ErrorBody),
        (status = 413, description = "Larger than the largest append", body = spool_edge::ErrorBody), (status = 400, description = "A malformed header, query or body", body = spool_edge::ErrorBody), (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 503, description = "The store is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn append(
    State(api): Api,
    Path(raw): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
) -> Result<Response, ApiError> {
    let path = api.resolve((&headers, &extensions), &uri, &raw, Intent::Write).await?;
    let close = protocol::closed_flag(&headers);
    let producer = protocol::producer(&headers)?;
    let stream_seq = protocol::stream_seq(&headers)?;
    let (content_type, messages) = if body.is_empty() {
        if !close {
            return Err(ApiError::bad_request(
                "the body is empty; send data, or Stream-Closed: true to close the stream",
            ));
        }
        // A close-only request ignores its Content-Type, which clients often add by default.
        (None, Vec::new())
    } else {
        let content_type = protocol::content_type(&headers)?
            .ok_or_else(|| ApiError::bad_request("an append with a body needs a Content-Type header"))?;
        let messages = body::messages(&content_type, body, Use::Append)?;
        (Some(content_type), messages)
    };
    let has_producer = producer.is_some();
    let ack = api
        .log
        .append(
            &path,
            Append {
                messages,
                content_type,
                stream_seq,
                producer,
                close,
                expected_tail: None,
            },
        )
        .await?;
    if let Some(appended) = ack.appended.filter(|_| !ack.duplicate) {
        api.appended(&path, appended.first.saturating_sub(1), appended.last)
            .await;
    }
    let mut out = Headers::default();
    out.set(STREAM_NEXT_OFFSET, ack.next_offset)
        .flag(STREAM_CLOSED, ack.closed)
        .set(header::CACHE_CONTROL.as_str(), NO_STORE);
    if let Some(p) = ack.producer {
        out.set(PRODUCER_EPOCH, p.epoch).set(PRODUCER_SEQ, p.seq);
    }
    // With producer headers, 200 says "appended" and 204 "already had it"; without, 204.
    let status = if has_producer && !ack.duplicate && ack.appended.is_some() {
        StatusCode::OK
    } else {
        StatusCode::NO_CONTENT
    };
    Ok(out.respond(status, Body::empty()))
}

/// `DELETE`: remove the stream and its data.
#[utoipa::path(delete, path = "/v1/stream/{path}", tag = "streams", params(("path" = String, Path, description = "The stream's path; it may contain `/`. `sessions/{id}`, `workspaces/{id}/feed` and `audit` are read-only.")),
    responses((status = 204, description = "Deleted"),
        (status = 403, description = "A read-only stream", body = spool_edge::ErrorBody),
        (status = 404, description = "No such stream", body = spool_edge::ErrorBody), (status = 400, description = "A malformed header, query or body", body = spool_edge::ErrorBody), (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 503, description = "The store is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn delete(
    State(api): Api,
    Path(raw): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let path = api.resolve((&headers, &extensions), &uri, &raw, Intent::Write).await?;
    api.log.delete(&path).await?;
    let mut out = Headers::default();
    out.set(header::CACHE_CONTROL.as_str(), NO_STORE);
    Ok(out.respond(StatusCode::NO_CONTENT, Body::empty()))
}

/// `HEAD`: the stream's metadata; never cached, and not a read for a sliding TTL.
#[utoipa::path(head, path = "/v1/stream/{path}", tag = "streams", params(("path" = String, Path, description = "The stream's path; it may contain `/`. `sessions/{id}`, `workspaces/{id}/feed` and `audit` are read-only.")),
    responses((status = 200, description = "Its metadata in headers: `Content-Type`, `Stream-Next-Offset`, `Stream-Closed`, TTL"),
        (status = 404, description = "No such stream"), (status = 401, description = "No valid token")))]
pub(crate) async fn head(
    State(api): Api,
    Path(raw): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let (path, _) = api.resolve_read((&headers, &extensions), &uri, &raw).await?;
    let meta = api.log.metadata(&path).await?;
    let mut out = Headers::default();
    out.set(header::CONTENT_TYPE.as_str(), &meta.content_type)
        .set(STREAM_NEXT_OFFSET, meta.tail)
        .flag(STREAM_CLOSED, meta.closed)
        .set(header::CACHE_CONTROL.as_str(), NO_STORE);
    match meta.expiry {
        Expiry::Never => {}
        Expiry::Ttl { seconds } => {
            out.set(STREAM_TTL, seconds);
        }
        Expiry::At { unix_ms } => {
            if let Some(at) = protocol::format_rfc3339(unix_ms) {
                out.set(STREAM_EXPIRES_AT, at);
            }
        }
    }
    Ok(out.respond(StatusCode::OK, Body::empty()))
}

/// `GET`: a catch-up read, a long-poll or server-sent events.
#[utoipa::path(get, path = "/v1/stream/{path}", tag = "streams", params(("path" = String, Path, description = "The stream's path; it may contain `/`. `sessions/{id}`, `workspaces/{id}/feed` and `audit` are read-only."),
        ("offset" = Option<String>, Query, description = "Where to read from: `-1` (the start), `now` (the tail) or an offset a response gave"),
        ("live" = Option<String>, Query, description = "`long-poll` or `sse`; without it, a catch-up read"),
        ("cursor" = Option<String>, Query, description = "The last `Stream-Cursor` (live reads through a CDN)"),
        ("token" = Option<String>, Query, description = "The bearer token, for clients that cannot set headers"),
        ("read_token" = Option<String>, Query, description = "A read grant from `POST /v1/read-tokens`, instead of a bearer token: every reader of the stream shares it, so a CDN keyed on it serves their live reads with one origin request (answers say `Cache-Control: public, max-age=5`)")),
    responses((status = 200, description = "Messages in the stream's content type, or `text/event-stream` with `live=sse` (headers: `Stream-Next-Offset`, `Stream-Up-To-Date`, `Stream-Closed`, `ETag`)", content_type = "application/octet-stream"),
        (status = 204, description = "A long-poll that saw nothing new"),
        (status = 304, description = "`If-None-Match` matched"),
        (status = 404, description = "No such stream", body = spool_edge::ErrorBody),
        (status = 410, description = "Deleted while forks of it live", body = spool_edge::ErrorBody), (status = 400, description = "A malformed header, query or body", body = spool_edge::ErrorBody), (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 503, description = "The store is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn read(
    State(api): Api,
    Path(raw): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let (path, sharing) = api.resolve_read((&headers, &extensions), &uri, &raw).await?;
    let query = ReadQuery::parse(uri.query())?;
    let from = query.offset.unwrap_or(Position::START);
    // `now` is the tail when the request comes: an answer kept for later readers would start
    // them in the past.
    let sharing = if from == Position::Now {
        Sharing::Private
    } else {
        sharing
    };
    match query.live {
        Live::Sse => sse::respond(api.clone(), path, from, query.cursor).await,
        Live::No => {
            let chunk = api.log.read(&path, from, None).await?;
            if from == Position::Now {
                return Ok(tail_answer(&chunk, StatusCode::OK, None, sharing));
            }
            Ok(chunk_answer(&chunk, &headers, None, sharing))
        }
        Live::LongPoll => {
            let long_poll = api.live.long_poll;
            let (mut chunk, mut follow) = api.follow(path, from, long_poll, long_poll).start().await?;
            if chunk.messages.is_empty() && !chunk.closed {
                match follow.next().await {
                    // The append that woke the wait (handed over from memory, or read).
                    Followed::Chunk(next) => chunk = next,
                    Followed::End(End::Failed(e)) => return Err(e.into()),
                    // The wait ran out, or the server is stopping: answer as if it ran out.
                    Followed::KeepAlive | Followed::End(End::Deadline | End::Stopped | End::Closed) => {}
                }
            }
            let cursor = Some(protocol::cursor(
                query.cursor.as_deref(),
                protocol::now_ms(),
                chunk.next_offset.seq(),
            ));
            if chunk.messages.is_empty() {
                return Ok(tail_answer(&chunk, StatusCode::NO_CONTENT, cursor, sharing));
            }
            Ok(chunk_answer(&chunk, &headers, cursor, sharing))
        }
    }
}

/// An answer with no message: a long-poll that timed out (`204`), or a catch-up from `now`
/// (`200`, with an empty body of the stream's type).
fn tail_answer(chunk: &Chunk, status: StatusCode, cursor: Option<String>, sharing: Sharing) -> Response {
    let mut out = Headers::default();
    out.set(header::CONTENT_TYPE.as_str(), &chunk.content_type)
        .set(STREAM_NEXT_OFFSET, chunk.next_offset)
        .set(STREAM_UP_TO_DATE, "true")
        .flag(STREAM_CLOSED, chunk.closed)
        .set(
            header::CACHE_CONTROL.as_str(),
            if sharing == Sharing::Shared { SHARED } else { NO_STORE },
        );
    if let Some(cursor) = cursor.filter(|_| !chunk.closed) {
        out.set(STREAM_CURSOR, cursor);
    }
    if status == StatusCode::NO_CONTENT {
        out.0.remove(header::CONTENT_TYPE);
        return out.respond(status, Body::empty());
    }
    out.respond(status, body::read_body(&chunk.content_type, &[]))
}

/// A chunk of messages (possibly none, at the tail), with its ETag; `304` when the client
/// already has exactly this answer.
fn chunk_answer(chunk: &Chunk, request: &HeaderMap, cursor: Option<String>, sharing: Sharing) -> Response {
    let etag = format!(
        "\"{}:{}:{}{}\"",
        chunk.stream_id,
        chunk.start,
        chunk.next_offset,
        if chunk.closed { ":c" } else { "" }
    );
    let cache = if chunk.immutable {
        IMMUTABLE
    } else if sharing == Sharing::Shared {
        SHARED
    } else if chunk.up_to_date && !chunk.closed {
        REVALIDATE
    } else {
        STABLE
    };
    let mut out = Headers::default();
    out.set(header::ETAG.as_str(), &etag)
        .set(header::CACHE_CONTROL.as_str(), cache);
    if let Some(cursor) = cursor.filter(|_| !chunk.closed) {
        out.set(STREAM_CURSOR, cursor);
    }
    // A shared answer does not depend on the reader's own headers: the cache revalidates.
    if sharing == Sharing::Private && if_none_match(request, &etag) {
        return out.respond(StatusCode::NOT_MODIFIED, Body::empty());
    }
    out.set(header::CONTENT_TYPE.as_str(), &chunk.content_type)
        .set(STREAM_NEXT_OFFSET, chunk.next_offset)
        .flag(STREAM_UP_TO_DATE, chunk.up_to_date)
        .flag(STREAM_CLOSED, chunk.closed);
    if chunk.content_type.essence() == ContentType::OCTET_STREAM {
        out.set(header::CONTENT_DISPOSITION.as_str(), "attachment");
    }
    out.respond(StatusCode::OK, body::read_body(&chunk.content_type, &chunk.messages))
}

/// True when `If-None-Match` lists `etag` (or is `*`).
fn if_none_match(request: &HeaderMap, etag: &str) -> bool {
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == etag || t == "*")
}
