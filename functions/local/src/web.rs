//! # The web UI under `spool serve`
//!
//! The built UI (`make web` → `web/dist`) is static files: `index.html` at `/` and its assets
//! under `/assets/`. Only those two paths are the UI's, so every other unknown path still gets
//! the API's JSON `404`. The UI routes in the URL's fragment, so it needs no server-side routes
//! and deploys as it is to S3 behind CloudFront.

use std::path::Path;

use axum::{
    Router,
    http::{HeaderValue, StatusCode, header},
    response::{Html, IntoResponse},
    routing::get,
};
use tower_http::{
    services::{ServeDir, ServeFile},
    set_header::SetResponseHeaderLayer,
};

/// What the UI's pages may load: only their own origin's scripts, styles and connections (the
/// API is the same origin here; images also from `blob:`, the chat's files the UI fetched with its
/// token; connections also to loopback, where the person's companion runs), and no framing. Agent text is escaped by the UI; this is the
/// second wall.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data: blob: https:; object-src 'none'; \
    connect-src 'self' http://127.0.0.1:* http://localhost:*; \
    base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The UI's routes, or a page that says how to build it when `dir` has no `index.html`.
pub fn router(dir: &Path) -> Router {
    let index = dir.join("index.html");
    if !index.is_file() {
        tracing::warn!(dir = %dir.display(), "the web UI is not built; `make web` builds it");
        return Router::new().route("/", get(not_built));
    }
    // The files' names carry no hash, so browsers revalidate them (cheap: `Last-Modified`).
    Router::new()
        .route_service("/", ServeFile::new(index))
        .nest_service("/assets", ServeDir::new(dir.join("assets")))
        .layer(SetResponseHeaderLayer::overriding(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
}

async fn not_built() -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        Html(
            "<!doctype html><title>Spool</title><h1>The web UI is not built</h1>\
             <p>Run <code>make web</code> (it needs Node.js 20 and npm), or <code>make run</code>, which \
             builds it, or point <code>SPOOL_WEB_DIR</code> at a built copy. The API is up: see \
             <a href=\"/v1/openapi.json\">/v1/openapi.json</a>.</p>",
        ),
    )
}

#[cfg(test)]
mod tests {
    /// The deployment's CloudFront serves the UI with the same policy (its response headers
    /// policy in the template), so the UI behaves the same on AWS as under `spool serve`.
    #[test]
    fn the_template_serves_the_ui_with_the_same_content_security_policy() {
        let template = include_str!("../../../infra/template.yaml");
        let expected = format!("ContentSecurityPolicy: \"{}\"", super::CONTENT_SECURITY_POLICY);
        assert!(
            template.contains(&expected),
            "the template's CSP differs from {expected}"
        );
    }
}
