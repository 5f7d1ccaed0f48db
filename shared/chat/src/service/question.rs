//! # A person's message that answers an agent's question
//!
//! An agent's `ask` opens a question no turn of Spool's waits on; the next person's message
//! answers it (`payload.answers`) and starts no turn. The message is the record: it is appended
//! first, then the question is closed, so a crash in between leaves an answer in the chat and
//! its question listed, and whoever comes next (the client's retry, or the next message) finds
//! the answer and closes the question.
//!
//! One append carries one producer, and such a message has two identities: its own
//! (`client_message_id`, so a retry long after is still recognised, however far the chat has
//! moved) and its question's (one answer per question). The first is its producer, as for any
//! message (`msg:{id}`; `answer:{question}` without a client id). The second is kept by the
//! log's order: the message is appended only right after a tail up to which the events since
//! the question was asked were read and hold no answer to it (`append_at`); if the chat moved
//! meanwhile, what moved it is read, and the answer that got there first (this message's own
//! earlier attempt, or another's) is the question's.

use super::{ChatService, message::user_message};
use crate::{
    event::{AuthorType, ChatEvent, FeedEvent, FileRef},
    service::{Accepted, Message},
    session::{Event, EventDraft, OpenRequest, RequestKind, Session, append_at, preview, read_events},
};
use spool_log::{clock::rfc3339_ms, error::Error, failpoint, stream::ProducerClaim};

/// How many times an answer reads what moved the chat and tries again before it gives up as
/// contended.
const ATTEMPTS: u32 = 64;

impl ChatService {
    /// Appends `message` as the answer to the agent's open question `question`; `None` if
    /// another message answered it first (the question is closed then, and `message` is one of
    /// its own).
    pub(super) async fn answer_agent(
        &self,
        org: &str,
        session: &Session,
        question: &OpenRequest,
        message: &Message,
        files: &[FileRef],
    ) -> Result<Option<Accepted>, Error> {
        let path = Session::stream(org, &session.id)?;
        let draft = EventDraft {
            event: ChatEvent::UserMessageSubmitted(user_message(message, files.to_vec(), Some(question.id.clone()))),
            client_message_id: message.client_message_id.clone(),
            turn_id: None,
        };
        let producer = ProducerClaim {
            id: message
                .client_message_id
                .as_ref()
                .map_or_else(|| format!("answer:{}", question.id), |cmid| format!("msg:{cmid}")),
            epoch: 0,
            seq: 0,
        };
        let now = self.clock.now_ms();
        // Everything up to `read` has been read: no answer to the question is there.
        let mut read = question.opened_seq;
        for attempt in 0..ATTEMPTS {
            let page = read_events(self.log.as_ref(), &path, read, usize::MAX).await?;
            read = page.next;
            if let Some(found) = page.events.iter().find(|e| answers(e, &question.id)) {
                // Answered already (its writer may have died before closing the question):
                // close it; the answer is this message's if it is its earlier attempt.
                self.close_question(org, session, question).await?;
                return Ok(same_message(found, &draft).then(|| Accepted {
                    seq: found.seq,
                    turn_id: None,
                    duplicate: true,
                    answers: Some(question.id.clone()),
                }));
            }
            let appended = match append_at(
                self.log.as_ref(),
                &path,
                &session.id,
                std::slice::from_ref(&draft),
                Some(producer.clone()),
                &rfc3339_ms(now),
                read,
            )
            .await
            {
                Ok(appended) => appended,
                // Someone wrote meanwhile: read what, and decide again.
                Err(Error::TailMismatch { .. }) => {
                    spool_log::retry::backoff(attempt).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if appended.duplicate {
                // This message's first attempt was appended before the question was asked (it
                // was no answer; one would have been read above): it is what it was then.
                return self.first_attempt(org, session, &path, appended.first).await.map(Some);
            }
            self.fail.check(failpoint::ANSWER_MIDWAY)?;
            self.close_question(org, session, question).await?;
            // No turn follows an answer: the chat's last page is sealed once it is idle.
            self.seal_when_idle(org, session, appended.first).await;
            self.metadata
                .touch_session(org, &session.id, now, &preview(&message.content))
                .await?;
            if let Some(ws) = &session.workspace_id {
                let event = FeedEvent::MessageAdded {
                    chat_id: session.id.clone(),
                    chat_title: session.title.clone(),
                    author_type: AuthorType::User,
                    workspace_id: ws.clone(),
                };
                self.feed(org, ws, &event).await?;
            }
            return Ok(Some(Accepted {
                seq: appended.first,
                turn_id: None,
                duplicate: false,
                answers: Some(question.id.clone()),
            }));
        }
        Err(Error::Contention { path })
    }

    /// Closes an answered question (a no-op if it is closed already).
    async fn close_question(&self, org: &str, session: &Session, question: &OpenRequest) -> Result<(), Error> {
        self.metadata
            .take_request(org, &session.id, &question.id, Some(RequestKind::Question))
            .await?;
        Ok(())
    }
}

/// Whether `event` is a person's message answering `question`.
fn answers(event: &Event, question: &str) -> bool {
    matches!(&event.event, ChatEvent::UserMessageSubmitted(m) if m.answers.as_deref() == Some(question))
}

/// Whether `event` is `draft`, written by an earlier attempt: the same client id, or without
/// one, the same message.
fn same_message(event: &Event, draft: &EventDraft) -> bool {
    match &draft.client_message_id {
        Some(_) => event.client_message_id == draft.client_message_id,
        None => event.client_message_id.is_none() && event.event == draft.event,
    }
}
