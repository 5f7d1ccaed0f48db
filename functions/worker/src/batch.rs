//! # Lambda's SQS batches
//!
//! On AWS the worker function is triggered by the queues: each invocation is a batch of
//! records. FIFO groups (a chat's turns, an aggregate stream's events) run in order, and
//! concurrently with each other and with maintenance jobs; each failed record is reported (a
//! partial batch failure), so one bad message never fails its batch. Turn steps still running
//! shortly before the invocation's deadline stop cleanly and carry on in a new job.

use std::{sync::Arc, time::Duration};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use spool_chat::turns::TurnJob;
use spool_log::jobs::MaintenanceJob;
use tracing::Instrument;

use crate::{Error, Worker, dispatch::fifo_groups, heartbeat::Heartbeat};

/// How long before a Lambda invocation's deadline a running turn step stops and hands over to
/// a new job: time to end its message, record the turn and enqueue the job.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(30);

/// The margin kept before an invocation's deadline, when `left` remains of it: [`DEADLINE_MARGIN`],
/// or a fifth of the time for a short invocation, so a step still gets most of it (with a
/// margin as long as the whole invocation, every step would carry over at once).
fn deadline_margin(left: Duration) -> Duration {
    DEADLINE_MARGIN.min(left / 5)
}

impl Worker {
    /// Handles a batch from Lambda's SQS triggers, reporting each failed message (the trigger
    /// must set `ReportBatchItemFailures`). Messages of one FIFO group (a chat's turns) run in
    /// order, and after a failure the rest of its group is reported failed too, so SQS keeps
    /// them in order; groups and maintenance jobs run concurrently.
    pub async fn handle_batch(self: &Arc<Self>, event: SqsEvent) -> SqsBatchResponse {
        self.handle_batch_until(event, None).await
    }

    /// [`Self::handle_batch`] in a Lambda invocation that ends at `deadline` (its context's):
    /// turn steps still running [`DEADLINE_MARGIN`] before it stop cleanly and carry on in a
    /// new job, rather than be killed mid-write.
    pub async fn handle_batch_until(
        self: &Arc<Self>,
        event: SqsEvent,
        deadline: Option<std::time::SystemTime>,
    ) -> SqsBatchResponse {
        // A deadline already past as the invocation starts is no real one (Lambda never starts
        // an invocation without time; an emulator may send a stale one): only the turn's own
        // time limit holds then.
        let left = deadline.and_then(|at| at.duration_since(std::time::SystemTime::now()).ok());
        if deadline.is_some() && left.is_none() {
            tracing::warn!("the invocation's deadline has passed as it starts; ignoring it");
        }
        // Without a turns queue to carry a step over on, only the turn's own time limit holds.
        let left = left.filter(|_| self.heartbeats.is_some());
        let host_deadline = left.map(|left| {
            tracing::debug!(left_ms = left.as_millis(), "the invocation's time");
            tokio::time::Instant::now() + left.saturating_sub(deadline_margin(left))
        });
        // Beside the batch, not before it: the batch's leases are kept from the start.
        self.sweep_if_due();
        // Turns stay leased while the batch runs, however long their steps take.
        let heartbeat = self.heartbeats.as_ref().map(|(queue, ttl)| {
            let receipts = event
                .records
                .iter()
                .filter(|r| serde_json::from_str::<TurnJob>(r.body.as_deref().unwrap_or_default()).is_ok())
                .filter_map(|r| r.receipt_handle.clone())
                .collect();
            Arc::new(Heartbeat::start(queue.clone(), receipts, *ttl))
        });
        let groups = fifo_groups(event.records, |r| r.attributes.get("MessageGroupId").cloned());
        let mut tasks = tokio::task::JoinSet::new();
        // Each group's message ids, by its task: a task that panics leaves no answer of its
        // own, and a record a partial batch response does not list is deleted as done.
        let mut ids_of = std::collections::HashMap::new();
        for (_, records) in groups {
            let worker = Arc::clone(self);
            let heartbeat = heartbeat.clone();
            let ids: Vec<String> = records
                .iter()
                .map(|r| r.message_id.clone().unwrap_or_default())
                .collect();
            let task = tasks.spawn(async move {
                let (worker, heartbeat) = (worker.as_ref(), &heartbeat);
                let done = worker
                    .run_in_order(
                        &records,
                        |r| r.body.as_deref().unwrap_or_default(),
                        |record| async move {
                            let _done = BeatDone(heartbeat.clone(), record.receipt_handle.clone());
                            worker.run_record(record, host_deadline).await
                        },
                    )
                    .await;
                // The rest wait for their next delivery, reported failed; their heartbeats end.
                let mut failed = Vec::new();
                for record in &records[done..] {
                    drop(BeatDone(heartbeat.clone(), record.receipt_handle.clone()));
                    failed.push(record.message_id.clone().unwrap_or_default());
                }
                failed
            });
            ids_of.insert(task.id(), ids);
        }
        let mut response = SqsBatchResponse::default();
        while let Some(done) = tasks.join_next_with_id().await {
            match done {
                Ok((_, failed)) => failed.into_iter().for_each(|id| response.add_failure(id)),
                Err(e) => {
                    // Every record of the group is reported failed, so SQS delivers them again.
                    tracing::error!(error = %e, "a job panicked; its group's messages are reported failed");
                    for id in ids_of.remove(&e.id()).unwrap_or_default() {
                        response.add_failure(id);
                    }
                }
            }
        }
        response
    }

    /// Runs one record's job, as delivered for the record's receive count, recording how long a
    /// seal request waited.
    async fn run_record(&self, record: &SqsMessage, host_deadline: Option<tokio::time::Instant>) -> Result<(), Error> {
        let id = record.message_id.clone().unwrap_or_default();
        let attempt = record
            .attributes
            .get("ApproximateReceiveCount")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        // A seal request's wait on the maintenance queue (its messages have no group);
        // an idle seal's wait is on purpose, not lag.
        let body = record.body.as_deref().unwrap_or_default();
        let idle_seal = matches!(
            serde_json::from_str::<MaintenanceJob>(body),
            Ok(MaintenanceJob::Seal { if_tail: Some(_), .. })
        );
        if !record.attributes.contains_key("MessageGroupId")
            && !idle_seal
            && let Some(sent) = record
                .attributes
                .get("SentTimestamp")
                .and_then(|t| t.parse::<i64>().ok())
        {
            let now = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock);
            let lag = Duration::from_millis(u64::try_from(now - sent).unwrap_or(0));
            self.metrics.record(spool_log::metrics::Metric::SealLag { lag });
        }
        let span = tracing::info_span!("job", message_id = %id);
        self.handle_message_until(body, attempt, host_deadline)
            .instrument(span)
            .await
    }
}

/// Ends a record's heartbeat when the record's job is over, however it ends (a panic too).
struct BeatDone(Option<Arc<Heartbeat>>, Option<String>);

impl Drop for BeatDone {
    fn drop(&mut self) {
        if let (Some(heartbeat), Some(receipt)) = (self.0.take(), self.1.take()) {
            // Lambda reports the batch only after every record is done; the lock is brief.
            tokio::spawn(async move { heartbeat.done(&receipt).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_invocation_keeps_most_of_its_time_for_the_step() {
        assert_eq!(deadline_margin(Duration::from_secs(900)), DEADLINE_MARGIN);
        assert_eq!(deadline_margin(Duration::from_secs(30)), Duration::from_secs(6));
        assert_eq!(deadline_margin(Duration::ZERO), Duration::ZERO);
    }
}
