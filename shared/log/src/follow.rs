//! # Following a stream: the one loop under every live reader
//!
//! Every live reader (the protocol's SSE and long-poll, a chat's event stream, a front end's
//! turn stream) does the same thing: read a stream from an offset, and once caught up, wait
//! for more; say now and then that the line is alive; stop when the stream closes, when its
//! time is up or when the server stops. [`Follow`] is that loop, written once. Each
//! [`Follow::next`] is what happened next ([`Followed`]): a chunk of messages, a keep-alive
//! tick, or the end and why ([`End`]). What a reader sends for each is its own: the readers
//! are formatters over this loop.
//!
//! Behind the tail it reads on at once. At the tail it waits ([`StreamReader::wait`], up to a
//! keep-alive period or the deadline); when the append that woke the wait handed its messages
//! over in memory ([`Delivered`](crate::notify::Delivered)) and they start right where the
//! reader is, they are the next chunk, with no read back from the store; otherwise it reads.
//!
//! A `Follow` owns what it needs (no borrow of a request), so a response body can hold it;
//! dropping it drops any read or wait in progress.

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, time::Instant};

use crate::{
    error::Error,
    notify::WaitOutcome,
    port::StreamReader,
    stream::{Chunk, Position, StreamPath},
};

/// What a live reader does next, as [`Follow::next`] says.
#[derive(Debug)]
pub enum Followed {
    /// The messages after those yielded before, as one read returns them (or as the append
    /// that woke a wait handed them over). It may hold none: the first read of a stream at its
    /// tail, or a read after a change that added no message. The last chunk of a closed
    /// stream says `closed`; the follow ends after it.
    Chunk(Chunk),
    /// Nothing came for a keep-alive period.
    KeepAlive,
    /// Nothing more will come.
    End(End),
}

/// Why a follow ended.
#[derive(Debug)]
pub enum End {
    /// The stream is closed, and its last chunk was yielded.
    Closed,
    /// The deadline passed; the client resumes from the last offset it got.
    Deadline,
    /// The stop signal turned (the server is stopping).
    Stopped,
    /// A read or a wait failed.
    Failed(Error),
}

/// What [`Follow::next`] does when called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Read from the offset: the start, or behind the tail.
    Read,
    /// Wait at the tail for more, then read.
    Wait,
    /// The stream closed: end.
    Close,
    /// It has ended.
    Over,
}

/// A stream followed from an offset: reads, waits at the tail, keep-alive ticks and a
/// deadline, in one loop ([`Follow::next`]).
pub struct Follow {
    reader: Arc<dyn StreamReader>,
    path: StreamPath,
    /// Where the next read starts: where the follow started until the first chunk, then the
    /// offset after the last message yielded.
    from: Position,
    /// The storage id of the incarnation last read: messages handed over by a wait are taken
    /// only from it.
    stream_id: String,
    keep_alive: Duration,
    deadline: Instant,
    stop: Option<watch::Receiver<bool>>,
    /// Whether a chunk was yielded yet (the first read is not held to the deadline).
    started: bool,
    step: Step,
}

impl Follow {
    /// Follows `path` from `from` with `reader`, until `deadline`; a wait at the tail lasts
    /// at most `keep_alive`, after which [`Followed::KeepAlive`] says that nothing came. Nothing
    /// is read before the first [`Follow::next`] (or [`Follow::start`]).
    pub fn new(
        reader: Arc<dyn StreamReader>,
        path: StreamPath,
        from: Position,
        keep_alive: Duration,
        deadline: Instant,
    ) -> Self {
        Self {
            reader,
            path,
            from,
            stream_id: String::new(),
            keep_alive,
            deadline,
            stop: None,
            started: false,
            step: Step::Read,
        }
    }

    /// The same, ending ([`End::Stopped`]) as soon as `stop` turns `true`: at once while it
    /// waits, before its next read while it reads on; `None` never stops it.
    #[must_use]
    pub fn until_stopped(mut self, stop: Option<watch::Receiver<bool>>) -> Self {
        self.stop = stop;
        self
    }

    /// Reads the first chunk now, so a stream that cannot be read (missing, an offset past
    /// its tail) is an error before anything is sent: the chunk, and the follow after it.
    pub async fn start(mut self) -> Result<(Chunk, Self), Error> {
        let chunk = self.reader.read(&self.path, self.from, None).await?;
        self.advance(&chunk);
        Ok((chunk, self))
    }

    /// What happens next: the next chunk (read at once behind the tail, after a wait at it),
    /// a keep-alive tick when a wait of a keep-alive period saw nothing, or the end. The
    /// deadline is checked before each read but the first and before each wait; once ended,
    /// a follow ends again at once ([`End::Deadline`]).
    pub async fn next(&mut self) -> Followed {
        match self.step {
            Step::Read => {
                if self.started && Instant::now() >= self.deadline {
                    return self.end(End::Deadline);
                }
                if self.started && self.stop.as_ref().is_some_and(|stop| *stop.borrow()) {
                    return self.end(End::Stopped);
                }
                self.read().await
            }
            Step::Wait => self.wait().await,
            Step::Close => self.end(End::Closed),
            Step::Over => Followed::End(End::Deadline),
        }
    }

    /// Waits at the tail (up to a keep-alive period, the deadline or the stop signal), then
    /// takes what the wait handed over or reads.
    async fn wait(&mut self) -> Followed {
        let now = Instant::now();
        if now >= self.deadline {
            return self.end(End::Deadline);
        }
        let Position::At(offset) = self.from else {
            // Not started from an offset yet: nothing to wait after.
            return self.read().await;
        };
        let nap = self.keep_alive.min(self.deadline - now);
        let waited = tokio::select! {
            waited = self.reader.wait(&self.path, offset, nap) => waited,
            () = stopped(self.stop.as_ref()) => return self.end(End::Stopped),
        };
        match waited {
            Err(e) => self.end(End::Failed(e)),
            Ok(WaitOutcome::TimedOut { .. }) if Instant::now() < self.deadline => Followed::KeepAlive,
            Ok(WaitOutcome::TimedOut { .. }) => self.end(End::Deadline),
            // The append that woke the wait, from memory: what the read would return.
            Ok(WaitOutcome::Ready {
                delivered: Some(delivered),
                ..
            }) if let Some(chunk) = delivered.chunk_after(offset, &self.stream_id) => self.yielded(chunk),
            Ok(WaitOutcome::Ready { .. }) => self.read().await,
        }
    }

    async fn read(&mut self) -> Followed {
        match self.reader.read(&self.path, self.from, None).await {
            Ok(chunk) => self.yielded(chunk),
            Err(e) => self.end(End::Failed(e)),
        }
    }

    /// `chunk`, yielded.
    fn yielded(&mut self, chunk: Chunk) -> Followed {
        self.advance(&chunk);
        Followed::Chunk(chunk)
    }

    /// Moves past `chunk`: on at once while behind the tail (a read that brought nothing
    /// waits, so as not to spin), to the end after a closed stream's last chunk.
    fn advance(&mut self, chunk: &Chunk) {
        self.from = Position::At(chunk.next_offset);
        self.started = true;
        self.stream_id.clone_from(&chunk.stream_id);
        self.step = if chunk.closed {
            Step::Close
        } else if !chunk.up_to_date && !chunk.messages.is_empty() {
            Step::Read
        } else {
            Step::Wait
        };
    }

    fn end(&mut self, why: End) -> Followed {
        self.step = Step::Over;
        Followed::End(why)
    }
}

/// Completes when `stop` turns `true`; never without one (or once its sender is gone).
async fn stopped(stop: Option<&watch::Receiver<bool>>) {
    if let Some(mut stop) = stop.cloned()
        && stop.wait_for(|stop| *stop).await.is_ok()
    {
        return;
    }
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use std::{
        collections::VecDeque,
        sync::{
            Mutex,
            atomic::{AtomicUsize, Ordering},
        },
    };

    use async_trait::async_trait;
    use bytes::Bytes;

    use super::*;
    use crate::{
        notify::Delivered,
        stream::{ContentType, Offset, StreamMeta},
    };

    /// A stream whose reads answer from `messages` (`tail` of them exist), and whose waits
    /// answer from a script (timing out when it is empty).
    struct Scripted {
        messages: Mutex<Vec<Bytes>>,
        closed: Mutex<bool>,
        per_read: usize,
        waits: Mutex<VecDeque<WaitOutcome>>,
        reads: AtomicUsize,
    }

    impl Scripted {
        fn new(count: u64, per_read: usize) -> Arc<Self> {
            Arc::new(Self {
                messages: Mutex::new((1..=count).map(|i| Bytes::from(i.to_string())).collect()),
                closed: Mutex::new(false),
                per_read,
                waits: Mutex::new(VecDeque::new()),
                reads: AtomicUsize::new(0),
            })
        }
    }

    fn content_type() -> ContentType {
        ContentType::parse("application/json").expect("valid")
    }

    #[async_trait]
    impl StreamReader for Scripted {
        async fn metadata(&self, _path: &StreamPath) -> Result<StreamMeta, Error> {
            unreachable!("a follow never asks for metadata")
        }

        async fn read(&self, _path: &StreamPath, from: Position, _max: Option<usize>) -> Result<Chunk, Error> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let all = self.messages.lock().unwrap().clone();
            let start = match from {
                Position::At(offset) => offset.seq(),
                Position::Now => all.len() as u64,
            };
            let messages: Vec<Bytes> = all.iter().skip(start as usize).take(self.per_read).cloned().collect();
            let next = start + messages.len() as u64;
            let up_to_date = next == all.len() as u64;
            Ok(Chunk {
                stream_id: "sid".to_owned(),
                content_type: content_type(),
                start: Offset::after(start),
                messages,
                next_offset: Offset::after(next),
                up_to_date,
                closed: up_to_date && *self.closed.lock().unwrap(),
                immutable: false,
            })
        }

        async fn wait(&self, _path: &StreamPath, after: Offset, timeout: Duration) -> Result<WaitOutcome, Error> {
            let next = self.waits.lock().unwrap().pop_front();
            match next {
                Some(outcome) => Ok(outcome),
                None => {
                    tokio::time::sleep(timeout).await;
                    Ok(WaitOutcome::TimedOut { tail: after })
                }
            }
        }
    }

    fn path() -> StreamPath {
        StreamPath::parse("test/follow").expect("valid")
    }

    fn follow(stream: &Arc<Scripted>, lasting: Duration) -> Follow {
        Follow::new(
            stream.clone(),
            path(),
            Position::START,
            Duration::from_secs(15),
            Instant::now() + lasting,
        )
    }

    fn chunk(followed: Followed) -> Chunk {
        match followed {
            Followed::Chunk(chunk) => chunk,
            other => panic!("expected a chunk, got {other:?}"),
        }
    }

    // Paused time: the sleeps run in order, however busy the machine.
    #[tokio::test(start_paused = true)]
    async fn behind_the_tail_it_reads_on_then_ticks_at_the_tail_until_the_deadline() {
        // GIVEN a stream of 5 messages, read 2 at a time
        let stream = Scripted::new(5, 2);
        let mut follow = follow(&stream, Duration::from_secs(40));
        // WHEN it is followed from the start
        let seqs: Vec<u64> = {
            let mut seqs = Vec::new();
            for _ in 0..3 {
                seqs.push(chunk(follow.next().await).next_offset.seq());
            }
            seqs
        };
        // THEN it reads on without waiting, to the tail
        assert_eq!(seqs, vec![2, 4, 5]);
        // AND at the tail it ticks every keep-alive period, then ends at the deadline
        assert!(matches!(follow.next().await, Followed::KeepAlive));
        assert!(matches!(follow.next().await, Followed::KeepAlive));
        assert!(matches!(follow.next().await, Followed::End(End::Deadline)));
        assert_eq!(stream.reads.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn messages_handed_over_by_a_wait_are_the_next_chunk_without_a_read() {
        // GIVEN a follow at the tail of 3 messages, and a wait that hands over messages 4 and 5
        let stream = Scripted::new(3, 10);
        let mut follow = follow(&stream, Duration::from_secs(60));
        assert_eq!(chunk(follow.next().await).next_offset.seq(), 3);
        let delivered = Delivered {
            stream_id: "sid".to_owned(),
            content_type: content_type(),
            first: 4,
            messages: vec![Bytes::from("4"), Bytes::from("5")],
        };
        stream.waits.lock().unwrap().push_back(WaitOutcome::Ready {
            tail: Offset::after(5),
            closed: false,
            delivered: Some(Arc::new(delivered)),
        });
        // WHEN it goes on
        let next = chunk(follow.next().await);
        // THEN the messages come from memory
        assert_eq!(next.messages, vec![Bytes::from("4"), Bytes::from("5")]);
        assert_eq!((next.start.seq(), next.next_offset.seq()), (3, 5));
        assert_eq!(stream.reads.load(Ordering::SeqCst), 1, "only the first read");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_without_messages_reads_and_a_closed_stream_ends() {
        // GIVEN a follow at the tail of 2 messages
        let stream = Scripted::new(2, 10);
        let mut follow = follow(&stream, Duration::from_secs(60));
        chunk(follow.next().await);
        // WHEN a message comes from elsewhere and the stream closes
        stream.messages.lock().unwrap().push(Bytes::from("3"));
        *stream.closed.lock().unwrap() = true;
        stream.waits.lock().unwrap().push_back(WaitOutcome::Ready {
            tail: Offset::after(3),
            closed: true,
            delivered: None,
        });
        // THEN it reads the last chunk, which says closed, and ends
        let last = chunk(follow.next().await);
        assert_eq!((last.messages.len(), last.closed), (1, true));
        assert!(matches!(follow.next().await, Followed::End(End::Closed)));
        assert!(matches!(follow.next().await, Followed::End(End::Deadline)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_follow_returns_its_first_read_and_stops_when_told() {
        // GIVEN a follow started at once, with a stop signal
        let stream = Scripted::new(1, 10);
        let (stop, stopping) = watch::channel(false);
        let (first, mut follow) = follow(&stream, Duration::from_secs(60))
            .until_stopped(Some(stopping))
            .start()
            .await
            .expect("reads");
        assert_eq!((first.messages.len(), first.up_to_date), (1, true));
        // WHEN the server stops while it waits
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stop.send_replace(true);
        });
        // THEN it ends
        assert!(matches!(follow.next().await, Followed::End(End::Stopped)));
        assert_eq!(stream.reads.load(Ordering::SeqCst), 1);
    }
}
