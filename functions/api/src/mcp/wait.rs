//! # Waiting for a person: `ask_user` and `wait_user`
//!
//! A question is an agent's message with `ask` (its `question_id`); a person answers it with
//! their next message in the chat, from any client or the web UI. The wait reads the chat's
//! events after a seq, once a second, until the answer (or, without a question, the next
//! person's message) is there, sending a progress notification each time when the client asked
//! for them. It lasts at most [`super::McpSettings::wait`] (25 s by default, within API
//! Gateway's limit): then it answers `waiting` with what resumes it (`question_id`, `chat_id`,
//! `after`), so a client calls again and loses nothing, whichever instance serves it.

use std::time::{Duration, Instant};

use rmcp::model::ProgressNotificationParam;
use serde_json::{Value, json};
use spool_chat::{
    event::ChatEvent,
    global::{Message, MessageRole},
    session::Event,
};
use spool_edge::ApiError;

use super::tools::{Call, id};

/// How often a wait reads the chat.
const POLL: Duration = Duration::from_secs(1);
/// How many events one read takes.
const PAGE: usize = 1000;

impl Call<'_> {
    /// Waits in chat `chat` for the answer to `question` (or, without one, the next person's
    /// message) after seq `after` (without it: from the chat's end).
    pub(super) async fn wait(&self, chat: &str, question: Option<&str>, after: Option<u64>) -> Result<Value, ApiError> {
        if let Some(q) = question {
            id(q)?;
        }
        let session = self.api.session_of(&self.caller, &id(chat)?).await?;
        let org = self.caller.org();
        let mut after = match after {
            Some(after) => after,
            None => self.api.chats.last_seq(org, &session).await?,
        };
        let started = Instant::now();
        let deadline = started + self.api.mcp_settings.wait;
        let progress = self.context.meta.get_progress_token();
        loop {
            let page = self.api.chats.events(org, &session, after, PAGE).await?;
            if let Some(message) = page.events.iter().find_map(|e| awaited(e, question)) {
                return Ok(json!({
                    "status": "answered",
                    "chat_id": session.id,
                    "question_id": question,
                    "answer": message.text,
                    "message": message,
                }));
            }
            // Behind the chat's end, the next page is read at once, if this one advanced: one
            // that did not is read again after the poll's sleep, and never past the deadline.
            let advanced = page.next > after;
            after = page.next.max(after);
            if Instant::now() >= deadline {
                break;
            }
            if advanced && page.next < page.tail {
                continue;
            }
            if let Some(token) = &progress {
                let waited = started.elapsed().as_secs_f64();
                let note = ProgressNotificationParam::new(token.clone(), waited).with_message(match question {
                    Some(q) => format!("waiting for a person to answer {q}"),
                    None => "waiting for a person's message".to_owned(),
                });
                if let Err(e) = self.context.peer.notify_progress(note).await {
                    tracing::debug!(error = %e, "a progress notification was not delivered");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = self.context.ct.cancelled() => break,
            }
        }
        Ok(json!({
            "status": "waiting",
            "chat_id": session.id,
            "question_id": question,
            "after": after,
            "hint": match question {
                Some(_) => "No answer yet: call ask_user (or wait_user) again with this question_id, chat_id and after to keep waiting.",
                None => "No message yet: call wait_user again with this chat_id and after to keep waiting.",
            },
        }))
    }
}

/// The message `event` is if it is what the wait is for: the person's answer to `question`,
/// or without one, any person's message.
fn awaited(event: &Event, question: Option<&str>) -> Option<Message> {
    let ChatEvent::UserMessageSubmitted(m) = &event.event else {
        return None;
    };
    if question.is_some() && m.answers.as_deref() != question {
        return None;
    }
    Message::of(event).filter(|m| m.role == MessageRole::User)
}
