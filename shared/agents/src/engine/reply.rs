//! A reply from the runtime, streamed as events: deltas gathered for `flush_every`, the
//! whole step watched for an abort, the runtime's future dropped when one comes.

use super::*;

impl Step<'_> {
    pub(super) fn runtime_request(&self, messages: Vec<runtime::Message>) -> Request {
        let builtin = self.agent.as_ref().is_none_or(|a| a.builtin);
        let own = self.agent.as_ref().map(|a| a.instruction.clone()).unwrap_or_default();
        // The built-in agent's instruction is Spool's (versioned with it); a workspace's own
        // instruction for it extends it and cannot replace it.
        let mut instruction = if builtin {
            spool_instruction(&own, &self.engine.settings.knowledge_base_url)
        } else {
            own.clone()
        };
        if let Some(mode) = &self.session.mode {
            instruction.push_str(&mode_note(mode));
        }
        // The model: the turn's command's, else the chat's (`/model`), else the agent's.
        let command_model = self.events.iter().rev().find_map(|e| match &e.event {
            ChatEvent::SlashCommandInvoked(c) if e.turn_id.as_deref() == Some(&self.job.turn_id) => c.model.clone(),
            _ => None,
        });
        Request {
            instruction,
            agent_instruction: own,
            messages,
            tools: {
                let in_workspace = self.session.workspace_id.is_some();
                let mut specs = tools::specs(builtin && in_workspace);
                // Outside a workspace (the global chat) no workspace action is offered.
                specs.retain(|s| in_workspace || !tools::needs_workspace(&s.name));
                if self.can_capture() {
                    specs.push(tools::capture_spec());
                }
                specs.extend(tools::client_specs(&self.client_tools()));
                specs
            },
            model: command_model
                .or_else(|| self.session.model.clone())
                .or_else(|| self.agent.as_ref().and_then(|a| a.model.clone())),
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
                workspace_name: None,
                working_dir: None,
                builtin,
            },
            workspace_context: None,
            stamps: Vec::new(),
            files: Vec::new(),
            file_access: None,
            mcp_servers: Vec::new(),
            mcp_listed: std::collections::BTreeMap::new(),
        }
    }

    /// The workspace's context, in a workspace's chat (made once per step).
    pub(super) async fn workspace_context(&mut self) -> Result<Option<String>, Error> {
        let Some(ws) = self.session.workspace_id.clone() else {
            return Ok(None);
        };
        if self.context.is_none() {
            let capabilities = self.runtimes.capabilities();
            let text = crate::context::workspace_context(
                self.engine.metadata.as_ref(),
                self.engine.notifier.as_ref(),
                &self.job.org,
                &ws,
                &capabilities,
            )
            .await?;
            self.context = Some(text);
        }
        Ok(self.context.clone())
    }

    /// The chat as this turn sees it: as it was when the turn's message came, and what the turn
    /// added since (a message queued behind it, `on_busy: enqueue`, is the next turn's).
    pub(super) fn seen(&self) -> Vec<Event> {
        let start = self.state().start_seq.unwrap_or(0);
        self.events
            .iter()
            .filter(|e| e.seq <= start || e.turn_id.as_deref() == Some(self.job.turn_id.as_str()))
            .cloned()
            .collect()
    }

    /// Whether the chat lets a client's context into the prompt.
    pub(super) fn with_context(&self) -> bool {
        self.session.capabilities.iter().any(|c| c == CONTEXT_CAPABILITY)
    }

    /// What the runtime is asked for its next reply: the chat as it was when this turn's
    /// message came and what this turn added since, with what a runtime that works on disk
    /// needs (the workspace's context, the chat's files).
    pub(super) async fn request_for(&mut self, runtime: &dyn Runtime) -> Result<Request, Error> {
        let (messages, stamps) = conversation_timed(&self.seen(), self.with_context());
        let mut request = self.runtime_request(messages);
        request.stamps = stamps;
        // A runtime that works on disk (a CLI) gets the context file and the chat's files; a
        // model reads the context through its tool, only when it asks.
        if runtime.works_on_disk() {
            request.workspace_context = self.workspace_context().await?;
            request.mcp_servers = self.mcp_endpoints().await?;
            request.mcp_listed = self.mcp_listed(&request.mcp_servers).await;
        } else {
            request.tools.extend(self.toolbox().await?.specs());
        }
        if let Some(workspace) = self.workspace_record().await? {
            request.context.working_dir = workspace.working_dir;
            request.context.workspace_name = Some(workspace.name);
        }
        if let Some(store) = &self.engine.files {
            let access = FileAccess {
                store: store.clone(),
                org: self.job.org.clone(),
                session_id: self.session.id.clone(),
            };
            if runtime.inline_files() {
                crate::files::inline(&mut request.messages, &access, self.engine.settings.inline).await?;
            }
            if runtime.works_on_disk() {
                let records = self
                    .engine
                    .metadata
                    .attachments(&self.job.org, &self.session.id)
                    .await?;
                request.files = crate::files::current(records);
                request.file_access = Some(access);
            }
        }
        Ok(request)
    }

    /// One reply of the runtime, streamed into events, raced against an abort.
    pub(super) async fn reply(&mut self, runtime: &dyn Runtime) -> Result<Replied, Error> {
        let request = self.request_for(runtime).await?;
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
        let host_deadline = self.host_deadline;
        let host = async move {
            match host_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(host);
        let mut carried_over = false;
        let outcome = {
            let respond = runtime.respond(&request, &mut sink);
            tokio::pin!(respond);
            loop {
                tokio::select! {
                    biased;
                    () = &mut abort => break None,
                    // The host is about to stop: end here, cleanly, and let a new job carry on.
                    () = &mut host => {
                        carried_over = true;
                        break None;
                    }
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
            None if carried_over => {
                self.end_cut(started, message_id, written, false).await?;
                Ok(Replied::CarriedOver)
            }
            None => {
                self.end_cut(started, message_id, written, true).await?;
                Ok(Replied::Aborted)
            }
            Some(Err(runtime::Error::Store(e))) => Err(e),
            Some(Err(runtime::Error::Failed(reason))) => {
                self.end_cut(started, message_id, written, false).await?;
                Ok(Replied::Failed(reason))
            }
            Some(Ok(reply)) => {
                self.record_reply(&message_id, started, reply).await?;
                Ok(Replied::Done)
            }
        }
    }

    /// Ends a reply cut short, with what it wrote, if it had begun: `aborted` by a person, or
    /// else interrupted (a failure, or the host's deadline).
    async fn end_cut(
        &mut self,
        started: bool,
        message_id: String,
        written: String,
        aborted: bool,
    ) -> Result<(), Error> {
        if !started {
            return Ok(());
        }
        let end = MessageEnd {
            message_id,
            text: written,
            aborted,
            interrupted: !aborted,
            ..MessageEnd::default()
        };
        self.append(vec![self.draft(ChatEvent::MessageEnd(end))]).await?;
        Ok(())
    }

    pub(super) async fn flush(
        &mut self,
        message_id: &str,
        buffer: &mut String,
        written: &mut String,
    ) -> Result<(), Error> {
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

    pub(super) async fn record_reply(&mut self, message_id: &str, started: bool, reply: Reply) -> Result<(), Error> {
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
            self.engine.metrics.record(spool_log::metrics::Metric::ModelTokens {
                input: usage.input_tokens,
                output: usage.output_tokens,
            });
            drafts.push(self.draft(ChatEvent::Usage(usage)));
        }
        self.append(drafts).await?;
        self.record_usage().await;
        if !reply.text.trim().is_empty() {
            let (now_ms, _) = self.now();
            let text = preview(&reply.text);
            self.engine
                .metadata
                .touch_session(&self.job.org, &self.session.id, now_ms, &text)
                .await?;
            self.announce_message(AuthorType::Agent).await?;
        }
        // Full pages are sealed as appends cross them (the log asks its seal scheduler), the
        // rest when the turn ends and the chat goes idle: nothing to seal here.
        Ok(())
    }
}

/// `message_start` of an agent message.
pub(super) fn message_start(message_id: &str) -> ChatEvent {
    ChatEvent::MessageStart(MessageStart {
        message_id: message_id.to_owned(),
        role: Role::Assistant,
    })
}

/// What an agent is told of the chat's mode (`/mode`).
pub(super) fn mode_note(mode: &str) -> String {
    let mut note = format!("\n\nThis chat is in `{mode}` mode (the person set it with /mode).");
    if mode.eq_ignore_ascii_case("plan") {
        note.push_str(" Propose a plan (propose_plan) and wait for the person's approval before you act.");
    }
    note
}

/// A sink that hands deltas to the engine's loop.
pub(super) struct ChannelSink(mpsc::UnboundedSender<String>);

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
pub(super) async fn watch_abort(
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
                Ok(WaitOutcome::Ready {
                    tail, closed: false, ..
                }) if tail.seq() <= own_tail.load(Ordering::Acquire) => {
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

/// What built-in agents were given as their instruction before Spool's was in the code: it
/// is Spool's now, so it extends nothing.
const OLD_BUILTIN_INSTRUCTION: &str =
    "You are Spool, the assistant that manages this workspace: its chats, agents and tasks.";

/// The built-in agent's instruction: Spool's own (pointing to the knowledge base at
/// `knowledge_base`), then the workspace's extension of it, if any.
pub(crate) fn spool_instruction(extension: &str, knowledge_base: &str) -> String {
    let mut text = include_str!("../spool_instruction.md").replace("{knowledge_base}", knowledge_base);
    let extension = extension.trim();
    if !extension.is_empty() && extension != OLD_BUILTIN_INSTRUCTION {
        text.push_str("\n# This workspace's instruction for you\n\n");
        text.push_str(extension);
        text.push('\n');
    }
    text
}
