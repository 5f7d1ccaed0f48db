//! # One log line per request
//!
//! Every request gets an id (`x-request-id` on its answer; a client's own id is kept when it is
//! a plain token) and one structured line when its answer starts: method, path (never the query,
//! which may carry a token), status, latency and the caller's organization. Whatever else is
//! logged while it runs (a 5xx's cause) carries the same id.

use std::{
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
    let path = request.uri().path().to_owned();
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
}
