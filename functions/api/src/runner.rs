//! # Runners: the routes `spool runner` calls, and the list people see
//!
//! A runner (`spool runner`, with a key made by `spool admin create-api-key ORG --capability
//! runner`) takes its organization's CLI turns through four routes, each a thin call of
//! [`spool_chat::service::RunnerService`]: `POST /v1/runner/claim` (a long-poll: `200` with a
//! job, `204` when none came), `POST /v1/runner/turns/{turn_id}/heartbeat` (a long-poll that
//! answers `cancel: true` at an abort), `GET /v1/runner/turns/{turn_id}/files/{file_id}` (a
//! chat's file's bytes) and `POST /v1/runner/turns/{turn_id}/result` (`409` once the run was
//! superseded). Its token reaches nothing else, and no other token reaches these
//! ([`RunnerCaller`]). People see the organization's runners at `GET /v1/runners`.

use std::sync::Arc;

use axum::{
    Json,
    body::Body,
    extract::State,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use spool_chat::{
    runner::wire::{Assignment, Beat, Claim, Heartbeat, Settle},
    service::{RunnerFileBody, RunnerView},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, PathOf, QueryOf, RunnerCaller},
};

/// The largest settle body: the outcome's bound and room for its frame.
pub(crate) const MAX_RESULT_BODY_BYTES: usize = spool_chat::runner::MAX_OUTCOME_BYTES + 16 * 1024;

const TURN_ID: &str = "The turn the runner claimed";

/// `POST /v1/runner/claim`: the oldest job of the runner's organization that it serves and can
/// run, claimed under a lease, with the reply's request; `204` when none came within
/// `wait_ms` (at most 20 s). The runner is recorded as seen.
#[utoipa::path(post, path = "/v1/runner/claim", tag = "runners", request_body = Claim,
    responses((status = 200, description = "A job, claimed: run its CLI, heartbeat, settle", body = Assignment),
        (status = 204, description = "No job came within the wait; claim again"),
        (status = 403, description = "The token is not a runner's", body = ErrorBody), Refusals))]
pub(crate) async fn claim(
    State(api): State<Arc<ChatApi>>,
    runner: RunnerCaller,
    JsonBody(claim): JsonBody<Claim>,
) -> Result<Response, ApiError> {
    Ok(match api.runners.claim(runner.org(), &claim).await? {
        Some(assignment) => Json(assignment).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// `POST /v1/runner/turns/{turn_id}/heartbeat`: the claim's lease renewed, then a wait of up
/// to `wait_ms` (at most 20 s) that answers `cancel: true` at once when the turn is aborted or
/// the claim was superseded (another claim after a lost lease, or the turn ended).
#[utoipa::path(post, path = "/v1/runner/turns/{turn_id}/heartbeat", tag = "runners",
    params(("turn_id" = String, Path, description = TURN_ID)), request_body = Heartbeat,
    responses((status = 200, description = "Go on (the lease holds `lease_ms` more), or stop the CLI now", body = Beat),
        (status = 403, description = "The token is not a runner's", body = ErrorBody), Refusals))]
pub(crate) async fn heartbeat(
    State(api): State<Arc<ChatApi>>,
    runner: RunnerCaller,
    PathOf(turn_id): PathOf<Id>,
    JsonBody(beat): JsonBody<Heartbeat>,
) -> Result<Json<Beat>, ApiError> {
    Ok(Json(api.runners.heartbeat(runner.org(), &turn_id, &beat).await?))
}

/// `GET /v1/runner/turns/{turn_id}/files/{file_id}`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct FileQuery {
    /// The claim's epoch.
    epoch: u64,
}

/// `GET /v1/runner/turns/{turn_id}/files/{file_id}?epoch=N`: a file of the turn's chat, its
/// bytes with its media type, for the claim that holds the job.
#[utoipa::path(get, path = "/v1/runner/turns/{turn_id}/files/{file_id}", tag = "runners",
    params(("turn_id" = String, Path, description = TURN_ID), ("file_id" = String, Path, description = "The chat's file (`att_…`)"), FileQuery),
    responses((status = 200, description = "The file's bytes, with its media type", content_type = "*/*"),
        (status = 307, description = "Where to fetch the file from storage itself (a pre-signed URL, minutes long; on AWS)"),
        (status = 403, description = "The token is not a runner's", body = ErrorBody),
        (status = 404, description = "No such completed file in the turn's chat", body = ErrorBody),
        (status = 409, description = "The claim was superseded: another runner took the turn over, or it ended", body = ErrorBody),
        Refusals))]
pub(crate) async fn file(
    State(api): State<Arc<ChatApi>>,
    runner: RunnerCaller,
    PathOf((turn_id, file_id)): PathOf<(Id, Id)>,
    QueryOf(query): QueryOf<FileQuery>,
) -> Result<Response, ApiError> {
    let file = api.runners.file(runner.org(), &turn_id, query.epoch, &file_id).await?;
    let reader = match file.body {
        // From storage itself: no function's response could carry a large file.
        RunnerFileBody::Direct(url) => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = axum::http::StatusCode::TEMPORARY_REDIRECT;
            let location = HeaderValue::from_str(&url)
                .map_err(|e| ApiError::from(spool_log::error::Error::unavailable("sign a file's URL", e)))?;
            response.headers_mut().insert(header::LOCATION, location);
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
            return Ok(response);
        }
        RunnerFileBody::Bytes(reader) => reader,
    };
    let stream = tokio_util::io::ReaderStream::with_capacity(reader, 256 * 1024);
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(file.attachment.size));
    let kind = HeaderValue::from_str(&file.attachment.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, kind);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    Ok(response)
}

/// The answer to a settle.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Settled {
    /// Always `true`: the engine records the reply next.
    accepted: bool,
}

/// `POST /v1/runner/turns/{turn_id}/result`: what the CLI answered (or why it could not),
/// recorded once; the engine then records the reply and runs its actions. The same settle
/// again is accepted again.
#[utoipa::path(post, path = "/v1/runner/turns/{turn_id}/result", tag = "runners",
    params(("turn_id" = String, Path, description = TURN_ID)), request_body = Settle,
    responses((status = 200, description = "Accepted", body = Settled),
        (status = 403, description = "The token is not a runner's", body = ErrorBody),
        (status = 409, description = "The claim was superseded: another runner took the turn over, or it ended; drop the result", body = ErrorBody),
        (status = 413, description = "The body is larger than the outcome's bound (256 KiB)", body = ErrorBody),
        Refusals))]
pub(crate) async fn settle(
    State(api): State<Arc<ChatApi>>,
    runner: RunnerCaller,
    PathOf(turn_id): PathOf<Id>,
    JsonBody(settle): JsonBody<Settle>,
) -> Result<Json<Settled>, ApiError> {
    api.runners.settle(runner.org(), &turn_id, &settle).await?;
    Ok(Json(Settled { accepted: true }))
}

/// The organization's runners.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RunnerList {
    runners: Vec<RunnerView>,
}

/// `GET /v1/runners`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct RunnerQuery {
    /// Only the runners serving this workspace.
    #[serde(default)]
    workspace_id: Option<Id>,
}

/// `GET /v1/runners[?workspace_id=]`: the organization's runners (seen within a day), by
/// name: what each runs, which workspaces it serves, when it was last seen and whether it is
/// online (seen within a minute).
#[utoipa::path(get, path = "/v1/runners", tag = "runners", params(RunnerQuery),
    responses((status = 200, description = "The runners, by name", body = RunnerList),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_runners(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    QueryOf(query): QueryOf<RunnerQuery>,
) -> Result<Json<RunnerList>, ApiError> {
    if let Some(ws) = &query.workspace_id {
        api.workspaces.workspace(caller.org(), ws).await?;
    }
    let runners = api.runners.runners(caller.org(), query.workspace_id.as_deref()).await?;
    Ok(Json(RunnerList { runners }))
}
