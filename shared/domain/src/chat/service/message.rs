//! # A person's message
//!
//! A message claims the chat's pending turn, is appended as `user_message_submitted` naming
//! that turn, and the turn is recorded and queued for the worker; the workspace's feed hears of
//! it. Each step is undone if a later one fails before the append, and finished by a retry
//! (the same `client_message_id`) if one fails after it. A message in a chat where an agent
//! asked a question answers the oldest such question instead, and starts no turn.

use serde_json::{Map, Value};

use super::{Answered, ChatService};
use crate::{
    Error, FeedEvent, OpenRequest, PendingTurn, ProducerClaim, RequestKind, Session,
    chat::event::{ChatEvent, QuestionAnswered, SlashCommandInvoked, UserMessage},
    claim::{CLAIM_GRACE_MS, Reconciled},
    clock::rfc3339_ms,
    session::{EventDraft, append_events, preview},
    workspace::new_id,
};

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
    pub client_tools: Vec<crate::chat::event::ClientTool>,
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
    pub async fn post_message(&self, org: &str, session: &Session, message: Message) -> Result<Posted, Error> {
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
        let mut answers = None;
        for request in open {
            if request.kind == RequestKind::Question
                && request.turn_id.is_none()
                && let Some(taken) = self
                    .metadata
                    .take_request(org, &session.id, &request.id, Some(RequestKind::Question))
                    .await?
            {
                answers = Some(taken);
                self.fail.check(crate::failpoint::ANSWER_MIDWAY)?;
                break;
            }
        }
        let mut turn_id = answers.is_none().then(|| new_id("turn"));
        let mut claimed = None;
        if let Some(wanted) = &turn_id
            && !message.queue_if_busy
        {
            match self.claim(org, session, wanted, &message).await? {
                Claim::Claimed => claimed = Some(wanted.clone()),
                Claim::Retry(adopted) => turn_id = Some(adopted),
                Claim::Busy(holder) => {
                    self.reopen(org, session, answers.as_ref()).await?;
                    return Ok(Posted::Busy(holder));
                }
            }
        }
        let content = UserMessage {
            content: message.content.clone(),
            author: message.author,
            files,
            metadata: message.metadata,
            client_context: message.client_context.filter(|c| !c.is_null()),
            answers: answers.as_ref().map(|q| q.id.clone()),
            client_tools: message.client_tools,
        };
        let preview_of = message
            .command
            .as_ref()
            .map_or_else(|| message.content.clone(), |c| c.invoked_as.clone());
        let mut drafts = Vec::with_capacity(2);
        if let Some(command) = message.command {
            drafts.push(EventDraft {
                event: ChatEvent::SlashCommandInvoked(command),
                client_message_id: message.client_message_id.clone(),
                turn_id: turn_id.clone(),
            });
        }
        // The message's place in the write: after its command, if it has one.
        let offset = drafts.len() as u64;
        drafts.push(EventDraft {
            event: ChatEvent::UserMessageSubmitted(content),
            client_message_id: message.client_message_id.clone(),
            turn_id: turn_id.clone(),
        });
        let producer = message.client_message_id.as_ref().map(|cmid| ProducerClaim {
            id: format!("msg:{cmid}"),
            epoch: 0,
            seq: 0,
        });
        let path = Session::stream(org, &session.id)?;
        let now = self.clock.now_ms();
        let appended = match append_events(
            self.log.as_ref(),
            &path,
            &session.id,
            &drafts,
            producer,
            &rfc3339_ms(now),
            None,
        )
        .await
        {
            Ok(appended) => appended,
            Err(e) => {
                self.reopen(org, session, answers.as_ref()).await?;
                if let Some(turn) = &claimed {
                    self.metadata.release_turn(org, &session.id, turn).await?;
                }
                return Err(e);
            }
        };
        if appended.duplicate {
            // The first message's answer: its seq and its turn, queued again in case the first
            // attempt failed after its append (the queue drops a turn it already has).
            let turn = self.event_at(&path, appended.first).await?.and_then(|e| e.turn_id);
            if let Some(claim) = &claimed
                && turn.as_ref() != Some(claim)
            {
                // This retry claimed the chat after the first attempt's turn ended: give it back.
                self.metadata.release_turn(org, &session.id, claim).await?;
            }
            // A retry: the first attempt answered whatever it answered.
            self.reopen(org, session, answers.as_ref()).await?;
            if let Some(turn_id) = &turn {
                self.enqueue_turn(org, &session.id, turn_id, appended.first + offset)
                    .await?;
            }
            return Ok(Posted::Accepted(Accepted {
                seq: appended.first + offset,
                turn_id: turn,
                duplicate: true,
                answers: None,
            }));
        }
        let seq = appended.first + offset;
        self.fail.check(crate::failpoint::MESSAGE_APPENDED)?;
        if let Some(turn_id) = &turn_id {
            self.enqueue_turn(org, &session.id, turn_id, seq).await?;
        }
        let preview = preview(&preview_of);
        self.metadata.touch_session(org, &session.id, now, &preview).await?;
        if let Some(ws) = &session.workspace_id {
            let event = FeedEvent::MessageAdded {
                chat_id: session.id.clone(),
                chat_title: session.title.clone(),
                author_type: crate::chat::event::AuthorType::User,
                workspace_id: ws.clone(),
            };
            self.feed(org, ws, &event).await?;
        }
        Ok(Posted::Accepted(Accepted {
            seq,
            turn_id,
            duplicate: false,
            answers: answers.map(|q| q.id),
        }))
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

    /// Opens again the agent's question a message took but did not answer after all.
    async fn reopen(&self, org: &str, session: &Session, question: Option<&OpenRequest>) -> Result<(), Error> {
        match question {
            Some(question) => self.metadata.open_request(org, &session.id, question).await,
            None => Ok(()),
        }
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
