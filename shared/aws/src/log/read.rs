//! # Reads: the domain's read path over batches and pages
//!
//! [`spool_log::read::read_stored`] decides which run holds the next messages (a fork's
//! inherited runs, the sealed pages, the batches after them); this part fetches them: batches
//! with a strongly consistent `Query` (and a reverse one for the batch a read starts inside),
//! pages with a `GetObject`.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use spool_log::{
    error::Error,
    notify::WaitOutcome,
    notify::wait_for_data,
    page::{Page, decode_frames, decode_page},
    port::StreamReader,
    read::{self, StoredRuns, read_stored},
    state::StreamState,
    stream::{Chunk, Offset, Position, StreamMeta, StreamPath},
};

use super::{AwsLog, Inner, pages::page_key};
use crate::items::Body;

impl Inner {
    /// Messages after `after` (up to `through`) from the hot tail, about `max_bytes` of them.
    /// Empty when the batch holding `after + 1` is not there (it expired, long after a page
    /// took it): the caller reads the stream's state again.
    pub(super) async fn hot_messages(
        &self,
        sid: &str,
        after: u64,
        through: u64,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, Error> {
        let mut out: Vec<Bytes> = Vec::new();
        let mut bytes = 0usize;
        let mut next = after + 1;
        if next > through {
            return Ok(out);
        }
        // Batches are keyed by their first message: a read that starts inside one (after a
        // page or a short read ended mid-batch) looks back for it.
        // A query's next page continues with the same key range.
        let from = next;
        let (mut batches, mut more) = self.batch_range(sid, from, Offset::MAX_SEQ + 1, true, None).await?;
        if batches.first().map(|b| b.first) != Some(next) {
            match self.newest_batch(sid, next - 1, true).await? {
                Some(holding) if holding.first <= next && next <= holding.last() => batches.insert(0, holding),
                _ => return Ok(out),
            }
        }
        'pages: loop {
            for batch in batches {
                if batch.first > next || next > through || batch.len() == 0 {
                    break 'pages;
                }
                let (first, last, len) = (batch.first, batch.last(), batch.len());
                let frames = match batch.body {
                    Body::Inline(frames) => frames,
                    // Sealing deleted it after this read's head was read: read again.
                    Body::Blob(key) => match self.get_blob(&key).await? {
                        Some(frames) => frames,
                        None => break 'pages,
                    },
                    Body::Empty => break 'pages,
                };
                let messages = decode_frames(frames)?;
                if messages.len() as u64 != len {
                    return Err(Error::Corrupt {
                        what: format!("batch {first}..={last} of stream {sid} has {} messages", messages.len()),
                    });
                }
                let end = (through.min(last) + 1 - first) as usize;
                for message in &messages[(next - first) as usize..end] {
                    bytes += message.len();
                    out.push(message.clone());
                    next += 1;
                    if bytes >= max_bytes {
                        break 'pages;
                    }
                }
            }
            match more {
                Some(key) if next <= through => {
                    (batches, more) = self
                        .batch_range(sid, from, Offset::MAX_SEQ + 1, true, Some(key))
                        .await?;
                }
                _ => break,
            }
        }
        Ok(out)
    }

    pub(super) async fn read_once(
        &self,
        path: &StreamPath,
        from: Position,
        max_bytes: usize,
    ) -> Result<Option<Chunk>, Error> {
        let now = self.now();
        let head = self.live_head(path).await?;
        let state = &head.state;
        let start = state.read_start(from)?;
        let Some((messages, from_pages)) = read_stored(self, state, start, max_bytes).await? else {
            return Ok(None);
        };
        // A read refreshes a sliding TTL; if that fails, the read still answers (the stream may
        // only expire sooner), and the next read tries again.
        if state.needs_touch(now)
            && let Err(e) = self.touch(state, now).await
        {
            tracing::warn!(path = %path, error = %e, "cannot refresh the stream's TTL on this read");
        }
        Ok(Some(state.chunk(start, messages, from_pages)))
    }
}

impl Inner {
    /// A large append's frames; `None` once they expired (15 days after they were written, a
    /// day after their batch).
    async fn get_blob(&self, key: &str) -> Result<Option<Bytes>, Error> {
        match self.get_object(key).await {
            Ok(frames) => Ok(Some(frames)),
            Err(e) => {
                let head = self
                    .clients
                    .s3
                    .head_object()
                    .bucket(&self.opts.bucket)
                    .key(key)
                    .send()
                    .await;
                match head {
                    Err(aws_sdk_s3::error::SdkError::ServiceError(h)) if h.err().is_not_found() => Ok(None),
                    _ => Err(e),
                }
            }
        }
    }
}

impl StoredRuns for Inner {
    async fn hot(&self, sid: &str, after: u64, through: u64, max_bytes: usize) -> Result<Vec<Bytes>, Error> {
        self.hot_messages(sid, after, through, max_bytes).await
    }

    async fn page_containing(&self, sid: &str, seq: u64) -> Result<Option<Page>, Error> {
        match self.page_range_containing(sid, seq).await? {
            Some(range) => Ok(Some(decode_page(self.get_object(&page_key(sid, range)).await?, range)?)),
            None => Ok(None),
        }
    }
}

impl Inner {
    /// Message `seq` of a stream, for a fork's byte sub-offset.
    pub(super) async fn message(&self, state: &StreamState, seq: u64) -> Result<Bytes, Error> {
        for _ in 0..5 {
            if let Some(message) = read::message(self, state, seq).await? {
                return Ok(message);
            }
        }
        Err(Error::Contention {
            path: state.path.clone(),
        })
    }
}

#[async_trait]
impl StreamReader for AwsLog {
    async fn metadata(&self, path: &StreamPath) -> Result<StreamMeta, Error> {
        Ok(self.inner.live_head(path).await?.state.meta())
    }

    async fn read(&self, path: &StreamPath, from: Position, max_bytes: Option<usize>) -> Result<Chunk, Error> {
        let max_bytes = max_bytes.unwrap_or(self.inner.opts.limits.max_read_bytes);
        for _ in 0..5 {
            if let Some(chunk) = self.inner.read_once(path, from, max_bytes).await? {
                return Ok(chunk);
            }
            // The batches expired between our state and batch reads: read again.
        }
        Err(Error::Contention { path: path.clone() })
    }

    async fn wait(&self, path: &StreamPath, after: Offset, timeout: Duration) -> Result<WaitOutcome, Error> {
        let poll = self.inner.opts.poll_interval;
        wait_for_data(&self.inner.notifier, path, after, timeout, poll, || {
            self.inner.probe(path)
        })
        .await
    }
}
