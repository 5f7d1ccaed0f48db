//! # Appends: group commit into conditional puts
//!
//! Concurrent appends to one stream are merged ([`spool_log::group_commit`]) and decided
//! against the stream's state in order, as one writer would ([`apply_append`]); the decisions
//! that write become batch items, put at the key after the tail on the condition that it is
//! free (see [`crate::items`]). One small batch is one `PutItem`: a write unit. A taken key is
//! another writer's batch: the writer reads what came after its tail and decides again.
//!
//! Idempotent producers: a batch carries the states of the producers it advanced (`cl`), and a
//! producer's own item is written only when it claims an epoch (its first claim, a restart), in
//! a transaction with the batch, and when sealing releases its batches. So a producer's state
//! is its item plus its newest claim after it; a writer that wrote the tail knows it already.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use aws_sdk_dynamodb::{
    error::SdkError, operation::transact_write_items::TransactWriteItemsError, types::AttributeValue,
};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use spool_log::{
    error::Error,
    page::{encode_frames, frames_len},
    state::{StreamState, apply_append},
    stream::{Append, AppendAck, Offset, StreamPath},
};

use super::{
    Inner,
    batches::{Accepted, Conflict, Expected, ITEM_DATA_MAX, Prepared, batches, epoch_writes, put},
    head::{Arm, Known},
};
use crate::{
    errors::{ddb, s3},
    items::{
        Batch, Head, ItemExt, StoredProducer, TailInfo, batch_key, batch_ttl, producer_from_item, producer_key,
        producer_to_item, ttl_attribute,
    },
};

/// Inline bytes one transaction carries at most (DynamoDB's limit is 4 MB per transaction).
const TRANSACTION_DATA_MAX: usize = 3 * 1024 * 1024;
/// Appends merged into one transaction at most (DynamoDB allows 100 items per transaction).
pub(super) const TRANSACTION_APPENDS_MAX: usize = 40;
/// How long an append keeps retrying against concurrent writers before giving up.
const CONTENTION_BUDGET: Duration = Duration::from_secs(60);

/// The same error for each of `n` requests (errors are not `Clone`: their sources are boxed).
fn for_each(e: &Error, n: usize) -> Vec<Result<AppendAck, Error>> {
    (0..n)
        .map(|_| {
            Err(match e {
                Error::NotFound { path } => Error::NotFound { path: path.clone() },
                Error::Contention { path } => Error::Contention { path: path.clone() },
                other => Error::unavailable("append", other.to_string()),
            })
        })
        .collect()
}

impl Inner {
    pub(super) async fn put_blob(&self, frames: Bytes) -> Result<String, Error> {
        let key = format!("blobs/{}", uuid::Uuid::now_v7().simple());
        self.clients
            .s3
            .put_object()
            .bucket(&self.opts.bucket)
            .key(&key)
            .content_type("application/octet-stream")
            .body(ByteStream::from(frames))
            .send()
            .await
            .map_err(|e| s3("PutObject (large append)", e))?;
        Ok(key)
    }

    /// Puts the frames of a large append in S3 before it enters a transaction.
    pub(super) async fn prepare(&self, req: Append) -> Result<Prepared, Error> {
        let size = req.size();
        if size > self.opts.limits.max_append_bytes {
            return Err(Error::PayloadTooLarge {
                size,
                max: self.opts.limits.max_append_bytes,
            });
        }
        let blob = if frames_len(&req.messages) > ITEM_DATA_MAX {
            Some(self.put_blob(encode_frames(&req.messages)).await?)
        } else {
            None
        };
        Ok(Prepared { req, blob })
    }

    /// Commits a group of appends to one stream, in transactions that fit DynamoDB's limits.
    pub(super) async fn commit(
        self: Arc<Self>,
        path: StreamPath,
        group: Vec<Prepared>,
    ) -> Vec<Result<AppendAck, Error>> {
        let mut answers = Vec::with_capacity(group.len());
        let mut rest = &group[..];
        while !rest.is_empty() {
            let mut take = 0;
            let mut inline = 0;
            while take < rest.len() {
                let size = if rest[take].blob.is_some() {
                    0
                } else {
                    frames_len(&rest[take].req.messages)
                };
                if take > 0 && inline + size > TRANSACTION_DATA_MAX {
                    break;
                }
                inline += size;
                take += 1;
            }
            let (round, tail) = rest.split_at(take);
            answers.extend(self.commit_round(&path, round).await);
            rest = tail;
        }
        // Blobs of appends that did not append anything are garbage now.
        let orphans: Vec<String> = group
            .iter()
            .zip(&answers)
            .filter(|(_, answer)| !matches!(answer, Ok(ack) if ack.appended.is_some()))
            .filter_map(|(p, _)| p.blob.clone())
            .collect();
        if !orphans.is_empty() {
            self.delete_objects(orphans).await;
        }
        answers
    }

    /// Learns the state of each of the round's producers that `view` does not know, as of its
    /// tail.
    async fn know_producers(&self, view: &mut View, round: &[Prepared]) -> Result<(), Error> {
        for prep in round {
            let Some(claim) = &prep.req.producer else { continue };
            if !view.producers.contains_key(&claim.id) {
                let known = self.load_producer(&view.head.state, &claim.id).await?;
                view.producers.insert(claim.id.clone(), known);
            }
        }
        Ok(())
    }

    /// A producer's state as of message `tail`: its item (written when it claims an epoch,
    /// and brought up to date when a page is sealed), then its newest claim in the batches
    /// after both the item's `at` and the sealed pages.
    pub(super) async fn load_producer(&self, state: &StreamState, id: &str) -> Result<Known, Error> {
        let out = self
            .clients
            .dynamodb
            .get_item()
            .table_name(&self.opts.table)
            .set_key(Some(producer_key(&state.sid, id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb("GetItem (producer)", e))?;
        let Some(stored) = out.item.as_ref().map(producer_from_item).transpose()? else {
            // Its first claim writes the item, so it never claimed.
            return Ok(Known {
                state: None,
                stored_at: None,
            });
        };
        let known = |state| Known {
            state: Some(state),
            stored_at: Some(stored.at),
        };
        let from = stored.at.max(state.sealed) + 1;
        if from > state.tail {
            return Ok(known(stored.state));
        }
        let mut start_key = None;
        loop {
            let (batches, next) = self
                .batch_range(&state.sid, from, state.tail, false, start_key.take())
                .await?;
            if let Some(claim) = batches.iter().find_map(|b| b.claims.get(id)) {
                return Ok(known(*claim));
            }
            match next {
                Some(key) => start_key = Some(key),
                None => break,
            }
        }
        Ok(known(stored.state))
    }

    /// Brings `view` up to what other writers appended after its tail. False when the stream
    /// was deleted meanwhile: load it again.
    async fn catch_up(&self, view: &mut View) -> Result<bool, Error> {
        let sid = view.head.state.sid.clone();
        // A query's next page continues with the same key range.
        let from = view.head.state.tail + 1;
        let mut start_key = None;
        loop {
            let (batches, next) = self
                .batch_range(&sid, from, Offset::MAX_SEQ + 1, true, start_key.take())
                .await?;
            for batch in batches {
                if batch.end {
                    // The stream was deleted: its head says how.
                    return Ok(false);
                }
                if batch.first != view.head.state.tail + 1 {
                    return Err(Error::Corrupt {
                        what: format!(
                            "stream `{}` has a batch at {} after its tail {}",
                            view.head.state.path, batch.first, view.head.state.tail
                        ),
                    });
                }
                // (A close marker moves no tail; only an end sentinel can follow it.)
                batch.info.apply(&mut view.head.state);
                for (id, state) in &batch.claims {
                    if let Some(known) = view.producers.get_mut(id) {
                        known.state = Some(*state);
                    }
                }
            }
            match next {
                Some(key) => start_key = Some(key),
                None => return Ok(true),
            }
        }
    }

    pub(super) async fn commit_round(&self, path: &StreamPath, round: &[Prepared]) -> Vec<Result<AppendAck, Error>> {
        let started = Instant::now();
        let mut attempt = 0u32;
        // One write id for every attempt of this round, so an attempt that finds its key taken
        // by an earlier attempt (whose answer was lost) knows the batch is its own.
        let wid = uuid::Uuid::now_v7().simple().to_string();
        let mut armed = false;
        let mut view = self.cached_head(path).map(|r| View {
            head: r.head,
            producers: r.producers,
            fresh: false,
        });
        loop {
            let mut v = match view.take() {
                Some(v) => v,
                None => match self.fetch_head(path).await {
                    Ok(Some(head)) => View {
                        head,
                        producers: HashMap::new(),
                        fresh: true,
                    },
                    Ok(None) => return for_each(&Error::NotFound { path: path.clone() }, round.len()),
                    Err(e) => return for_each(&e, round.len()),
                },
            };
            if let Err(e) = self.know_producers(&mut v, round).await {
                return for_each(&e, round.len());
            }

            // Decide every request against the view, in order, as one writer would.
            let now = self.now();
            let mut state = v.head.state.clone();
            let (bytes_before, tail_before) = (state.total_bytes, state.tail);
            let mut producers = v.producers.clone();
            let mut answers = Vec::with_capacity(round.len());
            let mut accepted: Vec<Accepted<'_>> = Vec::new();
            let mut all_write = true;
            for prep in round {
                let current = prep
                    .req
                    .producer
                    .as_ref()
                    .and_then(|c| producers.get(&c.id).and_then(|k| k.state));
                match apply_append(&mut state, current, &prep.req, now, &self.opts.limits) {
                    Ok(applied) => {
                        all_write &= applied.changed;
                        if let Some((id, p)) = &applied.producer
                            && let Some(known) = producers.get_mut(id)
                        {
                            known.state = Some(*p);
                        }
                        if applied.changed {
                            accepted.push(Accepted {
                                range: applied.ack.appended,
                                prep,
                                info: TailInfo::of(&state),
                                producer: applied.producer.clone(),
                            });
                        }
                        answers.push(Ok(applied.ack));
                    }
                    Err(e) => {
                        all_write = false;
                        answers.push(Err(e));
                    }
                }
            }
            // A remembered view may be behind, in its tail and in its head (another process may
            // have replaced an expired stream, or refreshed a sliding TTL). A put's condition
            // checks every decision that writes; decide nothing else (a refusal, a duplicate)
            // on it: read the stream again.
            if !v.fresh && !all_write {
                self.forget_head(path);
                continue;
            }
            if accepted.is_empty() {
                return answers;
            }

            // The first batch after the sealed point, and a close, arm the idle checks that see
            // the stream's batches (and its closure) into pages before they expire: before the
            // put, so a put is never acknowledged with no check armed (an extra check, if the
            // put then loses, finds another tail and ends).
            let arms = (tail_before == state.sealed && state.tail > tail_before) || state.closed;
            if arms && !armed && self.opts.scheduler.is_some() {
                if let Err(e) = self
                    .arm_idle(path, state.tail, self.opts.limits.idle_seal, Arm::Supersede)
                    .await
                {
                    return for_each(&e, round.len());
                }
                armed = true;
            }
            let items = batches(&accepted, &wid, now / 1000);
            let epochs = epoch_writes(&items, &v.producers);
            match self.put_batches(&state, &items, &epochs, &v.producers).await {
                Ok(()) => {
                    for (id, stored) in &epochs {
                        if let Some(known) = producers.get_mut(id) {
                            known.stored_at = Some(stored.at);
                        }
                    }
                    let mut stored = state.clone();
                    stored.touched_ms = v.head.state.touched_ms;
                    if stored.needs_touch(now) {
                        match self.touch(&state, now).await {
                            Ok(()) => stored.touched_ms = now,
                            Err(e) => tracing::warn!(%path, error = %e, "cannot refresh the stream's TTL"),
                        }
                    }
                    self.remember_head(
                        Head {
                            state: stored,
                            ver: v.head.ver,
                        },
                        producers,
                    );
                    self.notifier
                        .publish(path, (!state.closed).then(|| Offset::after(state.tail)));
                    if let Some(scheduler) = &self.opts.scheduler
                        && state.crossed_page_boundary(bytes_before, tail_before, &self.opts.limits)
                        && let Err(e) = scheduler.schedule(path).await
                    {
                        tracing::warn!(%path, error = %e, "cannot schedule sealing; the stream's idle seal (or its age limit) will");
                    }
                    return answers;
                }
                Err(Conflict::Lost) => {
                    self.opts.metrics.record(spool_log::metrics::Metric::AppendConflict);
                    match self.catch_up(&mut v).await {
                        Ok(true) => view = Some(v),
                        Ok(false) => self.forget_head(path),
                        Err(e) => return for_each(&e, round.len()),
                    }
                }
                Err(Conflict::Producer) => {
                    // A producer's item moved (sealing brought it up to date, or another
                    // writer started an epoch): learn the round's producers again.
                    self.opts.metrics.record(spool_log::metrics::Metric::AppendConflict);
                    for prep in round {
                        if let Some(claim) = &prep.req.producer {
                            v.producers.remove(&claim.id);
                        }
                    }
                    view = Some(v);
                }
                Err(Conflict::Busy) => {
                    self.opts.metrics.record(spool_log::metrics::Metric::AppendConflict);
                    view = Some(v);
                }
                Err(Conflict::Failed(e)) => return for_each(&e, round.len()),
            }
            if started.elapsed() > CONTENTION_BUDGET {
                return for_each(&Error::Contention { path: path.clone() }, round.len());
            }
            spool_log::retry::backoff(attempt).await;
            attempt += 1;
        }
    }

    /// Puts a round's batches (and the producer items of epochs it starts): one conditional
    /// `PutItem` for the usual single batch, a transaction otherwise.
    async fn put_batches(
        &self,
        state: &StreamState,
        items: &[Batch],
        epochs: &BTreeMap<String, StoredProducer>,
        known: &HashMap<String, Known>,
    ) -> Result<(), Conflict> {
        let table = &self.opts.table;
        let ttl = Some(batch_ttl(self.now(), state.expires_at_ms()));
        let producer_ttl = match state.expiry {
            spool_log::stream::Expiry::At { .. } => ttl_attribute(state.expires_at_ms()),
            _ => None,
        };
        if let ([batch], true) = (items, epochs.is_empty()) {
            return self.put_one(state, batch, ttl).await;
        }
        let mut tx = Vec::new();
        for batch in items {
            tx.push(put(
                table,
                batch.to_item(&state.sid, ttl.clone()),
                Some(Expected::Absent),
            )?);
        }
        let first_producer = tx.len();
        for (id, stored) in epochs {
            let expected = match known.get(id).and_then(|k| k.stored_at) {
                Some(at) => Expected::ProducerAt(at),
                None => Expected::Absent,
            };
            tx.push(put(
                table,
                producer_to_item(&state.sid, id, *stored, producer_ttl.clone()),
                Some(expected),
            )?);
        }
        match crate::items::transact(&self.clients.dynamodb, tx).await {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let failed: Vec<usize> = c
                        .cancellation_reasons()
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| r.code() == Some("ConditionalCheckFailed"))
                        .map(|(i, _)| i)
                        .collect();
                    if failed.is_empty() {
                        Err(Conflict::Busy)
                    } else if failed.iter().any(|&i| i < first_producer) {
                        // A transaction's puts land together: if the first is ours, all are.
                        self.lost_or_ours(state, &items[0]).await
                    } else {
                        Err(Conflict::Producer)
                    }
                }
                TransactWriteItemsError::TransactionInProgressException(_)
                | TransactWriteItemsError::ProvisionedThroughputExceededException(_)
                | TransactWriteItemsError::ThrottlingException(_)
                | TransactWriteItemsError::RequestLimitExceeded(_) => Err(Conflict::Busy),
                _ => Err(Conflict::Failed(ddb("TransactWriteItems", SdkError::ServiceError(e)))),
            },
            Err(e) => Err(Conflict::Failed(ddb("TransactWriteItems", e))),
        }
    }

    /// After a put found the key of `batch` taken: `Ok` if it holds `batch` itself (an earlier
    /// attempt of this round, whose answer was lost), else another writer's batch.
    async fn lost_or_ours(&self, state: &StreamState, batch: &Batch) -> Result<(), Conflict> {
        let out = self
            .clients
            .dynamodb
            .get_item()
            .table_name(&self.opts.table)
            .set_key(Some(batch_key(&state.sid, batch.first)))
            .projection_expression("wid")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| Conflict::Failed(ddb("GetItem (batch)", e)))?;
        let ours = out.item.as_ref().and_then(|i| i.opt_str("wid")) == Some(batch.wid.as_str());
        if ours { Ok(()) } else { Err(Conflict::Lost) }
    }

    /// One batch, put on the condition that its key is free. A taken key is another writer's
    /// batch, or this very put applied by an attempt whose answer was lost: its `wid` tells.
    async fn put_one(&self, state: &StreamState, batch: &Batch, ttl: Option<AttributeValue>) -> Result<(), Conflict> {
        let result = self
            .clients
            .dynamodb
            .put_item()
            .table_name(&self.opts.table)
            .set_item(Some(batch.to_item(&state.sid, ttl)))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                self.lost_or_ours(state, batch).await
            }
            Err(SdkError::ServiceError(e))
                if e.err().is_provisioned_throughput_exceeded_exception() || e.err().is_request_limit_exceeded() =>
            {
                Err(Conflict::Busy)
            }
            Err(e) => Err(Conflict::Failed(ddb("PutItem (batch)", e))),
        }
    }
}

/// A writer's view of a stream: its state (the tail after the newest batch it knows) and what
/// it knows of producers as of that tail. `fresh` when read (or caught up) in this round.
struct View {
    head: Head,
    producers: HashMap<String, Known>,
    fresh: bool,
}
