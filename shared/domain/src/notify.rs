//! # In-process wake-ups for live readers
//!
//! A writer publishes every change it commits to a stream; live readers in the same process
//! wait on it instead of polling the store. Changes made by other processes (another `spool`
//! on the same data dir, another Lambda instance) are caught by the adapters' slow re-check.

use std::{collections::HashMap, future::Future, sync::Mutex, time::Duration};

use tokio::sync::watch;

use crate::{
    Error,
    stream::{Offset, StreamMeta, StreamPath, WaitOutcome},
};

/// Per-stream change counters that waiters subscribe to.
#[derive(Debug, Default)]
pub struct Notifier {
    streams: Mutex<HashMap<StreamPath, watch::Sender<u64>>>,
}

impl Notifier {
    /// A receiver that sees every later [`Notifier::publish`] of `path`. Subscribe before
    /// checking the stream, so a change between the check and the wait is not missed.
    pub fn subscribe(&self, path: &StreamPath) -> watch::Receiver<u64> {
        let mut streams = self.lock();
        streams
            .entry(path.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Wakes every waiter of `path`.
    pub fn publish(&self, path: &StreamPath) {
        let mut streams = self.lock();
        if let Some(sender) = streams.get(path) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
        // Forget streams nobody waits on any more, so the map stays as small as the set of
        // streams with live readers.
        if streams.len() > 64 {
            streams.retain(|_, sender| sender.receiver_count() > 0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<StreamPath, watch::Sender<u64>>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a live reader needs to know of a stream: its tail and whether it is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailProbe {
    /// The stream's tail.
    pub tail: Offset,
    /// Whether it is closed.
    pub closed: bool,
}

impl From<StreamMeta> for TailProbe {
    fn from(meta: StreamMeta) -> Self {
        Self {
            tail: meta.tail,
            closed: meta.closed,
        }
    }
}

/// Waits until the stream at `path` has messages after `after` or is closed, or `timeout`
/// passes. Wakes at once on an in-process [`Notifier::publish`], and otherwise probes the
/// stream's tail every `recheck` to see other processes' writes.
pub async fn wait_for_data<F, Fut>(
    notifier: &Notifier,
    path: &StreamPath,
    after: Offset,
    timeout: Duration,
    recheck: Duration,
    mut metadata: F,
) -> Result<WaitOutcome, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<TailProbe, Error>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changes = notifier.subscribe(path);
    loop {
        let meta = metadata().await?;
        if meta.tail > after || meta.closed {
            return Ok(WaitOutcome::Ready {
                tail: meta.tail,
                closed: meta.closed,
            });
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(WaitOutcome::TimedOut { tail: meta.tail });
        }
        let nap = recheck.min(deadline - now);
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    // The notifier dropped this stream's sender; subscribe again.
                    changes = notifier.subscribe(path);
                }
            }
            () = tokio::time::sleep(nap) => {}
        }
    }
}
