//! # Polling, where no event source hands jobs over
//!
//! Under `spool serve` the worker takes its jobs itself, as Lambda's event source mappings do
//! on AWS: turns from the turn queue ([`poll_turns`]: the embedded queue, or SQS with
//! `--backend aws`), and with `--backend aws` the maintenance and aggregates queues' jobs
//! through their [`JobInbox`] ([`poll_queue`]).

use std::{sync::Arc, time::Duration};

use spool_chat::turns::{Delivery, Lease, Receive, TurnQueue};
use spool_log::jobs::JobInbox;

use crate::{Error, Worker, dispatch::fifo_groups, heartbeat::Heartbeat};

/// How [`poll_turns`] takes turns.
#[derive(Debug, Clone)]
pub struct PollSettings {
    /// How long a delivered turn is leased without a heartbeat; a running step extends it
    /// every third of it.
    pub lease: Duration,
    /// Who leases: a name a restarted worker takes again (`spool_embedded::WorkerSlot`), so it
    /// can take back at once what it held when it stopped.
    pub holder: String,
    /// How long one receive waits for a turn.
    pub wait: Duration,
    /// The most turns running at once (each in its own chat).
    pub concurrency: usize,
    /// The most turns of one organization running at once, so that one organization cannot
    /// take every slot; the queue hands turns out round-robin across organizations.
    pub per_org: usize,
}

impl Default for PollSettings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(120),
            holder: format!("worker-{}", uuid_like()),
            wait: Duration::from_secs(20),
            concurrency: spool_chat::turns::DEFAULT_WORKER_CONCURRENCY,
            per_org: spool_chat::turns::DEFAULT_ORG_TURN_CONCURRENCY,
        }
    }
}

/// A name no other worker has (for workers that have no slot).
fn uuid_like() -> String {
    spool_chat::workspace::new_id("w")
}

/// Takes turns from `queue` and runs them, each chat's in order, different chats at once, as
/// Lambda's event source mapping does on AWS. A step that succeeds is acknowledged; one that
/// fails is handed out again shortly (with the rest of its chat's batch, so their order holds),
/// until its last attempt, which is acknowledged once the turn was ended with an error. Runs
/// until the task is dropped.
pub async fn poll_turns(worker: Arc<Worker>, queue: Arc<dyn TurnQueue>, settings: PollSettings) {
    // Whatever this holder held was interrupted: its previous process is gone.
    match queue.recover(&settings.holder).await {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(turns = n, holder = %settings.holder, "took back the turns this worker held when it stopped")
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot take back this worker's interrupted turns; they come back when their leases end")
        }
    }
    let lease = Lease::new(settings.lease, settings.holder.clone());
    let slots = Arc::new(tokio::sync::Semaphore::new(settings.concurrency.max(1)));
    loop {
        // Wait for a free slot before taking more work.
        let Ok(first) = slots.clone().acquire_owned().await else {
            return;
        };
        let free = slots.available_permits() + 1;
        let request = Receive {
            max: free,
            lease: lease.clone(),
            wait: settings.wait,
            per_org: settings.per_org.max(1),
        };
        let deliveries = match queue.receive(&request).await {
            Ok(deliveries) => deliveries,
            Err(e) => {
                tracing::warn!(error = %e, "cannot receive turns; retrying in a second");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // A batch may hold several turns of one chat (SQS FIFO hands out a group's messages
        // together): they run one after the other.
        let mut first = Some(first);
        for (_, group) in fifo_groups(deliveries, |d| Some(d.job.group())) {
            let permit = match first.take() {
                Some(permit) => permit,
                None => match slots.clone().acquire_owned().await {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let (worker, queue) = (worker.clone(), queue.clone());
            let ttl = settings.lease;
            tokio::spawn(async move {
                run_group(&worker, queue, group, ttl).await;
                drop(permit);
            });
        }
    }
}

/// How long a failed turn step waits before its next attempt.
const RETRY_DELAY: Duration = Duration::from_secs(2);

async fn run_group(worker: &Worker, queue: Arc<dyn TurnQueue>, group: Vec<Delivery>, ttl: Duration) {
    let receipts = group.iter().map(|d| d.receipt.clone()).collect();
    let heartbeat = Heartbeat::start(queue.clone(), receipts, ttl);
    let mut failed = false;
    for delivery in group {
        if !failed {
            let result = worker.run_turn(&delivery.job, delivery.attempts).await;
            heartbeat.done(&delivery.receipt).await;
            if matches!(result, Ok(_) | Err(Error::GaveUp(_))) {
                if let Err(e) = queue.ack(&delivery.receipt).await {
                    tracing::warn!(error = %e, "cannot acknowledge a turn; it will run again, harmlessly");
                }
                continue;
            }
            failed = true;
        }
        heartbeat.done(&delivery.receipt).await;
        if let Err(e) = queue.retry(&delivery.receipt, RETRY_DELAY).await {
            tracing::warn!(error = %e, "cannot hand a failed turn out again; it comes back when its lease ends");
        }
    }
}

/// Long-polls a job queue and runs its jobs, deleting each message once its job succeeded, as
/// Lambda's event source mapping does: a FIFO queue's groups in order (an aggregate stream's
/// events appended a batch at once), other messages one by one. Runs until the task is dropped.
pub async fn poll_queue(worker: Arc<Worker>, inbox: Arc<dyn JobInbox>, wait: Duration) {
    loop {
        let messages = match inbox.receive(wait).await {
            Ok(messages) => messages,
            Err(e) => {
                tracing::warn!(error = %e, "cannot receive jobs; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        // Done messages are deleted in one request, as the event source mapping deletes them;
        // after a failure the rest of its group come back when their visibility timeout ends,
        // still in order.
        let mut done = Vec::new();
        for (_, group) in fifo_groups(messages, |m| m.group.clone()) {
            let ran = worker
                .run_in_order(&group, |m| m.body.as_str(), |m| worker.handle_message(&m.body, 1))
                .await;
            done.extend(group.into_iter().take(ran).map(|m| m.receipt));
        }
        if done.is_empty() {
            continue;
        }
        if let Err(e) = inbox.delete(&done).await {
            tracing::warn!(error = %e, "cannot delete done jobs; they will run again, harmlessly");
        }
    }
}
