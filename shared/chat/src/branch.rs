//! # A chat's active branch
//!
//! A chat keeps every event. Editing a person's message or answering it again appends a new
//! version of it (`user_message_submitted` with a [`Revision`]); going back to an earlier
//! version appends [`BranchSelected`]. Each such event says, by itself, which earlier events
//! the chat's *active branch* leaves out from then on: its `hidden` ranges and everything from
//! its `from_seq` up to itself. So the active branch of a chat is decided by its latest branch
//! event alone, and a reader needs no more of the chat than that one event and what it reads:
//! what agents see, `GET …/events`, and the front ends' routes show the active branch; the web
//! UI reads the same rule (`web/src/branches.ts`, held to the same cases,
//! `data/branch_cases.json`).
//!
//! - An edit or a regenerate of the message starting at `from` (its slash command's event, or
//!   itself): the branch before it, and `from` up to the new version, left out. Everything on
//!   the active branch after `from` followed that message, so this is exactly its old branch.
//! - Going back to version `v`: the view as it was the last time `v` was shown (just before the
//!   branch event that left it out), and everything appended since left out. Nothing appended
//!   since then was on `v`'s branch, since every append lands on the active one.

use crate::{
    event::{BranchSelected, ChatEvent, Revision, RevisionKind, UserMessage},
    session::Event,
};

/// The seqs a chat's active branch leaves out (sorted, merged, inclusive ranges).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Branch {
    hidden: Vec<[u64; 2]>,
}

impl Branch {
    /// The branch in force from `event` on, if it is a branch event.
    pub fn set_by(event: &Event) -> Option<Self> {
        let (from_seq, hidden) = match &event.event {
            ChatEvent::UserMessageSubmitted(UserMessage {
                revision: Some(revision),
                ..
            }) => (revision.from_seq, &revision.hidden),
            ChatEvent::BranchSelected(selected) => (selected.from_seq, &selected.hidden),
            _ => return None,
        };
        let mut branch = Self::default();
        for &[from, through] in hidden {
            branch.hide(from, through);
        }
        if from_seq < event.seq {
            branch.hide(from_seq, event.seq - 1);
        }
        Some(branch)
    }

    /// The branch in force after `events`: the latest branch event's among them, if any.
    pub fn latest(events: &[Event]) -> Option<Self> {
        events.iter().rev().find_map(Self::set_by)
    }

    /// Keeps `events` that are on the active branch in force after them.
    pub fn keep_active(events: &mut Vec<Event>) {
        if let Some(branch) = Self::latest(events) {
            events.retain(|e| branch.shows(e.seq));
        }
    }

    /// Whether the event at `seq` is on this branch.
    pub fn shows(&self, seq: u64) -> bool {
        !self
            .hidden
            .iter()
            .any(|&[from, through]| (from..=through).contains(&seq))
    }

    /// The ranges left out.
    pub fn hidden(&self) -> &[[u64; 2]] {
        &self.hidden
    }

    /// A new version (`kind`) of the message at `of`, whose events begin at `from_seq`.
    pub fn revise(&self, of: u64, from_seq: u64, kind: RevisionKind) -> Revision {
        Revision {
            of,
            kind,
            from_seq: from_seq.min(of),
            hidden: self.hidden.clone(),
        }
    }

    /// What going back to the message at `seq` appends, given the chat's events in order (its
    /// branch events at least; the others are passed over): none when it is on the active
    /// branch already, or was never left out (a seq not yet appended).
    pub fn select(events: &[Event], seq: u64, author: &str) -> Option<BranchSelected> {
        let changes: Vec<(u64, Branch)> = events
            .iter()
            .filter_map(|e| Self::set_by(e).map(|b| (e.seq, b)))
            .collect();
        let current = changes.last().map(|(_, b)| b.clone()).unwrap_or_default();
        if current.shows(seq) {
            return None;
        }
        // The latest branch event that left `seq` out while it was shown just before.
        (0..changes.len()).rev().find_map(|k| {
            let before = if k == 0 {
                Self::default()
            } else {
                changes[k - 1].1.clone()
            };
            let (at, after) = &changes[k];
            (seq < *at && before.shows(seq) && !after.shows(seq)).then(|| BranchSelected {
                seq,
                author: author.to_owned(),
                from_seq: *at,
                hidden: before.hidden,
            })
        })
    }

    fn hide(&mut self, from: u64, through: u64) {
        let (mut from, mut through) = (from.min(through), through.max(from));
        let mut kept = Vec::with_capacity(self.hidden.len() + 1);
        for &[a, b] in &self.hidden {
            if b.saturating_add(1) < from || through.saturating_add(1) < a {
                kept.push([a, b]);
            } else {
                from = from.min(a);
                through = through.max(b);
            }
        }
        kept.push([from, through]);
        kept.sort_unstable();
        self.hidden = kept;
    }
}

#[cfg(test)]
mod tests;
