//! # Background jobs
//!
//! Work that runs off the request path, carried as JSON in an SQS message body on AWS (the
//! maintenance queue and the aggregates FIFO queue, consumed by the worker function).

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{aggregate::IfMissing, error::Error, stream::StreamPath};

/// Runs maintenance jobs later: the maintenance queue with a delay on AWS, a task of the
/// process in `spool serve` (`spool_embedded::LocalJobs`).
#[async_trait]
pub trait Deferred: Send + Sync {
    /// Runs `job` after `delay` (at least once: every job is safe to run twice).
    async fn defer(&self, job: MaintenanceJob, delay: Duration) -> Result<(), Error>;
}

/// A queue of jobs polled where no event source hands them over: `spool serve --backend aws`
/// polls the maintenance and aggregates queues (`spool_aws::SqsJobInbox`), as Lambda's event
/// source mapping does for the worker function.
#[async_trait]
pub trait JobInbox: Send + Sync {
    /// Up to ten messages, waiting up to `wait` (20 s at most) for the first.
    async fn receive(&self, wait: Duration) -> Result<Vec<InboxMessage>, Error>;
    /// Deletes the messages whose jobs are done, by their receipts: those it could not delete
    /// are delivered again (every job is safe to run twice).
    async fn delete(&self, receipts: &[String]) -> Result<(), Error>;
}

/// A message of a [`JobInbox`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxMessage {
    /// The job, as JSON (a [`MaintenanceJob`]).
    pub body: String,
    /// What deletes it once its job is done.
    pub receipt: String,
    /// Its FIFO group: a group's messages run in order; messages without one, each alone.
    pub group: Option<String>,
}

/// A maintenance job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum MaintenanceJob {
    /// Seal a stream's full pages (or everything, when `final_seal`).
    Seal {
        /// The stream.
        path: StreamPath,
        /// Seal the short last page too.
        #[serde(default)]
        final_seal: bool,
        /// With `final_seal`: only if the stream's tail is still this one (nothing was appended
        /// since the job was sent, so the stream has been idle); otherwise only full pages.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        if_tail: Option<u64>,
        /// With `if_tail`: the chain of idle checks this one belongs to ([`crate::stream::SealMode::Idle`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        chain: Option<u64>,
    },
    /// Append an event to an aggregate stream (a workspace's feed, an organization's audit
    /// stream), handed over by a request ([`crate::aggregate`]). Carried on the aggregates FIFO
    /// queue, grouped by `path`; the worker appends a group's batch at once.
    Aggregate {
        /// The stream.
        path: StreamPath,
        /// The event, with its `id`.
        event: serde_json::Value,
        /// What to do if the stream does not exist.
        #[serde(default)]
        if_missing: IfMissing,
    },
    /// Deliver or expire a subscription's wake ([`crate::subscription`]), after a delay.
    Subscription(crate::subscription::SubscriptionJob),
    /// Look at a turn that waits for a runner (`spool_chat::runner`): queue it again, so the
    /// engine fails it if no runner took it in time or its runner was lost too often.
    RunnerCheck {
        /// The organization.
        org: String,
        /// The chat.
        session_id: String,
        /// The turn.
        turn_id: String,
    },
    /// Attempt a webhook endpoint's delivery (the endpoints' owner runs it: the worker).
    Webhook {
        /// The organization.
        org: String,
        /// The endpoint.
        hook_id: String,
        /// The delivery.
        delivery_id: String,
        /// How many attempts it had when this job was scheduled: a job whose delivery has had
        /// more since (a duplicate, or one a restart scheduled again) does nothing.
        #[serde(default)]
        attempt: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_have_a_stable_json_shape() {
        let job = MaintenanceJob::Seal {
            path: StreamPath::parse("sessions/a").unwrap(),
            final_seal: false,
            if_tail: None,
            chain: None,
        };
        let json = serde_json::to_string(&job).unwrap();
        assert_eq!(json, r#"{"job":"seal","path":"sessions/a","final_seal":false}"#);
        let back: MaintenanceJob = serde_json::from_str(r#"{"job":"seal","path":"sessions/a"}"#).unwrap();
        assert_eq!(back, job);
        assert!(serde_json::from_str::<MaintenanceJob>(r#"{"job":"seal","path":"/bad"}"#).is_err());
        let idle = MaintenanceJob::Seal {
            path: StreamPath::parse("sessions/a").unwrap(),
            final_seal: true,
            if_tail: Some(7),
            chain: None,
        };
        let json = serde_json::to_string(&idle).unwrap();
        assert_eq!(
            json,
            r#"{"job":"seal","path":"sessions/a","final_seal":true,"if_tail":7}"#
        );
        assert_eq!(serde_json::from_str::<MaintenanceJob>(&json).unwrap(), idle);
        let wake = MaintenanceJob::Subscription(crate::subscription::SubscriptionJob {
            org: "o".into(),
            id: "s".into(),
            generation: 3,
            kind: crate::subscription::JobKind::Expire,
            attempt: 0,
        });
        let json = serde_json::to_string(&wake).unwrap();
        assert_eq!(
            json,
            r#"{"job":"subscription","org":"o","id":"s","generation":3,"kind":"expire","attempt":0}"#
        );
        assert_eq!(serde_json::from_str::<MaintenanceJob>(&json).unwrap(), wake);
    }
}
