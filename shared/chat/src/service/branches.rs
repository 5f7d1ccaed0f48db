//! # Edit, regenerate, and going back to an earlier version
//!
//! A new version of a person's message (an edit, or the same text answered again) is a message
//! like any other ([`ChatService::post_message`]: it claims the chat's pending turn, so it is
//! refused while a turn is pending, and starts a turn of its own) carrying a
//! [`Revision`](crate::event::Revision); going back to an earlier version appends
//! `branch_selected` under the same claim, released at once. Either way the branch event says
//! which events the active branch leaves out ([`crate::branch`]), and the chat's record is told
//! of it ([`Sessions::note_branch`](crate::metadata::Sessions::note_branch)) so a reader finds
//! the active branch with one read.

use super::{Accepted, ChatService, Message, Posted};
use crate::{
    branch::Branch,
    event::{ChatEvent, RevisionKind, SlashCommandInvoked, UserMessage},
    session::{EventDraft, PendingTurn, Session, append_events},
    workspace::new_id,
};
use spool_log::{clock::rfc3339_ms, error::Error};

/// What to make a new version of, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revise {
    /// The message at `seq`, with new text (its files and client data kept).
    Edit {
        /// The message.
        seq: u64,
        /// The new text (checked by the caller).
        content: String,
        /// The client's id for the new version: a retry answers the first result.
        client_message_id: Option<String>,
    },
    /// The answer to the message at `seq` (none: the active branch's last message), answered
    /// again from the same text.
    Regenerate {
        /// The message.
        seq: Option<u64>,
        /// The client's id for the new version: a retry answers the first result.
        client_message_id: Option<String>,
    },
}

/// What going back to an earlier version did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selected {
    /// `branch_selected` was appended at `seq`.
    Appended {
        /// Its seq.
        seq: u64,
    },
    /// The version was on the active branch already: nothing appended.
    Shown,
    /// A turn is pending: nothing appended.
    Busy(PendingTurn),
}

impl ChatService {
    /// The chat's active branch now: its record's latest branch event's.
    pub async fn branch_now(&self, org: &str, session: &Session) -> Result<Branch, Error> {
        let Some(seq) = session.branch_seq else {
            return Ok(Branch::default());
        };
        let path = Session::stream(org, &session.id)?;
        Ok(self
            .event_at(&path, seq)
            .await?
            .and_then(|e| Branch::set_by(&e))
            .unwrap_or_default())
    }

    /// The seq of `session`'s latest branch event at or before `at`.
    pub(super) async fn branch_at(&self, org: &str, session: &Session, at: u64) -> Result<Option<u64>, Error> {
        match session.branch_seq {
            None => Ok(None),
            Some(seq) if seq <= at => Ok(Some(seq)),
            Some(_) => {
                crate::history::catch_up(self.log.as_ref(), org, &session.id).await?;
                let events = crate::history::all(self.log.as_ref(), org, &session.id).await?;
                Ok(events
                    .iter()
                    .rev()
                    .find(|e| e.seq <= at && Branch::set_by(e).is_some())
                    .map(|e| e.seq))
            }
        }
    }

    /// Appends a new version of a person's message, by `author`, and asks for its turn.
    pub async fn revise(&self, org: &str, session: &Session, revise: Revise, author: &str) -> Result<Posted, Error> {
        let path = Session::stream(org, &session.id)?;
        let cmid = match &revise {
            Revise::Edit { client_message_id, .. } | Revise::Regenerate { client_message_id, .. } => {
                client_message_id.clone()
            }
        };
        let branch = self.branch_now(org, session).await?;
        let (target, kind) = match &revise {
            Revise::Edit { seq, .. } => (Some(*seq), RevisionKind::Edit),
            Revise::Regenerate { seq, .. } => (*seq, RevisionKind::Regenerate),
        };
        let original = match target {
            Some(seq) => self.event_at(&path, seq).await?.filter(|e| e.seq == seq),
            None => {
                crate::current_turn::find_back(self.log.as_ref(), &path, |e| {
                    branch.shows(e.seq) && revisable(&e.event).is_some()
                })
                .await?
            }
        };
        let Some(original) = original else {
            return Err(match target {
                Some(seq) => Error::Missing {
                    what: format!("message {seq} in this chat"),
                },
                None => Error::invalid("seq", "the chat has no message of a person to answer again"),
            });
        };
        let Some(message) = revisable(&original.event) else {
            return Err(Error::invalid(
                "seq",
                format!(
                    "event {} is not a person's message; name a user_message_submitted's seq",
                    original.seq
                ),
            ));
        };
        if !branch.shows(original.seq) {
            // A retry of a new version finds the message it revised left behind by that version.
            if let Some(first) = self.retried(org, session, cmid.as_deref()).await? {
                self.metadata.note_branch(org, &session.id, first.seq).await?;
                return Ok(Posted::Accepted(first));
            }
            return Err(Error::invalid(
                "seq",
                format!(
                    "message {} is not on the chat's active branch; choose it first (POST …/messages/{}/select)",
                    original.seq, original.seq
                ),
            ));
        }
        // A slash command's prompt begins at its command, which a regenerate runs again.
        let command = match self.event_at(&path, original.seq.saturating_sub(1)).await? {
            Some(before) if before.turn_id.is_some() && before.turn_id == original.turn_id => match before.event {
                ChatEvent::SlashCommandInvoked(command) => Some((before.seq, command)),
                _ => None,
            },
            _ => None,
        };
        let from_seq = command.as_ref().map_or(original.seq, |(seq, _)| *seq);
        let (content, client_message_id, command) = match revise {
            Revise::Edit {
                content,
                client_message_id,
                ..
            } => (content, client_message_id, None),
            Revise::Regenerate { client_message_id, .. } => (
                message.content.clone(),
                client_message_id,
                command.map(|(_, c): (u64, SlashCommandInvoked)| c),
            ),
        };
        let posted = self
            .post_message(
                org,
                session,
                Message {
                    content,
                    author: author.to_owned(),
                    files: message.files.iter().map(|f| f.id.clone()).collect(),
                    metadata: message.metadata.clone(),
                    client_message_id,
                    queue_if_busy: false,
                    client_context: message.client_context.clone(),
                    command,
                    client_tools: message.client_tools.clone(),
                    revision: Some(branch.revise(original.seq, from_seq, kind)),
                },
            )
            .await?;
        if let Posted::Accepted(Accepted { seq, .. }) = &posted {
            self.metadata.note_branch(org, &session.id, *seq).await?;
        }
        Ok(posted)
    }

    /// Puts the message at `seq` (an earlier version, or any message left off the active
    /// branch) back on the active branch, with what followed it when it was last shown.
    pub async fn select_version(
        &self,
        org: &str,
        session: &Session,
        seq: u64,
        author: &str,
    ) -> Result<Selected, Error> {
        let path = Session::stream(org, &session.id)?;
        let target = self.event_at(&path, seq).await?.filter(|e| e.seq == seq);
        let Some(target) = target else {
            return Err(Error::Missing {
                what: format!("message {seq} in this chat"),
            });
        };
        if revisable(&target.event).is_none() {
            return Err(Error::invalid(
                "seq",
                format!("event {seq} is not a person's message; name a user_message_submitted's seq"),
            ));
        }
        // Under the chat's claim: no turn runs, and no other branch event is written meanwhile.
        let claim = PendingTurn {
            turn_id: new_id("branch"),
            client_message_id: None,
            since_ms: self.clock.now_ms(),
        };
        if let Err(holder) = self.metadata.claim_turn(org, &session.id, &claim).await? {
            return Ok(Selected::Busy(holder));
        }
        let selected = self.select_claimed(org, session, &path, seq, author).await;
        self.metadata.release_turn(org, &session.id, &claim.turn_id).await?;
        selected
    }

    async fn select_claimed(
        &self,
        org: &str,
        session: &Session,
        path: &spool_log::stream::StreamPath,
        seq: u64,
        author: &str,
    ) -> Result<Selected, Error> {
        // Every branch event is in the message index, which holds no deltas.
        let through = crate::history::catch_up(self.log.as_ref(), org, &session.id).await?;
        let mut events = crate::history::all(self.log.as_ref(), org, &session.id).await?;
        events.retain(|e| e.seq <= through);
        events.extend(
            crate::session::read_events(self.log.as_ref(), path, through, usize::MAX)
                .await?
                .events,
        );
        let Some(selected) = Branch::select(&events, seq, author) else {
            // Shown already; its record may lag a crash: tell it of the latest branch event.
            if let Some(latest) = events.iter().rev().find(|e| Branch::set_by(e).is_some()) {
                self.metadata.note_branch(org, &session.id, latest.seq).await?;
            }
            return Ok(Selected::Shown);
        };
        let draft = EventDraft::new(ChatEvent::BranchSelected(selected), None);
        let now = rfc3339_ms(self.clock.now_ms());
        let appended = append_events(self.log.as_ref(), path, &session.id, &[draft], None, &now, None).await?;
        self.metadata.note_branch(org, &session.id, appended.first).await?;
        Ok(Selected::Appended { seq: appended.first })
    }
}

/// The person's message `event` is, if it may have a new version (not an answer to an
/// agent's question).
fn revisable(event: &ChatEvent) -> Option<&UserMessage> {
    match event {
        ChatEvent::UserMessageSubmitted(message) if message.answers.is_none() => Some(message),
        _ => None,
    }
}

impl ChatService {
    /// The first attempt of the new version sent with `cmid`, if there was one (read back
    /// through the chat: only when a revision would be refused).
    async fn retried(&self, org: &str, session: &Session, cmid: Option<&str>) -> Result<Option<Accepted>, Error> {
        let Some(cmid) = cmid else {
            return Ok(None);
        };
        let path = Session::stream(org, &session.id)?;
        let first = crate::current_turn::find_back(self.log.as_ref(), &path, |e| {
            e.client_message_id.as_deref() == Some(cmid) && matches!(e.event, ChatEvent::UserMessageSubmitted(_))
        })
        .await?;
        match first {
            Some(first) => Ok(Some(self.first_attempt(org, session, &path, first.seq).await?)),
            None => Ok(None),
        }
    }

    /// Takes `revision`'s `hidden` from the chat's branch as its record says now, and checks
    /// the message it revises is still on it (unless this is a retry of a version sent with
    /// `cmid`).
    pub(super) async fn rebranch(
        &self,
        org: &str,
        session: &Session,
        revision: &mut crate::event::Revision,
        cmid: Option<&str>,
    ) -> Result<(), Error> {
        let fresh = self
            .metadata
            .session(org, &session.id)
            .await?
            .ok_or_else(|| Error::Missing {
                what: format!("session `{}`", session.id),
            })?;
        let branch = self.branch_now(org, &fresh).await?;
        if !branch.shows(revision.of) {
            // A retry of this very version: its append finds the first attempt's.
            if self.retried(org, session, cmid).await?.is_some() {
                return Ok(());
            }
            return Err(Error::invalid(
                "seq",
                format!(
                    "message {} left the chat's active branch meanwhile; reload and try again",
                    revision.of
                ),
            ));
        }
        revision.hidden = branch.hidden().to_vec();
        Ok(())
    }
}
