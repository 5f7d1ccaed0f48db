//! # Agent turns on SQS FIFO
//!
//! The turns queue (`SPOOL_TURNS_QUEUE_URL`) is FIFO: the message group is the session (within
//! its organization), so SQS hands out a session's turns in order and holds the next back while
//! one is in flight; the deduplication id is the job's key (turn and trigger), so re-enqueueing a
//! turn step within SQS's five-minute window sends nothing. On Lambda the worker receives turns from the queue's event
//! source; [`TurnQueue::receive`] serves `spool serve --backend aws` and tests. A lease is the
//! message's visibility timeout, kept short and extended by heartbeats while a step runs
//! ([`TurnQueue::extend`]): SQS knows no holders, so a crashed worker's jobs come back when
//! their short lease ends.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use spool_chat::turns::{Delivery, Receive, TurnJob, TurnQueue};
use spool_log::error::Error;

use crate::errors::describe;

/// The turns queue on SQS.
#[derive(Debug, Clone)]
pub struct SqsTurnQueue {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsTurnQueue {
    /// The queue at `queue_url`.
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
        }
    }
}

#[async_trait]
impl TurnQueue for SqsTurnQueue {
    async fn enqueue(&self, job: &TurnJob) -> Result<(), Error> {
        let body = serde_json::to_string(job).map_err(|e| Error::unavailable("encode a turn job", e))?;
        self.sqs
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_group_id(job.group())
            .message_deduplication_id(job.key())
            .send()
            .await
            .map_err(|e| Error::unavailable("SQS SendMessage (turn)", describe(&e)))?;
        Ok(())
    }

    async fn receive(&self, request: &Receive) -> Result<Vec<Delivery>, Error> {
        let (max, lease, wait) = (request.max, &request.lease, request.wait);
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .visibility_timeout(i32::try_from(lease.ttl.as_secs().max(1)).unwrap_or(i32::MAX))
            .wait_time_seconds(i32::try_from(wait.as_secs().min(20)).unwrap_or(20))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| Error::unavailable("SQS ReceiveMessage (turns)", describe(&e)))?;
        let mut deliveries = Vec::new();
        for message in out.messages.unwrap_or_default() {
            let (Some(body), Some(receipt)) = (message.body(), message.receipt_handle()) else {
                continue;
            };
            let job: TurnJob = match serde_json::from_str(body) {
                Ok(job) => job,
                Err(e) => {
                    // Left alone, it is redelivered until the dead-letter queue takes it.
                    tracing::error!(error = %e, "a turn message that is not a turn job");
                    continue;
                }
            };
            let attempts = message
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            deliveries.push(Delivery {
                job,
                receipt: receipt.to_owned(),
                attempts,
            });
        }
        Ok(deliveries)
    }

    async fn ack(&self, receipt: &str) -> Result<(), Error> {
        self.sqs
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| Error::unavailable("SQS DeleteMessage (turn)", describe(&e)))?;
        Ok(())
    }

    async fn extend(&self, receipt: &str, ttl: Duration) -> Result<(), Error> {
        self.sqs
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(i32::try_from(ttl.as_secs().max(1)).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| Error::unavailable("SQS ChangeMessageVisibility (heartbeat)", describe(&e)))?;
        Ok(())
    }

    async fn retry(&self, receipt: &str, delay: Duration) -> Result<(), Error> {
        self.sqs
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(i32::try_from(delay.as_secs()).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| Error::unavailable("SQS ChangeMessageVisibility (turn)", describe(&e)))?;
        Ok(())
    }
}
