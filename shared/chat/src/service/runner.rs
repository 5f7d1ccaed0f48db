//! # The runner service: runners take, run and settle CLI turns
//!
//! The rules of the runner routes ([`crate::runner`]), over ports only: a runner's claim
//! (checked, recorded as seen, then a long-poll over its organization's jobs that it serves and
//! can run, oldest first, won by a conditional write), its heartbeats (the lease renewed, then
//! a long-poll over the chat's stream that answers `cancel` at an abort or once the run was
//! superseded), its fetches of the chat's files (only with the live claim's epoch, only the
//! chat's own files), and its settle (checked, accepted once, then the turn queued again for
//! the engine to record the reply). Who the runner is (a runner's token, its organization) is
//! the caller's to check.

use std::{sync::Arc, time::Duration};

use serde_json::Value;
use spool_log::{
    clock::Clock,
    error::Error,
    port::{StreamLog, StreamReader},
    stream::Offset,
    subscription::refusal::Refusal,
};
use tokio::{io::AsyncReadExt, time::Instant};

use crate::{
    attachment::{Attachment, AttachmentStatus, Attachments, FileReader, FileStore, object_key},
    event::{ChatEvent, ControlAction},
    mcp::McpCatalog,
    metadata::{Metadata, Sessions},
    runner::{
        CLAIM_WAIT_MS, HEARTBEAT_WAIT_MS, LEASE_MS, MAX_OUTCOME_BYTES, RunnerJob, RunnerOutcome, RunnerRecord,
        RunnerStore, request_key,
        wire::{Assignment, Beat, Claim, Heartbeat, Settle},
    },
    session::{Session, TurnRecord, TurnStatus, read_events},
    turns::{TurnJob, TurnQueue},
};

/// How often a waiting claim looks at the jobs again, by default.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
/// How many of an organization's jobs a claim looks at.
const JOBS_PER_LOOK: usize = 100;
/// The longest a heartbeat waits on the chat's stream before it looks at the job again.
const JOB_LOOK_EVERY: Duration = Duration::from_secs(2);
/// The most CLIs a runner reports.
const MAX_CLIS: usize = 8;
/// The most workspaces a runner serves by name.
const MAX_WORKSPACES: usize = 100;
/// The longest text a runner reports about a CLI (its version, why it cannot run).
const MAX_CLI_TEXT_CHARS: usize = 500;
/// The longest reason of a failed run, in bytes.
const MAX_REASON_BYTES: usize = 4 * 1024;
/// What a job whose request is gone is settled with.
const LOST_REQUEST: &str = "the turn's request was lost; send the message again";
/// The refusal of a call whose claim another claim or the turn's end superseded (`409`).
pub const SUPERSEDED: &str = "this run of the turn was superseded: another runner took it over, or the turn ended";

/// A runner as people see it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunnerView {
    /// Its name, unique in its organization.
    pub name: String,
    /// Spool's version on it.
    pub version: Option<String>,
    /// The CLIs it can run.
    pub clis: Vec<crate::clis::CliStatus>,
    /// The workspaces it serves; empty: every workspace of its organization.
    pub workspaces: Vec<String>,
    /// When it was last seen (ms since the Unix epoch).
    pub last_seen_ms: i64,
    /// Whether it was seen within the last minute ([`crate::runner::ONLINE_MS`]).
    pub online: bool,
}

/// A chat's file for a runner: its record and its bytes.
pub struct RunnerFile {
    /// The file's record (its name, type and size).
    pub attachment: Attachment,
    /// Where its bytes come from.
    pub body: RunnerFileBody,
}

/// Where a runner gets a file's bytes.
pub enum RunnerFileBody {
    /// Straight from storage (a pre-signed S3 URL, minutes long): a function's response could
    /// not carry a file of 100 MiB, and the runner needs only outbound HTTPS to fetch it.
    Direct(String),
    /// Through Spool (the embedded store).
    Bytes(FileReader),
}

/// How long a runner's pre-signed URL for a file lasts.
const FILE_URL_TTL: Duration = Duration::from_secs(300);

/// The runner routes' rules over their ports.
#[derive(Clone)]
pub struct RunnerService {
    jobs: Arc<dyn RunnerStore>,
    sessions: Arc<dyn Sessions>,
    attachments: Arc<dyn Attachments>,
    log: Arc<dyn StreamReader>,
    /// Where jobs' requests and chats' files are; without it no claim takes a job.
    files: Option<Arc<dyn FileStore>>,
    turns: Arc<dyn TurnQueue>,
    clock: Arc<dyn Clock>,
    /// How often a waiting claim looks at the jobs again.
    poll: Duration,
    /// Where a claim resolves the MCP servers a request names; without it none are sent.
    mcp: Option<Arc<dyn McpCatalog>>,
}

/// The ports [`RunnerService`] uses, one by one (a test's fakes implement only these).
pub struct RunnerPorts {
    /// Runner jobs and runners.
    pub jobs: Arc<dyn RunnerStore>,
    /// Turn records.
    pub sessions: Arc<dyn Sessions>,
    /// Chats' files' records.
    pub attachments: Arc<dyn Attachments>,
    /// Chats' streams, read.
    pub log: Arc<dyn StreamReader>,
    /// Jobs' requests and chats' files' bytes.
    pub files: Option<Arc<dyn FileStore>>,
    /// The turn queue.
    pub turns: Arc<dyn TurnQueue>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
}

impl RunnerService {
    /// The service over the metadata store, the log, the chats' files (`None`: claims never
    /// take a job, since no request can be read), the turn queue and a clock.
    pub fn new(
        metadata: Arc<dyn Metadata>,
        log: Arc<dyn StreamLog>,
        files: Option<Arc<dyn FileStore>>,
        turns: Arc<dyn TurnQueue>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::over(RunnerPorts {
            jobs: metadata.clone(),
            sessions: metadata.clone(),
            attachments: metadata,
            log,
            files,
            turns,
            clock,
        })
    }

    /// The service over `ports`, one by one.
    pub fn over(ports: RunnerPorts) -> Self {
        Self {
            jobs: ports.jobs,
            sessions: ports.sessions,
            attachments: ports.attachments,
            log: ports.log,
            files: ports.files,
            turns: ports.turns,
            clock: ports.clock,
            poll: DEFAULT_POLL,
            mcp: None,
        }
    }

    /// The service, resolving at each claim the MCP servers the job's request names (by id)
    /// through `catalog`, secrets opened, into the assignment: a stored request never carries
    /// them. Without it an assignment names no server.
    #[must_use]
    pub fn with_mcp(mut self, catalog: Arc<dyn McpCatalog>) -> Self {
        self.mcp = Some(catalog);
        self
    }

    /// The service, looking for jobs every `poll` while a claim waits (500 ms by default).
    #[must_use]
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll.max(Duration::from_millis(1));
        self
    }

    /// A runner's claim: the oldest claimable job of `org` it serves and runs, claimed for
    /// [`LEASE_MS`], with its request; `None` when none came within the claim's wait (at most
    /// [`CLAIM_WAIT_MS`]). A malformed claim is [`Error::Invalid`], and nothing is written.
    pub async fn claim(&self, org: &str, claim: &Claim) -> Result<Option<Assignment>, Error> {
        check_claim(claim)?;
        let wait = claim.wait_ms.unwrap_or(CLAIM_WAIT_MS).min(CLAIM_WAIT_MS);
        let deadline = Instant::now() + Duration::from_millis(wait);
        let runner = RunnerRecord {
            name: claim.name.clone(),
            version: claim.version.clone(),
            clis: claim.clis.clone(),
            workspaces: claim.workspaces.clone(),
            last_seen_ms: self.clock.now_ms(),
        };
        self.jobs.runner_seen(org, &runner).await?;
        if self.files.is_none() {
            tracing::warn!(
                org,
                "runners cannot take turns here: this deployment keeps no chat files"
            );
        }
        loop {
            if let Some(assignment) = self.look(org, &runner).await? {
                tracing::info!(org, runner = %runner.name, turn = %assignment.turn_id, epoch = assignment.epoch, "runner claimed a turn");
                return Ok(Some(assignment));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(self.poll.min(deadline - now)).await;
        }
    }

    /// One look over the jobs for `runner`: the first it wins, with its request.
    async fn look(&self, org: &str, runner: &RunnerRecord) -> Result<Option<Assignment>, Error> {
        let Some(files) = &self.files else {
            return Ok(None);
        };
        let now = self.clock.now_ms();
        let mut jobs: Vec<RunnerJob> = self
            .jobs
            .runner_jobs(org, JOBS_PER_LOOK)
            .await?
            .into_iter()
            .filter(|j| j.claimable(now) && runner.serves(j.workspace_id.as_deref()) && runner.runs(j.cli))
            .collect();
        jobs.sort_by(|a, b| (a.offered_ms, &a.turn_id).cmp(&(b.offered_ms, &b.turn_id)));
        let mut endpoints = mcp::WorkspaceEndpoints::default();
        for job in jobs {
            // Read before the claim: a catalog that fails leaves the job unclaimed.
            let available = self.endpoints(org, job.workspace_id.as_deref(), &mut endpoints).await?;
            if !self
                .jobs
                .claim_job(org, &job.turn_id, job.epoch, &runner.name, now + LEASE_MS)
                .await?
            {
                continue;
            }
            let epoch = job.epoch + 1;
            match read_request(files.as_ref(), org, &job.turn_id).await? {
                Some(request) => {
                    let mcp_servers = mcp::named_servers(&request, available);
                    return Ok(Some(Assignment {
                        turn_id: job.turn_id,
                        session_id: job.session_id,
                        workspace_id: job.workspace_id,
                        cli: job.cli,
                        epoch,
                        lease_ms: LEASE_MS.unsigned_abs(),
                        request,
                        mcp_servers,
                    }));
                }
                None => {
                    tracing::warn!(org, turn = %job.turn_id, "a runner job's request is missing; the turn fails");
                    let lost = RunnerOutcome::Failed {
                        reason: LOST_REQUEST.to_owned(),
                    };
                    if self.jobs.settle_job(org, &job.turn_id, epoch, &lost).await? {
                        self.queue_again(org, &job.session_id, &job.turn_id, epoch).await?;
                    }
                }
            }
        }
        Ok(None)
    }

    /// A heartbeat of claim `beat.epoch` of `turn_id`'s job: its lease renewed, then a wait of
    /// up to `beat.wait_ms` (at most [`HEARTBEAT_WAIT_MS`]) that answers `cancel` at once when
    /// the chat's turn is aborted, or the job is gone, settled or claimed again.
    pub async fn heartbeat(&self, org: &str, turn_id: &str, beat: &Heartbeat) -> Result<Beat, Error> {
        let stop = Beat {
            cancel: true,
            lease_ms: 0,
        };
        let now = self.clock.now_ms();
        if !self.jobs.renew_job(org, turn_id, beat.epoch, now + LEASE_MS).await? {
            return Ok(stop);
        }
        let Some(job) = self.live_job(org, turn_id, beat.epoch).await? else {
            return Ok(stop);
        };
        self.seen_again(org, &job, now).await;
        let wait = beat.wait_ms.unwrap_or(HEARTBEAT_WAIT_MS).min(HEARTBEAT_WAIT_MS);
        let deadline = Instant::now() + Duration::from_millis(wait);
        let path = Session::stream(org, &job.session_id)?;
        let mut after = job.offered_seq;
        loop {
            let page = match read_events(self.log.as_ref(), &path, after, 100).await {
                Ok(page) => page,
                // The chat was deleted: its turn is over.
                Err(Error::NotFound { .. } | Error::Gone { .. }) => return Ok(stop),
                Err(e) => return Err(e),
            };
            let aborted = page
                .events
                .iter()
                .any(|e| matches!(&e.event, ChatEvent::ControlSubmitted(c) if c.action == ControlAction::Abort));
            if aborted {
                tracing::info!(org, turn = turn_id, "the runner's turn was aborted");
                return Ok(stop);
            }
            after = page.next;
            if page.next < page.tail {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Beat {
                    cancel: false,
                    lease_ms: LEASE_MS.unsigned_abs(),
                });
            }
            match self
                .log
                .wait(&path, Offset::after(after), (deadline - now).min(JOB_LOOK_EVERY))
                .await
            {
                Ok(_) => {}
                Err(Error::NotFound { .. } | Error::Gone { .. }) => return Ok(stop),
                Err(e) => return Err(e),
            }
            if self.live_job(org, turn_id, beat.epoch).await?.is_none() {
                return Ok(stop);
            }
        }
    }

    /// The job of `turn_id` if claim `epoch` still holds it, unsettled.
    async fn live_job(&self, org: &str, turn_id: &str, epoch: u64) -> Result<Option<RunnerJob>, Error> {
        let job = self.jobs.runner_job(org, turn_id).await?;
        Ok(job.filter(|j| j.epoch == epoch && j.outcome.is_none()))
    }

    /// Records the runner that holds `job` as seen at `now` (a runner that runs a long turn
    /// heartbeats and does not claim). Best effort: it is only what people see.
    async fn seen_again(&self, org: &str, job: &RunnerJob, now: i64) {
        let Some(name) = &job.runner else {
            return;
        };
        let seen = match self.jobs.runners(org).await {
            Ok(runners) => runners.into_iter().find(|r| &r.name == name),
            Err(e) => {
                tracing::warn!(org, error = %e, "cannot read the runners");
                None
            }
        };
        if let Some(mut runner) = seen
            && runner.last_seen_ms < now
        {
            runner.last_seen_ms = now;
            if let Err(e) = self.jobs.runner_seen(org, &runner).await {
                tracing::warn!(org, error = %e, "cannot record the runner as seen");
            }
        }
    }

    /// The chat's file `file_id`, for claim `epoch` of `turn_id`'s job: refused once the claim
    /// was superseded ([`SUPERSEDED`]); only a completed file of the job's own chat.
    pub async fn file(&self, org: &str, turn_id: &str, epoch: u64, file_id: &str) -> Result<RunnerFile, Error> {
        let job = self.live_job(org, turn_id, epoch).await?.ok_or_else(superseded)?;
        let missing = || Error::Missing {
            what: format!("file `{file_id}` of the turn's chat"),
        };
        let attachment = self
            .attachments
            .attachment(org, &job.session_id, file_id)
            .await?
            .filter(|a| a.status == AttachmentStatus::Complete)
            .ok_or_else(missing)?;
        let files = self.files.as_ref().ok_or_else(missing)?;
        let key = object_key(org, &job.session_id, &attachment.id);
        let transfer = files
            .download(&key, &attachment.filename, &attachment.content_type, FILE_URL_TTL)
            .await?;
        if let crate::attachment::Transfer::Direct { method, url, headers } = transfer
            && method.eq_ignore_ascii_case("GET")
            && headers.is_empty()
        {
            return Ok(RunnerFile {
                attachment,
                body: RunnerFileBody::Direct(url),
            });
        }
        let reader = files.read(&key).await?.ok_or_else(missing)?;
        Ok(RunnerFile {
            attachment,
            body: RunnerFileBody::Bytes(reader),
        })
    }

    /// A runner's settle of claim `settle.epoch` of `turn_id`'s job: checked, recorded once,
    /// then the turn is queued again so the engine records the reply. A settle the claim no
    /// longer holds is refused ([`SUPERSEDED`], `409`); the same settle again (a retry whose
    /// answer was lost) is accepted again.
    pub async fn settle(&self, org: &str, turn_id: &str, settle: &Settle) -> Result<(), Error> {
        check_outcome(&settle.outcome)?;
        let job = self.jobs.runner_job(org, turn_id).await?.ok_or_else(superseded)?;
        if !self
            .jobs
            .settle_job(org, turn_id, settle.epoch, &settle.outcome)
            .await?
        {
            let again = self.jobs.runner_job(org, turn_id).await?;
            let same = again.is_some_and(|j| j.epoch == settle.epoch && j.outcome.as_ref() == Some(&settle.outcome));
            if !same {
                return Err(superseded());
            }
        }
        tracing::info!(org, turn = turn_id, epoch = settle.epoch, "a runner settled its turn");
        self.queue_again(org, &job.session_id, turn_id, settle.epoch).await
    }

    /// Queues `turn_id` of chat `session_id` again after the settle of claim `epoch`, at the
    /// chat's tail, as [`super::ChatService::enqueue_turn`] does: recorded as queued (unless it
    /// is further along), then queued ([`TurnJob::settled`]: a key of its own).
    async fn queue_again(&self, org: &str, session_id: &str, turn_id: &str, epoch: u64) -> Result<(), Error> {
        let tail = self.log.metadata(&Session::stream(org, session_id)?).await?.tail.seq();
        let job = TurnJob::new(org, session_id, turn_id, tail).settled(epoch);
        let record = TurnRecord::at(turn_id, tail, TurnStatus::Queued, None, self.clock.now_ms());
        self.sessions.record_turn(org, session_id, &record).await?;
        self.turns.enqueue(&job).await
    }

    /// The organization's runners (those serving `workspace`, when given), by name.
    pub async fn runners(&self, org: &str, workspace: Option<&str>) -> Result<Vec<RunnerView>, Error> {
        let now = self.clock.now_ms();
        let mut runners = self.jobs.runners(org).await?;
        runners.retain(|r| workspace.is_none_or(|ws| r.serves(Some(ws))));
        runners.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(runners
            .into_iter()
            .map(|r| RunnerView {
                online: r.online(now),
                name: r.name,
                version: r.version,
                clis: r.clis,
                workspaces: r.workspaces,
                last_seen_ms: r.last_seen_ms,
            })
            .collect())
    }
}

/// The refusal of a call whose claim no longer holds its job.
fn superseded() -> Error {
    Error::Refused(Box::new(Refusal::new(409, "superseded", SUPERSEDED)))
}

/// The request of `turn_id`'s job, as JSON; `None` when it is missing or unreadable.
async fn read_request(files: &dyn FileStore, org: &str, turn_id: &str) -> Result<Option<Value>, Error> {
    let Some(mut reader) = files.read(&request_key(org, turn_id)).await? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| Error::unavailable("read a turn's request", e))?;
    match serde_json::from_slice(&bytes) {
        Ok(request) => Ok(Some(request)),
        Err(e) => {
            tracing::error!(org, turn = turn_id, error = %e, "a runner job's request is not JSON");
            Ok(None)
        }
    }
}

/// Checks a claim: its name, its CLIs, its workspaces.
fn check_claim(claim: &Claim) -> Result<(), Error> {
    let name_ok = (1..=64).contains(&claim.name.len())
        && claim
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !name_ok {
        return Err(Error::invalid(
            "runner name",
            "give 1 to 64 letters, digits, `.`, `_` or `-`",
        ));
    }
    if claim.version.as_ref().is_some_and(|v| bad_text(v)) {
        return Err(Error::invalid(
            "runner version",
            format!("give at most {MAX_CLI_TEXT_CHARS} characters, without control characters"),
        ));
    }
    if claim.clis.len() > MAX_CLIS {
        return Err(Error::invalid("runner CLIs", format!("report at most {MAX_CLIS}")));
    }
    let texts = claim
        .clis
        .iter()
        .flat_map(|c| [c.version.as_deref(), c.reason.as_deref()])
        .flatten();
    if texts.into_iter().any(bad_text) {
        return Err(Error::invalid(
            "runner CLIs",
            format!(
                "a CLI's version and reason are at most {MAX_CLI_TEXT_CHARS} characters, without control characters"
            ),
        ));
    }
    if claim.workspaces.len() > MAX_WORKSPACES {
        return Err(Error::invalid(
            "runner workspaces",
            format!("serve at most {MAX_WORKSPACES} workspaces by name (or none: all of them)"),
        ));
    }
    let bad_id = |id: &String| id.is_empty() || id.len() > 128 || id.chars().any(|c| c.is_control() || c == '/');
    if claim.workspaces.iter().any(bad_id) {
        return Err(Error::invalid(
            "runner workspaces",
            "a workspace id is 1 to 128 characters, without `/` or control characters",
        ));
    }
    Ok(())
}

/// Whether a runner's text is too long or holds control characters.
fn bad_text(text: &str) -> bool {
    text.chars().count() > MAX_CLI_TEXT_CHARS || text.chars().any(char::is_control)
}

/// Checks a settled outcome: its size, its actions' shape, a failure's reason.
fn check_outcome(outcome: &RunnerOutcome) -> Result<(), Error> {
    let size = serde_json::to_vec(outcome)
        .map_err(|e| Error::invalid("outcome", e.to_string()))?
        .len();
    if size > MAX_OUTCOME_BYTES {
        return Err(Error::invalid(
            "outcome",
            format!("it is {size} bytes as JSON: at most {MAX_OUTCOME_BYTES}; shorten the reply"),
        ));
    }
    match outcome {
        RunnerOutcome::Reply { actions, .. } => {
            let typed = |a: &Value| a.get("type").is_some_and(Value::is_string);
            if !actions.iter().all(typed) {
                return Err(Error::invalid(
                    "outcome",
                    "each action is an object with a string `type`",
                ));
            }
        }
        RunnerOutcome::Failed { reason } if reason.len() > MAX_REASON_BYTES => {
            return Err(Error::invalid(
                "outcome",
                format!("a failure's reason is at most {MAX_REASON_BYTES} bytes"),
            ));
        }
        RunnerOutcome::Failed { .. } => {}
    }
    Ok(())
}

#[path = "runner_mcp.rs"]
mod mcp;

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
