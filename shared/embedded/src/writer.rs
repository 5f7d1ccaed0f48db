//! # The writer thread: group commit over SQLite
//!
//! Every change to the database goes through one thread per process. It takes whatever jobs
//! are queued, runs each in its own savepoint (one failing job does not undo the others), and
//! commits them together: one fsync for the whole group, however many streams it touched.
//! Answers are sent only after the commit is durable, so nothing is acknowledged that a crash
//! could lose. Other processes on the same file take turns through SQLite's write lock.

use std::{
    collections::HashMap,
    sync::{Arc, mpsc},
};

use bytes::Bytes;
use rusqlite::Connection;
use spool_log::{
    error::Error,
    notify::Delivered,
    read::read_stored_now,
    state::{StreamState, apply_append},
    stream::{Append, AppendAck, CreateStream, Created, Offset, StreamPath},
};
use tokio::sync::oneshot;

use crate::{
    Shared,
    db::{self, sql},
};

/// Jobs grouped into one transaction at most.
const MAX_GROUP: usize = 512;

/// A change for the writer thread.
pub(crate) enum Job {
    Create {
        path: StreamPath,
        req: CreateStream,
        reply: oneshot::Sender<Result<Created, Error>>,
    },
    Append {
        path: StreamPath,
        req: Append,
        reply: oneshot::Sender<Result<AppendAck, Error>>,
    },
    Delete {
        path: StreamPath,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Touch {
        path: StreamPath,
        sid: String,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    CommitSealed {
        sid: String,
        from: u64,
        to: u64,
        reply: oneshot::Sender<Result<bool, Error>>,
    },
    ReleaseHot {
        sid: String,
        through: u64,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

/// What a job does once its group is committed (or fails to commit).
type Finish = Box<dyn FnOnce(Option<&str>) + Send>;

fn finish<T: Send + 'static>(reply: oneshot::Sender<Result<T, Error>>, result: Result<T, Error>) -> Finish {
    Box::new(move |commit_error| {
        let answer = match commit_error {
            None => result,
            Some(message) => result.and_then(|_| Err(Error::unavailable("embedded store: commit", message.to_owned()))),
        };
        let _ = reply.send(answer);
    })
}

/// Effects to apply after a successful commit.
#[derive(Default)]
struct Effects {
    /// Streams changed, with their tail after an append.
    changed: Vec<(StreamPath, Option<Offset>)>,
    /// The messages of each stream's last appends, when they left it open and are small: its
    /// readers get them from memory ([`spool_log::notify::Delivered`]).
    delivered: HashMap<StreamPath, Delivered>,
    seal: Vec<StreamPath>,
    removed_sids: Vec<String>,
    /// Messages appended, by storage id and first sequence number, for [`crate::recent`].
    appended: Vec<(String, u64, Vec<Bytes>)>,
}

/// How far a group's effects had come before a job.
struct Mark {
    changed: usize,
    seal: usize,
    removed_sids: usize,
    appended: usize,
    delivered: HashMap<StreamPath, Delivered>,
}

impl Effects {
    fn mark(&self) -> Mark {
        Mark {
            changed: self.changed.len(),
            seal: self.seal.len(),
            removed_sids: self.removed_sids.len(),
            appended: self.appended.len(),
            delivered: self.delivered.clone(),
        }
    }

    /// Forgets what a job noted after `mark`: its writes were rolled back.
    fn undo_to(&mut self, mark: Mark) {
        self.changed.truncate(mark.changed);
        self.seal.truncate(mark.seal);
        self.removed_sids.truncate(mark.removed_sids);
        self.appended.truncate(mark.appended);
        self.delivered = mark.delivered;
    }
}

/// Runs the writer loop until every sender is gone.
pub(crate) fn run(conn: Connection, shared: Arc<Shared>, jobs: mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        commit_group(&conn, &shared, group);
    }
}

fn commit_group(conn: &Connection, shared: &Shared, group: Vec<Job>) {
    let mut finishes: Vec<Finish> = Vec::with_capacity(group.len());
    let mut effects = Effects::default();
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let message = format!("cannot start a write transaction: {e}");
        for job in group {
            run_job_failed(job, &message);
        }
        return;
    }
    for job in group {
        let savepoint = conn.execute_batch("SAVEPOINT job");
        let mark = effects.mark();
        let (done, ok) = match savepoint {
            Ok(()) => execute(conn, shared, job, &mut effects),
            Err(e) => {
                run_job_failed(job, &format!("savepoint: {e}"));
                continue;
            }
        };
        let end = if ok {
            "RELEASE job"
        } else {
            // What the job wrote is rolled back: so are the effects it noted.
            effects.undo_to(mark);
            "ROLLBACK TO job; RELEASE job"
        };
        if let Err(e) = conn.execute_batch(end) {
            tracing::error!(error = %e, "embedded store: cannot end savepoint");
        }
        finishes.push(done);
    }
    match conn.execute_batch("COMMIT") {
        Ok(()) => {
            for done in finishes {
                done(None);
            }
            after_commit(conn, shared, effects);
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            let message = e.to_string();
            tracing::error!(error = %message, "embedded store: commit failed");
            for done in finishes {
                done(Some(&message));
            }
        }
    }
}

fn after_commit(conn: &Connection, shared: &Shared, effects: Effects) {
    for (path, tail) in &effects.changed {
        // An append's tail goes out with its messages, below.
        if tail.is_none() || !effects.delivered.contains_key(path) {
            shared.notifier.publish(path, *tail);
        }
    }
    for (path, delivered) in effects.delivered {
        shared.notifier.publish_delivered(&path, delivered);
    }
    for path in effects.seal {
        shared.request_seal(path);
    }
    for (sid, first, messages) in &effects.appended {
        shared.recent.add(sid, *first, messages);
    }
    for sid in effects.removed_sids {
        shared.recent.remove(&sid);
        match shared.pages.remove_all(&sid) {
            Ok(()) => {
                if let Err(e) = db::forget_garbage(conn, &sid) {
                    tracing::warn!(sid, error = %e, "embedded store: cannot forget removed pages");
                }
            }
            Err(e) => tracing::warn!(sid, error = %e, "embedded store: cannot remove pages; retried at start-up"),
        }
    }
}

fn run_job_failed(job: Job, message: &str) {
    fn error<T>(message: &str) -> Result<T, Error> {
        Err(Error::unavailable("embedded store: write", message.to_owned()))
    }
    match job {
        Job::Create { reply, .. } => drop(reply.send(error(message))),
        Job::Append { reply, .. } => drop(reply.send(error(message))),
        Job::Delete { reply, .. } | Job::Touch { reply, .. } | Job::ReleaseHot { reply, .. } => {
            drop(reply.send(error(message)));
        }
        Job::CommitSealed { reply, .. } => drop(reply.send(error(message))),
    }
}

/// Runs one job inside its savepoint; returns how to answer it and whether it succeeded.
fn execute(conn: &Connection, shared: &Shared, job: Job, effects: &mut Effects) -> (Finish, bool) {
    let now = shared.clock.now_ms();
    macro_rules! answer {
        ($reply:expr, $result:expr) => {{
            let result = $result;
            let ok = result.is_ok();
            (finish($reply, result), ok)
        }};
    }
    match job {
        Job::Create { path, req, reply } => answer!(reply, create(conn, shared, &path, &req, now, effects)),
        Job::Append { path, req, reply } => answer!(reply, append(conn, shared, &path, &req, now, effects)),
        Job::Delete { path, reply } => answer!(reply, delete(conn, &path, now, effects)),
        Job::Touch { path, sid, reply } => answer!(
            reply,
            conn.execute(
                "UPDATE streams SET touched_ms = ?3 WHERE path = ?1 AND sid = ?2 AND touched_ms < ?3",
                rusqlite::params![path.as_str(), sid, now],
            )
            .map(drop)
            .map_err(|e| sql("touch", e))
        ),
        Job::CommitSealed { sid, from, to, reply } => answer!(
            reply,
            conn.execute(
                "UPDATE streams SET sealed = ?3 WHERE sid = ?1 AND sealed = ?2",
                rusqlite::params![sid, from as i64, to as i64],
            )
            .map(|n| n == 1)
            .map_err(|e| sql("commit sealed", e))
        ),
        Job::ReleaseHot { sid, through, reply } => answer!(
            reply,
            conn.execute(
                "DELETE FROM messages WHERE sid = ?1 AND seq <= ?2",
                rusqlite::params![sid, through as i64],
            )
            .map(drop)
            .map_err(|e| sql("release hot tail", e))
        ),
    }
}

fn live_state(conn: &Connection, path: &StreamPath, now: i64) -> Result<StreamState, Error> {
    let state = db::load_state(conn, path)?.ok_or_else(|| Error::NotFound { path: path.clone() })?;
    state.check_live(now)?;
    Ok(state)
}

fn create(
    conn: &Connection,
    shared: &Shared,
    path: &StreamPath,
    req: &CreateStream,
    now: i64,
    effects: &mut Effects,
) -> Result<Created, Error> {
    if let Some(existing) = db::load_state(conn, path)? {
        if existing.deleted || existing.is_retained(now) {
            return Err(Error::ConfigMismatch {
                path: path.clone(),
                reason: "a deleted stream at this path is kept for its forks".to_owned(),
            });
        }
        if !existing.is_expired(now) {
            existing.check_same_config(req)?;
            return Ok(Created::Existing(existing.meta()));
        }
        remove(conn, existing, now, effects)?;
    }
    let state = match &req.fork {
        None => {
            let state = StreamState::new(path.clone(), req, now, &shared.limits)?;
            db::insert_state(conn, &state)?;
            db::insert_messages(conn, &state.sid, 1, &req.initial)?;
            state
        }
        Some(fork) => {
            let mut source = db::load_state(conn, &fork.source)?
                .filter(|s| !s.is_expired(now))
                .ok_or_else(|| Error::NotFound {
                    path: fork.source.clone(),
                })?;
            let plan = source.plan_fork(path, fork)?;
            let cut = match plan.cut {
                Some((seq, _)) => read_stored_now(
                    &crate::Snapshot {
                        conn,
                        pages: &shared.pages,
                        recent: &shared.recent,
                    },
                    &source,
                    seq - 1,
                    1,
                )?
                .0
                .into_iter()
                .next(),
                None => None,
            };
            let own = plan.own_messages(cut, &req.initial)?;
            let state = StreamState::fork_of(&source, path.clone(), req, &plan, &own, now, &shared.limits)?;
            db::insert_state(conn, &state)?;
            db::insert_messages(conn, &state.sid, plan.at + 1, &own)?;
            source.forks += 1;
            db::update_state(conn, &source)?;
            state
        }
    };
    effects.changed.push((path.clone(), None));
    effects.delivered.remove(path);
    if state.closed || state.crossed_page_boundary(0, 0, &shared.limits) {
        effects.seal.push(path.clone());
    }
    Ok(Created::New(state.meta()))
}

/// Removes a stream and its data, then releases its source: a deleted or expired source with
/// no fork left goes too, and so on up the chain.
fn remove(conn: &Connection, state: StreamState, now: i64, effects: &mut Effects) -> Result<(), Error> {
    let mut next = Some(state);
    while let Some(state) = next.take() {
        db::remove_stream(conn, &state.sid)?;
        effects.changed.push((state.path.clone(), None));
        effects.delivered.remove(&state.path);
        effects.removed_sids.push(state.sid);
        let Some(origin) = state.origin else { break };
        let Some(mut source) = db::load_by_sid(conn, &origin.source_sid)? else {
            break;
        };
        source.forks = source.forks.saturating_sub(1);
        if source.forks == 0 && (source.deleted || source.is_expired(now)) {
            next = Some(source);
        } else {
            db::update_state(conn, &source)?;
        }
    }
    Ok(())
}

fn append(
    conn: &Connection,
    shared: &Shared,
    path: &StreamPath,
    req: &Append,
    now: i64,
    effects: &mut Effects,
) -> Result<AppendAck, Error> {
    let mut state = live_state(conn, path, now)?;
    let producer = match &req.producer {
        Some(claim) => db::load_producer(conn, &state.sid, &claim.id)?,
        None => None,
    };
    let (bytes_before, tail_before) = (state.total_bytes, state.tail);
    let applied = apply_append(&mut state, producer, req, now, &shared.limits)?;
    if applied.changed {
        db::update_state(conn, &state)?;
        if let Some(range) = applied.ack.appended {
            db::insert_messages(conn, &state.sid, range.first, &req.messages)?;
            effects
                .appended
                .push((state.sid.clone(), range.first, req.messages.clone()));
        }
        if let Some((id, producer)) = &applied.producer {
            db::store_producer(conn, &state.sid, id, *producer)?;
        }
        effects
            .changed
            .push((path.clone(), (!state.closed).then(|| Offset::after(state.tail))));
        deliver(
            effects,
            &state,
            applied.ack.appended.map(|r| r.first),
            &req.messages,
            shared,
        );
        if state.closed || state.crossed_page_boundary(bytes_before, tail_before, &shared.limits) {
            effects.seal.push(path.clone());
        }
    }
    Ok(applied.ack)
}

/// Keeps the messages an append committed (from `first`) for the stream's live readers, joined
/// to those of its earlier appends in this commit; or, when they cannot be (the stream closed,
/// the messages too large, nothing appended), forgets what was kept, so no reader is handed
/// messages that do not end at the tail.
fn deliver(effects: &mut Effects, state: &StreamState, first: Option<u64>, messages: &[Bytes], shared: &Shared) {
    let limit = shared.limits.max_read_bytes.min(MAX_DELIVERED_BYTES);
    let path = &state.path;
    let Some(first) = first.filter(|_| !state.closed) else {
        effects.delivered.remove(path);
        return;
    };
    let joined = match effects.delivered.remove(path) {
        Some(mut kept) if kept.stream_id == state.sid && kept.last() + 1 == first => {
            kept.messages.extend(messages.iter().cloned());
            kept
        }
        _ => Delivered {
            stream_id: state.sid.clone(),
            content_type: state.content_type.clone(),
            first,
            messages: messages.to_vec(),
        },
    };
    if joined.messages.iter().map(Bytes::len).sum::<usize>() <= limit {
        effects.delivered.insert(path.clone(), joined);
    }
}

/// The most a commit hands to a stream's live readers from memory; larger appends are read.
const MAX_DELIVERED_BYTES: usize = 1024 * 1024;

fn delete(conn: &Connection, path: &StreamPath, now: i64, effects: &mut Effects) -> Result<(), Error> {
    let mut state = live_state(conn, path, now)?;
    if state.forks > 0 {
        // Soft delete: gone for clients, kept for the forks that read it.
        state.deleted = true;
        db::update_state(conn, &state)?;
        effects.changed.push((path.clone(), None));
        effects.delivered.remove(path);
        return Ok(());
    }
    remove(conn, state, now, effects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolled_back_job_leaves_no_effect() {
        let path = StreamPath::parse("a/b").unwrap();
        let delivered = |first| Delivered {
            stream_id: "s".to_owned(),
            content_type: spool_log::stream::ContentType::parse("application/json").unwrap(),
            first,
            messages: vec![Bytes::from("1")],
        };
        let mut effects = Effects::default();
        // A job that committed its effects
        effects.changed.push((path.clone(), Some(Offset::after(1))));
        effects.appended.push(("s".to_owned(), 1, vec![Bytes::from("1")]));
        effects.delivered.insert(path.clone(), delivered(1));
        let mark = effects.mark();
        // A job whose writes were rolled back after it noted its effects
        effects.changed.push((path.clone(), Some(Offset::after(2))));
        effects.seal.push(path.clone());
        effects.removed_sids.push("t".to_owned());
        effects.appended.push(("s".to_owned(), 2, vec![Bytes::from("2")]));
        effects.delivered.insert(path.clone(), delivered(2));
        effects.undo_to(mark);
        assert_eq!(effects.changed, vec![(path.clone(), Some(Offset::after(1)))]);
        assert!(effects.seal.is_empty() && effects.removed_sids.is_empty());
        assert_eq!(effects.appended.len(), 1);
        assert_eq!(effects.delivered.get(&path).map(|d| d.first), Some(1));
    }
}
