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
    Error, LogLimits,
    stream::{
        Append, AppendAck, Chunk, ContentType, CreateStream, Expiry, ForkRequest, Offset, Position, ProducerAck,
        ProducerClaim, SeqRange, StreamMeta, StreamPath,
    },
};

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
        })
    }

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
mod tests {
    use super::*;

    fn state() -> StreamState {
        let req = CreateStream::new(ContentType::parse("application/json").unwrap());
        StreamState::new(StreamPath::parse("s").unwrap(), &req, 1_000, &LogLimits::default()).unwrap()
    }

    fn claim(epoch: u64, seq: u64) -> ProducerClaim {
        ProducerClaim {
            id: "p".to_owned(),
            epoch,
            seq,
        }
    }

    fn with_producer(epoch: u64, seq: u64) -> Append {
        Append {
            producer: Some(claim(epoch, seq)),
            ..Append::one(Bytes::from_static(b"1"))
        }
    }

    #[test]
    fn appends_take_the_next_sequence_numbers() {
        // GIVEN an empty stream
        let mut s = state();
        // WHEN two batches are appended
        let a = apply_append(
            &mut s,
            None,
            &Append::messages([Bytes::from("1"), Bytes::from("2")]),
            0,
            &LogLimits::default(),
        )
        .unwrap();
        let b = apply_append(&mut s, None, &Append::one(Bytes::from("3")), 0, &LogLimits::default()).unwrap();
        // THEN they get 1..=2 and 3, and the tail follows
        assert_eq!(a.ack.appended, Some(SeqRange { first: 1, last: 2 }));
        assert_eq!(b.ack.appended, Some(SeqRange { first: 3, last: 3 }));
        assert_eq!(s.tail, 3);
        assert_eq!(s.total_bytes, 3);
    }

    #[test]
    fn a_retried_producer_batch_is_acknowledged_without_appending() {
        let mut s = state();
        let first = apply_append(&mut s, None, &with_producer(0, 0), 0, &LogLimits::default()).unwrap();
        let producer = first.producer.unwrap().1;
        let retry = apply_append(&mut s, Some(producer), &with_producer(0, 0), 0, &LogLimits::default()).unwrap();
        assert!(retry.ack.duplicate && !retry.changed);
        assert_eq!(retry.ack.appended, None);
        assert_eq!(s.tail, 1);
    }

    #[test]
    fn producer_epochs_fence_zombies_and_sequences_must_not_skip() {
        let mut s = state();
        let limits = LogLimits::default();
        let current = Some(ProducerState {
            epoch: 2,
            seq: 5,
            offset: 0,
        });
        assert!(matches!(
            apply_append(&mut s, current, &with_producer(1, 6), 0, &limits),
            Err(Error::StaleProducerEpoch { current: 2, got: 1 })
        ));
        assert!(matches!(
            apply_append(&mut s, current, &with_producer(2, 8), 0, &limits),
            Err(Error::ProducerSeqGap {
                expected: 6,
                received: 8
            })
        ));
        assert!(matches!(
            apply_append(&mut s, current, &with_producer(3, 1), 0, &limits),
            Err(Error::InvalidProducerEpochSeq { .. })
        ));
        assert!(matches!(
            apply_append(&mut s, None, &with_producer(0, 3), 0, &limits),
            Err(Error::ProducerSeqGap {
                expected: 0,
                received: 3
            })
        ));
        let bumped = apply_append(&mut s, current, &with_producer(3, 0), 0, &limits).unwrap();
        assert_eq!(
            bumped.producer.unwrap().1,
            ProducerState {
                epoch: 3,
                seq: 0,
                offset: 1
            }
        );
        assert_eq!(s.tail, 1, "only the accepted request appended");
    }

    #[test]
    fn stream_seq_must_increase() {
        let mut s = state();
        let limits = LogLimits::default();
        let seq = |v: &str| Append {
            stream_seq: Some(v.to_owned()),
            ..Append::one(Bytes::from("1"))
        };
        apply_append(&mut s, None, &seq("b"), 0, &limits).unwrap();
        assert!(matches!(
            apply_append(&mut s, None, &seq("b"), 0, &limits),
            Err(Error::StreamSeqConflict { .. })
        ));
        assert!(matches!(
            apply_append(&mut s, None, &seq("a"), 0, &limits),
            Err(Error::StreamSeqConflict { .. })
        ));
        apply_append(&mut s, None, &seq("c"), 0, &limits).unwrap();
    }

    #[test]
    fn a_closed_stream_rejects_appends_but_acknowledges_its_closer() {
        let mut s = state();
        let limits = LogLimits::default();
        let mut close = with_producer(0, 0);
        close.close = true;
        apply_append(&mut s, None, &close, 0, &limits).unwrap();
        assert!(s.closed);
        // the closing request again: a duplicate
        let again = apply_append(&mut s, None, &close, 0, &limits).unwrap();
        assert!(again.ack.duplicate && again.ack.closed);
        // a plain close again: idempotent
        assert!(
            apply_append(&mut s, None, &Append::close_only(), 0, &limits)
                .unwrap()
                .ack
                .closed
        );
        // anything else: closed
        assert!(matches!(
            apply_append(&mut s, None, &Append::one(Bytes::from("2")), 0, &limits),
            Err(Error::Closed { .. })
        ));
    }

    #[test]
    fn closed_is_checked_before_content_type() {
        let mut s = state();
        let limits = LogLimits::default();
        apply_append(&mut s, None, &Append::close_only(), 0, &limits).unwrap();
        let wrong = Append {
            content_type: Some(ContentType::parse("text/plain").unwrap()),
            ..Append::one(Bytes::from("x"))
        };
        assert!(matches!(
            apply_append(&mut s, None, &wrong, 0, &limits),
            Err(Error::Closed { .. })
        ));
    }

    #[test]
    fn oversized_and_empty_appends_are_rejected() {
        let mut s = state();
        let limits = LogLimits {
            max_append_bytes: 4,
            ..LogLimits::default()
        };
        assert!(matches!(
            apply_append(&mut s, None, &Append::one(Bytes::from("12345")), 0, &limits),
            Err(Error::PayloadTooLarge { size: 5, max: 4 })
        ));
        assert!(matches!(
            apply_append(&mut s, None, &Append::default(), 0, &limits),
            Err(Error::EmptyAppend)
        ));
    }

    #[test]
    fn an_expired_stream_is_gone() {
        let mut s = state();
        s.expiry = Expiry::Ttl { seconds: 1 };
        assert!(
            apply_append(
                &mut s,
                None,
                &Append::one(Bytes::from("1")),
                1_500,
                &LogLimits::default()
            )
            .is_ok()
        );
        assert!(matches!(
            apply_append(
                &mut s,
                None,
                &Append::one(Bytes::from("1")),
                2_600,
                &LogLimits::default()
            ),
            Err(Error::NotFound { .. })
        ));
    }

    fn fork(offset: Option<u64>, sub_offset: u64) -> ForkRequest {
        ForkRequest {
            source: StreamPath::parse("s").unwrap(),
            offset: offset.map(Offset::after),
            sub_offset,
            content_type: None,
            expiry: None,
        }
    }

    #[test]
    fn fork_plans_follow_the_content_type() {
        let target = StreamPath::parse("f").unwrap();
        let mut json = state();
        json.tail = 5;
        assert_eq!(json.plan_fork(&target, &fork(None, 0)).unwrap().at, 5);
        assert_eq!(json.plan_fork(&target, &fork(Some(2), 2)).unwrap().at, 4);
        assert!(json.plan_fork(&target, &fork(Some(4), 2)).is_err());
        assert!(json.plan_fork(&target, &fork(Some(6), 0)).is_err());

        let mut bytes = state();
        bytes.content_type = ContentType::octet_stream();
        bytes.tail = 3;
        let plan = bytes.plan_fork(&target, &fork(Some(1), 4)).unwrap();
        assert_eq!((plan.at, plan.cut), (1, Some((2, 4))));
        assert!(bytes.plan_fork(&target, &fork(Some(3), 1)).is_err());

        let mut other = fork(None, 0);
        other.content_type = Some(ContentType::parse("text/plain").unwrap());
        assert!(matches!(
            json.plan_fork(&target, &other),
            Err(Error::ConfigMismatch { .. })
        ));
        json.deleted = true;
        assert!(matches!(
            json.plan_fork(&target, &fork(None, 0)),
            Err(Error::ConfigMismatch { .. })
        ));
    }

    #[test]
    fn lineage_keeps_inherited_runs_and_adds_the_parents_own() {
        let mut parent = state();
        parent.lineage = vec![Segment {
            sid: "a".into(),
            upto: 3,
        }];
        parent.tail = 6;
        let runs = |at| {
            parent
                .lineage_up_to(at)
                .into_iter()
                .map(|s| (s.sid, s.upto))
                .collect::<Vec<_>>()
        };
        assert_eq!(runs(0), vec![]);
        assert_eq!(runs(2), vec![("a".to_owned(), 2)]);
        assert_eq!(runs(3), vec![("a".to_owned(), 3)]);
        assert_eq!(runs(5), vec![("a".to_owned(), 3), (parent.sid.clone(), 5)]);
        assert_eq!(parent.inherited_run(2).map(|s| s.upto), Some(3));
        assert!(parent.inherited_run(3).is_none());
    }
}
