//! The end of a step and of a turn, and how a step appends: with its producer claim, so a
//! retried append is written once and a superseded step is fenced off.

use super::*;

impl Engine {
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
            runtimes: self.runtimes.clone(),
            // Whatever ran it, a job a runner may hold goes with the turn.
            on_runners: true,
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
            host_deadline: None,
            context: None,
            toolbox: None,
            mcp_models: false,
            workspace: WorkspaceOnce::new(),
        };
        let state = TurnState::replay(&step.events, &job.turn_id);
        // A turn nothing asked for (its message never came) has nothing to end.
        if state.ended || state.start_seq.is_none() {
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

impl Step<'_> {
    /// Ends the turn and does its bookkeeping.
    pub(super) async fn finish(&mut self, reason: EndReason, error: Option<&str>) -> Result<Outcome, Error> {
        let state = self.state();
        self.close_interrupted(&state).await?;
        self.end(reason, error).await?;
        Ok(Outcome::Ended(reason))
    }

    pub(super) async fn end(&mut self, reason: EndReason, error: Option<&str>) -> Result<(), Error> {
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
        // A cancelled turn is a failed one, as the third source design records it ("cancel
        // changes the chat queue item to failed"); its detail says `aborted`.
        let status = match reason {
            EndReason::Error | EndReason::Aborted => TurnStatus::Failed,
            EndReason::Complete => TurnStatus::Completed,
        };
        let workspace = self.workspace().await;
        let keep = workspace
            .as_ref()
            .map_or(spool_chat::session::TURN_RECORD_TTL_MS, |w| w.cleanup.turn_record_ms());
        self.record_kept(status, Some(reason.as_str().to_owned()), keep).await?;
        self.append(vec![self.draft(ended)]).await?;
        // Only now: a step that died before `agent_end` finds the job, and its outcome, again.
        if self.on_runners {
            self.drop_runner_job().await;
        }
        self.announce(|ws| FeedEvent::ProcessingFinished {
            chat_id: self.session.id.clone(),
            chat_title: self.session.title.clone(),
            agent_name: self.agent_name(),
            workspace_id: ws,
            reason,
        })
        .await?;
        if reason == EndReason::Error
            && let Some(workspace) = &workspace
        {
            self.notify(workspace, NotificationKind::Failure, error.unwrap_or("the turn failed"))
                .await;
        }
        self.seal_when_idle().await;
        Ok(())
    }

    /// The chat's workspace, if it has one that still exists and can be read now: what it is
    /// read for here (how long to keep a record, whom to tell) must not stop a turn, so a
    /// failed read is logged and taken as no workspace.
    pub(super) async fn workspace(&self) -> Option<Workspace> {
        match self.workspace_record().await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(org = %self.job.org, workspace = ?self.session.workspace_id, error = %e, "cannot read the chat's workspace; its settings are not applied to this step");
                None
            }
        }
    }

    /// The chat's workspace record, read once in the step.
    pub(super) async fn workspace_record(&self) -> Result<Option<Workspace>, Error> {
        workspace_once(
            self.engine.metadata.as_ref(),
            &self.workspace,
            &self.job.org,
            &self.session,
        )
        .await
    }

    /// Tells the workspace's person about `kind`, as its settings ask ([`spool_chat::notifier`]).
    pub(super) async fn notify(&self, workspace: &Workspace, kind: NotificationKind, detail: &str) {
        let (_, now) = self.now();
        let actor = self.agent_name();
        let about = About {
            chat: Some((&self.session.id, &self.session.title)),
            actor: &actor,
            detail,
        };
        spool_chat::notifier::notify(
            self.engine.feeds.as_ref(),
            self.engine.notifier.as_ref(),
            &self.job.org,
            workspace,
            kind,
            about,
            &now,
        )
        .await;
    }

    /// Seals the chat's full pages, and its last page once the chat has been idle a while;
    /// idempotent, and a failure only waits for the next seal.
    pub(super) async fn seal_when_idle(&self) {
        // The tail as this step left it: its last append, `agent_end`.
        let tail = Offset::after(self.events.last().map_or(self.read_tail, |e| e.seq));
        if let Err(e) = self.engine.log.seal_when_idle(&self.path, tail).await {
            tracing::warn!(path = %self.path, error = %e, "cannot seal the chat's pages now; the next seal will");
        }
    }

    /// Records where the turn is, for `GET /v1/sessions/{id}/turns`.
    pub(super) async fn record(&self, status: TurnStatus, detail: Option<String>) -> Result<(), Error> {
        self.record_kept(status, detail, spool_chat::session::TURN_RECORD_TTL_MS)
            .await
    }

    /// [`Self::record`], a finished record kept `keep_ms`.
    async fn record_kept(&self, status: TurnStatus, detail: Option<String>, keep_ms: i64) -> Result<(), Error> {
        let start = self.state().start_seq.unwrap_or(self.job.trigger_seq);
        let record =
            TurnRecord::at(&self.job.turn_id, start, status, detail, self.engine.clock.now_ms()).kept_for(keep_ms);
        self.engine
            .metadata
            .record_turn(&self.job.org, &self.session.id, &record)
            .await
    }

    pub(super) async fn release(&self) -> Result<(), Error> {
        self.engine
            .metadata
            .release_turn(&self.job.org, &self.session.id, &self.job.turn_id)
            .await?;
        Ok(())
    }

    /// Announces `event` (given the workspace) on the chat's workspace's feed, if it has one.
    pub(super) async fn announce(&self, event: impl FnOnce(String) -> FeedEvent) -> Result<(), Error> {
        let Some(ws) = &self.session.workspace_id else {
            return Ok(());
        };
        let (_, now) = self.now();
        announce(self.engine.feeds.as_ref(), &self.job.org, ws, &event(ws.clone()), &now).await
    }

    /// Announces a message of `author_type` added to the chat.
    pub(super) async fn announce_message(&self, author_type: AuthorType) -> Result<(), Error> {
        self.announce(|ws| FeedEvent::MessageAdded {
            chat_id: self.session.id.clone(),
            chat_title: self.session.title.clone(),
            author_type,
            workspace_id: ws,
        })
        .await
    }

    /// The answering agent's name.
    pub(super) fn agent_name(&self) -> String {
        self.agent
            .as_ref()
            .map_or_else(|| "Spool".to_owned(), |a| a.name.clone())
    }

    /// Appends Spool's own note to the chat, and announces it.
    pub(super) async fn system(&mut self, level: Level, message: &str) -> Result<(), Error> {
        self.append(vec![self.draft(ChatEvent::system(level, message))]).await?;
        self.announce_message(AuthorType::System).await
    }

    /// An event of this turn.
    pub(super) fn draft(&self, event: ChatEvent) -> EventDraft {
        EventDraft::new(event, Some(self.job.turn_id.clone()))
    }

    /// Appends events with the step's next producer claim and keeps them in [`Self::events`].
    pub(super) async fn append(&mut self, drafts: Vec<EventDraft>) -> Result<(), Error> {
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
                v: spool_chat::session::EVENT_VERSION,
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

/// A chat's workspace record, read at most once in a step: its settings, budget, context and
/// folder are what they were when the step first needed them.
pub(super) type WorkspaceOnce = tokio::sync::OnceCell<Option<Workspace>>;

/// The workspace of `session`, read into `once` unless it was already.
pub(super) async fn workspace_once(
    metadata: &dyn Metadata,
    once: &WorkspaceOnce,
    org: &str,
    session: &Session,
) -> Result<Option<Workspace>, Error> {
    let Some(ws) = &session.workspace_id else {
        return Ok(None);
    };
    once.get_or_try_init(|| metadata.workspace(org, ws)).await.cloned()
}
