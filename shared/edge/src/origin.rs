//! # Only through the deployment's CDN
//!
//! On AWS the functions answer only requests that came through the deployment's CloudFront
//! distribution: CloudFront adds a secret header ([`ORIGIN_HEADER`]) to every request it sends
//! to an origin, and [`require_origin`] refuses (`403`) a request without it. So the API
//! Gateway endpoint and the stream function's URL, which are public by nature, cannot be used
//! to go around the edge's WAF rate limits and headers. The secret comes from Secrets Manager
//! (`SPOOL_ORIGIN_SECRET`, in the secret `SPOOL_SECRET_ARNS` names), like the signing secret.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::StatusCode,
    middleware::Next,
    response::Response,
};
use sha2::{Digest, Sha256};

use crate::{ErrorBody, respond};

/// The header CloudFront adds to the requests it sends to Spool's functions.
pub const ORIGIN_HEADER: &str = "x-spool-origin";

/// What a request must carry in [`ORIGIN_HEADER`]: one of the secret's values (the current one,
/// and while the secret rotates, the one CloudFront may still send); only digests are kept.
/// Clones share the values: [`OriginCheck::replace`] changes every clone's.
#[derive(Clone)]
pub struct OriginCheck {
    digests: Arc<std::sync::RwLock<Vec<[u8; 32]>>>,
}

impl std::fmt::Debug for OriginCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OriginCheck(..)")
    }
}

fn digest(value: &[u8]) -> [u8; 32] {
    Sha256::digest(value).into()
}

impl OriginCheck {
    /// Requests must carry `secret`.
    pub fn new(secret: &str) -> Self {
        Self::any_of(&[secret])
    }

    /// Requests must carry one of `secrets`.
    pub fn any_of(secrets: &[&str]) -> Self {
        Self {
            digests: Arc::new(std::sync::RwLock::new(
                secrets.iter().map(|secret| digest(secret.as_bytes())).collect(),
            )),
        }
    }

    /// Makes every clone accept `other`'s values from now on.
    pub fn replace(&self, other: &OriginCheck) {
        let values = other
            .digests
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        *self.digests.write().unwrap_or_else(std::sync::PoisonError::into_inner) = values;
    }

    /// Whether a request with these headers came through the CDN. Digests of equal length are
    /// compared, so the comparison's time says nothing about the secret.
    pub fn admits(&self, headers: &axum::http::HeaderMap) -> bool {
        let Some(value) = headers.get(ORIGIN_HEADER) else {
            return false;
        };
        let presented = digest(value.as_bytes());
        self.digests
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&presented)
    }
}

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

    #[test]
    fn a_rotation_accepts_both_values_until_the_old_one_is_dropped_everywhere() {
        let headers = |value: &str| {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert(ORIGIN_HEADER, value.parse().unwrap());
            headers
        };
        let check = OriginCheck::new("old");
        let held = check.clone();
        check.replace(&OriginCheck::any_of(&["new", "old"]));
        assert!(held.admits(&headers("old")) && held.admits(&headers("new")));
        check.replace(&OriginCheck::new("new"));
        assert!(!held.admits(&headers("old")) && held.admits(&headers("new")));
    }
}
