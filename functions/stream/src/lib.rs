//! # The stream function
//!
//! Serves the Durable Streams protocol at `/v1/stream/{path…}` over the stream log: `PUT`
//! creates, `POST` appends and closes, `DELETE` deletes, `HEAD` reads metadata and `GET` reads,
//! as a catch-up chunk, a long-poll or server-sent events. It also serves a chat's events as
//! server-sent events with their `seq` as ids (`/v1/sessions/{id}/stream`), and the global chat's
//! messages (`/chat/stream`), since this is the function that can stream on Lambda. One [`router`] runs inside
//! `spool serve`, on Lambda with response streaming and under `cargo lambda watch`.
//!
//! The protocol is in `PROTOCOL.md` of the durable-streams repository; the official conformance
//! suite runs against this Router on both backends (`make test`).

mod ag_ui;
mod ai_sdk;
mod body;
mod chat_stream;
mod handlers;
mod openapi;
pub mod protocol;
mod sse;
mod subscription_bodies;
mod subscriptions;
mod turn_stream;
pub mod wire;
pub mod writes;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::{HeaderMap, Uri, header},
    middleware,
    routing::get,
};
pub use openapi::openapi;
use spool_chat::directory::AUDIT_STREAM;
use spool_edge::{ApiError, STREAM_PREFIX};
pub use spool_log::limits::LiveSettings;
use spool_log::{
    follow::Follow,
    port::StreamLog,
    stream::{Position, StreamPath},
    subscription,
};

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

/// Who a read's answers are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sharing {
    /// The caller alone (a bearer token): a shared cache keeps them only under the caller's
    /// `Authorization` header or `token`.
    Private,
    /// Every bearer of one read grant: a shared cache keyed on the grant may serve them to all.
    Shared,
}

/// Whether a request reads, changes or creates a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Intent {
    Read,
    Write,
    Create,
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
    revocations: Option<Arc<spool_chat::revocation::Revocations>>,
    /// Where the AI SDK's routes post messages and answers.
    chat_writes: Option<Arc<dyn spool_edge::writes::ChatWrites>>,
    /// The protocol's subscriptions: their `__ds` routes, and the appends that wake them.
    subscriptions: Option<Arc<subscription::service::Subscriptions>>,
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
            chat_writes: None,
            subscriptions: None,
        }
    }

    /// The same, serving the protocol's subscriptions (`{stream-url}/__ds/...`) and waking
    /// them on appends; without it those routes answer `501`.
    #[must_use]
    pub fn with_subscriptions(mut self, subscriptions: Arc<subscription::service::Subscriptions>) -> Self {
        self.subscriptions = Some(subscriptions);
        self
    }

    /// Tells the subscriptions that `path` (`o/{org}/{rel}`) went from `before` to `tail`
    /// messages.
    async fn appended(&self, path: &StreamPath, before: u64, tail: u64) {
        let Some(subscriptions) = &self.subscriptions else {
            return;
        };
        let Some((org, rel)) = path.org_and_rel() else {
            return;
        };
        if tail > before {
            subscriptions.appended(org, rel, before, tail).await;
        }
    }

    /// Counts a write (or a creation) against the organization's rate limits.
    fn limit(&self, org: &str, extensions: &axum::http::Extensions, intent: Intent) -> Result<(), ApiError> {
        if intent == Intent::Read {
            return Ok(());
        }
        limit_write(&self.limiter, org, client_address(extensions), intent == Intent::Create)?;
        Ok(())
    }

    /// The same, posting the front ends' routes' messages and answers through `writes` (the
    /// chat API, in process or over HTTPS); without it, `POST /v1/ai-sdk/chat` answers `501`.
    #[must_use]
    pub fn with_chat_writes(mut self, writes: Arc<dyn spool_edge::writes::ChatWrites>) -> Self {
        self.chat_writes = Some(writes);
        self
    }

    /// The same, refusing the tokens of the keys in `revocations`.
    #[must_use]
    pub fn with_revocations(mut self, revocations: Arc<spool_chat::revocation::Revocations>) -> Self {
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

    /// A live read of `path` from `from` ([`Follow`]): it waits at the tail at most
    /// `keep_alive` at a time, lasts until `lasting` from now, and ends when the server stops.
    fn follow(&self, path: StreamPath, from: Position, keep_alive: Duration, lasting: Duration) -> Follow {
        Follow::new(
            self.log.clone(),
            path,
            from,
            keep_alive,
            tokio::time::Instant::now() + lasting,
        )
        .until_stopped(self.stopping.clone())
    }

    /// The stream a read names, and whether its answers may be shared: a read with a read grant
    /// (`?read_token=`, from `POST /v1/read-tokens`) and no `Authorization` header is for every
    /// bearer of that grant, so a shared cache that keys on the grant may keep its answers
    /// ([`spool_auth::ReadGrant`]); any other read is the caller's own.
    async fn resolve_read(
        &self,
        parts: (&HeaderMap, &axum::http::Extensions),
        uri: &Uri,
        raw: &str,
    ) -> Result<(StreamPath, Sharing), ApiError> {
        let (headers, extensions) = parts;
        let grant = spool_auth::read_token(uri.query()).filter(|_| !headers.contains_key(header::AUTHORIZATION));
        let (Some(token), Access::Tokens(keys)) = (grant, &self.access) else {
            return Ok((self.resolve(parts, uri, raw, Intent::Read).await?, Sharing::Private));
        };
        let grant = keys
            .verify_read(token)
            .map_err(|e| ApiError::Unauthorized(e.to_string()))?;
        spool_edge::note_caller(extensions, &grant.org);
        let path = StreamPath::parse(raw)?;
        if grant.path != path.as_str() {
            return Err(ApiError::Forbidden(
                "this read token is for another stream; get one for this stream from POST /v1/read-tokens".to_owned(),
            ));
        }
        Ok((StreamPath::in_org(&grant.org, path.as_str())?, Sharing::Shared))
    }

    /// The stream a request names, once the caller is known to be allowed to `intent` it.
    async fn resolve(
        &self,
        parts: (&HeaderMap, &axum::http::Extensions),
        uri: &Uri,
        raw: &str,
        intent: Intent,
    ) -> Result<StreamPath, ApiError> {
        let org = self.caller_org(parts, uri, intent).await?;
        let path = StreamPath::parse(raw)?;
        let p = path.as_str();
        if p == subscription::spec::RESERVED || p.starts_with("__ds/") {
            return Err(ApiError::bad_request(format!(
                "`{p}` is in the reserved __ds section: subscriptions are at {STREAM_PREFIX}__ds/subscriptions/{{id}}"
            )));
        }
        if intent != Intent::Read {
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
        self.limit(&org, parts.1, intent)?;
        Ok(StreamPath::in_org(&org, path.as_str())?)
    }

    /// The organization of the caller, once its token is checked.
    async fn caller_org(
        &self,
        parts: (&HeaderMap, &axum::http::Extensions),
        uri: &Uri,
        intent: Intent,
    ) -> Result<String, ApiError> {
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
        spool_edge::note_caller(extensions, &caller.org);
        if caller.is_runner() {
            return Err(ApiError::Forbidden(spool_auth::RUNNER_ONLY.to_owned()));
        }
        Ok(caller.org)
    }
}

/// The stream function's routes, with CORS and the browser security headers on every answer.
///
/// `max_body_bytes` bounds request bodies (the log's `max_append_bytes` plus room for JSON
/// framing); a larger body gets `413`.
pub fn router(api: StreamApi, max_body_bytes: usize) -> Router {
    use axum::routing::post;
    let routes = get(handlers::read)
        .head(handlers::head)
        .put(handlers::create)
        .post(handlers::append)
        .delete(handlers::delete)
        .options(handlers::preflight);
    let sub = |rest: &str| format!("{STREAM_PREFIX}__ds/subscriptions/{{id}}{rest}");
    let reserved = Router::new()
        .route(&format!("{STREAM_PREFIX}__ds/jwks.json"), get(subscriptions::jwks))
        .route(
            &sub(""),
            get(subscriptions::get)
                .put(subscriptions::put)
                .delete(subscriptions::delete),
        )
        .route(&sub("/streams"), post(subscriptions::add_streams))
        .route(
            &sub("/streams/{*path}"),
            axum::routing::delete(subscriptions::remove_stream),
        )
        .route(&sub("/claim"), post(subscriptions::claim))
        .route(&sub("/callback"), post(subscriptions::callback))
        .route(&sub("/ack"), post(subscriptions::ack))
        .route(&sub("/release"), post(subscriptions::release));
    with_routes(api, routes, reserved, max_body_bytes)
}

/// The stream function's Router on AWS, where it faces the internet and reads only: every read
/// of [`router`], and a `405` (`Allow: GET, HEAD, OPTIONS`) for a write, which the deployment
/// sends to the API function instead (CloudFront routes a stream's writes there, so a stream
/// keeps one URL). Its role holds no write rights.
pub fn reader(api: StreamApi) -> Router {
    async fn refuse() -> ApiError {
        ApiError::ReadOnly(
            "this endpoint only reads streams; send writes to the deployment's URL (CloudFront routes them to the API function) or its API URL".to_owned(),
        )
    }
    let routes = get(handlers::read)
        .head(handlers::head)
        .put(refuse)
        .post(refuse)
        .delete(refuse)
        .options(handlers::preflight);
    with_routes(api, routes, Router::new(), 0)
}

fn with_routes(
    api: StreamApi,
    routes: axum::routing::MethodRouter<Arc<StreamApi>>,
    reserved: Router<Arc<StreamApi>>,
    max_body_bytes: usize,
) -> Router {
    reserved
        .route(&format!("{STREAM_PREFIX}{{*path}}"), routes)
        .route(
            "/v1/sessions/{id}/stream",
            get(chat_stream::chat_events).options(handlers::preflight),
        )
        .route(
            "/chat/stream",
            get(chat_stream::global_events).options(handlers::preflight),
        )
        .route(
            "/v1/ai-sdk/chat",
            axum::routing::post(ai_sdk::post).options(handlers::preflight),
        )
        .route(
            "/v1/ai-sdk/chat/{id}/stream",
            get(ai_sdk::resume).options(handlers::preflight),
        )
        .route(
            "/v1/ag-ui/chat",
            axum::routing::post(ag_ui::post).options(handlers::preflight),
        )
        .route(
            "/v1/ag-ui/chat/{id}/stream",
            get(ag_ui::resume).options(handlers::preflight),
        )
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(browser_headers))
        .layer(middleware::from_fn(spool_edge::trace_requests))
        .with_state(Arc::new(api))
}

use spool_edge::{browser_headers, client_address, json_errors, limit_write};
