//! # The stream function
//!
//! Serves the Durable Streams protocol at `/v1/stream/{path…}` over the stream log: `PUT`
//! creates, `POST` appends and closes, `DELETE` deletes, `HEAD` reads metadata and `GET` reads,
//! as a catch-up chunk, a long-poll or server-sent events. It also serves a chat's events as
//! server-sent events with their `seq` as ids (`/v1/sessions/{id}/stream`), since this is the
//! function that can stream on Lambda. One [`router`] runs inside
//! `spool serve`, on Lambda with response streaming and under `cargo lambda watch`.
//!
//! The protocol is in `PROTOCOL.md` of the durable-streams repository; the official conformance
//! suite runs against this Router on both backends (`make test`).

mod body;
mod error;
mod handlers;
mod openapi;
pub mod protocol;
mod sse;

use std::sync::Arc;

use axum::{
    Router,
    extract::{DefaultBodyLimit, Request},
    http::{HeaderMap, HeaderValue, Uri, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
pub use error::{ApiError, ErrorBody, ErrorDetail};
pub use openapi::openapi;
pub use spool_domain::LiveSettings;
use spool_domain::{StreamLog, StreamPath, directory::AUDIT_STREAM};

/// Where the stream routes live: a stream `{path}` is at `/v1/stream/{path}`.
pub const STREAM_PREFIX: &str = "/v1/stream/";

/// Room for JSON framing on top of the log's largest append, in a request body.
pub const BODY_SLACK_BYTES: usize = 64 * 1024;

/// Who may use which stream.
///
/// Streams are namespaced by organization: the path a client names, `{path}`, is stored as
/// `o/{org}/{path}`, so a token of one organization cannot even name another's streams (they
/// answer `404`, like streams that do not exist). Session streams (`sessions/{id}`), workspace
/// feeds (`workspaces/{id}/feed`) and the audit stream (`audit`) are read-only here: the chat
/// API writes them.
pub use spool_auth::Access;

/// Whether a request reads, changes or creates a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Intent {
    Read,
    Write,
    Create,
}

/// The address of a request's client, when the server that took it records one
/// (`spool serve` does; on Lambda, API Gateway's throttling stands in for per-address limits).
pub fn client_address(extensions: &axum::http::Extensions) -> Option<std::net::IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// Takes one write of `org` (and of the client's address), and one creation if `create`.
pub fn limit_write(
    limiter: &spool_auth::RateLimiter,
    org: &str,
    address: Option<std::net::IpAddr>,
    create: bool,
) -> Result<(), spool_auth::Limited> {
    use spool_auth::Limit;
    limiter.check(Limit::WriteByOrg, org)?;
    if let Some(address) = address {
        limiter.check(Limit::WriteFromAddress, &address.to_string())?;
    }
    if create {
        limiter.check(Limit::CreateByOrg, org)?;
    }
    Ok(())
}

/// Everything the stream function's handlers share.
pub struct StreamApi {
    log: Arc<dyn StreamLog>,
    access: Access,
    live: LiveSettings,
    /// Turns `true` when the server stops: live responses end at once.
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
    /// Rate limits on writes and creations.
    limiter: Arc<spool_auth::RateLimiter>,
    /// Revoked API keys, whose tokens are refused.
    revocations: Option<Arc<spool_domain::revocation::Revocations>>,
}

impl StreamApi {
    /// The stream function over `log`.
    pub fn new(log: Arc<dyn StreamLog>, access: Access, live: LiveSettings) -> Self {
        Self {
            log,
            access,
            live,
            stopping: None,
            limiter: Arc::new(spool_auth::RateLimiter::new(spool_auth::RateLimits::OFF)),
            revocations: None,
        }
    }

    /// The same, refusing the tokens of the keys in `revocations`.
    #[must_use]
    pub fn with_revocations(mut self, revocations: Arc<spool_domain::revocation::Revocations>) -> Self {
        self.revocations = Some(revocations);
        self
    }

    /// The same, limiting writes and creations with `limiter` (shared with the chat API, so an
    /// organization's writes count once whichever route they take).
    #[must_use]
    pub fn with_rate_limiter(mut self, limiter: Arc<spool_auth::RateLimiter>) -> Self {
        self.limiter = limiter;
        self
    }

    /// The same, ending its live responses (SSE, long-polls) as soon as `stopping` turns
    /// `true`, so a server that stops does not wait out their lifetimes.
    #[must_use]
    pub fn with_shutdown(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    /// Completes when the server stops (never, without [`Self::with_shutdown`]).
    async fn stopping(&self) {
        if let Some(mut stopping) = self.stopping.clone()
            && stopping.wait_for(|stop| *stop).await.is_ok()
        {
            return;
        }
        std::future::pending::<()>().await;
    }

    /// The stream a request names, once the caller is known to be allowed to `intent` it.
    async fn resolve(
        &self,
        parts: (&HeaderMap, &axum::http::Extensions),
        uri: &Uri,
        raw: &str,
        intent: Intent,
    ) -> Result<StreamPath, ApiError> {
        let (headers, extensions) = parts;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        // A token in the URL (`?token=`, for EventSource) is taken for reads only.
        let query = (intent == Intent::Read).then(|| uri.query()).flatten();
        let caller = self
            .access
            .caller(authorization, query, now)
            .map_err(|e| ApiError::Unauthorized(e.to_string()))?;
        if let Some(revocations) = &self.revocations
            && revocations.is_revoked(&caller.sub).await
        {
            return Err(ApiError::Unauthorized(
                "the API key this token was issued for has been revoked; use another key".to_owned(),
            ));
        }
        let org = caller.org;
        let path = StreamPath::parse(raw)?;
        if intent != Intent::Read {
            let p = path.as_str();
            if p.starts_with("sessions/") {
                return Err(ApiError::Forbidden(
                    "session streams are read-only here; write to a session through /v1/sessions/{id}".to_owned(),
                ));
            }
            if p.starts_with("workspaces/") {
                return Err(ApiError::Forbidden(
                    "workspace feeds are read-only: the chat API writes them".to_owned(),
                ));
            }
            if p == AUDIT_STREAM || p.starts_with(&format!("{AUDIT_STREAM}/")) {
                return Err(ApiError::Forbidden(
                    "the audit stream is read-only: Spool writes it as credentials are used".to_owned(),
                ));
            }
        }
        if intent != Intent::Read {
            limit_write(
                &self.limiter,
                &org,
                client_address(extensions),
                intent == Intent::Create,
            )?;
        }
        Ok(StreamPath::parse(format!("o/{org}/{path}"))?)
    }
}

/// The stream function's routes, with CORS and the browser security headers on every answer.
///
/// `max_body_bytes` bounds request bodies (the log's `max_append_bytes` plus room for JSON
/// framing); a larger body gets `413`.
pub fn router(api: StreamApi, max_body_bytes: usize) -> Router {
    let routes = get(handlers::read)
        .head(handlers::head)
        .put(handlers::create)
        .post(handlers::append)
        .delete(handlers::delete)
        .options(handlers::preflight);
    Router::new()
        .route(&format!("{STREAM_PREFIX}{{*path}}"), routes)
        .route(
            "/v1/sessions/{id}/stream",
            get(handlers::chat_events).options(handlers::preflight),
        )
        .route(
            "/chat/stream",
            get(handlers::global_events).options(handlers::preflight),
        )
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(browser_headers))
        .with_state(Arc::new(api))
}

/// Refusals that axum makes before a handler runs (a body over the limit, a path that is not
/// UTF-8, a method the route does not take) answer in plain text or with no body; this puts
/// them, and any other error without a JSON body, in the contract's JSON. Answers to `HEAD`
/// keep their empty bodies.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let head = request.method() == axum::http::Method::HEAD;
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if head || is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let code = match status.as_u16() {
        400 => "bad_request",
        404 => "no_route",
        405 => "method_not_allowed",
        408 => "request_timeout",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        _ if status.is_server_error() => "internal",
        _ => "refused",
    };
    let message = match (text.is_empty(), status.canonical_reason()) {
        (false, _) => text,
        (true, Some(reason)) => reason.to_owned(),
        (true, None) => status.to_string(),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body = serde_json::to_vec(&ErrorBody::new(code, message)).unwrap_or_default();
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// CORS (any origin: requests carry bearer tokens, never cookies) and the headers of the
/// protocol's section on browser security, on every answer; a CORS preflight (`OPTIONS` with
/// `Access-Control-Request-Method`) is answered here, whatever the path. The chat API's router
/// uses it too, so a UI on another origin (S3 behind CloudFront) can call both.
pub async fn browser_headers(request: Request, next: Next) -> Response {
    let preflight = request.method() == axum::http::Method::OPTIONS
        && request.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        axum::http::StatusCode::NO_CONTENT.into_response()
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
    set(headers, header::ACCESS_CONTROL_ALLOW_HEADERS, protocol::ALLOWED_HEADERS);
    set(
        headers,
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        protocol::EXPOSED_HEADERS,
    );
    set(headers, header::ACCESS_CONTROL_MAX_AGE, "86400");
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    headers.insert(
        header::HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("cross-origin"),
    );
    response
}
