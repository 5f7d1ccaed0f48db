//! # A stream's head: read, remembered, probed and touched
//!
//! The head item (`pk = s#{path}`) holds a stream's state and its `ver`, which every append's
//! transaction checks. A writer remembers the head it last committed, so an uncontended append
//! reads nothing; a live reader probes a few attributes of it, eventually consistently.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use spool_domain::{
    Error, Offset, StreamPath,
    notify::TailProbe,
    state::{ProducerState, StreamState},
};

use super::{Inner, Remembered};
use crate::{
    errors::ddb,
    items::{Head, head_key, n, s, ttl_attribute},
};

impl Inner {
    pub(super) fn now(&self) -> i64 {
        self.opts.clock.now_ms()
    }

    pub(super) fn cached_head(&self, path: &StreamPath) -> Option<Remembered> {
        self.heads.lock().unwrap_or_else(|e| e.into_inner()).get(path).cloned()
    }

    pub(super) fn remember_head(&self, head: Head, producers: HashMap<String, Option<ProducerState>>) {
        let mut heads = self.heads.lock().unwrap_or_else(|e| e.into_inner());
        if heads.len() > 10_000 {
            heads.clear();
        }
        heads.insert(head.state.path.clone(), Remembered { head, producers });
    }

    pub(super) fn forget_head(&self, path: &StreamPath) {
        self.heads.lock().unwrap_or_else(|e| e.into_inner()).remove(path);
    }

    /// The head as stored now (strongly consistent), expired or not.
    pub(super) async fn fetch_head(&self, path: &StreamPath) -> Result<Option<Head>, Error> {
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
    pub(super) async fn probe(&self, path: &StreamPath) -> Result<TailProbe, Error> {
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
    pub(super) async fn live_head(&self, path: &StreamPath) -> Result<Head, Error> {
        let head = self
            .fetch_head(path)
            .await?
            .ok_or_else(|| Error::NotFound { path: path.clone() })?;
        head.state.check_live(self.now())?;
        Ok(head)
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
