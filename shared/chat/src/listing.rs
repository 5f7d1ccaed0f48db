//! # Lists in pages
//!
//! Chats, tasks and turns are listed newest first, in pages: each page ends with an opaque
//! cursor the next request sends back. Items are ordered by a sort key, a time (a chat's last
//! activity, a task's or turn's creation) and then the id, both descending, so ties never
//! reorder; a page starts strictly after the key its cursor names (keyset paging), whatever
//! was added or removed meanwhile.
//!
//! A walk over a quiet list sees every item exactly once, in order. An item whose key changes
//! mid-walk (a chat with new activity moves to the top) is seen where it was when its page was
//! read: once, twice (before and after the move) or not at all (moved from a page not yet read
//! to one already read); a client that needs the newest activity starts again.
//!
//! A cursor is bound to its list: the organization and the filters it was made for. One sent
//! with another list (another organization's, or other filters) is refused as
//! [`Error::Invalid`], never read as a position in this one.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    session::{Session, TurnRecord, TurnStatus},
    workspace::Task,
};
use spool_log::error::Error;

/// The page size when a request names none.
pub const DEFAULT_LIMIT: usize = 100;
/// The largest page a request may ask for.
pub const MAX_LIMIT: usize = 1000;

/// A position in a list: the sort key of the last item a page returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct After {
    /// The item's time (ms since the Unix epoch).
    pub ms: i64,
    /// The item's id.
    pub id: String,
}

impl After {
    /// The position of the item with time `ms` and `id`.
    pub fn of(ms: i64, id: &str) -> Self {
        Self { ms, id: id.to_owned() }
    }

    /// Whether an item with time `ms` and `id` comes after this position (newest first).
    pub fn precedes(&self, ms: i64, id: &str) -> bool {
        (ms, id) < (self.ms, self.id.as_str())
    }
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The items, newest first.
    pub items: Vec<T>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<After>,
}

impl<T> Page<T> {
    /// The page of `limit` items from `matched`: the items that match, in order, up to one more
    /// than `limit`. That one more says a next page exists, which starts after the last item
    /// kept.
    pub fn of(mut matched: Vec<T>, limit: usize, key: impl Fn(&T) -> After) -> Self {
        let next = if matched.len() > limit {
            matched.truncate(limit);
            matched.last().map(key)
        } else {
            None
        };
        Self { items: matched, next }
    }

    /// The page of `sorted` (a whole list, newest first) that starts after `after`, keeping the
    /// items `keep` accepts: for the small lists a store reads whole (one partition).
    pub fn slice(
        sorted: impl IntoIterator<Item = T>,
        after: Option<&After>,
        limit: usize,
        key: impl Fn(&T) -> After,
        keep: impl Fn(&T) -> bool,
    ) -> Self {
        let matched: Vec<T> = sorted
            .into_iter()
            .filter(|item| {
                after.is_none_or(|a| {
                    let k = key(item);
                    a.precedes(k.ms, &k.id)
                })
            })
            .filter(|item| keep(item))
            .take(limit.saturating_add(1))
            .collect();
        Self::of(matched, limit, key)
    }
}

/// A cursor as sent: its list's fingerprint and the position.
#[derive(Serialize, Deserialize)]
struct Token {
    /// The fingerprint of the list it belongs to ([`fingerprint`]).
    l: String,
    /// [`After::ms`].
    t: i64,
    /// [`After::id`].
    i: String,
}

/// A short digest of what a list is (its kind, organization and filters).
fn fingerprint(scope: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in scope {
        hash.update(part.len().to_le_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize()[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// The cursor a client sends back for the page after `after`, in the list `scope` names.
pub fn encode_cursor(scope: &[&str], after: &After) -> String {
    let token = Token {
        l: fingerprint(scope),
        t: after.ms,
        i: after.id.clone(),
    };
    B64.encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// The position a cursor names, if it was made for the list `scope` names; anything else is
/// [`Error::Invalid`] with what to do.
pub fn decode_cursor(scope: &[&str], cursor: &str) -> Result<After, Error> {
    let malformed = || Error::Invalid {
        what: "cursor",
        reason: "it is not a cursor this API gave; send the `next_cursor` of the previous page as it was, \
                 or leave `cursor` out to start from the newest"
            .to_owned(),
    };
    let bytes = B64.decode(cursor.trim()).map_err(|_| malformed())?;
    let token: Token = serde_json::from_slice(&bytes).map_err(|_| malformed())?;
    if token.l != fingerprint(scope) {
        return Err(Error::Invalid {
            what: "cursor",
            reason: "it belongs to another list (other filters, or another organization); \
                     send it with the filters of the page it came from, or leave `cursor` out to start again"
                .to_owned(),
        });
    }
    if token.i.is_empty() || token.i.len() > 256 {
        return Err(malformed());
    }
    Ok(After {
        ms: token.t,
        id: token.i,
    })
}

/// Which chats to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionQuery {
    /// The workspace; `None` for the chats outside workspaces.
    pub workspace_id: Option<String>,
    /// Only the chats this token subject made.
    pub created_by: Option<String>,
    /// Only the chats this agent answers in.
    pub agent_id: Option<String>,
    /// Only the chats whose title contains this, ignoring case.
    pub title_contains: Option<String>,
    /// At most this many.
    pub limit: usize,
    /// After this position (from a cursor).
    pub after: Option<After>,
}

impl SessionQuery {
    /// The first `limit` chats of a workspace (or, for `None`, those outside workspaces).
    pub fn in_workspace(workspace_id: Option<&str>, limit: usize) -> Self {
        Self {
            workspace_id: workspace_id.map(str::to_owned),
            created_by: None,
            agent_id: None,
            title_contains: None,
            limit,
            after: None,
        }
    }

    /// What a cursor of this list is bound to.
    pub fn scope<'a>(&'a self, org: &'a str) -> [&'a str; 6] {
        let opt = |o: &'a Option<String>| o.as_deref().unwrap_or("\u{0}");
        [
            "sessions",
            org,
            opt(&self.workspace_id),
            opt(&self.created_by),
            opt(&self.agent_id),
            opt(&self.title_contains),
        ]
    }

    /// The title search, lowercased, as stores compare it with lowercased titles.
    pub fn needle(&self) -> Option<String> {
        self.title_contains
            .as_deref()
            .filter(|q| !q.is_empty())
            .map(str::to_lowercase)
    }

    /// Whether `session` passes the filters (creator, agent, title); the store has chosen the
    /// workspace and the position.
    pub fn matches(&self, session: &Session) -> bool {
        self.created_by.as_ref().is_none_or(|by| &session.created_by == by)
            && self
                .agent_id
                .as_ref()
                .is_none_or(|a| session.agent_id.as_ref() == Some(a))
            && self.needle().is_none_or(|q| session.title.to_lowercase().contains(&q))
    }

    /// A chat's position in the list.
    pub fn key(session: &Session) -> After {
        After::of(session.last_active_ms, &session.id)
    }
}

/// Which tasks to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskQuery {
    /// The workspace.
    pub workspace_id: String,
    /// Only the tasks made in this chat.
    pub session_id: Option<String>,
    /// At most this many.
    pub limit: usize,
    /// After this position (from a cursor).
    pub after: Option<After>,
}

impl TaskQuery {
    /// What a cursor of this list is bound to.
    pub fn scope<'a>(&'a self, org: &'a str) -> [&'a str; 4] {
        [
            "tasks",
            org,
            &self.workspace_id,
            self.session_id.as_deref().unwrap_or("\u{0}"),
        ]
    }

    /// Whether `task` passes the filters.
    pub fn matches(&self, task: &Task) -> bool {
        self.session_id
            .as_ref()
            .is_none_or(|s| task.session_id.as_ref() == Some(s))
    }

    /// A task's position in the list.
    pub fn key(task: &Task) -> After {
        After::of(task.created_ms, &task.id)
    }
}

/// Which turns of a chat to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnQuery {
    /// The chat.
    pub session_id: String,
    /// Only the turns in this state.
    pub status: Option<TurnStatus>,
    /// Now (ms since the Unix epoch): finished records past their expiry are gone.
    pub now_ms: i64,
    /// At most this many.
    pub limit: usize,
    /// After this position (from a cursor).
    pub after: Option<After>,
}

impl TurnQuery {
    /// Every live turn of a chat, newest first, in one page.
    pub fn all(session_id: &str, now_ms: i64) -> Self {
        Self {
            session_id: session_id.to_owned(),
            status: None,
            now_ms,
            limit: usize::MAX - 1,
            after: None,
        }
    }

    /// What a cursor of this list is bound to.
    pub fn scope<'a>(&'a self, org: &'a str) -> [&'a str; 4] {
        let status = match self.status {
            None => "\u{0}",
            Some(TurnStatus::Queued) => "queued",
            Some(TurnStatus::InProgress) => "in_progress",
            Some(TurnStatus::Completed) => "completed",
            Some(TurnStatus::Failed) => "failed",
        };
        ["turns", org, &self.session_id, status]
    }

    /// Whether `turn` passes the filters and is live at [`Self::now_ms`].
    pub fn matches(&self, turn: &TurnRecord) -> bool {
        turn.expires_ms.is_none_or(|at| at >= self.now_ms) && self.status.is_none_or(|s| turn.status == s)
    }

    /// A turn's position in the list.
    pub fn key(turn: &TurnRecord) -> After {
        After::of(turn.created_ms, &turn.turn_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_its_position_in_its_own_list_only() {
        let after = After::of(1_700_000_000_000, "ses_b");
        let cursor = encode_cursor(&["sessions", "o1", "ws"], &after);
        assert_eq!(decode_cursor(&["sessions", "o1", "ws"], &cursor).unwrap(), after);
        let foreign = decode_cursor(&["sessions", "o2", "ws"], &cursor).unwrap_err();
        assert!(foreign.to_string().contains("another list"), "{foreign}");
        // The parts are length-prefixed: moving a boundary is another list.
        assert!(decode_cursor(&["sessions", "o1w", "s"], &cursor).is_err());
        for bad in ["", "!!", "bm90IGpzb24", &B64.encode(br#"{"l":"x"}"#)] {
            let e = decode_cursor(&["sessions", "o1", "ws"], bad).unwrap_err();
            assert!(e.to_string().contains("leave `cursor` out"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_slice_starts_after_its_position_and_says_if_more_follow() {
        let items: Vec<(i64, String)> = (0..5).rev().map(|i| (i / 2, format!("x{i}"))).collect();
        let key = |t: &(i64, String)| After::of(t.0, &t.1);
        let first = Page::slice(items.clone(), None, 2, key, |_| true);
        assert_eq!(first.items, [(2, "x4".to_owned()), (1, "x3".to_owned())]);
        let second = Page::slice(items.clone(), first.next.as_ref(), 2, key, |_| true);
        assert_eq!(second.items, [(1, "x2".to_owned()), (0, "x1".to_owned())]);
        let last = Page::slice(items, second.next.as_ref(), 2, key, |_| true);
        assert_eq!(last.items, [(0, "x0".to_owned())]);
        assert_eq!(last.next, None);
    }
}
