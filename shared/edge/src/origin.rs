//! # Only through the deployment's CDN
//!
//! On AWS the functions answer only requests that came through the deployment's CloudFront
//! distribution: CloudFront adds a secret header ([`ORIGIN_HEADER`]) to every request it sends
//! to an origin, and [`require_origin`] refuses (`403`) a request without it ([`OriginCheck`],
//! in `spool_auth`, says which values it accepts). So the API Gateway endpoint and the stream
//! function's URL, which are public by nature, cannot be used to go around the edge's WAF rate
//! limits and headers. The secret comes from Secrets Manager (`SPOOL_ORIGIN_SECRET`, in the
//! secret `SPOOL_SECRET_ARNS` names), like the signing secret.

use std::sync::Arc;

use crate::{ErrorBody, respond};
use axum::{
    extract::{Request, State},
    http::StatusCode,
    middleware::Next,
    response::Response,
};

pub use spool_auth::{ORIGIN_HEADER, OriginCheck};

/// `router`, answering only requests that came through the CDN when a `check` is configured.
pub fn only_through_cdn(router: axum::Router, check: Option<OriginCheck>) -> axum::Router {
    match check {
        Some(check) => router.layer(axum::middleware::from_fn_with_state(Arc::new(check), require_origin)),
        None => router,
    }
}

/// Middleware: refuses a request that did not come through the CDN.
pub async fn require_origin(State(check): State<Arc<OriginCheck>>, request: Request, next: Next) -> Response {
    if check.admits(request.headers()) {
        return next.run(request).await;
    }
    tracing::warn!(path = %crate::loggable_path(request.uri().path()), "a request did not come through the CDN; refused");
    respond(
        StatusCode::FORBIDDEN,
        ErrorBody::new(
            "forbidden",
            "this endpoint answers only through the deployment's CloudFront URL (the stack's WebUrl)".to_owned(),
        ),
        Vec::new(),
    )
}

#[cfg(test)]
mod tests {
    use axum::{Router, body::Body, routing::get};
    use tower::ServiceExt;

    use super::*;

    #[tokio::test]
    async fn only_requests_with_the_secret_header_get_through() {
        let check = Arc::new(OriginCheck::new("the-origin-secret"));
        let app = Router::new()
            .route("/v1/x", get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(check, require_origin));
        let call = |header: Option<&'static str>| {
            let app = app.clone();
            async move {
                let mut request = Request::builder().uri("/v1/x");
                if let Some(value) = header {
                    request = request.header(ORIGIN_HEADER, value);
                }
                app.oneshot(request.body(Body::empty()).unwrap())
                    .await
                    .unwrap()
                    .status()
            }
        };
        assert_eq!(call(Some("the-origin-secret")).await, StatusCode::OK);
        assert_eq!(call(None).await, StatusCode::FORBIDDEN);
        assert_eq!(call(Some("the-origin-secreT")).await, StatusCode::FORBIDDEN);
        assert_eq!(call(Some("")).await, StatusCode::FORBIDDEN);
    }
}
