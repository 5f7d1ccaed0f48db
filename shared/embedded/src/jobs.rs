//! # Maintenance jobs in `spool serve`
//!
//! The embedded store has no queue: [`LocalJobs`] runs each job in a task of this process after
//! its delay, with the handler the server gives it (the worker's). Jobs live in memory; what
//! they act on does not, so at start [`LocalJobs::recover`] schedules again the jobs of every
//! open subscription wake and pending webhook delivery in the store.

use std::{future::Future, time::Duration};

use async_trait::async_trait;
use rusqlite::params;
use spool_log::{
    error::Error,
    jobs::{Deferred, MaintenanceJob},
    subscription::{JobKind, SubscriptionJob, record::Subscription},
};
use tokio::sync::mpsc;

use crate::{EmbeddedMetadata, db::sql};

/// How often a failing job is tried, and the longest wait between tries.
const MAX_TRIES: u32 = 10;
const MAX_WAIT: Duration = Duration::from_secs(300);

/// Runs maintenance jobs in this process, after their delay.
#[derive(Clone)]
pub struct LocalJobs {
    tx: mpsc::UnboundedSender<(MaintenanceJob, Duration)>,
}

/// The receiving end of [`LocalJobs`], for [`LocalJobs::run`].
pub struct LocalJobQueue(mpsc::UnboundedReceiver<(MaintenanceJob, Duration)>);

impl LocalJobs {
    /// A scheduler and the jobs it schedules.
    pub fn new() -> (Self, LocalJobQueue) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, LocalJobQueue(rx))
    }

    /// Runs the scheduled jobs with `handler`, each after its delay, until every scheduler is
    /// dropped.
    pub async fn run<F, Fut>(LocalJobQueue(mut rx): LocalJobQueue, handler: F)
    where
        F: Fn(MaintenanceJob) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        while let Some((job, delay)) = rx.recv().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                // A job that fails (the store was busy) runs again, 1 s later doubling to 5
                // minutes, at most 10 times; what it was for is scheduled again at the next start.
                let mut wait = Duration::from_secs(1);
                for tries in 1..=MAX_TRIES {
                    match handler(job.clone()).await {
                        Ok(()) => return,
                        Err(e) if tries == MAX_TRIES => {
                            tracing::error!(error = %e, ?job, "a maintenance job failed {MAX_TRIES} times; it runs again when the server starts");
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, ?job, retry_in = ?wait, "a maintenance job failed; trying again");
                            tokio::time::sleep(wait).await;
                            wait = (wait * 2).min(MAX_WAIT);
                        }
                    }
                }
            });
        }
    }

    /// Schedules the jobs that were under way when the server stopped; how many.
    pub async fn recover(&self, metadata: &EmbeddedMetadata) -> Result<usize, Error> {
        let jobs = metadata.interrupted_jobs().await?;
        for job in &jobs {
            let _ = self.tx.send((job.clone(), Duration::ZERO));
        }
        Ok(jobs.len())
    }
}

#[async_trait]
impl Deferred for LocalJobs {
    async fn defer(&self, job: MaintenanceJob, delay: Duration) -> Result<(), Error> {
        self.tx
            .send((job, delay))
            .map_err(|_| Error::unavailable("schedule a maintenance job", "the job runner has stopped"))
    }
}

impl EmbeddedMetadata {
    /// The jobs of every open subscription wake (its delivery, which does nothing if it was
    /// delivered, and its expiry), of every pending webhook delivery, and the check of every
    /// turn that waits for a runner.
    pub async fn interrupted_jobs(&self) -> Result<Vec<MaintenanceJob>, Error> {
        self.with(move |conn| {
            let mut jobs = Vec::new();
            let mut stmt = conn
                .prepare("SELECT org, body FROM subscriptions WHERE json_extract(body, '$.wake') IS NOT NULL")
                .map_err(|e| sql("list open wakes", e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list open wakes", e))?;
            for (org, body) in rows {
                let sub: Subscription = serde_json::from_str(&body).map_err(|e| Error::Corrupt {
                    what: format!("a stored subscription: {e}"),
                })?;
                for kind in [JobKind::Deliver, JobKind::Expire] {
                    jobs.push(MaintenanceJob::Subscription(SubscriptionJob {
                        org: org.clone(),
                        id: sub.id.clone(),
                        generation: sub.generation,
                        kind,
                        attempt: sub.failures,
                    }));
                }
            }
            let mut stmt = conn
                .prepare(
                    "SELECT org, hook_id, id, json_array_length(body, '$.attempts') FROM webhook_deliveries
                     WHERE state = 'pending'",
                )
                .map_err(|e| sql("list pending deliveries", e))?;
            let rows = stmt
                .query_map(params![], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, u32>(3)?,
                    ))
                })
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list pending deliveries", e))?;
            for (org, hook_id, delivery_id, attempt) in rows {
                jobs.push(MaintenanceJob::Webhook {
                    org,
                    hook_id,
                    delivery_id,
                    attempt,
                });
            }
            // Every turn that waits for a runner is looked at again: its check was in memory.
            let mut stmt = conn
                .prepare(
                    "SELECT org, turn_id, json_extract(data, '$.session_id') FROM runner_jobs
                     WHERE json_extract(data, '$.session_id') IS NOT NULL",
                )
                .map_err(|e| sql("list runner jobs", e))?;
            let rows = stmt
                .query_map(params![], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
                })
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list runner jobs", e))?;
            for (org, turn_id, session_id) in rows {
                jobs.push(MaintenanceJob::RunnerCheck {
                    org,
                    session_id,
                    turn_id,
                });
            }
            Ok(jobs)
        })
        .await
    }
}
