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

/// Per-stream change signals that waiters subscribe to, each carrying the highest tail
/// published (0: not known), so a waiter woken by an append need not ask the store where the
/// tail is, and one waiting at the tail this process wrote need not ask whether it moved.
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

    /// Wakes every waiter of `path`: with the stream's tail after a committed append that left
    /// it open, without one after any other change (a close, a create, a delete), which
    /// waiters then look up.
    pub fn publish(&self, path: &StreamPath, tail: Option<Offset>) {
        let mut streams = self.lock();
        if let Some(sender) = streams.get(path) {
            sender.send_modify(|published| {
                *published = tail.map_or(0, |tail| (*published).max(tail.seq()));
            });
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
/// passes. Wakes at once on an in-process [`Notifier::publish`] (answering from the tail it
/// carries, without probing, when that is past `after`), and otherwise probes the stream's
/// tail every `recheck` to see other processes' writes. It probes at once too, unless `after`
/// is the tail this process last published.
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
    let published = *changes.borrow_and_update();
    if published > after.seq() {
        return Ok(WaitOutcome::Ready {
            tail: Offset::after(published),
            closed: false,
        });
    }
    // This process committed the stream's tail at `after` and nothing since: no need to ask
    // the store now (other processes' appends are the re-check's to find).
    let mut look = published == 0 || published < after.seq();
    loop {
        if look {
            let meta = metadata().await?;
            if meta.tail > after || meta.closed {
                return Ok(WaitOutcome::Ready {
                    tail: meta.tail,
                    closed: meta.closed,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(WaitOutcome::TimedOut { tail: meta.tail });
            }
        } else if tokio::time::Instant::now() >= deadline {
            return Ok(WaitOutcome::TimedOut { tail: after });
        }
        look = true;
        let nap = recheck.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    // The notifier dropped this stream's sender; subscribe again.
                    changes = notifier.subscribe(path);
                } else {
                    let published = *changes.borrow_and_update();
                    if published > after.seq() {
                        // Whether it is closed too, the read that follows tells.
                        return Ok(WaitOutcome::Ready {
                            tail: Offset::after(published),
                            closed: false,
                        });
                    }
                }
            }
            () = tokio::time::sleep(nap) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    };

    use super::*;

    fn path() -> StreamPath {
        StreamPath::parse("test/notify").expect("valid")
    }

    /// A probe that counts its calls and always answers `tail`, open.
    fn probe(calls: &Arc<AtomicU64>, tail: u64) -> impl FnMut() -> std::future::Ready<Result<TailProbe, Error>> {
        let calls = Arc::clone(calls);
        move || {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(TailProbe {
                tail: Offset::after(tail),
                closed: false,
            }))
        }
    }

    // Paused time: the sleeps run in order, however busy the machine.
    #[tokio::test(start_paused = true)]
    async fn an_append_published_in_process_answers_without_probing_again() {
        let notifier = Arc::new(Notifier::default());
        let calls = Arc::new(AtomicU64::new(0));
        let publisher = Arc::clone(&notifier);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            publisher.publish(&path(), Some(Offset::after(7)));
        });
        // The store's tail stays at 5 for the probe: only the published tail can say 7.
        let waited = wait_for_data(
            &notifier,
            &path(),
            Offset::after(5),
            Duration::from_secs(10),
            Duration::from_secs(10),
            probe(&calls, 5),
        )
        .await
        .expect("waits");
        assert_eq!(
            waited,
            WaitOutcome::Ready {
                tail: Offset::after(7),
                closed: false
            }
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "only the first look probes");
    }

    // Paused time: the sleeps run in order, however busy the machine.
    #[tokio::test(start_paused = true)]
    async fn a_change_without_a_tail_is_looked_up() {
        let notifier = Arc::new(Notifier::default());
        let calls = Arc::new(AtomicU64::new(0));
        let publisher = Arc::clone(&notifier);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            // A tail at or before the waiter's offset says nothing new either.
            publisher.publish(&path(), Some(Offset::after(3)));
            tokio::time::sleep(Duration::from_millis(20)).await;
            publisher.publish(&path(), None);
        });
        let waited = wait_for_data(
            &notifier,
            &path(),
            Offset::after(5),
            Duration::from_millis(300),
            Duration::from_secs(10),
            probe(&calls, 5),
        )
        .await
        .expect("waits");
        assert_eq!(waited, WaitOutcome::TimedOut { tail: Offset::after(5) });
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "a probe first, after each wake-up and at the deadline"
        );
    }

    // Paused time: the sleeps run in order, however busy the machine.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_at_the_tail_this_process_published_probes_only_at_the_recheck() {
        let notifier = Notifier::default();
        let _waiting = notifier.subscribe(&path());
        notifier.publish(&path(), Some(Offset::after(5)));
        let calls = Arc::new(AtomicU64::new(0));
        let waited = wait_for_data(
            &notifier,
            &path(),
            Offset::after(5),
            Duration::from_millis(250),
            Duration::from_millis(100),
            probe(&calls, 5),
        )
        .await
        .expect("waits");
        assert_eq!(waited, WaitOutcome::TimedOut { tail: Offset::after(5) });
        // At 100 and 200 ms, and at the deadline: never on the way in.
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        // A close publishes no tail: the next waiter looks at once.
        notifier.publish(&path(), None);
        let calls = Arc::new(AtomicU64::new(0));
        wait_for_data(
            &notifier,
            &path(),
            Offset::after(5),
            Duration::ZERO,
            Duration::from_millis(100),
            probe(&calls, 5),
        )
        .await
        .expect("waits");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
