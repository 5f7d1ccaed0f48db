//! # The SQLite side of the embedded store
//!
//! One database file, `spool.db`, in WAL mode with `synchronous=FULL`: a commit is on disk
//! before it is acknowledged, readers never block the writer, and several processes can share
//! the file (SQLite's own file locks serialize their writes).
//!
//! Tables: `streams` (one row per stream head), `messages` (the hot tail, one row per message
//! until sealing moves it into a page file), `producers` (idempotent producer state) and
//! `garbage` (page directories of deleted streams still to remove).

use std::{path::Path, time::Duration};

use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};
use spool_log::{
    error::Error,
    state::{ProducerState, StreamState},
    stream::{ContentType, Expiry, ProducerClaim, StreamPath},
};

const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS streams (
    path         TEXT PRIMARY KEY NOT NULL,
    sid          TEXT NOT NULL UNIQUE,
    content_type TEXT NOT NULL,
    expiry       TEXT NOT NULL,
    created_ms   INTEGER NOT NULL,
    touched_ms   INTEGER NOT NULL,
    tail         INTEGER NOT NULL,
    total_bytes  INTEGER NOT NULL,
    closed       INTEGER NOT NULL,
    closed_by    TEXT,
    stream_seq   TEXT,
    sealed       INTEGER NOT NULL,
    lineage      TEXT NOT NULL DEFAULT '[]',
    origin       TEXT,
    forks        INTEGER NOT NULL DEFAULT 0,
    deleted      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS messages (
    sid  TEXT NOT NULL,
    seq  INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (sid, seq)
);
CREATE TABLE IF NOT EXISTS producers (
    sid      TEXT NOT NULL,
    producer TEXT NOT NULL,
    epoch    INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    offset_after INTEGER NOT NULL,
    PRIMARY KEY (sid, producer)
);
CREATE TABLE IF NOT EXISTS garbage (
    sid TEXT PRIMARY KEY NOT NULL
);
";

/// Opens a connection with Spool's settings, creating the schema on first use.
pub(crate) fn open(path: &Path) -> Result<Connection, Error> {
    let (conn, version) = connect(path, SCHEMA_VERSION)?;
    if version == 1 {
        // Version 2 added forks.
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             ALTER TABLE streams ADD COLUMN lineage TEXT NOT NULL DEFAULT '[]';
             ALTER TABLE streams ADD COLUMN origin TEXT;
             ALTER TABLE streams ADD COLUMN forks INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE streams ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
             PRAGMA user_version = 2;
             COMMIT;",
        )
        .map_err(|e| sql("upgrade schema to version 2", e))?;
    } else if version < SCHEMA_VERSION {
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        ))
        .map_err(|e| sql("create schema", e))?;
    }
    Ok(conn)
}

/// Opens a connection to the SQLite file at `path` with Spool's settings (WAL, synchronous
/// commits, a busy timeout so several processes can share it) and returns it with the file's
/// schema version, refusing a file newer than `max_version`.
pub(crate) fn connect(path: &Path, max_version: i64) -> Result<(Connection, i64), Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| sql(&format!("open {}", path.display()), e))?;
    // Several processes may open the file at once; wait for each other's locks rather than fail.
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(|e| sql("set busy timeout", e))?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(|e| sql("enable WAL", e))?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| sql("set synchronous", e))?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| sql("read schema version", e))?;
    if version > max_version {
        return Err(Error::unavailable(
            format!("{} was written by a newer Spool (schema {version})", path.display()),
            "upgrade spool or point SPOOL_DATA_DIR elsewhere",
        ));
    }
    Ok((conn, version))
}

/// Wraps a SQLite error.
pub(crate) fn sql(what: &str, e: rusqlite::Error) -> Error {
    Error::unavailable(format!("embedded store: {what}"), e)
}

const STATE_COLUMNS: &str = "path, sid, content_type, expiry, created_ms, touched_ms, tail, total_bytes, closed, \
                             closed_by, stream_seq, sealed, lineage, origin, forks, deleted";

/// A `streams` row as SQLite stores it.
struct StreamRow {
    path: String,
    sid: String,
    content_type: String,
    expiry: String,
    created_ms: i64,
    touched_ms: i64,
    tail: i64,
    total_bytes: i64,
    closed: bool,
    closed_by: Option<String>,
    stream_seq: Option<String>,
    sealed: i64,
    lineage: String,
    origin: Option<String>,
    forks: i64,
    deleted: bool,
}

fn state_row(row: &Row<'_>) -> rusqlite::Result<StreamRow> {
    Ok(StreamRow {
        path: row.get(0)?,
        sid: row.get(1)?,
        content_type: row.get(2)?,
        expiry: row.get(3)?,
        created_ms: row.get(4)?,
        touched_ms: row.get(5)?,
        tail: row.get(6)?,
        total_bytes: row.get(7)?,
        closed: row.get(8)?,
        closed_by: row.get(9)?,
        stream_seq: row.get(10)?,
        sealed: row.get(11)?,
        lineage: row.get(12)?,
        origin: row.get(13)?,
        forks: row.get(14)?,
        deleted: row.get(15)?,
    })
}

impl StreamRow {
    fn into_state(self) -> Result<StreamState, Error> {
        let corrupt = |what: &str| Error::Corrupt {
            what: format!("stream row `{}`: {what}", self.path),
        };
        Ok(StreamState {
            path: StreamPath::parse(self.path.clone()).map_err(|_| corrupt("path"))?,
            content_type: ContentType::parse(self.content_type.clone()).map_err(|_| corrupt("content type"))?,
            expiry: serde_json::from_str::<Expiry>(&self.expiry).map_err(|_| corrupt("expiry"))?,
            closed_by: self
                .closed_by
                .as_deref()
                .map(serde_json::from_str::<ProducerClaim>)
                .transpose()
                .map_err(|_| corrupt("closed_by"))?,
            sid: self.sid,
            created_ms: self.created_ms,
            touched_ms: self.touched_ms,
            tail: self.tail as u64,
            total_bytes: self.total_bytes as u64,
            closed: self.closed,
            stream_seq: self.stream_seq,
            sealed: self.sealed as u64,
            sealing: None,
            lineage: serde_json::from_str(&self.lineage).map_err(|_| corrupt("lineage"))?,
            origin: self
                .origin
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|_| corrupt("origin"))?,
            forks: self.forks as u64,
            deleted: self.deleted,
        })
    }
}

fn load_where(conn: &Connection, column: &str, key: &str) -> Result<Option<StreamState>, Error> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {STATE_COLUMNS} FROM streams WHERE {column} = ?1"))
        .map_err(|e| sql("prepare load", e))?;
    stmt.query_row([key], state_row)
        .optional()
        .map_err(|e| sql("load stream", e))?
        .map(StreamRow::into_state)
        .transpose()
}

/// The head of the stream at `path`, if any (expired or not).
pub(crate) fn load_state(conn: &Connection, path: &StreamPath) -> Result<Option<StreamState>, Error> {
    load_where(conn, "path", path.as_str())
}

/// Inserts a new stream head.
pub(crate) fn insert_state(conn: &Connection, s: &StreamState) -> Result<(), Error> {
    let closed_by = s
        .closed_by
        .as_ref()
        .map(|c| serde_json::to_string(c).unwrap_or_default());
    conn.prepare_cached(&format!(
        "INSERT INTO streams ({STATE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
         ?15, ?16)"
    ))
    .and_then(|mut stmt| {
        stmt.execute(params![
            s.path.as_str(),
            s.sid,
            s.content_type.as_str(),
            serde_json::to_string(&s.expiry).unwrap_or_default(),
            s.created_ms,
            s.touched_ms,
            s.tail as i64,
            s.total_bytes as i64,
            s.closed,
            closed_by,
            s.stream_seq,
            s.sealed as i64,
            serde_json::to_string(&s.lineage).unwrap_or_default(),
            s.origin.as_ref().map(|o| serde_json::to_string(o).unwrap_or_default()),
            s.forks as i64,
            s.deleted,
        ])
    })
    .map_err(|e| sql("insert stream", e))?;
    Ok(())
}

/// Writes the fields an append changes.
pub(crate) fn update_state(conn: &Connection, s: &StreamState) -> Result<(), Error> {
    let closed_by = s
        .closed_by
        .as_ref()
        .map(|c| serde_json::to_string(c).unwrap_or_default());
    conn.prepare_cached(
        "UPDATE streams SET touched_ms = ?2, tail = ?3, total_bytes = ?4, closed = ?5, closed_by = ?6, \
         stream_seq = ?7, forks = ?8, deleted = ?9 WHERE sid = ?1",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            s.sid,
            s.touched_ms,
            s.tail as i64,
            s.total_bytes as i64,
            s.closed,
            closed_by,
            s.stream_seq,
            s.forks as i64,
            s.deleted
        ])
    })
    .map_err(|e| sql("update stream", e))?;
    Ok(())
}

/// Inserts messages `first, first + 1, …`.
pub(crate) fn insert_messages(conn: &Connection, sid: &str, first: u64, messages: &[Bytes]) -> Result<(), Error> {
    let mut stmt = conn
        .prepare_cached("INSERT INTO messages (sid, seq, data) VALUES (?1, ?2, ?3)")
        .map_err(|e| sql("prepare insert", e))?;
    for (i, message) in messages.iter().enumerate() {
        stmt.execute(params![sid, (first + i as u64) as i64, &message[..]])
            .map_err(|e| sql("insert message", e))?;
    }
    Ok(())
}

/// Messages with sequence numbers in `(after, through]`, in order, stopping once `max_bytes`
/// is reached (but always at least one). Checks that they are consecutive from `after + 1`.
pub(crate) fn read_messages(
    conn: &Connection,
    sid: &str,
    after: u64,
    through: u64,
    max_bytes: usize,
) -> Result<Vec<Bytes>, Error> {
    let mut stmt = conn
        .prepare_cached("SELECT seq, data FROM messages WHERE sid = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq")
        .map_err(|e| sql("prepare read", e))?;
    let mut rows = stmt
        .query(params![sid, after as i64, through as i64])
        .map_err(|e| sql("read messages", e))?;
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut expected = after + 1;
    while let Some(row) = rows.next().map_err(|e| sql("read messages", e))? {
        let seq = row.get::<_, i64>(0).map_err(|e| sql("read seq", e))? as u64;
        if seq != expected {
            // Only sealing removes rows, and it removes a prefix: the caller re-reads the head.
            break;
        }
        let data: Vec<u8> = row.get(1).map_err(|e| sql("read data", e))?;
        bytes += data.len();
        out.push(Bytes::from(data));
        expected += 1;
        if bytes >= max_bytes {
            break;
        }
    }
    Ok(out)
}

/// The producer's state on stream `sid`.
pub(crate) fn load_producer(conn: &Connection, sid: &str, producer: &str) -> Result<Option<ProducerState>, Error> {
    let mut stmt = conn
        .prepare_cached("SELECT epoch, seq, offset_after FROM producers WHERE sid = ?1 AND producer = ?2")
        .map_err(|e| sql("prepare producer", e))?;
    stmt.query_row(params![sid, producer], |r| {
        Ok(ProducerState {
            epoch: r.get::<_, i64>(0)? as u64,
            seq: r.get::<_, i64>(1)? as u64,
            offset: r.get::<_, i64>(2)? as u64,
        })
    })
    .optional()
    .map_err(|e| sql("load producer", e))
}

/// Stores the producer's state on stream `sid`.
pub(crate) fn store_producer(conn: &Connection, sid: &str, producer: &str, p: ProducerState) -> Result<(), Error> {
    conn.prepare_cached(
        "INSERT INTO producers (sid, producer, epoch, seq, offset_after) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (sid, producer) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq, \
         offset_after = excluded.offset_after",
    )
    .and_then(|mut stmt| stmt.execute(params![sid, producer, p.epoch as i64, p.seq as i64, p.offset as i64]))
    .map_err(|e| sql("store producer", e))?;
    Ok(())
}

/// The head whose storage id is `sid`, if it still exists.
pub(crate) fn load_by_sid(conn: &Connection, sid: &str) -> Result<Option<StreamState>, Error> {
    load_where(conn, "sid", sid)
}

/// Removes a stream head and its rows, and records its page directory as garbage.
pub(crate) fn remove_stream(conn: &Connection, sid: &str) -> Result<(), Error> {
    for stmt in [
        "DELETE FROM streams WHERE sid = ?1",
        "DELETE FROM messages WHERE sid = ?1",
        "DELETE FROM producers WHERE sid = ?1",
        "INSERT OR IGNORE INTO garbage (sid) VALUES (?1)",
    ] {
        conn.prepare_cached(stmt)
            .and_then(|mut s| s.execute([sid]))
            .map_err(|e| sql("remove stream", e))?;
    }
    Ok(())
}

/// Storage ids whose page directories are still to be removed.
pub(crate) fn garbage(conn: &Connection) -> Result<Vec<String>, Error> {
    let mut stmt = conn
        .prepare_cached("SELECT sid FROM garbage")
        .map_err(|e| sql("prepare garbage", e))?;
    let rows = stmt.query_map([], |r| r.get(0)).map_err(|e| sql("list garbage", e))?;
    rows.collect::<Result<_, _>>().map_err(|e| sql("list garbage", e))
}

/// Forgets a storage id whose page directory is gone.
pub(crate) fn forget_garbage(conn: &Connection, sid: &str) -> Result<(), Error> {
    conn.execute("DELETE FROM garbage WHERE sid = ?1", [sid])
        .map_err(|e| sql("forget garbage", e))?;
    Ok(())
}
