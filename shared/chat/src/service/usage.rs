//! # The usage service: reports and the monthly token budget
//!
//! A chat's and a workspace's usage reports ([`crate::usage::report`]) from the ledger, and
//! the one rule of a workspace's monthly token budget: when its chats' models have used as
//! many input and output tokens this UTC month as the budget allows, new turns are refused.
//! `post_message` (and so every command with a prompt) refuses with `429 budget_exceeded`
//! before it appends anything; the engine ends a turn queued before the budget was crossed
//! before its `agent_start`, with a system message that says why. Both ask
//! [`UsageService::budget_exceeded`].

use std::sync::Arc;

use spool_log::{clock::Clock, error::Error, subscription::refusal::Refusal};

use crate::{
    metadata::Metadata,
    usage::{Day, DayRange, Month, Tokens, report::Report},
    workspace::Workspace,
};

/// The error code of a turn refused by its workspace's budget.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

/// Reports and the budget, over the ledger.
#[derive(Clone)]
pub struct UsageService {
    metadata: Arc<dyn Metadata>,
    clock: Arc<dyn Clock>,
}

/// A workspace past its monthly token budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetExceeded {
    /// The budget.
    pub budget: u64,
    /// The tokens used this month.
    pub used: u64,
    /// The month.
    pub month: Month,
}

impl BudgetExceeded {
    /// What happened and how to go on, for people.
    pub fn message(&self) -> String {
        format!(
            "This workspace has used {} of its monthly budget of {} tokens (input and output) in {}; \
             no new turn starts until the month ends or someone raises or removes `monthly_token_budget` \
             in the workspace's settings (PATCH /v1/workspaces/{{id}}).",
            self.used, self.budget, self.month
        )
    }

    /// The refusal a request gets: `429 budget_exceeded`.
    pub fn refusal(&self) -> Error {
        Refusal::new(429, BUDGET_EXCEEDED, self.message()).into()
    }
}

impl UsageService {
    /// The service over its ports.
    pub fn new(metadata: Arc<dyn Metadata>, clock: Arc<dyn Clock>) -> Self {
        Self { metadata, clock }
    }

    /// Today, in UTC.
    pub fn today(&self) -> Day {
        Day::of_ms(self.clock.now_ms())
    }

    /// A chat's report (the caller checked that the chat is the organization's).
    pub async fn chat(&self, org: &str, chat_id: &str) -> Result<Report, Error> {
        Ok(Report::of(&self.metadata.chat_usage(org, chat_id).await?))
    }

    /// A workspace's report over `range` (the caller checked that the workspace is the
    /// organization's).
    pub async fn workspace(&self, org: &str, workspace_id: &str, range: DayRange) -> Result<Report, Error> {
        Ok(Report::of(
            &self.metadata.workspace_usage(org, workspace_id, range).await?,
        ))
    }

    /// A workspace's tokens this month.
    pub async fn this_month(&self, org: &str, workspace_id: &str) -> Result<Tokens, Error> {
        self.metadata
            .workspace_month(org, workspace_id, self.today().month())
            .await
    }

    /// The budget rule: `Some` when `workspace` has a monthly token budget and its chats have
    /// used at least that many input and output tokens this month.
    pub async fn budget_exceeded(&self, org: &str, workspace: &Workspace) -> Result<Option<BudgetExceeded>, Error> {
        let Some(budget) = workspace.monthly_token_budget else {
            return Ok(None);
        };
        let month = self.today().month();
        let used = self.metadata.workspace_month(org, &workspace.id, month).await?.billed();
        Ok((used >= budget).then_some(BudgetExceeded { budget, used, month }))
    }

    /// `Err(429 budget_exceeded)` when the workspace `workspace_id` (if any) is past its
    /// budget: a turn may not start.
    pub async fn check_budget(&self, org: &str, workspace_id: Option<&str>) -> Result<(), Error> {
        let Some(id) = workspace_id else {
            return Ok(());
        };
        let Some(workspace) = self.metadata.workspace(org, id).await? else {
            return Ok(());
        };
        match self.budget_exceeded(org, &workspace).await? {
            Some(exceeded) => Err(exceeded.refusal()),
            None => Ok(()),
        }
    }
}
