//! # DynamoDB items of the streams table
//!
//! One table, keys `pk` and `sk` (both strings):
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | stream head | `s#{path}` | `head` | the [`StreamState`] (its tail as of the last seal), `ver` and the deadline `dl` |
//! | hot-tail batch | `l#{sid}` | `m#{first:020}` | messages `first..=last` as frames (`data`) or an S3 key (`blob`), the stream's [`TailInfo`] after them, and the producer claims they carry (`cl`) |
//! | close marker | `l#{sid}` | `m#{tail+1:020}` | an empty batch (`last = first - 1`) whose [`TailInfo`] is closed |
//! | end sentinel | `l#{sid}` | `m#{tail+1:020}` (`+2` after a close marker) | an empty batch marked `end`: the stream was deleted |
//! | producer | `l#{sid}` | `p#{producer id}` | the producer's state as of message `at` |
//!
//! Batches are keyed by their *first* sequence number and each is put on the condition that
//! its key is free (`attribute_not_exists`). A writer whose view of the tail is `t` puts at
//! `t + 1`, and `t` is always the end of a stored batch, so the batches form one chain: a
//! writer behind the tail finds its key taken, reads what came after, and decides again. That
//! one condition orders all writers of a stream, gaplessly, in one write unit for a small
//! event; the head is not written by appends.
//!
//! Batches are never deleted: each carries a `ttl` [`HOT_SECONDS`] after it was written, so
//! DynamoDB removes it for free long after sealing copied it into a page (the worker seals full
//! pages as they fill and a chat's last page once it is idle; `SealLagMs` alarms when sealing
//! falls behind). The head keeps the tail a fully sealed stream's batches took with them.
//! Each batch records when it was written (`ts`), so an idle check can tell how old the oldest
//! unsealed one is.
//!
//! `ttl` is DynamoDB's TTL attribute: a day after a stream's deadline DynamoDB may delete the
//! item. Spool never relies on that deletion: it treats an expired stream as gone as soon as the
//! deadline passes.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::{primitives::Blob, types::AttributeValue};
use bytes::Bytes;
use spool_log::{
    error::Error,
    state::{ProducerState, StreamState},
    stream::{ContentType, Expiry, ProducerClaim, StreamPath},
};

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// Grace between a stream's deadline and DynamoDB's own deletion of its items.
const TTL_GRACE_SECONDS: i64 = 24 * 3600;

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn head_pk(path: &StreamPath) -> String {
    format!("s#{path}")
}

pub(crate) fn head_key(path: &StreamPath) -> Item {
    HashMap::from([("pk".to_owned(), s(head_pk(path))), ("sk".to_owned(), s("head"))])
}

pub(crate) fn log_pk(sid: &str) -> String {
    format!("l#{sid}")
}

pub(crate) fn batch_sk(first: u64) -> String {
    format!("m#{first:020}")
}

pub(crate) fn batch_key(sid: &str, first: u64) -> Item {
    HashMap::from([("pk".to_owned(), s(log_pk(sid))), ("sk".to_owned(), s(batch_sk(first)))])
}

pub(crate) fn producer_key(sid: &str, producer: &str) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(log_pk(sid))),
        ("sk".to_owned(), s(format!("p#{producer}"))),
    ])
}

/// DynamoDB's TTL attribute for a stream with this deadline.
pub(crate) fn ttl_attribute(deadline_ms: Option<i64>) -> Option<AttributeValue> {
    deadline_ms.map(|ms| n(ms / 1000 + TTL_GRACE_SECONDS))
}

/// Typed access to attributes, with errors that say which attribute was wrong.
pub(crate) trait ItemExt {
    fn str_attr(&self, name: &str) -> Result<&str, Error>;
    fn opt_str(&self, name: &str) -> Option<&str>;
    fn num<T: std::str::FromStr>(&self, name: &str) -> Result<T, Error>;
    fn opt_num<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, Error>;
    fn bool_attr(&self, name: &str) -> bool;
    fn bytes_attr(&self, name: &str) -> Option<Bytes>;
}

/// The producer claim that closed the stream (`cby`), on a head or a batch.
fn closed_by(item: &Item) -> Result<Option<ProducerClaim>, Error> {
    item.opt_str("cby")
        .map(serde_json::from_str::<ProducerClaim>)
        .transpose()
        .map_err(|_| corrupt("cby"))
}

fn corrupt(name: &str) -> Error {
    Error::Corrupt {
        what: format!("DynamoDB attribute `{name}` is missing or malformed"),
    }
}

impl ItemExt for Item {
    fn str_attr(&self, name: &str) -> Result<&str, Error> {
        self.opt_str(name).ok_or_else(|| corrupt(name))
    }

    fn opt_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
    }

    fn num<T: std::str::FromStr>(&self, name: &str) -> Result<T, Error> {
        self.opt_num(name)?.ok_or_else(|| corrupt(name))
    }

    fn opt_num<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, Error> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_n()
                .ok()
                .and_then(|n| n.parse().ok())
                .map(Some)
                .ok_or_else(|| corrupt(name)),
        }
    }

    fn bool_attr(&self, name: &str) -> bool {
        self.get(name).and_then(|v| v.as_bool().ok()).copied().unwrap_or(false)
    }

    fn bytes_attr(&self, name: &str) -> Option<Bytes> {
        self.get(name)
            .and_then(|v| v.as_b().ok())
            .map(|b| Bytes::copy_from_slice(b.as_ref()))
    }
}

/// A stream head as stored: the state and its version.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) state: StreamState,
    pub(crate) ver: u64,
}

impl Head {
    /// The full item, for creating a stream.
    pub(crate) fn to_item(&self) -> Item {
        let st = &self.state;
        let mut item = head_key(&st.path);
        item.insert("sid".into(), s(&st.sid));
        item.insert("ct".into(), s(st.content_type.as_str()));
        item.insert("exp".into(), s(serde_json::to_string(&st.expiry).unwrap_or_default()));
        item.insert("cms".into(), n(st.created_ms));
        item.insert("tms".into(), n(st.touched_ms));
        item.insert("tail".into(), n(st.tail));
        item.insert("bytes".into(), n(st.total_bytes));
        item.insert("closed".into(), AttributeValue::Bool(st.closed));
        item.insert("sealed".into(), n(st.sealed));
        item.insert("ver".into(), n(self.ver));
        if let Some(deadline) = st.expires_at_ms() {
            item.insert("dl".into(), n(deadline));
        }
        if let Some(ttl) = ttl_attribute(st.expires_at_ms()) {
            item.insert("ttl".into(), ttl);
        }
        if let Some(by) = &st.closed_by {
            item.insert("cby".into(), s(serde_json::to_string(by).unwrap_or_default()));
        }
        if let Some(seq) = &st.stream_seq {
            item.insert("sseq".into(), s(seq));
        }
        if !st.lineage.is_empty() {
            item.insert("lin".into(), s(serde_json::to_string(&st.lineage).unwrap_or_default()));
        }
        if let Some(origin) = &st.origin {
            item.insert("org".into(), s(serde_json::to_string(origin).unwrap_or_default()));
        }
        item.insert("nf".into(), n(st.forks));
        if st.deleted {
            item.insert("del".into(), AttributeValue::Bool(true));
        }
        item
    }

    pub(crate) fn from_item(item: &Item) -> Result<Self, Error> {
        let path = item.str_attr("pk")?.strip_prefix("s#").ok_or_else(|| corrupt("pk"))?;
        let state = StreamState {
            path: StreamPath::parse(path).map_err(|_| corrupt("pk"))?,
            sid: item.str_attr("sid")?.to_owned(),
            content_type: ContentType::parse(item.str_attr("ct")?).map_err(|_| corrupt("ct"))?,
            expiry: serde_json::from_str::<Expiry>(item.str_attr("exp")?).map_err(|_| corrupt("exp"))?,
            created_ms: item.num("cms")?,
            touched_ms: item.num("tms")?,
            tail: item.num("tail")?,
            total_bytes: item.num("bytes")?,
            closed: item.bool_attr("closed"),
            closed_by: closed_by(item)?,
            stream_seq: item.opt_str("sseq").map(str::to_owned),
            sealed: item.num("sealed")?,
            lineage: item
                .opt_str("lin")
                .map(serde_json::from_str)
                .transpose()
                .map_err(|_| corrupt("lin"))?
                .unwrap_or_default(),
            origin: item
                .opt_str("org")
                .map(serde_json::from_str)
                .transpose()
                .map_err(|_| corrupt("org"))?,
            forks: item.opt_num("nf")?.unwrap_or(0),
            deleted: item.bool_attr("del"),
            sealing: item.opt_num("sip")?,
        };
        Ok(Self {
            state,
            ver: item.num("ver")?,
        })
    }
}

/// Where a batch's messages are.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// In the item, as frames.
    Inline(Bytes),
    /// In S3 under this key, as frames (appends too large for an item).
    Blob(String),
    /// Nowhere: a close marker or an end sentinel (no messages).
    Empty,
}

/// What a stream's tail is after a batch: the part of [`StreamState`] appends change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TailInfo {
    pub(crate) tail: u64,
    pub(crate) bytes: u64,
    pub(crate) closed: bool,
    pub(crate) closed_by: Option<ProducerClaim>,
    pub(crate) stream_seq: Option<String>,
}

impl TailInfo {
    pub(crate) fn of(state: &StreamState) -> Self {
        Self {
            tail: state.tail,
            bytes: state.total_bytes,
            closed: state.closed,
            closed_by: state.closed_by.clone(),
            stream_seq: state.stream_seq.clone(),
        }
    }

    /// Moves `state` to this tail, if it is not behind it.
    pub(crate) fn apply(&self, state: &mut StreamState) {
        if self.tail > state.tail || (self.tail == state.tail && self.closed && !state.closed) {
            state.tail = self.tail;
            state.total_bytes = self.bytes;
            state.closed = self.closed;
            state.closed_by.clone_from(&self.closed_by);
            state.stream_seq.clone_from(&self.stream_seq);
        }
    }

    fn write(&self, item: &mut Item) {
        item.insert("last".into(), n(self.tail));
        item.insert("bytes".into(), n(self.bytes));
        if self.closed {
            item.insert("closed".into(), AttributeValue::Bool(true));
        }
        if let Some(by) = &self.closed_by {
            item.insert("cby".into(), s(serde_json::to_string(by).unwrap_or_default()));
        }
        if let Some(seq) = &self.stream_seq {
            item.insert("sseq".into(), s(seq));
        }
    }

    pub(crate) fn read(item: &Item) -> Result<Self, Error> {
        Ok(Self {
            tail: item.num("last")?,
            bytes: item.num("bytes")?,
            closed: item.bool_attr("closed"),
            closed_by: closed_by(item)?,
            stream_seq: item.opt_str("sseq").map(str::to_owned),
        })
    }
}

/// A hot-tail batch item (or what is left of one).
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    /// The first message's sequence number, the item's key. An empty batch (a close marker, an
    /// end sentinel) has `first == info.tail + 1`.
    pub(crate) first: u64,
    pub(crate) body: Body,
    /// The stream's tail after this batch; `info.tail` is its last message.
    pub(crate) info: TailInfo,
    /// Producer states after this batch, of the producers whose claims it carries.
    pub(crate) claims: BTreeMap<String, ProducerState>,
    /// An end sentinel: the stream was deleted, nothing may follow.
    pub(crate) end: bool,
    /// The writer's id for this put, so a write whose answer was lost recognises itself.
    pub(crate) wid: String,
    /// When it was written (seconds since the epoch; 0 if not known).
    pub(crate) written_s: i64,
}

impl Batch {
    pub(crate) fn last(&self) -> u64 {
        self.info.tail
    }

    /// Messages in it (0 for a close marker or end sentinel).
    pub(crate) fn len(&self) -> u64 {
        (self.info.tail + 1).saturating_sub(self.first)
    }

    pub(crate) fn to_item(&self, sid: &str, ttl: Option<AttributeValue>) -> Item {
        let mut item = batch_key(sid, self.first);
        item.insert("first".into(), n(self.first));
        self.info.write(&mut item);
        match &self.body {
            Body::Inline(frames) => {
                item.insert("data".into(), AttributeValue::B(Blob::new(frames.to_vec())));
            }
            Body::Blob(key) => {
                item.insert("blob".into(), s(key));
            }
            Body::Empty => {}
        }
        if !self.claims.is_empty() {
            let claims: BTreeMap<&str, [u64; 3]> = self
                .claims
                .iter()
                .map(|(id, p)| (id.as_str(), [p.epoch, p.seq, p.offset]))
                .collect();
            item.insert("cl".into(), s(serde_json::to_string(&claims).unwrap_or_default()));
        }
        if self.end {
            item.insert("end".into(), AttributeValue::Bool(true));
        }
        if !self.wid.is_empty() {
            item.insert("wid".into(), s(&self.wid));
        }
        if self.written_s > 0 {
            item.insert("ts".into(), n(self.written_s));
        }
        if let Some(ttl) = ttl {
            item.insert("ttl".into(), ttl);
        }
        item
    }

    pub(crate) fn from_item(item: &Item) -> Result<Self, Error> {
        let end = item.bool_attr("end");
        let body = match (item.bytes_attr("data"), item.opt_str("blob")) {
            (Some(frames), _) => Body::Inline(frames),
            (None, Some(key)) => Body::Blob(key.to_owned()),
            (None, None) => Body::Empty,
        };
        let batch = Self {
            first: item.num("first")?,
            body,
            info: TailInfo::read(item)?,
            claims: match item.opt_str("cl") {
                None => BTreeMap::new(),
                Some(json) => serde_json::from_str::<BTreeMap<String, [u64; 3]>>(json)
                    .map_err(|_| corrupt("cl"))?
                    .into_iter()
                    .map(|(id, [epoch, seq, offset])| (id, ProducerState { epoch, seq, offset }))
                    .collect(),
            },
            end,
            wid: item.opt_str("wid").unwrap_or_default().to_owned(),
            written_s: item.opt_num("ts")?.unwrap_or(0),
        };
        if batch.len() > 0 && matches!(batch.body, Body::Empty) {
            return Err(corrupt("data"));
        }
        Ok(batch)
    }
}

/// How long a batch item lives: DynamoDB's TTL removes it this long after it was written, by
/// when sealing has long copied it into a page. A writer never trusts a tail it remembers for
/// more than a small part of this (`REMEMBER_MS`), so a key freed by the TTL is never one a
/// writer could still put to.
pub(crate) const HOT_SECONDS: i64 = 14 * 24 * 3600;

/// The `ttl` of a batch written at `now_ms` to a stream with this deadline.
pub(crate) fn batch_ttl(now_ms: i64, deadline_ms: Option<i64>) -> AttributeValue {
    let hot = now_ms / 1000 + HOT_SECONDS;
    let stream = deadline_ms.map_or(i64::MAX, |ms| ms / 1000 + TTL_GRACE_SECONDS);
    n(hot.min(stream))
}

/// A producer item: its state as of message `at` (no claim of it after `at` is in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredProducer {
    pub(crate) state: ProducerState,
    pub(crate) at: u64,
}

pub(crate) fn producer_from_item(item: &Item) -> Result<StoredProducer, Error> {
    Ok(StoredProducer {
        state: ProducerState {
            epoch: item.num("epoch")?,
            seq: item.num("seq")?,
            offset: item.num("offset")?,
        },
        at: item.num("at")?,
    })
}

pub(crate) fn producer_to_item(sid: &str, producer: &str, p: StoredProducer, ttl: Option<AttributeValue>) -> Item {
    let mut item = producer_key(sid, producer);
    item.insert("epoch".into(), n(p.state.epoch));
    item.insert("seq".into(), n(p.state.seq));
    item.insert("offset".into(), n(p.state.offset));
    item.insert("at".into(), n(p.at));
    if let Some(ttl) = ttl {
        item.insert("ttl".into(), ttl);
    }
    item
}

/// A fresh idempotency token for one `TransactWriteItems`. The SDK sends the same token when it
/// retries the request, so a retry of a transaction that committed but whose answer was lost
/// (a timeout, a 500) is answered with the first outcome instead of being applied again or
/// failing its conditions against its own writes.
pub(crate) fn request_token() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// One `TransactWriteItems` of `items`, with a fresh [`request_token`] so the SDK's retries of
/// it are idempotent. The caller reads a cancellation's reasons.
pub(crate) async fn transact(
    dynamodb: &aws_sdk_dynamodb::Client,
    items: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
) -> Result<
    (),
    aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError>,
> {
    dynamodb
        .transact_write_items()
        .client_request_token(request_token())
        .set_transact_items(Some(items))
        .send()
        .await
        .map(drop)
}

/// `BatchWriteItem` of up to 25 requests at a time, resending unprocessed requests with backoff.
pub(crate) async fn batch_write(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    requests: Vec<aws_sdk_dynamodb::types::WriteRequest>,
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
                .map_err(|e| crate::errors::ddb("BatchWriteItem", e))?;
            requests = out
                .unprocessed_items
                .and_then(|mut m| m.remove(table))
                .unwrap_or_default();
            if !requests.is_empty() {
                spool_log::retry::backoff(attempt).await;
                attempt += 1;
            }
        }
    }
    Ok(())
}
