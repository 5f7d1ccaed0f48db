//! # The global chat's messages
//!
//! The second source design reads the global chat as messages `{id, ts, role, author, text,
//! meta}`, not as events: `GET /chat/history` answers them and `GET /chat/stream` sends them.
//! [`Message::of`] is the one mapping from a chat event to such a message (people's messages and
//! answers, outside agents' messages, Spool's replies, questions and notices; every other event
//! is none), and [`messages_after`] and [`last_messages`] are the two ways to read them.
//!
//! A message's `id` is its event's seq, so `after=<id>` (or `Last-Event-ID: <id>`) resumes
//! strictly after it: a poller that passes the last id it saw never misses a message nor sees
//! one twice (the events between messages are skipped, whatever their number).
//!
//! An outside agent may say what its message answers and how it is tagged ([`AgentMeta`]:
//! `reply_to`, `tags`); the message's `meta` carries them, with the `question` tag and the
//! `question_id` of a message that asks, and `reply_to` = the question's id on the person's
//! message that answers one.

use serde::{Deserialize, Serialize};

use crate::{
    event::ChatEvent,
    session::{Event, read_events},
};
use spool_log::{error::Error, port::StreamLog, stream::StreamPath};

/// The tag of a message that asks a question (the next person's message answers it).
pub const QUESTION_TAG: &str = "question";
/// How long `meta.reply_to` may be, in characters.
pub const MAX_REPLY_TO_CHARS: usize = 200;
/// How many tags a message may carry.
pub const MAX_TAGS: usize = 10;
/// How long a tag may be, in characters.
pub const MAX_TAG_CHARS: usize = 50;
/// The author of Spool's own messages.
pub const SPOOL_AUTHOR: &str = "Spool";

/// How many events one read of a [`last_messages`] window asks for.
const WINDOW: u64 = 1000;

/// Who wrote a message of the global chat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = GlobalChatRole))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    /// A person.
    User,
    /// An agent: an outside one, or Spool's own.
    Agent,
    /// Spool itself (a notice, an error).
    System,
}

/// What an outside agent says about its message: stored on its `agent_message` event.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentMeta {
    /// What it answers or follows up (a message's or a question's id, up to 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Its tags (up to 10, each 1 to 50 characters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl AgentMeta {
    /// The meta an agent sent, checked: `reply_to` 1 to 200 characters, up to 10 tags of 1 to
    /// 50 characters, no control characters, and not the `question` tag (which `ask: true`
    /// sets). Repeated tags count once. The error says what to change.
    pub fn new(reply_to: Option<String>, tags: Vec<String>) -> Result<Self, String> {
        if let Some(r) = &reply_to
            && (r.trim().is_empty() || r.chars().count() > MAX_REPLY_TO_CHARS || r.chars().any(char::is_control))
        {
            return Err(format!(
                "`meta.reply_to` must be 1 to {MAX_REPLY_TO_CHARS} characters, without control characters"
            ));
        }
        let mut kept: Vec<String> = Vec::new();
        for tag in tags {
            if tag.trim().is_empty() || tag.chars().count() > MAX_TAG_CHARS || tag.chars().any(char::is_control) {
                return Err(format!(
                    "each of `meta.tags` must be 1 to {MAX_TAG_CHARS} characters, without control characters"
                ));
            }
            if tag == QUESTION_TAG {
                return Err(format!(
                    "`{QUESTION_TAG}` is the tag of a message that asks: send `ask: true` instead"
                ));
            }
            if !kept.contains(&tag) {
                kept.push(tag);
            }
        }
        if kept.len() > MAX_TAGS {
            return Err(format!("`meta.tags` holds at most {MAX_TAGS} tags"));
        }
        Ok(Self { reply_to, tags: kept })
    }

    /// Whether it says nothing (then it is not stored).
    pub fn is_empty(&self) -> bool {
        self.reply_to.is_none() && self.tags.is_empty()
    }
}

/// What else a message says.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = GlobalChatMeta))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// What it answers: on a person's answer, the question's id; on an agent's message, what the
    /// agent said it replies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Its tags: the agent's, and `question` on a message that asks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// On a message that asks: the question's id, which the answer's `reply_to` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_id: Option<String>,
}

/// A message of the global chat: `{id, ts, role, author, text, meta}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = GlobalChatMessage))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Its event's seq: `after` (or `Last-Event-ID`) for what comes next.
    pub id: u64,
    /// When it was written, RFC 3339.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub ts: String,
    /// Who wrote it: a person, an agent, or Spool itself.
    pub role: MessageRole,
    /// Who wrote it: a person's token subject, an agent's name, or `Spool`.
    pub author: String,
    /// What it says.
    pub text: String,
    /// What else it says (`{}` when nothing).
    pub meta: Meta,
}

impl Message {
    /// `event` as a message, if it is one: people's messages and answers, outside agents'
    /// messages, and Spool's replies, questions and notices.
    pub fn of(event: &Event) -> Option<Self> {
        let message = |role, author: &str, text: &str, meta| Self {
            id: event.seq,
            ts: event.ts.clone(),
            role,
            author: author.to_owned(),
            text: text.to_owned(),
            meta,
        };
        let replying = |to: &str| Meta {
            reply_to: Some(to.to_owned()),
            ..Meta::default()
        };
        let asking = |question_id: &str| Meta {
            tags: vec![QUESTION_TAG.to_owned()],
            question_id: Some(question_id.to_owned()),
            ..Meta::default()
        };
        Some(match &event.event {
            ChatEvent::UserMessageSubmitted(m) => message(
                MessageRole::User,
                &m.author,
                &m.content,
                m.answers.as_deref().map(replying).unwrap_or_default(),
            ),
            ChatEvent::QuestionAnswered(a) => message(MessageRole::User, "", &a.answer, replying(&a.question_id)),
            ChatEvent::AgentMessage(m) => {
                let mut tags = m.meta.tags.clone();
                if m.ask {
                    tags.push(QUESTION_TAG.to_owned());
                }
                let meta = Meta {
                    reply_to: m.meta.reply_to.clone(),
                    tags,
                    question_id: m.question_id.clone(),
                };
                message(MessageRole::Agent, &m.author, &m.text, meta)
            }
            ChatEvent::MessageEnd(end) if !end.interrupted && !end.text.is_empty() => {
                message(MessageRole::Agent, SPOOL_AUTHOR, &end.text, Meta::default())
            }
            ChatEvent::AskQuestion(q) => message(MessageRole::Agent, SPOOL_AUTHOR, &q.question, asking(&q.question_id)),
            ChatEvent::System(note) => message(MessageRole::System, SPOOL_AUTHOR, &note.message, Meta::default()),
            _ => return None,
        })
    }
}

/// Up to `limit` messages of the chat at `path` with ids greater than `after`, oldest first.
pub async fn messages_after(
    log: &dyn StreamLog,
    path: &StreamPath,
    after: u64,
    limit: usize,
) -> Result<Vec<Message>, Error> {
    let mut messages = Vec::new();
    let mut from = after;
    while messages.len() < limit {
        let page = read_events(log, path, from, WINDOW as usize).await?;
        let Some(last) = page.events.last() else {
            break;
        };
        from = last.seq;
        messages.extend(page.events.iter().filter_map(Message::of).take(limit - messages.len()));
        if from >= page.tail {
            break;
        }
    }
    Ok(messages)
}

/// The last `limit` messages of the chat at `path`, oldest first: windows of events read back
/// from the tail until they hold `limit` messages or the chat's start.
pub async fn last_messages(log: &dyn StreamLog, path: &StreamPath, limit: usize) -> Result<Vec<Message>, Error> {
    let mut end = log.metadata(path).await?.tail.seq();
    let mut messages: Vec<Message> = Vec::new();
    while end > 0 && messages.len() < limit {
        let start = end.saturating_sub(WINDOW);
        let page = read_events(log, path, start, usize::try_from(end - start).unwrap_or(usize::MAX)).await?;
        let mut window: Vec<Message> = page.events.iter().filter_map(Message::of).collect();
        window.append(&mut messages);
        messages = window;
        end = start;
    }
    let skip = messages.len().saturating_sub(limit);
    Ok(messages.split_off(skip))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::AgentMessage;

    fn event(event: ChatEvent) -> Event {
        serde_json::from_value(json!({
            "v": 1, "seq": 7, "ts": "2026-01-01T00:00:00Z", "session_id": "global", "kind": "submit",
            "type": event.type_name(), "payload": serde_json::to_value(&event).unwrap()["payload"],
        }))
        .unwrap()
    }

    #[test]
    fn an_agents_meta_is_checked() {
        let tags = |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>();
        assert!(AgentMeta::new(Some("m1".into()), tags(10)).is_ok());
        assert_eq!(
            AgentMeta::new(None, vec!["a".into(), "a".into()]).unwrap().tags,
            ["a"],
            "a repeated tag counts once"
        );
        for (reply_to, tags) in [
            (Some(String::new()), vec![]),
            (Some("x".repeat(MAX_REPLY_TO_CHARS + 1)), vec![]),
            (Some("a\nb".into()), vec![]),
            (None, tags(MAX_TAGS + 1)),
            (None, vec![" ".into()]),
            (None, vec!["x".repeat(MAX_TAG_CHARS + 1)]),
            (None, vec!["a\u{7}".into()]),
            (None, vec![QUESTION_TAG.into()]),
        ] {
            assert!(
                AgentMeta::new(reply_to.clone(), tags.clone()).is_err(),
                "{reply_to:?} {tags:?}"
            );
        }
    }

    #[test]
    fn an_agents_question_carries_its_meta_and_the_question_tag() {
        let asked = event(ChatEvent::AgentMessage(AgentMessage {
            author: "bot".into(),
            text: "Deploy?".into(),
            ask: true,
            posted_by: "key:k".into(),
            question_id: Some("q1".into()),
            meta: AgentMeta::new(Some("7".into()), vec!["deploy".into()]).unwrap(),
        }));
        let message = serde_json::to_value(Message::of(&asked).unwrap()).unwrap();
        assert_eq!(
            message,
            json!({ "id": 7, "ts": "2026-01-01T00:00:00Z", "role": "agent", "author": "bot", "text": "Deploy?",
                "meta": { "reply_to": "7", "tags": ["deploy", "question"], "question_id": "q1" } })
        );
    }
}
