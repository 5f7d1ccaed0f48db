//! # Runners: CLI turns run on the machines that hold the code
//!
//! A workspace whose CLI agents run on runners ([`crate::settings::CliHost::Runners`]) does not run them in the
//! worker. When a turn of its chats needs a CLI's reply, the engine writes the reply's request
//! beside the chat's files and offers a [`RunnerJob`]; a runner (`spool runner`, anywhere with
//! outbound HTTPS) claims it through the API, runs the CLI on its own machine and settles the
//! job with the CLI's output ([`RunnerOutcome`]); the settle queues the turn again, and the
//! engine records the reply and runs its actions as it does for a CLI it ran itself.
//!
//! - **Exactly once.** A claim is a conditional write that raises the job's epoch; a heartbeat,
//!   a file fetch and a settle name their epoch and are refused once another claim (after a
//!   lost lease) or the turn's end superseded it. A settle is accepted once.
//! - **Crash-safe.** A runner that stops heartbeating loses its lease after [`LEASE_MS`]; the
//!   job is offered again, up to [`MAX_ATTEMPTS`] claims. A job no runner takes within its
//!   wait (`SPOOL_RUNNER_WAIT_MS`) fails its turn with a system message saying how to start a
//!   runner. Only the engine ends a turn, so an end is written once.
//! - **Isolated.** Jobs and runners are kept per organization; a runner's token (an API key
//!   with the `runner` capability) reaches only the runner routes, and only its organization.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spool_log::error::Error;

use crate::{clis::CliStatus, workspace::CliType};

/// How long a claim holds a job without a heartbeat.
pub const LEASE_MS: i64 = 60_000;
/// The longest a heartbeat waits for an abort before it answers.
pub const HEARTBEAT_WAIT_MS: u64 = 20_000;
/// The longest a claim waits for a job before it answers `204` (under API Gateway's 29 s and
/// CloudFront's 30 s).
pub const CLAIM_WAIT_MS: u64 = 20_000;
/// How many times a job may be claimed: a runner that dies mid-turn this many times fails it.
pub const MAX_ATTEMPTS: u64 = 3;
/// How long a turn waits for a runner to take it by default (`SPOOL_RUNNER_WAIT_MS`).
pub const DEFAULT_WAIT_MS: i64 = 10 * 60 * 1000;
/// A runner is online while it was seen (claimed or heartbeated) this recently.
pub const ONLINE_MS: i64 = 60_000;
/// The most bytes of a settled reply (its message and actions, as JSON).
pub const MAX_OUTCOME_BYTES: usize = 256 * 1024;

/// A CLI reply a runner is to run: one per turn, keyed by the turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerJob {
    /// The turn (the job's key within its organization).
    pub turn_id: String,
    /// Its chat.
    pub session_id: String,
    /// The chat's workspace.
    #[serde(default)]
    pub workspace_id: Option<String>,
    /// The CLI that answers.
    pub cli: CliType,
    /// The chat's tail when the job was offered: a runner's abort watch reads after it.
    pub offered_seq: u64,
    /// When it was offered (ms since the Unix epoch).
    pub offered_ms: i64,
    /// How long it waits for a runner, from its offer or from a lost lease.
    pub wait_ms: i64,
    /// How many times it was claimed; a claim's epoch. 0 until a runner claims it.
    #[serde(default)]
    pub epoch: u64,
    /// The runner that claimed it last.
    #[serde(default)]
    pub runner: Option<String>,
    /// Until when the last claim holds it (0 until claimed).
    #[serde(default)]
    pub lease_until_ms: i64,
    /// What the runner answered, once it settled the job.
    #[serde(default)]
    pub outcome: Option<RunnerOutcome>,
}

impl RunnerJob {
    /// Whether a runner may claim it at `now_ms`: not settled, never claimed or its lease
    /// lost, and claims left.
    pub fn claimable(&self, now_ms: i64) -> bool {
        self.outcome.is_none() && (self.epoch == 0 || self.lease_until_ms <= now_ms) && self.epoch < MAX_ATTEMPTS
    }

    /// When it is given up if no runner takes it (again): its wait after its offer, or after
    /// its last lease ran out; `None` while a lease holds it or once it is settled.
    pub fn gives_up_at(&self) -> Option<i64> {
        if self.outcome.is_some() {
            return None;
        }
        if self.epoch == 0 {
            return Some(self.offered_ms.saturating_add(self.wait_ms));
        }
        if self.epoch >= MAX_ATTEMPTS {
            return Some(self.lease_until_ms);
        }
        Some(self.lease_until_ms.saturating_add(self.wait_ms))
    }

    /// When the engine should look at it next, at `now_ms`: when its live lease runs out, or
    /// when it is given up; `None` once it is settled.
    pub fn next_check_ms(&self, now_ms: i64) -> Option<i64> {
        let gives_up = self.gives_up_at()?;
        if self.epoch > 0 && self.lease_until_ms > now_ms {
            return Some(self.lease_until_ms.min(gives_up));
        }
        Some(gives_up)
    }
}

/// What a runner answered for a job.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RunnerOutcome {
    /// The CLI answered: the output file's `message` and `actions` (the third source design's
    /// format), parsed on the server into the reply and its actions.
    Reply {
        /// The reply, in markdown.
        #[serde(default)]
        message: Option<String>,
        /// The actions, each `{"type": …, …}`.
        #[serde(default)]
        actions: Vec<Value>,
    },
    /// The CLI could not answer; why, for the person.
    Failed {
        /// What went wrong (a non-zero exit and its last words, a timeout, a bad output).
        reason: String,
    },
}

/// An MCP server a runner's request names: its id and name only. Its endpoint, secrets
/// included, is resolved when a runner claims the job ([`wire::Assignment::mcp_servers`]), so
/// a stored request carries no secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerMcpServer {
    /// The server's id.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// A runner as it last reported itself.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerRecord {
    /// Its name (`--name`; the machine's host name by default), unique in its organization.
    pub name: String,
    /// Spool's version on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The CLIs it can run.
    pub clis: Vec<CliStatus>,
    /// The workspaces it serves; empty: every workspace of its organization.
    #[serde(default)]
    pub workspaces: Vec<String>,
    /// When it was last seen (ms since the Unix epoch).
    pub last_seen_ms: i64,
}

impl RunnerRecord {
    /// Whether it was seen within [`ONLINE_MS`] of `now_ms`.
    pub fn online(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.last_seen_ms) < ONLINE_MS
    }

    /// Whether it serves `workspace` (a chat outside workspaces: only a runner for all).
    pub fn serves(&self, workspace: Option<&str>) -> bool {
        self.workspaces.is_empty() || workspace.is_some_and(|ws| self.workspaces.iter().any(|w| w == ws))
    }

    /// Whether it can run `cli` (installed and answering `--version`).
    pub fn runs(&self, cli: CliType) -> bool {
        self.clis.iter().any(|c| c.cli == cli && c.healthy)
    }
}

/// Where a job's request is kept, in the chats' file store: too large for a record (a long
/// chat's whole history), written once by the engine and read by the claim.
pub fn request_key(org: &str, turn_id: &str) -> String {
    format!("runner-requests/{org}/{turn_id}.json")
}

/// Runner jobs and runners, per organization (part of the metadata store).
#[async_trait]
pub trait RunnerStore: Send + Sync {
    /// Stores `job` unless the organization has one for its turn; true if it was stored.
    async fn offer_job(&self, org: &str, job: &RunnerJob) -> Result<bool, Error>;

    /// The job of `turn_id`, if there is one.
    async fn runner_job(&self, org: &str, turn_id: &str) -> Result<Option<RunnerJob>, Error>;

    /// Up to `limit` of the organization's jobs, oldest offer first (ties by turn id).
    async fn runner_jobs(&self, org: &str, limit: usize) -> Result<Vec<RunnerJob>, Error>;

    /// Claims the job for `runner` until `lease_until_ms` if its epoch is still `epoch` and it
    /// is not settled: its epoch becomes `epoch + 1`. False if another claim or a settle came
    /// first, or the job is gone.
    async fn claim_job(
        &self,
        org: &str,
        turn_id: &str,
        epoch: u64,
        runner: &str,
        lease_until_ms: i64,
    ) -> Result<bool, Error>;

    /// Extends the lease of claim `epoch` to `lease_until_ms`; false if the job is gone,
    /// settled or claimed again since.
    async fn renew_job(&self, org: &str, turn_id: &str, epoch: u64, lease_until_ms: i64) -> Result<bool, Error>;

    /// Records claim `epoch`'s outcome; false if the job is gone, settled or claimed again.
    async fn settle_job(&self, org: &str, turn_id: &str, epoch: u64, outcome: &RunnerOutcome) -> Result<bool, Error>;

    /// Removes the job (none is fine).
    async fn remove_job(&self, org: &str, turn_id: &str) -> Result<(), Error>;

    /// Records `runner` as seen (replacing what it reported before).
    async fn runner_seen(&self, org: &str, runner: &RunnerRecord) -> Result<(), Error>;

    /// The organization's runners, by name; those not seen for a day are gone.
    async fn runners(&self, org: &str) -> Result<Vec<RunnerRecord>, Error>;
}

/// How long a runner's record is kept after it was last seen.
pub const RUNNER_RECORD_TTL_MS: i64 = 24 * 3600 * 1000;

/// How long after its offer a job is removed, if its turn's end left it behind (a crash
/// between the end and the removal): far longer than any turn waits for its runners.
pub const JOB_TTL_MS: i64 = 7 * 24 * 3600 * 1000;

/// The runner routes' bodies: what `spool runner` sends and gets.
pub mod wire {
    use super::*;

    /// `POST /v1/runner/claim`: who asks, what it can run, and how long it waits.
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Claim {
        /// The runner's name.
        pub name: String,
        /// Spool's version on it.
        #[serde(default)]
        pub version: Option<String>,
        /// The CLIs it can run.
        pub clis: Vec<CliStatus>,
        /// The workspaces it serves (`--workspace`); empty: all of its organization's.
        #[serde(default)]
        pub workspaces: Vec<String>,
        /// How long to wait for a job, in ms (at most [`CLAIM_WAIT_MS`]; 0 answers at once).
        #[serde(default)]
        pub wait_ms: Option<u64>,
    }

    /// A claimed job (`200` to a claim; `204` when none came within the wait).
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Assignment {
        /// The turn.
        pub turn_id: String,
        /// Its chat.
        pub session_id: String,
        /// The chat's workspace.
        #[serde(default)]
        pub workspace_id: Option<String>,
        /// The CLI to run.
        pub cli: CliType,
        /// The claim's epoch: every later call for this job names it.
        pub epoch: u64,
        /// How long the claim holds without a heartbeat, in ms.
        pub lease_ms: u64,
        /// The reply's request, as the engine made it (`spool_agents::runner::RunnerRequest`).
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        pub request: Value,
        /// The workspace's MCP servers the request names, as the runner's CLI reaches them,
        /// their header and environment values included: resolved at the claim, never stored
        /// with the request.
        #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub mcp_servers: Vec<crate::mcp::McpEndpoint>,
    }

    /// `POST /v1/runner/turns/{turn_id}/heartbeat`.
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Heartbeat {
        /// The claim's epoch.
        pub epoch: u64,
        /// How long to wait for an abort before answering, in ms (at most [`HEARTBEAT_WAIT_MS`]).
        #[serde(default)]
        pub wait_ms: Option<u64>,
    }

    /// The answer to a heartbeat: stop (an abort, or the turn ended), or go on.
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Beat {
        /// Stop the CLI now: the turn was aborted or no longer needs this run.
        pub cancel: bool,
        /// How long the lease holds from now, in ms.
        pub lease_ms: u64,
    }

    /// `POST /v1/runner/turns/{turn_id}/result`.
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Settle {
        /// The claim's epoch.
        pub epoch: u64,
        /// What the CLI answered.
        pub outcome: RunnerOutcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFERED: i64 = 1_000_000;
    const WAIT: i64 = 600_000;

    fn job() -> RunnerJob {
        RunnerJob {
            turn_id: "t1".to_owned(),
            session_id: "s1".to_owned(),
            workspace_id: Some("w1".to_owned()),
            cli: CliType::Claude,
            offered_seq: 7,
            offered_ms: OFFERED,
            wait_ms: WAIT,
            epoch: 0,
            runner: None,
            lease_until_ms: 0,
            outcome: None,
        }
    }

    /// The job after `epoch` claims, the last one's lease holding until `lease_until_ms`.
    fn claimed(epoch: u64, lease_until_ms: i64) -> RunnerJob {
        RunnerJob {
            epoch,
            runner: Some("box".to_owned()),
            lease_until_ms,
            ..job()
        }
    }

    fn settled(mut job: RunnerJob) -> RunnerJob {
        job.outcome = Some(RunnerOutcome::Failed {
            reason: "exit 1".to_owned(),
        });
        job
    }

    #[test]
    fn a_job_never_claimed_is_claimable_until_settled() {
        assert!(job().claimable(OFFERED));
        assert!(job().claimable(OFFERED + 10 * WAIT));
        assert!(!settled(job()).claimable(OFFERED));
    }

    #[test]
    fn a_claimed_job_is_claimable_again_once_its_lease_ran_out() {
        let lease = OFFERED + LEASE_MS;
        let job = claimed(1, lease);
        assert!(!job.claimable(lease - 1));
        assert!(job.claimable(lease));
        assert!(job.claimable(lease + 1));
        assert!(!settled(job).claimable(lease + 1));
    }

    #[test]
    fn a_job_claimed_max_attempts_times_is_never_claimable_again() {
        let lease = OFFERED + LEASE_MS;
        assert!(claimed(MAX_ATTEMPTS - 1, lease).claimable(lease));
        assert!(!claimed(MAX_ATTEMPTS, lease).claimable(lease));
        assert!(!claimed(MAX_ATTEMPTS, lease).claimable(lease + 10 * WAIT));
    }

    #[test]
    fn a_job_is_given_up_its_wait_after_its_offer_or_its_last_lease() {
        // Never claimed: its wait from its offer
        assert_eq!(job().gives_up_at(), Some(OFFERED + WAIT));
        // Claimed with attempts left: its wait from when the lease runs out
        let lease = OFFERED + LEASE_MS;
        assert_eq!(claimed(1, lease).gives_up_at(), Some(lease + WAIT));
        // Claimed its last time: when that lease runs out, with no wait after it
        assert_eq!(claimed(MAX_ATTEMPTS, lease).gives_up_at(), Some(lease));
        // Settled: never
        assert_eq!(settled(job()).gives_up_at(), None);
        assert_eq!(settled(claimed(1, lease)).gives_up_at(), None);
    }

    #[test]
    fn giving_up_never_overflows() {
        let job = RunnerJob {
            wait_ms: i64::MAX,
            ..job()
        };
        assert_eq!(job.gives_up_at(), Some(i64::MAX));
        assert_eq!(claimed(1, i64::MAX).gives_up_at(), Some(i64::MAX));
    }

    #[test]
    fn the_next_check_is_a_live_leases_end_then_the_give_up() {
        let lease = OFFERED + LEASE_MS;
        // Never claimed: when it is given up
        assert_eq!(job().next_check_ms(OFFERED), Some(OFFERED + WAIT));
        // A live lease: when it runs out (the runner may have died)
        assert_eq!(claimed(1, lease).next_check_ms(lease - 1), Some(lease));
        // A lease run out: when the job is given up
        assert_eq!(claimed(1, lease).next_check_ms(lease), Some(lease + WAIT));
        assert_eq!(claimed(1, lease).next_check_ms(lease + 5), Some(lease + WAIT));
        // The last claim's live lease: its end, which is also the give-up
        assert_eq!(claimed(MAX_ATTEMPTS, lease).next_check_ms(lease - 1), Some(lease));
        assert_eq!(claimed(MAX_ATTEMPTS, lease).next_check_ms(lease + 1), Some(lease));
        // Settled: never
        assert_eq!(settled(claimed(1, lease)).next_check_ms(lease - 1), None);
    }

    #[test]
    fn a_wait_shorter_than_the_lease_still_checks_at_the_leases_end_first() {
        let lease = OFFERED + LEASE_MS;
        let job = RunnerJob {
            wait_ms: 0,
            ..claimed(1, lease)
        };
        assert_eq!(job.next_check_ms(OFFERED), Some(lease));
        assert_eq!(job.next_check_ms(lease), Some(lease));
    }
}
