//! # A chat's pending turn: claims that outlive a crash are reconciled
//!
//! A message claims its chat's pending turn ([`Sessions::claim_turn`]) *before* its event is
//! appended, and the turn is recorded and queued after. A process that dies between those
//! steps leaves a claim with nothing behind it, or an appended message whose turn was never
//! queued; either way the chat would answer `409 turn_pending` forever. This rule, written once
//! over the ports, tells a live claim from a dead one by what the chat and its records say:
//!
//! - the turn's record says it ended: the release was lost, so it is released now;
//! - the record says it runs (`in_progress`): it is live (a crashed worker's step comes back
//!   through the queue), unless the record has not moved for far longer than a step can run
//!   (its job was lost: a dead-letter queue took it); then its turn is queued again, from the
//!   chat's tail, and the step finds where the turn is (waiting on a person, or to be ended);
//! - otherwise the message that claimed it is looked for in the stream: if it is there, its
//!   turn is queued again (the queue drops a job it already has); if it is not, the claim is
//!   released.
//!
//! A claim younger than a grace period is left alone (its message may be on its way), except
//! on an abort, which a person asks for because the chat is stuck.

use time::{OffsetDateTime, format_description::well_known::Rfc3339};

use crate::{
    event::EventKind,
    listing::TurnQuery,
    metadata::Sessions,
    session::{PendingTurn, Session, TurnRecord, TurnStatus, read_events},
    turns::{TurnJob, TurnQueue},
};
use spool_log::{error::Error, port::StreamLog};

/// How old a claim must be before a refused message questions it: far longer than a message
/// takes from its claim to its queued turn.
pub const CLAIM_GRACE_MS: i64 = 30_000;

/// How far the clocks of the processes writing one chat may disagree; the search for a
/// claim's message stops at events older than its claim by more than this.
const CLOCK_SKEW_MS: i64 = 5 * 60_000;

/// How long a running turn's record may stand still before its job is presumed lost: longer
/// than a step's time limit and its lease together.
pub const STALE_TURN_MS: i64 = 20 * 60_000;

/// Events read per step of the backwards search.
const SEARCH_WINDOW: u64 = 500;

/// What [`reconcile`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// The claim is live (or too young to judge): it stays.
    Live,
    /// Nothing was behind the claim, or its turn had ended: it was released.
    Released,
    /// Its message was appended but its turn not queued: it is queued now, and the claim stays.
    Requeued(TurnJob),
}

/// The ports [`reconcile`] reads and writes.
pub struct ClaimStores<'a> {
    /// Session records and turn records.
    pub sessions: &'a dyn Sessions,
    /// The chat's stream.
    pub log: &'a dyn StreamLog,
    /// The turn queue.
    pub turns: &'a dyn TurnQueue,
}

/// Reconciles the claim `holder` of a chat, at `now_ms`; a claim younger than `grace_ms` is
/// [`Reconciled::Live`].
pub async fn reconcile(
    stores: &ClaimStores<'_>,
    org: &str,
    session_id: &str,
    holder: &PendingTurn,
    now_ms: i64,
    grace_ms: i64,
) -> Result<Reconciled, Error> {
    if now_ms.saturating_sub(holder.since_ms) < grace_ms {
        return Ok(Reconciled::Live);
    }
    let record = stores
        .sessions
        .turns(org, &TurnQuery::all(session_id, now_ms))
        .await?
        .items
        .into_iter()
        .find(|t| t.turn_id == holder.turn_id);
    let path = Session::stream(org, session_id)?;
    match record.as_ref().map(|r| (r.status, r.updated_ms)) {
        Some((TurnStatus::Completed | TurnStatus::Failed, _)) => return release(stores, org, session_id, holder).await,
        Some((TurnStatus::InProgress, updated)) if now_ms.saturating_sub(updated) < STALE_TURN_MS => {
            return Ok(Reconciled::Live);
        }
        Some((TurnStatus::InProgress, _)) => {
            // A new trigger (the tail), so the step writes under a producer epoch of its own.
            let tail = stores.log.metadata(&path).await?.tail.seq();
            let job = TurnJob::new(org, session_id, &holder.turn_id, tail);
            stores.turns.enqueue(&job).await?;
            tracing::warn!(org, session = session_id, turn = %holder.turn_id, "a running turn stood still too long; queued it again");
            return Ok(Reconciled::Requeued(job));
        }
        Some((TurnStatus::Queued, _)) | None => {}
    }
    let Some(trigger_seq) = find_message(stores.log, &path, &holder.turn_id, holder.since_ms).await? else {
        return release(stores, org, session_id, holder).await;
    };
    let job = TurnJob::new(org, session_id, &holder.turn_id, trigger_seq);
    let queued = TurnRecord::at(&holder.turn_id, trigger_seq, TurnStatus::Queued, None, now_ms);
    stores.sessions.record_turn(org, session_id, &queued).await?;
    stores.turns.enqueue(&job).await?;
    tracing::warn!(org, session = session_id, turn = %holder.turn_id, trigger_seq, "a claimed turn was never queued; queued it");
    Ok(Reconciled::Requeued(job))
}

async fn release(
    stores: &ClaimStores<'_>,
    org: &str,
    session_id: &str,
    holder: &PendingTurn,
) -> Result<Reconciled, Error> {
    stores.sessions.release_turn(org, session_id, &holder.turn_id).await?;
    tracing::warn!(org, session = session_id, turn = %holder.turn_id, "released a claim with no live turn behind it");
    Ok(Reconciled::Released)
}

/// The seq of the submission that started `turn_id`, looked for from the end of the chat back
/// to its claim's time.
async fn find_message(
    log: &dyn StreamLog,
    path: &spool_log::stream::StreamPath,
    turn_id: &str,
    since_ms: i64,
) -> Result<Option<u64>, Error> {
    let tail = log.metadata(path).await?.tail.seq();
    let mut end = tail;
    while end > 0 {
        let start = end.saturating_sub(SEARCH_WINDOW);
        let page = read_events(log, path, start, usize::try_from(end - start).unwrap_or(usize::MAX)).await?;
        let mut older = false;
        for event in page.events.iter().rev() {
            if event.kind == EventKind::Submit && event.turn_id.as_deref() == Some(turn_id) {
                return Ok(Some(event.seq));
            }
            older |= timestamp_ms(&event.ts).is_some_and(|ts| ts < since_ms - CLOCK_SKEW_MS);
        }
        if older {
            break;
        }
        end = start;
    }
    Ok(None)
}

fn timestamp_ms(ts: &str) -> Option<i64> {
    let at = OffsetDateTime::parse(ts, &Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_to_milliseconds() {
        assert_eq!(timestamp_ms("1970-01-01T00:00:01.500Z"), Some(1500));
        assert_eq!(timestamp_ms("not a time"), None);
    }
}
