//! # Reading a stream's stored messages: the one read path
//!
//! A stream's messages live in up to three kinds of run: the runs a fork inherited (another
//! incarnation's hot tail, or its pages once sealed), the stream's own sealed pages, and its
//! own hot tail. Which run holds a message, how far a read goes on (across inherited runs into
//! the stream's own messages, about `max_bytes` in all), and which answers can never change
//! are decided here, once, for every adapter.
//!
//! An adapter says only how to fetch a run ([`StoredRuns`]: a hot tail's messages, the page
//! holding a message) and calls [`read_stored`]. The embedded adapter fetches inside one
//! SQLite snapshot, without waiting ([`read_stored_now`]); the AWS adapter with as many
//! DynamoDB and S3 round trips as the read needs. Both read the same messages.
//!
//! Invariants: a read never returns a message twice or skips one; an answer is marked
//! immutable only when every message in it came from a sealed page or an inherited run; a
//! sealed message missing from the pages is corruption, never an empty answer.

use std::{
    future::Future,
    pin::pin,
    task::{Context, Poll, Waker},
};

use bytes::Bytes;

use crate::{
    error::Error,
    page::{Page, take_up_to},
    state::StreamState,
};

/// What a read needs next from storage.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fetch {
    /// Messages of the storage id `sid` after `after` and up to `through` from its hot tail:
    /// at least one if any, about `max_bytes` in all. Hand them to [`StoredRead::hot`].
    Hot {
        /// The storage id (the stream's, or the source's for an inherited run).
        sid: String,
        /// The last message not wanted.
        after: u64,
        /// The last message wanted.
        through: u64,
        /// About how many bytes.
        max_bytes: usize,
    },
    /// The sealed page of the storage id `sid` holding message `seq`. Hand it (or `None`, if
    /// no page holds it) to [`StoredRead::page`].
    Page {
        /// The storage id.
        sid: String,
        /// A message the page holds.
        seq: u64,
    },
}

/// One read of a stream's stored messages after `start`: ask [`StoredRead::next_fetch`] what to
/// fetch, hand it back, and [`StoredRead::finish`] when it says the read is done.
#[derive(Debug)]
struct StoredRead<'a> {
    state: &'a StreamState,
    start: u64,
    at: u64,
    max_bytes: usize,
    bytes: usize,
    out: Vec<Bytes>,
    immutable: bool,
    /// The fetch handed out and not yet answered.
    asked: Option<Fetch>,
    /// An inherited run's hot tail was empty: its pages hold it now.
    from_pages: bool,
    done: bool,
    /// The stream's own hot tail held nothing where the head said it would: sealing released
    /// it after the head was read.
    raced: bool,
}

impl<'a> StoredRead<'a> {
    /// A read of `state`'s messages after `start`, about `max_bytes` of them (at least one, if
    /// any).
    fn new(state: &'a StreamState, start: u64, max_bytes: usize) -> Self {
        Self {
            state,
            start,
            at: start,
            max_bytes,
            bytes: 0,
            out: Vec::new(),
            immutable: true,
            asked: None,
            from_pages: false,
            done: false,
            raced: false,
        }
    }

    /// What to fetch next; `None` when the read is done.
    fn next_fetch(&mut self) -> Option<Fetch> {
        if self.done || self.at >= self.state.tail || self.bytes >= self.max_bytes {
            self.done = true;
            return None;
        }
        let max_bytes = self.max_bytes - self.bytes;
        let fetch = if let Some(run) = self.state.inherited_run(self.at) {
            // A fork's inherited messages: the source's hot tail, or its pages once sealed
            // (pages are written before the hot messages they replace are released).
            if self.from_pages {
                Fetch::Page {
                    sid: run.sid.clone(),
                    seq: self.at + 1,
                }
            } else {
                Fetch::Hot {
                    sid: run.sid.clone(),
                    after: self.at,
                    through: run.upto,
                    max_bytes,
                }
            }
        } else if self.at < self.state.sealed {
            Fetch::Page {
                sid: self.state.sid.clone(),
                seq: self.at + 1,
            }
        } else {
            Fetch::Hot {
                sid: self.state.sid.clone(),
                after: self.at,
                through: self.state.tail,
                max_bytes,
            }
        };
        self.asked = Some(fetch.clone());
        Some(fetch)
    }

    /// The hot messages a [`Fetch::Hot`] asked for.
    fn hot(&mut self, messages: Vec<Bytes>) {
        let inherited = self.state.inherited_run(self.at).is_some();
        self.asked = None;
        if messages.is_empty() {
            if inherited {
                self.from_pages = true;
            } else {
                self.raced = true;
                self.done = true;
            }
            return;
        }
        // An inherited run's messages never change; the stream's own hot tail is the last run.
        self.take(messages, inherited);
    }

    /// The page a [`Fetch::Page`] asked for; `None` when storage has no page holding it, which
    /// is corruption (a sealed message is always in a page).
    fn page(&mut self, page: Option<Page>) -> Result<(), Error> {
        let seq = self.at + 1;
        let Some(Fetch::Page { .. }) = self.asked.take() else {
            return Err(Error::Corrupt {
                what: "a page was handed to a read that did not ask for one".to_owned(),
            });
        };
        let page = page.ok_or_else(|| self.state.missing_page(seq))?;
        let mut after = page.messages_after(self.at);
        if let Some(run) = self.state.inherited_run(self.at) {
            // The source's page may go on past what the fork inherited.
            let within = (run.upto - self.at).min(after.len() as u64) as usize;
            after = &after[..within];
        }
        let messages = take_up_to(after, self.max_bytes - self.bytes);
        if messages.is_empty() || !page.range.contains(seq) {
            return Err(self.state.missing_page(seq));
        }
        let inherited = self.state.inherited_run(self.at).is_some();
        self.take(messages, inherited);
        Ok(())
    }

    fn take(&mut self, messages: Vec<Bytes>, go_on: bool) {
        let fixed = go_on || self.at < self.state.sealed;
        self.at += messages.len() as u64;
        self.bytes += messages.iter().map(Bytes::len).sum::<usize>();
        self.immutable &= fixed;
        self.out.extend(messages);
        self.from_pages = false;
        // A read goes on across inherited runs into the stream's own messages, and ends after
        // one run of its own (its pages, or its hot tail).
        if !go_on {
            self.done = true;
        }
    }

    /// The messages read, and whether they can never change (all from sealed pages or
    /// inherited runs). `None` when the stream's own hot tail was released by sealing after its
    /// head was read and nothing was read before: read the head again.
    fn finish(self) -> Option<(Vec<Bytes>, bool)> {
        if self.raced && self.out.is_empty() {
            return None;
        }
        // An empty answer (at the tail) is never immutable.
        let immutable = self.immutable && self.at > self.start;
        Some((self.out, immutable))
    }
}

/// How an adapter fetches the runs a read needs. Each adapter calls [`read_stored`] with its
/// own concrete type, so the futures are as `Send` as that adapter's.
#[allow(async_fn_in_trait)]
pub trait StoredRuns {
    /// Messages of the storage id `sid` after `after` and up to `through` from its hot tail:
    /// at least one if any, about `max_bytes` in all; empty when sealing released them.
    async fn hot(&self, sid: &str, after: u64, through: u64, max_bytes: usize) -> Result<Vec<Bytes>, Error>;

    /// The sealed page of the storage id `sid` that holds message `seq`, if any.
    async fn page_containing(&self, sid: &str, seq: u64) -> Result<Option<Page>, Error>;
}

/// The stored messages of `state` after `start` (about `max_bytes` of them, at least one if
/// any), and whether they can never change. `None` when the stream's own hot tail was
/// released by sealing after `state` was read and nothing was read before: read the head
/// again.
pub async fn read_stored<S: StoredRuns + ?Sized>(
    runs: &S,
    state: &StreamState,
    start: u64,
    max_bytes: usize,
) -> Result<Option<(Vec<Bytes>, bool)>, Error> {
    let mut read = StoredRead::new(state, start, max_bytes);
    while let Some(fetch) = read.next_fetch() {
        match fetch {
            Fetch::Hot {
                sid,
                after,
                through,
                max_bytes,
            } => read.hot(runs.hot(&sid, after, through, max_bytes).await?),
            Fetch::Page { sid, seq } => read.page(runs.page_containing(&sid, seq).await?)?,
        }
    }
    Ok(read.finish())
}

/// [`read_stored`] over runs that never wait (reads inside one snapshot), without a runtime.
/// In one snapshot the head and the hot tail agree, so a message missing from both is lost.
pub fn read_stored_now<S: StoredRuns + ?Sized>(
    runs: &S,
    state: &StreamState,
    start: u64,
    max_bytes: usize,
) -> Result<(Vec<Bytes>, bool), Error> {
    let read = pin!(read_stored(runs, state, start, max_bytes));
    let Poll::Ready(read) = read.poll(&mut Context::from_waker(Waker::noop())) else {
        return Err(Error::Corrupt {
            what: "a snapshot read waited: its store must fetch without waiting".to_owned(),
        });
    };
    read?.ok_or_else(|| Error::Corrupt {
        what: format!("message {} of `{}` is missing from the hot tail", start + 1, state.path),
    })
}

/// Message `seq` of a stream, for a fork's byte sub-offset; `None` as in [`read_stored`].
pub async fn message<S: StoredRuns + ?Sized>(runs: &S, state: &StreamState, seq: u64) -> Result<Option<Bytes>, Error> {
    Ok(match read_stored(runs, state, seq - 1, 1).await? {
        Some((messages, _)) => Some(messages.into_iter().next().ok_or_else(|| state.missing_page(seq))?),
        None => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        limits::LogLimits,
        page::{decode_page, encode_page},
        state::Segment,
        stream::{ContentType, CreateStream, SeqRange, StreamPath},
    };

    fn state(tail: u64, sealed: u64, lineage: Vec<Segment>) -> StreamState {
        let req = CreateStream::new(ContentType::parse("text/plain").unwrap());
        let path = StreamPath::parse("read/test").unwrap();
        let mut state = StreamState::new(path, &req, 0, &LogLimits::default()).unwrap();
        state.tail = tail;
        state.sealed = sealed;
        state.lineage = lineage;
        state
    }

    fn messages(range: std::ops::RangeInclusive<u64>) -> Vec<Bytes> {
        range.map(|i| Bytes::from(format!("m{i}"))).collect()
    }

    fn page(first: u64, last: u64) -> Page {
        let data = encode_page(first, &messages(first..=last));
        decode_page(data, SeqRange { first, last }).unwrap()
    }

    /// A store of `sid`'s pages (`pages`) and hot messages (`hot`) that counts its fetches.
    #[derive(Default)]
    struct Store<'a> {
        pages: &'a [(&'a str, u64, u64)],
        hot: &'a [(&'a str, u64, u64)],
        fetches: std::cell::Cell<usize>,
    }

    impl StoredRuns for Store<'_> {
        async fn hot(&self, sid: &str, after: u64, through: u64, _: usize) -> Result<Vec<Bytes>, Error> {
            self.fetches.set(self.fetches.get() + 1);
            Ok(self
                .hot
                .iter()
                .filter(|(s, _, _)| *s == sid)
                .flat_map(|&(_, first, last)| messages(first.max(after + 1)..=last.min(through)))
                .collect())
        }

        async fn page_containing(&self, sid: &str, seq: u64) -> Result<Option<Page>, Error> {
            self.fetches.set(self.fetches.get() + 1);
            Ok(self
                .pages
                .iter()
                .find(|&&(s, first, last)| s == sid && (first..=last).contains(&seq))
                .map(|&(_, first, last)| page(first, last)))
        }
    }

    /// Runs a future of the test store, which never waits.
    fn now<F: Future>(future: F) -> F::Output {
        match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(output) => output,
            Poll::Pending => unreachable!("the test store never waits"),
        }
    }

    fn read(
        store: &Store<'_>,
        state: &StreamState,
        start: u64,
        max_bytes: usize,
    ) -> Result<Option<(Vec<Bytes>, bool)>, Error> {
        now(read_stored(store, state, start, max_bytes))
    }

    #[test]
    fn a_read_takes_pages_then_stops_at_the_end_of_its_own_run() {
        let s = state(10, 6, vec![]);
        let sid = s.sid.clone();
        let pages = [(sid.as_str(), 1, 3), (sid.as_str(), 4, 6)];
        let hot = [(sid.as_str(), 7, 10)];
        let store = Store {
            pages: &pages,
            hot: &hot,
            ..Store::default()
        };
        let (got, immutable) = read(&store, &s, 0, usize::MAX).unwrap().unwrap();
        assert_eq!(got, messages(1..=3), "one page per read");
        assert!(immutable);
        let (got, immutable) = read(&store, &s, 6, usize::MAX).unwrap().unwrap();
        assert_eq!(got, messages(7..=10));
        assert!(
            !immutable,
            "the hot tail may still be sealed into pages, but it is not final"
        );
    }

    #[test]
    fn a_fork_reads_across_its_inherited_runs_into_its_own_messages() {
        // Inherited: 1..=4 from `a` (sealed into a page 1..=6 that goes on past the fork
        // point), 5..=7 from `b` (still hot); its own messages 8..=9 are hot.
        let lineage = vec![
            Segment {
                sid: "a".to_owned(),
                upto: 4,
            },
            Segment {
                sid: "b".to_owned(),
                upto: 7,
            },
        ];
        let s = state(9, 7, lineage);
        let sid = s.sid.clone();
        let pages = [("a", 1, 6)];
        let hot = [("b", 5, 9), (sid.as_str(), 8, 9)];
        let store = Store {
            pages: &pages,
            hot: &hot,
            ..Store::default()
        };
        let (got, immutable) = read(&store, &s, 2, usize::MAX).unwrap().unwrap();
        assert_eq!(
            got,
            messages(3..=9),
            "across both inherited runs, within each run's bounds"
        );
        assert!(!immutable, "it ends in the fork's own hot tail");
        assert_eq!(store.fetches.get(), 4, "a's hot tail, a's page, b's hot tail, its own");
        let (got, immutable) = read(&store, &s, 0, 4).unwrap().unwrap();
        assert_eq!(got, messages(1..=2), "about max_bytes");
        assert!(immutable, "inherited messages never change");
        let cut = now(message(&store, &s, 5)).unwrap();
        assert_eq!(cut, Some(Bytes::from("m5")), "one message, for a fork's cut");
    }

    #[test]
    fn a_missing_page_is_corruption_and_a_released_hot_tail_a_race() {
        let s = state(6, 3, vec![]);
        let store = Store::default();
        let err = read(&store, &s, 0, usize::MAX).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(
            read(&store, &s, 3, usize::MAX).unwrap().is_none(),
            "read the head again"
        );
        let err = read_stored_now(&store, &s, 3, usize::MAX).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { .. }),
            "in one snapshot the race is loss: {err}"
        );
        let before = store.fetches.get();
        let (got, immutable) = read(&store, &s, 6, usize::MAX).unwrap().unwrap();
        assert!(got.is_empty() && !immutable, "at the tail: nothing, and not final");
        assert_eq!(store.fetches.get(), before, "nothing fetched at the tail");
    }
}
