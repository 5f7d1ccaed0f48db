//! # `GET /v1/clis`: the CLI agents this deployment can run
//!
//! Where agents run, each of claude, gemini, codex and opencode: installed or not, its version,
//! and whether it answers `--version`, or why not. The UI marks the ones that cannot run; the
//! agents' context lists them. Beside them, the organization's runners (`spool runner`) and
//! what each offers: a workspace whose CLI agents run on runners uses theirs. And the folders
//! under which a workspace's working directory may be here (`SPOOL_WORKSPACE_ROOTS`, as this
//! organization may use them), so settings show them before a folder is chosen.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::Serialize;
use spool_chat::{clis::CliStatus, service::RunnerView};
use spool_edge::{ApiError, Refusals};
use utoipa::ToSchema;

use crate::{ChatApi, extract::Caller};

/// The CLIs, in the built-in agent's order of preference, and the organization's runners.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CliList {
    /// Where the worker runs agents (this process, under `spool serve`).
    clis: Vec<CliStatus>,
    /// The organization's runners and the CLIs each offers, online ones first.
    runners: Vec<RunnerView>,
    /// The folders under which a workspace of this organization may have a working directory
    /// on this server (its own roots, and shared ones no other organization claimed); empty
    /// when working directories are off here and every chat gets a folder of its own.
    workspace_roots: Vec<String>,
}

/// `GET /v1/clis`.
#[utoipa::path(get, path = "/v1/clis", tag = "workspaces",
    responses((status = 200, description = "Each CLI: installed, version, healthy, or why not; and what each runner offers", body = CliList), Refusals))]
pub(crate) async fn list_clis(State(api): State<Arc<ChatApi>>, caller: Caller) -> Result<Json<CliList>, ApiError> {
    let clis = match &api.clis {
        Some(probe) => probe.clis().await,
        None => spool_chat::workspace::CliType::ALL
            .into_iter()
            .map(|cli| CliStatus::unavailable(cli, "CLI agents do not run in this deployment"))
            .collect(),
    };
    let mut runners = api.runners.runners(caller.org(), None).await?;
    runners.sort_by_key(|r| !r.online);
    let workspace_roots = api.workspace_roots.allowed(caller.org()).await?;
    Ok(Json(CliList {
        clis,
        runners,
        workspace_roots,
    }))
}
