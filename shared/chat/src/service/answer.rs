//! # Answers: a person's answer to a request a chat waits on
//!
//! An answer must name a request the chat waits on (an approval, a question, a plan, a tool
//! call). Its event is the record: it is appended under an idempotent producer named after the
//! request (`answer:{id}`), so of two racing answers the log keeps exactly one, and a retried
//! answer (a lost response, a crash before its request was closed) is recognised by its payload
//! and answered as the first time. The waiting turn is queued, then the request closed; one
//! that a crash left open is finished by the next answer to it.

use super::ChatService;
use crate::{
    event::ChatEvent,
    session::{EventDraft, RequestKind, Session, append_events},
};
use spool_log::{clock::rfc3339_ms, error::Error, stream::ProducerClaim};

/// A submission accepted: its event's seq, and the turn it resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// The submit event's seq.
    pub seq: u64,
    /// The turn it resumes (or aborts), if one waits on it.
    pub turn_id: Option<String>,
}

/// What became of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// Recorded (or recognised as a retry of the recorded answer).
    Accepted(Submitted),
    /// The chat has no open request of that kind and id: answered already, or never asked.
    NotOpen,
    /// Another answer to the request is the one recorded (its writer's work is finished here).
    Taken,
}

impl ChatService {
    /// Records `answer` to the chat's open request `id` of `kind` and queues the waiting turn.
    pub async fn answer(
        &self,
        org: &str,
        session: &Session,
        kind: RequestKind,
        id: &str,
        answer: ChatEvent,
    ) -> Result<Answered, Error> {
        let open = self.metadata.open_requests(org, &session.id).await?;
        let Some(request) = open.into_iter().find(|r| r.id == id && r.kind == kind) else {
            return Ok(Answered::NotOpen);
        };
        let path = Session::stream(org, &session.id)?;
        let draft = EventDraft::new(answer.clone(), request.turn_id.clone());
        let producer = ProducerClaim {
            id: format!("answer:{id}"),
            epoch: 0,
            seq: 0,
        };
        let now = rfc3339_ms(self.clock.now_ms());
        let appended = append_events(
            self.log.as_ref(),
            &path,
            &session.id,
            std::slice::from_ref(&draft),
            Some(producer),
            &now,
            None,
        )
        .await?;
        if appended.duplicate {
            let first = self.event_at(&path, appended.first).await?;
            if first.is_none_or(|e| e.event != answer) {
                // Another answer is the one recorded (its process may have died before closing
                // the request and resuming the turn): finish that, and refuse this one.
                if let Some(turn_id) = &request.turn_id {
                    self.enqueue_turn(org, &session.id, turn_id, appended.first).await?;
                }
                self.metadata.take_request(org, &session.id, id, Some(kind)).await?;
                return Ok(Answered::Taken);
            }
        }
        // The turn is queued before the request is closed: a crash in between leaves the
        // request open, so the client's retry (told nothing yet) queues it again.
        let seq = appended.first;
        if let Some(turn_id) = &request.turn_id {
            self.enqueue_turn(org, &session.id, turn_id, seq).await?;
        }
        self.metadata.take_request(org, &session.id, id, Some(kind)).await?;
        self.metadata
            .touch_session(org, &session.id, self.clock.now_ms(), &session.preview)
            .await?;
        Ok(Answered::Accepted(Submitted {
            seq,
            turn_id: request.turn_id,
        }))
    }
}
