//! # A stream's life: creation, forks, deletion and garbage
//!
//! A stream is created (or forked) with one transaction that puts its head (and the first
//! batch, and one fork more on a fork's source). It is deleted softly while forks read it,
//! else by deleting its head; either way an end sentinel is put after its tail in the same
//! transaction, so a writer that remembers it learns it is gone. What a removed incarnation
//! leaves under its `sid` (producers, blobs, pages) is collected; its batches expire. Releasing
//! a fork releases its source in turn.

use std::collections::HashMap;

use aws_sdk_dynamodb::{
    error::SdkError,
    operation::transact_write_items::TransactWriteItemsError,
    types::{AttributeValue, Delete, Put, TransactWriteItem, Update, WriteRequest},
};
use spool_log::{
    error::Error,
    state::{ForkOrigin, StreamState},
    stream::{Append, CreateStream, Created, SeqRange, StreamPath},
};

use super::{
    Inner,
    batches::{Accepted, Conflict, Expected, batches, put},
    head::Arm,
    pages::page_key,
};
use crate::{
    errors::ddb,
    items::{Batch, Body, Head, Item, ItemExt, TailInfo, batch_ttl, batch_write, head_key, log_pk, n, s},
};

impl Inner {
    /// Creates a stream (or a fork of one), or finds it as it is; replaces an expired one.
    pub(super) async fn create(&self, path: &StreamPath, req: CreateStream) -> Result<Created, Error> {
        let inner = self;
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
                    let cut = match plan.cut {
                        Some((seq, _)) => Some(inner.message(&source.state, seq).await?),
                        None => None,
                    };
                    let own = plan.own_messages(cut, &req.initial)?;
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
            if let Some(old) = &replaced {
                // A writer that remembers the expired incarnation finds its next key taken.
                tx.push(inner.end_sentinel(old)?);
            }
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
                let ttl = Some(batch_ttl(now, head.state.expires_at_ms()));
                let accepted = Accepted {
                    range: Some(range),
                    prep,
                    info: TailInfo::of(&head.state),
                    producer: None,
                };
                let wid = uuid::Uuid::now_v7().simple().to_string();
                for batch in batches(&[accepted], &wid, now / 1000) {
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
            // Its batches expire: arm the check that seals them (and a closure) before they
            // are written, so no stream is created without one.
            if head.state.closed || head.state.tail > head.state.sealed {
                inner
                    .arm_idle(path, head.state.tail, inner.opts.limits.idle_seal, Arm::Unrecorded)
                    .await?;
            }
            let sent = crate::items::transact(&inner.clients.dynamodb, tx).await;
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
                    let crossed = head.state.crossed_page_boundary(0, 0, &inner.opts.limits);
                    inner.remember_head(head, HashMap::new());
                    inner.notifier.publish(path, None);
                    // Full pages now; a closed stream's rest is the armed check's.
                    if crossed
                        && let Some(scheduler) = &inner.opts.scheduler
                        && let Err(e) = scheduler.schedule(path).await
                    {
                        tracing::warn!(%path, error = %e, "cannot schedule sealing; the idle check will");
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
                    spool_log::retry::backoff(attempt).await;
                }
                Err(e) => return Err(ddb("TransactWriteItems (create)", e)),
            }
        }
        Err(Error::Contention { path: path.clone() })
    }

    /// Deletes a stream: softly while forks read it, else its head and then its data. Either
    /// way an end sentinel is put after its tail in the same transaction, so a writer that
    /// remembers the stream finds its next key taken and learns it is gone.
    /// True when it was kept for its forks.
    pub(super) async fn delete(&self, path: &StreamPath) -> Result<bool, Error> {
        let inner = self;
        for attempt in 0..5u32 {
            let head = inner.live_head(path).await?;
            let sentinel = inner.end_sentinel(&head.state)?;
            if head.state.forks > 0 {
                // Soft delete: gone for clients, kept for the forks that read it. Its batches
                // expire, so a check that seals it to its end is armed first.
                inner
                    .arm_idle(path, head.state.tail, std::time::Duration::ZERO, Arm::Supersede)
                    .await?;
                let mark = Update::builder()
                    .table_name(&inner.opts.table)
                    .set_key(Some(head_key(path)))
                    .update_expression("SET del = :true, ver = ver + :one")
                    .condition_expression("sid = :sid AND nf > :zero AND (attribute_not_exists(del) OR del = :false)")
                    .expression_attribute_values(":true", AttributeValue::Bool(true))
                    .expression_attribute_values(":false", AttributeValue::Bool(false))
                    .expression_attribute_values(":one", n(1))
                    .expression_attribute_values(":zero", n(0))
                    .expression_attribute_values(":sid", s(&head.state.sid))
                    .build()
                    .map_err(|e| Error::unavailable("update", e))?;
                let sent = crate::items::transact(
                    &inner.clients.dynamodb,
                    vec![TransactWriteItem::builder().update(mark).build(), sentinel],
                )
                .await;
                inner.forget_head(path);
                match sent {
                    Ok(_) => {
                        inner.notifier.publish(path, None);
                        return Ok(true);
                    }
                    Err(SdkError::ServiceError(e))
                        if matches!(e.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
                    {
                        spool_log::retry::backoff(attempt).await;
                        continue;
                    }
                    Err(e) => return Err(ddb("TransactWriteItems (soft delete)", e)),
                }
            }
            if inner.remove_head(&head, Some(sentinel)).await? {
                inner.notifier.publish(path, None);
                inner.collect_garbage(&head.state.sid).await;
                inner.release_source(head.state.origin.clone()).await?;
                return Ok(false);
            }
            // Deleted, replaced, forked or appended to meanwhile: look again.
            spool_log::retry::backoff(attempt).await;
        }
        Err(Error::Contention { path: path.clone() })
    }

    /// The put of an end sentinel after the tail of `state` (after its close marker, if it is
    /// closed), on the condition that no batch is there yet.
    fn end_sentinel(&self, state: &StreamState) -> Result<TransactWriteItem, Error> {
        let sentinel = Batch {
            first: state.tail + 1 + u64::from(state.closed),
            body: Body::Empty,
            info: TailInfo::of(state),
            claims: std::collections::BTreeMap::new(),
            end: true,
            wid: String::new(),
            written_s: self.now() / 1000,
        };
        let ttl = Some(batch_ttl(self.now(), None));
        put(
            &self.opts.table,
            sentinel.to_item(&state.sid, ttl),
            Some(Expected::Absent),
        )
        .map_err(|c| match c {
            Conflict::Failed(e) => e,
            _ => Error::unavailable("put", "end sentinel"),
        })
    }

    /// After a stream with this origin was removed: one fork fewer on its source; a source that
    /// was deleted (or expired) and has no fork left is removed too, and so on up the chain.
    pub(super) async fn release_source(&self, mut origin: Option<ForkOrigin>) -> Result<(), Error> {
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
    pub(super) async fn remove_head(&self, head: &Head, also: Option<TransactWriteItem>) -> Result<bool, Error> {
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
        let sent = crate::items::transact(&self.clients.dynamodb, items).await;
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

    /// Removes what is stored under a stream incarnation: producers, blobs and pages. Its batch
    /// items expire by themselves (their `ttl`). Best effort: what it misses is unreachable
    /// (keys carry the incarnation's `sid`).
    pub(super) async fn collect_garbage(&self, sid: &str) {
        if let Err(e) = self.remove_items(sid).await {
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

    /// Deletes every blob and every producer item of a removed incarnation (its batch items
    /// expire by themselves).
    pub(super) async fn remove_items(&self, sid: &str) -> Result<(), Error> {
        let mut start_key: Option<Item> = None;
        loop {
            let query = self
                .clients
                .dynamodb
                .query()
                .table_name(&self.opts.table)
                .key_condition_expression("pk = :pk")
                .projection_expression("pk, sk, #blob")
                .expression_attribute_names("#blob", "blob")
                .expression_attribute_values(":pk", s(log_pk(sid)))
                .consistent_read(true)
                .set_exclusive_start_key(start_key.take());
            let page = query.send().await.map_err(|e| ddb("Query (release)", e))?;
            let blobs: Vec<String> = page
                .items()
                .iter()
                .filter_map(|i| i.opt_str("blob").map(str::to_owned))
                .collect();
            let producers: Vec<WriteRequest> = page
                .items()
                .iter()
                .filter(|item| item.opt_str("sk").is_some_and(|sk| sk.starts_with("p#")))
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
            batch_write(&self.clients.dynamodb, &self.opts.table, producers).await?;
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
