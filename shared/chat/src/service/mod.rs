//! # The chat service: a chat's write side, over ports only
//!
//! (A workspace's write side, its settings, agents and tasks, is [`WorkspaceService`], beside
//! it.)
//!
//! Everything that writes to a chat on a caller's behalf — a person's message ([`message`]; one
//! that answers an agent's question, [`question`]), an answer to a request and a control
//! ([`answer`]), an agent's message, a chat's creation, fork ([`fork`]) and
//! deletion — lives here, once, and takes only the ports it needs: session records, the stream
//! log, the turn queue and a clock. It returns domain results ([`Posted`], [`Answered`]); the
//! HTTP functions parse a request, call one method, and map the result to a response.
//!
//! Every method keeps the chat's invariants: a write is an event in the chat's stream before
//! anything acts on it (a turn queued before its message, which nothing else could find again,
//! waits for it); a chat has at most one pending turn; a retried write (the same
//! `client_message_id`, the same answer) is recognised and answered as the first time; a step
//! a crash interrupts is finished by the next caller (see [`crate::claim`]), or, for a message
//! queued behind a turn without a client id, by its turn's job.

mod answer;
mod attachment;
mod branches;
mod chat_reads;
mod chat_record;
mod command;
mod command_checks;
mod command_retry;
mod fork;
mod keys;
mod mcp;
mod mcp_checks;
mod message;
mod question;
mod reads;
mod runner;
mod task;
mod usage;
mod workspace;

use std::sync::Arc;

pub use answer::{Answered, Submitted};
pub use attachment::{
    AttachmentLimits, Completion, Declared, NewUpload, Received, agent_path, current_files, file_ref, human_size,
};
pub use branches::{Revise, Selected};
pub use chat_record::{ChatChange, ChatRecords, ListedChat};
pub use command::{ActionDone, CommandRequest, Found, Invoked, Planned, Preview, Refused, Resolution};
pub use command_checks::Failure;
pub use fork::{Forked, NewFork};
pub use keys::KeyDirectory;
pub use mcp::{McpServerEdit, McpServerService, McpTest, NewMcpServer, PlacedMcpServer, RunsOn};
pub use message::{Accepted, Message, Posted};
pub use runner::{RunnerFile, RunnerFileBody, RunnerPorts, RunnerService, RunnerView, SUPERSEDED};
pub use task::{NewTask, TaskAuthor, TaskEdit};
pub use usage::{BUDGET_EXCEEDED, BudgetExceeded, UsageService};
pub use workspace::{AgentEdit, NewAgent, WorkspaceService};

use crate::{
    attachment::FileStore,
    claim::{self, ClaimStores, Reconciled},
    event::{AgentMessage, ChatEvent, ControlAction, ControlSubmitted, FeedEvent},
    global::AgentMeta,
    metadata::Metadata,
    session::{
        Event, EventDraft, EventPage, OpenRequest, PendingTurn, RequestKind, Session, TurnRecord, TurnStatus,
        append_events, preview,
    },
    turns::{TurnJob, TurnQueue},
    workspace::{Agent, new_id},
};
use spool_log::{
    aggregate::{Aggregates, Direct},
    clock::{Clock, rfc3339_ms},
    error::Error,
    failpoint::FailPoints,
    port::StreamLog,
    stream::{ContentType, CreateStream, Offset, StreamPath},
};

/// The global chat's session id: every organization has one chat outside workspaces that
/// always exists, where agents may write first.
pub const GLOBAL_SESSION: &str = "global";

/// How old a claim must be before an abort questions it.
const ABORT_GRACE_MS: i64 = 5_000;

/// A chat's write side over its ports.
#[derive(Clone)]
pub struct ChatService {
    metadata: Arc<dyn Metadata>,
    log: Arc<dyn StreamLog>,
    /// Where workspaces' feed events are handed over.
    feeds: Arc<dyn Aggregates>,
    turns: Arc<dyn TurnQueue>,
    clock: Arc<dyn Clock>,
    /// Where workspaces' working directories may be (their command files are read there).
    roots: crate::confine::WorkspaceRoots,
    /// Where chats' files' bytes are.
    files: Arc<dyn FileStore>,
    /// How large files may be and how long their URLs last.
    attachments: AttachmentLimits,
    /// Where a test makes a write stop midway, as a crash would ([`spool_log::failpoint`]).
    fail: Arc<FailPoints>,
}

/// What a new chat is.
#[derive(Debug, Clone, Default)]
pub struct NewChat {
    /// Its workspace (the agent's, when an agent is given).
    pub workspace_id: Option<String>,
    /// The agent it talks to.
    pub agent: Option<Agent>,
    /// Its title ([`crate::session::UNTITLED_CHAT`] when absent).
    pub title: Option<String>,
    /// Its id, when the caller named it beforehand (`/new`); a chat of that id that exists
    /// already is the answer.
    pub id: Option<String>,
    /// Who makes it (the token's subject).
    pub created_by: String,
}

/// An outside agent's message to append.
#[derive(Debug, Clone)]
pub struct AgentPost<'a> {
    /// The agent's name.
    pub author: &'a str,
    /// The text (not blank).
    pub text: &'a str,
    /// Whether it asks the people a question.
    pub ask: bool,
    /// What the agent says about it ([`AgentMeta::new`] checked it).
    pub meta: AgentMeta,
    /// The credential that posts it.
    pub posted_by: &'a str,
}

/// An agent's message, accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPosted {
    /// Its event's seq.
    pub seq: u64,
    /// With `ask`: the question the next person's message answers.
    pub question_id: Option<String>,
}

impl ChatService {
    /// The service over its ports.
    pub fn new(
        metadata: Arc<dyn Metadata>,
        log: Arc<dyn StreamLog>,
        turns: Arc<dyn TurnQueue>,
        files: Arc<dyn FileStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            metadata,
            feeds: Arc::new(Direct(log.clone())),
            log,
            turns,
            clock,
            roots: crate::confine::WorkspaceRoots::none(),
            files,
            attachments: AttachmentLimits::default(),
            fail: Arc::new(FailPoints::default()),
        }
    }

    /// The service, stopping where a test armed one of `fail` ([`spool_log::failpoint`]).
    #[must_use]
    pub fn with_fail_points(mut self, fail: Arc<FailPoints>) -> Self {
        self.fail = fail;
        self
    }

    /// The service, handing workspaces' feed events to `feeds` (appended at once otherwise).
    #[must_use]
    pub fn with_feeds(mut self, feeds: Arc<dyn Aggregates>) -> Self {
        self.feeds = feeds;
        self
    }

    /// The service, holding files to `limits`.
    #[must_use]
    pub fn with_attachment_limits(mut self, limits: AttachmentLimits) -> Self {
        self.attachments = limits;
        self
    }

    /// The service, reading workspaces' command files only under `roots`.
    #[must_use]
    pub fn with_workspace_roots(mut self, roots: crate::confine::WorkspaceRoots) -> Self {
        self.roots = roots;
        self
    }

    /// The organization's session `id` ([`Error::Missing`] if it has none; the global chat is
    /// made on first use).
    pub async fn session(&self, org: &str, id: &str) -> Result<Session, Error> {
        if id == GLOBAL_SESSION {
            let now = self.clock.now_ms();
            return ensure_global_session(self.metadata.as_ref(), self.log.as_ref(), org, now).await;
        }
        self.metadata.session(org, id).await?.ok_or_else(|| Error::Missing {
            what: format!("session `{id}`"),
        })
    }

    /// Makes a chat: its stream, then its record.
    pub async fn create(&self, org: &str, new: NewChat) -> Result<Session, Error> {
        let now = self.clock.now_ms();
        if let Some(id) = &new.id
            && let Some(existing) = self.metadata.session(org, id).await?
        {
            return Ok(existing);
        }
        let session = Session {
            id: new.id.clone().unwrap_or_else(|| new_id("ses")),
            workspace_id: new.agent.as_ref().map(|a| a.workspace_id.clone()).or(new.workspace_id),
            agent_id: new.agent.map(|a| a.id),
            title: new
                .title
                .map_or_else(|| crate::session::UNTITLED_CHAT.to_owned(), |t| crate::names::clean(&t)),
            cli_override: None,
            model: None,
            mode: None,
            global: false,
            capabilities: Vec::new(),
            created_by: new.created_by,
            updated_ms: 0,
            created_ms: now,
            last_active_ms: now,
            preview: String::new(),
            pending_turn: None,
            branch_seq: None,
        };
        session.validate()?;
        let json = ContentType::parse("application/json")?;
        self.log
            .create(&Session::stream(org, &session.id)?, CreateStream::new(json))
            .await?;
        match self.metadata.create_session(org, &session).await {
            Ok(()) => {}
            // A named chat made meanwhile by a concurrent retry: that one is the answer.
            Err(Error::Exists { .. }) if new.id.is_some() => {
                if let Some(existing) = self.metadata.session(org, &session.id).await? {
                    return Ok(existing);
                }
            }
            Err(e) => return Err(e),
        }
        self.announce_created(org, &session).await?;
        tracing::info!(org, session = %session.id, "session created");
        Ok(session)
    }

    /// Announces a new chat on its workspace's feed, if it is in one.
    pub(super) async fn announce_created(&self, org: &str, session: &Session) -> Result<(), Error> {
        if let Some(ws) = &session.workspace_id {
            let event = FeedEvent::ChatCreated {
                chat_id: session.id.clone(),
                chat_title: session.title.clone(),
                workspace_id: ws.clone(),
            };
            self.feed(org, ws, &event).await?;
        }
        Ok(())
    }

    /// Deletes a chat: its files' bytes, its stream, then its records (a retry after a failure
    /// finishes what is left).
    pub async fn remove(&self, org: &str, id: &str) -> Result<(), Error> {
        let workspace = self.metadata.session(org, id).await?.and_then(|s| s.workspace_id);
        self.remove_files(org, id).await?;
        match self.log.delete(&Session::stream(org, id)?).await {
            Ok(()) | Err(Error::NotFound { .. } | Error::Gone { .. }) => {}
            Err(e) => return Err(e),
        }
        crate::history::remove(self.log.as_ref(), org, id).await?;
        self.metadata.delete_session(org, id).await?;
        if let Some(ws) = workspace {
            let event = FeedEvent::ChatDeleted {
                chat_id: id.to_owned(),
                workspace_id: ws.clone(),
            };
            self.feed(org, &ws, &event).await?;
        }
        Ok(())
    }

    /// Appends a `control_submitted`. A turn that waits on a person runs nowhere to see an
    /// abort: its step is queued, to end it (a running step sees the event itself; the queued
    /// one then finds the turn ended). A claim with no turn behind it (a crash between a
    /// message's claim and its append) is released instead: a person aborts because the chat
    /// is stuck. (A claim of the last few seconds is left alone: its message may be on its way,
    /// and then its turn sees the abort.) Names the pending turn it aborts, if any.
    pub async fn control(&self, org: &str, session: &Session, action: ControlAction) -> Result<Submitted, Error> {
        let event = ChatEvent::ControlSubmitted(ControlSubmitted { action });
        let seq = self.append(org, session, EventDraft::new(event, None)).await?;
        self.seal_when_idle(org, session, seq).await;
        let mut turn_id = None;
        if let Some(holder) = &session.pending_turn
            && self.reconcile_claim(org, &session.id, holder, ABORT_GRACE_MS).await? != Reconciled::Released
        {
            self.enqueue_turn(org, &session.id, &holder.turn_id, seq).await?;
            turn_id = Some(holder.turn_id.clone());
        }
        Ok(Submitted { seq, turn_id })
    }

    /// Appends an agent's message (`agent_message`) with what the agent says about it (`meta`);
    /// with `ask`, it opens a question that the next person's message answers.
    pub async fn agent_message(&self, org: &str, session: &Session, post: AgentPost<'_>) -> Result<AgentPosted, Error> {
        let AgentPost {
            author,
            text,
            ask,
            meta,
            posted_by,
        } = post;
        let question_id = ask.then(|| new_id("q"));
        let event = ChatEvent::AgentMessage(AgentMessage {
            author: author.to_owned(),
            text: text.to_owned(),
            ask,
            posted_by: posted_by.to_owned(),
            question_id: question_id.clone(),
            meta,
        });
        let seq = self.append(org, session, EventDraft::new(event, None)).await?;
        self.seal_when_idle(org, session, seq).await;
        if let Some(q) = &question_id {
            let request = OpenRequest {
                id: q.clone(),
                kind: RequestKind::Question,
                turn_id: None,
                opened_seq: seq,
            };
            self.metadata.open_request(org, &session.id, &request).await?;
        }
        self.metadata
            .touch_session(org, &session.id, self.clock.now_ms(), &preview(text))
            .await?;
        Ok(AgentPosted { seq, question_id })
    }

    /// Up to `limit` events of a chat after `after` (a seq), oldest first.
    pub async fn events(&self, org: &str, session: &Session, after: u64, limit: usize) -> Result<EventPage, Error> {
        let path = Session::stream(org, &session.id)?;
        crate::session::read_events(self.log.as_ref(), &path, after, limit).await
    }

    /// The seq of a chat's last event (0 for none).
    pub async fn last_seq(&self, org: &str, session: &Session) -> Result<u64, Error> {
        Ok(self.log.metadata(&Session::stream(org, &session.id)?).await?.tail.seq())
    }

    /// Reconciles the chat's claim `holder` ([`crate::claim`]), if it is older than `grace_ms`.
    pub async fn reconcile_claim(
        &self,
        org: &str,
        session_id: &str,
        holder: &PendingTurn,
        grace_ms: i64,
    ) -> Result<Reconciled, Error> {
        let stores = ClaimStores {
            sessions: self.metadata.as_ref(),
            log: self.log.as_ref(),
            turns: self.turns.as_ref(),
        };
        claim::reconcile(&stores, org, session_id, holder, self.clock.now_ms(), grace_ms).await
    }

    /// Asks the worker for the turn `turn_id` of a chat, triggered by event `seq`: recorded as
    /// queued (unless it is further along already: a resume, a retried message), then queued.
    pub async fn enqueue_turn(&self, org: &str, session_id: &str, turn_id: &str, seq: u64) -> Result<(), Error> {
        let job = TurnJob::new(org, session_id, turn_id, seq);
        let record = TurnRecord::at(turn_id, seq, TurnStatus::Queued, None, self.clock.now_ms());
        self.metadata.record_turn(org, session_id, &record).await?;
        self.turns.enqueue(&job).await
    }

    /// Appends one event to a chat; its seq.
    async fn append(&self, org: &str, session: &Session, draft: EventDraft) -> Result<u64, Error> {
        let path = Session::stream(org, &session.id)?;
        let now = rfc3339_ms(self.clock.now_ms());
        let appended = append_events(self.log.as_ref(), &path, &session.id, &[draft], None, &now, None).await?;
        Ok(appended.first)
    }

    /// After an event that no turn may follow (a turn's end asks itself): the chat's last page
    /// is sealed once the chat has been idle from `seq` on ([`spool_log::port::StreamSealer::seal_when_idle`]).
    /// Best effort: a failure leaves the page hot until the chat's next turn ends.
    async fn seal_when_idle(&self, org: &str, session: &Session, seq: u64) {
        let Ok(path) = Session::stream(org, &session.id) else {
            return;
        };
        if let Err(e) = self.log.seal_when_idle(&path, Offset::after(seq)).await {
            tracing::warn!(%path, error = %e, "cannot ask for the chat's idle seal; its next turn will");
        }
    }

    /// The event with sequence number `seq` of a chat stream.
    async fn event_at(&self, path: &StreamPath, seq: u64) -> Result<Option<Event>, Error> {
        let page = crate::session::read_events(self.log.as_ref(), path, seq.saturating_sub(1), 1).await?;
        Ok(page.events.into_iter().next())
    }

    /// Announces a list-level event on a workspace's feed.
    async fn feed(&self, org: &str, workspace_id: &str, event: &FeedEvent) -> Result<(), Error> {
        let now = rfc3339_ms(self.clock.now_ms());
        crate::manage::announce(self.feeds.as_ref(), org, workspace_id, event, &now).await
    }
}

/// Makes the global chat's stream at `path` (`o/{org}/sessions/global`) unless it exists: a
/// live read of the chat may come before anyone wrote in it, and the chat's record (which
/// [`ensure_global_session`] writes on its first use) is not needed to read it.
pub async fn ensure_global_stream(log: &dyn StreamLog, path: &StreamPath) -> Result<(), Error> {
    log.create(path, CreateStream::new(ContentType::parse("application/json")?))
        .await?;
    Ok(())
}

/// Makes the organization's global chat unless it exists; returns it.
pub async fn ensure_global_session(
    metadata: &dyn Metadata,
    log: &dyn StreamLog,
    org: &str,
    now_ms: i64,
) -> Result<Session, Error> {
    if let Some(session) = metadata.session(org, GLOBAL_SESSION).await? {
        return Ok(session);
    }
    ensure_global_stream(log, &Session::stream(org, GLOBAL_SESSION)?).await?;
    let session = Session {
        id: GLOBAL_SESSION.to_owned(),
        workspace_id: None,
        agent_id: None,
        title: "Global chat".to_owned(),
        cli_override: None,
        model: None,
        mode: None,
        global: true,
        created_by: String::new(),
        updated_ms: 0,
        capabilities: Vec::new(),
        created_ms: now_ms,
        last_active_ms: now_ms,
        preview: String::new(),
        pending_turn: None,
        branch_seq: None,
    };
    match metadata.create_session(org, &session).await {
        Ok(()) => Ok(session),
        Err(Error::Exists { .. }) => metadata
            .session(org, GLOBAL_SESSION)
            .await?
            .ok_or_else(|| Error::Missing {
                what: "the global session".to_owned(),
            }),
        Err(e) => Err(e),
    }
}
