//! # The chat API function
//!
//! The write side people and agents use. Today: the health check and the handshake, which
//! exchanges an organization's API key for the token every other route verifies
//! ([`handshake`]); provisioning of organizations and keys ([`admin`]); and the audit stream
//! ([`audit`]). Sessions, workspaces, agents and submit events follow (the chat API issue). One
//! axum [`Router`] runs on Lambda through `lambda_http`, under `cargo lambda watch`, and inside
//! `spool serve`.

pub mod admin;
pub mod audit;
mod error;
mod handshake;

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::DefaultBodyLimit,
    routing::{get, post},
};
pub use error::ApiError;
use serde_json::{Value, json};
use spool_auth::TokenKeys;
use spool_domain::{Clock, Directory, StreamLog};

/// Everything the API's handlers share.
pub struct ChatApi {
    directory: Arc<dyn Directory>,
    log: Arc<dyn StreamLog>,
    keys: TokenKeys,
    clock: Arc<dyn Clock>,
}

impl ChatApi {
    /// The API over a directory of organizations and keys and the stream log, signing tokens
    /// with `keys`.
    pub fn new(directory: Arc<dyn Directory>, log: Arc<dyn StreamLog>, keys: TokenKeys, clock: Arc<dyn Clock>) -> Self {
        Self {
            directory,
            log,
            keys,
            clock,
        }
    }
}

/// The API's routes.
pub fn router(api: ChatApi) -> Router {
    Router::new()
        .route("/healthz", get(health))
        .route(
            "/v1/handshake",
            post(handshake::handshake).layer(DefaultBodyLimit::max(handshake::MAX_BODY_BYTES)),
        )
        .with_state(Arc::new(api))
}

/// `GET /healthz`: the process is up and serving.
async fn health() -> Json<Value> {
    Json(json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}
