//! # Heartbeats: a running step keeps its lease
//!
//! A turn's lease is short ([`spool_chat::turns::Lease::ttl`], the turns queue's visibility timeout
//! on AWS), so that a worker that dies gives its turns back soon. A step that runs longer keeps
//! its lease by extending it every third of its length until the step is acknowledged or handed
//! back. The extension and the step's end take the same lock, so a late heartbeat can never
//! undo an acknowledgement or a retry's delay.

use std::{sync::Arc, time::Duration};

use spool_chat::turns::TurnQueue;
use tokio::sync::Mutex;

/// Extends the leases of the receipts it holds until they are [`Self::done`] or it is dropped.
pub(crate) struct Heartbeat {
    pending: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeat {
    /// Starts extending `receipts` by `ttl`, every third of `ttl`.
    pub(crate) fn start(queue: Arc<dyn TurnQueue>, receipts: Vec<String>, ttl: Duration) -> Self {
        let pending = Arc::new(Mutex::new(receipts));
        let beating = Arc::clone(&pending);
        let task = tokio::spawn(async move {
            let every = (ttl / 3).max(Duration::from_millis(100));
            loop {
                tokio::time::sleep(every).await;
                let receipts = beating.lock().await;
                for receipt in receipts.iter() {
                    if let Err(e) = queue.extend(receipt, ttl).await {
                        tracing::warn!(error = %e, "cannot extend a turn's lease; another worker may take it over");
                    }
                }
            }
        });
        Self { pending, task }
    }

    /// Stops extending `receipt`: its step is over. Call it before acknowledging or handing
    /// the job back.
    pub(crate) async fn done(&self, receipt: &str) {
        self.pending.lock().await.retain(|r| r != receipt);
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}
