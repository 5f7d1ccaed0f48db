//! # Aggregate streams' events on SQS FIFO
//!
//! A request hands a workspace's feed event or an organization's audit record to the
//! aggregates queue (`SPOOL_AGGREGATES_QUEUE_URL`) instead of appending it: one `SendMessage`,
//! which no other request contends with. The queue is FIFO: the message group is the stream,
//! so SQS keeps a stream's events in the order they were sent and hands a group's messages to
//! one worker batch at a time; the deduplication id is the event's id. The worker appends each
//! batch in one append ([`spool_log::aggregate::apply`]), which skips events a crashed
//! delivery had appended already.

use async_trait::async_trait;
use serde_json::Value;
use spool_log::{
    aggregate::{Aggregates, IfMissing, stamp},
    error::Error,
    jobs::MaintenanceJob,
    stream::StreamPath,
};

use crate::errors::describe;

/// Sends aggregate streams' events to the aggregates queue.
#[derive(Debug, Clone)]
pub struct SqsAggregates {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsAggregates {
    /// Sending to the FIFO queue at `queue_url`.
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
        }
    }
}

#[async_trait]
impl Aggregates for SqsAggregates {
    async fn add(&self, path: &StreamPath, mut event: Value, if_missing: IfMissing) -> Result<(), Error> {
        let id = stamp(&mut event)?;
        let job = MaintenanceJob::Aggregate {
            path: path.clone(),
            event,
            if_missing,
        };
        let body = serde_json::to_string(&job).map_err(|e| Error::unavailable("encode an aggregate event", e))?;
        self.sqs
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_group_id(group_id(path))
            .message_deduplication_id(dedup_id(&id))
            .send()
            .await
            .map_err(|e| Error::unavailable("SQS SendMessage (aggregate event)", describe(&e)))?;
        Ok(())
    }
}

/// SQS's longest message group and deduplication ids.
const MAX_ID_CHARS: usize = 128;

/// The message group of a stream's events: its path ([`fit`] to SQS).
pub fn group_id(path: &StreamPath) -> String {
    fit(path.as_str())
}

/// The deduplication id of an event: its id ([`fit`] to SQS).
fn dedup_id(id: &str) -> String {
    fit(id)
}

/// `id` as SQS takes a group or deduplication id: itself, or when it is too long or not
/// ASCII, a prefix of it and a stable hash of the whole (FNV-1a, the same in every build).
fn fit(id: &str) -> String {
    if id.len() <= MAX_ID_CHARS && id.bytes().all(|b| b.is_ascii_graphic()) {
        return id.to_owned();
    }
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let prefix: String = id
        .chars()
        .filter(char::is_ascii_graphic)
        .take(MAX_ID_CHARS - 17)
        .collect();
    format!("{prefix}#{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids_fit_sqs_and_stay_apart() {
        let short = StreamPath::parse("o/acme/workspaces/ws_1/feed").unwrap();
        assert_eq!(group_id(&short), "o/acme/workspaces/ws_1/feed");
        let long_a = StreamPath::parse(format!("o/{}/audit", "a".repeat(300))).unwrap();
        let long_b = StreamPath::parse(format!("o/{}/audita", "a".repeat(300))).unwrap();
        for long in [&long_a, &long_b] {
            let id = group_id(long);
            assert!(id.len() <= MAX_ID_CHARS, "{id}");
            assert_eq!(id, group_id(long), "stable");
        }
        assert_ne!(group_id(&long_a), group_id(&long_b));
        assert_eq!(dedup_id("ev_0193abc"), "ev_0193abc");
        assert!(dedup_id(&"x".repeat(400)).len() <= MAX_ID_CHARS);
    }
}
