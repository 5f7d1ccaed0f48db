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

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
pub use spool_domain::chat::event::EndReason;
use spool_domain::{
    Agent, ChatEvent, Clock, Error, Event, EventDraft, EventKind, FeedEvent, Metadata, Offset, OpenRequest,
    ProducerClaim, RequestKind, SealMode, Session, StreamLog, StreamPath, TurnJob, TurnRecord, TurnStatus, WaitOutcome,
    WorkspaceRoots,
    chat::event::{
        AgentEnd, AgentStart, AskQuestion, ControlAction, Level, MessageEnd, MessageStart, MessageUpdate,
        PlanApprovalRequired, Role, ToolApprovalRequired, ToolEnd, ToolStart,
    },
    clock::rfc3339_ms,
    manage::announce,
    session::{append_events, preview, read_events},
    workspace::new_id,
};
use tokio::sync::mpsc;

use crate::{
    actions::ActionContext,
    runtime::{self, Reply, Request, Runtime, Sink, ToolCall, TurnContext},
    runtimes::Runtimes,
    state::{Answer, TurnState, conversation},
    tools::{self, Kind},
};

/// How many events before a step's trigger it reads: the history its runtime sees.
pub const HISTORY_WINDOW: u64 = 2000;

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
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            flush_every: Duration::from_millis(100),
            max_replies: 12,
            abort_wait: Duration::from_secs(10),
            step_timeout: Duration::from_secs(600),
            workspace_roots: WorkspaceRoots::none(),
        }
    }
}

/// Runs turns.
pub struct Engine {
    log: Arc<dyn StreamLog>,
    metadata: Arc<dyn Metadata>,
    runtimes: Arc<Runtimes>,
    clock: Arc<dyn Clock>,
    settings: Settings,
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
        Self {
            log,
            metadata,
            runtimes,
            clock,
            settings,
        }
    }

    /// Runs one step of a turn; `attempt` counts the job's deliveries, this one included.
    pub async fn run(&self, job: &TurnJob, attempt: u32) -> Result<Outcome, Error> {
        let Some(session) = self.metadata.session(&job.org, &job.session_id).await? else {
            return Ok(Outcome::Nothing);
        };
        let path = Session::stream(&job.org, &session.id)?;
        let events = match self.recent_events(&path, job).await {
            Ok(events) => events,
            Err(Error::NotFound { .. } | Error::Gone { .. }) => return Ok(Outcome::Nothing),
            Err(e) => return Err(e),
        };
        let agent = match &session.agent_id {
            Some(id) => self.metadata.agent(&job.org, id).await?,
            None => None,
        };
        let read = events.last().map_or(0, |e| e.seq);
        let mut turn = Step {
            engine: self,
            job,
            writer: Writer {
                producer: format!("turn:{}", job.turn_id),
                epoch: job.trigger_seq.saturating_mul(1024) + u64::from(attempt.min(1023)),
                seq: 0,
            },
            session,
            agent,
            path,
            read_tail: read,
            own_tail: Arc::new(AtomicU64::new(read)),
            events,
            deadline: tokio::time::Instant::now() + self.settings.step_timeout,
        };
        match turn.drive().await {
            Err(Error::StaleProducerEpoch { .. }) => {
                tracing::info!(turn = %job.turn_id, "a newer delivery of this step took over");
                Ok(Outcome::Nothing)
            }
            other => other,
        }
    }

    /// The chat's events a step needs: the last [`HISTORY_WINDOW`] before its trigger and all
    /// after, so a step costs the same in a chat of a million events as in a new one. When the
    /// turn began before that window (a very long turn), from the start.
    async fn recent_events(&self, path: &StreamPath, job: &TurnJob) -> Result<Vec<Event>, Error> {
        let from = job.trigger_seq.saturating_sub(HISTORY_WINDOW);
        let events = read_events(self.log.as_ref(), path, from, usize::MAX).await?.events;
        let starts_inside = events
            .iter()
            .find(|e| e.turn_id.as_deref() == Some(&*job.turn_id))
            .is_some_and(|e| e.kind == EventKind::Submit);
        if from == 0 || starts_inside {
            return Ok(events);
        }
        Ok(read_events(self.log.as_ref(), path, 0, usize::MAX).await?.events)
    }

    /// Ends a turn whose job failed for the last time (it goes to the dead-letter queue): a
    /// `system` event with the reason and `agent_end{reason: error}`, so the chat is not left
    /// waiting.
    pub async fn give_up(&self, job: &TurnJob, attempt: u32, reason: &str) -> Result<(), Error> {
        let Some(session) = self.metadata.session(&job.org, &job.session_id).await? else {
            return Ok(());
        };
        let path = Session::stream(&job.org, &session.id)?;
        let events = self.recent_events(&path, job).await?;
        let read = events.last().map_or(0, |e| e.seq);
        let mut step = Step {
            engine: self,
            job,
            writer: Writer {
                producer: format!("turn:{}", job.turn_id),
                epoch: job.trigger_seq.saturating_mul(1024) + 1023,
                seq: 0,
            },
            session,
            agent: None,
            path,
            read_tail: read,
            own_tail: Arc::new(AtomicU64::new(read)),
            events,
            deadline: tokio::time::Instant::now() + self.settings.step_timeout,
        };
        if TurnState::replay(&step.events, &job.turn_id).ended {
            return Ok(());
        }
        step.system(
            Level::Error,
            &format!("This turn failed {attempt} times and was given up: {reason}. Send your message again to retry."),
        )
        .await?;
        step.end(EndReason::Error, Some(reason)).await
    }
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
}

/// One step of one turn.
struct Step<'a> {
    engine: &'a Engine,
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
            return Ok(Outcome::Nothing);
        }
        if state.abort_seq.is_some() {
            return self.finish(EndReason::Aborted, None).await;
        }
        self.record(TurnStatus::InProgress, None).await?;
        let runtime = self.engine.runtimes.pick(self.agent.as_ref(), &self.session);
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
                trigger_seq: self.job.trigger_seq,
            };
            self.append(vec![self.draft(ChatEvent::AgentStart(start))]).await?;
            self.announce(FeedEvent::ProcessingStarted {
                session_id: self.session.id.clone(),
                turn_id: self.job.turn_id.clone(),
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
            match self.reply(runtime.as_ref()).await? {
                Replied::Done => {}
                Replied::Aborted => return self.finish(EndReason::Aborted, None).await,
                Replied::Failed(reason) => {
                    self.system(Level::Error, &format!("The agent could not answer: {reason}"))
                        .await?;
                    return self.finish(EndReason::Error, Some(&reason)).await;
                }
            }
        }
    }

    /// Whether the latest reply's calls are a CLI agent's actions: run at once, and the last
    /// word of the turn.
    fn last_reply_one_shot(&self) -> bool {
        self.events
            .iter()
            .rev()
            .find_map(|e| match &e.event {
                ChatEvent::MessageEnd(end) if e.turn_id.as_deref() == Some(&*self.job.turn_id) => Some(end.one_shot),
                _ => None,
            })
            .unwrap_or(false)
    }

    /// Ends what a previous delivery left open: its message as far as it got, its tools.
    async fn close_interrupted(&mut self, state: &TurnState) -> Result<(), Error> {
        let mut drafts = Vec::new();
        if let Some(open) = &state.open_message {
            drafts.push(self.draft(ChatEvent::MessageEnd(MessageEnd {
                message_id: open.id.clone(),
                text: open.text.clone(),
                interrupted: true,
                ..MessageEnd::default()
            })));
        }
        for (call_id, tool) in &state.open_tools {
            drafts.push(self.draft(tool_failed(
                call_id,
                tool,
                "interrupted: the worker stopped while it ran",
            )));
        }
        if !drafts.is_empty() {
            drafts.push(self.draft(ChatEvent::system(
                Level::Info,
                "The worker running this turn stopped; it was picked up again.",
            )));
            self.append(drafts).await?;
        }
        Ok(())
    }

    /// Resolves one call of the latest reply: asks a person, or runs it.
    async fn resolve(&mut self, call: &ToolCall, state: &TurnState, one_shot: bool) -> Result<Resolution, Error> {
        let text_arg = |key: &str| {
            call.arguments
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match tools::kind(&call.name) {
            Some(Kind::Question) => {
                if !state.requested.contains(&call.id) {
                    let asked = ChatEvent::AskQuestion(AskQuestion {
                        question_id: call.id.clone(),
                        question: text_arg("question"),
                    });
                    self.request(RequestKind::Question, &call.id, asked).await?;
                }
                Ok(Resolution::Wait)
            }
            Some(Kind::Plan) => {
                if !state.requested.contains(&call.id) {
                    let asked = ChatEvent::PlanApprovalRequired(PlanApprovalRequired {
                        plan_id: call.id.clone(),
                        plan: text_arg("plan"),
                    });
                    self.request(RequestKind::Plan, &call.id, asked).await?;
                }
                Ok(Resolution::Wait)
            }
            Some(Kind::Action { needs_approval, .. })
                if needs_approval && (!one_shot || tools::always_needs_approval(call)) =>
            {
                match state.answers.get(&call.id) {
                    Some(Answer::Approval(true)) => self.run_action(call).await,
                    Some(Answer::Approval(false)) => {
                        let end = ToolEnd {
                            tool_call_id: call.id.clone(),
                            tool: call.name.clone(),
                            result: None,
                            error: Some("declined by the person; not run".to_owned()),
                            declined: true,
                        };
                        self.append(vec![self.draft(ChatEvent::ToolEnd(end))]).await?;
                        Ok(Resolution::Done)
                    }
                    _ => {
                        if !state.requested.contains(&call.id) {
                            let asked = ChatEvent::ToolApprovalRequired(ToolApprovalRequired {
                                tool_call_id: call.id.clone(),
                                tool: call.name.clone(),
                                arguments: call.arguments.clone(),
                            });
                            self.request(RequestKind::Approval, &call.id, asked).await?;
                        }
                        Ok(Resolution::Wait)
                    }
                }
            }
            Some(Kind::Action { .. }) => self.run_action(call).await,
            None => {
                let error = format!("there is no tool or action `{}`", call.name);
                let note = ChatEvent::system(Level::Error, format!("The agent asked for {error}."));
                let end = tool_failed(&call.id, &call.name, &error);
                self.append(vec![self.draft(end), self.draft(note)]).await?;
                Ok(Resolution::Done)
            }
        }
    }

    /// Opens a request the person must answer, then announces it. The request is opened first,
    /// so a crash in between leaves nothing an answer cannot find.
    async fn request(&mut self, kind: RequestKind, id: &str, asked: ChatEvent) -> Result<(), Error> {
        let request = OpenRequest {
            id: id.to_owned(),
            kind,
            turn_id: Some(self.job.turn_id.clone()),
            opened_seq: self.events.last().map_or(0, |e| e.seq) + 1,
        };
        match self
            .engine
            .metadata
            .open_request(&self.job.org, &self.session.id, &request)
            .await
        {
            Ok(()) | Err(Error::Exists { .. }) => {}
            Err(e) => return Err(e),
        }
        self.append(vec![self.draft(asked)]).await?;
        Ok(())
    }

    async fn run_action(&mut self, call: &ToolCall) -> Result<Resolution, Error> {
        let start = ChatEvent::ToolStart(ToolStart {
            tool_call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        self.append(vec![self.draft(start)]).await?;
        let (now_ms, now) = self.now();
        let context = ActionContext {
            metadata: self.engine.metadata.as_ref(),
            log: self.engine.log.as_ref(),
            org: &self.job.org,
            session_id: &self.session.id,
            workspace_id: self.session.workspace_id.as_deref(),
            builtin: self.agent.as_ref().is_none_or(|a| a.builtin),
            now_ms,
            now_rfc3339: &now,
            roots: &self.engine.settings.workspace_roots,
        };
        let outcome = context.run(&call.name, &call.arguments).await;
        let mut drafts = Vec::new();
        match outcome {
            Ok(result) => {
                drafts.push(self.draft(ChatEvent::ToolEnd(ToolEnd {
                    tool_call_id: call.id.clone(),
                    tool: call.name.clone(),
                    result: Some(result),
                    error: None,
                    declined: false,
                })));
            }
            Err(error) => {
                drafts.push(self.draft(tool_failed(&call.id, &call.name, &error)));
                drafts.push(self.draft(ChatEvent::system(
                    Level::Error,
                    format!("The action `{}` failed: {error}", call.name),
                )));
            }
        }
        self.append(drafts).await?;
        if call.name == "rename_chat"
            && let Some(session) = self.engine.metadata.session(&self.job.org, &self.session.id).await?
        {
            self.session = session;
        }
        Ok(Resolution::Done)
    }

    fn runtime_request(&self, messages: Vec<runtime::Message>) -> Request {
        let builtin = self.agent.as_ref().is_none_or(|a| a.builtin);
        Request {
            instruction: self.agent.as_ref().map(|a| a.instruction.clone()).unwrap_or_default(),
            messages,
            tools: tools::specs(builtin && self.session.workspace_id.is_some()),
            model: self.agent.as_ref().and_then(|a| a.model.clone()),
            context: TurnContext {
                org: self.job.org.clone(),
                session_id: self.session.id.clone(),
                title: self.session.title.clone(),
                turn_id: self.job.turn_id.clone(),
                agent_name: self
                    .agent
                    .as_ref()
                    .map_or_else(|| "Spool".to_owned(), |a| a.name.clone()),
                workspace_id: self.session.workspace_id.clone(),
                working_dir: None,
                builtin,
            },
        }
    }

    /// One reply of the runtime, streamed into events, raced against an abort.
    async fn reply(&mut self, runtime: &dyn Runtime) -> Result<Replied, Error> {
        let with_context = self.session.capabilities.iter().any(|c| c == CONTEXT_CAPABILITY);
        // The chat as it was when this turn's message came, and what this turn added since: a
        // message queued behind it (`on_busy: enqueue`) is the next turn's to answer.
        let start = self.state().start_seq.unwrap_or(0);
        let seen: Vec<Event> = self
            .events
            .iter()
            .filter(|e| e.seq <= start || e.turn_id.as_deref() == Some(self.job.turn_id.as_str()))
            .cloned()
            .collect();
        let mut request = self.runtime_request(conversation(&seen, with_context));
        if let Some(ws) = &self.session.workspace_id {
            request.context.working_dir = self
                .engine
                .metadata
                .workspace(&self.job.org, ws)
                .await?
                .and_then(|w| w.working_dir);
        }
        let message_id = new_id("msg");
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let mut sink = ChannelSink(tx);
        // From what the step last read, not from its own appends: an abort may have landed
        // before them.
        let after = self.read_tail;
        let start_seq = self.state().start_seq.unwrap_or(after);
        let abort = watch_abort(
            self.engine.log.clone(),
            self.path.clone(),
            after,
            start_seq,
            self.engine.settings.abort_wait,
            self.own_tail.clone(),
        );
        tokio::pin!(abort);
        let mut started = false;
        let mut buffer = String::new();
        let mut written = String::new();
        let mut ticker = tokio::time::interval(self.engine.settings.flush_every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let deadline = tokio::time::sleep_until(self.deadline);
        tokio::pin!(deadline);
        let outcome = {
            let respond = runtime.respond(&request, &mut sink);
            tokio::pin!(respond);
            loop {
                tokio::select! {
                    biased;
                    () = &mut abort => break None,
                    result = &mut respond => break Some(result),
                    // Dropping the reply stops it (its HTTP stream closes, its process group
                    // is killed).
                    () = &mut deadline => {
                        let limit = self.engine.settings.step_timeout.as_secs_f64();
                        break Some(Err(runtime::Error::Failed(format!(
                            "it ran longer than the turn's time limit ({limit:.0} s, SPOOL_TURN_TIMEOUT_MS) and was stopped"
                        ))));
                    }
                    Some(delta) = rx.recv() => {
                        if !started {
                            started = true;
                            self.append(vec![self.draft(message_start(&message_id))]).await?;
                            ticker.reset();
                        }
                        buffer.push_str(&delta);
                    }
                    _ = ticker.tick(), if !buffer.is_empty() => {
                        self.flush(&message_id, &mut buffer, &mut written).await?;
                    }
                }
            }
        };
        while let Ok(delta) = rx.try_recv() {
            if !started {
                started = true;
                self.append(vec![self.draft(message_start(&message_id))]).await?;
            }
            buffer.push_str(&delta);
        }
        self.flush(&message_id, &mut buffer, &mut written).await?;
        match outcome {
            None => {
                if started {
                    let end = MessageEnd {
                        message_id,
                        text: written,
                        aborted: true,
                        ..MessageEnd::default()
                    };
                    self.append(vec![self.draft(ChatEvent::MessageEnd(end))]).await?;
                }
                Ok(Replied::Aborted)
            }
            Some(Err(runtime::Error::Store(e))) => Err(e),
            Some(Err(runtime::Error::Failed(reason))) => {
                if started {
                    let end = MessageEnd {
                        message_id,
                        text: written,
                        interrupted: true,
                        ..MessageEnd::default()
                    };
                    self.append(vec![self.draft(ChatEvent::MessageEnd(end))]).await?;
                }
                Ok(Replied::Failed(reason))
            }
            Some(Ok(reply)) => {
                self.record_reply(&message_id, started, reply).await?;
                Ok(Replied::Done)
            }
        }
    }

    async fn flush(&mut self, message_id: &str, buffer: &mut String, written: &mut String) -> Result<(), Error> {
        if buffer.is_empty() {
            return Ok(());
        }
        let delta = std::mem::take(buffer);
        written.push_str(&delta);
        let update = ChatEvent::MessageUpdate(MessageUpdate {
            message_id: message_id.to_owned(),
            delta,
        });
        self.append(vec![self.draft(update)]).await?;
        Ok(())
    }

    async fn record_reply(&mut self, message_id: &str, started: bool, reply: Reply) -> Result<(), Error> {
        let mut drafts = Vec::new();
        if !started {
            drafts.push(self.draft(message_start(message_id)));
        }
        let end = MessageEnd {
            message_id: message_id.to_owned(),
            text: reply.text.clone(),
            tool_calls: reply.tool_calls,
            one_shot: reply.one_shot,
            ..MessageEnd::default()
        };
        drafts.push(self.draft(ChatEvent::MessageEnd(end)));
        if let Some(usage) = reply.usage {
            drafts.push(self.draft(ChatEvent::Usage(usage)));
        }
        self.append(drafts).await?;
        if !reply.text.trim().is_empty() {
            let (now_ms, _) = self.now();
            let text = preview(&reply.text);
            self.engine
                .metadata
                .touch_session(&self.job.org, &self.session.id, now_ms, &text)
                .await?;
            let seq = self.events.last().map_or(0, |e| e.seq);
            self.announce(FeedEvent::MessageAdded {
                session_id: self.session.id.clone(),
                seq,
                preview: text,
            })
            .await?;
        }
        // A long turn seals its full pages as it goes (a no-op until a page is full).
        self.seal(SealMode::Full).await;
        Ok(())
    }

    /// Ends the turn and does its bookkeeping.
    async fn finish(&mut self, reason: EndReason, error: Option<&str>) -> Result<Outcome, Error> {
        let state = self.state();
        self.close_interrupted(&state).await?;
        self.end(reason, error).await?;
        Ok(Outcome::Ended(reason))
    }

    async fn end(&mut self, reason: EndReason, error: Option<&str>) -> Result<(), Error> {
        let ended = ChatEvent::AgentEnd(AgentEnd {
            reason,
            error: error.map(str::to_owned),
        });
        // The chat is free (and its turn recorded as ended) before `agent_end` is written, so
        // a client that sends its next message on seeing it is never refused (the next turn still runs after this step:
        // the queue holds the chat's group until this job is acknowledged). Requests of this
        // turn that were never answered can no longer be.
        let metadata = &self.engine.metadata;
        for request in metadata.open_requests(&self.job.org, &self.session.id).await? {
            if request.turn_id.as_deref() == Some(&*self.job.turn_id) {
                metadata
                    .take_request(&self.job.org, &self.session.id, &request.id, None)
                    .await?;
            }
        }
        self.release().await?;
        let status = match reason {
            EndReason::Error => TurnStatus::Failed,
            EndReason::Complete | EndReason::Aborted => TurnStatus::Completed,
        };
        self.record(status, Some(reason.as_str().to_owned())).await?;
        self.append(vec![self.draft(ended)]).await?;
        self.announce(FeedEvent::ProcessingFinished {
            session_id: self.session.id.clone(),
            turn_id: self.job.turn_id.clone(),
            reason,
        })
        .await?;
        self.seal(SealMode::Final).await;
        Ok(())
    }

    /// Seals the chat's pages; idempotent, and a failure only waits for the next seal.
    async fn seal(&self, mode: SealMode) {
        if let Err(e) = self.engine.log.seal(&self.path, mode).await {
            tracing::warn!(path = %self.path, error = %e, "cannot seal the chat's pages now; the next seal will");
        }
    }

    /// Records where the turn is, for `GET /v1/sessions/{id}/turns`.
    async fn record(&self, status: TurnStatus, detail: Option<String>) -> Result<(), Error> {
        let start = self.state().start_seq.unwrap_or(self.job.trigger_seq);
        let record = TurnRecord::at(&self.job.turn_id, start, status, detail, self.engine.clock.now_ms());
        self.engine
            .metadata
            .record_turn(&self.job.org, &self.session.id, &record)
            .await
    }

    async fn release(&self) -> Result<(), Error> {
        self.engine
            .metadata
            .release_turn(&self.job.org, &self.session.id, &self.job.turn_id)
            .await?;
        Ok(())
    }

    async fn announce(&self, event: FeedEvent) -> Result<(), Error> {
        let Some(ws) = &self.session.workspace_id else {
            return Ok(());
        };
        let (_, now) = self.now();
        announce(self.engine.log.as_ref(), &self.job.org, ws, &event, &now).await
    }

    async fn system(&mut self, level: Level, message: &str) -> Result<(), Error> {
        self.append(vec![self.draft(ChatEvent::system(level, message))]).await
    }

    /// An event of this turn.
    fn draft(&self, event: ChatEvent) -> EventDraft {
        EventDraft::new(event, Some(self.job.turn_id.clone()))
    }

    /// Appends events with the step's next producer claim and keeps them in [`Self::events`].
    async fn append(&mut self, drafts: Vec<EventDraft>) -> Result<(), Error> {
        let claim = ProducerClaim {
            id: self.writer.producer.clone(),
            epoch: self.writer.epoch,
            seq: self.writer.seq,
        };
        self.writer.seq += 1;
        let (_, now) = self.now();
        let appended = append_events(
            self.engine.log.as_ref(),
            &self.path,
            &self.session.id,
            &drafts,
            Some(claim),
            &now,
            // Where the step's last read or append left the tail: the append need not read it.
            Some(self.events.last().map_or(self.read_tail, |e| e.seq)),
        )
        .await?;
        if !appended.duplicate && self.own_tail.load(Ordering::Acquire) + 1 == appended.first {
            self.own_tail.store(appended.last, Ordering::Release);
        }
        for (draft, seq) in drafts.into_iter().zip(appended.first..) {
            self.events.push(Event {
                v: spool_domain::session::EVENT_VERSION,
                seq,
                ts: now.clone(),
                session_id: self.session.id.clone(),
                kind: draft.event.kind(),
                event: draft.event,
                client_message_id: draft.client_message_id,
                turn_id: draft.turn_id,
            });
        }
        Ok(())
    }
}

/// `message_start` of an agent message.
fn message_start(message_id: &str) -> ChatEvent {
    ChatEvent::MessageStart(MessageStart {
        message_id: message_id.to_owned(),
        role: Role::Assistant,
    })
}

/// `tool_end` of a call that failed or never ran.
fn tool_failed(call_id: &str, tool: &str, error: &str) -> ChatEvent {
    ChatEvent::ToolEnd(ToolEnd {
        tool_call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        result: None,
        error: Some(error.to_owned()),
        declined: false,
    })
}

/// A sink that hands deltas to the engine's loop.
struct ChannelSink(mpsc::UnboundedSender<String>);

#[async_trait::async_trait]
impl Sink for ChannelSink {
    async fn text(&mut self, delta: &str) -> Result<(), runtime::Error> {
        if !delta.is_empty() {
            // The receiver lives as long as the reply; a send after it is gone is moot.
            let _ = self.0.send(delta.to_owned());
        }
        Ok(())
    }
}

/// Resolves when an abort of the turn that started at `start_seq` appears after `after`.
async fn watch_abort(
    log: Arc<dyn StreamLog>,
    path: StreamPath,
    mut after: u64,
    start_seq: u64,
    wait: Duration,
    own_tail: Arc<AtomicU64>,
) {
    loop {
        match read_events(log.as_ref(), &path, after, 1000).await {
            Ok(page) => {
                let aborted = page.events.iter().any(|e| {
                    e.seq > start_seq
                        && matches!(&e.event, ChatEvent::ControlSubmitted(c) if c.action == ControlAction::Abort)
                });
                if aborted {
                    return;
                }
                after = page.next;
                if page.next < page.tail {
                    continue;
                }
            }
            Err(e) => {
                tracing::warn!(%path, error = %e, "cannot watch for aborts; looking again in a second");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        }
        loop {
            match log.wait(&path, Offset::after(after), wait).await {
                // Only the step's own appends came: nothing to read.
                Ok(WaitOutcome::Ready { tail, closed: false }) if tail.seq() <= own_tail.load(Ordering::Acquire) => {
                    after = tail.seq();
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(%path, error = %e, "cannot wait for aborts; looking again in a second");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    break;
                }
            }
        }
    }
}
