//! # A stream's persisted state and the rules that change it
//!
//! Each adapter loads a [`StreamState`] (and the [`ProducerState`] of the producer a request
//! names), runs [`apply_append`] on it and persists the result atomically, guarded by a
//! condition that nobody else changed the state meanwhile. Keeping the rules here, in one pure
//! function, is what makes the embedded and the AWS backends behave identically.
//!
//! The checks follow the Durable Streams protocol's precedence: a closed stream first (so the
//! client learns it is closed), then the content type, then the idempotent producer (so a retry
//! is acknowledged before its `Stream-Seq` could look like a regression), then `Stream-Seq`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{
    error::Error,
    limits::LogLimits,
    stream::{
        Append, AppendAck, Chunk, ContentType, CreateStream, Expiry, Offset, Position, ProducerAck, ProducerClaim,
        SeqRange, StreamMeta, StreamPath,
    },
};

mod fork;

/// A stream's head: everything about it but its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamState {
    /// The stream's path.
    pub path: StreamPath,
    /// The storage id of this incarnation of the stream. Messages and pages are keyed by it, so
    /// a stream deleted and created again at the same path never sees the old data.
    pub sid: String,
    /// The content type.
    pub content_type: ContentType,
    /// The expiry rule.
    pub expiry: Expiry,
    /// Creation time (ms since the epoch).
    pub created_ms: i64,
    /// Last read or write, for a sliding TTL (ms since the epoch).
    pub touched_ms: i64,
    /// Sequence number of the last message (0 when empty).
    pub tail: u64,
    /// Bytes of all messages ever appended; decides when a page's worth is waiting to be sealed.
    pub total_bytes: u64,
    /// Whether the stream is closed.
    pub closed: bool,
    /// The producer claim whose append closed the stream, to acknowledge its retries.
    pub closed_by: Option<ProducerClaim>,
    /// The last accepted `Stream-Seq`.
    pub stream_seq: Option<String>,
    /// Messages up to this sequence number are in sealed pages (for a fork, at least its
    /// inherited ones, which are never its own to seal).
    pub sealed: u64,
    /// A fork's inherited messages: runs of other streams' storage, in order. Reading them
    /// needs no other stream's head, so a fork outlives its source's deletion or expiry.
    pub lineage: Vec<Segment>,
    /// Where a fork came from (for idempotent re-creation and for releasing its source).
    pub origin: Option<ForkOrigin>,
    /// How many live forks were made from this stream; its data is kept while any exists.
    pub forks: u64,
    /// Deleted while forks still needed it: gone for clients (`410`), kept for the forks.
    pub deleted: bool,
    /// The last message of a page a sealer said it was about to write past [`Self::sealed`],
    /// until a commit of the sealed point cleared it: such a page may be in storage,
    /// unrecorded (the sealer stopped in between). Only stores that record this intent
    /// ([`crate::seal::PageStore::records_page_intents`]) set it.
    pub sealing: Option<u64>,
}

/// A run of a fork's inherited messages: those after the previous segment's `upto`, up to and
/// including `upto`, stored under the storage id `sid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// The storage id holding the messages.
    pub sid: String,
    /// The last inherited message of the run.
    pub upto: u64,
}

/// Where a fork came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The source stream's path.
    pub source: StreamPath,
    /// The source's storage id when the fork was made (a stream created again at that path later
    /// is not the source).
    pub source_sid: String,
    /// The divergence offset asked for (resolved to the source's tail when omitted).
    pub offset: u64,
    /// The sub-offset asked for.
    pub sub_offset: u64,
}

/// Where a fork starts, decided from its source's head before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForkPlan {
    /// The fork inherits the source's messages `1..=at`.
    pub at: u64,
    /// The divergence offset (`at` unless a JSON sub-offset moved it).
    pub anchor: u64,
    /// For a byte sub-offset: the first `bytes` of message `seq` of the source become the
    /// fork's own first message.
    pub cut: Option<(u64, usize)>,
}

/// The last batch an idempotent producer got accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    /// The producer's current epoch.
    pub epoch: u64,
    /// The last accepted sequence number in that epoch.
    pub seq: u64,
    /// The stream's tail right after that batch. A retry of it is answered with at least this
    /// offset, even by a reader whose view of the head is older than its view of the producer.
    pub offset: u64,
}

/// What [`apply_append`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The answer for the caller.
    pub ack: AppendAck,
    /// The producer state to store, when the request advanced a producer.
    pub producer: Option<(String, ProducerState)>,
    /// False when nothing changed (a duplicate or an idempotent close): nothing to persist.
    pub changed: bool,
}

/// A fresh storage id: time-ordered and unique, safe in keys and file names.
pub fn new_sid() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

impl StreamState {
    /// The state of a stream created by `req` at `now_ms`, with its initial messages.
    pub fn new(path: StreamPath, req: &CreateStream, now_ms: i64, limits: &LogLimits) -> Result<Self, Error> {
        let size = limits.check_append(req.initial.iter().map(Bytes::len).sum())?;
        Ok(Self {
            path,
            sid: new_sid(),
            content_type: req.content_type.clone(),
            expiry: req.expiry,
            created_ms: now_ms,
            touched_ms: now_ms,
            tail: req.initial.len() as u64,
            total_bytes: size as u64,
            closed: req.closed,
            closed_by: None,
            stream_seq: None,
            sealed: 0,
            lineage: Vec::new(),
            origin: None,
            forks: 0,
            deleted: false,
            sealing: None,
        })
    }

    /// Fails unless clients may use the stream: a deleted one is [`Error::Gone`], an expired one
    /// [`Error::NotFound`].
    pub fn check_live(&self, now_ms: i64) -> Result<(), Error> {
        if self.deleted {
            return Err(Error::Gone {
                path: self.path.clone(),
            });
        }
        if self.is_expired(now_ms) {
            return Err(Error::NotFound {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// True when the stream is gone for clients but kept for its forks: its path cannot be
    /// reused until the last fork is deleted.
    pub fn is_retained(&self, now_ms: i64) -> bool {
        (self.deleted || self.is_expired(now_ms)) && self.forks > 0
    }

    /// When the stream expires, if it does.
    pub fn expires_at_ms(&self) -> Option<i64> {
        self.expiry.deadline_ms(self.touched_ms)
    }

    /// True once the stream has expired: it must then be treated as gone.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.expires_at_ms().is_some_and(|deadline| now_ms >= deadline)
    }

    /// True when a read at `now_ms` should persist a new touch time. A sliding TTL is refreshed
    /// at most once per tenth of its window (and at least once a minute), so readers of a busy
    /// stream do not turn every read into a write.
    pub fn needs_touch(&self, now_ms: i64) -> bool {
        match self.expiry {
            Expiry::Ttl { seconds } => {
                let granularity = ((seconds as i64) * 100).clamp(0, 60_000);
                now_ms - self.touched_ms > granularity
            }
            _ => false,
        }
    }

    /// The stream's tail as an offset.
    pub fn tail_offset(&self) -> Offset {
        Offset::after(self.tail)
    }

    /// The sequence number a read from `from` starts after: the tail for `now`, and an error
    /// for an offset past the tail.
    pub fn read_start(&self, from: Position) -> Result<u64, Error> {
        match from {
            Position::Now => Ok(self.tail),
            Position::At(offset) if offset.seq() > self.tail => Err(Error::OffsetBeyondTail {
                offset,
                tail: self.tail_offset(),
            }),
            Position::At(offset) => Ok(offset.seq()),
        }
    }

    /// The answer to a read that started after message `start` and got `messages`, all from
    /// sealed pages when `from_pages`.
    pub fn chunk(&self, start: u64, messages: Vec<Bytes>, from_pages: bool) -> Chunk {
        let next = start + messages.len() as u64;
        let up_to_date = next == self.tail;
        let closed = self.closed && up_to_date;
        Chunk {
            stream_id: self.sid.clone(),
            content_type: self.content_type.clone(),
            start: Offset::after(start),
            next_offset: Offset::after(next),
            up_to_date,
            closed,
            // Only a page's messages never change; and an answer that says "up to date" stops
            // being true at the next append, unless the stream is closed.
            immutable: from_pages && (!up_to_date || closed),
            messages,
        }
    }

    /// The error for a sealed page that should hold message `seq` but is not in storage.
    pub fn missing_page(&self, seq: u64) -> Error {
        Error::Corrupt {
            what: format!("the sealed page holding message {seq} of `{}` is missing", self.path),
        }
    }

    /// The public metadata of this state.
    pub fn meta(&self) -> StreamMeta {
        StreamMeta {
            path: self.path.clone(),
            content_type: self.content_type.clone(),
            tail: self.tail_offset(),
            closed: self.closed,
            expiry: self.expiry,
            expires_at_ms: self.expires_at_ms(),
            created_ms: self.created_ms,
            sealed: Offset::after(self.sealed),
        }
    }

    /// Checks that an existing stream has the configuration a create asks for (content type,
    /// expiry and closure), which makes the create an idempotent success.
    pub fn check_same_config(&self, req: &CreateStream) -> Result<(), Error> {
        let mismatch = |reason: String| {
            Err(Error::ConfigMismatch {
                path: self.path.clone(),
                reason,
            })
        };
        if let Some(fork) = &req.fork {
            let same = self.origin.as_ref().is_some_and(|o| {
                o.source == fork.source
                    && fork.offset.is_none_or(|at| at.seq() == o.offset)
                    && o.sub_offset == fork.sub_offset
            });
            if !same {
                return mismatch("it is not the same fork".to_owned());
            }
            if fork.content_type.as_ref().is_some_and(|ct| *ct != self.content_type) {
                return mismatch("content type differs".to_owned());
            }
            if fork.expiry.is_some_and(|e| e != self.expiry) {
                return mismatch("expiry differs".to_owned());
            }
            if self.closed != req.closed {
                return mismatch(if self.closed { "it is closed" } else { "it is open" }.to_owned());
            }
            return Ok(());
        }
        if self.content_type != req.content_type {
            return mismatch(format!(
                "content type is `{}`, not `{}`",
                self.content_type, req.content_type
            ));
        }
        if self.expiry != req.expiry {
            return mismatch("expiry differs".to_owned());
        }
        if self.closed != req.closed {
            return mismatch(if self.closed { "it is closed" } else { "it is open" }.to_owned());
        }
        Ok(())
    }

    /// True when an append that moved the total from `before` to this state's total crossed a
    /// page boundary: a page's worth of messages is now waiting to be sealed.
    pub fn crossed_page_boundary(&self, before_bytes: u64, before_tail: u64, limits: &LogLimits) -> bool {
        let pages = |bytes: u64| bytes / limits.page_bytes.max(1) as u64;
        let counts = |tail: u64| tail / limits.page_max_messages.max(1) as u64;
        pages(self.total_bytes) != pages(before_bytes) || counts(self.tail) != counts(before_tail)
    }
}

/// Validates `req` against `state` (and the named producer's `producer` state) at `now_ms` and,
/// when it is accepted, applies it to `state`.
///
/// The caller must persist the changed state, the messages `ack.appended` numbers, and the
/// producer state in one atomic write that fails if the state changed since it was loaded.
pub fn apply_append(
    state: &mut StreamState,
    producer: Option<ProducerState>,
    req: &Append,
    now_ms: i64,
    limits: &LogLimits,
) -> Result<Applied, Error> {
    state.check_live(now_ms)?;
    let size = limits.check_append(req.size())?;
    let unchanged = |state: &StreamState, duplicate: bool, producer: Option<ProducerAck>| Applied {
        ack: AppendAck {
            next_offset: state.tail_offset(),
            appended: None,
            closed: state.closed,
            duplicate,
            producer,
        },
        producer: None,
        changed: false,
    };

    if state.closed {
        if let (Some(claim), Some(closer)) = (&req.producer, &state.closed_by)
            && claim == closer
        {
            let ack = ProducerAck {
                epoch: claim.epoch,
                seq: claim.seq,
                last_seq: state.tail,
            };
            return Ok(unchanged(state, true, Some(ack)));
        }
        // A close-only request is idempotent, with or without producer headers.
        if req.messages.is_empty() && req.close {
            return Ok(unchanged(state, false, None));
        }
        return Err(Error::Closed {
            path: state.path.clone(),
            tail: state.tail_offset(),
        });
    }

    if !req.messages.is_empty()
        && let Some(ct) = &req.content_type
        && *ct != state.content_type
    {
        return Err(Error::ContentTypeMismatch {
            expected: state.content_type.to_string(),
            got: ct.to_string(),
        });
    }

    let mut next_producer = None;
    if let Some(claim) = &req.producer {
        match check_producer(producer, claim)? {
            ProducerCheck::Duplicate(ack) => {
                let mut answer = unchanged(state, true, Some(ack));
                let offset = producer.map_or(0, |p| p.offset);
                answer.ack.next_offset = answer.ack.next_offset.max(Offset::after(offset));
                return Ok(answer);
            }
            ProducerCheck::Accept(next) => next_producer = Some((claim.id.clone(), next)),
        }
    }

    if let Some(expected) = req.expected_tail
        && expected != state.tail
    {
        return Err(Error::TailMismatch {
            path: state.path.clone(),
            expected,
            tail: state.tail,
        });
    }

    if let Some(seq) = &req.stream_seq
        && let Some(last) = &state.stream_seq
        && seq.as_bytes() <= last.as_bytes()
    {
        return Err(Error::StreamSeqConflict {
            last: last.clone(),
            got: seq.clone(),
        });
    }

    if req.messages.is_empty() && !req.close {
        return Err(Error::EmptyAppend);
    }

    let appended = (!req.messages.is_empty()).then(|| SeqRange {
        first: state.tail + 1,
        last: state.tail + req.messages.len() as u64,
    });
    if let Some(range) = appended {
        if range.last > Offset::MAX_SEQ {
            return Err(Error::invalid("append", "the stream has reached its maximum length"));
        }
        state.tail = range.last;
        state.total_bytes += size as u64;
    }
    if let Some(seq) = &req.stream_seq {
        state.stream_seq = Some(seq.clone());
    }
    if req.close {
        state.closed = true;
        state.closed_by = req.producer.clone();
    }
    if matches!(state.expiry, Expiry::Ttl { .. }) {
        state.touched_ms = now_ms;
    }
    if let Some((_, p)) = &mut next_producer {
        p.offset = state.tail;
    }
    Ok(Applied {
        ack: AppendAck {
            next_offset: state.tail_offset(),
            appended,
            closed: state.closed,
            duplicate: false,
            producer: next_producer.as_ref().map(|(_, p)| ProducerAck {
                epoch: p.epoch,
                seq: p.seq,
                last_seq: p.offset,
            }),
        },
        producer: next_producer,
        changed: true,
    })
}

enum ProducerCheck {
    Duplicate(ProducerAck),
    Accept(ProducerState),
}

/// The protocol's producer validation: fence stale epochs, start new epochs at 0, acknowledge
/// retries, reject gaps.
fn check_producer(current: Option<ProducerState>, claim: &ProducerClaim) -> Result<ProducerCheck, Error> {
    if claim.id.is_empty() {
        return Err(Error::invalid("producer id", "it is empty"));
    }
    let accept = |seq| {
        Ok(ProducerCheck::Accept(ProducerState {
            epoch: claim.epoch,
            seq,
            offset: 0,
        }))
    };
    let Some(current) = current else {
        return match claim.seq {
            0 => accept(0),
            received => Err(Error::ProducerSeqGap { expected: 0, received }),
        };
    };
    if claim.epoch < current.epoch {
        return Err(Error::StaleProducerEpoch {
            current: current.epoch,
            got: claim.epoch,
        });
    }
    if claim.epoch > current.epoch {
        return match claim.seq {
            0 => accept(0),
            seq => Err(Error::InvalidProducerEpochSeq {
                epoch: claim.epoch,
                seq,
            }),
        };
    }
    if claim.seq <= current.seq {
        return Ok(ProducerCheck::Duplicate(ProducerAck {
            epoch: current.epoch,
            seq: current.seq,
            last_seq: current.offset,
        }));
    }
    if claim.seq == current.seq + 1 {
        return accept(claim.seq);
    }
    Err(Error::ProducerSeqGap {
        expected: current.seq + 1,
        received: claim.seq,
    })
}

#[cfg(test)]
mod tests;
