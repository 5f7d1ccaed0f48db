//! # Chat webhooks: a workspace's endpoints and their deliveries
//!
//! `POST /v1/workspaces/{id}/webhooks` registers an endpoint for some of `turn.completed`,
//! `turn.failed`, `input.required` and `task.created` (all by default) and answers its signing
//! secret, once. `GET`/`PATCH`/`DELETE /v1/webhooks/{id}` read, change (its URL, events,
//! description; `enabled: false` turns it off) and delete it; `GET /v1/webhooks/{id}/deliveries`
//! shows its newest deliveries with every attempt. The endpoints' rules are
//! [`spool_chat::webhook::endpoints`]'s; what is delivered and how is [`spool_chat::webhook`]'s.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spool_chat::webhook::{
    Attempt, Delivery, DeliveryStatus, Hook, HookEvent,
    endpoints::{EndpointEdit, NewEndpoint},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use spool_log::error::Error;
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, PathOf, rfc3339_ms},
};

/// A new endpoint.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewHook {
    /// Where deliveries go: `https` to a public address (`http://localhost` under `spool serve`).
    url: String,
    /// What it gets; every kind when left out.
    #[serde(default)]
    events: Option<Vec<HookEvent>>,
    /// For people.
    #[serde(default)]
    description: Option<String>,
    /// On (the default) or off.
    #[serde(default)]
    enabled: Option<bool>,
}

/// A change to an endpoint; what is left out stays.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HookPatch {
    url: Option<String>,
    events: Option<Vec<HookEvent>>,
    description: Option<String>,
    /// `false` turns it off: it gets nothing, and deliveries waiting for it are given up.
    enabled: Option<bool>,
}

/// An endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HookView {
    id: String,
    workspace_id: String,
    url: String,
    events: Vec<HookEvent>,
    enabled: bool,
    description: Option<String>,
    #[schema(format = DateTime)]
    created_at: String,
    /// The signing secret (`whsec_…`), only in the answer that made the endpoint: verify
    /// deliveries with it (any Standard Webhooks library does).
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

impl HookView {
    fn new(hook: Hook, with_secret: bool) -> Self {
        Self {
            id: hook.id,
            workspace_id: hook.workspace_id,
            url: hook.url,
            events: hook.events,
            enabled: hook.enabled,
            description: hook.description,
            created_at: rfc3339_ms(hook.created_ms),
            secret: with_secret.then_some(hook.secret),
        }
    }
}

/// A workspace's endpoints.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HookList {
    webhooks: Vec<HookView>,
}

/// One attempt at a delivery.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptView {
    #[schema(format = DateTime)]
    at: String,
    /// The endpoint's status, if it answered.
    status: Option<u16>,
    /// Why it failed, if it did.
    error: Option<String>,
    duration_ms: u64,
}

/// One event's delivery to the endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeliveryView {
    /// `webhook-id`: the same in every attempt.
    id: String,
    event: HookEvent,
    state: DeliveryStatus,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    next_attempt_at: Option<String>,
    attempts: Vec<AttemptView>,
    /// The body every attempt sends.
    #[schema(value_type = Object)]
    payload: Value,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        let attempt = |a: Attempt| AttemptView {
            at: rfc3339_ms(a.at_ms),
            status: a.status,
            error: a.error,
            duration_ms: a.duration_ms,
        };
        Self {
            payload: serde_json::from_str(&d.body).unwrap_or(Value::Null),
            id: d.id,
            event: d.event,
            state: d.state,
            created_at: rfc3339_ms(d.created_ms),
            next_attempt_at: d.next_attempt_ms.map(rfc3339_ms),
            attempts: d.attempts.into_iter().map(attempt).collect(),
        }
    }
}

/// An endpoint's newest deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeliveryList {
    deliveries: Vec<DeliveryView>,
}

/// `POST /v1/workspaces/{id}/webhooks`: a new endpoint, and its signing secret (shown once).
#[utoipa::path(post, path = "/v1/workspaces/{id}/webhooks", tag = "webhooks", params(("id" = String, Path, description = "The workspace")),
    request_body = NewHook,
    responses((status = 201, description = "Made; `secret` signs its deliveries", body = HookView),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody),
        (status = 409, description = "The workspace has as many endpoints as it may (`limit_reached`)", body = ErrorBody), Refusals))]
pub(crate) async fn create_hook(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
    JsonBody(new): JsonBody<NewHook>,
) -> Result<impl IntoResponse, ApiError> {
    api.limit_create(&caller)?;
    let new = NewEndpoint {
        url: new.url,
        events: new.events,
        description: new.description,
        enabled: new.enabled,
        secret: spool_auth::standard_webhook_secret().map_err(|e| Error::unavailable("make a webhook secret", e))?,
    };
    let hook = api.hooks.create(caller.org(), &workspace_id, new).await?;
    Ok((StatusCode::CREATED, Json(HookView::new(hook, true))))
}

/// `GET /v1/workspaces/{id}/webhooks`: the workspace's endpoints (without their secrets).
#[utoipa::path(get, path = "/v1/workspaces/{id}/webhooks", tag = "webhooks", params(("id" = String, Path, description = "The workspace")),
    responses((status = 200, description = "Its endpoints, oldest first", body = HookList),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_hooks(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(workspace_id): PathOf<Id>,
) -> Result<Json<HookList>, ApiError> {
    let hooks = api.hooks.hooks(caller.org(), &workspace_id).await?;
    Ok(Json(HookList {
        webhooks: hooks.into_iter().map(|h| HookView::new(h, false)).collect(),
    }))
}

/// `GET /v1/webhooks/{id}`.
#[utoipa::path(get, path = "/v1/webhooks/{id}", tag = "webhooks", params(("id" = String, Path, description = "The endpoint")),
    responses((status = 200, description = "The endpoint (without its secret)", body = HookView),
        (status = 404, description = "No such endpoint in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn get_hook(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<HookView>, ApiError> {
    Ok(Json(HookView::new(api.hooks.hook(caller.org(), &id).await?, false)))
}

/// `PATCH /v1/webhooks/{id}`: its URL, events, description, or on and off.
#[utoipa::path(patch, path = "/v1/webhooks/{id}", tag = "webhooks", params(("id" = String, Path, description = "The endpoint")),
    request_body = HookPatch,
    responses((status = 200, description = "Changed", body = HookView),
        (status = 404, description = "No such endpoint in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn update_hook(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(change): JsonBody<HookPatch>,
) -> Result<Json<HookView>, ApiError> {
    let edit = EndpointEdit {
        url: change.url,
        events: change.events,
        description: change.description,
        enabled: change.enabled,
    };
    let hook = api.hooks.update(caller.org(), &id, edit).await?;
    Ok(Json(HookView::new(hook, false)))
}

/// `DELETE /v1/webhooks/{id}`: the endpoint and its deliveries.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks", params(("id" = String, Path, description = "The endpoint")),
    responses((status = 204, description = "Deleted; deliveries waiting for it are given up"),
        (status = 404, description = "No such endpoint in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn delete_hook(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<StatusCode, ApiError> {
    api.hooks.remove(caller.org(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/webhooks/{id}/deliveries`: its newest deliveries, each with every attempt.
#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks", params(("id" = String, Path, description = "The endpoint")),
    responses((status = 200, description = "Its newest deliveries (at most 50), newest first", body = DeliveryList),
        (status = 404, description = "No such endpoint in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_deliveries(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<DeliveryList>, ApiError> {
    let deliveries = api.hooks.deliveries(caller.org(), &id).await?;
    Ok(Json(DeliveryList {
        deliveries: deliveries.into_iter().map(DeliveryView::from).collect(),
    }))
}
