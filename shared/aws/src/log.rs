//! # The stream log on DynamoDB and S3
//!
//! - **Order.** An append is one `TransactWriteItems`: update the stream head (new tail, next
//!   `ver`) on the condition that `sid` and `ver` are what this writer read, plus a put of the
//!   batch item (and of the producer's state). Two writers can never both commit from the same
//!   `ver`, so they can never take the same sequence number, and since a batch is written in
//!   the same transaction as the tail that counts it, no number is ever skipped. The loser
//!   re-reads the head and retries with backoff.
//! - **Cost.** Writers keep the head they last committed, so an uncontended append costs one
//!   write request (the transaction) and no read. Concurrent appends from one process are
//!   merged by [`GroupCommit`] into one transaction (and one item, if they fit).
//! - **Large appends.** A batch whose frames exceed an item's room goes to S3 first
//!   (`blobs/{uuid}`); its item holds the key.
//! - **Pages.** Sealing writes `streams/{sid}/pages/{first:020}-{last:020}` create-only
//!   (`If-None-Match: *`), records it in the head, then deletes the hot items it covers.
//! - **Reads** stitch pages (for `seq <= sealed`) and the hot tail, retrying if sealing moved
//!   the boundary between reading the head and reading the items.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use aws_sdk_dynamodb::{
    error::{ProvideErrorMetadata, SdkError},
    operation::transact_write_items::TransactWriteItemsError,
    types::{AttributeValue, Delete, Put, TransactWriteItem, Update, WriteRequest},
};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use spool_domain::{
    Append, AppendAck, Chunk, Clock, CreateStream, Created, Error, FailPoints, LogLimits, Offset, Position, SealMode,
    SealReport, SealScheduler, SeqRange, StreamMeta, StreamPath, StreamReader, StreamSealer, StreamWriter, SystemClock,
    WaitOutcome,
    group_commit::GroupCommit,
    notify::{Notifier, TailProbe, wait_for_data},
    page::{decode_frames, decode_page, encode_frames, frames_len, page_name, parse_page_name, take_up_to},
    seal::{PageStore, seal_stream},
    state::{ForkOrigin, ProducerState, StreamState, apply_append},
};

use crate::{
    AwsClients,
    items::{
        Batch, Body, Head, Item, ItemExt, batch_sk, head_key, log_pk, n, producer_from_item, producer_key,
        producer_to_item, s, ttl_attribute,
    },
};

/// Frames larger than this go to S3 rather than into a DynamoDB item (whose limit is 400 KB,
/// attribute names and the other attributes included).
const ITEM_DATA_MAX: usize = 350 * 1024;
/// Inline bytes one transaction carries at most (DynamoDB's limit is 4 MB per transaction).
const TRANSACTION_DATA_MAX: usize = 3 * 1024 * 1024;
/// Appends merged into one transaction at most (DynamoDB allows 100 items per transaction).
const TRANSACTION_APPENDS_MAX: usize = 40;
/// How long an append keeps retrying against concurrent writers before giving up.
const CONTENTION_BUDGET: Duration = Duration::from_secs(60);

/// How an [`AwsLog`] is set up.
#[derive(Clone)]
pub struct AwsLogOptions {
    /// The streams table (`SPOOL_STREAMS_TABLE`).
    pub table: String,
    /// The pages bucket (`SPOOL_PAGES_BUCKET`).
    pub bucket: String,
    /// Size limits and page geometry.
    pub limits: LogLimits,
    /// The clock expiry is decided by.
    pub clock: Arc<dyn Clock>,
    /// Crash points for tests.
    pub fail_points: Arc<FailPoints>,
    /// How often a live reader re-reads a stream head to see other processes' appends.
    pub poll_interval: Duration,
    /// Where to ask for sealing when a page's worth of messages is waiting.
    pub scheduler: Option<Arc<dyn SealScheduler>>,
}

impl AwsLogOptions {
    /// Options with default limits, the system clock and no seal scheduler.
    pub fn new(table: impl Into<String>, bucket: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            bucket: bucket.into(),
            limits: LogLimits::default(),
            clock: Arc::new(SystemClock),
            fail_points: Arc::new(FailPoints::default()),
            poll_interval: Duration::from_millis(500),
            scheduler: None,
        }
    }
}

impl std::fmt::Debug for AwsLogOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsLogOptions")
            .field("table", &self.table)
            .field("bucket", &self.bucket)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// An append on its way into a transaction; large ones already have their frames in S3.
struct Prepared {
    req: Append,
    blob: Option<String>,
}

struct Inner {
    clients: AwsClients,
    opts: AwsLogOptions,
    notifier: Notifier,
    heads: Mutex<HashMap<StreamPath, Remembered>>,
    pages: Mutex<HashMap<String, BTreeMap<u64, SeqRange>>>,
    commits: Arc<GroupCommit<StreamPath, Prepared, AppendAck>>,
}

/// The head this process last committed, with the producer states it committed with it.
/// Producers are written only by the transaction that moves the head, so while the head is
/// unchanged (which the next transaction checks) so are they: an append on a remembered head
/// need not read them.
#[derive(Clone)]
struct Remembered {
    head: Head,
    producers: HashMap<String, Option<ProducerState>>,
}

/// The AWS stream log; cheap to clone.
#[derive(Clone)]
pub struct AwsLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AwsLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsLog").field("opts", &self.inner.opts).finish()
    }
}

/// A short description of an SDK error: the service's code and message, or what failed on the
/// way (a timeout, a refused connection).
pub(crate) fn describe<E, R>(e: &SdkError<E, R>) -> String
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match e {
        SdkError::ServiceError(service) => {
            let err = service.err();
            format!(
                "{}: {}",
                err.code().unwrap_or("unknown error"),
                err.message().unwrap_or_default()
            )
        }
        other => aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string(),
    }
}

pub(crate) fn ddb<E, R>(what: &str, e: SdkError<E, R>) -> Error
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    Error::unavailable(format!("DynamoDB {what}"), describe(&e))
}

fn s3<E, R>(what: &str, e: SdkError<E, R>) -> Error
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    Error::unavailable(format!("S3 {what}"), describe(&e))
}

/// The S3 key of a sealed page: `streams/{sid}/pages/{first:020}-{last:020}`.
fn page_key(sid: &str, range: SeqRange) -> String {
    format!("streams/{sid}/pages/{}", page_name(range))
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

impl AwsLog {
    /// A log over the table and bucket in `opts`.
    pub fn new(clients: AwsClients, opts: AwsLogOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                clients,
                opts,
                notifier: Notifier::default(),
                heads: Mutex::new(HashMap::new()),
                pages: Mutex::new(HashMap::new()),
                commits: GroupCommit::new(TRANSACTION_APPENDS_MAX),
            }),
        }
    }

    /// The SDK clients this log uses.
    pub fn clients(&self) -> &AwsClients {
        &self.inner.clients
    }

    /// The raw bytes of every sealed page of the stream at `path`, by page name (for tests and
    /// tools that check what sealing wrote).
    pub async fn page_files(&self, path: &StreamPath) -> Result<Vec<(String, Bytes)>, Error> {
        let Some(head) = self.inner.fetch_head(path).await? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for range in self.inner.list_pages(&head.state.sid, None).await? {
            let key = page_key(&head.state.sid, range);
            out.push((page_name(range), self.inner.get_object(&key).await?));
        }
        Ok(out)
    }
}

impl Inner {
    fn now(&self) -> i64 {
        self.opts.clock.now_ms()
    }

    fn cached_head(&self, path: &StreamPath) -> Option<Remembered> {
        self.heads.lock().unwrap_or_else(|e| e.into_inner()).get(path).cloned()
    }

    fn remember_head(&self, head: Head, producers: HashMap<String, Option<ProducerState>>) {
        let mut heads = self.heads.lock().unwrap_or_else(|e| e.into_inner());
        if heads.len() > 10_000 {
            heads.clear();
        }
        heads.insert(head.state.path.clone(), Remembered { head, producers });
    }

    fn forget_head(&self, path: &StreamPath) {
        self.heads.lock().unwrap_or_else(|e| e.into_inner()).remove(path);
    }

    /// The head as stored now (strongly consistent), expired or not.
    async fn fetch_head(&self, path: &StreamPath) -> Result<Option<Head>, Error> {
        let out = self
            .clients
            .dynamodb
            .get_item()
            .table_name(&self.opts.table)
            .set_key(Some(head_key(path)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb("GetItem (stream head)", e))?;
        out.item.as_ref().map(Head::from_item).transpose()
    }

    /// A live reader's cheap look at a stream: an eventually consistent `GetItem` of four small
    /// attributes (0.5 read units), every `SPOOL_LIVE_POLL_MS` while a reader waits on another
    /// process's writes. A tail it sees late only delays the wake-up; the read that follows is
    /// strongly consistent.
    async fn probe(&self, path: &StreamPath) -> Result<TailProbe, Error> {
        let out = self
            .clients
            .dynamodb
            .get_item()
            .table_name(&self.opts.table)
            .set_key(Some(head_key(path)))
            .projection_expression("#tail, #closed, #del, #dl")
            .expression_attribute_names("#tail", "tail")
            .expression_attribute_names("#closed", "closed")
            .expression_attribute_names("#del", "del")
            .expression_attribute_names("#dl", "dl")
            .send()
            .await
            .map_err(|e| ddb("GetItem (live probe)", e))?;
        let item = out.item.ok_or_else(|| Error::NotFound { path: path.clone() })?;
        let flag = |name: &str| item.get(name).and_then(|v| v.as_bool().ok()).copied().unwrap_or(false);
        let number = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
        };
        if flag("del") {
            return Err(Error::Gone { path: path.clone() });
        }
        if number("dl").is_some_and(|deadline| self.now() >= deadline) {
            return Err(Error::NotFound { path: path.clone() });
        }
        let tail = number("tail").ok_or_else(|| Error::Corrupt {
            what: format!("the head of `{path}` has no tail"),
        })?;
        Ok(TailProbe {
            tail: Offset::after(u64::try_from(tail).unwrap_or(0)),
            closed: flag("closed"),
        })
    }

    /// The head of a live (existing, unexpired) stream.
    async fn live_head(&self, path: &StreamPath) -> Result<Head, Error> {
        let head = self
            .fetch_head(path)
            .await?
            .ok_or_else(|| Error::NotFound { path: path.clone() })?;
        head.state.check_live(self.now())?;
        Ok(head)
    }

    async fn put_blob(&self, frames: Bytes) -> Result<String, Error> {
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

    async fn get_object(&self, key: &str) -> Result<Bytes, Error> {
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

    async fn delete_objects(&self, keys: Vec<String>) {
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

    /// Puts the frames of a large append in S3 before it enters a transaction.
    async fn prepare(&self, req: Append) -> Result<Prepared, Error> {
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
    async fn commit(self: Arc<Self>, path: StreamPath, group: Vec<Prepared>) -> Vec<Result<AppendAck, Error>> {
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
    async fn load_producers(
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

    async fn commit_round(&self, path: &StreamPath, round: &[Prepared]) -> Vec<Result<AppendAck, Error>> {
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
                    fresh = false;
                    self.forget_head(path);
                }
                Err(Conflict::Busy) => {}
                Err(Conflict::Failed(e)) => return for_each(&e, round.len()),
            }
            if started.elapsed() > CONTENTION_BUDGET {
                return for_each(&Error::Contention { path: path.clone() }, round.len());
            }
            spool_domain::retry::backoff(attempt).await;
            attempt += 1;
        }
    }

    async fn transact_append(
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
        match self
            .clients
            .dynamodb
            .transact_write_items()
            .client_request_token(crate::items::request_token())
            .set_transact_items(Some(tx))
            .send()
            .await
        {
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

    /// Messages after `after` (up to `through`) from the hot tail, about `max_bytes` of them.
    /// Empty when the batch holding `after + 1` is gone: sealing released it meanwhile.
    async fn hot_messages(&self, sid: &str, after: u64, through: u64, max_bytes: usize) -> Result<Vec<Bytes>, Error> {
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

    /// Lists pages of `sid` after the key `start_after` and adds them to the index.
    async fn list_pages(&self, sid: &str, start_after: Option<String>) -> Result<Vec<SeqRange>, Error> {
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

    fn cached_page(&self, sid: &str, seq: u64) -> Option<SeqRange> {
        let pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        let (_, range) = pages.get(sid)?.range(..=seq).next_back()?;
        range.contains(seq).then_some(*range)
    }

    /// The page holding message `seq`: from the index, else after listing the pages past the
    /// last one known (pages are immutable, so the index only ever grows).
    async fn page_containing(&self, sid: &str, seq: u64) -> Result<Option<SeqRange>, Error> {
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

    async fn read_once(&self, path: &StreamPath, from: Position, max_bytes: usize) -> Result<Option<Chunk>, Error> {
        let now = self.now();
        let head = self.live_head(path).await?;
        let state = &head.state;
        let start = state.read_start(from)?;
        let Some((messages, from_pages)) = self.read_stored(state, start, max_bytes).await? else {
            return Ok(None);
        };
        if state.needs_touch(now) {
            self.touch(state, now).await?;
        }
        Ok(Some(state.chunk(start, messages, from_pages)))
    }

    /// The stored messages of `state` after `start` (about `max_bytes` of them), and whether
    /// they can never change (from sealed pages, or inherited by a fork). `None` when sealing
    /// released the hot items between the head and the item reads: read again.
    async fn read_stored(
        &self,
        state: &StreamState,
        start: u64,
        max_bytes: usize,
    ) -> Result<Option<(Vec<Bytes>, bool)>, Error> {
        // A fork's read goes on across the runs it inherited, into its own messages.
        let mut out: Vec<Bytes> = Vec::new();
        let mut immutable = true;
        let mut at = start;
        let mut bytes = 0;
        while at < state.tail && bytes < max_bytes {
            let inherited = state.inherited_run(at).is_some();
            let Some((piece, fixed)) = self.read_run(state, at, max_bytes - bytes).await? else {
                if out.is_empty() {
                    return Ok(None);
                }
                break;
            };
            at += piece.len() as u64;
            bytes += piece.iter().map(Bytes::len).sum::<usize>();
            immutable &= fixed;
            out.extend(piece);
            if !inherited {
                break;
            }
        }
        // An empty answer (at the tail) is never immutable.
        Ok(Some((out, immutable && at > start)))
    }

    /// The messages after `start` from one storage run: an inherited one, the sealed pages or
    /// the hot tail; `None` when sealing released the hot items meanwhile.
    async fn read_run(
        &self,
        state: &StreamState,
        start: u64,
        max_bytes: usize,
    ) -> Result<Option<(Vec<Bytes>, bool)>, Error> {
        if start >= state.tail {
            return Ok(Some((Vec::new(), false)));
        }
        if let Some(run) = state.inherited_run(start) {
            // A fork's inherited messages: the source's hot items, or its pages once sealed
            // (pages are written before the items they replace are deleted).
            let hot = self.hot_messages(&run.sid, start, run.upto, max_bytes).await?;
            if !hot.is_empty() {
                return Ok(Some((hot, true)));
            }
            let range = self
                .page_containing(&run.sid, start + 1)
                .await?
                .ok_or_else(|| state.missing_page(start + 1))?;
            let page = decode_page(self.get_object(&page_key(&run.sid, range)).await?, range)?;
            let after = page.messages_after(start);
            let within = (run.upto - start).min(after.len() as u64) as usize;
            return Ok(Some((take_up_to(&after[..within], max_bytes), true)));
        }
        if start < state.sealed {
            let range = self
                .page_containing(&state.sid, start + 1)
                .await?
                .ok_or_else(|| state.missing_page(start + 1))?;
            let page = decode_page(self.get_object(&page_key(&state.sid, range)).await?, range)?;
            return Ok(Some((take_up_to(page.messages_after(start), max_bytes), true)));
        }
        let messages = self.hot_messages(&state.sid, start, state.tail, max_bytes).await?;
        Ok((!messages.is_empty()).then_some((messages, false)))
    }

    /// Message `seq` of a stream, for a fork's byte sub-offset.
    async fn message(&self, state: &StreamState, seq: u64) -> Result<Bytes, Error> {
        for _ in 0..5 {
            if let Some((messages, _)) = self.read_stored(state, seq - 1, 1).await? {
                return messages.into_iter().next().ok_or_else(|| state.missing_page(seq));
            }
        }
        Err(Error::Contention {
            path: state.path.clone(),
        })
    }

    /// After a stream with this origin was removed: one fork fewer on its source; a source that
    /// was deleted (or expired) and has no fork left is removed too, and so on up the chain.
    async fn release_source(&self, mut origin: Option<ForkOrigin>) -> Result<(), Error> {
        while let Some(o) = origin.take() {
            let updated = self
                .clients
                .dynamodb
                .update_item()
                .table_name(&self.opts.table)
                .set_key(Some(head_key(&o.source)))
                .update_expression("SET nf = nf - :one")
                .condition_expression("sid = :sid AND nf > :zero")
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":zero", n(0))
                .expression_attribute_values(":sid", s(&o.source_sid))
                .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
                .send()
                .await;
            let source = match updated {
                Ok(out) => match out.attributes {
                    Some(item) => Head::from_item(&item)?,
                    None => return Ok(()),
                },
                // The source is gone or was replaced: nothing holds it any more.
                Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => return Ok(()),
                Err(e) => return Err(ddb("UpdateItem (release a fork's source)", e)),
            };
            self.forget_head(&o.source);
            let st = &source.state;
            if st.forks == 0 && (st.deleted || st.is_expired(self.now())) && self.remove_head(&source, None).await? {
                self.notifier.publish(&st.path, None);
                self.collect_garbage(&st.sid).await;
                origin.clone_from(&st.origin);
            }
        }
        Ok(())
    }

    /// Deletes a head that has no fork left (on the condition that it is still this incarnation
    /// with no fork), releasing `also` in the same transaction when given. False when the
    /// condition failed.
    async fn remove_head(&self, head: &Head, also: Option<TransactWriteItem>) -> Result<bool, Error> {
        let delete = Delete::builder()
            .table_name(&self.opts.table)
            .set_key(Some(head_key(&head.state.path)))
            .condition_expression("sid = :sid AND (attribute_not_exists(nf) OR nf = :zero)")
            .expression_attribute_values(":sid", s(&head.state.sid))
            .expression_attribute_values(":zero", n(0))
            .build()
            .map_err(|e| Error::unavailable("delete", e))?;
        let mut items = vec![TransactWriteItem::builder().delete(delete).build()];
        items.extend(also);
        let sent = self
            .clients
            .dynamodb
            .transact_write_items()
            .client_request_token(crate::items::request_token())
            .set_transact_items(Some(items))
            .send()
            .await;
        self.forget_head(&head.state.path);
        match sent {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
            {
                Ok(false)
            }
            Err(e) => Err(ddb("TransactWriteItems (delete)", e)),
        }
    }

    /// Refreshes a sliding TTL; does not bump `ver`, so it never conflicts with appends.
    async fn touch(&self, state: &StreamState, now: i64) -> Result<(), Error> {
        let deadline = state.expiry.deadline_ms(now).unwrap_or(i64::MAX);
        let result = self
            .clients
            .dynamodb
            .update_item()
            .table_name(&self.opts.table)
            .set_key(Some(head_key(&state.path)))
            .update_expression("SET tms = :now, dl = :dl, #ttl = :ttl")
            .condition_expression("sid = :sid AND tms < :now")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":dl", n(deadline))
            .expression_attribute_values(":ttl", ttl_attribute(Some(deadline)).unwrap_or_else(|| n(0)))
            .expression_attribute_values(":sid", s(&state.sid))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => Err(ddb("UpdateItem (touch)", e)),
        }
    }

    /// Removes everything stored under a stream incarnation: hot items, producers, blobs and
    /// pages. Best effort: what it misses is unreachable (keys carry the incarnation's `sid`).
    async fn collect_garbage(&self, sid: &str) {
        if let Err(e) = self.delete_hot(sid, None).await {
            tracing::warn!(sid, error = %e, "cannot delete a removed stream's items; they are unreachable garbage");
        }
        match self.list_pages(sid, None).await {
            Ok(pages) => {
                let keys = pages.into_iter().map(|r| page_key(sid, r)).collect();
                self.delete_objects(keys).await;
            }
            Err(e) => tracing::warn!(sid, error = %e, "cannot list a removed stream's pages"),
        }
        self.pages.lock().unwrap_or_else(|e| e.into_inner()).remove(sid);
    }

    /// Deletes hot-tail items of `sid` whose last message is at most `through` (every item of
    /// the incarnation, producers included, when `None`), and their blobs.
    async fn delete_hot(&self, sid: &str, through: Option<u64>) -> Result<(), Error> {
        let mut start_key: Option<Item> = None;
        loop {
            let mut query = self
                .clients
                .dynamodb
                .query()
                .table_name(&self.opts.table)
                .projection_expression("pk, sk, #blob")
                .expression_attribute_names("#blob", "blob")
                .expression_attribute_values(":pk", s(log_pk(sid)))
                .consistent_read(true)
                .set_exclusive_start_key(start_key.take());
            query = match through {
                Some(through) => query
                    .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
                    .expression_attribute_values(":from", s(batch_sk(0)))
                    .expression_attribute_values(":to", s(batch_sk(through))),
                None => query.key_condition_expression("pk = :pk"),
            };
            let page = query.send().await.map_err(|e| ddb("Query (release)", e))?;
            let blobs: Vec<String> = page
                .items()
                .iter()
                .filter_map(|i| i.opt_str("blob").map(str::to_owned))
                .collect();
            for chunk in page.items().chunks(25) {
                let requests: Vec<WriteRequest> = chunk
                    .iter()
                    .filter_map(|item| {
                        let key: Item = item
                            .iter()
                            .filter(|(k, _)| *k == "pk" || *k == "sk")
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        let delete = aws_sdk_dynamodb::types::DeleteRequest::builder()
                            .set_key(Some(key))
                            .build()
                            .ok()?;
                        Some(WriteRequest::builder().delete_request(delete).build())
                    })
                    .collect();
                batch_write(&self.clients.dynamodb, &self.opts.table, requests).await?;
            }
            if !blobs.is_empty() {
                self.delete_objects(blobs).await;
            }
            match page.last_evaluated_key {
                Some(key) => start_key = Some(key),
                None => return Ok(()),
            }
        }
    }
}

/// `BatchWriteItem` of up to 25 requests at a time, resending unprocessed requests with backoff.
pub(crate) async fn batch_write(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    requests: Vec<WriteRequest>,
) -> Result<(), Error> {
    for chunk in requests.chunks(25) {
        let mut requests = chunk.to_vec();
        let mut attempt = 0;
        while !requests.is_empty() {
            let out = dynamodb
                .batch_write_item()
                .request_items(table, requests)
                .send()
                .await
                .map_err(|e| ddb("BatchWriteItem", e))?;
            requests = out
                .unprocessed_items
                .and_then(|mut m| m.remove(table))
                .unwrap_or_default();
            if !requests.is_empty() {
                spool_domain::retry::backoff(attempt).await;
                attempt += 1;
            }
        }
    }
    Ok(())
}

/// Why an append transaction did not commit.
enum Conflict {
    /// Another writer changed the head first: re-read it.
    Lost,
    /// DynamoDB asked to slow down or another transaction held an item: retry as is.
    Busy,
    /// Anything else.
    Failed(Error),
}

/// What a transactional put expects to find.
enum Expected {
    /// No item yet.
    Absent,
    /// A producer item in this state.
    Producer(ProducerState),
}

fn put(table: &str, item: Item, expected: Option<Expected>) -> Result<TransactWriteItem, Conflict> {
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
fn batches(accepted: &[(SeqRange, &Prepared)]) -> Vec<Batch> {
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

#[async_trait]
impl StreamWriter for AwsLog {
    async fn create(&self, path: &StreamPath, req: CreateStream) -> Result<Created, Error> {
        let inner = &self.inner;
        for attempt in 0..5u32 {
            let now = inner.now();
            let existing = inner.fetch_head(path).await?;
            if let Some(head) = &existing
                && (head.state.deleted || head.state.is_retained(now))
            {
                return Err(Error::ConfigMismatch {
                    path: path.clone(),
                    reason: "a deleted stream at this path is kept for its forks".to_owned(),
                });
            }
            let replaced = match existing {
                Some(head) if !head.state.is_expired(now) => {
                    head.state.check_same_config(&req)?;
                    return Ok(Created::Existing(head.state.meta()));
                }
                Some(head) => Some(head.state),
                None => None,
            };
            let (state, own, source) = match &req.fork {
                None => (
                    StreamState::new(path.clone(), &req, now, &inner.opts.limits)?,
                    req.initial.clone(),
                    None,
                ),
                Some(fork) => {
                    let source = inner
                        .fetch_head(&fork.source)
                        .await?
                        .filter(|h| !h.state.is_expired(now))
                        .ok_or_else(|| Error::NotFound {
                            path: fork.source.clone(),
                        })?;
                    let plan = source.state.plan_fork(path, fork)?;
                    let mut own = Vec::with_capacity(req.initial.len() + 1);
                    if let Some((seq, bytes)) = plan.cut {
                        let message = inner.message(&source.state, seq).await?;
                        if bytes > message.len() {
                            return Err(Error::invalid(
                                "fork sub-offset",
                                format!("{bytes} is past the end of the next message ({} bytes)", message.len()),
                            ));
                        }
                        own.push(message.slice(..bytes));
                    }
                    own.extend(req.initial.iter().cloned());
                    let state =
                        StreamState::fork_of(&source.state, path.clone(), &req, &plan, &own, now, &inner.opts.limits)?;
                    (state, own, Some(source.state))
                }
            };
            let first = state.sealed + 1;
            let head = Head { state, ver: 0 };
            let prepared = if own.is_empty() {
                None
            } else {
                Some(inner.prepare(Append::messages(own.iter().cloned())).await?)
            };
            let mut tx = Vec::new();
            let mut head_put = Put::builder()
                .table_name(&inner.opts.table)
                .set_item(Some(head.to_item()));
            head_put = match &replaced {
                Some(old) => head_put
                    .condition_expression("sid = :old")
                    .expression_attribute_values(":old", s(&old.sid)),
                None => head_put.condition_expression("attribute_not_exists(pk)"),
            };
            tx.push(
                TransactWriteItem::builder()
                    .put(head_put.build().map_err(|e| Error::unavailable("put", e))?)
                    .build(),
            );
            if let Some(source) = &source {
                // One fork more on the source, which must still be this live incarnation.
                let hold = Update::builder()
                    .table_name(&inner.opts.table)
                    .set_key(Some(head_key(&source.path)))
                    .update_expression("SET nf = if_not_exists(nf, :zero) + :one")
                    .condition_expression("sid = :sid AND (attribute_not_exists(del) OR del = :false)")
                    .expression_attribute_values(":zero", n(0))
                    .expression_attribute_values(":one", n(1))
                    .expression_attribute_values(":false", AttributeValue::Bool(false))
                    .expression_attribute_values(":sid", s(&source.sid))
                    .build()
                    .map_err(|e| Error::unavailable("update", e))?;
                tx.push(TransactWriteItem::builder().update(hold).build());
            }
            if let Some(prep) = &prepared {
                let range = SeqRange {
                    first,
                    last: first + own.len() as u64 - 1,
                };
                let ttl = match head.state.expiry {
                    spool_domain::Expiry::At { .. } => ttl_attribute(head.state.expires_at_ms()),
                    _ => None,
                };
                for batch in batches(&[(range, prep)]) {
                    tx.push(
                        put(
                            &inner.opts.table,
                            batch.to_item(&head.state.sid, ttl.clone()),
                            Some(Expected::Absent),
                        )
                        .map_err(|c| match c {
                            Conflict::Failed(e) => e,
                            _ => Error::unavailable("put", "batch item"),
                        })?,
                    );
                }
            }
            let sent = inner
                .clients
                .dynamodb
                .transact_write_items()
                .client_request_token(crate::items::request_token())
                .set_transact_items(Some(tx))
                .send()
                .await;
            match sent {
                Ok(_) => {
                    if let Some(old) = replaced {
                        inner.collect_garbage(&old.sid).await;
                        inner.release_source(old.origin).await?;
                    }
                    if let Some(source) = &source {
                        inner.forget_head(&source.path);
                    }
                    let meta = head.state.meta();
                    let closed = head.state.closed;
                    let crossed = head.state.crossed_page_boundary(0, 0, &inner.opts.limits);
                    inner.remember_head(head, HashMap::new());
                    inner.notifier.publish(path, None);
                    if (closed || crossed)
                        && let Some(scheduler) = &inner.opts.scheduler
                        && let Err(e) = scheduler.schedule(path).await
                    {
                        tracing::warn!(%path, error = %e, "cannot schedule sealing");
                    }
                    return Ok(Created::New(meta));
                }
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
                {
                    // Someone created (or replaced) it first: look again.
                    if let Some(prep) = prepared
                        && let Some(blob) = prep.blob
                    {
                        inner.delete_objects(vec![blob]).await;
                    }
                    spool_domain::retry::backoff(attempt).await;
                }
                Err(e) => return Err(ddb("TransactWriteItems (create)", e)),
            }
        }
        Err(Error::Contention { path: path.clone() })
    }

    async fn append(&self, path: &StreamPath, req: Append) -> Result<AppendAck, Error> {
        let prepared = self.inner.prepare(req).await?;
        let inner = Arc::clone(&self.inner);
        let key = path.clone();
        self.inner
            .commits
            .submit(key.clone(), prepared, move |group| {
                Arc::clone(&inner).commit(key.clone(), group)
            })
            .await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), Error> {
        let inner = &self.inner;
        for attempt in 0..5u32 {
            let head = inner.live_head(path).await?;
            if head.state.forks > 0 {
                // Soft delete: gone for clients, kept for the forks that read it. `ver` moves so
                // writers holding the old head re-read it.
                let marked = inner
                    .clients
                    .dynamodb
                    .update_item()
                    .table_name(&inner.opts.table)
                    .set_key(Some(head_key(path)))
                    .update_expression("SET del = :true, ver = ver + :one")
                    .condition_expression("sid = :sid AND nf > :zero AND (attribute_not_exists(del) OR del = :false)")
                    .expression_attribute_values(":true", AttributeValue::Bool(true))
                    .expression_attribute_values(":false", AttributeValue::Bool(false))
                    .expression_attribute_values(":one", n(1))
                    .expression_attribute_values(":zero", n(0))
                    .expression_attribute_values(":sid", s(&head.state.sid))
                    .send()
                    .await;
                inner.forget_head(path);
                match marked {
                    Ok(_) => {
                        inner.notifier.publish(path, None);
                        return Ok(());
                    }
                    Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                        spool_domain::retry::backoff(attempt).await;
                        continue;
                    }
                    Err(e) => return Err(ddb("UpdateItem (soft delete)", e)),
                }
            }
            if inner.remove_head(&head, None).await? {
                inner.notifier.publish(path, None);
                inner.collect_garbage(&head.state.sid).await;
                inner.release_source(head.state.origin.clone()).await?;
                return Ok(());
            }
            // Deleted, replaced or forked meanwhile: look again.
            spool_domain::retry::backoff(attempt).await;
        }
        Err(Error::Contention { path: path.clone() })
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

#[async_trait]
impl StreamSealer for AwsLog {
    async fn seal(&self, path: &StreamPath, mode: SealMode) -> Result<SealReport, Error> {
        let limits = self.inner.opts.limits;
        seal_stream(self, &self.inner.opts.fail_points, &limits, path, mode).await
    }
}

#[async_trait]
impl PageStore for AwsLog {
    async fn load_state(&self, path: &StreamPath) -> Result<Option<StreamState>, Error> {
        match self.inner.live_head(path).await {
            Ok(head) => Ok(Some(head.state)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
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

    async fn write_page(&self, state: &StreamState, range: SeqRange, page: Bytes) -> Result<(), Error> {
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
                    spool_domain::retry::backoff(attempt).await
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
        let result = self
            .inner
            .clients
            .dynamodb
            .update_item()
            .table_name(&self.inner.opts.table)
            .set_key(Some(head_key(&state.path)))
            .update_expression("SET sealed = :to")
            .condition_expression("sid = :sid AND sealed = :from")
            .expression_attribute_values(":sid", s(&state.sid))
            .expression_attribute_values(":from", n(from))
            .expression_attribute_values(":to", n(to))
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
        self.inner.delete_hot(&state.sid, Some(through)).await
    }
}
