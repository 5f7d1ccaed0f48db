//! # Appends: group commit into `TransactWriteItems`
//!
//! Concurrent appends to one stream are merged ([`spool_domain::group_commit`]) and decided
//! against the head in order, as one writer would ([`apply_append`]); the decisions that write
//! go to DynamoDB in one transaction conditioned on the head's `sid` and `ver`, with their batch
//! items and producer states. A lost race re-reads the head and decides again.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use aws_sdk_dynamodb::{
    error::SdkError,
    operation::transact_write_items::TransactWriteItemsError,
    types::{AttributeValue, Put, TransactWriteItem, Update},
};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use spool_domain::{
    Append, AppendAck, Error, Offset, SeqRange, StreamPath,
    page::{encode_frames, frames_len},
    state::{ProducerState, StreamState, apply_append},
};

use super::Inner;
use crate::{
    errors::{ddb, s3},
    items::{
        Batch, Body, Head, Item, head_key, n, producer_from_item, producer_key, producer_to_item, s, ttl_attribute,
    },
};

/// Frames larger than this go to S3 rather than into a DynamoDB item (whose limit is 400 KB,
/// attribute names and the other attributes included).
pub(super) const ITEM_DATA_MAX: usize = 350 * 1024;
/// Inline bytes one transaction carries at most (DynamoDB's limit is 4 MB per transaction).
const TRANSACTION_DATA_MAX: usize = 3 * 1024 * 1024;
/// Appends merged into one transaction at most (DynamoDB allows 100 items per transaction).
pub(super) const TRANSACTION_APPENDS_MAX: usize = 40;
/// How long an append keeps retrying against concurrent writers before giving up.
const CONTENTION_BUDGET: Duration = Duration::from_secs(60);

/// An append on its way into a transaction; large ones already have their frames in S3.
pub(super) struct Prepared {
    pub(super) req: Append,
    pub(super) blob: Option<String>,
}

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

    /// The states of the round's producers: from `known` (current at the head the round is
    /// decided on), else read.
    pub(super) async fn load_producers(
        &self,
        sid: &str,
        round: &[Prepared],
        known: &HashMap<String, Option<ProducerState>>,
    ) -> Result<HashMap<String, Option<ProducerState>>, Error> {
        let mut producers = HashMap::new();
        for prep in round {
            let Some(claim) = &prep.req.producer else { continue };
            if producers.contains_key(&claim.id) {
                continue;
            }
            if let Some(state) = known.get(&claim.id) {
                producers.insert(claim.id.clone(), *state);
                continue;
            }
            let out = self
                .clients
                .dynamodb
                .get_item()
                .table_name(&self.opts.table)
                .set_key(Some(producer_key(sid, &claim.id)))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| ddb("GetItem (producer)", e))?;
            producers.insert(claim.id.clone(), out.item.as_ref().map(producer_from_item).transpose()?);
        }
        Ok(producers)
    }

    pub(super) async fn commit_round(&self, path: &StreamPath, round: &[Prepared]) -> Vec<Result<AppendAck, Error>> {
        let started = Instant::now();
        let mut fresh = false;
        let mut attempt = 0u32;
        loop {
            // On a fresh head, producers are read too (see below); on a remembered one, those this
            // process committed with it are current as long as the head is.
            let (head, known) = match (fresh, self.cached_head(path)) {
                (false, Some(remembered)) => (Some(remembered.head), remembered.producers),
                _ => match self.fetch_head(path).await {
                    Ok(head) => {
                        fresh = true;
                        (head, HashMap::new())
                    }
                    Err(e) => return for_each(&e, round.len()),
                },
            };
            let Some(mut head) = head else {
                return for_each(&Error::NotFound { path: path.clone() }, round.len());
            };
            let mut producers = match self.load_producers(&head.state.sid, round, &known).await {
                Ok(p) => p,
                Err(e) => return for_each(&e, round.len()),
            };
            // A decision that writes nothing (a duplicate) is not checked by the transaction's
            // condition, so the head it answers with must be no older than the producer state:
            // read it again after the producers.
            if fresh && !producers.is_empty() {
                match self.fetch_head(path).await {
                    Ok(Some(again)) if again.state.sid == head.state.sid => head = again,
                    Ok(_) => continue,
                    Err(e) => return for_each(&e, round.len()),
                }
            }

            // Decide every request against the head, in order, as one writer would.
            let loaded = producers.clone();
            let now = self.now();
            let mut state = head.state.clone();
            let (bytes_before, tail_before) = (state.total_bytes, state.tail);
            let mut answers = Vec::with_capacity(round.len());
            let mut accepted: Vec<(SeqRange, &Prepared)> = Vec::new();
            let mut changed_producers: HashMap<String, ProducerState> = HashMap::new();
            let mut changed = false;
            let mut all_write = true;
            for prep in round {
                let current = prep
                    .req
                    .producer
                    .as_ref()
                    .and_then(|c| producers.get(&c.id).copied().flatten());
                match apply_append(&mut state, current, &prep.req, now, &self.opts.limits) {
                    Ok(applied) => {
                        changed |= applied.changed;
                        all_write &= applied.changed;
                        if let Some(range) = applied.ack.appended {
                            accepted.push((range, prep));
                        }
                        if let Some((id, p)) = applied.producer {
                            producers.insert(id.clone(), Some(p));
                            changed_producers.insert(id, p);
                        }
                        answers.push(Ok(applied.ack));
                    }
                    Err(e) => {
                        all_write = false;
                        answers.push(Err(e));
                    }
                }
            }
            // A cached head may be stale. The transaction's condition checks every decision that
            // writes; decide nothing else (a refusal, a duplicate) on it.
            if !fresh && !all_write {
                fresh = true;
                continue;
            }
            if !changed {
                return answers;
            }

            let result = self
                .transact_append(&head, &state, &accepted, &changed_producers, &loaded)
                .await;
            match result {
                Ok(()) => {
                    let committed = Head {
                        state: state.clone(),
                        ver: head.ver + 1,
                    };
                    self.remember_head(committed, producers);
                    self.notifier
                        .publish(path, (!state.closed).then(|| Offset::after(state.tail)));
                    if (state.closed || state.crossed_page_boundary(bytes_before, tail_before, &self.opts.limits))
                        && let Some(scheduler) = &self.opts.scheduler
                        && let Err(e) = scheduler.schedule(path).await
                    {
                        tracing::warn!(%path, error = %e, "cannot schedule sealing; retried at the next page");
                    }
                    return answers;
                }
                Err(Conflict::Lost) => {
                    self.opts.metrics.record(spool_domain::Metric::AppendConflict);
                    fresh = false;
                    self.forget_head(path);
                }
                Err(Conflict::Busy) => self.opts.metrics.record(spool_domain::Metric::AppendConflict),
                Err(Conflict::Failed(e)) => return for_each(&e, round.len()),
            }
            if started.elapsed() > CONTENTION_BUDGET {
                return for_each(&Error::Contention { path: path.clone() }, round.len());
            }
            spool_domain::retry::backoff(attempt).await;
            attempt += 1;
        }
    }

    pub(super) async fn transact_append(
        &self,
        head: &Head,
        state: &StreamState,
        accepted: &[(SeqRange, &Prepared)],
        producers: &HashMap<String, ProducerState>,
        loaded: &HashMap<String, Option<ProducerState>>,
    ) -> Result<(), Conflict> {
        let table = &self.opts.table;
        let mut names = HashMap::from([
            ("#sid".to_owned(), "sid".to_owned()),
            ("#ver".to_owned(), "ver".to_owned()),
            ("#tail".to_owned(), "tail".to_owned()),
            ("#bytes".to_owned(), "bytes".to_owned()),
            ("#closed".to_owned(), "closed".to_owned()),
            ("#tms".to_owned(), "tms".to_owned()),
        ]);
        let mut values = HashMap::from([
            (":sid".to_owned(), s(&state.sid)),
            (":ver".to_owned(), n(head.ver)),
            (":nver".to_owned(), n(head.ver + 1)),
            (":tail".to_owned(), n(state.tail)),
            (":bytes".to_owned(), n(state.total_bytes)),
            (":closed".to_owned(), AttributeValue::Bool(state.closed)),
            (":tms".to_owned(), n(state.touched_ms)),
        ]);
        let mut set = vec![
            "#ver = :nver",
            "#tail = :tail",
            "#bytes = :bytes",
            "#closed = :closed",
            "#tms = :tms",
        ];
        if let Some(deadline) = state.expires_at_ms() {
            names.insert("#dl".into(), "dl".into());
            names.insert("#ttl".into(), "ttl".into());
            values.insert(":dl".into(), n(deadline));
            values.insert(":ttl".into(), ttl_attribute(Some(deadline)).unwrap_or_else(|| n(0)));
            set.extend(["#dl = :dl", "#ttl = :ttl"]);
        }
        if let Some(by) = &state.closed_by {
            names.insert("#cby".into(), "cby".into());
            values.insert(":cby".into(), s(serde_json::to_string(by).unwrap_or_default()));
            set.push("#cby = :cby");
        }
        if let Some(seq) = &state.stream_seq {
            names.insert("#sseq".into(), "sseq".into());
            values.insert(":sseq".into(), s(seq));
            set.push("#sseq = :sseq");
        }
        let update = Update::builder()
            .table_name(table)
            .set_key(Some(head_key(&state.path)))
            .update_expression(format!("SET {}", set.join(", ")))
            .condition_expression("#sid = :sid AND #ver = :ver")
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(|e| Conflict::Failed(Error::unavailable("DynamoDB update", e)))?;

        let ttl = match state.expiry {
            spool_domain::Expiry::At { .. } => ttl_attribute(state.expires_at_ms()),
            _ => None,
        };
        let mut tx = vec![TransactWriteItem::builder().update(update).build()];
        for batch in batches(accepted) {
            tx.push(put(
                table,
                batch.to_item(&state.sid, ttl.clone()),
                Some(Expected::Absent),
            )?);
        }
        let first_producer = tx.len();
        for (id, p) in producers {
            // The producer must still be as this writer read it: the head's condition alone
            // does not cover a producer state read before the head.
            let expected = match loaded.get(id).copied().flatten() {
                Some(before) => Expected::Producer(before),
                None => Expected::Absent,
            };
            tx.push(put(
                table,
                producer_to_item(&state.sid, id, *p, ttl.clone()),
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
                    } else if failed.contains(&0) || failed.iter().all(|&i| i >= first_producer) {
                        // The head moved (the batch items may then collide with the winner's
                        // too) or a producer moved: re-read and decide again.
                        Err(Conflict::Lost)
                    } else {
                        Err(Conflict::Failed(Error::Corrupt {
                            what: format!("a batch item of `{}` already exists at its sequence number", state.path),
                        }))
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
}

/// Why an append transaction did not commit.
pub(super) enum Conflict {
    /// Another writer changed the head first: re-read it.
    Lost,
    /// DynamoDB asked to slow down or another transaction held an item: retry as is.
    Busy,
    /// Anything else.
    Failed(Error),
}

/// What a transactional put expects to find.
pub(super) enum Expected {
    /// No item yet.
    Absent,
    /// A producer item in this state.
    Producer(ProducerState),
}

pub(super) fn put(table: &str, item: Item, expected: Option<Expected>) -> Result<TransactWriteItem, Conflict> {
    let mut put = Put::builder().table_name(table).set_item(Some(item));
    match expected {
        None => {}
        Some(Expected::Absent) => put = put.condition_expression("attribute_not_exists(pk)"),
        Some(Expected::Producer(p)) => {
            put = put
                .condition_expression("#epoch = :epoch AND #seq = :seq")
                .expression_attribute_names("#epoch", "epoch")
                .expression_attribute_names("#seq", "seq")
                .expression_attribute_values(":epoch", n(p.epoch))
                .expression_attribute_values(":seq", n(p.seq));
        }
    }
    let put = put
        .build()
        .map_err(|e| Conflict::Failed(Error::unavailable("DynamoDB put", e)))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// Packs accepted appends into batch items: consecutive inline appends share an item while
/// it has room; an append already in S3 gets an item of its own.
pub(super) fn batches(accepted: &[(SeqRange, &Prepared)]) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut run: Option<(SeqRange, Vec<Bytes>)> = None;
    let flush = |run: &mut Option<(SeqRange, Vec<Bytes>)>, out: &mut Vec<Batch>| {
        if let Some((range, messages)) = run.take() {
            out.push(Batch {
                first: range.first,
                last: range.last,
                body: Body::Inline(encode_frames(&messages)),
            });
        }
    };
    for (range, prep) in accepted {
        if let Some(key) = &prep.blob {
            flush(&mut run, &mut out);
            out.push(Batch {
                first: range.first,
                last: range.last,
                body: Body::Blob(key.clone()),
            });
            continue;
        }
        let size = frames_len(&prep.req.messages);
        let fits = run
            .as_ref()
            .is_some_and(|(_, messages)| frames_len(messages) + size <= ITEM_DATA_MAX);
        if !fits {
            flush(&mut run, &mut out);
        }
        match &mut run {
            Some((r, messages)) => {
                r.last = range.last;
                messages.extend(prep.req.messages.iter().cloned());
            }
            None => run = Some((*range, prep.req.messages.clone())),
        }
    }
    flush(&mut run, &mut out);
    out
}
