//! # The chat API function
//!
//! The write side people and agents use. Today: the health check; the handshake, which
//! exchanges an organization's API key for the token every other route verifies
//! ([`extract::Caller`]); workspaces and their agents; provisioning of organizations and keys
//! ([`admin`]); and the audit stream ([`audit`]). Sessions and submit events follow (the chat
//! API issue). Errors are the contract's JSON ([`ApiError`]). One
//! axum [`Router`] runs on Lambda through `lambda_http`, under `cargo lambda watch`, and inside
//! `spool serve`.

pub mod admin;
pub mod audit;
mod capabilities;
mod error;
pub mod extract;
pub mod global;
mod handshake;
mod sessions;
mod submit;
mod workspaces;

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::DefaultBodyLimit,
    routing::{get, patch, post, put},
};
pub use error::ApiError;
use serde_json::{Value, json};
use spool_auth::{Access, TokenKeys};
use spool_domain::{Clock, Metadata, StreamLog, TurnQueue};

/// The largest JSON body the API's routes accept (messages bring their own limit).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Where the API keeps things.
pub struct Stores {
    /// Organizations, keys, workspaces, agents, session records.
    pub metadata: Arc<dyn Metadata>,
    /// Streams: sessions' events, audit streams.
    pub log: Arc<dyn StreamLog>,
    /// Agent turns for the worker.
    pub turns: Arc<dyn TurnQueue>,
}

/// Everything the API's handlers share.
pub struct ChatApi {
    metadata: Arc<dyn Metadata>,
    log: Arc<dyn StreamLog>,
    turns: Arc<dyn TurnQueue>,
    keys: TokenKeys,
    access: Access,
    clock: Arc<dyn Clock>,
}

impl ChatApi {
    /// The API over `stores`. It signs tokens with `keys` and lets callers in by `access` (tokens
    /// verified with the same keys, or `--no-auth`'s open organization).
    pub fn new(stores: Stores, keys: TokenKeys, access: Access, clock: Arc<dyn Clock>) -> Self {
        Self {
            metadata: stores.metadata,
            log: stores.log,
            turns: stores.turns,
            keys,
            access,
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
        .route(
            "/v1/workspaces",
            post(workspaces::create_workspace).get(workspaces::list_workspaces),
        )
        .route(
            "/v1/workspaces/{id}",
            get(workspaces::get_workspace)
                .patch(workspaces::update_workspace)
                .delete(workspaces::delete_workspace),
        )
        .route(
            "/v1/workspaces/{id}/agents",
            post(workspaces::create_agent).get(workspaces::list_agents),
        )
        .route("/v1/workspaces/{id}/agents/order", put(workspaces::reorder_agents))
        .route("/v1/workspaces/{id}/tasks", get(workspaces::list_tasks))
        .route("/v1/tasks/{id}", get(workspaces::get_task))
        .route(
            "/v1/sessions",
            post(sessions::create_session).get(sessions::list_sessions),
        )
        .route(
            "/v1/sessions/{id}",
            get(sessions::get_session)
                .patch(sessions::update_session)
                .delete(sessions::delete_session),
        )
        .route(
            "/v1/sessions/{id}/messages",
            post(sessions::post_message).layer(DefaultBodyLimit::max(sessions::MAX_MESSAGE_BODY_BYTES)),
        )
        .route("/v1/sessions/{id}/events", get(sessions::list_events))
        .route("/v1/sessions/{id}/agent-messages", post(global::agent_message))
        .route("/v1/sessions/{id}/capabilities", put(capabilities::put_capabilities))
        .route("/chat/history", get(global::history))
        .route("/chat/user_message", post(global::user_message))
        .route("/v1/sessions/{id}/control", post(submit::control))
        .route("/v1/sessions/{id}/tool-output", post(submit::tool_output))
        .route("/v1/sessions/{id}/approval", post(submit::approval))
        .route("/v1/sessions/{id}/question", post(submit::question))
        .route("/v1/sessions/{id}/plan", post(submit::plan))
        .route(
            "/v1/agents/{id}",
            patch(workspaces::update_agent).delete(workspaces::delete_agent),
        )
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(api))
}

/// Any other path: the contract's JSON `404`.
async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::NoRoute(format!("there is no route at {}; see GET /v1/openapi.json", uri.path()))
}

/// A known path with another method: the contract's JSON `405`.
async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NoMethod(format!("{} does not take {method}", uri.path()))
}

/// `GET /healthz`: the process is up and serving.
async fn health() -> Json<Value> {
    Json(json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
}
