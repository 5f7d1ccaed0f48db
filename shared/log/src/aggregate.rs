//! # Aggregate streams: one stream many requests add to, appended off their path
//!
//! A workspace's feed and an organization's audit stream gather events from every request of
//! their workspace or organization. If each request appended to one itself, the stream would
//! be a hot key on AWS: every busy workspace's posts and every handshake storm would contend at
//! one tail (one DynamoDB partition key, conditional puts refused and retried). So a request
//! only hands its event over ([`Aggregates::add`]), and that is all it waits for:
//!
//! - on AWS, onto a FIFO queue whose message group is the stream: SQS keeps each stream's
//!   events in the order they were handed over and delivers one batch of a group at a time;
//!   the worker appends a batch in one append ([`apply`]);
//! - on one machine, where a stream has no hot key, [`Direct`] appends at once.
//!
//! Every event carries an `id` ([`stamp`]). [`apply`] skips the events whose id is among the
//! stream's last [`DEDUPE_WINDOW`] messages and appends only on the tail it read, so a batch
//! delivered again (its worker crashed after the append, or its lease ran out) appends nothing
//! twice: a follower sees each event once, in the order it was handed over.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    error::Error,
    port::StreamLog,
    stream::{Append, ContentType, CreateStream, Offset, Position, StreamPath},
};

/// What becomes of an event whose stream does not exist.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IfMissing {
    /// The stream is made (an organization's audit stream, on its first record).
    Create,
    /// The event is dropped: its stream went with what it followed (a deleted workspace's
    /// feed, whose chats' last events arrive after it).
    #[default]
    Drop,
}

/// Where requests hand over events for aggregate streams.
#[async_trait]
pub trait Aggregates: Send + Sync {
    /// Adds `event` (a JSON object, [`stamp`]ed with an `id` when it has none) to the stream at
    /// `path`. Once this returns, the event is durable: in the stream, or in the queue that
    /// appends it.
    async fn add(&self, path: &StreamPath, event: Value, if_missing: IfMissing) -> Result<(), Error>;
}

/// How many of a stream's last messages [`apply`] looks through for the ids of a batch it is
/// given again. A stream's events are appended by one delivery of its group at a time, each at
/// most a batch of SQS's (10 messages), and a batch delivered again starts with the messages of
/// the one before: they are among the stream's last 10. Twice that, to spare.
pub const DEDUPE_WINDOW: u64 = 20;

/// How many times [`apply`] reads the tail again when another append moved it.
const MAX_ROUNDS: usize = 5;

/// Gives `event` an `id` unless it has one; its id.
pub fn stamp(event: &mut Value) -> Result<String, Error> {
    let Value::Object(fields) = event else {
        return Err(Error::invalid("aggregate event", "it is not a JSON object"));
    };
    if let Some(Value::String(id)) = fields.get("id") {
        return Ok(id.clone());
    }
    let id = format!("ev_{}", uuid::Uuid::now_v7().simple());
    fields.insert("id".to_owned(), Value::String(id.clone()));
    Ok(id)
}

/// An event's id, if it has one.
fn id_of(event: &Value) -> Option<&str> {
    event.get("id").and_then(Value::as_str)
}

/// Appends at once: for one machine, and wherever no queue is configured.
#[derive(Clone)]
pub struct Direct(pub Arc<dyn StreamLog>);

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Direct")
    }
}

#[async_trait]
impl Aggregates for Direct {
    async fn add(&self, path: &StreamPath, mut event: Value, if_missing: IfMissing) -> Result<(), Error> {
        stamp(&mut event)?;
        let body = Bytes::from(event.to_string());
        match self.0.append(path, Append::one(body.clone())).await {
            Err(Error::NotFound { .. } | Error::Gone { .. }) => match if_missing {
                IfMissing::Create => {
                    create(self.0.as_ref(), path).await?;
                    self.0.append(path, Append::one(body)).await.map(drop)
                }
                IfMissing::Drop => {
                    tracing::debug!(%path, "no such aggregate stream; the event is dropped");
                    Ok(())
                }
            },
            other => other.map(drop),
        }
    }
}

async fn create(log: &dyn StreamLog, path: &StreamPath) -> Result<(), Error> {
    log.create(path, CreateStream::new(ContentType::parse("application/json")?))
        .await
        .map(drop)
}

/// Appends `events` (handed over in this order, each with an `id`) to the stream at `path` in
/// one append, leaving out those already among its last [`DEDUPE_WINDOW`] messages; how many
/// it appended. The append is made on the tail it read, so two deliveries of one batch at once
/// cannot both append it.
pub async fn apply(
    log: &dyn StreamLog,
    path: &StreamPath,
    events: &[Value],
    if_missing: IfMissing,
) -> Result<usize, Error> {
    Ok(apply_reading(log, path, events, if_missing).await?.0)
}

/// A stream's tail and the ids of its last messages up to it, as this process last wrote them.
#[derive(Debug, Clone)]
struct Recent {
    tail: u64,
    /// Oldest first, at most [`DEDUPE_WINDOW`].
    ids: VecDeque<String>,
}

impl Recent {
    fn new(tail: u64, ids: impl IntoIterator<Item = String>) -> Self {
        let mut recent = Self {
            tail,
            ids: VecDeque::new(),
        };
        recent.extend(0, ids);
        recent
    }

    /// After `appended` more messages, these ids among them.
    fn extend(&mut self, appended: usize, ids: impl IntoIterator<Item = String>) {
        self.tail += appended as u64;
        self.ids.extend(ids);
        while self.ids.len() > DEDUPE_WINDOW as usize {
            self.ids.pop_front();
        }
    }
}

/// The events of `events` that are not among `seen` (nor repeated in the batch), encoded, with
/// their ids.
fn fresh(events: &[Value], seen: &HashSet<&str>) -> (Vec<Bytes>, Vec<String>) {
    let mut batch = HashSet::new();
    events
        .iter()
        .filter(|e| id_of(e).is_none_or(|id| !seen.contains(id) && batch.insert(id)))
        .map(|e| (Bytes::from(e.to_string()), id_of(e).map(str::to_owned)))
        .fold((Vec::new(), Vec::new()), |(mut bodies, mut ids), (body, id)| {
            bodies.push(body);
            ids.extend(id);
            (bodies, ids)
        })
}

/// [`apply`], and what the stream's tail and last ids are after its append (`None` when it
/// appended nothing).
async fn apply_reading(
    log: &dyn StreamLog,
    path: &StreamPath,
    events: &[Value],
    if_missing: IfMissing,
) -> Result<(usize, Option<Recent>), Error> {
    for _ in 0..MAX_ROUNDS {
        let tail = match log.metadata(path).await {
            Ok(meta) if meta.closed => {
                tracing::warn!(%path, events = events.len(), "the aggregate stream is closed; its events are dropped");
                return Ok((0, None));
            }
            Ok(meta) => meta.tail.seq(),
            Err(Error::NotFound { .. } | Error::Gone { .. }) => match if_missing {
                IfMissing::Create => {
                    create(log, path).await?;
                    continue;
                }
                IfMissing::Drop => {
                    tracing::debug!(%path, events = events.len(), "no such aggregate stream; its events are dropped");
                    return Ok((0, None));
                }
            },
            Err(e) => return Err(e),
        };
        let seen = recent_ids(log, path, tail).await?;
        let (bodies, ids) = fresh(events, &seen.iter().map(String::as_str).collect());
        if bodies.is_empty() {
            return Ok((0, Some(Recent::new(tail, seen))));
        }
        let count = bodies.len();
        let append = Append {
            expected_tail: Some(tail),
            ..Append::messages(bodies)
        };
        match log.append(path, append).await {
            Ok(_) => {
                let mut recent = Recent::new(tail, seen);
                recent.extend(count, ids);
                return Ok((count, Some(recent)));
            }
            // Another delivery appended first, or the stream went: look again.
            Err(Error::TailMismatch { .. } | Error::NotFound { .. } | Error::Gone { .. } | Error::Closed { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Err(Error::unavailable(
        "append to an aggregate stream",
        format!("the tail of {path} kept moving"),
    ))
}

/// Streams whose tail and last ids an [`Appender`] keeps at most (then it forgets them all).
const REMEMBERED_STREAMS: usize = 10_000;

/// [`apply`] for a worker that appends many batches to the same streams: it remembers each
/// stream's tail and last ids as of its own last append, so while no one else appends to the
/// stream, a batch is checked against those ids in memory and appended on that tail, with no
/// read: on AWS, one conditional `PutItem`. The append's condition is the proof: if the tail
/// is still the one remembered, the stream's last messages are the ones remembered (a log only
/// grows). If it moved (another worker appended, the stream went), the batch takes
/// [`apply`]'s path of reads.
pub struct Appender {
    log: Arc<dyn StreamLog>,
    recent: Mutex<HashMap<StreamPath, Recent>>,
}

impl std::fmt::Debug for Appender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Appender").finish_non_exhaustive()
    }
}

impl Appender {
    /// Appending to `log`.
    pub fn new(log: Arc<dyn StreamLog>) -> Self {
        Self {
            log,
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// The log it appends to.
    pub fn log(&self) -> &Arc<dyn StreamLog> {
        &self.log
    }

    /// [`apply`], reading nothing when this appender wrote the stream's tail.
    pub async fn apply(&self, path: &StreamPath, events: &[Value], if_missing: IfMissing) -> Result<usize, Error> {
        // Taken out while the batch is decided: a concurrent batch of the stream reads.
        let known = self.lock().remove(path);
        if let Some(mut recent) = known {
            let (bodies, ids) = fresh(events, &recent.ids.iter().map(String::as_str).collect());
            if bodies.is_empty() {
                self.remember(path, recent);
                return Ok(0);
            }
            let count = bodies.len();
            let append = Append {
                expected_tail: Some(recent.tail),
                ..Append::messages(bodies)
            };
            match self.log.append(path, append).await {
                Ok(_) => {
                    recent.extend(count, ids);
                    self.remember(path, recent);
                    return Ok(count);
                }
                Err(
                    Error::TailMismatch { .. } | Error::NotFound { .. } | Error::Gone { .. } | Error::Closed { .. },
                ) => {
                    tracing::debug!(%path, "the aggregate stream moved since this worker's last append; reading it");
                }
                Err(e) => return Err(e),
            }
        }
        let (count, recent) = apply_reading(self.log.as_ref(), path, events, if_missing).await?;
        if let Some(recent) = recent {
            self.remember(path, recent);
        }
        Ok(count)
    }

    fn remember(&self, path: &StreamPath, recent: Recent) {
        let mut streams = self.lock();
        if streams.len() >= REMEMBERED_STREAMS {
            streams.clear();
        }
        streams.insert(path.clone(), recent);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<StreamPath, Recent>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The ids among the last [`DEDUPE_WINDOW`] messages before `tail`, oldest first.
async fn recent_ids(log: &dyn StreamLog, path: &StreamPath, tail: u64) -> Result<Vec<String>, Error> {
    let mut ids = Vec::new();
    let mut from = Offset::after(tail.saturating_sub(DEDUPE_WINDOW));
    while from.seq() < tail {
        let chunk = log.read(path, Position::At(from), None).await?;
        for message in &chunk.messages {
            if let Ok(event) = serde_json::from_slice::<Value>(message)
                && let Some(id) = id_of(&event)
            {
                ids.push(id.to_owned());
            }
        }
        if chunk.messages.is_empty() || chunk.up_to_date {
            break;
        }
        from = chunk.next_offset;
    }
    Ok(ids)
}
