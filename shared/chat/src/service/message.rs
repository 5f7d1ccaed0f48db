//! # A person's message
//!
//! A message claims the chat's pending turn, is appended as `user_message_submitted` naming
//! that turn, and the turn is recorded and queued for the worker; the workspace's feed hears of
//! it. Each step is undone if a later one fails before the append, and finished by a retry
//! (the same `client_message_id`) if one fails after it. A message queued behind a turn
//! (`on_busy: "enqueue"`) without a client id cannot be retried, so its turn's job is queued
//! *before* it is appended and waits for it ([`crate::turns::TurnJob::before_message_ms`]): a crash
//! after the append leaves a message whose turn runs anyway. A message in a chat where an
//! agent asked a question answers the oldest such question instead, and starts no turn
//! (`question.rs`). In a workspace past its monthly token budget a message that would start a
//! turn is refused (`429 budget_exceeded`, [`super::UsageService`]) and nothing is appended.

use serde_json::{Map, Value};

use super::{Answered, ChatService};
use crate::{
    claim::{CLAIM_GRACE_MS, Reconciled},
    event::{ChatEvent, FeedEvent, FileRef, QuestionAnswered, SlashCommandInvoked, UserMessage},
    session::{EventDraft, PendingTurn, RequestKind, Session, TurnRecord, TurnStatus, append_events, preview},
    turns::TurnJob,
    workspace::new_id,
};
use spool_log::{clock::rfc3339_ms, error::Error, failpoint, stream::ProducerClaim};

/// A person's message, checked by the caller (its length, its `client_message_id`'s form).
#[derive(Debug, Clone, Default)]
pub struct Message {
    /// The text.
    pub content: String,
    /// Who sends it (the token's subject).
    pub author: String,
    /// The ids of the chat's completed files it refers to.
    pub files: Vec<String>,
    /// The client's own data.
    pub metadata: Option<Map<String, Value>>,
    /// The client's id for it: a retry with the same id answers the first result.
    pub client_message_id: Option<String>,
    /// Queue it behind a pending turn instead of refusing it.
    pub queue_if_busy: bool,
    /// Context from the person's local companion.
    pub client_context: Option<Value>,
    /// The slash command it is the prompt of: appended just before it, in the same write.
    pub command: Option<SlashCommandInvoked>,
    /// Tools the client declares and runs, for this message's turn ([`ClientTool::check`]ed).
    pub client_tools: Vec<crate::event::ClientTool>,
    /// The earlier message it is a new version of ([`super::Revise`]); its `hidden` is taken
    /// again from the chat's branch once the chat is claimed.
    pub revision: Option<crate::event::Revision>,
}

/// A message accepted: its event's seq and the turn it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The `user_message_submitted` (or, for an answer, `question_answered`) event's seq.
    pub seq: u64,
    /// The turn it queued; none when it answered an agent's question.
    pub turn_id: Option<String>,
    /// Whether it was a retry of an earlier message (the same `client_message_id`).
    pub duplicate: bool,
    /// The question it answered, if any.
    pub answers: Option<String>,
}

/// What became of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    /// Appended; its turn is queued.
    Accepted(Accepted),
    /// Another turn is pending (nothing was appended).
    Busy(PendingTurn),
}

impl ChatService {
    /// Appends a person's message to a chat and asks for the turn it starts.
    pub async fn post_message(&self, org: &str, session: &Session, mut message: Message) -> Result<Posted, Error> {
        let files = self.message_files(org, session, &message.files).await?;
        let open = self.metadata.open_requests(org, &session.id).await?;
        // In the global chat, a plain window onto the agent-first chat, the next message answers
        // Spool's own open question too (elsewhere clients answer with `POST …/question`).
        // A command is never an answer.
        let open = if message.command.is_some() { Vec::new() } else { open };
        if session.global
            && let Some(question) = open
                .iter()
                .find(|r| r.kind == RequestKind::Question && r.turn_id.is_some())
        {
            let answer = ChatEvent::QuestionAnswered(QuestionAnswered {
                question_id: question.id.clone(),
                answer: message.content.clone(),
            });
            match self
                .answer(org, session, RequestKind::Question, &question.id, answer)
                .await?
            {
                Answered::Accepted(done) => {
                    return Ok(Posted::Accepted(Accepted {
                        seq: done.seq,
                        turn_id: done.turn_id,
                        duplicate: false,
                        answers: Some(question.id.clone()),
                    }));
                }
                // The question had its answer already (a crash left it listed, or another
                // message won): this message is a message of its own.
                Answered::Taken | Answered::NotOpen => {}
            }
        }
        // An agent's open question (one no turn of Spool's waits on) is what this answers.
        for question in open
            .iter()
            .filter(|r| r.kind == RequestKind::Question && r.turn_id.is_none())
        {
            if let Some(answered) = self.answer_agent(org, session, question, &message, &files).await? {
                return Ok(Posted::Accepted(answered));
            }
        }
        // A message that would start a turn in a workspace past its monthly token budget is
        // refused before anything is written (answers above start none); a retry of one
        // accepted before is answered as it was.
        let budget = super::UsageService::new(self.metadata.clone(), self.clock.clone())
            .check_budget(org, session.workspace_id.as_deref())
            .await;
        if let Err(refused) = budget
            && !self
                .sent_before(org, session, message.client_message_id.as_deref())
                .await?
        {
            return Err(refused);
        }
        let mut turn_id = new_id("turn");
        let mut claimed = None;
        if !message.queue_if_busy {
            match self.claim(org, session, &turn_id, &message).await? {
                Claim::Claimed => {
                    claimed = Some(turn_id.clone());
                    // A new version's branch, read again now that no other branch event can be
                    // written until this one is.
                    let cmid = message.client_message_id.clone();
                    if let Some(revision) = message.revision.as_mut()
                        && let Err(e) = self.rebranch(org, session, revision, cmid.as_deref()).await
                    {
                        self.metadata.release_turn(org, &session.id, &turn_id).await?;
                        return Err(e);
                    }
                }
                Claim::Retry(adopted) => turn_id = adopted,
                Claim::Busy(holder) => return Ok(Posted::Busy(holder)),
            }
        }
        let content = user_message(&message, files, None);
        let preview_of = message
            .command
            .as_ref()
            .map_or_else(|| message.content.clone(), |c| c.invoked_as.clone());
        let mut drafts = Vec::with_capacity(2);
        if let Some(command) = message.command {
            drafts.push(EventDraft {
                event: ChatEvent::SlashCommandInvoked(command),
                client_message_id: message.client_message_id.clone(),
                turn_id: Some(turn_id.clone()),
            });
        }
        // The message's place in the write: after its command, if it has one.
        let offset = drafts.len() as u64;
        drafts.push(EventDraft {
            event: ChatEvent::UserMessageSubmitted(content),
            client_message_id: message.client_message_id.clone(),
            turn_id: Some(turn_id.clone()),
        });
        let path = Session::stream(org, &session.id)?;
        let now = self.clock.now_ms();
        // Without a client id, a message queued behind a turn has nothing a retry could find it
        // by: its job goes first, and waits for it. (Its producer, named after its turn, makes
        // a store's retry of the append harmless.)
        let queued_first = message.queue_if_busy && message.client_message_id.is_none();
        let producer = match &message.client_message_id {
            Some(cmid) => Some(format!("msg:{cmid}")),
            None => queued_first.then(|| format!("queued:{turn_id}")),
        }
        .map(|id| ProducerClaim { id, epoch: 0, seq: 0 });
        // The tail the job goes from is where the append tries first.
        let mut tail = None;
        if queued_first {
            let before = self.last_seq(org, session).await?;
            let mut job = TurnJob::new(org, &session.id, &turn_id, before);
            job.before_message_ms = Some(now);
            self.turns.enqueue(&job).await?;
            self.fail.check(failpoint::MESSAGE_QUEUED_FIRST)?;
            tail = Some(before);
        }
        let appended = match append_events(
            self.log.as_ref(),
            &path,
            &session.id,
            &drafts,
            producer,
            &rfc3339_ms(now),
            tail,
        )
        .await
        {
            Ok(appended) => appended,
            Err(e) => {
                if let Some(turn) = &claimed {
                    self.metadata.release_turn(org, &session.id, turn).await?;
                }
                return Err(e);
            }
        };
        if appended.duplicate {
            // A retry: the first attempt's answer, its turn queued again in case that attempt
            // died before queueing it (the queue drops a turn it already has).
            let first = self.first_attempt(org, session, &path, appended.first + offset).await?;
            if let Some(claim) = &claimed
                && first.turn_id.as_ref() != Some(claim)
            {
                // This retry claimed the chat after the first attempt's turn ended: give it back.
                self.metadata.release_turn(org, &session.id, claim).await?;
            }
            return Ok(Posted::Accepted(first));
        }
        let seq = appended.first + offset;
        self.fail.check(failpoint::MESSAGE_APPENDED)?;
        if queued_first {
            let record = TurnRecord::at(&turn_id, seq, TurnStatus::Queued, None, now);
            self.metadata.record_turn(org, &session.id, &record).await?;
        } else {
            self.enqueue_turn(org, &session.id, &turn_id, seq).await?;
        }
        let preview = preview(&preview_of);
        self.metadata.touch_session(org, &session.id, now, &preview).await?;
        if let Some(ws) = &session.workspace_id {
            let event = FeedEvent::MessageAdded {
                chat_id: session.id.clone(),
                chat_title: session.title.clone(),
                author_type: crate::event::AuthorType::User,
                workspace_id: ws.clone(),
            };
            self.feed(org, ws, &event).await?;
        }
        Ok(Posted::Accepted(Accepted {
            seq,
            turn_id: Some(turn_id),
            duplicate: false,
            answers: None,
        }))
    }

    /// Whether the chat's recent events hold a message sent with `client_message_id`.
    async fn sent_before(&self, org: &str, session: &Session, client_message_id: Option<&str>) -> Result<bool, Error> {
        match client_message_id {
            Some(cmid) => Ok(self.sent_at(org, session, cmid).await?.is_some()),
            None => Ok(false),
        }
    }

    /// The seq of the message sent with `cmid`, if the chat's recent events hold it.
    pub(super) async fn sent_at(&self, org: &str, session: &Session, cmid: &str) -> Result<Option<u64>, Error> {
        let path = Session::stream(org, &session.id)?;
        let tail = self.log.metadata(&path).await?.tail.seq();
        let window = super::command_retry::RETRY_WINDOW;
        let page =
            crate::session::read_events(self.log.as_ref(), &path, tail.saturating_sub(window), window as usize).await?;
        Ok(page
            .events
            .iter()
            .find(|e| {
                e.client_message_id.as_deref() == Some(cmid) && matches!(e.event, ChatEvent::UserMessageSubmitted(_))
            })
            .map(|e| e.seq))
    }

    /// What the first attempt of a retried message, appended at `seq`, was answered: its seq,
    /// its turn (queued again, in case that attempt died before queueing it; the queue drops a
    /// turn it already has) and the question it answered.
    pub(super) async fn first_attempt(
        &self,
        org: &str,
        session: &Session,
        path: &spool_log::stream::StreamPath,
        seq: u64,
    ) -> Result<Accepted, Error> {
        let first = self.event_at(path, seq).await?;
        let turn_id = first.as_ref().and_then(|e| e.turn_id.clone());
        let answers = first.and_then(|e| match e.event {
            ChatEvent::UserMessageSubmitted(m) => m.answers,
            _ => None,
        });
        if let Some(turn_id) = &turn_id {
            self.enqueue_turn(org, &session.id, turn_id, seq).await?;
        }
        Ok(Accepted {
            seq,
            turn_id,
            duplicate: true,
            answers,
        })
    }

    /// Claims the chat's pending turn for `turn_id`. A claim a crash may have left behind (its
    /// message never appended, or its turn never queued) is questioned once it is old enough;
    /// a retry of the very message that holds the claim takes that turn's id, so whichever
    /// attempt's append wins, the event names the claimed turn.
    async fn claim(&self, org: &str, session: &Session, turn_id: &str, message: &Message) -> Result<Claim, Error> {
        let claim = PendingTurn {
            turn_id: turn_id.to_owned(),
            client_message_id: message.client_message_id.clone(),
            since_ms: self.clock.now_ms(),
        };
        let same_message = |holder: &PendingTurn| {
            holder.client_message_id.is_some() && holder.client_message_id == message.client_message_id
        };
        let mut result = self.metadata.claim_turn(org, &session.id, &claim).await?;
        if let Err(holder) = &result
            && !same_message(holder)
            && self.reconcile_claim(org, &session.id, holder, CLAIM_GRACE_MS).await? == Reconciled::Released
        {
            result = self.metadata.claim_turn(org, &session.id, &claim).await?;
        }
        Ok(match result {
            Ok(()) => Claim::Claimed,
            Err(holder) if same_message(&holder) => Claim::Retry(holder.turn_id),
            Err(holder) => Claim::Busy(holder),
        })
    }
}

/// What a message's claim of the chat found.
enum Claim {
    /// The chat's pending turn is this message's.
    Claimed,
    /// A retry of the message that holds the claim: its turn.
    Retry(String),
    /// Another turn holds it.
    Busy(PendingTurn),
}

/// The `user_message_submitted` payload of `message`, with its `files`, answering `answers`.
pub(super) fn user_message(message: &Message, files: Vec<FileRef>, answers: Option<String>) -> UserMessage {
    UserMessage {
        content: message.content.clone(),
        author: message.author.clone(),
        files,
        metadata: message.metadata.clone(),
        client_context: message.client_context.clone().filter(|c| !c.is_null()),
        answers,
        client_tools: message.client_tools.clone(),
        revision: message.revision.clone(),
    }
}
