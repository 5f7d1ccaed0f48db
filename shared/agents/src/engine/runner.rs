//! A reply offered to runners ([`spool_chat::runner`]): the request written beside the chat's
//! files, the job offered, the step ended waiting; when the turn is queued again, the runner's
//! outcome recorded as the reply (or its failure, or the wait given up).

use std::time::Duration;

use spool_chat::{
    runner::{MAX_ATTEMPTS, RunnerJob, RunnerOutcome, request_key},
    workspace::CliType,
};
use spool_log::jobs::MaintenanceJob;

use super::{reply::message_start, *};
use crate::runner::{RunnerClis, RunnerRequest};

/// The name the engine claims a job under when it gives it up.
const GIVEN_UP: &str = "(given up)";

/// The longest one check of a waiting turn is put off (SQS's largest delay).
const MAX_CHECK_DELAY: Duration = Duration::from_secs(900);

impl Engine {
    /// The runtimes a step of `session` with `agent` may use, and whether its CLI agents run
    /// on runners: its workspace's `cli_host`, else the deployment's. An agent that names a
    /// model runtime, in a chat without a CLI override, needs neither read.
    pub(super) async fn runtimes_for(
        &self,
        org: &str,
        session: &Session,
        agent: Option<&Agent>,
        workspace: &super::WorkspaceOnce,
    ) -> Result<(Arc<Runtimes>, bool), Error> {
        let model_only = session.cli_override.is_none()
            && agent.is_some_and(|a| !a.builtin && a.runtime.is_some_and(|r| r != spool_chat::workspace::Runtime::Cli));
        if model_only {
            return Ok((self.runtimes.clone(), false));
        }
        let workspace = super::workspace_once(self.metadata.as_ref(), workspace, org, session).await?;
        let host = workspace
            .as_ref()
            .and_then(|w| w.cli_host)
            .unwrap_or(self.settings.cli_host);
        if host == CliHost::Server {
            return Ok((self.runtimes.clone(), false));
        }
        let runners = self.metadata.runners(org).await?;
        let offered = RunnerClis::offered(&runners, session.workspace_id.as_deref(), self.clock.now_ms());
        Ok((Arc::new(self.runtimes.on_runners(Arc::new(offered))), true))
    }
}

impl Step<'_> {
    /// The reply of `cli`, run by a runner: offered the first time, recorded once a runner
    /// settled it, given up once no runner took it in time.
    pub(super) async fn by_runner(&mut self, runtime: &dyn Runtime, cli: CliType) -> Result<Replied, Error> {
        let org = self.job.org.clone();
        // The job is removed with the turn's end (`end`), after `agent_end`: a step that fails
        // before it finds the job, and its outcome, again.
        for _ in 0..3 {
            let now = self.engine.clock.now_ms();
            let Some(job) = self.engine.metadata.runner_job(&org, &self.job.turn_id).await? else {
                return self.offer(runtime, cli, now).await;
            };
            match job.outcome.clone() {
                Some(RunnerOutcome::Reply { message, actions }) => {
                    let reply = crate::cli::reply_of(message, actions);
                    let message_id = new_id("msg");
                    let mut started = false;
                    if !reply.text.is_empty() {
                        self.append(vec![self.draft(message_start(&message_id))]).await?;
                        let (mut buffer, mut written) = (reply.text.clone(), String::new());
                        self.flush(&message_id, &mut buffer, &mut written).await?;
                        started = true;
                    }
                    self.record_reply(&message_id, started, reply).await?;
                    return Ok(Replied::Done);
                }
                Some(RunnerOutcome::Failed { reason }) => return Ok(Replied::Failed(reason)),
                None if job.gives_up_at().is_some_and(|at| at <= now) => {
                    // Fenced first: a claim of the job's epoch by Spool itself, so a runner's
                    // late settle is refused rather than accepted and dropped. If a settle or
                    // a claim came first, look again.
                    let fence = now.saturating_add(spool_chat::runner::JOB_TTL_MS);
                    if self
                        .engine
                        .metadata
                        .claim_job(&org, &self.job.turn_id, job.epoch, GIVEN_UP, fence)
                        .await?
                    {
                        return Ok(Replied::Failed(self.given_up(&job)));
                    }
                }
                None => {
                    self.check_later(&job, now).await?;
                    let detail = match &job.runner {
                        Some(name) if job.lease_until_ms > now => format!("running on runner {name}"),
                        _ => "waiting for a runner".to_owned(),
                    };
                    self.record(TurnStatus::InProgress, Some(detail)).await?;
                    return Ok(Replied::Waiting);
                }
            }
        }
        // Runners keep moving it: a later step looks again.
        let now = self.engine.clock.now_ms();
        if let Some(job) = self.engine.metadata.runner_job(&org, &self.job.turn_id).await? {
            self.check_later(&job, now).await?;
        }
        Ok(Replied::Waiting)
    }

    /// Offers the reply to runners: its request beside the chat's files, then the job.
    async fn offer(&mut self, runtime: &dyn Runtime, cli: CliType, now: i64) -> Result<Replied, Error> {
        let Some(files) = self.engine.files.clone() else {
            return Ok(Replied::Failed(
                "this deployment keeps no files, so it cannot hand a turn to a runner".to_owned(),
            ));
        };
        let request = self.request_for(runtime).await?;
        let body = serde_json::to_vec(&RunnerRequest::of(&request))
            .map_err(|e| Error::unavailable("encode a runner's request", e))?;
        files.put(&request_key(&self.job.org, &self.job.turn_id), body).await?;
        let wait_ms = i64::try_from(self.engine.settings.runner_wait.as_millis()).unwrap_or(i64::MAX);
        let job = RunnerJob {
            turn_id: self.job.turn_id.clone(),
            session_id: self.session.id.clone(),
            workspace_id: self.session.workspace_id.clone(),
            cli,
            offered_seq: self.events.last().map_or(self.read_tail, |e| e.seq),
            offered_ms: now,
            wait_ms,
            epoch: 0,
            runner: None,
            lease_until_ms: 0,
            outcome: None,
        };
        // A redelivered step finds its predecessor's offer: the same job stands.
        self.engine.metadata.offer_job(&self.job.org, &job).await?;
        tracing::info!(turn = %self.job.turn_id, cli = ?cli, "offered to runners");
        self.check_later(&job, now).await?;
        self.record(TurnStatus::InProgress, Some("waiting for a runner".to_owned()))
            .await?;
        Ok(Replied::Waiting)
    }

    /// Why a job is given up, for the person: with the command line that starts a runner.
    fn given_up(&self, job: &RunnerJob) -> String {
        let url = self
            .engine
            .settings
            .public_url
            .as_deref()
            .unwrap_or("<this Spool's URL>");
        let start = format!(
            "start one on the machine that holds the code: `SPOOL_API_KEY=<key> spool runner --url {url}` \
             (a key from `spool admin create-api-key {} --capability runner`)",
            self.job.org
        );
        let cli = crate::cli::program(job.cli);
        let minutes = job.wait_ms / 60_000;
        match &job.runner {
            None => format!("no runner that runs `{cli}` took this turn within {minutes} min; {start}"),
            Some(name) if job.epoch >= MAX_ATTEMPTS => format!(
                "the runner `{name}` stopped answering while it ran `{cli}`, and this turn was taken {} times; \
                 it was given up. Look at the runner's log, then send the message again",
                job.epoch
            ),
            Some(name) => format!(
                "the runner `{name}` stopped answering while it ran `{cli}`, and no runner took the turn again \
                 within {minutes} min; {start}"
            ),
        }
    }

    /// Schedules a look at the waiting turn when its job would be given up. A failure fails
    /// the step, which is tried again: a turn whose check is lost would wait forever.
    async fn check_later(&self, job: &RunnerJob, now: i64) -> Result<(), Error> {
        let Some(jobs) = &self.engine.jobs else {
            tracing::warn!(turn = %self.job.turn_id, "no job queue: a turn no runner takes fails only when it is queued again");
            return Ok(());
        };
        let Some(at) = job.gives_up_at() else {
            return Ok(());
        };
        // A moment after, so the look finds it due.
        let delay =
            Duration::from_millis(u64::try_from(at.saturating_sub(now)).unwrap_or(0) + 500).min(MAX_CHECK_DELAY);
        let check = MaintenanceJob::RunnerCheck {
            org: self.job.org.clone(),
            session_id: self.session.id.clone(),
            turn_id: self.job.turn_id.clone(),
        };
        jobs.defer(check, delay).await
    }

    /// Removes the turn's runner job and its request, if it has them: a runner that holds
    /// it is told to stop at its next heartbeat. Best effort: a job left behind finds its turn
    /// ended and changes nothing.
    pub(super) async fn drop_runner_job(&self) {
        let org = &self.job.org;
        if let Err(e) = self.engine.metadata.remove_job(org, &self.job.turn_id).await {
            tracing::warn!(turn = %self.job.turn_id, error = %e, "cannot remove the turn's runner job");
        }
        if let Some(files) = &self.engine.files
            && let Err(e) = files.delete(&request_key(org, &self.job.turn_id)).await
        {
            tracing::warn!(turn = %self.job.turn_id, error = %e, "cannot remove the turn's runner request");
        }
    }
}

/// The step of a turn a [`MaintenanceJob::RunnerCheck`] asks for: the turn queued again at the
/// chat's tail, if it still has a runner job (the engine then decides).
pub async fn runner_check(
    metadata: &dyn spool_chat::metadata::Metadata,
    log: &dyn StreamLog,
    now_ms: i64,
    org: &str,
    session_id: &str,
    turn_id: &str,
) -> Result<Option<TurnJob>, Error> {
    if metadata.runner_job(org, turn_id).await?.is_none() {
        return Ok(None);
    }
    let path = Session::stream(org, session_id)?;
    let tail = match log.metadata(&path).await {
        Ok(meta) => meta.tail.seq(),
        Err(Error::NotFound { .. } | Error::Gone { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(TurnJob::new(org, session_id, turn_id, tail).checked(now_ms)))
}
