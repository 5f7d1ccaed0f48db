//! # Writing through the chat API
//!
//! The front ends' routes of the stream function (the AI SDK's, AG-UI's) post a person's
//! messages and answers through the chat API's own routes, so a write is checked, limited and
//! made idempotent in one place, whichever route it came by. [`ChatWrites`] is that port:
//! [`InProcess`] calls the API's Router under `spool serve`; [`Remote`] calls the API function
//! over HTTPS on AWS, where the stream function's role holds no write rights.

use std::time::Duration;

use axum::{
    extract::Request,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use futures_util::future::BoxFuture;

use crate::turn_stream::MAX_BODY_BYTES;

/// The chat API's routes, as the front ends' routes reach them to write.
pub trait ChatWrites: Send + Sync {
    /// Sends `request` to the chat API and answers its response.
    fn call(&self, request: Request) -> BoxFuture<'static, Result<Response, String>>;
}

/// The chat API's Router in the same process (`spool serve`).
pub struct InProcess(axum::Router);

impl InProcess {
    /// Writes through `router`.
    pub fn new(router: axum::Router) -> Self {
        Self(router)
    }
}

impl ChatWrites for InProcess {
    fn call(&self, request: Request) -> BoxFuture<'static, Result<Response, String>> {
        use tower::ServiceExt;
        let router = self.0.clone();
        Box::pin(async move { Ok(router.oneshot(request).await.into_response()) })
    }
}

/// The chat API at a URL (AWS: the API function, which this read-only function reaches over
/// HTTPS with the caller's token and CloudFront's origin header, as CloudFront would).
pub struct Remote {
    http: reqwest::Client,
    base: String,
    origin: Option<HeaderValue>,
}

impl Remote {
    /// The chat API at `base` (`https://…`, no trailing path), sending `origin_secret` in
    /// [`spool_edge::ORIGIN_HEADER`] when the API requires it.
    pub fn new(base: &str, origin_secret: Option<&str>) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
            base: base.trim_end_matches('/').to_owned(),
            origin: origin_secret.and_then(|s| HeaderValue::from_str(s).ok()),
        }
    }
}

impl ChatWrites for Remote {
    fn call(&self, request: Request) -> BoxFuture<'static, Result<Response, String>> {
        let (parts, body) = request.into_parts();
        let url = format!(
            "{}{}",
            self.base,
            parts.uri.path_and_query().map_or("/", |p| p.as_str())
        );
        let mut sent = self.http.request(parts.method, url);
        for name in [header::AUTHORIZATION, header::CONTENT_TYPE] {
            if let Some(value) = parts.headers.get(&name) {
                sent = sent.header(name, value.clone());
            }
        }
        if let Some(origin) = &self.origin {
            sent = sent.header(spool_edge::ORIGIN_HEADER, origin.clone());
        }
        Box::pin(async move {
            let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
                .await
                .map_err(|e| e.to_string())?;
            let answer = sent
                .body(body)
                .send()
                .await
                .map_err(|e| format!("the chat API could not be reached ({e}); retry"))?;
            let status = answer.status();
            let bytes = answer
                .bytes()
                .await
                .map_err(|e| format!("the chat API's answer was cut off ({e}); retry"))?;
            Ok((status, bytes).into_response())
        })
    }
}
