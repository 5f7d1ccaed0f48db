//! # Polling the job queues
//!
//! On Lambda the worker function receives the maintenance and aggregates queues' messages from
//! their event sources; `spool serve --backend aws` polls them with [`SqsJobInbox`] instead,
//! long-polling ten messages at a time (with their FIFO groups) and deleting those whose jobs
//! are done in one request, as the event source mapping does.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use spool_log::{
    error::Error,
    jobs::{InboxMessage, JobInbox},
};

use crate::errors::describe;

/// A job queue on SQS (the maintenance queue, the aggregates FIFO queue), polled.
#[derive(Debug, Clone)]
pub struct SqsJobInbox {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsJobInbox {
    /// The queue at `queue_url`.
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
        }
    }
}

#[async_trait]
impl JobInbox for SqsJobInbox {
    async fn receive(&self, wait: Duration) -> Result<Vec<InboxMessage>, Error> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(i32::try_from(wait.as_secs().min(20)).unwrap_or(20))
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await
            .map_err(|e| Error::unavailable(format!("SQS ReceiveMessage ({})", self.queue_url), describe(&e)))?;
        let messages = out.messages.unwrap_or_default().into_iter().filter_map(|message| {
            let group = message
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned();
            Some(InboxMessage {
                body: message.body().unwrap_or_default().to_owned(),
                receipt: message.receipt_handle()?.to_owned(),
                group,
            })
        });
        Ok(messages.collect())
    }

    async fn delete(&self, receipts: &[String]) -> Result<(), Error> {
        let entries: Vec<_> = receipts
            .iter()
            .enumerate()
            .filter_map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(receipt)
                    .build()
                    .ok()
            })
            .collect();
        if entries.is_empty() {
            return Ok(());
        }
        let out = self
            .sqs
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| Error::unavailable("SQS DeleteMessageBatch (jobs)", describe(&e)))?;
        match out.failed().len() {
            0 => Ok(()),
            failed => Err(Error::unavailable(
                "SQS DeleteMessageBatch (jobs)",
                format!("{failed} of {} messages were not deleted", receipts.len()),
            )),
        }
    }
}
