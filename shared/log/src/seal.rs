//! # Sealing: turning the hot tail into immutable pages
//!
//! Appends land in the store's hot tail (DynamoDB items, SQLite rows). Sealing copies runs of
//! them into immutable pages (S3 objects, files), records the new sealed-through point in the
//! stream head, and only then releases the hot rows. The loop lives here once, over the small
//! [`PageStore`] port, so both backends seal the same way.
//!
//! Page boundaries come from [`PageCutter`], a pure function of the message sizes: a page is cut
//! before the message that would overflow it. Together with the deterministic page encoding
//! this makes sealing idempotent: a re-run after a crash produces the very same pages. The one
//! non-deterministic cut, the short last page of [`SealMode::Final`], is handled by *adopting*
//! any page an interrupted run left behind before cutting new ones.

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    error::Error,
    failpoint::{FailPoints, SEAL_AFTER_COMMIT, SEAL_AFTER_PAGE_WRITE},
    limits::LogLimits,
    page::encode_page,
    state::StreamState,
    stream::{Offset, SealMode, SealReport, SeqRange, StreamPath},
};

/// Cuts a run of messages into pages, deterministically.
#[derive(Debug, Clone)]
pub struct PageCutter {
    page_bytes: usize,
    page_max_messages: usize,
    start: u64,
    bytes: usize,
    count: usize,
}

impl PageCutter {
    /// A cutter for messages starting at sequence number `first`.
    pub fn new(first: u64, limits: &LogLimits) -> Self {
        Self {
            page_bytes: limits.page_bytes.max(1),
            page_max_messages: limits.page_max_messages.max(1),
            start: first,
            bytes: 0,
            count: 0,
        }
    }

    fn full(&self) -> bool {
        self.count >= self.page_max_messages || self.bytes >= self.page_bytes
    }

    fn take(&mut self) -> SeqRange {
        let range = SeqRange {
            first: self.start,
            last: self.start + self.count as u64 - 1,
        };
        self.start += self.count as u64;
        self.count = 0;
        self.bytes = 0;
        range
    }

    /// Offers the next message's size. Returns the page that is complete before it, if the
    /// message does not fit in the current one.
    pub fn push(&mut self, size: usize) -> Option<SeqRange> {
        let cut = (self.count > 0 && (self.full() || self.bytes + size > self.page_bytes)).then(|| self.take());
        self.count += 1;
        self.bytes += size;
        cut
    }

    /// At the end of the available messages: the last page if it is already full, or, in
    /// [`SealMode::Final`], whatever is left.
    pub fn finish(mut self, mode: SealMode) -> Option<SeqRange> {
        (self.count > 0 && (self.full() || mode == SealMode::Final)).then(|| self.take())
    }
}

/// What sealing needs from a store.
#[async_trait]
pub trait PageStore: Send + Sync {
    /// The stream's state, `None` if it does not exist or has expired.
    async fn load_state(&self, path: &StreamPath) -> Result<Option<StreamState>, Error>;
    /// A page of this stream incarnation that starts at message `first`, if one was written.
    async fn find_page_starting_at(&self, sid: &str, first: u64) -> Result<Option<SeqRange>, Error>;
    /// Whether [`Self::write_page`] records in the stream's state that a page is about to be
    /// written ([`StreamState::sealing`], cleared by [`Self::commit_sealed`]), so that sealing
    /// looks for an unrecorded page only when a sealer stopped between the two. A store that
    /// does not (where looking is cheap) is looked in on every pass.
    fn records_page_intents(&self) -> bool {
        false
    }
    /// Messages after sequence number `after`, up to `through`, from the hot tail: at least one
    /// (if any) and about `max_bytes`.
    async fn read_hot(&self, sid: &str, after: u64, through: u64, max_bytes: usize) -> Result<Vec<Bytes>, Error>;
    /// Writes a page, create-only. A page that already exists is identical (pages are a pure
    /// function of immutable messages), so that is success too.
    async fn write_page(&self, state: &StreamState, range: SeqRange, page: Bytes) -> Result<(), Error>;
    /// Moves the head's sealed-through point from `from` to `to`; false if it was not at `from`
    /// (another sealer got there first).
    async fn commit_sealed(&self, state: &StreamState, from: u64, to: u64) -> Result<bool, Error>;
    /// Releases hot-tail storage of messages up to `through`, which pages now hold.
    async fn release_hot(&self, state: &StreamState, through: u64) -> Result<(), Error>;
}

/// Seals a stream's hot tail into pages. Safe to run concurrently and to re-run after a crash
/// at any point.
pub async fn seal_stream(
    store: &dyn PageStore,
    fail: &FailPoints,
    limits: &LogLimits,
    path: &StreamPath,
    mode: SealMode,
) -> Result<SealReport, Error> {
    let state = store
        .load_state(path)
        .await?
        .ok_or_else(|| Error::NotFound { path: path.clone() })?;
    let mut report = SealReport::default();
    let mut sealed = state.sealed;

    // Hot rows a crashed run already covered with a committed page.
    store.release_hot(&state, sealed).await?;

    // Pages an interrupted run wrote but did not record: only where one may be (on S3 a look
    // is a LIST, dearer than the write it recovers).
    let look = !store.records_page_intents() || state.sealing.is_some();
    while look && let Some(range) = store.find_page_starting_at(&state.sid, sealed + 1).await? {
        if range.last > state.tail {
            break;
        }
        if !store.commit_sealed(&state, sealed, range.last).await? {
            return Ok(finish(report, sealed, &state));
        }
        sealed = range.last;
        report.adopted.push(range);
        store.release_hot(&state, sealed).await?;
    }

    let mode = match mode {
        _ if state.closed || state.deleted => SealMode::Final,
        SealMode::Idle { tail, .. } if tail.seq() == state.tail => SealMode::Final,
        SealMode::Idle { .. } => SealMode::Full,
        other => other,
    };
    let mut cutter = PageCutter::new(sealed + 1, limits);
    let mut pending: Vec<Bytes> = Vec::new();
    let mut cursor = sealed;
    while cursor < state.tail {
        let batch = store
            .read_hot(&state.sid, cursor, state.tail, limits.page_bytes)
            .await?;
        if batch.is_empty() {
            // Another sealer released these rows after committing: it is ahead of us. Unless
            // nobody sealed them: then they are gone (the AWS batches' TTL), which must not
            // pass quietly.
            let now = store.load_state(path).await?;
            if now.is_some_and(|now| now.sid == state.sid && now.sealed > sealed) {
                return Ok(finish(report, sealed, &state));
            }
            return Err(Error::Corrupt {
                what: format!(
                    "messages {}..={} of `{path}` are gone before they were sealed",
                    cursor + 1,
                    state.tail
                ),
            });
        }
        cursor += batch.len() as u64;
        for message in batch {
            if let Some(range) = cutter.push(message.len()) {
                let page: Vec<Bytes> = pending.drain(..range.len() as usize).collect();
                if !write_and_commit(store, fail, &state, &mut sealed, range, &page).await? {
                    return Ok(finish(report, sealed, &state));
                }
                report.written.push(range);
            }
            pending.push(message);
        }
    }
    if let Some(range) = cutter.finish(mode)
        && write_and_commit(store, fail, &state, &mut sealed, range, &pending).await?
    {
        report.written.push(range);
    }
    // A close that added no message, after the last page: no page records it, so commit the
    // sealed point again for the store to record the closure with it (once).
    if state.closed && sealed == state.tail && report.written.is_empty() && report.adopted.is_empty() {
        store.commit_sealed(&state, sealed, sealed).await?;
    }
    Ok(finish(report, sealed, &state))
}

fn finish(mut report: SealReport, sealed: u64, state: &StreamState) -> SealReport {
    report.sealed_through = Offset::after(sealed);
    report.tail = state.tail_offset();
    report.closed = state.closed;
    report
}

async fn write_and_commit(
    store: &dyn PageStore,
    fail: &FailPoints,
    state: &StreamState,
    sealed: &mut u64,
    range: SeqRange,
    messages: &[Bytes],
) -> Result<bool, Error> {
    store
        .write_page(state, range, encode_page(range.first, messages))
        .await?;
    fail.check(SEAL_AFTER_PAGE_WRITE)?;
    if !store.commit_sealed(state, *sealed, range.last).await? {
        return Ok(false);
    }
    *sealed = range.last;
    fail.check(SEAL_AFTER_COMMIT)?;
    store.release_hot(state, range.last).await?;
    tracing::debug!(path = %state.path, first = range.first, last = range.last, "sealed page");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(page_bytes: usize, page_max_messages: usize) -> LogLimits {
        LogLimits {
            page_bytes,
            page_max_messages,
            ..LogLimits::default()
        }
    }

    fn cut(sizes: &[usize], l: &LogLimits, mode: SealMode) -> Vec<(u64, u64)> {
        let mut cutter = PageCutter::new(1, l);
        let mut pages: Vec<_> = sizes.iter().filter_map(|s| cutter.push(*s)).collect();
        pages.extend(cutter.finish(mode));
        pages.into_iter().map(|r| (r.first, r.last)).collect()
    }

    #[test]
    fn pages_are_cut_before_the_message_that_overflows() {
        let l = limits(10, 100);
        assert_eq!(cut(&[4, 4, 4, 4, 4], &l, SealMode::Full), vec![(1, 2), (3, 4)]);
        assert_eq!(cut(&[4, 4, 4, 4, 4], &l, SealMode::Final), vec![(1, 2), (3, 4), (5, 5)]);
    }

    #[test]
    fn a_giant_message_gets_a_page_of_its_own() {
        let l = limits(10, 100);
        assert_eq!(cut(&[3, 50, 3], &l, SealMode::Full), vec![(1, 1), (2, 2)]);
    }

    #[test]
    fn pages_hold_at_most_the_message_limit() {
        let l = limits(1000, 2);
        assert_eq!(cut(&[1, 1, 1, 1], &l, SealMode::Full), vec![(1, 2), (3, 4)]);
    }

    #[test]
    fn cuts_do_not_depend_on_what_comes_later() {
        // The pages cut from a prefix are a prefix of the pages cut from the whole run.
        let l = limits(16, 5);
        let sizes: Vec<usize> = (0..200).map(|i| (i * 7919) % 13).collect();
        let whole = cut(&sizes, &l, SealMode::Full);
        for n in 0..sizes.len() {
            let prefix = cut(&sizes[..n], &l, SealMode::Full);
            assert_eq!(prefix[..], whole[..prefix.len()], "prefix of {n} messages");
        }
    }
}
