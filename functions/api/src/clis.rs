//! # `GET /v1/clis`: the CLI agents this deployment can run
//!
//! Where agents run, each of claude, gemini, codex and opencode: installed or not, its version,
//! and whether it answers `--version`, or why not. The UI marks the ones that cannot run; the
//! agents' context lists them.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::Serialize;
use spool_chat::clis::CliStatus;
use spool_edge::{ApiError, Refusals};
use utoipa::ToSchema;

use crate::{ChatApi, extract::Caller};

/// The CLIs, in the built-in agent's order of preference.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CliList {
    clis: Vec<CliStatus>,
}

/// `GET /v1/clis`.
#[utoipa::path(get, path = "/v1/clis", tag = "workspaces",
    responses((status = 200, description = "Each CLI: installed, version, healthy, or why not", body = CliList), Refusals))]
pub(crate) async fn list_clis(State(api): State<Arc<ChatApi>>, _caller: Caller) -> Result<Json<CliList>, ApiError> {
    let clis = match &api.clis {
        Some(probe) => probe.clis().await,
        None => spool_chat::workspace::CliType::ALL
            .into_iter()
            .map(|cli| CliStatus::unavailable(cli, "CLI agents do not run in this deployment"))
            .collect(),
    };
    Ok(Json(CliList { clis }))
}
