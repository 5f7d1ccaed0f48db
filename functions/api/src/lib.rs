//! # The chat API function
//!
//! The write side people and agents use: the handshake, sessions, workspaces, agents and submit
//! events (the chat API issue fills it). One axum [`Router`] runs on Lambda through
//! `lambda_http`, under `cargo lambda watch`, and inside `spool serve`. Today it answers the
//! health check.

use axum::{Json, Router, routing::get};
use serde_json::{Value, json};

/// The API's routes.
pub fn router() -> Router {
    Router::new().route("/healthz", get(health))
}

/// `GET /healthz`: the process is up and serving.
async fn health() -> Json<Value> {
    Json(json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::*;

    #[tokio::test]
    async fn health_answers_ok_with_the_version() {
        let response = router()
            .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["status"], "ok");
        assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    }
}
