//! # Forks: where a fork of a stream starts, and what it inherits

use bytes::Bytes;

use super::{ForkOrigin, ForkPlan, Segment, StreamState, new_sid};
use crate::{
    error::Error,
    limits::LogLimits,
    stream::{CreateStream, ForkRequest, Offset, StreamPath},
};

impl ForkPlan {
    /// The fork's own first messages: the first bytes of the source's message that `cut`
    /// names (`cut_message`, which the caller reads from the source), then the create
    /// request's `initial` messages. A sub-offset past the end of that message is invalid.
    pub fn own_messages(&self, cut_message: Option<Bytes>, initial: &[Bytes]) -> Result<Vec<Bytes>, Error> {
        let mut own = Vec::with_capacity(initial.len() + 1);
        if let Some((seq, bytes)) = self.cut {
            let message = cut_message.ok_or_else(|| Error::Corrupt {
                what: format!("message {seq} of a fork's source could not be read"),
            })?;
            if bytes > message.len() {
                return Err(Error::invalid(
                    "fork sub-offset",
                    format!("{bytes} is past the end of the next message ({} bytes)", message.len()),
                ));
            }
            own.push(message.slice(..bytes));
        }
        own.extend(initial.iter().cloned());
        Ok(own)
    }
}

impl StreamState {
    /// Decides where a fork of this stream (the source) at `path` starts. A deleted source and a
    /// different content type are conflicts; an offset or sub-offset past the data is invalid.
    pub fn plan_fork(&self, path: &StreamPath, fork: &ForkRequest) -> Result<ForkPlan, Error> {
        if self.deleted {
            return Err(Error::ConfigMismatch {
                path: path.clone(),
                reason: format!("the source `{}` was deleted", self.path),
            });
        }
        if let Some(ct) = &fork.content_type
            && *ct != self.content_type
        {
            return Err(Error::ConfigMismatch {
                path: path.clone(),
                reason: format!(
                    "a fork has its source's content type `{}`, not `{ct}`",
                    self.content_type
                ),
            });
        }
        let anchor = fork.offset.map_or(self.tail, Offset::seq);
        if anchor > self.tail {
            return Err(Error::invalid(
                "fork offset",
                format!(
                    "{} is beyond the source's tail {}",
                    Offset::after(anchor),
                    self.tail_offset()
                ),
            ));
        }
        let past_the_data = || {
            Error::invalid(
                "fork sub-offset",
                format!("{} is past the source's next message", fork.sub_offset),
            )
        };
        if fork.sub_offset == 0 {
            return Ok(ForkPlan {
                at: anchor,
                anchor,
                cut: None,
            });
        }
        if self.content_type.is_json() {
            let at = anchor.checked_add(fork.sub_offset).filter(|at| *at <= self.tail);
            return at
                .map(|at| ForkPlan { at, anchor, cut: None })
                .ok_or_else(past_the_data);
        }
        if anchor >= self.tail {
            return Err(past_the_data());
        }
        let bytes = usize::try_from(fork.sub_offset).map_err(|_| past_the_data())?;
        Ok(ForkPlan {
            at: anchor,
            anchor,
            cut: Some((anchor + 1, bytes)),
        })
    }

    /// The head of a new fork of `source` at `path` (as `req.fork` asks), inheriting its
    /// messages up to `plan.at` and starting with `own` messages of its own.
    pub fn fork_of(
        source: &StreamState,
        path: StreamPath,
        req: &CreateStream,
        plan: &ForkPlan,
        own: &[Bytes],
        now_ms: i64,
        limits: &LogLimits,
    ) -> Result<Self, Error> {
        let fork = req
            .fork
            .as_ref()
            .ok_or_else(|| Error::invalid("fork", "the request names no source"))?;
        let size = limits.check_append(own.iter().map(Bytes::len).sum())?;
        Ok(Self {
            path,
            sid: new_sid(),
            content_type: source.content_type.clone(),
            expiry: fork.expiry.unwrap_or(source.expiry),
            created_ms: now_ms,
            touched_ms: now_ms,
            tail: plan.at + own.len() as u64,
            total_bytes: size as u64,
            closed: req.closed,
            closed_by: None,
            stream_seq: None,
            sealed: plan.at,
            lineage: source.lineage_up_to(plan.at),
            origin: Some(ForkOrigin {
                source: source.path.clone(),
                source_sid: source.sid.clone(),
                offset: plan.anchor,
                sub_offset: fork.sub_offset,
            }),
            forks: 0,
            deleted: false,
            sealing: None,
        })
    }

    /// The storage runs that hold this stream's messages `1..=at`.
    pub fn lineage_up_to(&self, at: u64) -> Vec<Segment> {
        let mut out = Vec::new();
        let mut previous = 0;
        for segment in &self.lineage {
            if segment.upto >= at {
                if at > previous {
                    out.push(Segment {
                        sid: segment.sid.clone(),
                        upto: at,
                    });
                }
                return out;
            }
            out.push(segment.clone());
            previous = segment.upto;
        }
        if at > previous {
            out.push(Segment {
                sid: self.sid.clone(),
                upto: at,
            });
        }
        out
    }

    /// The inherited run holding message `start + 1`, if it is inherited.
    pub fn inherited_run(&self, start: u64) -> Option<&Segment> {
        self.lineage.iter().find(|s| s.upto > start)
    }
}
