//! # The worker function
//!
//! Runs Spool's background work from SQS: agent turns from the turns queue (FIFO, one group
//! per chat), maintenance jobs (page sealing, subscriptions' wakes) from the maintenance queue, and aggregate
//! streams' events (workspaces' feeds, audit records) from the aggregates queue (FIFO, one
//! group per stream, a group's batch appended at once). On AWS it is a Lambda function
//! triggered by the queues, reporting partial batch failures so one bad message never fails its
//! batch; under `spool serve` the same [`Worker`] drains the embedded turn queue
//! ([`poll_turns`]) and, with `--backend aws`, long-polls the other two ([`poll_queue`]).
//!
//! A turn job runs one step of a turn through the [`Engine`]. A step that fails is retried by
//! the queue (a new delivery, which finds in the chat's stream what the failed one wrote); the
//! last attempt that fails ends the turn with a `system` event and `agent_end{reason: error}`
//! before the message goes to the dead-letter queue.

mod heartbeat;
mod outbound;

pub use outbound::Webhooks;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use serde::Deserialize;
use serde_json::Value;
use spool_agents::{Engine, Outcome};
use spool_domain::{
    Delivery, IfMissing, Lease, Offset, Receive, SealMode, StreamLog, StreamPath, StreamSealer, TurnJob, TurnQueue,
    jobs::MaintenanceJob,
};
use tracing::Instrument;

use crate::heartbeat::Heartbeat;

/// Why a job failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The message is not a job this worker knows. It is reported as failed, so that after
    /// the queue's retries it lands in the dead-letter queue for an operator to look at.
    #[error("malformed job: {0}")]
    Malformed(#[source] serde_json::Error),
    /// A turn arrived at a worker that runs no turns.
    #[error("this worker runs no agent turns")]
    NoTurns,
    /// An aggregate stream's event arrived at a worker that appends none.
    #[error("this worker appends no aggregate streams' events")]
    NoAggregates,
    /// A subscription or webhook job arrived at a worker that runs none.
    #[error("this worker runs no subscription or webhook jobs (it has no SPOOL_WEBHOOK_SECRET)")]
    NoSubscriptions,
    /// The stores failed.
    #[error(transparent)]
    Log(#[from] spool_domain::Error),
    /// The step failed for the last time and its turn was ended with an error: the job is done
    /// with (on Lambda it still goes to the dead-letter queue, for an operator to look at).
    #[error("the turn was given up after its last attempt: {0}")]
    GaveUp(#[source] Box<Error>),
}

/// A job from either queue.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Job {
    Maintenance(MaintenanceJob),
    Turn(TurnJob),
}

/// The runtimes configuration enables: the scripted one always, an OpenAI-compatible and an
/// Anthropic provider when their keys or base URLs are set, and the CLIs found on the CLI
/// search path, sandboxed (a cleared environment with the operator's pass-through keys, chats'
/// own folders under the CLI work directory, working directories under the workspace roots).
pub fn runtimes(config: &spool_platform::Config, claims: Arc<dyn spool_domain::Directory>) -> spool_agents::Runtimes {
    use secrecy::ExposeSecret;
    let settings = &config.agents;
    let key = |llm: &spool_platform::LlmSettings| llm.api_key.as_ref().map(|k| k.expose_secret().to_owned());
    let mut runtimes = spool_agents::Runtimes::scripted_only();
    if let Some(llm) = &settings.openai {
        let runtime = spool_agents::openai::OpenAi::new(&llm.base_url, key(llm), &llm.model);
        runtimes = runtimes.with_openai(Arc::new(runtime));
    }
    if let Some(llm) = &settings.anthropic {
        let runtime = spool_agents::anthropic::Anthropic::new(&llm.base_url, key(llm), &llm.model);
        runtimes = runtimes.with_anthropic(Arc::new(runtime));
    }
    runtimes.with_cli(Arc::new(cli_agents(config, claims)))
}

/// The CLI agents as configured: the search path, chats' folders, the time limit, and what
/// of the environment a CLI keeps.
pub fn cli_agents(
    config: &spool_platform::Config,
    claims: Arc<dyn spool_domain::Directory>,
) -> spool_agents::cli::CliAgents {
    use secrecy::ExposeSecret;
    let settings = &config.agents;
    let env = settings
        .cli_inherited
        .iter()
        .cloned()
        .chain(
            settings
                .cli_env
                .iter()
                .map(|(k, v)| (k.clone(), v.expose_secret().to_owned())),
        )
        .collect();
    spool_agents::cli::CliAgents::new(
        settings.cli_path.clone(),
        config.cli_work_dir(),
        settings.cli_timeout.min(settings.turn_timeout),
    )
    .with_env(env)
    .with_roots(config.workspace_roots(claims))
}

/// The daily sweep of the chats' folders under the CLI work directory.
pub fn folder_sweep(
    config: &spool_platform::Config,
    metadata: Arc<dyn spool_domain::Metadata>,
) -> spool_agents::sweep::FolderSweep {
    spool_agents::sweep::FolderSweep::new(config.cli_work_dir(), metadata)
}

/// The engine's settings from configuration: the turn's time limit.
pub fn engine_settings(
    config: &spool_platform::Config,
    claims: Arc<dyn spool_domain::Directory>,
) -> spool_agents::Settings {
    spool_agents::Settings {
        step_timeout: config.agents.turn_timeout,
        workspace_roots: config.workspace_roots(claims),
        knowledge_base_url: config.agents.knowledge_base_url.clone(),
        inline: spool_agents::files::InlineLimits {
            text_bytes: config.attachments.inline_text_bytes,
            image_bytes: config.attachments.inline_image_bytes,
            ..spool_agents::files::InlineLimits::default()
        },
        ..spool_agents::Settings::default()
    }
}

/// How long before a Lambda invocation's deadline a running turn step stops and hands over to
/// a new job: time to end its message, record the turn and enqueue the job.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(30);

/// The margin kept before an invocation's deadline, when `left` remains of it: [`DEADLINE_MARGIN`],
/// or a fifth of the time for a short invocation, so a step still gets most of it (with a
/// margin as long as the whole invocation, every step would carry over at once).
fn deadline_margin(left: Duration) -> Duration {
    DEADLINE_MARGIN.min(left / 5)
}

/// How many times a turn step is tried before it is given up (the template's
/// `maxReceiveCount` of the turns queue says the same).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Runs jobs.
pub struct Worker {
    sealer: Arc<dyn StreamSealer>,
    /// Where aggregate streams' events from the aggregates queue are appended.
    aggregates: Option<Arc<dyn StreamLog>>,
    engine: Option<Arc<Engine>>,
    max_attempts: u32,
    /// The deliveries of a job the queue makes before its dead-letter queue (the template's
    /// `maxReceiveCount`): the last one ends the turn if its step fails, however few of the
    /// deliveries ran (throttled ones do not).
    max_deliveries: u32,
    /// The turns queue and the lease to keep its messages for, while a batch's steps run
    /// (on Lambda: the event source's messages, by their receipt handles).
    heartbeats: Option<(Arc<dyn TurnQueue>, Duration)>,
    /// The daily sweep of chats' folders on this worker's disk.
    sweep: Option<Arc<spool_agents::sweep::FolderSweep>>,
    /// Where turn steps' times and seal requests' waits are recorded.
    metrics: Arc<dyn spool_domain::Metrics>,
    /// Runs subscription jobs (webhook deliveries, wake events, lease expiries).
    subscriptions: Option<Arc<spool_domain::subscription::Subscriptions>>,
    /// Hears feed events once appended and runs chat webhooks' deliveries.
    hooks: Option<Arc<spool_domain::webhook::ChatHooks>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("turns", &self.engine.is_some())
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker that seals with `sealer` and runs no turns.
    pub fn new(sealer: Arc<dyn StreamSealer>) -> Self {
        Self {
            sealer,
            aggregates: None,
            engine: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_deliveries: DEFAULT_MAX_ATTEMPTS + 2,
            heartbeats: None,
            sweep: None,
            metrics: Arc::new(spool_domain::LogMetrics),
            subscriptions: None,
            hooks: None,
        }
    }

    /// The same worker, recording turn steps' times and seal requests' waits in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn spool_domain::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The same worker, appending aggregate streams' events (workspaces' feeds, audit
    /// records, from the aggregates queue) to `log`.
    #[must_use]
    pub fn with_aggregates(mut self, log: Arc<dyn StreamLog>) -> Self {
        self.aggregates = Some(log);
        self
    }

    /// The same worker, running subscription jobs from the maintenance queue with
    /// `subscriptions` (which makes webhook requests).
    #[must_use]
    pub fn with_subscriptions(mut self, subscriptions: Arc<spool_domain::subscription::Subscriptions>) -> Self {
        self.subscriptions = Some(subscriptions);
        self
    }

    /// The same worker, delivering chat webhooks with `hooks`, for the feed events it appends
    /// and from the maintenance queue's jobs.
    #[must_use]
    pub fn with_hooks(mut self, hooks: Arc<spool_domain::webhook::ChatHooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// The same worker, sweeping chats' folders with `sweep` once a day as it takes work.
    #[must_use]
    pub fn with_sweep(mut self, sweep: Arc<spool_agents::sweep::FolderSweep>) -> Self {
        self.sweep = Some(sweep);
        self
    }

    /// The same worker, keeping the turns of a batch leased for `ttl` in `queue` while their
    /// steps run (Lambda's event source leases them for the queue's visibility timeout, which
    /// is short so that a crashed invocation's turns come back soon).
    #[must_use]
    pub fn with_heartbeats(mut self, queue: Arc<dyn TurnQueue>, ttl: Duration) -> Self {
        self.heartbeats = Some((queue, ttl));
        self
    }

    /// The same worker, running turns with `engine`, each step tried `max_attempts` times
    /// (runs, not deliveries), in at most `max_attempts + 2` deliveries unless
    /// [`Self::with_max_deliveries`] says otherwise.
    #[must_use]
    pub fn with_turns(mut self, engine: Arc<Engine>, max_attempts: u32) -> Self {
        self.engine = Some(engine);
        self.max_attempts = max_attempts.max(1);
        self.max_deliveries = self.max_attempts + 2;
        self
    }

    /// The same worker, knowing that the queue delivers a job `max_deliveries` times before
    /// its dead-letter queue (at least one more than the attempts).
    #[must_use]
    pub fn with_max_deliveries(mut self, max_deliveries: u32) -> Self {
        self.max_deliveries = max_deliveries.max(self.max_attempts + 1);
        self
    }

    /// Runs one maintenance job. Sealing a stream that no longer exists is done already.
    pub async fn run(&self, job: MaintenanceJob) -> Result<(), Error> {
        match job {
            MaintenanceJob::Webhook {
                org,
                hook_id,
                delivery_id,
                attempt,
            } => {
                let hooks = self.hooks.as_ref().ok_or(Error::NoSubscriptions)?;
                Ok(hooks.deliver(&org, &hook_id, &delivery_id, attempt).await?)
            }
            MaintenanceJob::Subscription(job) => {
                let subscriptions = self.subscriptions.as_ref().ok_or(Error::NoSubscriptions)?;
                Ok(subscriptions.run(&job).await?)
            }
            MaintenanceJob::Aggregate {
                path,
                event,
                if_missing,
            } => self.append_aggregate(&path, &[event], if_missing).await,
            MaintenanceJob::Seal {
                path,
                final_seal,
                if_tail,
                chain,
            } => {
                let sealed = match (final_seal, if_tail) {
                    // An idle seal: the short last page only if nothing came since it was sent.
                    (true, Some(tail)) => {
                        let tail = Offset::after(tail);
                        self.sealer.seal(&path, SealMode::Idle { tail, chain }).await
                    }
                    (true, None) => self.sealer.seal(&path, SealMode::Final).await,
                    (false, _) => self.sealer.seal(&path, SealMode::Full).await,
                };
                match sealed {
                    Ok(report) => {
                        tracing::info!(
                            %path,
                            written = report.written.len(),
                            adopted = report.adopted.len(),
                            sealed_through = %report.sealed_through,
                            "sealed"
                        );
                        Ok(())
                    }
                    // Deleted (while forks of it live, too): there is nothing left to seal.
                    Err(spool_domain::Error::NotFound { .. } | spool_domain::Error::Gone { .. }) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Appends `events` (a batch of one aggregate stream's, in the order they were handed
    /// over) to the stream at `path` in one append, skipping those a previous delivery appended.
    pub async fn append_aggregate(
        &self,
        path: &StreamPath,
        events: &[Value],
        if_missing: IfMissing,
    ) -> Result<(), Error> {
        let log = self.aggregates.as_ref().ok_or(Error::NoAggregates)?;
        let appended = spool_domain::aggregate::apply(log.as_ref(), path, events, if_missing).await?;
        tracing::debug!(%path, events = events.len(), appended, "aggregate events appended");
        // To the workspace's webhooks: each event is one delivery however often it comes, so a
        // failure here fails the batch, which SQS delivers again.
        if let Some(hooks) = &self.hooks {
            hooks.appended(path, events).await?;
        }
        Ok(())
    }

    /// When `bodies` are one aggregate stream's events (a group of the aggregates queue),
    /// appends them at once ([`Self::append_aggregate`]): whether they were; `None` for a group
    /// of other jobs.
    async fn append_aggregate_group<'a>(&self, bodies: impl IntoIterator<Item = &'a str>) -> Option<bool> {
        let (path, events, if_missing) = aggregate_batch(bodies)?;
        match self.append_aggregate(&path, &events, if_missing).await {
            Ok(()) => Some(true),
            Err(e) => {
                tracing::error!(%path, error.message = %e, error.cause_chain = ?e, "cannot append aggregate events; SQS will retry them");
                Some(false)
            }
        }
    }

    /// Runs one step of a turn, delivered for the `delivery`-th time. Attempts are runs, counted
    /// in the store as they start ([`Engine::count_run`]): a delivery that never reached a
    /// worker (a throttled invocation) uses none. On the last attempt, or the last delivery
    /// before the dead-letter queue, a failure ends the turn (a `system` event,
    /// `agent_end{reason: error}`) and is returned as [`Error::GaveUp`]. If even that fails,
    /// the plain error comes back, the job is delivered again, and a run past the last attempt
    /// only tries to end the turn: no chat is left waiting on a turn nobody runs.
    pub async fn run_turn(&self, job: &TurnJob, delivery: u32) -> Result<Outcome, Error> {
        self.run_turn_until(job, delivery, None).await
    }

    /// [`Self::run_turn`] on a host that stops at `host_deadline` (a Lambda invocation's, less
    /// a margin): a step still running then ends cleanly and a new job carries it
    /// on, put on the turns queue before this one is acknowledged (so a crash between the two
    /// only runs the step again).
    pub async fn run_turn_until(
        &self,
        job: &TurnJob,
        delivery: u32,
        host_deadline: Option<tokio::time::Instant>,
    ) -> Result<Outcome, Error> {
        let engine = self.engine.as_ref().ok_or(Error::NoTurns)?;
        let started = std::time::Instant::now();
        let result = self.step(engine, job, delivery, host_deadline).await;
        let outcome = match &result {
            Ok(Outcome::Ended(_)) => "ended",
            Ok(Outcome::Waiting) => "waiting",
            Ok(Outcome::Continued) => "continued",
            Ok(Outcome::Nothing) => "nothing",
            Err(_) => "failed",
        };
        self.metrics.record(spool_domain::Metric::TurnStep {
            took: started.elapsed(),
            outcome,
        });
        result
    }

    async fn step(
        &self,
        engine: &Engine,
        job: &TurnJob,
        delivery: u32,
        host_deadline: Option<tokio::time::Instant>,
    ) -> Result<Outcome, Error> {
        let span = tracing::info_span!("turn", org = %job.org, session = %job.session_id, turn = %job.turn_id, trigger = job.trigger_seq, delivery, attempt = tracing::field::Empty);
        async {
            let started_ms = spool_domain::Clock::now_ms(&spool_domain::SystemClock);
            // The store keeps the count; if it cannot, the delivery's count stands in (it only
            // over-counts, by throttled deliveries).
            let attempt = match engine.count_run(job).await {
                Ok(attempt) => attempt,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot count this run; counting deliveries instead");
                    delivery
                }
            };
            tracing::Span::current().record("attempt", attempt);
            let last = attempt >= self.max_attempts || delivery >= self.max_deliveries;
            if attempt > self.max_attempts {
                let reason = "its last attempt failed";
                engine.give_up(job, attempt, reason).await?;
                return Err(Error::GaveUp(Box::new(Error::Log(spool_domain::Error::unavailable(
                    "run a turn step",
                    reason,
                )))));
            }
            // Fencing needs a number that grows with every delivery and that no two runs share:
            // the queue's delivery count (the run count is for attempts only: a retried count whose
            // answer was lost, or one that fell back to the delivery, could repeat a number).
            match engine.run_until(job, delivery, host_deadline).await {
                Ok(Outcome::Continued) => {
                    let queue = self.heartbeats.as_ref().map(|(queue, _)| queue).ok_or(Error::NoTurns)?;
                    match queue.enqueue(&job.continued(started_ms)).await {
                        Ok(()) => {
                            tracing::info!(
                                continuation = job.continuation + 1,
                                "the step stopped before the host's deadline; a new job carries it on"
                            );
                            Ok(Outcome::Continued)
                        }
                        // The last delivery cannot hand over: the turn ends rather than wait.
                        Err(e) if last => {
                            let reason = format!("it could not be carried over: {e}");
                            engine.give_up(job, attempt, &reason).await?;
                            Err(Error::GaveUp(Box::new(e.into())))
                        }
                        Err(e) => Err(e.into()),
                    }
                }
                Ok(outcome) => {
                    tracing::info!(?outcome, "turn step done");
                    Ok(outcome)
                }
                Err(e) if last => {
                    tracing::error!(error.message = %e, error.cause_chain = ?e, "turn step failed for the last time");
                    match engine.give_up(job, attempt, &e.to_string()).await {
                        Ok(()) => Err(Error::GaveUp(Box::new(e.into()))),
                        Err(give_up) => {
                            tracing::error!(error = %give_up, "cannot end the failed turn yet; it is delivered again");
                            Err(e.into())
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error.message = %e, error.cause_chain = ?e, "turn step failed; it will be retried");
                    Err(e.into())
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Parses a message body and runs its job.
    pub async fn handle_message(&self, body: &str, attempt: u32) -> Result<(), Error> {
        self.handle_message_until(body, attempt, None).await
    }

    /// [`Self::handle_message`] on a host that stops at `host_deadline`.
    async fn handle_message_until(
        &self,
        body: &str,
        attempt: u32,
        host_deadline: Option<tokio::time::Instant>,
    ) -> Result<(), Error> {
        match serde_json::from_str(body).map_err(Error::Malformed)? {
            Job::Maintenance(job) => self.run(job).await,
            Job::Turn(job) => self.run_turn_until(&job, attempt, host_deadline).await.map(drop),
        }
    }

    /// Handles a batch from Lambda's SQS triggers, reporting each failed message (the trigger
    /// must set `ReportBatchItemFailures`). Messages of one FIFO group (a chat's turns) run in
    /// order, and after a failure the rest of its group is reported failed too, so SQS keeps
    /// them in order; groups and maintenance jobs run concurrently.
    pub async fn handle_batch(self: &Arc<Self>, event: SqsEvent) -> SqsBatchResponse {
        self.handle_batch_until(event, None).await
    }

    /// [`Self::handle_batch`] in a Lambda invocation that ends at `deadline` (its context's):
    /// turn steps still running [`DEADLINE_MARGIN`] before it stop cleanly and carry on in a
    /// new job, rather than be killed mid-write.
    pub async fn handle_batch_until(
        self: &Arc<Self>,
        event: SqsEvent,
        deadline: Option<std::time::SystemTime>,
    ) -> SqsBatchResponse {
        // A deadline already past as the invocation starts is no real one (Lambda never starts
        // an invocation without time; an emulator may send a stale one): only the turn's own
        // time limit holds then.
        let left = deadline.and_then(|at| at.duration_since(std::time::SystemTime::now()).ok());
        if deadline.is_some() && left.is_none() {
            tracing::warn!("the invocation's deadline has passed as it starts; ignoring it");
        }
        // Without a turns queue to carry a step over on, only the turn's own time limit holds.
        let left = left.filter(|_| self.heartbeats.is_some());
        let host_deadline = left.map(|left| {
            tracing::debug!(left_ms = left.as_millis(), "the invocation's time");
            tokio::time::Instant::now() + left.saturating_sub(deadline_margin(left))
        });
        // Beside the batch, not before it: the batch's leases are kept from the start.
        if let Some(sweep) = &self.sweep {
            let sweep = sweep.clone();
            tokio::spawn(async move {
                sweep
                    .run_if_due(spool_domain::Clock::now_ms(&spool_domain::SystemClock))
                    .await;
            });
        }
        // Turns stay leased while the batch runs, however long their steps take.
        let heartbeat = self.heartbeats.as_ref().map(|(queue, ttl)| {
            let receipts = event
                .records
                .iter()
                .filter(|r| serde_json::from_str::<TurnJob>(r.body.as_deref().unwrap_or_default()).is_ok())
                .filter_map(|r| r.receipt_handle.clone())
                .collect();
            Arc::new(Heartbeat::start(queue.clone(), receipts, *ttl))
        });
        let mut groups: BTreeMap<String, Vec<SqsMessage>> = BTreeMap::new();
        for (i, record) in event.records.into_iter().enumerate() {
            let group = record
                .attributes
                .get("MessageGroupId")
                .cloned()
                .unwrap_or_else(|| format!("#{i}"));
            groups.entry(group).or_default().push(record);
        }
        let mut tasks = tokio::task::JoinSet::new();
        // Each group's message ids, by its task: a task that panics leaves no answer of its
        // own, and a record a partial batch response does not list is deleted as done.
        let mut ids_of = std::collections::HashMap::new();
        for (_, records) in groups {
            let worker = Arc::clone(self);
            let heartbeat = heartbeat.clone();
            let ids: Vec<String> = records
                .iter()
                .map(|r| r.message_id.clone().unwrap_or_default())
                .collect();
            let task = tasks.spawn(async move {
                // A group of the aggregates queue: one stream's events, appended at once.
                let bodies = records.iter().map(|r| r.body.as_deref().unwrap_or_default());
                if let Some(appended) = worker.append_aggregate_group(bodies).await {
                    return match appended {
                        true => Vec::new(),
                        false => records
                            .iter()
                            .map(|r| r.message_id.clone().unwrap_or_default())
                            .collect(),
                    };
                }
                let mut failed = Vec::new();
                for record in records {
                    let id = record.message_id.clone().unwrap_or_default();
                    let _done = BeatDone(heartbeat.clone(), record.receipt_handle.clone());
                    if !failed.is_empty() {
                        failed.push(id);
                        continue;
                    }
                    let attempt = record
                        .attributes
                        .get("ApproximateReceiveCount")
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(1);
                    // A seal request's wait on the maintenance queue (its messages have no group);
                    // an idle seal's wait is on purpose, not lag.
                    let body = record.body.as_deref().unwrap_or_default();
                    let idle_seal = matches!(
                        serde_json::from_str::<MaintenanceJob>(body),
                        Ok(MaintenanceJob::Seal { if_tail: Some(_), .. })
                    );
                    if !record.attributes.contains_key("MessageGroupId")
                        && !idle_seal
                        && let Some(sent) = record
                            .attributes
                            .get("SentTimestamp")
                            .and_then(|t| t.parse::<i64>().ok())
                    {
                        let now = spool_domain::Clock::now_ms(&spool_domain::SystemClock);
                        let lag = Duration::from_millis(u64::try_from(now - sent).unwrap_or(0));
                        worker.metrics.record(spool_domain::Metric::SealLag { lag });
                    }
                    let span = tracing::info_span!("job", message_id = %id);
                    let result = worker
                        .handle_message_until(record.body.as_deref().unwrap_or_default(), attempt, host_deadline)
                        .instrument(span)
                        .await;
                    if let Err(e) = result {
                        tracing::error!(error.message = %e, error.cause_chain = ?e, "job failed; SQS will retry it");
                        failed.push(id);
                    }
                }
                failed
            });
            ids_of.insert(task.id(), ids);
        }
        let mut response = SqsBatchResponse::default();
        while let Some(done) = tasks.join_next_with_id().await {
            match done {
                Ok((_, failed)) => failed.into_iter().for_each(|id| response.add_failure(id)),
                Err(e) => {
                    // Every record of the group is reported failed, so SQS delivers them again.
                    tracing::error!(error = %e, "a job panicked; its group's messages are reported failed");
                    for id in ids_of.remove(&e.id()).unwrap_or_default() {
                        response.add_failure(id);
                    }
                }
            }
        }
        response
    }
}

/// The events of `bodies` if every one is an aggregate job for one stream with one rule: the
/// stream, its events in order, and the rule.
fn aggregate_batch<'a>(bodies: impl IntoIterator<Item = &'a str>) -> Option<(StreamPath, Vec<Value>, IfMissing)> {
    let mut batch: Option<(StreamPath, Vec<Value>, IfMissing)> = None;
    for body in bodies {
        let Ok(MaintenanceJob::Aggregate {
            path,
            event,
            if_missing,
        }) = serde_json::from_str(body)
        else {
            return None;
        };
        match &mut batch {
            None => batch = Some((path, vec![event], if_missing)),
            Some((p, events, rule)) if *p == path && *rule == if_missing => events.push(event),
            Some(_) => return None,
        }
    }
    batch
}

/// Ends a record's heartbeat when the record's job is over, however it ends (a panic too).
struct BeatDone(Option<Arc<Heartbeat>>, Option<String>);

impl Drop for BeatDone {
    fn drop(&mut self) {
        if let (Some(heartbeat), Some(receipt)) = (self.0.take(), self.1.take()) {
            // Lambda reports the batch only after every record is done; the lock is brief.
            tokio::spawn(async move { heartbeat.done(&receipt).await });
        }
    }
}

/// How [`poll_turns`] takes turns.
#[derive(Debug, Clone)]
pub struct PollSettings {
    /// How long a delivered turn is leased without a heartbeat; a running step extends it
    /// every third of it.
    pub lease: Duration,
    /// Who leases: a name a restarted worker takes again (`spool_embedded::WorkerSlot`), so it
    /// can take back at once what it held when it stopped.
    pub holder: String,
    /// How long one receive waits for a turn.
    pub wait: Duration,
    /// The most turns running at once (each in its own chat).
    pub concurrency: usize,
    /// The most turns of one organization running at once, so that one organization cannot
    /// take every slot; the queue hands turns out round-robin across organizations.
    pub per_org: usize,
}

impl Default for PollSettings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(120),
            holder: format!("worker-{}", uuid_like()),
            wait: Duration::from_secs(20),
            concurrency: spool_domain::DEFAULT_WORKER_CONCURRENCY,
            per_org: spool_domain::DEFAULT_ORG_TURN_CONCURRENCY,
        }
    }
}

/// A name no other worker has (for workers that have no slot).
fn uuid_like() -> String {
    spool_domain::workspace::new_id("w")
}

/// Takes turns from `queue` and runs them, each chat's in order, different chats at once, as
/// Lambda's event source mapping does on AWS. A step that succeeds is acknowledged; one that
/// fails is handed out again shortly (with the rest of its chat's batch, so their order holds),
/// until its last attempt, which is acknowledged once the turn was ended with an error. Runs
/// until the task is dropped.
pub async fn poll_turns(worker: Arc<Worker>, queue: Arc<dyn TurnQueue>, settings: PollSettings) {
    // Whatever this holder held was interrupted: its previous process is gone.
    match queue.recover(&settings.holder).await {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(turns = n, holder = %settings.holder, "took back the turns this worker held when it stopped")
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot take back this worker's interrupted turns; they come back when their leases end")
        }
    }
    let lease = Lease::new(settings.lease, settings.holder.clone());
    let slots = Arc::new(tokio::sync::Semaphore::new(settings.concurrency.max(1)));
    loop {
        // Wait for a free slot before taking more work.
        let Ok(first) = slots.clone().acquire_owned().await else {
            return;
        };
        let free = slots.available_permits() + 1;
        let request = Receive {
            max: free,
            lease: lease.clone(),
            wait: settings.wait,
            per_org: settings.per_org.max(1),
        };
        let deliveries = match queue.receive(&request).await {
            Ok(deliveries) => deliveries,
            Err(e) => {
                tracing::warn!(error = %e, "cannot receive turns; retrying in a second");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // A batch may hold several turns of one chat (SQS FIFO hands out a group's messages
        // together): they run one after the other.
        let mut groups: BTreeMap<String, Vec<Delivery>> = BTreeMap::new();
        for delivery in deliveries {
            groups.entry(delivery.job.group()).or_default().push(delivery);
        }
        let mut first = Some(first);
        for (_, group) in groups {
            let permit = match first.take() {
                Some(permit) => permit,
                None => match slots.clone().acquire_owned().await {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let (worker, queue) = (worker.clone(), queue.clone());
            let ttl = settings.lease;
            tokio::spawn(async move {
                run_group(&worker, queue, group, ttl).await;
                drop(permit);
            });
        }
    }
}

/// How long a failed turn step waits before its next attempt.
const RETRY_DELAY: Duration = Duration::from_secs(2);

async fn run_group(worker: &Worker, queue: Arc<dyn TurnQueue>, group: Vec<Delivery>, ttl: Duration) {
    let receipts = group.iter().map(|d| d.receipt.clone()).collect();
    let heartbeat = Heartbeat::start(queue.clone(), receipts, ttl);
    let mut failed = false;
    for delivery in group {
        if !failed {
            let result = worker.run_turn(&delivery.job, delivery.attempts).await;
            heartbeat.done(&delivery.receipt).await;
            if matches!(result, Ok(_) | Err(Error::GaveUp(_))) {
                if let Err(e) = queue.ack(&delivery.receipt).await {
                    tracing::warn!(error = %e, "cannot acknowledge a turn; it will run again, harmlessly");
                }
                continue;
            }
            failed = true;
        }
        heartbeat.done(&delivery.receipt).await;
        if let Err(e) = queue.retry(&delivery.receipt, RETRY_DELAY).await {
            tracing::warn!(error = %e, "cannot hand a failed turn out again; it comes back when its lease ends");
        }
    }
}

/// Long-polls an SQS queue and runs its jobs, deleting each message once its job succeeded, as
/// Lambda's event source mapping does: a FIFO queue's groups in order (an aggregate stream's
/// events appended a batch at once), other messages one by one. Runs until the task is dropped.
pub async fn poll_queue(worker: Arc<Worker>, sqs: aws_sdk_sqs::Client, queue_url: String, wait: Duration) {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    let wait_seconds = i32::try_from(wait.as_secs().min(20)).unwrap_or(20);
    loop {
        let received = sqs
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await;
        let messages = match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(queue = %queue_url, error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "cannot receive jobs; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        let mut groups: BTreeMap<String, Vec<aws_sdk_sqs::types::Message>> = BTreeMap::new();
        for (i, message) in messages.into_iter().enumerate() {
            let group = message
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned()
                .unwrap_or_else(|| format!("#{i}"));
            groups.entry(group).or_default().push(message);
        }
        // Done messages are deleted in one request, as the event source mapping deletes them.
        let mut done = Vec::new();
        for (_, group) in groups {
            let ran = run_polled_group(&worker, &group).await;
            done.extend(group.into_iter().take(ran));
        }
        let entries: Vec<_> = done
            .iter()
            .enumerate()
            .filter_map(|(i, message)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(message.receipt_handle()?)
                    .build()
                    .ok()
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        match sqs
            .delete_message_batch()
            .queue_url(&queue_url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) if !out.failed().is_empty() => {
                tracing::warn!(
                    failed = out.failed().len(),
                    "cannot delete some done jobs; they will run again, harmlessly"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "cannot delete done jobs; they will run again, harmlessly");
            }
        }
    }
}

/// Runs a group of polled messages in order; how many of them are done (the rest, after a
/// failure, come back when their visibility timeout ends, still in order).
async fn run_polled_group(worker: &Worker, group: &[aws_sdk_sqs::types::Message]) -> usize {
    let bodies = || group.iter().map(|m| m.body().unwrap_or_default());
    if let Some(appended) = worker.append_aggregate_group(bodies()).await {
        return if appended { group.len() } else { 0 };
    }
    for (done, body) in bodies().enumerate() {
        if let Err(e) = worker.handle_message(body, 1).await {
            tracing::error!(error.message = %e, error.cause_chain = ?e, "job failed; SQS will retry it");
            return done;
        }
    }
    group.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_invocation_keeps_most_of_its_time_for_the_step() {
        assert_eq!(deadline_margin(Duration::from_secs(900)), DEADLINE_MARGIN);
        assert_eq!(deadline_margin(Duration::from_secs(30)), Duration::from_secs(6));
        assert_eq!(deadline_margin(Duration::ZERO), Duration::ZERO);
    }
}
