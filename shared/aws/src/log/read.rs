//! # Reads: the domain's read path over items and pages
//!
//! [`spool_domain::read::read_stored`] decides which run holds the next messages (a fork's
//! inherited runs, the sealed pages, the hot tail); this part fetches them: hot items with a
//! strongly consistent `Query`, pages with a `GetObject`. A read that finds the hot items
//! released by sealing after it read the head reads the head again.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use spool_domain::{
    Chunk, Error, Offset, Position, StreamMeta, StreamPath, StreamReader, WaitOutcome,
    notify::wait_for_data,
    page::Page,
    page::{decode_frames, decode_page},
    read::{self, StoredRuns, read_stored},
    state::StreamState,
};

use super::{AwsLog, Inner, pages::page_key};
use crate::{
    errors::ddb,
    items::{Batch, Body, Item, batch_sk, log_pk, s},
};

impl Inner {
    /// Messages after `after` (up to `through`) from the hot tail, about `max_bytes` of them.
    /// Empty when the batch holding `after + 1` is gone: sealing released it meanwhile.
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
        let mut start_key: Option<Item> = None;
        'pages: loop {
            let page = self
                .clients
                .dynamodb
                .query()
                .table_name(&self.opts.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
                .expression_attribute_values(":pk", s(log_pk(sid)))
                .expression_attribute_values(":from", s(batch_sk(after + 1)))
                // Items are keyed by their last message, so the one holding `through` may sort
                // after it: read on and stop at `through`.
                .expression_attribute_values(":to", s(batch_sk(Offset::MAX_SEQ)))
                .consistent_read(true)
                .set_exclusive_start_key(start_key.take())
                .send()
                .await
                .map_err(|e| ddb("Query (hot tail)", e))?;
            for item in page.items() {
                let batch = Batch::from_item(item)?;
                if batch.first > next || next > through {
                    break 'pages;
                }
                let frames = match batch.body {
                    Body::Inline(frames) => frames,
                    Body::Blob(key) => self.get_object(&key).await?,
                };
                let messages = decode_frames(frames)?;
                if messages.len() as u64 != batch.last - batch.first + 1 {
                    return Err(Error::Corrupt {
                        what: format!(
                            "batch {}..={} of stream {sid} has {} messages",
                            batch.first,
                            batch.last,
                            messages.len()
                        ),
                    });
                }
                let end = (through.min(batch.last) + 1 - batch.first) as usize;
                for message in &messages[(next - batch.first) as usize..end] {
                    bytes += message.len();
                    out.push(message.clone());
                    next += 1;
                    if bytes >= max_bytes {
                        break 'pages;
                    }
                }
            }
            match page.last_evaluated_key {
                Some(key) if next <= through => start_key = Some(key),
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
            // Sealing released the hot items between our head and item reads: read again.
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
