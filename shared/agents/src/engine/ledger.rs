//! A step's usage: each `usage` event recorded in the usage ledger as it is appended, and the
//! workspace's monthly token budget checked before a turn starts.
//!
//! The event is the source of truth: a ledger write that fails is logged and the turn goes on
//! (the reports then miss that step; its event still says what it cost). A step redelivered
//! after its append records the same event at the same seq, which the ledger counts once.

use spool_chat::{
    event::Usage,
    service::UsageService,
    usage::{Day, Tokens, UsageEntry},
};

use super::*;

impl Step<'_> {
    /// Records the usage event just appended (the step's last event), if it is one.
    pub(super) async fn record_usage(&self) {
        let Some(Event {
            seq,
            event: ChatEvent::Usage(usage),
            ..
        }) = self.events.last()
        else {
            return;
        };
        let entry = self.usage_entry(*seq, usage);
        match self.engine.metadata.record_usage(&self.job.org, &entry).await {
            Ok(true) => {}
            Ok(false) => tracing::debug!(chat = %entry.chat_id, seq, "usage recorded already"),
            Err(e) => tracing::warn!(
                chat = %entry.chat_id, seq, error = %e,
                "the usage ledger did not record a step's tokens; its usage event still holds them"
            ),
        }
    }

    fn usage_entry(&self, seq: u64, usage: &Usage) -> UsageEntry {
        let now_ms = self.engine.clock.now_ms();
        UsageEntry {
            workspace_id: self.session.workspace_id.clone(),
            chat_id: self.session.id.clone(),
            seq,
            agent_id: self.agent.as_ref().map(|a| a.id.clone()),
            agent_name: self.agent_name(),
            model: usage.model.clone(),
            day: Day::of_ms(now_ms),
            tokens: Tokens::from(usage),
            ts_ms: now_ms,
        }
    }

    /// Ends a turn about to start in a workspace past its monthly token budget, with a
    /// system message that says so: `Some` with the step's outcome then. A budget that cannot
    /// be read lets the turn run (logged).
    pub(super) async fn refuse_over_budget(&mut self) -> Result<Option<Outcome>, Error> {
        let Some(workspace_id) = self.session.workspace_id.clone() else {
            return Ok(None);
        };
        let usage = UsageService::new(self.engine.metadata.clone(), self.engine.clock.clone());
        let exceeded = match self.workspace_record().await {
            Ok(Some(workspace)) => usage.budget_exceeded(&self.job.org, &workspace).await,
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        let exceeded = match exceeded {
            Ok(exceeded) => exceeded,
            Err(e) => {
                tracing::warn!(workspace = %workspace_id, error = %e, "the token budget could not be checked; the turn runs");
                None
            }
        };
        let Some(exceeded) = exceeded else {
            return Ok(None);
        };
        self.system(Level::Error, &exceeded.message()).await?;
        let reason = spool_chat::service::BUDGET_EXCEEDED;
        Ok(Some(self.finish(EndReason::Error, Some(reason)).await?))
    }
}
