//! # The audit stream
//!
//! Each organization has one: `audit` (stored at `o/{org}/audit`), a JSON stream of what was
//! done with its credentials (handshakes; capability changes when sessions exist). Clients can
//! read it through the stream function and cannot write it.

use serde_json::Value;
pub use spool_chat::directory::AUDIT_STREAM;
use spool_log::{
    aggregate::{Aggregates, IfMissing},
    error::Error,
    stream::StreamPath,
};

/// Hands `event` over for the audit stream of `org` ([`Aggregates`]: appended off the request
/// path on AWS, so a storm of handshakes never contends at the stream's tail), which is made
/// on its first record. The event gets an `id`.
pub(crate) async fn record(aggregates: &dyn Aggregates, org: &str, event: Value) -> Result<(), Error> {
    let path = StreamPath::in_org(org, AUDIT_STREAM)?;
    aggregates.add(&path, event, IfMissing::Create).await
}

/// Refused handshakes, per API key: the first of each minute is recorded in the audit stream,
/// and the count of those left out rides on the next record, so a client guessing a key's
/// secret costs at most one audit write a minute, whatever its rate.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    windows: std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, u64)>>,
}

/// How long one record of refusals stands for the ones that follow it.
const REFUSAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Keys tracked at most (the oldest windows go first).
const MAX_TRACKED_KEYS: usize = 10_000;

impl Refusals {
    /// Whether to record a refusal of `key_id` now; if so, how many refusals of it were left
    /// out since the last record.
    pub(crate) fn admit(&self, key_id: &str) -> Option<u64> {
        let now = std::time::Instant::now();
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if windows.len() >= MAX_TRACKED_KEYS {
            windows.retain(|_, (started, _)| now.duration_since(*started) < REFUSAL_WINDOW);
        }
        match windows.get_mut(key_id) {
            Some((started, left_out)) if now.duration_since(*started) < REFUSAL_WINDOW => {
                *left_out += 1;
                None
            }
            Some(window) => {
                let left_out = window.1;
                *window = (now, 0);
                Some(left_out)
            }
            None => {
                windows.insert(key_id.to_owned(), (now, 0));
                Some(0)
            }
        }
    }
}
