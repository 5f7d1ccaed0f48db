//! # The engine: one step of a turn, as events
//!
//! The worker hands the engine a [`TurnJob`]: a turn and the event that asked for this step of
//! it (the person's message, or an answer that resumes it). The engine replays the chat's
//! events into the turn's state ([`TurnState`]), then carries the turn forward:
//!
//! - `agent_start` (with the runtime that answers) the first time;
//! - the tool calls the last reply left unresolved: a question, a plan or a call that needs
//!   approval is asked (`ask_question`, `plan_approval_required`, `tool_approval_required`,
//!   plus an open request the answer must name) and the step ends, **waiting**: nothing is
//!   kept in memory, the answer's event re-enqueues the turn; an approved call runs, a declined
//!   one never does; actions run at once (`tool_start`, `tool_end`);
//! - a reply from the runtime, streamed as `message_start`, `message_update` (deltas gathered
//!   for [`Settings::flush_every`], so one chat writes at most about ten updates a second),
//!   `message_end` (its text and tool calls), `usage`;
//! - until a reply calls no tool: `agent_end{reason: complete}`.
//!
//! An abort (`control_submitted{abort}`) is watched for the whole step: the runtime's future is
//! dropped (its HTTP stream closes, its subprocess is killed), the partial message is ended as
//! it was, and the turn ends `aborted`. A runtime error becomes a `system` event and
//! `agent_end{reason: error}`.
//!
//! Every append of a step carries an idempotent producer claim (`turn:{id}`, epoch from the
//! trigger and the delivery attempt, seq per append): a retried append is recognised by the log
//! and not written twice, and a step superseded by a newer delivery is fenced off. A
//! redelivered step finds what its predecessor wrote in the stream: it ends an open message
//! (`message_end{interrupted}`) and open tools, and carries on.
//!
//! This file holds the engine and a step's loop; `calls.rs` its tool calls, `reply.rs` the
//! runtime's reply and the abort watch, `end.rs` the turn's end and the step's appends,
//! `ledger.rs` the usage ledger and the token budget.

mod calls;
mod end;
mod history;
mod ledger;
mod reply;
mod runner;
mod toolbox;

use end::{WorkspaceOnce, workspace_once};

pub use runner::runner_check;
pub use toolbox::offered_name;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
pub use spool_chat::event::EndReason;
use spool_chat::settings::CliHost;
use spool_chat::{
    attachment::FileStore,
    confine::WorkspaceRoots,
    event::{
        AgentEnd, AgentStart, AskQuestion, AuthorType, ChatEvent, ControlAction, EventKind, FeedEvent, Level,
        MessageEnd, MessageStart, MessageUpdate, PlanApprovalRequired, Role, ToolApprovalRequired, ToolEnd, ToolStart,
    },
    manage::announce,
    metadata::Metadata,
    notifier::{About, LogNotifier, Notifier},
    session::{
        Event, EventDraft, OpenRequest, RequestKind, Session, TurnRecord, TurnStatus, append_events, preview,
        read_events,
    },
    settings::NotificationKind,
    turns::{MAX_CONTINUATIONS, TurnJob},
    workspace::{Agent, Workspace, new_id},
};
use spool_log::{
    clock::{Clock, rfc3339_ms},
    error::Error,
    jobs::Deferred,
    notify::WaitOutcome,
    port::StreamLog,
    stream::{Offset, ProducerClaim, StreamPath},
};
use tokio::sync::mpsc;

use crate::{
    actions::ActionContext,
    files::{FileAccess, InlineLimits},
    runtime::{self, Reply, Request, Runtime, Sink, ToolCall, TurnContext},
    runtimes::Runtimes,
    state::{Answer, TurnState, conversation_timed},
    tools::{self, Kind},
};

/// The capability that lets a client's context into the prompt.
pub const CONTEXT_CAPABILITY: &str = "context_for_query";

/// What a step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The turn ended.
    Ended(EndReason),
    /// The turn waits for a person's answer.
    Waiting,
    /// Nothing to do: the chat is gone, the turn had ended, or a newer delivery took over.
    Nothing,
    /// The step stopped cleanly before its host's deadline (a Lambda invocation about to be
    /// killed): its partial message is ended as interrupted, and a new job
    /// ([`TurnJob::continued`]) must carry it on.
    Continued,
}

/// The engine's knobs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long text deltas are gathered into one `message_update`.
    pub flush_every: Duration,
    /// The most replies one turn may make.
    pub max_replies: usize,
    /// How long one wait for an abort lasts before it looks again.
    pub abort_wait: Duration,
    /// The turn's time limit: the longest one step may spend in its runtime (model calls, a
    /// CLI, a script's pauses), all replies together; past it the reply is stopped and the
    /// turn ends with an error.
    pub step_timeout: Duration,
    /// Where a workspace's working directory may be (an agent's `update_workspace` is
    /// confined like a person's request).
    pub workspace_roots: WorkspaceRoots,
    /// How much of a file a model gets whole.
    pub inline: InlineLimits,
    /// Where the built-in agent's instruction points for documents about using Spool
    /// (`SPOOL_KNOWLEDGE_BASE_URL`; Spool's own `/v1/docs` by default).
    pub knowledge_base_url: String,
    /// How long after its job was queued a step whose job went before its message
    /// ([`TurnJob::before_message_ms`]) waits for that message: longer than a request takes
    /// to append it. Past it the message never came (its request died first), and the step
    /// does nothing.
    pub message_wait: Duration,
    /// Where the CLI agents of a workspace that does not say run (`SPOOL_CLI_HOST`).
    pub cli_host: CliHost,
    /// How long a turn waits for a runner to take it (again) before it fails
    /// (`SPOOL_RUNNER_WAIT_MS`).
    pub runner_wait: Duration,
    /// This deployment's URL, for the `spool runner` command line a person is told to run.
    pub public_url: Option<String>,
    /// How MCP servers are reached ([`crate::mcp`]).
    pub mcp: crate::mcp::McpSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            flush_every: Duration::from_millis(100),
            max_replies: 12,
            abort_wait: Duration::from_secs(10),
            step_timeout: Duration::from_secs(600),
            workspace_roots: WorkspaceRoots::none(),
            inline: InlineLimits::default(),
            knowledge_base_url: "/v1/docs".to_owned(),
            message_wait: Duration::from_secs(60),
            cli_host: CliHost::Server,
            runner_wait: Duration::from_millis(spool_chat::runner::DEFAULT_WAIT_MS.unsigned_abs()),
            public_url: None,
            mcp: crate::mcp::McpSettings::default(),
        }
    }
}

/// Runs turns.
pub struct Engine {
    log: Arc<dyn StreamLog>,
    /// Where workspaces' feed events are handed over.
    feeds: Arc<dyn spool_log::aggregate::Aggregates>,
    metadata: Arc<dyn Metadata>,
    runtimes: Arc<Runtimes>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    /// Where chats' files are, for runtimes to read.
    files: Option<Arc<dyn FileStore>>,
    /// How people are told when an agent needs them.
    notifier: Arc<dyn Notifier>,
    /// Where the models' token counts are recorded.
    metrics: Arc<dyn spool_log::metrics::Metrics>,
    /// Workspaces' write side, for actions.
    workspaces: spool_chat::service::WorkspaceService,
    /// Chats' records, for actions (`rename_chat`).
    chats: spool_chat::service::ChatRecords,
    /// Where checks of turns that wait for a runner are scheduled.
    jobs: Option<Arc<dyn Deferred>>,
    /// Where workspaces' MCP servers are found ([`Self::with_mcp`]).
    mcp: Option<Arc<dyn spool_chat::mcp::McpCatalog>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine over the stores, answering with `runtimes`.
    pub fn new(
        log: Arc<dyn StreamLog>,
        metadata: Arc<dyn Metadata>,
        runtimes: Arc<Runtimes>,
        clock: Arc<dyn Clock>,
        settings: Settings,
    ) -> Self {
        let workspaces = spool_chat::service::WorkspaceService::new(metadata.clone(), log.clone(), clock.clone())
            .with_workspace_roots(settings.workspace_roots.clone())
            .with_default_cli_host(settings.cli_host);
        let chats = spool_chat::service::ChatRecords::new(metadata.clone(), log.clone(), clock.clone());
        Self {
            feeds: Arc::new(spool_log::aggregate::Direct(log.clone())),
            workspaces,
            chats,
            log,
            metadata,
            runtimes,
            clock,
            settings,
            files: None,
            notifier: Arc::new(LogNotifier),
            metrics: Arc::new(spool_log::metrics::LogMetrics),
            jobs: None,
            mcp: None,
        }
    }

    /// The same engine, scheduling the checks of turns that wait for a runner with `jobs`
    /// (without, such a turn fails only when something else queues it again).
    #[must_use]
    pub fn with_jobs(mut self, jobs: Arc<dyn Deferred>) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// The same engine, recording the models' token counts in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn spool_log::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The same engine, handing workspaces' feed events to `feeds` (appended at once otherwise).
    #[must_use]
    pub fn with_feeds(mut self, feeds: Arc<dyn spool_log::aggregate::Aggregates>) -> Self {
        self.workspaces = self.workspaces.with_feeds(feeds.clone());
        self.chats = self.chats.with_feeds(feeds.clone());
        self.feeds = feeds;
        self
    }

    /// The same engine, telling people through `notifier` (a line in the log by default).
    #[must_use]
    pub fn with_notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.workspaces = self.workspaces.with_notifier(notifier.clone());
        self.notifier = notifier;
        self
    }

    /// The same engine, giving runtimes the chats' files from `files`.
    #[must_use]
    pub fn with_files(mut self, files: Arc<dyn FileStore>) -> Self {
        self.files = Some(files);
        self
    }

    /// Counts a run of `job`'s step as it starts; how many there have been, this one included
    /// ([`spool_chat::metadata::Sessions::count_run`]). The worker passes it to [`Self::run`].
    pub async fn count_run(&self, job: &TurnJob) -> Result<u32, Error> {
        self.metadata
            .count_run(&job.org, &job.session_id, &job.key(), self.clock.now_ms())
            .await
    }

    /// Runs one step of a turn; `attempt` counts the job's deliveries, this one included (each
    /// delivery's appends are fenced off from an earlier one's by it).
    pub async fn run(&self, job: &TurnJob, attempt: u32) -> Result<Outcome, Error> {
        self.run_until(job, attempt, None).await
    }

    /// [`Self::run`], on a host that stops at `host_deadline`: before then, the step stops
    /// cleanly and answers [`Outcome::Continued`] (unless the step was carried over
    /// [`MAX_CONTINUATIONS`] times already; then only the turn's own time limit holds).
    pub async fn run_until(
        &self,
        job: &TurnJob,
        attempt: u32,
        host_deadline: Option<tokio::time::Instant>,
    ) -> Result<Outcome, Error> {
        let Some(session) = self.metadata.session(&job.org, &job.session_id).await? else {
            return Ok(Outcome::Nothing);
        };
        let path = Session::stream(&job.org, &session.id)?;
        let events = match self.events_with_message(&path, job).await {
            Ok(events) => events,
            Err(Error::NotFound { .. } | Error::Gone { .. }) => return Ok(Outcome::Nothing),
            Err(e) => return Err(e),
        };
        let agent = match &session.agent_id {
            Some(id) => self.metadata.agent(&job.org, id).await?,
            None => None,
        };
        let read = events.last().map_or(0, |e| e.seq);
        let workspace = WorkspaceOnce::new();
        let (runtimes, on_runners) = self
            .runtimes_for(&job.org, &session, agent.as_ref(), &workspace)
            .await?;
        let mut turn = Step {
            engine: self,
            runtimes,
            on_runners,
            job,
            writer: Writer {
                producer: format!("turn:{}", job.turn_id),
                epoch: epoch(job, attempt),
                seq: 0,
            },
            session,
            agent,
            path,
            read_tail: read,
            own_tail: Arc::new(AtomicU64::new(read)),
            events,
            deadline: tokio::time::Instant::now() + self.step_budget(job),
            host_deadline: host_deadline.filter(|_| job.continuation < MAX_CONTINUATIONS),
            context: None,
            toolbox: None,
            mcp_models: false,
            workspace,
        };
        let outcome = turn.drive().await;
        // However the step ended, its MCP connections close and its stdio servers stop.
        if let Some(toolbox) = turn.toolbox.take() {
            toolbox.close().await;
        }
        match outcome {
            Err(Error::StaleProducerEpoch { .. }) => {
                tracing::info!(turn = %job.turn_id, "a newer delivery of this step took over");
                Ok(Outcome::Nothing)
            }
            other => other,
        }
    }

    /// What is left of the step's time limit: all of it, or for a carried-over step, what its
    /// earlier jobs left (so carrying over never stretches the limit).
    fn step_budget(&self, job: &TurnJob) -> Duration {
        let limit = self.settings.step_timeout;
        match job.step_started_ms {
            Some(started) => {
                let spent = u64::try_from(self.clock.now_ms().saturating_sub(started)).unwrap_or(0);
                limit.saturating_sub(Duration::from_millis(spent))
            }
            None => limit,
        }
    }

    /// [`Self::recent_events`], and for a job queued before its message
    /// ([`TurnJob::before_message_ms`]), the events until that message is among them: a step
    /// may start before the request that queued it appends it. It waits on the stream until
    /// [`Settings::message_wait`] after the job was queued; a message not there by then never
    /// comes, and the step finds no event of its turn.
    async fn events_with_message(&self, path: &StreamPath, job: &TurnJob) -> Result<Vec<Event>, Error> {
        let mut events = self.recent_events(path, job).await?;
        let Some(queued_ms) = job.before_message_ms else {
            return Ok(events);
        };
        let wait_ms = i64::try_from(self.settings.message_wait.as_millis()).unwrap_or(i64::MAX);
        let until_ms = queued_ms.saturating_add(wait_ms);
        let own = |e: &Event| e.kind == EventKind::Submit && e.turn_id.as_deref() == Some(&*job.turn_id);
        while !events.iter().any(own) {
            let left = until_ms.saturating_sub(self.clock.now_ms());
            if left <= 0 {
                tracing::warn!(turn = %job.turn_id, "the message this turn was queued for never came; nothing to do");
                break;
            }
            let read = events.last().map_or(job.trigger_seq, |e| e.seq);
            let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
            self.log.wait(path, Offset::after(read), left).await?;
            events.extend(read_events(self.log.as_ref(), path, read, usize::MAX).await?.events);
        }
        Ok(events)
    }
}

/// A run's producer epoch: newer for each carry-over of the step and, within one, for each
/// run, so a run's appends fence off every earlier run's. Giving up uses the step's last epoch.
fn epoch(job: &TurnJob, attempt: u32) -> u64 {
    job.trigger_seq.saturating_mul(1024)
        + u64::from(job.continuation.min(MAX_CONTINUATIONS)) * 32
        + u64::from(attempt.clamp(1, 31))
}

/// Appends a step's events with its producer claims.
struct Writer {
    producer: String,
    epoch: u64,
    seq: u64,
}

/// How resolving a call went.
enum Resolution {
    Done,
    Wait,
}

/// How a reply went.
enum Replied {
    Done,
    Aborted,
    Failed(String),
    /// Stopped before the host's deadline.
    CarriedOver,
    /// Offered to runners: the turn waits for one to answer.
    Waiting,
}

/// One step of one turn.
struct Step<'a> {
    engine: &'a Engine,
    /// The runtimes the chat may use: with its workspace's runners' CLIs, when they run there.
    runtimes: Arc<Runtimes>,
    /// Whether the chat's CLI agents run on runners (its turn may have a runner job).
    on_runners: bool,
    job: &'a TurnJob,
    writer: Writer,
    session: Session,
    agent: Option<Agent>,
    path: StreamPath,
    /// The chat's events, including those this step appended.
    events: Vec<Event>,
    /// The last seq the step read from the stream itself: events of others (an abort) may lie
    /// between it and the step's own appends.
    read_tail: u64,
    /// The seq through which everything after [`Self::read_tail`] is the step's own appends,
    /// none of others' in between: the abort watcher need not read those.
    own_tail: Arc<AtomicU64>,
    /// When the step's runtime time runs out ([`Settings::step_timeout`]).
    deadline: tokio::time::Instant,
    /// When its host stops it (a Lambda invocation's deadline, less a margin to end cleanly).
    host_deadline: Option<tokio::time::Instant>,
    /// The workspace's context, once made in this step.
    context: Option<String>,
    /// The MCP servers' tools, once gathered in this step.
    toolbox: Option<toolbox::Toolbox>,
    /// Whether the step's runtime is a model's, which gets the MCP servers' tools.
    mcp_models: bool,
    /// The chat's workspace record, read once in the step ([`Step::workspace_record`]).
    workspace: WorkspaceOnce,
}

impl Step<'_> {
    fn state(&self) -> TurnState {
        TurnState::replay(&self.events, &self.job.turn_id)
    }

    fn now(&self) -> (i64, String) {
        let ms = self.engine.clock.now_ms();
        (ms, rfc3339_ms(ms))
    }

    async fn drive(&mut self) -> Result<Outcome, Error> {
        let state = self.state();
        let Some(start_seq) = state.start_seq else {
            // No event names this turn: nothing asked for it.
            return Ok(Outcome::Nothing);
        };
        if state.ended {
            // Finished by an earlier delivery, which may have died before its bookkeeping.
            self.release().await?;
            if self.on_runners {
                self.drop_runner_job().await;
            }
            return Ok(Outcome::Nothing);
        }
        if state.abort_seq.is_some() {
            return self.finish(EndReason::Aborted, None).await;
        }
        self.record(TurnStatus::InProgress, None).await?;
        let runtime = self.runtimes.pick(self.agent.as_ref(), &self.session);
        if !state.started {
            let trigger = self.events.iter().find(|e| e.seq == start_seq);
            let blank = !trigger.is_some_and(
                |e| matches!(&e.event, ChatEvent::UserMessageSubmitted(m) if !m.content.trim().is_empty()),
            );
            if blank {
                // An agent never runs on empty input.
                self.system(Level::Error, "There is no message to answer; the turn did not start.")
                    .await?;
                return self.finish(EndReason::Error, Some("no input")).await;
            }
            if let Some(outcome) = self.refuse_over_budget().await? {
                return Ok(outcome);
            }
            let described = match &runtime {
                Ok(runtime) => runtime.describe(&self.runtime_request(Vec::new())),
                Err(_) => "none".to_owned(),
            };
            let start = AgentStart {
                runtime: described,
                agent_id: self.agent.as_ref().map(|a| a.id.clone()),
                agent_name: self
                    .agent
                    .as_ref()
                    .map_or_else(|| "Spool".to_owned(), |a| a.name.clone()),
                trigger_seq: self.trigger_seq(),
            };
            self.append(vec![self.draft(ChatEvent::AgentStart(start))]).await?;
            self.announce(|ws| FeedEvent::ProcessingStarted {
                chat_id: self.session.id.clone(),
                chat_title: self.session.title.clone(),
                agent_name: self.agent_name(),
                workspace_id: ws,
            })
            .await?;
        } else {
            self.close_interrupted(&state).await?;
        }
        let runtime = match runtime {
            Ok(runtime) => runtime,
            Err(reason) => {
                self.system(Level::Error, &reason).await?;
                return self.finish(EndReason::Error, Some(&reason)).await;
            }
        };
        self.mcp_models = !runtime.works_on_disk() && runtime.runner_cli().is_none();
        if let Some(focus) = self.compact_command() {
            // `/compact`: the history before it is summarised, and nothing is answered.
            if !self.compact(runtime.as_ref(), true, &focus).await? {
                self.system(Level::Info, "There is nothing before this to compact yet.")
                    .await?;
            }
            return self.finish(EndReason::Complete, None).await;
        }
        self.compact(runtime.as_ref(), false, "").await?;
        loop {
            let state = self.state();
            if state.abort_seq.is_some() {
                return self.finish(EndReason::Aborted, None).await;
            }
            let one_shot = self.last_reply_one_shot();
            let pending: Vec<ToolCall> = state.unresolved().into_iter().cloned().collect();
            for call in &pending {
                if let Resolution::Wait = self.resolve(call, &state, one_shot).await? {
                    let detail = format!("waiting for an answer to `{}`", call.id);
                    self.record(TurnStatus::InProgress, Some(detail)).await?;
                    return Ok(Outcome::Waiting);
                }
            }
            let state = self.state();
            if state.replies > 0 && (state.last_calls.is_empty() || one_shot) {
                return self.finish(EndReason::Complete, None).await;
            }
            if state.replies >= self.engine.settings.max_replies {
                let reason = format!("the agent made {} replies without finishing; stopped", state.replies);
                self.system(Level::Error, &reason).await?;
                return self.finish(EndReason::Error, Some(&reason)).await;
            }
            let replied = match runtime.runner_cli() {
                Some(cli) => self.by_runner(runtime.as_ref(), cli).await?,
                None => self.reply(runtime.as_ref()).await?,
            };
            match replied {
                Replied::Done => {}
                Replied::Waiting => return Ok(Outcome::Waiting),
                Replied::Aborted => return self.finish(EndReason::Aborted, None).await,
                Replied::CarriedOver => {
                    let detail = "carried over to a new invocation".to_owned();
                    self.record(TurnStatus::InProgress, Some(detail)).await?;
                    return Ok(Outcome::Continued);
                }
                Replied::Failed(reason) => {
                    self.system(Level::Error, &format!("The agent could not answer: {reason}"))
                        .await?;
                    return self.finish(EndReason::Error, Some(&reason)).await;
                }
            }
        }
    }

    /// The seq of the event that asked for this step: its job's trigger, or for a job queued
    /// before its message, that message.
    fn trigger_seq(&self) -> u64 {
        let message = || {
            self.events.iter().find_map(|e| {
                let own = e.turn_id.as_deref() == Some(&*self.job.turn_id);
                (own && matches!(e.event, ChatEvent::UserMessageSubmitted(_))).then_some(e.seq)
            })
        };
        match self.job.before_message_ms {
            Some(_) => message().unwrap_or(self.job.trigger_seq),
            None => self.job.trigger_seq,
        }
    }
}
