//! # Usage: what the models' tokens add up to
//!
//! `GET /v1/sessions/{id}/usage` (a chat's tokens by agent and model) and
//! `GET /v1/workspaces/{id}/usage?from=&to=` (a workspace's over days `[from, to)`, this UTC
//! month by default, by chat, agent and model, with its monthly token budget), from the usage
//! ledger ([`spool_chat::usage`]), with estimated costs from the checked-in price table. Another
//! organization's chat or workspace answers `404`, as its other reads do.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};
use spool_chat::usage::{
    Day, DayRange,
    report::{AgentUsage, ChatUsage, ModelUsage, Report, UsageTotals},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::{IntoParams, ToSchema};

use crate::{
    ChatApi,
    extract::{Caller, Id, PathOf, QueryOf},
    sessions::SESSION_ID,
};

/// A chat's usage.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChatUsageView {
    /// Everything, and its estimated cost (of priced models).
    #[serde(flatten)]
    totals: UsageTotals,
    /// Models the price table does not price: their tokens have no cost estimate.
    unpriced_models: Vec<String>,
    /// By agent, most tokens first.
    by_agent: Vec<AgentUsage>,
    /// By model, most tokens first.
    by_model: Vec<ModelUsage>,
}

/// A workspace's usage over a range of days.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WorkspaceUsageView {
    /// The first day (UTC), `YYYY-MM-DD`.
    from: String,
    /// The day after the last, `YYYY-MM-DD`.
    to: String,
    /// Everything, and its estimated cost (of priced models).
    #[serde(flatten)]
    totals: UsageTotals,
    /// Models the price table does not price: their tokens have no cost estimate.
    unpriced_models: Vec<String>,
    /// By chat, most tokens first.
    by_chat: Vec<ChatUsage>,
    /// By agent, most tokens first.
    by_agent: Vec<AgentUsage>,
    /// By model, most tokens first.
    by_model: Vec<ModelUsage>,
    /// The workspace's monthly token budget (input and output), if it has one.
    monthly_token_budget: Option<u64>,
    /// Its input and output tokens this UTC month, which the budget counts.
    month_tokens: u64,
}

/// `GET /v1/workspaces/{id}/usage`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct UsageQuery {
    /// The first day, `YYYY-MM-DD` (UTC); the first of this month by default.
    #[serde(default)]
    from: Option<String>,
    /// The day after the last, `YYYY-MM-DD` (UTC); the first of next month by default. At most
    /// 366 days after `from`.
    #[serde(default)]
    to: Option<String>,
}

impl UsageQuery {
    /// The range asked for, checked (`400` for a bad date, `from` after `to`, or a range over
    /// [`spool_chat::usage::MAX_RANGE_DAYS`] days).
    fn range(&self, today: Day) -> Result<DayRange, ApiError> {
        let day = |text: &Option<String>, default: Day| -> Result<Day, ApiError> {
            match text {
                Some(text) => Day::parse(text).map_err(ApiError::BadRequest),
                None => Ok(default),
            }
        };
        let month = today.month();
        let from = day(&self.from, month.first_day())?;
        let to = day(&self.to, month.end())?;
        Ok(DayRange::new(from, to)?)
    }
}

/// `GET /v1/sessions/{id}/usage`: the chat's tokens, by agent and model.
#[utoipa::path(get, path = "/v1/sessions/{id}/usage", tag = "sessions", params(("id" = String, Path, description = SESSION_ID)),
    responses((status = 200, description = "The chat's tokens and their estimated cost, by agent and model", body = ChatUsageView),
        (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn session_usage(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<ChatUsageView>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let report = api.usage.chat(caller.org(), &session.id).await?;
    let Report {
        totals,
        by_agent,
        by_model,
        unpriced_models,
        ..
    } = report;
    Ok(Json(ChatUsageView {
        totals,
        unpriced_models,
        by_agent,
        by_model,
    }))
}

/// `GET /v1/workspaces/{id}/usage?from=&to=`: the workspace's tokens on days `[from, to)` (this
/// UTC month by default), by chat, agent and model, and its monthly budget.
#[utoipa::path(get, path = "/v1/workspaces/{id}/usage", tag = "workspaces", params(("id" = String, Path, description = "The workspace"), UsageQuery),
    responses((status = 200, description = "The workspace's tokens and their estimated cost, by chat, agent and model", body = WorkspaceUsageView),
        (status = 400, description = "A date that is not YYYY-MM-DD, `from` after `to`, or a range of more than 366 days", body = ErrorBody),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn workspace_usage(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    QueryOf(query): QueryOf<UsageQuery>,
) -> Result<Json<WorkspaceUsageView>, ApiError> {
    let workspace = api.workspace_of(&caller, &id).await?;
    let range = query.range(api.usage.today())?;
    let report = api.usage.workspace(caller.org(), &workspace.id, range).await?;
    let month = api.usage.this_month(caller.org(), &workspace.id).await?;
    Ok(Json(WorkspaceUsageView {
        from: range.from.to_string(),
        to: range.to.to_string(),
        totals: report.totals,
        unpriced_models: report.unpriced_models,
        by_chat: report.by_chat,
        by_agent: report.by_agent,
        by_model: report.by_model,
        monthly_token_budget: workspace.monthly_token_budget,
        month_tokens: month.billed(),
    }))
}
