//! # Aggregate streams' events
//!
//! Workspaces' feeds and organizations' audit records, handed over by requests on the
//! aggregates FIFO queue (one group per stream): a group's events are appended at once, those a
//! previous delivery appended skipped, and then go to the workspace's webhooks.

use serde_json::Value;
use spool_log::{aggregate::IfMissing, jobs::MaintenanceJob, stream::StreamPath};

use crate::{Error, Worker};

impl Worker {
    /// Appends `events` (a batch of one aggregate stream's, in the order they were handed
    /// over) to the stream at `path` in one append, skipping those a previous delivery appended.
    pub async fn append_aggregate(
        &self,
        path: &StreamPath,
        events: &[Value],
        if_missing: IfMissing,
    ) -> Result<(), Error> {
        let appender = self.aggregates.as_ref().ok_or(Error::NoAggregates)?;
        let appended = appender.apply(path, events, if_missing).await?;
        tracing::debug!(%path, events = events.len(), appended, "aggregate events appended");
        // To the workspace's webhooks: each event is one delivery however often it comes, so a
        // failure here fails the batch, which SQS delivers again.
        if let Some(hooks) = &self.hooks {
            hooks.appended(path, events).await?;
        }
        Ok(())
    }

    /// When `bodies` are one aggregate stream's events (a group of the aggregates queue),
    /// appends them at once ([`Self::append_aggregate`]): whether they were; `None` for a group
    /// of other jobs.
    pub(crate) async fn append_aggregate_group<'a>(&self, bodies: impl IntoIterator<Item = &'a str>) -> Option<bool> {
        let (path, events, if_missing) = aggregate_batch(bodies)?;
        match self.append_aggregate(&path, &events, if_missing).await {
            Ok(()) => Some(true),
            Err(e) => {
                tracing::error!(%path, error.message = %e, error.cause_chain = ?e, "cannot append aggregate events; SQS will retry them");
                Some(false)
            }
        }
    }
}

/// The events of `bodies` if every one is an aggregate job for one stream with one rule: the
/// stream, its events in order, and the rule.
fn aggregate_batch<'a>(bodies: impl IntoIterator<Item = &'a str>) -> Option<(StreamPath, Vec<Value>, IfMissing)> {
    let mut batch: Option<(StreamPath, Vec<Value>, IfMissing)> = None;
    for body in bodies {
        let Ok(MaintenanceJob::Aggregate {
            path,
            event,
            if_missing,
        }) = serde_json::from_str(body)
        else {
            return None;
        };
        match &mut batch {
            None => batch = Some((path, vec![event], if_missing)),
            Some((p, events, rule)) if *p == path && *rule == if_missing => events.push(event),
            Some(_) => return None,
        }
    }
    batch
}
