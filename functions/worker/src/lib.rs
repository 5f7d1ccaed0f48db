//! # The worker function
//!
//! Runs Spool's background jobs from SQS: on AWS as a Lambda function triggered by the
//! maintenance queue (reporting partial batch failures, so one bad message never fails its
//! batch), and under `spool serve --backend aws` from [`poll_queue`], which long-polls the same
//! queue. Today the jobs are page sealing ([`MaintenanceJob::Seal`]); agent turns come with the
//! worker issue.

use std::{sync::Arc, time::Duration};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use spool_domain::{SealMode, StreamSealer, jobs::MaintenanceJob};
use tracing::Instrument;

/// Why a job failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The message is not a job this worker knows. It is reported as failed, so that after
    /// the queue's retries it lands in the dead-letter queue for an operator to look at.
    #[error("malformed job: {0}")]
    Malformed(#[source] serde_json::Error),
    /// The stream log failed.
    #[error(transparent)]
    Log(#[from] spool_domain::Error),
}

/// Runs jobs.
pub struct Worker {
    sealer: Arc<dyn StreamSealer>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker that seals with `sealer`.
    pub fn new(sealer: Arc<dyn StreamSealer>) -> Self {
        Self { sealer }
    }

    /// Runs one job. Sealing a stream that no longer exists is done already.
    pub async fn run(&self, job: MaintenanceJob) -> Result<(), Error> {
        match job {
            MaintenanceJob::Seal { path, final_seal } => {
                let mode = if final_seal { SealMode::Final } else { SealMode::Full };
                match self.sealer.seal(&path, mode).await {
                    Ok(report) => {
                        tracing::info!(
                            %path,
                            written = report.written.len(),
                            adopted = report.adopted.len(),
                            sealed_through = %report.sealed_through,
                            "sealed"
                        );
                        Ok(())
                    }
                    Err(spool_domain::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Parses a message body and runs its job.
    pub async fn handle_message(&self, body: &str) -> Result<(), Error> {
        let job: MaintenanceJob = serde_json::from_str(body).map_err(Error::Malformed)?;
        self.run(job).await
    }

    /// Handles a batch from Lambda's SQS trigger, concurrently, reporting each failed message
    /// (the trigger must set `ReportBatchItemFailures`).
    pub async fn handle_batch(self: &Arc<Self>, event: SqsEvent) -> SqsBatchResponse {
        let mut tasks = tokio::task::JoinSet::new();
        for record in event.records {
            let worker = Arc::clone(self);
            let id = record.message_id.unwrap_or_default();
            let span = tracing::info_span!("job", message_id = %id);
            tasks.spawn(
                async move {
                    let result = worker.handle_message(record.body.as_deref().unwrap_or_default()).await;
                    if let Err(e) = &result {
                        tracing::error!(error.message = %e, error.cause_chain = ?e, "job failed; SQS will retry it");
                    }
                    (id, result.is_ok())
                }
                .instrument(span),
            );
        }
        let mut response = SqsBatchResponse::default();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok((_, true)) => {}
                Ok((id, false)) => response.add_failure(id),
                Err(e) => {
                    tracing::error!(error = %e, "a job panicked; its message is retried after its visibility timeout")
                }
            }
        }
        response
    }
}

/// Long-polls an SQS queue and runs its jobs, deleting each message once its job succeeded, as
/// Lambda's event source mapping does. Runs until the task is dropped.
pub async fn poll_queue(worker: Arc<Worker>, sqs: aws_sdk_sqs::Client, queue_url: String, wait: Duration) {
    let wait_seconds = i32::try_from(wait.as_secs().min(20)).unwrap_or(20);
    loop {
        let received = sqs
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait_seconds)
            .send()
            .await;
        let messages = match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(queue = %queue_url, error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "cannot receive jobs; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        for message in messages {
            let body = message.body().unwrap_or_default();
            match worker.handle_message(body).await {
                Ok(()) => {
                    if let Some(handle) = message.receipt_handle()
                        && let Err(e) = sqs
                            .delete_message()
                            .queue_url(&queue_url)
                            .receipt_handle(handle)
                            .send()
                            .await
                    {
                        tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "cannot delete a done job; it will run again, harmlessly");
                    }
                }
                Err(e) => tracing::error!(error.message = %e, error.cause_chain = ?e, "job failed; SQS will retry it"),
            }
        }
    }
}
