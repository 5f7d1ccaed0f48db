//! # From a queue's message to its job
//!
//! The rules both ways of taking jobs share, Lambda's batches ([`crate::batch`]) and polling
//! ([`crate::poll`]): which job a message body is, how messages fall into FIFO groups, and how
//! a group runs (in order, an aggregate stream's events at once, stopping at the first failure
//! so the group keeps its order when the queue delivers the rest again).

use std::{collections::BTreeMap, future::Future};

use serde::Deserialize;
use spool_chat::turns::TurnJob;
use spool_log::jobs::MaintenanceJob;

use crate::{Error, Worker};

/// A job from either queue.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Job {
    Maintenance(MaintenanceJob),
    Turn(TurnJob),
}

/// `messages` by their FIFO group, in order within each; a message without a group (the
/// maintenance queue's) is a group of its own.
pub(crate) fn fifo_groups<M>(
    messages: impl IntoIterator<Item = M>,
    group_of: impl Fn(&M) -> Option<String>,
) -> BTreeMap<String, Vec<M>> {
    let mut groups: BTreeMap<String, Vec<M>> = BTreeMap::new();
    for (i, message) in messages.into_iter().enumerate() {
        let group = group_of(&message).unwrap_or_else(|| format!("#{i}"));
        groups.entry(group).or_default().push(message);
    }
    groups
}

impl Worker {
    /// Parses a message body and runs its job.
    pub async fn handle_message(&self, body: &str, attempt: u32) -> Result<(), Error> {
        self.handle_message_until(body, attempt, None).await
    }

    /// [`Self::handle_message`] on a host that stops at `host_deadline`.
    pub(crate) async fn handle_message_until(
        &self,
        body: &str,
        attempt: u32,
        host_deadline: Option<tokio::time::Instant>,
    ) -> Result<(), Error> {
        match serde_json::from_str(body).map_err(Error::Malformed)? {
            Job::Maintenance(job) => self.run(job).await,
            Job::Turn(job) => self.run_turn_until(&job, attempt, host_deadline).await.map(drop),
        }
    }

    /// Runs one FIFO group's messages (their bodies by `body`) as Lambda's event source mapping
    /// hands them over: an aggregate stream's events appended at once, other jobs one by one
    /// with `run`, until one fails. How many of them, from the first, are done: the rest are
    /// delivered again, still in order.
    pub(crate) async fn run_in_order<'m, M, F>(
        &self,
        group: &'m [M],
        body: impl Fn(&'m M) -> &'m str,
        run: impl Fn(&'m M) -> F,
    ) -> usize
    where
        F: Future<Output = Result<(), Error>>,
    {
        if let Some(appended) = self.append_aggregate_group(group.iter().map(body)).await {
            return if appended { group.len() } else { 0 };
        }
        for (done, message) in group.iter().enumerate() {
            if let Err(e) = run(message).await {
                tracing::error!(error.message = %e, error.cause_chain = ?e, "job failed; SQS will retry it");
                return done;
            }
        }
        group.len()
    }
}
