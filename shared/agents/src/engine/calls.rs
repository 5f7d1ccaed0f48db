//! A step's tool calls: what a crashed step left open is ended, a call that needs a
//! person is asked (and the step waits), an approved or one-shot call and every action run.

use super::*;

impl Step<'_> {
    /// The person whose message or command started this turn (their token subject), if a
    /// person's did: an outside agent's message or a scheduled turn has none.
    pub(super) fn person(&self) -> Option<String> {
        let start = self.state().start_seq.unwrap_or_else(|| self.trigger_seq());
        let author = match &self.events.iter().find(|e| e.seq == start)?.event {
            ChatEvent::UserMessageSubmitted(m) => &m.author,
            ChatEvent::SlashCommandInvoked(c) => &c.author,
            _ => return None,
        };
        (!author.is_empty()).then(|| author.clone())
    }

    /// Whether the latest reply's calls are a CLI agent's actions: run at once, and the last
    /// word of the turn.
    pub(super) fn last_reply_one_shot(&self) -> bool {
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
    pub(super) async fn close_interrupted(&mut self, state: &TurnState) -> Result<(), Error> {
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
    pub(super) async fn resolve(
        &mut self,
        call: &ToolCall,
        state: &TurnState,
        one_shot: bool,
    ) -> Result<Resolution, Error> {
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
            Some(Kind::Action { .. }) if call.name == tools::PROPOSE_CAPTURE && !self.can_capture() => {
                let error =
                    "this chat cannot save into the person's notes: no companion enabled `capture_ingest` for it";
                let end = tool_failed(&call.id, &call.name, error);
                self.append(vec![self.draft(end)]).await?;
                Ok(Resolution::Done)
            }
            // Never offered outside a workspace: refused at once, not after an approval.
            Some(Kind::Action { .. }) if self.session.workspace_id.is_none() && tools::needs_workspace(&call.name) => {
                let error = format!(
                    "`{}` acts on a workspace and this chat is in none; open a chat of the workspace to do it there",
                    call.name
                );
                let end = tool_failed(&call.id, &call.name, &error);
                self.append(vec![self.draft(end)]).await?;
                Ok(Resolution::Done)
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
                            error: Some(tools::DECLINED.to_owned()),
                            declined: true,
                            server: None,
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
                                server: None,
                            });
                            self.request(RequestKind::Approval, &call.id, asked).await?;
                        }
                        Ok(Resolution::Wait)
                    }
                }
            }
            Some(Kind::Action { .. }) => self.run_action(call).await,
            // A tool the client declared for this turn: the client runs it, the turn waits.
            None if self.client_tools().iter().any(|t| t.name == call.name) => {
                // Every client call of the reply is asked at once: the front end runs them
                // together, and sends their outputs as they come.
                let client = self.client_tools();
                let asks: Vec<ToolCall> = state
                    .last_calls
                    .iter()
                    .chain(std::iter::once(call))
                    .filter(|c| client.iter().any(|t| t.name == c.name) && !state.requested.contains(&c.id))
                    .cloned()
                    .collect();
                let mut asked_now = std::collections::HashSet::new();
                for c in asks {
                    if !asked_now.insert(c.id.clone()) {
                        continue;
                    }
                    let asked = ChatEvent::ToolStart(ToolStart {
                        tool_call_id: c.id.clone(),
                        tool: c.name.clone(),
                        arguments: c.arguments.clone(),
                        client: true,
                        // The client named it: shown as the client's, never as a workspace's.
                        server: client
                            .iter()
                            .find(|t| t.name == c.name)
                            .and_then(|t| t.server.as_ref())
                            .map(|s| format!("companion:{s}")),
                    });
                    self.request(RequestKind::ToolOutput, &c.id, asked).await?;
                }
                Ok(Resolution::Wait)
            }
            None => {
                if let Some(resolution) = self.resolve_mcp(call, state).await? {
                    return Ok(resolution);
                }
                let error = format!("there is no tool or action `{}`", call.name);
                let note = ChatEvent::system(Level::Error, format!("The agent asked for {error}."));
                let end = tool_failed(&call.id, &call.name, &error);
                self.append(vec![self.draft(end), self.draft(note)]).await?;
                Ok(Resolution::Done)
            }
        }
    }

    /// Whether the chat's companion enabled `capture_ingest`: its agents may propose captures.
    pub(super) fn can_capture(&self) -> bool {
        self.session.capabilities.iter().any(|c| c == tools::CAPTURE_CAPABILITY)
    }

    /// The tools the client declared with the message that started this turn (every step of
    /// the turn: a continuation is triggered by an answer, not by the message).
    pub(super) fn client_tools(&self) -> Vec<spool_chat::event::ClientTool> {
        self.events
            .iter()
            .find_map(|e| match &e.event {
                ChatEvent::UserMessageSubmitted(m) if e.turn_id.as_deref() == Some(&*self.job.turn_id) => {
                    Some(m.client_tools.clone())
                }
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Opens a request the person must answer, then announces it. The request is opened first,
    /// so a crash in between leaves nothing an answer cannot find.
    pub(super) async fn request(&mut self, kind: RequestKind, id: &str, asked: ChatEvent) -> Result<(), Error> {
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
        let detail = match &asked {
            ChatEvent::AskQuestion(q) => q.question.clone(),
            ChatEvent::PlanApprovalRequired(p) => format!("Review this plan:\n\n{}", p.plan),
            ChatEvent::ToolApprovalRequired(a) => format!("Approve or decline `{}` ({})", a.tool, a.arguments),
            _ => String::new(),
        };
        let summary = match &asked {
            ChatEvent::AskQuestion(q) => q.question.as_str(),
            ChatEvent::PlanApprovalRequired(p) => p.plan.as_str(),
            _ => detail.as_str(),
        };
        let summary: String = summary
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        self.append(vec![self.draft(asked)]).await?;
        // A client's tool waits on the client, not on a person: nobody is told.
        if kind == RequestKind::ToolOutput {
            return Ok(());
        }
        // On the workspace's feed (and so to its webhooks: `input.required`); a failure to
        // announce never stops the turn.
        let announced = self
            .announce(|ws| FeedEvent::InputRequired {
                chat_id: self.session.id.clone(),
                chat_title: self.session.title.clone(),
                agent_name: self.agent_name(),
                kind,
                request_id: id.to_owned(),
                summary,
                workspace_id: ws,
            })
            .await;
        if let Err(e) = announced {
            tracing::warn!(session = %self.session.id, error = %e, "cannot announce the request on the workspace's feed");
        }
        if let Some(workspace) = self.workspace().await {
            self.notify(&workspace, NotificationKind::Question, &detail).await;
        }
        Ok(())
    }

    pub(super) async fn run_action(&mut self, call: &ToolCall) -> Result<Resolution, Error> {
        let start = ChatEvent::ToolStart(ToolStart {
            tool_call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            client: false,
            server: None,
        });
        self.append(vec![self.draft(start)]).await?;
        let workspace_context = self.workspace_context().await?;
        let actor = self.agent_name();
        let person = self.person();
        let context = ActionContext {
            chats: &self.engine.chats,
            workspaces: &self.engine.workspaces,
            org: &self.job.org,
            session_id: &self.session.id,
            workspace_id: self.session.workspace_id.as_deref(),
            builtin: self.agent.as_ref().is_none_or(|a| a.builtin),
            actor: &actor,
            person: person.as_deref(),
            workspace_context: workspace_context.as_deref(),
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
                    server: None,
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
}

/// `tool_end` of a call that failed or never ran.
pub(super) fn tool_failed(call_id: &str, tool: &str, error: &str) -> ChatEvent {
    ChatEvent::ToolEnd(ToolEnd {
        tool_call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        result: None,
        error: Some(error.to_owned()),
        declined: false,
        server: None,
    })
}
