//! # One log line per request
//!
//! Every request gets an id (`x-request-id` on its answer; a client's own id is kept when it is
//! a plain token) and one structured line when its answer starts: method, path, status, latency
//! and the caller's organization. Whatever else is logged while it runs (a 5xx's cause) carries
//! the same id.
//!
//! No credential is ever logged. The query is left out whole (`?token=`, `?read_token=`), and a
//! path is logged as [`loggable_path`] has it: a credential in it (the grant of `PUT
//! /v1/uploads/{grant}`, or any word shaped like a credential Spool issues) becomes
//! `[redacted]`. Everything that logs a request's path or a refusal's message goes through it or
//! [`redact`], so no route can leak one.

use std::{
    borrow::Cow,
    sync::{Arc, Mutex},
    time::Instant,
};

use axum::{
    extract::Request,
    http::{HeaderName, HeaderValue},
    middleware::Next,
    response::Response,
};
use tracing::Instrument;

/// The request id header.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Where the caller's organization is noted once it is known, for the request's log line.
#[derive(Debug, Clone, Default)]
pub struct CallerSlot(Arc<Mutex<Option<String>>>);

impl CallerSlot {
    /// Notes the caller's organization.
    pub fn set(&self, org: &str) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(org.to_owned());
    }

    fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// Notes the caller's organization in the request's slot, if it has one.
pub fn note_caller(extensions: &axum::http::Extensions, org: &str) {
    if let Some(slot) = extensions.get::<CallerSlot>() {
        slot.set(org);
    }
}

/// What a credential in a logged path becomes.
pub const REDACTED: &str = "[redacted]";

/// The routes whose path carries a credential after this prefix.
const CREDENTIAL_ROUTES: [&str; 1] = ["/v1/uploads/"];

/// `path` as it may be logged: after a credential route's prefix (`/v1/uploads/`) everything is
/// [`REDACTED`], and so is every credential elsewhere in it ([`redact`]).
pub fn loggable_path(path: &str) -> Cow<'_, str> {
    if let Some(prefix) = CREDENTIAL_ROUTES
        .iter()
        .find(|prefix| path.len() > prefix.len() && path.starts_with(*prefix))
    {
        return Cow::Owned(format!("{prefix}{REDACTED}"));
    }
    redact(path)
}

/// `text` with every word shaped like a credential Spool issues replaced by [`REDACTED`]: a JWT
/// (a token, a read or upload grant), an API key, a webhook secret, a wake's token. A word is a
/// run of the characters such credentials are made of (`A-Z a-z 0-9 _ - .`), so one inside a
/// path, a quoted name or a sentence is found. For what is logged of a request: its path, and
/// a refusal's message, which may quote what the client sent.
pub fn redact(text: &str) -> Cow<'_, str> {
    let word_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let mut out = String::new();
    let mut copied = 0;
    let mut rest = text.char_indices().peekable();
    while let Some((start, c)) = rest.next() {
        if !word_char(c) {
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(&(i, c)) = rest.peek() {
            if !word_char(c) {
                break;
            }
            end = i + c.len_utf8();
            rest.next();
        }
        if looks_like_credential(&text[start..end]) {
            out.push_str(&text[copied..start]);
            out.push_str(REDACTED);
            copied = end;
        }
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Whether a word has the shape of a credential Spool issues.
fn looks_like_credential(word: &str) -> bool {
    // A JWT: three base64url parts, the first a JSON object (`{"` is `eyJ`).
    let jwt = word.starts_with("eyJ") && word.split('.').count() == 3;
    // `spool_{key id}_{secret}`, `whsec_{secret}`, `ds1.{org}.{generation}.{mac}`.
    let api_key = word.starts_with("spool_") && word.len() > 64;
    jwt || api_key || word.starts_with("whsec_") || word.starts_with("ds1.")
}

/// A client's id if it is a plain token of at most 64 characters, else a new one.
fn request_id(request: &Request) -> String {
    request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| {
            !id.is_empty()
                && id.len() <= 64
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        })
        .map_or_else(|| uuid::Uuid::now_v7().simple().to_string(), str::to_owned)
}

/// The middleware: the id, the span, the line.
pub async fn trace_requests(mut request: Request, next: Next) -> Response {
    let id = request_id(&request);
    let slot = CallerSlot::default();
    request.extensions_mut().insert(slot.clone());
    let method = request.method().clone();
    let path = loggable_path(request.uri().path()).into_owned();
    let started = Instant::now();
    let span = tracing::info_span!("request", request_id = %id);
    let mut response = next.run(request).instrument(span.clone()).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let status = response.status().as_u16();
    // Tenths of a millisecond: finer is noise, and a log line stays short.
    let latency_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    let org = slot.get();
    span.in_scope(|| {
        tracing::info!(%method, %path, status, latency_ms, org = org.as_deref().unwrap_or("-"), "request");
    });
    response
}

#[cfg(test)]
mod tests {
    use axum::{Router, body::Body, http::StatusCode, routing::get};
    use tower::ServiceExt;

    use super::*;

    #[tokio::test]
    async fn every_answer_has_a_request_id_and_odd_ids_are_replaced() {
        let app = Router::new()
            .route("/", get(|| async { StatusCode::OK }))
            .layer(axum::middleware::from_fn(trace_requests));
        let call = |id: Option<&'static str>| {
            let app = app.clone();
            async move {
                let mut request = Request::builder().uri("/");
                if let Some(id) = id {
                    request = request.header("x-request-id", id);
                }
                let response = app.oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
                response.headers()["x-request-id"].to_str().unwrap().to_owned()
            }
        };
        assert_eq!(call(Some("abc-1")).await, "abc-1");
        let made = call(Some("a b;c")).await;
        assert_eq!(made.len(), 32, "{made}");
        assert_eq!(call(None).await.len(), 32);
    }

    #[test]
    fn credentials_in_paths_are_redacted() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
        let key = format!("spool_{}_{}", "0".repeat(16), "a".repeat(64));
        for (path, logged) in [
            (format!("/v1/uploads/{jwt}"), "/v1/uploads/[redacted]".to_owned()),
            (
                "/v1/uploads/anything/at/all".to_owned(),
                "/v1/uploads/[redacted]".to_owned(),
            ),
            (format!("/v1/stream/{jwt}/x"), "/v1/stream/[redacted]/x".to_owned()),
            (format!("/v1/x/{key}"), "/v1/x/[redacted]".to_owned()),
            ("/v1/x/whsec_abc".to_owned(), "/v1/x/[redacted]".to_owned()),
            ("/v1/x/ds1.org.1.mac".to_owned(), "/v1/x/[redacted]".to_owned()),
            (
                "/v1/sessions/ses_1/events".to_owned(),
                "/v1/sessions/ses_1/events".to_owned(),
            ),
            ("/v1/uploads/".to_owned(), "/v1/uploads/".to_owned()),
            (
                "/v1/stream/spool_notes/eyJ".to_owned(),
                "/v1/stream/spool_notes/eyJ".to_owned(),
            ),
        ] {
            assert_eq!(loggable_path(&path), logged, "{path}");
        }
        assert_eq!(
            redact(&format!("stream `o/local/{jwt}` not found; key {key}, ok")),
            "stream `o/local/[redacted]` not found; key [redacted], ok"
        );
        assert_eq!(redact("naïve text — no credential"), "naïve text — no credential");
    }
}
