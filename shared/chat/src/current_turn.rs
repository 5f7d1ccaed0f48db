//! # Which turn holds a chat, as its stream tells
//!
//! A client that comes back to a chat (a reload, a dropped connection) resumes the turn that
//! holds it: the one that runs, or waits on a person. Its stream says which, with no record
//! read: a turn is unfinished while its start (the message or command that made it) has no
//! `agent_end` after it. The newest unfinished turn that started (`agent_start`) holds the chat,
//! since one runs at a time; else the newest one queued. An older turn can wait on a person
//! while a later, queued one runs and ends, so the search does not stop at the last
//! `agent_end`; it looks back [`RESUME_WINDOWS`] windows of events.
//!
//! (The chat's claim, [`crate::session::Session::pending_turn`], names the turn that holds it too; but
//! only the chat API's stores hold it, and a reader needs the seq its replay starts after,
//! which only the stream has.)

use std::collections::HashSet;

use crate::{
    event::ChatEvent,
    session::{Event, read_events},
};
use spool_log::{error::Error, port::StreamLog, stream::StreamPath};

/// Events read per window when looking back.
const WINDOW: u64 = 500;
/// The most windows [`find_back`] looks back (an event further back is not found).
const MAX_WINDOWS: u64 = 64;
/// The most windows [`current_turn`] looks back for an unfinished turn (2,000 events).
pub const RESUME_WINDOWS: u64 = 4;

/// The turn that holds a chat, and where its replay starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentTurn {
    /// The turn.
    pub turn_id: String,
    /// The seq its replay starts after: just before the message or command that started it.
    pub after: u64,
}

/// The turn that holds the chat at `path` (it runs or waits), found as this module says;
/// `None` when no turn runs or waits.
pub async fn current_turn(log: &dyn StreamLog, path: &StreamPath) -> Result<Option<CurrentTurn>, Error> {
    let tail = log.metadata(path).await?.tail.seq();
    let (mut ended, mut started) = (HashSet::new(), HashSet::new());
    let mut queued: Option<CurrentTurn> = None;
    let mut end = tail;
    for _ in 0..RESUME_WINDOWS {
        if end == 0 {
            break;
        }
        let start = end.saturating_sub(WINDOW);
        let page = read_events(log, path, start, window_len(start, end)).await?;
        for event in page.events.iter().rev() {
            let Some(turn) = &event.turn_id else { continue };
            match &event.event {
                ChatEvent::AgentEnd(_) => {
                    ended.insert(turn.clone());
                }
                ChatEvent::AgentStart(_) => {
                    started.insert(turn.clone());
                }
                ChatEvent::UserMessageSubmitted(_) | ChatEvent::SlashCommandInvoked(_) if !ended.contains(turn) => {
                    let found = CurrentTurn {
                        turn_id: turn.clone(),
                        after: event.seq.saturating_sub(1),
                    };
                    if started.contains(turn) {
                        return Ok(Some(found));
                    }
                    queued.get_or_insert(found);
                }
                _ => {}
            }
        }
        end = start;
    }
    Ok(queued)
}

/// The latest event of the chat at `path` that `pick` picks, looking back from its tail
/// (at most [`MAX_WINDOWS`] windows of events).
pub async fn find_back(
    log: &dyn StreamLog,
    path: &StreamPath,
    pick: impl Fn(&Event) -> bool,
) -> Result<Option<Event>, Error> {
    let tail = log.metadata(path).await?.tail.seq();
    let mut end = tail;
    for _ in 0..MAX_WINDOWS {
        if end == 0 {
            break;
        }
        let start = end.saturating_sub(WINDOW);
        let page = read_events(log, path, start, window_len(start, end)).await?;
        if let Some(found) = page.events.iter().rev().find(|e| pick(e)) {
            return Ok(Some(found.clone()));
        }
        end = start;
    }
    Ok(None)
}

/// How many events lie between the seqs `start` and `end` (at most a [`WINDOW`]).
fn window_len(start: u64, end: u64) -> usize {
    usize::try_from(end - start).unwrap_or(usize::MAX)
}
