//! # A stream's head: read, resolved, remembered, probed and touched
//!
//! The head item (`pk = s#{path}`) holds a stream's configuration and its tail as of the last
//! seal; appends do not write it. The tail is the newest batch's ([`TailInfo`]), so reading a
//! stream's state is a `GetItem` of the head and a reverse `Query` for its newest batch. A
//! writer remembers the state it last wrote (for at most [`REMEMBER_MS`]), so an uncontended
//! append reads nothing; a live reader probes the newest batch, eventually consistently.

use std::{collections::HashMap, time::Duration};

use aws_sdk_dynamodb::error::SdkError;
use spool_log::{
    error::Error,
    notify::TailProbe,
    state::{ProducerState, StreamState},
    stream::{Offset, StreamPath},
};

use super::{Inner, Remembered};
use crate::{
    errors::ddb,
    items::{Batch, Head, Item, batch_sk, head_key, log_pk, n, s, ttl_attribute},
};

/// How an idle check is armed ([`Inner::arm_idle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arm {
    /// By a write that begins unsealed batches: the new check's chain becomes the stream's.
    Supersede,
    /// By a stream's creation, before its head exists.
    Unrecorded,
    /// By a check of chain `.0`: the new check continues it, unless a newer chain took over.
    Continue(u64),
}

/// How long a writer trusts a tail it remembers, by the clock (a frozen Lambda's memory can be
/// hours old): far below a batch's 14 days, so the key it would put to was never freed by the
/// TTL; and never as long as a stream's idle period, so a writer that appends after an idle
/// check sealed the stream to its end knows it, and arms the next check.
pub(super) const REMEMBER_MS: i64 = 10 * 60 * 1000;

/// A range of a stream's batches to query.
struct BatchQuery {
    from: u64,
    to: u64,
    forward: bool,
    limit: Option<i32>,
    consistent: bool,
}

/// What a writer knows of a producer as of its view's tail: its state (`None`: it never
/// claimed) and the `at` of its stored item (`None`: no item), which an epoch's first write
/// is conditioned on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Known {
    pub(super) state: Option<ProducerState>,
    pub(super) stored_at: Option<u64>,
}

impl Inner {
    pub(super) fn now(&self) -> i64 {
        self.opts.clock.now_ms()
    }

    /// The state this process last wrote, if it is recent enough to build on.
    pub(super) fn cached_head(&self, path: &StreamPath) -> Option<Remembered> {
        let now = self.now();
        let idle = i64::try_from(self.opts.limits.idle_seal.as_millis()).unwrap_or(i64::MAX);
        let trust = REMEMBER_MS.min(idle);
        self.heads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .filter(|r| now.saturating_sub(r.at_ms) < trust && r.at_ms <= now)
            .cloned()
    }

    pub(super) fn remember_head(&self, head: Head, producers: HashMap<String, Known>) {
        let at_ms = self.now();
        let mut heads = self.heads.lock().unwrap_or_else(|e| e.into_inner());
        if heads.len() > 10_000 {
            heads.clear();
        }
        heads.insert(head.state.path.clone(), Remembered { head, producers, at_ms });
    }

    pub(super) fn forget_head(&self, path: &StreamPath) {
        self.heads.lock().unwrap_or_else(|e| e.into_inner()).remove(path);
    }

    /// The head item as stored now (strongly consistent), its tail as of the last seal.
    pub(super) async fn fetch_head_item(&self, path: &StreamPath) -> Result<Option<Head>, Error> {
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

    /// The stream as it is now (strongly consistent), expired or not: its head, with the tail
    /// of its newest batch.
    pub(super) async fn fetch_head(&self, path: &StreamPath) -> Result<Option<Head>, Error> {
        let Some(mut head) = self.fetch_head_item(path).await? else {
            return Ok(None);
        };
        {
            let mut sids = self.sids.lock().unwrap_or_else(|e| e.into_inner());
            if sids.len() > 10_000 {
                sids.clear();
            }
            sids.insert(path.clone(), head.state.sid.clone());
        }
        if let Some(newest) = self.newest_batch(&head.state.sid, Offset::MAX_SEQ, true).await? {
            newest.info.apply(&mut head.state);
        }
        Ok(Some(head))
    }

    /// The batch with the highest key at most `through + 1`: the newest one when `through` is
    /// [`Offset::MAX_SEQ`].
    pub(super) async fn newest_batch(&self, sid: &str, through: u64, consistent: bool) -> Result<Option<Batch>, Error> {
        Ok(self
            .batches_back(sid, through.saturating_add(1), 1, consistent)
            .await?
            .into_iter()
            .next())
    }

    /// Up to `limit` batches with keys at most `key`, newest first.
    pub(super) async fn batches_back(
        &self,
        sid: &str,
        key: u64,
        limit: i32,
        consistent: bool,
    ) -> Result<Vec<Batch>, Error> {
        let query = BatchQuery {
            from: 0,
            to: key,
            forward: false,
            limit: Some(limit),
            consistent,
        };
        Ok(self.query_batches(sid, query, None).await?.0)
    }

    /// Batches with keys from `from` to `to`, strongly consistent, forward or backward, one
    /// query page at a time (a next page continues with the same range and `start_key`).
    pub(super) async fn batch_range(
        &self,
        sid: &str,
        from: u64,
        to: u64,
        forward: bool,
        start_key: Option<Item>,
    ) -> Result<(Vec<Batch>, Option<Item>), Error> {
        let query = BatchQuery {
            from,
            to,
            forward,
            limit: None,
            consistent: true,
        };
        self.query_batches(sid, query, start_key).await
    }

    async fn query_batches(
        &self,
        sid: &str,
        q: BatchQuery,
        start_key: Option<Item>,
    ) -> Result<(Vec<Batch>, Option<Item>), Error> {
        if q.from > q.to {
            return Ok((Vec::new(), None));
        }
        let key = |seq: u64| s(batch_sk(seq.min(Offset::MAX_SEQ + 1)));
        let out = self
            .clients
            .dynamodb
            .query()
            .table_name(&self.opts.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
            .expression_attribute_values(":pk", s(log_pk(sid)))
            .expression_attribute_values(":from", key(q.from))
            .expression_attribute_values(":to", key(q.to))
            .scan_index_forward(q.forward)
            .set_limit(q.limit)
            .consistent_read(q.consistent)
            .set_exclusive_start_key(start_key)
            .send()
            .await
            .map_err(|e| ddb("Query (batches)", e))?;
        let batches = out.items().iter().map(Batch::from_item).collect::<Result<_, _>>()?;
        Ok((batches, out.last_evaluated_key))
    }

    /// A live reader's cheap look at a stream: an eventually consistent reverse `Query` for its
    /// newest batch (0.5 read units for a small one), every `SPOOL_LIVE_POLL_MS` while a reader
    /// waits on another process's writes. A tail it sees late only delays the wake-up; the read
    /// that follows is strongly consistent. A stream with no live batch (sealed and idle, or
    /// deleted) is probed at its head.
    pub(super) async fn probe(&self, path: &StreamPath) -> Result<TailProbe, Error> {
        let sid = self.sids.lock().unwrap_or_else(|e| e.into_inner()).get(path).cloned();
        if let Some(sid) = sid
            && let Some(newest) = self.newest_batch(&sid, Offset::MAX_SEQ, false).await?
            && !newest.end
        {
            return Ok(TailProbe {
                tail: Offset::after(newest.last()),
                closed: newest.info.closed,
            });
        }
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
        let item: Item = out.item.ok_or_else(|| Error::NotFound { path: path.clone() })?;
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
    pub(super) async fn live_head(&self, path: &StreamPath) -> Result<Head, Error> {
        let head = self
            .fetch_head(path)
            .await?
            .ok_or_else(|| Error::NotFound { path: path.clone() })?;
        head.state.check_live(self.now())?;
        Ok(head)
    }

    /// Arms an idle check of `path` (sealing it after `delay` if its tail is then `tail`) and
    /// makes it the stream's one chain of checks: the check is sent first, then its token
    /// recorded in the head (`ick`), so the head never names a check that was not sent. A check
    /// whose token the head no longer names arms no next one ([`Arm`]), so however many writes
    /// arm checks, a stream has one chain at a time (with several, each would arm the next
    /// every idle period for as long as the stream is busy).
    pub(super) async fn arm_idle(&self, path: &StreamPath, tail: u64, delay: Duration, arm: Arm) -> Result<(), Error> {
        let Some(scheduler) = &self.opts.scheduler else {
            return Ok(());
        };
        let chain = fastrand::u64(1..);
        scheduler.schedule_idle(path, tail, delay, chain).await?;
        let update = self
            .clients
            .dynamodb
            .update_item()
            .table_name(&self.opts.table)
            .set_key(Some(head_key(path)))
            .update_expression("SET ick = :chain")
            .expression_attribute_values(":chain", n(chain));
        let update = match arm {
            // The stream's head is written with the batches that follow: the chain is named
            // by the next arm (or taken by the next check's).
            Arm::Unrecorded => return Ok(()),
            Arm::Supersede => update.condition_expression("attribute_exists(pk)"),
            Arm::Continue(from) => update
                .condition_expression("attribute_exists(pk) AND (attribute_not_exists(ick) OR ick = :from)")
                .expression_attribute_values(":from", n(from)),
        };
        match update.send().await {
            Ok(_) => Ok(()),
            // No head (deleted), or a newer chain: the check just sent finds it and ends.
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(()),
            Err(e) => Err(ddb("UpdateItem (idle check)", e)),
        }
    }

    /// The chain of idle checks the head names, if any.
    pub(super) async fn idle_chain(&self, path: &StreamPath) -> Result<Option<u64>, Error> {
        let out = self
            .clients
            .dynamodb
            .get_item()
            .table_name(&self.opts.table)
            .set_key(Some(head_key(path)))
            .projection_expression("ick")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb("GetItem (idle check)", e))?;
        Ok(out
            .item()
            .and_then(|item| item.get("ick"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok()))
    }

    /// Refreshes a sliding TTL; does not bump `ver`, so it never conflicts with appends.
    pub(super) async fn touch(&self, state: &StreamState, now: i64) -> Result<(), Error> {
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
}
