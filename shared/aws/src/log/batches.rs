//! # Batch items and their conditional puts
//!
//! A round's accepted requests packed into batch items ([`batches`]), the producer items a
//! round writes with them, and the transactional puts that write them on the condition that
//! their keys are as the writer knew them ([`put`]).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use bytes::Bytes;
use spool_log::{
    error::Error,
    page::{encode_frames, frames_len},
    state::ProducerState,
    stream::{Append, SeqRange},
};

use super::head::Known;
use crate::items::{Batch, Body, Item, StoredProducer, TailInfo, n};

/// Frames larger than this go to S3 rather than into a DynamoDB item (whose limit is 400 KB,
/// attribute names and the other attributes included).
pub(super) const ITEM_DATA_MAX: usize = 350 * 1024;

/// An append on its way into a transaction; large ones already have their frames in S3.
pub(super) struct Prepared {
    pub(super) req: Append,
    pub(super) blob: Option<String>,
}

/// An accepted request: the messages it appends (none for a close), the stream's tail after
/// it, and the producer state it leaves.
pub(super) struct Accepted<'a> {
    pub(super) range: Option<SeqRange>,
    pub(super) prep: &'a Prepared,
    pub(super) info: TailInfo,
    pub(super) producer: Option<(String, ProducerState)>,
}

/// The producer items a round writes: those whose state in it is of an epoch the item does not
/// hold yet (a first claim, a new epoch), as of the end of the batch with their last claim.
pub(super) fn epoch_writes(items: &[Batch], known: &HashMap<String, Known>) -> BTreeMap<String, StoredProducer> {
    let mut out = BTreeMap::new();
    for batch in items {
        for (id, state) in &batch.claims {
            let before = known.get(id).and_then(|k| k.state);
            if before.is_none_or(|b| b.epoch != state.epoch) || out.contains_key(id) {
                out.insert(
                    id.clone(),
                    StoredProducer {
                        state: *state,
                        at: batch.last(),
                    },
                );
            }
        }
    }
    out
}

/// Why a round's put did not happen.
pub(super) enum Conflict {
    /// Another writer put a batch at the key first: catch up and decide again.
    Lost,
    /// A producer's item is not as this writer knew it: learn it again.
    Producer,
    /// DynamoDB asked to slow down or another transaction held an item: retry as is.
    Busy,
    /// Anything else.
    Failed(Error),
}

/// What a transactional put expects to find.
pub(super) enum Expected {
    /// No item yet.
    Absent,
    /// A producer item stored as of this message.
    ProducerAt(u64),
}

pub(super) fn put(table: &str, item: Item, expected: Option<Expected>) -> Result<TransactWriteItem, Conflict> {
    let mut put = Put::builder().table_name(table).set_item(Some(item));
    match expected {
        None => {}
        Some(Expected::Absent) => put = put.condition_expression("attribute_not_exists(pk)"),
        Some(Expected::ProducerAt(at)) => {
            put = put
                .condition_expression("#at = :at")
                .expression_attribute_names("#at", "at")
                .expression_attribute_values(":at", n(at));
        }
    }
    let put = put
        .build()
        .map_err(|e| Conflict::Failed(Error::unavailable("DynamoDB put", e)))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// Packs a round's accepted requests into batch items: consecutive inline appends share an
/// item while it has room; an append already in S3 gets an item of its own; a close with no
/// messages closes the item before it, or is an empty item of its own (a close marker).
pub(super) fn batches(accepted: &[Accepted<'_>], wid: &str, written_s: i64) -> Vec<Batch> {
    let wid = wid.to_owned();
    let mut out: Vec<Batch> = Vec::new();
    // The inline run being packed: its batch (body set when flushed) and messages.
    let mut run: Option<(Batch, Vec<Bytes>)> = None;
    let flush = |run: &mut Option<(Batch, Vec<Bytes>)>, out: &mut Vec<Batch>| {
        if let Some((mut batch, messages)) = run.take() {
            batch.body = Body::Inline(encode_frames(&messages));
            out.push(batch);
        }
    };
    let new_batch = |first: u64| Batch {
        first,
        body: Body::Empty,
        info: TailInfo::default(),
        claims: BTreeMap::new(),
        end: false,
        wid: wid.clone(),
        written_s,
    };
    let claim = |batch: &mut Batch, a: &Accepted<'_>| {
        batch.info = a.info.clone();
        if let Some((id, p)) = &a.producer {
            batch.claims.insert(id.clone(), *p);
        }
    };
    for a in accepted {
        let Some(range) = a.range else {
            // A close with no messages: it closes the newest item of the round, if any.
            if let Some((batch, _)) = &mut run {
                claim(batch, a);
            } else if let Some(batch) = out.last_mut() {
                claim(batch, a);
            } else {
                let mut marker = new_batch(a.info.tail + 1);
                claim(&mut marker, a);
                out.push(marker);
            }
            continue;
        };
        let new_batch = || new_batch(range.first);
        if let Some(key) = &a.prep.blob {
            flush(&mut run, &mut out);
            let mut batch = new_batch();
            batch.body = Body::Blob(key.clone());
            claim(&mut batch, a);
            out.push(batch);
            continue;
        }
        let size = frames_len(&a.prep.req.messages);
        let fits = run
            .as_ref()
            .is_some_and(|(_, messages)| frames_len(messages) + size <= ITEM_DATA_MAX);
        if !fits {
            flush(&mut run, &mut out);
        }
        let (batch, messages) = run.get_or_insert_with(|| (new_batch(), Vec::new()));
        messages.extend(a.prep.req.messages.iter().cloned());
        claim(batch, a);
    }
    flush(&mut run, &mut out);
    out
}
