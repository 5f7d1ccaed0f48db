//! # Forks: a new chat whose history is another's up to an event
//!
//! A fork's stream is a fork of the source's stream made by the log itself
//! ([`spool_log::stream::ForkRequest`]) after the event `at_seq`: nothing is copied, the
//! inherited events are the source's bytes (their `seq`, their `session_id`, their `turn_id`),
//! and the fork's own events follow on at `at_seq + 1`. The log keeps the source's data while a
//! fork needs it, so deleting the source never breaks a fork, and deleting a fork never touches
//! the source.
//!
//! What a fork owns is its own from the start:
//!
//! - **Its record**: a new chat in the source's organization and workspace, talking to the same
//!   agent, with its CLI, model, mode and capabilities; titled as asked, or
//!   "<source title> (fork)". No claim (pending turn), no open request and no turn record is
//!   inherited.
//! - **Its turns**: a turn that had not ended at `at_seq` would stay open in the fork for ever
//!   (no worker runs it there), so the fork's first own events end it as the engine ends an
//!   interrupted turn: its open message `message_end{interrupted}`, its running tools a
//!   `tool_end` with an error, then `agent_end{aborted}`. Readers (the UI, the AI SDK and AG-UI
//!   routes, `current_turn`) then see no turn running, and the fork takes messages at once.
//!   A `system` note always says where the fork comes from.
//! - **Its files**: the completed files its inherited events name are copied into the fork
//!   (records with the same ids, so the events' file ids work in the fork; the bytes copied
//!   inside the store: a hard link on the embedded store, `CopyObject` on S3). A copy, not a
//!   reference: deleting a chat deletes its files' bytes, and a reference would need a count
//!   kept over every chat that names a file; a copy keeps that rule as it is. The copies count
//!   towards the fork's cap of files ([`crate::caps::Caps::attachments_per_chat`]).
//!
//! The global chat is not forked: it is the one chat outside workspaces that agents write to
//! first, and a copy of it would be neither that chat nor a workspace's.

use std::collections::{HashMap, HashSet};

use time::{OffsetDateTime, format_description::well_known::Rfc3339};

use super::ChatService;
use crate::{
    attachment::{Attachment, AttachmentStatus, object_key},
    event::{AgentEnd, ChatEvent, EndReason, Level, MessageEnd, ToolEnd},
    session::{Event, EventDraft, Session, encode_events, read_events},
    workspace::{MAX_NAME_CHARS, new_id},
};
use spool_log::{
    clock::rfc3339_ms,
    error::Error,
    stream::{ContentType, CreateStream, Expiry, ForkRequest, Offset},
    subscription::refusal::Refusal,
};

/// How many events before `at_seq` are read for turns left open there (as far back as
/// [`crate::current_turn`] looks for a running turn, and more).
const OPEN_TURN_LOOKBACK: u64 = 4_000;
/// Events read per page of the search for files.
const PAGE: usize = 1_000;
/// How far the clocks of the processes writing one chat may disagree: a file completed this
/// long after the event `at_seq` may still be named at or before it.
const CLOCK_SKEW_MS: i64 = 5 * 60_000;

/// What a fork is.
#[derive(Debug, Clone, Default)]
pub struct NewFork {
    /// The last event of the source it inherits (the source's last when `None`).
    pub at_seq: Option<u64>,
    /// Its title ("<source title> (fork)" when `None`).
    pub title: Option<String>,
    /// Who makes it (the token's subject).
    pub created_by: String,
}

/// What a fork inherited.
#[derive(Debug, Clone)]
pub struct Forked {
    /// The new chat.
    pub session: Session,
    /// The last event it inherited.
    pub at_seq: u64,
    /// The turns it ended because they were open at `at_seq`.
    pub ended_turns: Vec<String>,
    /// The files it holds copies of.
    pub files: usize,
}

impl ChatService {
    /// Forks `source` (a chat of `org`) after its event `new.at_seq`, as this module says.
    pub async fn fork(&self, org: &str, source: &Session, new: NewFork) -> Result<Forked, Error> {
        if source.global {
            return Err(Refusal::new(
                409,
                "conflict",
                "the organization's global chat cannot be forked: it is the one chat outside workspaces, \
                 where agents write first; fork one of a workspace's chats instead",
            )
            .into());
        }
        let missing = || Error::Missing {
            what: format!("session `{}`", source.id),
        };
        let source_path = Session::stream(org, &source.id)?;
        let tail = match self.log.metadata(&source_path).await {
            Ok(meta) => meta.tail.seq(),
            // Deleted meanwhile.
            Err(Error::NotFound { .. } | Error::Gone { .. }) => return Err(missing()),
            Err(e) => return Err(e),
        };
        let at = new.at_seq.unwrap_or(tail);
        if at > tail {
            return Err(Error::invalid(
                "at_seq",
                format!(
                    "{at} is beyond this chat's last event, {tail}: give the seq of an event of it (0 to {tail}), \
                     or leave at_seq out to fork at its last event"
                ),
            ));
        }
        let title = fork_title(new.title.as_deref(), &source.title);
        let now = self.clock.now_ms();
        let mut session = Session {
            id: new_id("ses"),
            workspace_id: source.workspace_id.clone(),
            agent_id: source.agent_id.clone(),
            title,
            cli_override: source.cli_override,
            model: source.model.clone(),
            mode: source.mode.clone(),
            global: false,
            capabilities: source.capabilities.clone(),
            created_by: new.created_by,
            created_ms: now,
            updated_ms: 0,
            last_active_ms: now,
            preview: String::new(),
            pending_turn: None,
            branch_seq: None,
        };
        session.validate()?;
        // What the fork inherits does not change: the source only grows past `at`.
        let recent = read_events(
            self.log.as_ref(),
            &source_path,
            at.saturating_sub(OPEN_TURN_LOOKBACK),
            usize::try_from(OPEN_TURN_LOOKBACK).unwrap_or(usize::MAX),
        )
        .await?;
        let open = open_turns(&recent.events);
        let note = fork_note(&source.title, at, open.len());
        session.preview = crate::session::preview(&note);
        let mut drafts = closing_events(&open);
        drafts.push(EventDraft::new(ChatEvent::system(Level::Info, note), None));
        let initial = encode_events(&session.id, &drafts, at, &rfc3339_ms(now))?;
        let fork_path = Session::stream(org, &session.id)?;
        let create = CreateStream {
            content_type: ContentType::parse("application/json")?,
            expiry: Expiry::Never,
            closed: false,
            initial,
            fork: Some(ForkRequest {
                source: source_path,
                offset: Some(Offset::after(at)),
                sub_offset: 0,
                content_type: None,
                expiry: None,
            }),
        };
        match self.log.create(&fork_path, create).await {
            Ok(_) => {}
            // The source was deleted meanwhile.
            Err(Error::ConfigMismatch { .. } | Error::NotFound { .. } | Error::Gone { .. }) => return Err(missing()),
            Err(e) => return Err(e),
        }
        let at_ts = recent.events.iter().rfind(|e| e.seq == at).map(|e| e.ts.clone());
        let files = match self.copy_files(org, source, &session.id, at, at_ts.as_deref()).await {
            Ok(files) => files,
            Err(e) => return Err(self.undo_fork(org, &session.id, e).await),
        };
        if let Err(e) = self.metadata.create_session(org, &session).await {
            return Err(self.undo_fork(org, &session.id, e).await);
        }
        // The fork's active branch is the one its history's latest branch event set.
        if let Some(seq) = self.branch_at(org, source, at).await? {
            self.metadata.note_branch(org, &session.id, seq).await?;
            session.branch_seq = Some(seq);
        }
        self.announce_created(org, &session).await?;
        self.seal_when_idle(org, &session, at + drafts.len() as u64).await;
        let ended_turns: Vec<String> = open.into_iter().map(|t| t.turn_id).collect();
        tracing::info!(org, source = %source.id, fork = %session.id, at, ended = ended_turns.len(), files, "chat forked");
        Ok(Forked {
            session,
            at_seq: at,
            ended_turns,
            files,
        })
    }

    /// Removes what a fork that failed part-way made (its files, its stream, its records), and
    /// answers `error`, the reason it failed. (Its derived streams, such as a message index
    /// `sessions/{id}/messages`, are made on a first read, which a fork never had.)
    async fn undo_fork(&self, org: &str, fork_id: &str, error: Error) -> Error {
        if let Err(e) = self.remove(org, fork_id).await {
            tracing::warn!(org, fork = %fork_id, error = %e, "cannot remove a fork that failed; it is left unlisted");
        }
        error
    }

    /// Copies into the fork `fork_id` the completed files of `source` that its events up to
    /// `at` name; how many. Only chats with files are read, and only as far as the files
    /// completed by the time of the event `at` (`at_ts`) are all found.
    async fn copy_files(
        &self,
        org: &str,
        source: &Session,
        fork_id: &str,
        at: u64,
        at_ts: Option<&str>,
    ) -> Result<usize, Error> {
        let until_ms = at_ts
            .and_then(|ts| OffsetDateTime::parse(ts, &Rfc3339).ok())
            .map(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX))
            .map_or(i64::MAX, |ms| ms.saturating_add(CLOCK_SKEW_MS));
        let mut candidates: HashMap<String, Attachment> = self
            .metadata
            .attachments(org, &source.id)
            .await?
            .into_iter()
            .filter(|a| a.status == AttachmentStatus::Complete && a.completed_ms.is_some_and(|c| c <= until_ms))
            .map(|a| (a.id.clone(), a))
            .collect();
        let mut named = Vec::new();
        let path = Session::stream(org, &source.id)?;
        let mut after = 0;
        while !candidates.is_empty() && after < at {
            let limit = usize::try_from(at - after).unwrap_or(PAGE).min(PAGE);
            let page = read_events(self.log.as_ref(), &path, after, limit).await?;
            if page.events.is_empty() {
                break;
            }
            for event in &page.events {
                for id in files_named(event) {
                    if let Some(a) = candidates.remove(id) {
                        named.push(a);
                    }
                }
            }
            after = page.next;
        }
        let ttl_ms = i64::try_from(self.attachments.upload_ttl.as_millis()).unwrap_or(i64::MAX);
        for original in &named {
            let now = self.clock.now_ms();
            let copy = Attachment {
                session_id: fork_id.to_owned(),
                status: AttachmentStatus::Uploading,
                upload_expires_ms: now.saturating_add(ttl_ms),
                completed_ms: None,
                ..original.clone()
            };
            // Recorded first, as an upload is, so an interrupted copy is cleaned up with it.
            self.metadata.create_attachment(org, &copy).await?;
            self.files
                .copy(
                    &object_key(org, &source.id, &original.id),
                    &object_key(org, fork_id, &original.id),
                )
                .await?;
            let completed = original.completed_ms.unwrap_or(now);
            self.metadata
                .complete_attachment(org, fork_id, &original.id, completed)
                .await?;
        }
        Ok(named.len())
    }
}

/// The fork's title: the one asked for (cleaned), else "<source title> (fork)", shortened to fit.
fn fork_title(asked: Option<&str>, source_title: &str) -> String {
    if let Some(title) = asked {
        return crate::names::clean(title);
    }
    const SUFFIX: &str = " (fork)";
    let room = MAX_NAME_CHARS.saturating_sub(SUFFIX.chars().count());
    let base: String = source_title.chars().take(room).collect();
    format!("{}{SUFFIX}", base.trim_end())
}

/// The note a fork starts with.
fn fork_note(source_title: &str, at: u64, ended: usize) -> String {
    let mut note = format!("This chat is a fork of “{source_title}” after its event {at}.");
    match ended {
        0 => {}
        1 => note.push_str(" The turn that was running there is ended here; send a message to go on."),
        n => note.push_str(&format!(
            " The {n} turns that were running there are ended here; send a message to go on."
        )),
    }
    note
}

/// The ids of the files `event` names: an upload's, or a message's.
fn files_named(event: &Event) -> Vec<&str> {
    match &event.event {
        ChatEvent::System(note) => note.upload.iter().map(|u| u.file.id.as_str()).collect(),
        ChatEvent::UserMessageSubmitted(message) => message.files.iter().map(|f| f.id.as_str()).collect(),
        _ => Vec::new(),
    }
}

/// A turn that had not ended by the last of the events it was found in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OpenTurn {
    turn_id: String,
    /// Its message that started and did not end: its id and text so far.
    message: Option<(String, String)>,
    /// Its tools that started and did not end: call id and tool.
    tools: Vec<(String, String)>,
}

/// The turns with events in `events` (oldest first) and no `agent_end` among them, in the
/// order they first show.
fn open_turns(events: &[Event]) -> Vec<OpenTurn> {
    let mut order: Vec<String> = Vec::new();
    let mut turns: HashMap<String, OpenTurn> = HashMap::new();
    let mut ended: HashSet<String> = HashSet::new();
    for event in events {
        let Some(turn_id) = &event.turn_id else { continue };
        let turn = turns.entry(turn_id.clone()).or_insert_with(|| {
            order.push(turn_id.clone());
            OpenTurn {
                turn_id: turn_id.clone(),
                message: None,
                tools: Vec::new(),
            }
        });
        match &event.event {
            ChatEvent::AgentEnd(_) => {
                ended.insert(turn_id.clone());
            }
            ChatEvent::MessageStart(start) => turn.message = Some((start.message_id.clone(), String::new())),
            ChatEvent::MessageUpdate(update) => {
                if let Some((_, text)) = &mut turn.message {
                    text.push_str(&update.delta);
                }
            }
            ChatEvent::MessageEnd(_) => turn.message = None,
            // A client's tool runs in the client: nothing of Spool's is left running.
            ChatEvent::ToolStart(start) if !start.client => {
                turn.tools.push((start.tool_call_id.clone(), start.tool.clone()));
            }
            ChatEvent::ToolEnd(end) => turn.tools.retain(|(id, _)| *id != end.tool_call_id),
            _ => {}
        }
    }
    order
        .into_iter()
        .filter(|id| !ended.contains(id))
        .filter_map(|id| turns.remove(&id))
        .collect()
}

/// The events that end `open` turns, as the engine ends an interrupted turn.
fn closing_events(open: &[OpenTurn]) -> Vec<EventDraft> {
    let mut drafts = Vec::new();
    for turn in open {
        let of_turn = |event| EventDraft::new(event, Some(turn.turn_id.clone()));
        if let Some((message_id, text)) = &turn.message {
            drafts.push(of_turn(ChatEvent::MessageEnd(MessageEnd {
                message_id: message_id.clone(),
                text: text.clone(),
                interrupted: true,
                ..MessageEnd::default()
            })));
        }
        for (call_id, tool) in &turn.tools {
            drafts.push(of_turn(ChatEvent::ToolEnd(ToolEnd {
                tool_call_id: call_id.clone(),
                tool: tool.clone(),
                result: None,
                error: Some("interrupted: the chat was forked while it ran".to_owned()),
                declined: false,
                server: None,
            })));
        }
        drafts.push(of_turn(ChatEvent::AgentEnd(AgentEnd {
            reason: EndReason::Aborted,
            error: None,
        })));
    }
    drafts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{AgentStart, EventKind, MessageStart, MessageUpdate, Role, ToolStart};

    fn event(seq: u64, turn: Option<&str>, event: ChatEvent) -> Event {
        Event {
            v: 1,
            seq,
            ts: "2026-12-07T00:00:00Z".to_owned(),
            session_id: "ses_1".to_owned(),
            kind: EventKind::Harness,
            event,
            client_message_id: None,
            turn_id: turn.map(str::to_owned),
        }
    }

    #[test]
    fn a_turn_open_at_the_fork_is_ended_with_what_it_left_running() {
        // GIVEN a turn that ended, and one with a message and a tool still running
        let start = |id: &str| {
            ChatEvent::MessageStart(MessageStart {
                message_id: id.to_owned(),
                role: Role::default(),
            })
        };
        let update = |delta: &str| {
            ChatEvent::MessageUpdate(MessageUpdate {
                message_id: "m2".to_owned(),
                delta: delta.to_owned(),
            })
        };
        let tool = ToolStart {
            tool_call_id: "c1".to_owned(),
            tool: "create_task".to_owned(),
            arguments: serde_json::json!({}),
            client: false,
            server: None,
        };
        let agent_start = AgentStart {
            runtime: "scripted".to_owned(),
            agent_id: None,
            agent_name: "Spool".to_owned(),
            trigger_seq: 1,
        };
        let events = vec![
            event(1, Some("t1"), ChatEvent::AgentStart(agent_start.clone())),
            event(
                2,
                Some("t1"),
                ChatEvent::AgentEnd(AgentEnd {
                    reason: EndReason::Complete,
                    error: None,
                }),
            ),
            event(3, Some("t2"), ChatEvent::AgentStart(agent_start)),
            event(4, Some("t2"), ChatEvent::ToolStart(tool)),
            event(5, Some("t2"), start("m2")),
            event(6, Some("t2"), update("Hel")),
            event(7, Some("t2"), update("lo")),
        ];
        // WHEN the open turns are found and closed
        let open = open_turns(&events);
        let drafts = closing_events(&open);
        // THEN only the second is, its message ended as far as it got, its tool failed, and the turn aborted
        assert_eq!(open.len(), 1);
        let json: Vec<serde_json::Value> = encode_events("ses_2", &drafts, 7, "2026-12-07T00:00:01Z")
            .unwrap()
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap())
            .collect();
        let types: Vec<&str> = json.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["message_end", "tool_end", "agent_end"]);
        assert_eq!(json[0]["payload"]["text"], "Hello");
        assert_eq!(json[0]["payload"]["interrupted"], true);
        assert_eq!(json[1]["payload"]["tool_call_id"], "c1");
        assert_eq!(json[2]["payload"]["reason"], "aborted");
        assert!(json.iter().all(|e| e["turn_id"] == "t2" && e["session_id"] == "ses_2"));
        assert_eq!(
            json.iter().map(|e| e["seq"].as_u64().unwrap()).collect::<Vec<_>>(),
            [8, 9, 10]
        );
    }

    #[test]
    fn a_fork_is_titled_after_its_source_within_the_limit() {
        assert_eq!(fork_title(None, "Launch"), "Launch (fork)");
        assert_eq!(fork_title(Some("  Plan B "), "Launch"), "Plan B");
        let long = "x".repeat(MAX_NAME_CHARS);
        assert_eq!(fork_title(None, &long).chars().count(), MAX_NAME_CHARS);
        assert!(fork_title(None, &long).ends_with(" (fork)"));
    }
}
