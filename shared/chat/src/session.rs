//! # Chat sessions and their events
//!
//! A session's events live in its stream, `o/{org}/sessions/{id}` (readable by the
//! organization at `/v1/stream/sessions/{id}`); what lists and headers need (title, agent,
//! last activity, a preview of the last message) lives in a metadata record, so listing chats
//! never reads a stream. Every event is one JSON message in the envelope
//! `{"seq", "ts", "session_id", "kind", "type", "payload", "client_message_id"?, "turn_id"?}`,
//! whose `seq` is the event's sequence number in the stream: writers append at the tail they
//! expect ([`append_events`]), so the number written is the number given.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{
    event::{ChatEvent, EventKind},
    workspace::{CliType, check_name},
};
use spool_log::{
    error::Error,
    port::StreamLog,
    stream::{Append, ProducerClaim, StreamPath},
};

/// The version of the event envelope, written as `v` in every event.
pub const EVENT_VERSION: u32 = 1;
/// The title of a chat made without one (the third source design's default).
pub const UNTITLED_CHAT: &str = "Untitled chat";
/// The longest preview of a chat's last message kept in its record, in characters.
pub const PREVIEW_CHARS: usize = 160;

/// A chat session's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id (`ses_…`).
    pub id: String,
    /// The workspace it belongs to; `None` for chats outside workspaces (the global chat).
    #[serde(default)]
    pub workspace_id: Option<String>,
    /// The agent that answers in it.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Its title.
    pub title: String,
    /// The CLI to use instead of the agent's.
    #[serde(default)]
    pub cli_override: Option<CliType>,
    /// The model to use instead of the agent's (`/model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The mode the runtimes are told of (`/mode`: `plan`, `act`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Whether this is the organization's global, agent-first chat.
    #[serde(default)]
    pub global: bool,
    /// Capabilities verified for it (the handshake's companion).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Who made it (the token's subject; empty for chats made before this was kept, and for the
    /// global chat, which Spool makes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created_by: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: i64,
    /// When its record last changed (its title, agent, CLI, model or mode); 0 if never.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub updated_ms: i64,
    /// When something last happened in it.
    pub last_active_ms: i64,
    /// The start of its last message or action.
    #[serde(default)]
    pub preview: String,
    /// The turn that runs (or waits to run) in it, if any; kept apart from the other fields and
    /// changed only by [`Sessions::claim_turn`] and [`Sessions::release_turn`].
    #[serde(skip)]
    pub pending_turn: Option<PendingTurn>,
    /// The seq of its latest branch event (an edit, a regenerate, a version chosen again:
    /// [`crate::branch`]), which decides its active branch; none if it never branched. Kept
    /// apart from the other fields and changed only by [`Sessions::note_branch`].
    #[serde(skip)]
    pub branch_seq: Option<u64>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// The turn a session is busy with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTurn {
    /// The turn.
    pub turn_id: String,
    /// The `client_message_id` of the message that started it, so a retry of that message is
    /// recognised rather than refused as busy.
    #[serde(default)]
    pub client_message_id: Option<String>,
    /// When it was claimed (ms since the Unix epoch).
    pub since_ms: i64,
}

impl RequestKind {
    /// The kind's name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::Question => "question",
            Self::Plan => "plan",
            Self::ToolOutput => "tool_output",
        }
    }
}

impl Session {
    /// Checks the fields a client sets.
    pub fn validate(&self) -> Result<(), Error> {
        check_name("chat title", &self.title)
    }

    /// The session's stream within the organization's namespace.
    pub fn stream(org: &str, id: &str) -> Result<StreamPath, Error> {
        StreamPath::in_org(org, &format!("sessions/{id}"))
    }
}

/// The first [`PREVIEW_CHARS`] characters of `text` on one line.
pub fn preview(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = line.chars().take(PREVIEW_CHARS).collect();
    if line.chars().count() > PREVIEW_CHARS {
        out.push('…');
    }
    out
}

/// What a session is waiting for from a person (or a client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// Approve or decline a tool call (`tool_approval_required`).
    Approval,
    /// Answer a question (`ask_question`, or an agent's `ask`).
    Question,
    /// Approve or reject a plan (`plan_approval_required`).
    Plan,
    /// The output of a tool the client runs.
    ToolOutput,
}

/// Where a turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// Waiting for the worker.
    Queued,
    /// Running, or waiting for a person's answer.
    InProgress,
    /// Ended: answered.
    Completed,
    /// Ended with an error, or aborted (its detail says which).
    Failed,
}

impl TurnStatus {
    /// How far along: a record never moves back to a lower rank.
    pub fn rank(self) -> u8 {
        match self {
            Self::Queued => 0,
            Self::InProgress => 1,
            Self::Completed | Self::Failed => 2,
        }
    }
}

/// How long a finished turn's record is kept unless its workspace says otherwise: 7 days.
pub const TURN_RECORD_TTL_MS: i64 = crate::settings::DEFAULT_KEEP_DAYS as i64 * 24 * 3600 * 1000;
/// How long a turn step's count of runs is kept after its last run ([`Sessions::count_run`]):
/// far longer than any step's deliveries last.
pub const RUN_COUNT_TTL_MS: i64 = 7 * 24 * 3600 * 1000;

/// A turn's record: what lists of turns show, kept apart from the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// The turn.
    pub turn_id: String,
    /// Where it is.
    pub status: TurnStatus,
    /// How it ended (`complete`, `aborted`, `error`) or what it waits on, if anything.
    #[serde(default)]
    pub detail: Option<String>,
    /// The seq of the event that started it.
    pub trigger_seq: u64,
    /// When it was queued (ms since the Unix epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
    /// When a finished record goes (its workspace's `cleanup.turn_record_days` after it
    /// finished; 7 days by default).
    #[serde(default)]
    pub expires_ms: Option<i64>,
}

impl TurnRecord {
    /// A record of `turn` moved to `status` at `now_ms` (finished records expire after 7 days).
    pub fn at(turn_id: &str, trigger_seq: u64, status: TurnStatus, detail: Option<String>, now_ms: i64) -> Self {
        Self {
            turn_id: turn_id.to_owned(),
            status,
            detail,
            trigger_seq,
            created_ms: now_ms,
            updated_ms: now_ms,
            expires_ms: (status.rank() == 2).then_some(now_ms + TURN_RECORD_TTL_MS),
        }
    }

    /// The same record, kept `ttl_ms` after it finished (its workspace's cleanup setting)
    /// instead of [`TURN_RECORD_TTL_MS`].
    #[must_use]
    pub fn kept_for(mut self, ttl_ms: i64) -> Self {
        if self.expires_ms.is_some() {
            self.expires_ms = Some(self.updated_ms.saturating_add(ttl_ms));
        }
        self
    }
}

/// A request a session waits on; an answer must name it, and takes it (once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenRequest {
    /// Its id: the tool call, question or plan id the event carried.
    pub id: String,
    /// What it asks for.
    pub kind: RequestKind,
    /// The turn that waits on it, to resume.
    #[serde(default)]
    pub turn_id: Option<String>,
    /// The seq of the event that opened it.
    pub opened_seq: u64,
}

/// An event before it is written: everything but its `seq` and `ts`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventDraft {
    /// What happened.
    pub event: ChatEvent,
    /// The client's id for a submission, which makes retries safe.
    pub client_message_id: Option<String>,
    /// The turn it belongs to.
    pub turn_id: Option<String>,
}

impl EventDraft {
    /// `event`, of `turn` when given.
    pub fn new(event: ChatEvent, turn_id: Option<String>) -> Self {
        Self {
            event,
            client_message_id: None,
            turn_id,
        }
    }
}

/// An event as stored and read.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The envelope's version.
    pub v: u32,
    /// Its sequence number in the session's stream, from 1.
    pub seq: u64,
    /// When it was written, RFC 3339.
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub ts: String,
    /// The session.
    pub session_id: String,
    /// Who wrote it.
    pub kind: EventKind,
    /// What happened: the envelope's `type` and `payload`.
    #[serde(flatten)]
    pub event: ChatEvent,
    /// The client's id for a submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_message_id: Option<String>,
    /// The turn it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// What [`append_events`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The sequence number of the first event written (or, for a producer's retry, of the
    /// first event the earlier attempt wrote).
    pub first: u64,
    /// The sequence number of the last.
    pub last: u64,
    /// True when a producer's retry was recognised and nothing was written.
    pub duplicate: bool,
}

/// Appends events to a session's stream, numbering them with the sequence numbers they get:
/// it reads the tail, writes at that tail, and starts over if another writer got there first.
/// With a producer claim, a retry of an earlier append is recognised and not written again.
/// A writer that knows where the tail was (its own last append) passes it as `tail_hint`: the
/// first attempt then writes there without reading the tail, and a wrong hint costs one retry.
pub async fn append_events(
    log: &dyn StreamLog,
    path: &StreamPath,
    session_id: &str,
    drafts: &[EventDraft],
    producer: Option<ProducerClaim>,
    now_rfc3339: &str,
    tail_hint: Option<u64>,
) -> Result<Appended, Error> {
    const ATTEMPTS: u32 = 64;
    let mut attempt = 0;
    let mut hint = tail_hint;
    loop {
        let hinted = hint.take();
        let tail = match hinted {
            Some(tail) => tail,
            None => log.metadata(path).await?.tail.seq(),
        };
        match append_at(log, path, session_id, drafts, producer.clone(), now_rfc3339, tail).await {
            Ok(appended) => return Ok(appended),
            // The hint was out of date: read the tail, at once.
            Err(Error::TailMismatch { .. }) if hinted.is_some() => {}
            Err(Error::TailMismatch { .. }) if attempt < ATTEMPTS => {
                spool_log::retry::backoff(attempt).await;
                attempt += 1;
            }
            Err(Error::TailMismatch { path, .. }) => return Err(Error::Contention { path }),
            Err(e) => return Err(e),
        }
    }
}

/// Appends events right after `tail`, once: [`Error::TailMismatch`] if the stream has moved
/// past it (a producer's retry is recognised first). A writer whose events depend on what it
/// read up to `tail` (that nobody answered a question meanwhile) reads on and decides again.
pub async fn append_at(
    log: &dyn StreamLog,
    path: &StreamPath,
    session_id: &str,
    drafts: &[EventDraft],
    producer: Option<ProducerClaim>,
    now_rfc3339: &str,
    tail: u64,
) -> Result<Appended, Error> {
    let messages = encode_events(session_id, drafts, tail, now_rfc3339)?;
    let count = messages.len() as u64;
    let mut append = Append::messages(messages);
    append.expected_tail = Some(tail);
    append.producer = producer;
    let ack = log.append(path, append).await?;
    if ack.duplicate {
        // Where the first attempt's events end, not the tail: the chat may have moved on.
        let last = ack.producer.map_or_else(|| ack.next_offset.seq(), |p| p.last_seq);
        return Ok(Appended {
            first: last + 1 - count.max(1),
            last,
            duplicate: true,
        });
    }
    let range = ack.appended.ok_or_else(|| Error::Corrupt {
        what: "an append of events reported no range".to_owned(),
    })?;
    Ok(Appended {
        first: range.first,
        last: range.last,
        duplicate: false,
    })
}

/// The messages of `drafts` as events of chat `session_id` written right after `tail` (the
/// first gets seq `tail + 1`) at `now_rfc3339`: what [`append_at`] appends, and what a fork
/// starts with ([`crate::service::ChatService::fork`]).
pub fn encode_events(
    session_id: &str,
    drafts: &[EventDraft],
    tail: u64,
    now_rfc3339: &str,
) -> Result<Vec<Bytes>, Error> {
    drafts
        .iter()
        .zip(tail + 1..)
        .map(|(draft, seq)| {
            let event = Event {
                v: EVENT_VERSION,
                seq,
                ts: now_rfc3339.to_owned(),
                session_id: session_id.to_owned(),
                kind: draft.event.kind(),
                event: draft.event.clone(),
                client_message_id: draft.client_message_id.clone(),
                turn_id: draft.turn_id.clone(),
            };
            serde_json::to_vec(&event)
                .map(Bytes::from)
                .map_err(|e| Error::unavailable("encode an event", e))
        })
        .collect()
}

/// Events read from a session stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventPage {
    /// The events, oldest first.
    pub events: Vec<Event>,
    /// The seq of the last event read (where the next page starts).
    pub next: u64,
    /// The stream's last seq when the page was read.
    pub tail: u64,
}

/// Up to `limit` events of a session stream after `after` (a seq; one past the tail reads
/// from the tail), oldest first. Reads until a read says it reached the tail, which it also
/// tells: the stream's metadata is read only when `limit` stops the page first.
pub async fn read_events(
    log: &dyn spool_log::port::StreamReader,
    path: &StreamPath,
    after: u64,
    limit: usize,
) -> Result<EventPage, Error> {
    use spool_log::stream::{Offset, Position};
    let mut page = EventPage {
        events: Vec::new(),
        next: after,
        tail: after,
    };
    loop {
        let chunk = match log.read(path, Position::At(Offset::after(page.next)), None).await {
            Ok(chunk) => chunk,
            Err(Error::OffsetBeyondTail { tail, .. }) if page.events.is_empty() => {
                page.next = tail.seq();
                page.tail = tail.seq();
                return Ok(page);
            }
            Err(e) => return Err(e),
        };
        let room = limit - page.events.len();
        let all = chunk.messages.len() <= room;
        for message in chunk.messages.iter().take(room) {
            let event: Event = serde_json::from_slice(message).map_err(|e| Error::Corrupt {
                what: format!("an event of `{path}`: {e}"),
            })?;
            page.events.push(event);
            page.next += 1;
        }
        if chunk.up_to_date {
            page.tail = chunk.next_offset.seq();
            return Ok(page);
        }
        if !all || page.events.len() >= limit || chunk.messages.is_empty() {
            page.tail = log.metadata(path).await?.tail.seq().max(page.next);
            return Ok(page);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_one_bounded_line() {
        assert_eq!(preview("  hello\n\n world  "), "hello world");
        let long = "x".repeat(PREVIEW_CHARS + 10);
        let p = preview(&long);
        assert_eq!(p.chars().count(), PREVIEW_CHARS + 1);
        assert!(p.ends_with('…'));
    }

    #[test]
    fn the_envelope_is_stable() {
        let message = crate::event::UserMessage {
            content: "hi".to_owned(),
            author: "key:k1".to_owned(),
            ..Default::default()
        };
        let event = Event {
            v: EVENT_VERSION,
            seq: 7,
            ts: "2026-11-22T23:00:00Z".to_owned(),
            session_id: "ses_1".to_owned(),
            kind: EventKind::Submit,
            event: ChatEvent::UserMessageSubmitted(message),
            client_message_id: Some("c1".to_owned()),
            turn_id: None,
        };
        let json = r#"{"v":1,"seq":7,"ts":"2026-11-22T23:00:00Z","session_id":"ses_1","kind":"submit","type":"user_message_submitted","payload":{"content":"hi","author":"key:k1"},"client_message_id":"c1"}"#;
        assert_eq!(serde_json::to_string(&event).unwrap(), json);
        assert_eq!(serde_json::from_str::<Event>(json).unwrap(), event);
    }
}
