//! # Revoked API keys
//!
//! Tokens are verified without a lookup, so deleting a key stops new handshakes but not the
//! day-long tokens already issued for it. Revoking a key therefore also appends its id to one
//! system stream, `system/revoked-keys` (outside every organization's namespace, so no client
//! can name it), and every process that verifies tokens keeps a [`Revocations`] list that reads
//! what was appended since it last looked, at most every [`Revocations::new`]'s interval: a
//! revoked key's tokens stop working within that bound, at the cost of one head read per
//! interval per process.

use std::{collections::HashSet, sync::Arc, time::Duration};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::{sync::Mutex, time::Instant};

use spool_log::{
    error::Error,
    port::StreamLog,
    stream::{Append, ContentType, CreateStream, Offset, Position, StreamPath},
};

/// The stream of revoked key ids.
pub const REVOKED_KEYS_STREAM: &str = "system/revoked-keys";

/// One revocation, as the stream holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// The key's id.
    pub key_id: String,
    /// When it was revoked (ms since the Unix epoch).
    pub revoked_ms: i64,
}

fn path() -> StreamPath {
    StreamPath::parse(REVOKED_KEYS_STREAM).expect("a valid path")
}

/// Records that `key_id` is revoked (the caller deletes the key from the directory).
pub async fn revoke(log: &dyn StreamLog, key_id: &str, now_ms: i64) -> Result<(), Error> {
    let entry = Revocation {
        key_id: key_id.to_owned(),
        revoked_ms: now_ms,
    };
    let body = Bytes::from(serde_json::to_vec(&entry).map_err(|e| Error::unavailable("encode a revocation", e))?);
    match log.append(&path(), Append::one(body.clone())).await {
        Err(Error::NotFound { .. }) => {
            log.create(&path(), CreateStream::new(ContentType::parse("application/json")?))
                .await?;
            log.append(&path(), Append::one(body)).await.map(drop)
        }
        other => other.map(drop),
    }
}

struct Known {
    keys: HashSet<String>,
    offset: Offset,
    checked: Option<Instant>,
}

/// A process's copy of the revoked keys, caught up at most every `interval`.
pub struct Revocations {
    log: Arc<dyn StreamLog>,
    interval: Duration,
    known: Mutex<Known>,
}

impl std::fmt::Debug for Revocations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Revocations")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl Revocations {
    /// The revoked keys of `log`, read again at most every `interval`.
    pub fn new(log: Arc<dyn StreamLog>, interval: Duration) -> Self {
        Self {
            log,
            interval,
            known: Mutex::new(Known {
                keys: HashSet::new(),
                offset: Offset::START,
                checked: None,
            }),
        }
    }

    /// Whether a token's subject (`key:{id}`) names a revoked key. A list that cannot be read
    /// keeps what it knew (and says so in the log): a store outage must not lock everyone out.
    pub async fn is_revoked(&self, subject: &str) -> bool {
        let Some(key_id) = subject.strip_prefix("key:") else {
            return false;
        };
        let mut known = self.known.lock().await;
        if known.checked.is_none_or(|at| at.elapsed() >= self.interval) {
            if let Err(e) = self.catch_up(&mut known).await {
                tracing::warn!(error = %e, "cannot read the revoked keys; using what is known");
            }
            known.checked = Some(Instant::now());
        }
        known.keys.contains(key_id)
    }

    async fn catch_up(&self, known: &mut Known) -> Result<(), Error> {
        loop {
            let chunk = match self.log.read(&path(), Position::At(known.offset), None).await {
                Ok(chunk) => chunk,
                Err(Error::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(e),
            };
            for message in &chunk.messages {
                if let Ok(entry) = serde_json::from_slice::<Revocation>(message) {
                    known.keys.insert(entry.key_id);
                }
            }
            known.offset = chunk.next_offset;
            if chunk.up_to_date || chunk.messages.is_empty() {
                return Ok(());
            }
        }
    }
}
