//! # Agent turns: the queue between a submission and the worker
//!
//! A submission that needs an agent (a message, an answer) is appended to the session's stream
//! first, then a [`TurnJob`] is enqueued: on AWS an SQS FIFO message whose group is the session,
//! under `spool serve` a table in the embedded metadata store. Either way a session's jobs are
//! delivered in order and one at a time: the next is not handed out while an earlier one is in
//! flight. A job is deduplicated by its turn and trigger ([`TurnJob::key`]), so re-enqueueing
//! after a retried submission is harmless; an unacknowledged job comes back after its lease.
//! (A message queued behind a turn without a client id has nothing a retry could find it by:
//! its job is queued *before* it is appended, and waits for it: [`TurnJob::before_message_ms`].)

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use spool_log::error::Error;

/// One agent turn to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnJob {
    /// The organization.
    pub org: String,
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// The seq of the event that asked for the turn (its start, or an answer that resumes it).
    pub trigger_seq: u64,
    /// How many times this step was carried over to a new job because its host (a Lambda
    /// invocation) was about to end ([`TurnJob::continued`]); 0 for the step's first job.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub continuation: u32,
    /// When the step's first job started to run (ms since the Unix epoch), for a carried-over
    /// step: its time limit counts from then, not from each carry-over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_ms: Option<i64>,
    /// When the job was queued, if that was before its message was appended (a message queued
    /// behind a turn without a client id, [`crate::service`]): `trigger_seq` is then the tail
    /// before the message, and the step waits a while for a message of its turn rather than
    /// finding none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_message_ms: Option<i64>,
    /// The claim epoch of a runner's settle that queued this step ([`TurnJob::settled`]): part
    /// of its key, since a runner's settle appends nothing, so the chat's tail may be the one
    /// an earlier job of the turn (its offer, a check of its job) was keyed by, and that job's
    /// key would deduplicate it away (SQS keeps a deduplication id five minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_epoch: Option<u64>,
    /// When the check of the turn's runner job that queued this step ran ([`TurnJob::checked`]):
    /// part of its key for the same reason (a check appends nothing), and so that each check's
    /// run is counted as a run of its own, not as another attempt of the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_ms: Option<i64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The most times one step may be carried over to a new job.
pub const MAX_CONTINUATIONS: u32 = 30;

/// How many turns of one organization `spool serve`'s worker runs at once by default
/// (`SPOOL_ORG_TURN_CONCURRENCY`). The third source design puts no limit on chats processed at
/// once; a bound stays so that one organization cannot take every slot. A turn mostly waits (a
/// model's answer, a CLI subprocess), so what bounds it is what waiting turns cost. Measured with
/// `tests/bench/turn_concurrency.py` on two cores (debug build; turns shaped like a model's,
/// 1.5 s to the first word, then 40 words at 40 ms, or 150 at 10 ms; one organization flooding
/// 96 chats, another asking beside it): at 16 the server used 0.13–0.14 of a core, a turn took
/// no longer than alone (3.15 s against 3.13 at 4) and the other organization's turns started
/// within 0.04 s; 4 ran the flood at 1.3 turns a second, 16 at 4.9. Past 16 Spool still had
/// room (0.23 of a core at 64), but CLI agents are processes of their own (a Node runtime each,
/// hundreds of MB), and 16 of them at once is what two cores and a developer's memory bear.
pub const DEFAULT_ORG_TURN_CONCURRENCY: usize = 16;

/// How many turns `spool serve`'s worker runs at once by default (`SPOOL_WORKER_CONCURRENCY`):
/// twice [`DEFAULT_ORG_TURN_CONCURRENCY`], so an organization at its bound leaves as many slots to
/// the others. With the two equal, a flooding organization took every slot and another's turn
/// waited a whole turn for one (2.9 s in the measurement above, against 0.02 s).
pub const DEFAULT_WORKER_CONCURRENCY: usize = 2 * DEFAULT_ORG_TURN_CONCURRENCY;

impl Receive {
    /// Up to `max` jobs leased by `lease`, waiting up to `wait`, with no bound per organization.
    pub fn new(max: usize, lease: Lease, wait: Duration) -> Self {
        Self {
            max,
            lease,
            wait,
            per_org: usize::MAX,
        }
    }
}

impl TurnJob {
    /// A job for one step of a turn, asked for by the event at `trigger_seq`.
    pub fn new(org: &str, session_id: &str, turn_id: &str, trigger_seq: u64) -> Self {
        Self {
            org: org.to_owned(),
            session_id: session_id.to_owned(),
            turn_id: turn_id.to_owned(),
            trigger_seq,
            continuation: 0,
            step_started_ms: None,
            before_message_ms: None,
            settled_epoch: None,
            checked_ms: None,
        }
    }

    /// The job a check of the turn's runner job at `now_ms` queues.
    #[must_use]
    pub fn checked(mut self, now_ms: i64) -> Self {
        self.checked_ms = Some(now_ms);
        self
    }

    /// The job that has the engine record what a runner settled with claim `epoch` of the
    /// turn's runner job.
    #[must_use]
    pub fn settled(mut self, epoch: u64) -> Self {
        self.settled_epoch = Some(epoch);
        self
    }

    /// The job's deduplication key: one job per turn step (and per carry-over of it, and per
    /// runner's settle).
    pub fn key(&self) -> String {
        let step = match self.continuation {
            0 => format!("{}.{}", self.turn_id, self.trigger_seq),
            n => format!("{}.{}.c{n}", self.turn_id, self.trigger_seq),
        };
        let step = match self.settled_epoch {
            None => step,
            Some(epoch) => format!("{step}.r{epoch}"),
        };
        match self.checked_ms {
            None => step,
            Some(ms) => format!("{step}.k{ms}"),
        }
    }

    /// The job that carries this step on after its host stopped it before its deadline; the
    /// step began at `started_ms` unless an earlier job of it says when.
    #[must_use]
    pub fn continued(&self, started_ms: i64) -> Self {
        Self {
            continuation: self.continuation + 1,
            step_started_ms: self.step_started_ms.or(Some(started_ms)),
            ..self.clone()
        }
    }

    /// The job's ordering group: its session, within its organization.
    pub fn group(&self) -> String {
        format!("{}/{}", self.org, self.session_id)
    }
}

/// A job handed to a worker, to acknowledge when done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The job.
    pub job: TurnJob,
    /// What acknowledges this delivery.
    pub receipt: String,
    /// How many times the job has been handed out, this time included.
    pub attempts: u32,
}

/// How a worker holds the jobs it receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// How long a job stays the worker's without a heartbeat ([`TurnQueue::extend`]): a
    /// worker that dies loses its jobs after at most this long.
    pub ttl: Duration,
    /// Who holds it: a name that a restarted worker takes again, so it can hand back at once
    /// what it held when it died ([`TurnQueue::recover`]).
    pub holder: String,
}

impl Lease {
    /// A lease of `ttl` for `holder`.
    pub fn new(ttl: Duration, holder: impl Into<String>) -> Self {
        Self {
            ttl,
            holder: holder.into(),
        }
    }
}

/// What a worker asks the queue for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receive {
    /// At most this many jobs.
    pub max: usize,
    /// Held by this lease.
    pub lease: Lease,
    /// Waiting up to this long for one to come.
    pub wait: Duration,
    /// At most this many jobs of one organization leased at once (counting those already
    /// running), so one organization's flood of chats cannot take every slot; jobs are handed
    /// out round-robin across organizations.
    pub per_org: usize,
}

/// The turn queue.
#[async_trait]
pub trait TurnQueue: Send + Sync {
    /// Adds a job, unless one with its key is already queued.
    async fn enqueue(&self, job: &TurnJob) -> Result<(), Error>;

    /// Up to `request.max` jobs, each leased by `request.lease`: the oldest of each session whose
    /// earlier jobs are all done, fairly across organizations. Waits up to `request.wait` for
    /// one to come. (SQS hands out what its FIFO groups hold; the per-organization bound is the
    /// embedded queue's.)
    async fn receive(&self, request: &Receive) -> Result<Vec<Delivery>, Error>;

    /// A heartbeat: keeps a delivered job for `ttl` from now, while its step still runs.
    async fn extend(&self, receipt: &str, ttl: Duration) -> Result<(), Error>;

    /// Marks a delivered job done.
    async fn ack(&self, receipt: &str) -> Result<(), Error>;

    /// Hands a delivered job that failed out again after `delay` (instead of at the end of its
    /// lease).
    async fn retry(&self, receipt: &str, delay: Duration) -> Result<(), Error>;

    /// Hands back at once every job `holder` holds: called by a worker that has just taken
    /// that name, so the holder that had it is dead. The number of jobs handed back. A queue
    /// that does not know its holders (SQS) relies on short leases instead, and hands back
    /// nothing.
    async fn recover(&self, holder: &str) -> Result<usize, Error> {
        let _ = holder;
        Ok(0)
    }

    /// How many turns of its organization must finish before `turn_id` of chat `session_id`
    /// can start, when it waits only for its organization's bound of `per_org` running turns:
    /// `Some(0)` when it is next, `None` when it is not waiting on that bound (it runs, its
    /// chat's earlier turn holds it, it is gone) or when the queue has no such bound (SQS).
    async fn queued_behind(
        &self,
        org: &str,
        session_id: &str,
        turn_id: &str,
        per_org: usize,
    ) -> Result<Option<u64>, Error> {
        let _ = (org, session_id, turn_id, per_org);
        Ok(None)
    }
}
