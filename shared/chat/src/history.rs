//! # A chat's history, read cheaply: its message index
//!
//! Most of a long chat's events are `message_update` deltas (about ten a second while an agent
//! answers), and every one of them is repeated whole in its message's `message_end`. What an
//! agent needs of the chat's past is its complete messages, tool calls and results, answers,
//! notes and summaries: every event but the deltas ([`indexed`]). The chat's **message index**
//! is a second stream beside the chat's, `sessions/{id}/messages`, holding exactly those
//! events, byte for byte as the chat holds them (with their own `seq`), in order.
//!
//! The index is derived: the engine brings it up to the chat's tail at the start of a step
//! ([`catch_up`]), reading only what the chat gained since (one turn's events), and appends
//! with a `Stream-Seq` (the last event's seq, zero-padded) so two workers catching up at once
//! never write an event twice: the second gets a conflict and leaves it to the first. A lost
//! or damaged index costs time, never history: it is rebuilt from the chat.
//!
//! A step then reads the index backwards from its tail only as far as the latest
//! `history_compacted` summary ([`since_summary`]): with an agent's context budget keeping
//! what lies after a summary bounded, a step reads about as much of a chat of 100,000 events as
//! of a new one.

use bytes::Bytes;
use serde::Deserialize;
use spool_log::{
    error::Error,
    port::StreamLog,
    stream::{Append, ContentType, CreateStream, Offset, Position, StreamPath},
};

use crate::{branch::Branch, event::ChatEvent, session::Event};

/// How many index messages the first backward read takes; each further one takes twice as
/// many as the one before, up to [`READ_BACK_MAX`].
const READ_BACK: u64 = 64;
/// The most one backward read takes.
const READ_BACK_MAX: u64 = 4096;
/// How many events one catch-up append carries at most.
const BATCH: usize = 256;

/// Whether an event of this type is in the message index: all but the deltas.
pub fn indexed(event_type: &str) -> bool {
    event_type != "message_update"
}

/// The message index of chat `id` of `org`.
pub fn index_path(org: &str, id: &str) -> Result<StreamPath, Error> {
    StreamPath::in_org(org, &format!("sessions/{id}/messages"))
}

/// The two fields of an event the index needs, read without parsing the rest.
#[derive(Deserialize)]
struct Head {
    seq: u64,
    #[serde(rename = "type")]
    event_type: String,
}

fn head(path: &StreamPath, bytes: &[u8]) -> Result<Head, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
        what: format!("an event of `{path}`: {e}"),
    })
}

fn event(path: &StreamPath, bytes: &[u8]) -> Result<Event, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
        what: format!("an event of `{path}`: {e}"),
    })
}

/// The seq of the last event in the index (0 when empty), creating the index if it is not there.
async fn indexed_through(log: &dyn StreamLog, index: &StreamPath) -> Result<u64, Error> {
    let tail = match log.metadata(index).await {
        Ok(meta) => meta.tail.seq(),
        Err(Error::NotFound { .. } | Error::Gone { .. }) => {
            let json = ContentType::parse("application/json")?;
            log.create(index, CreateStream::new(json)).await?.meta().tail.seq()
        }
        Err(e) => return Err(e),
    };
    if tail == 0 {
        return Ok(0);
    }
    let chunk = log.read(index, Position::At(Offset::after(tail - 1)), None).await?;
    match chunk.messages.first() {
        Some(last) => Ok(head(index, last)?.seq),
        None => Ok(0),
    }
}

/// Brings chat `id`'s message index up to the chat's tail; answers the seq it is indexed
/// through (another worker's catch-up running at once may still be adding the rest).
pub async fn catch_up(log: &dyn StreamLog, org: &str, id: &str) -> Result<u64, Error> {
    let chat = crate::session::Session::stream(org, id)?;
    let index = index_path(org, id)?;
    let chat_tail = log.metadata(&chat).await?.tail.seq();
    let mut through = indexed_through(log, &index).await?;
    let started = through;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut last = through;
    let mut next = through;
    while next < chat_tail {
        let chunk = log.read(&chat, Position::At(Offset::after(next)), None).await?;
        if chunk.messages.is_empty() {
            break;
        }
        for message in chunk.messages {
            let h = head(&chat, &message)?;
            next = h.seq;
            if indexed(&h.event_type) {
                last = h.seq;
                batch.push(message);
            }
            if batch.len() >= BATCH {
                if !append(log, &index, std::mem::take(&mut batch), last).await? {
                    return Ok(through);
                }
                through = last;
            }
        }
    }
    if !batch.is_empty() {
        if !append(log, &index, batch, last).await? {
            return Ok(through);
        }
        through = last;
    }
    if through > started {
        tracing::debug!(org, chat = id, from = started, through, "message index caught up");
    }
    Ok(through.max(next.min(chat_tail)))
}

/// Appends a batch ending at chat seq `last`; false when another catch-up got there first.
async fn append(log: &dyn StreamLog, index: &StreamPath, batch: Vec<Bytes>, last: u64) -> Result<bool, Error> {
    let append = Append {
        stream_seq: Some(format!("{last:020}")),
        ..Append::messages(batch)
    };
    match log.append(index, append).await {
        Ok(_) => Ok(true),
        Err(Error::StreamSeqConflict { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The chat's indexed events on its active branch ([`crate::branch`]) after the branch's
/// latest `history_compacted` summary's range (the summary included), up to `through` (a seq),
/// oldest first; all of them when there is no summary. `later` is the branch a later event (one
/// after `through`) set, if the caller read one. Reads the index backwards from its tail,
/// [`READ_BACK`] events first and twice as many each time after, so a summary near the tail
/// costs one small read; a summary another branch holds is passed over.
pub async fn since_summary(
    log: &dyn StreamLog,
    org: &str,
    id: &str,
    through: u64,
    later: Option<Branch>,
) -> Result<Vec<Event>, Error> {
    let index = index_path(org, id)?;
    let mut end = match log.metadata(&index).await {
        Ok(meta) => meta.tail.seq(),
        Err(Error::NotFound { .. } | Error::Gone { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut branch = later;
    let mut chunks: Vec<Vec<Event>> = Vec::new();
    let mut covered: Option<u64> = None;
    let mut step = READ_BACK;
    while end > 0 {
        let start = end.saturating_sub(step);
        step = (step * 2).min(READ_BACK_MAX);
        let mut events = read_index(log, &index, start, end).await?;
        events.retain(|e| e.seq <= through);
        // Newest first: a summary counts if the branch in force after it shows it.
        for e in events.iter().rev() {
            if covered.is_some() {
                break;
            }
            match &e.event {
                ChatEvent::HistoryCompacted(c) if branch.as_ref().is_none_or(|b| b.shows(e.seq)) => {
                    covered = Some(c.through_seq);
                }
                _ if branch.is_none() => branch = Branch::set_by(e),
                _ => {}
            }
        }
        let reached = covered.is_some_and(|c| events.first().is_some_and(|e| e.seq <= c + 1));
        chunks.push(events);
        if reached {
            break;
        }
        end = start;
    }
    let mut events: Vec<Event> = chunks.into_iter().rev().flatten().collect();
    let branch = branch.unwrap_or_default();
    let after = covered.unwrap_or(0);
    events.retain(|e| e.seq > after && branch.shows(e.seq));
    Ok(events)
}

/// Every event the chat's message index holds, oldest first (on every branch).
pub async fn all(log: &dyn StreamLog, org: &str, id: &str) -> Result<Vec<Event>, Error> {
    let index = index_path(org, id)?;
    match log.metadata(&index).await {
        Ok(meta) => read_index(log, &index, 0, meta.tail.seq()).await,
        Err(Error::NotFound { .. } | Error::Gone { .. }) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The index's messages after offset `start` through `end`.
async fn read_index(log: &dyn StreamLog, index: &StreamPath, start: u64, end: u64) -> Result<Vec<Event>, Error> {
    let mut events = Vec::with_capacity(usize::try_from(end.saturating_sub(start)).unwrap_or(0).min(4096));
    let mut at = start;
    while at < end {
        let chunk = log.read(index, Position::At(Offset::after(at)), None).await?;
        if chunk.messages.is_empty() {
            break;
        }
        for message in chunk
            .messages
            .iter()
            .take(usize::try_from(end - at).unwrap_or(usize::MAX))
        {
            events.push(event(index, message)?);
            at += 1;
        }
    }
    Ok(events)
}

/// Deletes chat `id`'s message index, if it has one.
pub async fn remove(log: &dyn StreamLog, org: &str, id: &str) -> Result<(), Error> {
    match log.delete(&index_path(org, id)?).await {
        Ok(()) | Err(Error::NotFound { .. } | Error::Gone { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
