//! # Sealed pages in S3, and sealing
//!
//! A page is `streams/{sid}/pages/{first:020}-{last:020}`, written create-only
//! (`If-None-Match: *`) and never changed, so a process indexes the pages it has listed and
//! lists again only past the last one it knows. Sealing itself is the domain's
//! ([`seal_stream`]); this part is its [`PageStore`].

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::{error::SdkError, types::AttributeValue};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use spool_log::{
    error::Error,
    page::{page_name, parse_page_name},
    port::StreamSealer,
    seal::{PageStore, seal_stream},
    state::StreamState,
    stream::{Offset, SealMode, SealReport, SeqRange, StreamPath},
};

use super::{AwsLog, Inner, head::Arm};
use crate::{
    errors::{ddb, s3},
    items::{StoredProducer, head_key, n, producer_key, s},
};

/// How old a stream's oldest unsealed batch may get before an idle check seals the stream to
/// its end even though it is still being written: 12 hours, inside the shortest life a batch
/// has (a day past its stream's deadline) with room for the checks' own delays.
pub(super) const MAX_UNSEALED_AGE_S: i64 = 12 * 3600;

/// The S3 key of a sealed page: `streams/{sid}/pages/{first:020}-{last:020}`.
pub(super) fn page_key(sid: &str, range: SeqRange) -> String {
    format!("streams/{sid}/pages/{}", page_name(range))
}

impl Inner {
    pub(super) async fn get_object(&self, key: &str) -> Result<Bytes, Error> {
        let out = self
            .clients
            .s3
            .get_object()
            .bucket(&self.opts.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| s3("GetObject", e))?;
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| Error::unavailable(format!("S3 GetObject {key}: reading the body"), e))?;
        Ok(body.into_bytes())
    }

    pub(super) async fn delete_objects(&self, keys: Vec<String>) {
        use aws_sdk_s3::types::{Delete as S3Delete, ObjectIdentifier};
        for chunk in keys.chunks(1000) {
            let objects: Vec<ObjectIdentifier> = chunk
                .iter()
                .filter_map(|k| ObjectIdentifier::builder().key(k).build().ok())
                .collect();
            let Ok(delete) = S3Delete::builder().set_objects(Some(objects)).quiet(true).build() else {
                continue;
            };
            if let Err(e) = self
                .clients
                .s3
                .delete_objects()
                .bucket(&self.opts.bucket)
                .delete(delete)
                .send()
                .await
            {
                tracing::warn!(error = %s3("DeleteObjects", e), "cannot delete objects; they are unreachable garbage");
            }
        }
    }

    /// Lists pages of `sid` after the key `start_after` and adds them to the index.
    pub(super) async fn list_pages(&self, sid: &str, start_after: Option<String>) -> Result<Vec<SeqRange>, Error> {
        let prefix = format!("streams/{sid}/pages/");
        let mut found = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .clients
                .s3
                .list_objects_v2()
                .bucket(&self.opts.bucket)
                .prefix(&prefix)
                .set_start_after(start_after.clone())
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| s3("ListObjectsV2 (pages)", e))?;
            for object in out.contents() {
                if let Some(range) = object
                    .key()
                    .and_then(|k| k.strip_prefix(&prefix))
                    .and_then(parse_page_name)
                {
                    found.push(range);
                }
            }
            match out.next_continuation_token {
                Some(next) if out.is_truncated == Some(true) => token = Some(next),
                _ => break,
            }
        }
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        if pages.len() > 10_000 {
            pages.clear();
        }
        let index = pages.entry(sid.to_owned()).or_default();
        for range in &found {
            index.insert(range.first, *range);
        }
        Ok(found)
    }

    /// How long ago the oldest unsealed batch of the stream was written (0 if none).
    pub(super) async fn oldest_unsealed_age_s(&self, state: &StreamState) -> Result<i64, Error> {
        if state.sealed >= state.tail {
            return Ok(0);
        }
        // A batch that does not say when it was written is taken as old.
        let written = self
            .newest_batch(&state.sid, state.sealed, true)
            .await?
            .map_or(0, |batch| batch.written_s);
        Ok(self.now() / 1000 - written)
    }

    /// Brings the items of the producers claimed in batches with keys in `(from, to]` up to
    /// their newest claim there (never back: the item may already be newer).
    pub(super) async fn materialize_producers(&self, state: &StreamState, from: u64, to: u64) -> Result<(), Error> {
        let mut newest: BTreeMap<String, StoredProducer> = BTreeMap::new();
        let mut start_key = None;
        loop {
            let (batches, next) = self
                .batch_range(&state.sid, from + 1, to, true, start_key.take())
                .await?;
            for batch in batches {
                for (id, claim) in &batch.claims {
                    newest.insert(
                        id.clone(),
                        StoredProducer {
                            state: *claim,
                            at: batch.last(),
                        },
                    );
                }
            }
            match next {
                Some(key) => start_key = Some(key),
                None => break,
            }
        }
        for (id, stored) in newest {
            let result = self
                .clients
                .dynamodb
                .update_item()
                .table_name(&self.opts.table)
                .set_key(Some(producer_key(&state.sid, &id)))
                .update_expression("SET epoch = :epoch, seq = :seq, #offset = :offset, #at = :at")
                .condition_expression("attribute_not_exists(pk) OR #at < :at")
                .expression_attribute_names("#offset", "offset")
                .expression_attribute_names("#at", "at")
                .expression_attribute_values(":epoch", n(stored.state.epoch))
                .expression_attribute_values(":seq", n(stored.state.seq))
                .expression_attribute_values(":offset", n(stored.state.offset))
                .expression_attribute_values(":at", n(stored.at))
                .send()
                .await;
            match result {
                Ok(_) => {}
                Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {}
                Err(e) => return Err(ddb("UpdateItem (producer)", e)),
            }
        }
        Ok(())
    }

    pub(super) fn cached_page(&self, sid: &str, seq: u64) -> Option<SeqRange> {
        let pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        let (_, range) = pages.get(sid)?.range(..=seq).next_back()?;
        range.contains(seq).then_some(*range)
    }

    /// The page holding message `seq`: from the index, else after listing the pages past the
    /// last one known (pages are immutable, so the index only ever grows).
    pub(super) async fn page_range_containing(&self, sid: &str, seq: u64) -> Result<Option<SeqRange>, Error> {
        if let Some(range) = self.cached_page(sid, seq) {
            return Ok(Some(range));
        }
        let last_known = {
            let pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
            pages
                .get(sid)
                .and_then(|index| index.values().next_back().copied())
                .map(|range| format!("streams/{sid}/pages/{}", page_name(range)))
        };
        self.list_pages(sid, last_known).await?;
        Ok(self.cached_page(sid, seq))
    }
}

#[async_trait]
impl StreamSealer for AwsLog {
    /// An idle check ([`SealMode::Idle`]) is one link of the chain that watches a stream's
    /// unsealed batches until a page holds them (their `ttl` removes them 14 days after they
    /// were written): it seals to the end if the stream has been idle since the check was
    /// armed, or if its oldest unsealed batch is older than [`MAX_UNSEALED_AGE_S`]; and while
    /// batches stay unsealed (or came since), it arms the next check.
    async fn seal(&self, path: &StreamPath, mode: SealMode) -> Result<SealReport, Error> {
        let limits = self.inner.opts.limits;
        let SealMode::Idle { tail, chain } = mode else {
            return seal_stream(self, &self.inner.opts.fail_points, &limits, path, mode).await;
        };
        let state = self.load_state(path).await?;
        let old = match &state {
            Some(state) => self.inner.oldest_unsealed_age_s(state).await? > MAX_UNSEALED_AGE_S,
            None => false,
        };
        let report = match state {
            // Written since the check was armed, and not old: not idle, and its full pages are
            // sealed as they fill (the appends that fill one ask for it; if that ask failed, a
            // page's count of messages, the stream's idle seal or the age limit seals it).
            // Reading its unsealed batches would find nothing to seal: only the next check is
            // armed.
            Some(state)
                if state.tail != tail.seq()
                    && state.tail - state.sealed < limits.page_max_messages as u64
                    && !old
                    && !state.closed
                    && !state.deleted =>
            {
                SealReport {
                    sealed_through: Offset::after(state.sealed),
                    tail: state.tail_offset(),
                    ..SealReport::default()
                }
            }
            _ => {
                let mode = if old { SealMode::Final } else { mode };
                seal_stream(self, &self.inner.opts.fail_points, &limits, path, mode).await?
            }
        };
        // Batches still unsealed, or new since the check was armed, or sealed by this very pass
        // (a writer that read the state before it committed may have put after the sealed
        // tail without arming): one more check.
        let unsealed = report.sealed_through < report.tail;
        let moved = !report.written.is_empty() || !report.adopted.is_empty();
        if report.closed || !(unsealed || report.tail != tail || moved) || self.inner.opts.scheduler.is_none() {
            return Ok(report);
        }
        // One chain per stream: a check a newer chain superseded ends here, unless this pass
        // sealed something (a writer that read the stream before it committed may put after
        // the sealed tail without arming, after the newer chain's check found nothing to do):
        // then it takes the stream over, and the other chain ends at its next check instead.
        let arm = match chain {
            Some(chain) => match self.inner.idle_chain(path).await? {
                Some(named) if named != chain && !moved => {
                    tracing::debug!(%path, chain, named, "a newer chain of idle checks watches this stream");
                    return Ok(report);
                }
                Some(named) if named != chain => Arm::Supersede,
                _ => Arm::Continue(chain),
            },
            None => Arm::Supersede,
        };
        self.inner
            .arm_idle(path, report.tail.seq(), limits.idle_seal, arm)
            .await?;
        Ok(report)
    }

    async fn seal_when_idle(&self, path: &StreamPath, tail: Offset) -> Result<(), Error> {
        // Without a maintenance queue nothing can wait: seal to the end now.
        if self.inner.opts.scheduler.is_none() {
            return self.seal(path, SealMode::Final).await.map(drop);
        }
        // The write that began the stream's unsealed batches armed the idle checks that seal
        // them (`commit_round`): nothing more to ask.
        let _ = tail;
        Ok(())
    }
}

#[async_trait]
impl PageStore for AwsLog {
    async fn load_state(&self, path: &StreamPath) -> Result<Option<StreamState>, Error> {
        // A stream deleted (or expired) while forks read it is still sealed: its batches
        // expire, and the forks read its pages.
        let now = self.inner.now();
        Ok(self
            .inner
            .fetch_head(path)
            .await?
            .map(|head| head.state)
            .filter(|state| !state.is_expired(now) || state.forks > 0))
    }

    async fn find_page_starting_at(&self, sid: &str, first: u64) -> Result<Option<SeqRange>, Error> {
        let prefix = format!("streams/{sid}/pages/{first:020}-");
        let out = self
            .inner
            .clients
            .s3
            .list_objects_v2()
            .bucket(&self.inner.opts.bucket)
            .prefix(&prefix)
            .send()
            .await
            .map_err(|e| s3("ListObjectsV2 (page)", e))?;
        Ok(out
            .contents()
            .iter()
            .filter_map(|o| o.key()?.rsplit('/').next().and_then(parse_page_name))
            .filter(|r| r.first == first)
            .max())
    }

    async fn read_hot(&self, sid: &str, after: u64, through: u64, max_bytes: usize) -> Result<Vec<Bytes>, Error> {
        self.inner.hot_messages(sid, after, through, max_bytes).await
    }

    fn records_page_intents(&self) -> bool {
        true
    }

    async fn write_page(&self, state: &StreamState, range: SeqRange, page: Bytes) -> Result<(), Error> {
        // The head says a page is coming before it is written (`sip`, cleared by the commit that
        // records it), so the next pass looks for an unrecorded page only after a sealer
        // stopped in between: a LIST on every pass would cost more than the pages.
        let intent = self
            .inner
            .clients
            .dynamodb
            .update_item()
            .table_name(&self.inner.opts.table)
            .set_key(Some(head_key(&state.path)))
            .update_expression("SET sip = :last")
            .condition_expression("sid = :sid")
            .expression_attribute_values(":last", n(range.last))
            .expression_attribute_values(":sid", s(&state.sid))
            .send()
            .await;
        match intent {
            Ok(_) => {}
            // The stream went (or was made again): the commit after this write finds it too.
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {}
            Err(e) => return Err(ddb("UpdateItem (page intent)", e)),
        }
        let key = page_key(&state.sid, range);
        for attempt in 0..8 {
            let result = self
                .inner
                .clients
                .s3
                .put_object()
                .bucket(&self.inner.opts.bucket)
                .key(&key)
                .if_none_match("*")
                .content_type("application/vnd.spool.page")
                .cache_control("public, max-age=31536000, immutable")
                .body(ByteStream::from(page.clone()))
                .send()
                .await;
            match result {
                Ok(_) => return Ok(()),
                // 412: the page exists, and pages are a pure function of their messages, so it
                // is this very page.
                Err(SdkError::ServiceError(e)) if e.raw().status().as_u16() == 412 => return Ok(()),
                // 409: a concurrent conditional write of the same key is under way; its outcome
                // decides whether ours is needed.
                Err(SdkError::ServiceError(e)) if e.raw().status().as_u16() == 409 => {
                    spool_log::retry::backoff(attempt).await
                }
                Err(e) => return Err(s3("PutObject (page)", e)),
            }
        }
        Err(Error::unavailable(
            "S3 PutObject (page)",
            format!("{key}: concurrent writes kept conflicting"),
        ))
    }

    async fn commit_sealed(&self, state: &StreamState, from: u64, to: u64) -> Result<bool, Error> {
        let inner = &self.inner;
        let Some(head) = inner.fetch_head_item(&state.path).await? else {
            return Ok(false);
        };
        if head.state.sid != state.sid || head.state.sealed != from {
            return Ok(false);
        }
        // Producers' items learn the claims of the batches this page seals, before the head
        // says they are sealed: a writer reads claims only in batches after the sealed point.
        inner.materialize_producers(state, from, to).await?;
        // The head keeps the tail the page ends at, so a stream whose batches have expired
        // still knows its tail, `Stream-Seq` and closure.
        let info = inner
            .batches_back(&state.sid, to.saturating_add(1), 2, true)
            .await?
            .into_iter()
            .find(|b| b.last() == to && !b.end)
            .map(|b| b.info)
            .filter(|info| info.tail > head.state.tail || (info.closed && !head.state.closed));
        if from == to && info.is_none() {
            // Nothing moves: the head already has it all.
            return Ok(true);
        }
        let mut update = inner
            .clients
            .dynamodb
            .update_item()
            .table_name(&inner.opts.table)
            .set_key(Some(head_key(&state.path)))
            .condition_expression("sid = :sid AND sealed = :from")
            .expression_attribute_values(":sid", s(&state.sid))
            .expression_attribute_values(":from", n(from))
            .expression_attribute_values(":to", n(to));
        let mut set = vec!["sealed = :to"];
        if let Some(info) = info {
            set.extend(["tail = :tail", "#bytes = :bytes", "closed = :closed"]);
            update = update
                .expression_attribute_names("#bytes", "bytes")
                .expression_attribute_values(":tail", n(info.tail))
                .expression_attribute_values(":bytes", n(info.bytes))
                .expression_attribute_values(":closed", AttributeValue::Bool(info.closed));
            if let Some(by) = &info.closed_by {
                set.push("cby = :cby");
                update = update.expression_attribute_values(":cby", s(serde_json::to_string(by).unwrap_or_default()));
            }
            if let Some(seq) = &info.stream_seq {
                set.push("sseq = :sseq");
                update = update.expression_attribute_values(":sseq", s(seq));
            }
        }
        let result = update
            .update_expression(format!("SET {} REMOVE sip", set.join(", ")))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(false),
            Err(e) => Err(ddb("UpdateItem (sealed)", e)),
        }
    }

    async fn release_hot(&self, state: &StreamState, through: u64) -> Result<(), Error> {
        if through == 0 {
            return Ok(());
        }
        // Batches expire by themselves (their `ttl`), and large appends' blobs by the bucket's
        // lifecycle rule (15 days after they were written, a day after their batch): nothing to
        // write.
        let _ = (state, through);
        Ok(())
    }
}
