//! # The protocol's subscription routes (`{stream-url}/__ds/...`)
//!
//! Thin HTTP over [`spool_log::subscription::service::Subscriptions`]: the caller's token names the
//! organization for managing a subscription and claiming its work; a wake's own token (which
//! names the organization) is the only credential of a callback, an ack or a release, as the
//! protocol has it. The JWKS is public. Refusals carry the protocol's codes (`FENCED`,
//! `ALREADY_CLAIMED`, `WEBHOOK_URL_REJECTED`, …).

use std::sync::Arc;

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State},
    http::{Extensions, HeaderMap, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use serde_json::Value;
use spool_edge::{ApiError, STREAM_PREFIX};
use spool_log::{
    error::Error,
    subscription::{
        refusal::Refusal,
        service::{Subscriptions, WakeReport},
        spec::{self, Spec},
    },
};

use crate::{Intent, StreamApi, subscription_bodies as bodies};

type Api = State<Arc<StreamApi>>;

fn service(api: &StreamApi) -> Result<&Subscriptions, ApiError> {
    api.subscriptions
        .as_deref()
        .ok_or_else(|| ApiError::NotImplemented("subscriptions are not enabled on this endpoint".to_owned()))
}

/// The wake token in `Authorization: Bearer …`.
fn wake_token(headers: &HeaderMap) -> Result<&str, ApiError> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| -> spool_log::error::Error {
            Refusal::new(
                401,
                "TOKEN_INVALID",
                "send the wake's token (callback_token, or the claim's token) as Authorization: Bearer",
            )
            .into()
        })
        .map_err(ApiError::Domain)
}

/// The report a wake's request carries, once its token has the form of one (a request with
/// neither is refused for its token).
fn wake_report(token: &str, body: &[u8]) -> Result<WakeReport, Error> {
    Subscriptions::parse_token(token)?;
    bodies::wake_report(body)
}

fn json(status: StatusCode, body: Value) -> Response {
    (status, [(header::CACHE_CONTROL, "no-store")], Json(body)).into_response()
}

fn no_content() -> Response {
    (StatusCode::NO_CONTENT, [(header::CACHE_CONTROL, "no-store")]).into_response()
}

/// `GET {stream-url}/__ds/jwks.json`: the public keys that verify webhook signatures.
#[utoipa::path(get, path = "/v1/stream/__ds/jwks.json", tag = "subscriptions", operation_id = "subscription_jwks",
    responses((status = 200, description = "The webhook signing keys as a JSON Web Key Set", content_type = "application/jwk-set+json", body = Value),
        (status = 501, description = "Subscriptions are not enabled on this endpoint", body = spool_edge::ErrorBody)))]
pub(crate) async fn jwks(State(api): Api) -> Result<Response, ApiError> {
    let keys = service(&api)?.jwks();
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/jwk-set+json"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        keys.to_string(),
    )
        .into_response())
}

/// `PUT …/__ds/subscriptions/{id}`: create, or re-confirm with the same configuration.
#[utoipa::path(put, path = "/v1/stream/__ds/subscriptions/{id}", tag = "subscriptions", operation_id = "subscription_put",
    params(("id" = String, Path, description = "The client's id for the subscription")),
    request_body(content = Value, description = "`{type: webhook|pull-wake, pattern?, streams?, webhook?: {url}, wake_stream?, lease_ttl_ms?, description?}`"),
    responses((status = 201, description = "Created", body = Value), (status = 200, description = "It exists with this configuration", body = Value),
        (status = 400, description = "A malformed body (`INVALID_REQUEST`) or a webhook URL that could reach a private network (`WEBHOOK_URL_REJECTED`)", body = spool_edge::ErrorBody),
        (status = 401, description = "No valid token", body = spool_edge::ErrorBody),
        (status = 409, description = "It exists with another configuration (`SUBSCRIPTION_ALREADY_EXISTS`), or the organization has as many subscriptions as it may (`limit_reached`)", body = spool_edge::ErrorBody)))]
pub(crate) async fn put(
    State(api): Api,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
) -> Result<Response, ApiError> {
    let org = api.caller_org((&headers, &extensions), &uri, Intent::Create).await?;
    api.limit(&org, &extensions, Intent::Create)?;
    let root = crate::handlers::root_url(&headers, STREAM_PREFIX);
    let subscriptions = service(&api)?;
    spec::check_id(&id).map_err(Error::from)?;
    let spec = Spec::parse(&body, subscriptions.urls()).map_err(Error::from)?;
    let (created, sub) = subscriptions.put(&org, &id, spec, &root).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok(json(status, bodies::view(&sub, &subscriptions.signing_kid())))
}

/// `GET …/__ds/subscriptions/{id}`.
#[utoipa::path(get, path = "/v1/stream/__ds/subscriptions/{id}", tag = "subscriptions", operation_id = "subscription_get",
    params(("id" = String, Path, description = "The subscription")),
    responses((status = 200, description = "The subscription, its linked streams and their acked offsets", body = Value),
        (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 404, description = "No such subscription", body = spool_edge::ErrorBody)))]
pub(crate) async fn get(
    State(api): Api,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let org = api.caller_org((&headers, &extensions), &uri, Intent::Read).await?;
    let subscriptions = service(&api)?;
    let sub = subscriptions.get(&org, &id).await?;
    Ok(json(StatusCode::OK, bodies::view(&sub, &subscriptions.signing_kid())))
}

/// `DELETE …/__ds/subscriptions/{id}`.
#[utoipa::path(delete, path = "/v1/stream/__ds/subscriptions/{id}", tag = "subscriptions", operation_id = "subscription_delete",
    params(("id" = String, Path, description = "The subscription")),
    responses((status = 204, description = "Deleted: its wake's requests fail from now on"),
        (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 404, description = "No such subscription", body = spool_edge::ErrorBody)))]
pub(crate) async fn delete(
    State(api): Api,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let org = api.caller_org((&headers, &extensions), &uri, Intent::Write).await?;
    api.limit(&org, &extensions, Intent::Write)?;
    service(&api)?.delete(&org, &id).await?;
    Ok(no_content())
}

/// `POST …/__ds/subscriptions/{id}/streams`: link streams by name.
#[utoipa::path(post, path = "/v1/stream/__ds/subscriptions/{id}/streams", tag = "subscriptions", operation_id = "subscription_add_streams",
    params(("id" = String, Path, description = "The subscription")),
    request_body(content = Value, description = "`{streams: [path, …]}`"),
    responses((status = 204, description = "Linked, each at its tail"), (status = 400, description = "A malformed body", body = spool_edge::ErrorBody),
        (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 404, description = "No such subscription", body = spool_edge::ErrorBody)))]
pub(crate) async fn add_streams(
    State(api): Api,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
) -> Result<Response, ApiError> {
    let org = api.caller_org((&headers, &extensions), &uri, Intent::Write).await?;
    api.limit(&org, &extensions, Intent::Write)?;
    let subscriptions = service(&api)?;
    spec::check_id(&id).map_err(Error::from)?;
    subscriptions.add_streams(&org, &id, &bodies::streams(&body)?).await?;
    Ok(no_content())
}

/// `DELETE …/__ds/subscriptions/{id}/streams/{path}`: unlink a stream named explicitly.
#[utoipa::path(delete, path = "/v1/stream/__ds/subscriptions/{id}/streams/{path}", tag = "subscriptions", operation_id = "subscription_remove_stream",
    params(("id" = String, Path, description = "The subscription"), ("path" = String, Path, description = "The stream, URL-encoded")),
    responses((status = 204, description = "Unlinked (a stream the pattern matches stays linked by it)"),
        (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 404, description = "No such subscription", body = spool_edge::ErrorBody)))]
pub(crate) async fn remove_stream(
    State(api): Api,
    Path((id, path)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let org = api.caller_org((&headers, &extensions), &uri, Intent::Write).await?;
    api.limit(&org, &extensions, Intent::Write)?;
    service(&api)?.remove_stream(&org, &id, &path).await?;
    Ok(no_content())
}

/// `POST …/__ds/subscriptions/{id}/claim`: a pull-wake worker takes the pending work.
#[utoipa::path(post, path = "/v1/stream/__ds/subscriptions/{id}/claim", tag = "subscriptions", operation_id = "subscription_claim",
    params(("id" = String, Path, description = "The subscription")),
    request_body(content = Value, description = "`{worker: name}`"),
    responses((status = 200, description = "`{wake_id, generation, token, streams, lease_ttl_ms}`", body = Value),
        (status = 400, description = "A malformed body, or not a pull-wake subscription", body = spool_edge::ErrorBody),
        (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 404, description = "No such subscription", body = spool_edge::ErrorBody),
        (status = 409, description = "Another worker holds it (`ALREADY_CLAIMED`, with `current_holder`), or nothing is pending (`NO_PENDING_WORK`)", body = spool_edge::ErrorBody)))]
pub(crate) async fn claim(
    State(api): Api,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
) -> Result<Response, ApiError> {
    let org = api.caller_org((&headers, &extensions), &uri, Intent::Write).await?;
    let subscriptions = service(&api)?;
    spec::check_id(&id).map_err(Error::from)?;
    let claimed = subscriptions.claim(&org, &id, &bodies::worker(&body)?).await?;
    Ok(json(StatusCode::OK, bodies::claimed(claimed)))
}

/// `POST …/__ds/subscriptions/{id}/callback`: a webhook receiver acks or finishes its wake.
#[utoipa::path(post, path = "/v1/stream/__ds/subscriptions/{id}/callback", tag = "subscriptions", operation_id = "subscription_callback",
    params(("id" = String, Path, description = "The subscription")),
    request_body(content = Value, description = "`{wake_id, generation, acks: [{stream, offset}], done}`, with the wake's `callback_token` as the bearer token"),
    responses((status = 200, description = "`{ok: true, next_wake}`", body = Value),
        (status = 401, description = "Not this wake's token (`TOKEN_INVALID`)", body = spool_edge::ErrorBody), (status = 404, description = "No such subscription", body = spool_edge::ErrorBody),
        (status = 409, description = "A stale wake (`FENCED`) or an offset out of range (`INVALID_OFFSET`)", body = spool_edge::ErrorBody)))]
pub(crate) async fn callback(
    State(api): Api,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let token = wake_token(&headers)?;
    let subscriptions = service(&api)?;
    let next = subscriptions.callback(&id, token, &wake_report(token, &body)?).await?;
    Ok(json(StatusCode::OK, bodies::finished(next)))
}

/// `POST …/__ds/subscriptions/{id}/ack`: a pull-wake worker acks (and heartbeats) or finishes.
#[utoipa::path(post, path = "/v1/stream/__ds/subscriptions/{id}/ack", tag = "subscriptions", operation_id = "subscription_ack",
    params(("id" = String, Path, description = "The subscription")),
    request_body(content = Value, description = "`{wake_id, generation, acks: [{stream, offset}], done}`, with the claim's `token` as the bearer token"),
    responses((status = 200, description = "`{ok: true, next_wake}`", body = Value),
        (status = 401, description = "Not this wake's token (`TOKEN_INVALID`)", body = spool_edge::ErrorBody), (status = 404, description = "No such subscription", body = spool_edge::ErrorBody),
        (status = 409, description = "A stale wake (`FENCED`) or an offset out of range (`INVALID_OFFSET`)", body = spool_edge::ErrorBody)))]
pub(crate) async fn ack(
    State(api): Api,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let token = wake_token(&headers)?;
    let subscriptions = service(&api)?;
    let next = subscriptions.ack(&id, token, &wake_report(token, &body)?).await?;
    Ok(json(StatusCode::OK, bodies::finished(next)))
}

/// `POST …/__ds/subscriptions/{id}/release`: a pull-wake worker gives its wake up.
#[utoipa::path(post, path = "/v1/stream/__ds/subscriptions/{id}/release", tag = "subscriptions", operation_id = "subscription_release",
    params(("id" = String, Path, description = "The subscription")),
    request_body(content = Value, description = "`{wake_id, generation}`, with the claim's `token` as the bearer token"),
    responses((status = 204, description = "Released; pending work wakes again"),
        (status = 401, description = "Not this wake's token (`TOKEN_INVALID`)", body = spool_edge::ErrorBody), (status = 404, description = "No such subscription", body = spool_edge::ErrorBody),
        (status = 409, description = "A stale wake (`FENCED`)", body = spool_edge::ErrorBody)))]
pub(crate) async fn release(
    State(api): Api,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let token = wake_token(&headers)?;
    let subscriptions = service(&api)?;
    subscriptions.release(&id, token, &wake_report(token, &body)?).await?;
    Ok(no_content())
}
