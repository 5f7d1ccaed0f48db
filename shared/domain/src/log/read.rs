//! # Reading a stream's stored messages: the one read path
//!
//! A stream's messages live in up to three kinds of run: the runs a fork inherited (another
//! incarnation's hot tail, or its pages once sealed), the stream's own sealed pages, and its
//! own hot tail. Which run holds a message, how far a read goes on (across inherited runs into
//! the stream's own messages, about `max_bytes` in all), and which answers can never change
//! are decided here, once, for every adapter.
//!
//! The rule is written without I/O ([`StoredRead`]): it says what to fetch next ([`Fetch`]),
//! the adapter fetches it from its storage (a SQLite snapshot, DynamoDB and S3) and hands it
//! back, until the read is done. So the embedded adapter reads inside one snapshot without
//! an `await`, and the AWS adapter with as many round trips as the read needs, and both read
//! the same messages.

use bytes::Bytes;

use crate::{
    Error,
    page::{Page, take_up_to},
    state::StreamState,
};

/// What a read needs next from storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetch {
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
pub struct StoredRead<'a> {
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
    pub fn new(state: &'a StreamState, start: u64, max_bytes: usize) -> Self {
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
    pub fn next_fetch(&mut self) -> Option<Fetch> {
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
    pub fn hot(&mut self, messages: Vec<Bytes>) {
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
    pub fn page(&mut self, page: Option<Page>) -> Result<(), Error> {
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
    pub fn finish(self) -> Option<(Vec<Bytes>, bool)> {
        if self.raced && self.out.is_empty() {
            return None;
        }
        // An empty answer (at the tail) is never immutable.
        let immutable = self.immutable && self.at > self.start;
        Some((self.out, immutable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        LogLimits,
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

    /// Drives a read against a store of `sid`'s pages (`pages`) and hot messages (`hot`).
    fn drive(
        read: &mut StoredRead<'_>,
        pages: &[(&str, u64, u64)],
        hot: &[(&str, u64, u64)],
    ) -> Result<Vec<Fetch>, Error> {
        let mut asked = Vec::new();
        while let Some(fetch) = read.next_fetch() {
            asked.push(fetch.clone());
            match fetch {
                Fetch::Hot {
                    sid, after, through, ..
                } => {
                    let found = hot
                        .iter()
                        .filter(|(s, _, _)| *s == sid)
                        .flat_map(|&(_, first, last)| messages(first.max(after + 1)..=last.min(through)))
                        .collect();
                    read.hot(found);
                }
                Fetch::Page { sid, seq } => {
                    let found = pages
                        .iter()
                        .find(|&&(s, first, last)| s == sid && (first..=last).contains(&seq))
                        .map(|&(_, first, last)| page(first, last));
                    read.page(found)?;
                }
            }
        }
        Ok(asked)
    }

    #[test]
    fn a_read_takes_pages_then_stops_at_the_end_of_its_own_run() {
        let s = state(10, 6, vec![]);
        let mut read = StoredRead::new(&s, 0, usize::MAX);
        let sid = s.sid.clone();
        drive(&mut read, &[(&sid, 1, 3), (&sid, 4, 6)], &[(&sid, 7, 10)]).unwrap();
        let (got, immutable) = read.finish().unwrap();
        assert_eq!(got, messages(1..=3), "one page per read");
        assert!(immutable);
        let mut read = StoredRead::new(&s, 6, usize::MAX);
        drive(&mut read, &[], &[(&sid, 7, 10)]).unwrap();
        let (got, immutable) = read.finish().unwrap();
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
        let mut read = StoredRead::new(&s, 2, usize::MAX);
        let asked = drive(&mut read, &[("a", 1, 6)], &[("b", 5, 9), (&sid, 8, 9)]).unwrap();
        let (got, immutable) = read.finish().unwrap();
        assert_eq!(
            got,
            messages(3..=9),
            "across both inherited runs, within each run's bounds"
        );
        assert!(!immutable, "it ends in the fork's own hot tail");
        assert_eq!(
            asked.len(),
            4,
            "a's hot tail, a's page, b's hot tail, its own: {asked:?}"
        );
        let mut read = StoredRead::new(&s, 0, 4);
        drive(&mut read, &[("a", 1, 6)], &[]).unwrap();
        let (got, immutable) = read.finish().unwrap();
        assert_eq!(got, messages(1..=2), "about max_bytes");
        assert!(immutable, "inherited messages never change");
    }

    #[test]
    fn a_missing_page_is_corruption_and_a_released_hot_tail_a_race() {
        let s = state(6, 3, vec![]);
        let mut read = StoredRead::new(&s, 0, usize::MAX);
        let err = drive(&mut read, &[], &[]).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        let mut read = StoredRead::new(&s, 3, usize::MAX);
        drive(&mut read, &[], &[]).unwrap();
        assert!(read.finish().is_none(), "read the head again");
        let mut read = StoredRead::new(&s, 6, usize::MAX);
        assert!(read.next_fetch().is_none());
        let (got, immutable) = read.finish().unwrap();
        assert!(got.is_empty() && !immutable, "at the tail: nothing, and not final");
    }
}
