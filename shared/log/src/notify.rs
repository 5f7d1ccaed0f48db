//! # In-process wake-ups for live readers
//!
//! A writer publishes every change it commits to a stream; live readers in the same process
//! wait on it instead of polling the store. An append small enough is published with its
//! messages ([`Delivered`]), so a reader waiting right before them answers from memory the
//! moment they are durable, with no read back from the store. Changes made by other processes
//! (another `spool` on the same data dir, another Lambda instance) are caught by the adapters'
//! slow re-check, and read from the store.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use tokio::sync::watch;

use crate::{
    error::Error,
    stream::{Chunk, ContentType, Offset, StreamMeta, StreamPath},
};

/// Messages an append committed to a stream left open, as its writer published them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The storage id of the stream's incarnation.
    pub stream_id: String,
    /// The stream's content type.
    pub content_type: ContentType,
    /// The sequence number of the first message.
    pub first: u64,
    /// The messages, in order; the last is the stream's tail.
    pub messages: Vec<Bytes>,
}

impl Delivered {
    /// The sequence number of the last message: the stream's tail when it was published.
    pub fn last(&self) -> u64 {
        self.first + self.messages.len() as u64 - 1
    }

    /// What a read after `after` of the incarnation `stream_id` returned when these messages
    /// were committed: them, up to date. `None` for another offset or incarnation (the stream
    /// was deleted and made again, by another process perhaps).
    pub fn chunk_after(&self, after: Offset, stream_id: &str) -> Option<Chunk> {
        let fits = after.seq() + 1 == self.first && self.stream_id == stream_id && !self.messages.is_empty();
        fits.then(|| Chunk {
            stream_id: self.stream_id.clone(),
            content_type: self.content_type.clone(),
            start: after,
            messages: self.messages.clone(),
            next_offset: Offset::after(self.last()),
            up_to_date: true,
            closed: false,
            immutable: false,
        })
    }
}

/// What waiting for data past an offset ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitOutcome {
    /// There are messages past the offset, or the stream is closed.
    Ready {
        /// The stream's tail.
        tail: Offset,
        /// Whether it is closed.
        closed: bool,
        /// The messages right after the offset, as the append that woke the wait committed
        /// them in this process: what a read from the offset would return, without one.
        delivered: Option<Arc<Delivered>>,
    },
    /// Nothing happened before the timeout.
    TimedOut {
        /// The stream's tail.
        tail: Offset,
    },
}

/// What was last published of a stream: the highest tail (0: not known) and the messages of
/// the append that set it, when it published them.
#[derive(Debug, Clone, Default)]
struct Published {
    tail: u64,
    delivered: Option<Arc<Delivered>>,
}

/// Per-stream change signals that waiters subscribe to, each carrying the highest tail
/// published (0: not known), so a waiter woken by an append need not ask the store where the
/// tail is, and one waiting at the tail this process wrote need not ask whether it moved; and
/// the messages of the append that published it, so a waiter right before them need not read.
#[derive(Debug, Default)]
pub struct Notifier {
    streams: Mutex<HashMap<StreamPath, watch::Sender<Published>>>,
}

impl Notifier {
    /// A receiver that sees every later [`Notifier::publish`] of `path`. Subscribe before
    /// checking the stream, so a change between the check and the wait is not missed.
    fn subscribe(&self, path: &StreamPath) -> watch::Receiver<Published> {
        let mut streams = self.lock();
        streams
            .entry(path.clone())
            .or_insert_with(|| watch::channel(Published::default()).0)
            .subscribe()
    }

    /// How many waiters of `path` there are now.
    pub fn waiters(&self, path: &StreamPath) -> usize {
        self.lock().get(path).map_or(0, watch::Sender::receiver_count)
    }

    /// Wakes every waiter of `path`: with the stream's tail after a committed append that left
    /// it open, without one after any other change (a close, a create, a delete), which
    /// waiters then look up.
    pub fn publish(&self, path: &StreamPath, tail: Option<Offset>) {
        self.send(path, tail.map(Offset::seq), None);
    }

    /// Wakes every waiter of `path` after a committed append that left it open, with its
    /// messages (`delivered`, whose last is the tail).
    pub fn publish_delivered(&self, path: &StreamPath, delivered: Delivered) {
        self.send(path, Some(delivered.last()), Some(Arc::new(delivered)));
    }

    fn send(&self, path: &StreamPath, tail: Option<u64>, delivered: Option<Arc<Delivered>>) {
        let mut streams = self.lock();
        if let Some(sender) = streams.get(path) {
            sender.send_modify(|published| {
                *published = match tail {
                    Some(tail) if tail >= published.tail => Published { tail, delivered },
                    // An older tail than one published already: it says nothing new.
                    Some(_) => Published {
                        tail: published.tail,
                        delivered: None,
                    },
                    None => Published::default(),
                };
            });
        }
        // Forget streams nobody waits on any more, so the map stays as small as the set of
        // streams with live readers.
        if streams.len() > 64 {
            streams.retain(|_, sender| sender.receiver_count() > 0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<StreamPath, watch::Sender<Published>>> {
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
    let published = changes.borrow_and_update().tail;
    if published > after.seq() {
        // Published before this wait began: its messages may be older than the store's
        // state (another process may have changed the stream since), so they are read.
        return Ok(WaitOutcome::Ready {
            tail: Offset::after(published),
            closed: false,
            delivered: None,
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
                    delivered: None,
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
                    let published = changes.borrow_and_update().clone();
                    if published.tail > after.seq() {
                        // Whether it is closed too, the read that follows tells.
                        return Ok(ready(&published, after));
                    }
                }
            }
            () = tokio::time::sleep(nap) => {}
        }
    }
}

/// A wait answered by what was published past `after`: with its messages when they start
/// right after it.
fn ready(published: &Published, after: Offset) -> WaitOutcome {
    WaitOutcome::Ready {
        tail: Offset::after(published.tail),
        closed: false,
        delivered: published.delivered.clone().filter(|d| d.first == after.seq() + 1),
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
                closed: false,
                delivered: None,
            }
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "only the first look probes");
    }

    fn delivered(first: u64, count: u64) -> Delivered {
        Delivered {
            stream_id: "sid".to_owned(),
            content_type: crate::stream::ContentType::parse("application/json").unwrap(),
            first,
            messages: (first..first + count).map(|i| Bytes::from(i.to_string())).collect(),
        }
    }

    // Paused time: the sleeps run in order, however busy the machine.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_right_before_an_append_gets_its_messages_and_others_read() {
        let notifier = Arc::new(Notifier::default());
        let calls = Arc::new(AtomicU64::new(0));
        let publisher = Arc::clone(&notifier);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            publisher.publish_delivered(&path(), delivered(6, 2));
        });
        let stream = path();
        let wait = |after: u64| {
            wait_for_data(
                &notifier,
                &stream,
                Offset::after(after),
                Duration::from_secs(10),
                Duration::from_secs(10),
                probe(&calls, 5),
            )
        };
        // A waiter at the tail before the append: woken with its messages, as a read returns them
        let WaitOutcome::Ready {
            tail,
            delivered: Some(batch),
            ..
        } = wait(5).await.unwrap()
        else {
            panic!("woken without the messages");
        };
        assert_eq!(tail, Offset::after(7));
        let chunk = batch.chunk_after(Offset::after(5), "sid").unwrap();
        assert_eq!(chunk.messages, vec![Bytes::from("6"), Bytes::from("7")]);
        assert_eq!(
            (chunk.start, chunk.next_offset, chunk.up_to_date),
            (Offset::after(5), Offset::after(7), true)
        );
        // A waiter further behind is told where the tail is, and reads
        let behind = wait(3).await.unwrap();
        assert_eq!(
            behind,
            WaitOutcome::Ready {
                tail: Offset::after(7),
                closed: false,
                delivered: None
            }
        );
        // And an older tail published later says nothing new and carries no messages
        notifier.publish(&path(), Some(Offset::after(6)));
        assert!(matches!(
            wait(5).await.unwrap(),
            WaitOutcome::Ready { delivered: None, .. }
        ));
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
