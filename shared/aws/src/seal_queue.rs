//! # Seal requests on SQS
//!
//! When an append leaves a page's worth of messages unsealed, the writer sends a
//! [`MaintenanceJob::Seal`] to the maintenance queue; the worker function seals off the
//! request path. Sealing is idempotent, so a duplicate delivery costs one head read. The same
//! queue carries subscriptions' jobs, with their delays ([`crate::subscriptions`]).

use std::time::Duration;

use async_trait::async_trait;
use spool_log::{error::Error, jobs::MaintenanceJob, port::SealScheduler, stream::StreamPath};

/// Sends seal requests to the maintenance queue.
#[derive(Debug, Clone)]
pub struct SqsSealScheduler {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsSealScheduler {
    /// A scheduler sending to `queue_url` (`SPOOL_MAINTENANCE_QUEUE_URL`).
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
        }
    }
}

#[async_trait]
impl SealScheduler for SqsSealScheduler {
    async fn schedule(&self, path: &StreamPath) -> Result<(), Error> {
        let job = MaintenanceJob::Seal {
            path: path.clone(),
            final_seal: false,
            if_tail: None,
            chain: None,
        };
        self.send(&job, Duration::ZERO).await
    }

    async fn schedule_idle(&self, path: &StreamPath, tail: u64, delay: Duration, chain: u64) -> Result<(), Error> {
        let job = MaintenanceJob::Seal {
            path: path.clone(),
            final_seal: true,
            if_tail: Some(tail),
            chain: Some(chain),
        };
        self.send(&job, delay).await
    }
}

impl SqsSealScheduler {
    /// Sends `job`, delivered after `delay` rounded up to whole seconds (SQS delays a message
    /// 15 minutes at most).
    pub(crate) async fn send(&self, job: &MaintenanceJob, delay: Duration) -> Result<(), Error> {
        let body = serde_json::to_string(job).map_err(|e| Error::unavailable("encode a maintenance job", e))?;
        let seconds = delay.as_millis().div_ceil(1000).min(u128::from(MAX_DELAY_SECONDS));
        let delay = i32::try_from(seconds).unwrap_or(0);
        self.sqs
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .delay_seconds(delay)
            .send()
            .await
            .map_err(|e| Error::unavailable("SQS SendMessage (maintenance job)", crate::errors::describe(&e)))?;
        Ok(())
    }
}

/// SQS's longest message delay.
const MAX_DELAY_SECONDS: u64 = 900;
