//! # The embedded metadata store: `metadata.db`
//!
//! Organizations, API keys, workspaces, agents, slash commands, session records, the turn
//! queue and runners' jobs, in a SQLite
//! file beside `spool.db`, apart from
//! the stream log's because its writes are few and small: one connection behind a mutex, each
//! call in a blocking task. Several processes may share it, like the log (SQLite's locks, a
//! 10 s busy timeout). Every record of an organization is keyed by it. Records other than keys
//! are stored as their JSON (`data`) beside the columns that queries need.
//!
//! A capped create ([`spool_chat::caps`]) counts and inserts in one transaction that takes
//! the write lock as it begins (`BEGIN IMMEDIATE`, [`EmbeddedMetadata::write`]): no other
//! writer, in this process or another, can insert between the count and the insert.

use std::{
    path::Path,
    sync::{Arc, Mutex},
};

use rusqlite::{Connection, ErrorCode, Transaction, TransactionBehavior};
use spool_chat::caps::{Capped, Caps};
use spool_log::error::Error;

use crate::db::{connect, sql};

const SCHEMA_VERSION: i64 = 12;

/// Version 2: who holds a turn's lease, so a restarted worker takes its own back at once.
const MIGRATION_2: &str = "ALTER TABLE turn_queue ADD COLUMN holder TEXT;";

/// Version 3: slash commands, the organization's (`scope = 'global'`) and each workspace's
/// (`scope = 'ws#{id}'`).
const MIGRATION_3: &str = "
CREATE TABLE IF NOT EXISTS slash_commands (
    org        TEXT NOT NULL,
    scope      TEXT NOT NULL,
    name       TEXT NOT NULL,
    updated_ms INTEGER NOT NULL,
    markdown   TEXT NOT NULL,
    PRIMARY KEY (org, scope, name)
);";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS orgs (
    id         TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id       TEXT PRIMARY KEY NOT NULL,
    org_id       TEXT NOT NULL REFERENCES orgs (id),
    secret_hash  TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    created_ms   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS api_keys_by_org ON api_keys (org_id);
CREATE TABLE IF NOT EXISTS workspaces (
    org        TEXT NOT NULL,
    id         TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (org, id)
);
CREATE TABLE IF NOT EXISTS agents (
    org          TEXT NOT NULL,
    id           TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    position     INTEGER NOT NULL,
    data         TEXT NOT NULL,
    PRIMARY KEY (org, id),
    FOREIGN KEY (org, workspace_id) REFERENCES workspaces (org, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS agents_by_workspace ON agents (org, workspace_id, position);
CREATE TABLE IF NOT EXISTS tasks (
    org          TEXT NOT NULL,
    id           TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    created_ms   INTEGER NOT NULL,
    data         TEXT NOT NULL,
    PRIMARY KEY (org, id),
    FOREIGN KEY (org, workspace_id) REFERENCES workspaces (org, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS tasks_by_workspace ON tasks (org, workspace_id, created_ms DESC);
CREATE TABLE IF NOT EXISTS sessions (
    org            TEXT NOT NULL,
    id             TEXT NOT NULL,
    workspace_key  TEXT NOT NULL,
    last_active_ms INTEGER NOT NULL,
    preview        TEXT NOT NULL,
    pending        TEXT,
    data           TEXT NOT NULL,
    PRIMARY KEY (org, id)
);
CREATE TABLE IF NOT EXISTS open_requests (
    org        TEXT NOT NULL,
    session_id TEXT NOT NULL,
    id         TEXT NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (org, session_id, id)
);
CREATE TABLE IF NOT EXISTS turns (
    org         TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    turn_id     TEXT NOT NULL,
    status_rank INTEGER NOT NULL,
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER,
    data        TEXT NOT NULL,
    PRIMARY KEY (org, session_id, turn_id)
);
CREATE INDEX IF NOT EXISTS turns_by_time ON turns (org, session_id, created_ms DESC);
CREATE INDEX IF NOT EXISTS turns_by_expiry ON turns (expires_ms) WHERE expires_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS turn_queue (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    job_key         TEXT NOT NULL UNIQUE,
    grp             TEXT NOT NULL,
    job             TEXT NOT NULL,
    leased_until_ms INTEGER NOT NULL DEFAULT 0,
    attempts        INTEGER NOT NULL DEFAULT 0,
    receipt         TEXT
);
CREATE INDEX IF NOT EXISTS turn_queue_by_group ON turn_queue (grp, id);
CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions (org, workspace_key, last_active_ms DESC, id DESC);
";

/// Version 4: attachments, by chat.
const MIGRATION_4: &str = "
CREATE TABLE IF NOT EXISTS attachments (
    org        TEXT NOT NULL,
    session_id TEXT NOT NULL,
    id         TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    status     TEXT NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (org, session_id, id)
);
CREATE INDEX IF NOT EXISTS attachments_by_time ON attachments (org, session_id, created_ms, id);";

/// Version 5: the real runs of turn steps (a delivery that never ran is not an attempt).
const MIGRATION_5: &str = "
CREATE TABLE IF NOT EXISTS turn_runs (
    org        TEXT NOT NULL,
    session_id TEXT NOT NULL,
    step       TEXT NOT NULL,
    runs       INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (org, session_id, step)
);
CREATE INDEX IF NOT EXISTS turn_runs_by_expiry ON turn_runs (expires_ms);";

/// Version 6: the Durable Streams protocol's subscriptions ([`crate::subscriptions`]) and chat
/// webhooks with their deliveries ([`crate::webhooks`]).
const MIGRATION_6: &str = "
CREATE TABLE IF NOT EXISTS subscriptions (
    org     TEXT NOT NULL,
    id      TEXT NOT NULL,
    version INTEGER NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (org, id)
);
CREATE TABLE IF NOT EXISTS webhooks (
    org          TEXT NOT NULL,
    id           TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    created_ms   INTEGER NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (org, id)
);
CREATE INDEX IF NOT EXISTS webhooks_by_workspace ON webhooks (org, workspace_id, created_ms);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    org        TEXT NOT NULL,
    hook_id    TEXT NOT NULL,
    id         TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    state      TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (org, hook_id, id)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_time ON webhook_deliveries (org, hook_id, created_ms);
CREATE INDEX IF NOT EXISTS webhook_deliveries_pending ON webhook_deliveries (state) WHERE state = 'pending';";

/// Version 7: each stored slash command's size in bytes, and an index that holds it, so a
/// scope's or an organization's total is summed without reading the files.
const MIGRATION_7: &str = "
ALTER TABLE slash_commands ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
UPDATE slash_commands SET bytes = length(CAST(markdown AS BLOB));
CREATE INDEX IF NOT EXISTS slash_commands_sizes ON slash_commands (org, scope, bytes);";
/// Version 8: which organization owns each shared workspace root
/// ([`spool_chat::confine`]).
const MIGRATION_8: &str = "
CREATE TABLE IF NOT EXISTS root_claims (
    root       TEXT PRIMARY KEY NOT NULL,
    org        TEXT NOT NULL,
    claimed_ms INTEGER NOT NULL
);";
/// Version 9: runner jobs and runners ([`crate::runners`]).
const MIGRATION_9: &str = "
CREATE TABLE IF NOT EXISTS runner_jobs (
    org            TEXT NOT NULL,
    turn_id        TEXT NOT NULL,
    offered_ms     INTEGER NOT NULL,
    epoch          INTEGER NOT NULL,
    runner         TEXT,
    lease_until_ms INTEGER NOT NULL,
    outcome        TEXT,
    data           TEXT NOT NULL,
    PRIMARY KEY (org, turn_id)
);
CREATE INDEX IF NOT EXISTS runner_jobs_by_offer ON runner_jobs (org, offered_ms, turn_id);
CREATE TABLE IF NOT EXISTS runners (
    org          TEXT NOT NULL,
    name         TEXT NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    data         TEXT NOT NULL,
    PRIMARY KEY (org, name)
);";

/// Version 10: workspaces' MCP servers ([`crate::mcp`]), deleted with their workspace.
const MIGRATION_10: &str = "
CREATE TABLE IF NOT EXISTS mcp_servers (
    org          TEXT NOT NULL,
    id           TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    name         TEXT NOT NULL,
    created_ms   INTEGER NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (org, id),
    UNIQUE (org, workspace_id, name),
    FOREIGN KEY (org, workspace_id) REFERENCES workspaces (org, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS mcp_servers_by_workspace ON mcp_servers (org, workspace_id, created_ms);";

/// Version 12: a chat's latest branch event ([`spool_chat::branch`]), beside its record.
const MIGRATION_12: &str = "ALTER TABLE sessions ADD COLUMN branch_seq INTEGER;";

/// Version 11: the usage ledger ([`crate::usage`]), one row per model step.
const MIGRATION_11: &str = "
CREATE TABLE IF NOT EXISTS usage_entries (
    org                 TEXT NOT NULL,
    chat_id             TEXT NOT NULL,
    seq                 INTEGER NOT NULL,
    workspace_id        TEXT,
    agent_id            TEXT,
    agent_name          TEXT NOT NULL,
    model               TEXT,
    day                 TEXT NOT NULL,
    input_tokens        INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    ts_ms               INTEGER NOT NULL,
    PRIMARY KEY (org, chat_id, seq)
);
CREATE INDEX IF NOT EXISTS usage_by_workspace_day ON usage_entries (org, workspace_id, day)
    WHERE workspace_id IS NOT NULL;";

/// The embedded metadata store (organizations, keys, workspaces, agents); cheap to clone.
#[derive(Clone)]
pub struct EmbeddedMetadata {
    conn: Arc<Mutex<Connection>>,
    /// What one workspace, chat or organization may hold.
    pub(crate) caps: Caps,
    /// Wakes this process's waiting turn receivers when a turn is queued (receivers in other
    /// processes look again every 50 ms).
    pub(crate) queued: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for EmbeddedMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmbeddedMetadata")
    }
}

impl EmbeddedMetadata {
    /// Opens (creating if need be) `metadata.db` in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, Error> {
        let dir = dir.as_ref();
        let path = crate::private::prepare(dir, &[], "metadata.db")?;
        let (conn, version) = connect(&path, SCHEMA_VERSION)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| sql("enable foreign keys", e))?;
        if version < SCHEMA_VERSION {
            migrate(&conn).map_err(|e| sql("create the metadata schema", e))?;
        }
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            caps: Caps::default(),
            queued: Arc::new(tokio::sync::Notify::new()),
        })
    }

    /// The same store, holding records to `caps` instead of [`Caps::default`].
    #[must_use]
    pub fn with_caps(mut self, caps: Caps) -> Self {
        self.caps = caps;
        self
    }

    /// Runs `f` in a transaction that holds the write lock from its start (`BEGIN
    /// IMMEDIATE`), committed if `f` succeeds: what `f` reads cannot change before it writes,
    /// whichever process writes next.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        self.with(move |conn| {
            let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
                .map_err(|e| sql("begin a write", e))?;
            let value = f(&tx)?;
            tx.commit().map_err(|e| sql("commit a write", e))?;
            Ok(value)
        })
        .await
    }

    pub(crate) async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&conn)
        })
        .await
        .map_err(|e| Error::unavailable("embedded directory: a blocking task failed", e))?
    }
}

/// Brings the schema to [`SCHEMA_VERSION`], in one transaction that re-reads the version, so
/// processes opening the file at once migrate it once.
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version < 1 {
            conn.execute_batch(SCHEMA)?;
        }
        if version < 2 {
            conn.execute_batch(MIGRATION_2)?;
        }
        if version < 3 {
            conn.execute_batch(MIGRATION_3)?;
        }
        if version < 4 {
            conn.execute_batch(MIGRATION_4)?;
        }
        if version < 5 {
            conn.execute_batch(MIGRATION_5)?;
        }
        if version < 6 {
            conn.execute_batch(MIGRATION_6)?;
        }
        if version < 7 {
            conn.execute_batch(MIGRATION_7)?;
        }
        if version < 8 {
            conn.execute_batch(MIGRATION_8)?;
        }
        if version < 9 {
            conn.execute_batch(MIGRATION_9)?;
        }
        if version < 10 {
            conn.execute_batch(MIGRATION_10)?;
        }
        if version < 11 {
            conn.execute_batch(MIGRATION_11)?;
        }
        if version < 12 {
            conn.execute_batch(MIGRATION_12)?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// [`Error::CapReached`] unless `count` (a `SELECT COUNT(*)` or a sum, of `params`) is under
/// `max`, less `adding`: inside [`EmbeddedMetadata::write`], so nobody adds in between.
pub(crate) fn under_cap(
    conn: &Connection,
    count: &str,
    params: impl rusqlite::Params,
    adding: u64,
    max: u64,
    capped: Capped,
) -> Result<(), Error> {
    let held: i64 = conn
        .query_row(count, params, |r| r.get(0))
        .map_err(|e| sql("count what a cap holds", e))?;
    if u64::try_from(held).unwrap_or(0).saturating_add(adding) > max {
        return Err(capped.error(max));
    }
    Ok(())
}

/// A uniqueness (or other constraint) violation: the row exists already.
pub(crate) fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ConstraintViolation)
}

#[cfg(test)]
mod tests {
    use spool_commands::{CommandScope, Commands, StoredCommand};

    use super::*;

    fn command(name: &str, bytes: usize) -> StoredCommand {
        StoredCommand {
            name: name.to_owned(),
            markdown: "m".repeat(bytes),
            updated_ms: 1,
        }
    }

    #[tokio::test]
    async fn commands_stored_before_their_sizes_were_count_with_their_sizes() {
        // GIVEN a metadata.db of schema version 6 with two global commands of 1,500 bytes
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join("metadata.db")).unwrap();
            for step in [SCHEMA, MIGRATION_2, MIGRATION_3, MIGRATION_4, MIGRATION_5, MIGRATION_6] {
                conn.execute_batch(step).unwrap();
            }
            for (name, bytes) in [("a", 1_000), ("b", 500)] {
                conn.execute(
                    "INSERT INTO slash_commands (org, scope, name, updated_ms, markdown) VALUES ('o', 'global', ?1, 1, ?2)",
                    rusqlite::params![name, "é".repeat(bytes / 2)],
                )
                .unwrap();
            }
            conn.pragma_update(None, "user_version", 6).unwrap();
        }

        // WHEN this version opens it, its scopes holding 2,000 bytes
        let caps = Caps {
            command_bytes_per_scope: 2_000,
            ..Caps::default()
        };
        let store = EmbeddedMetadata::open(dir.path()).unwrap().with_caps(caps);

        // THEN the commands from before count with their sizes in bytes: 500 more fill the
        // scope, and a byte more is refused
        let global = CommandScope::Global;
        store.put_command("o", &global, &command("c", 500)).await.unwrap();
        assert!(matches!(
            store
                .put_command("o", &global, &command("d", 1))
                .await
                .map_err(|e| Capped::reached(&e)),
            Err(Some(Capped::CommandBytes))
        ));
        assert_eq!(store.commands("o", &global).await.unwrap().len(), 3);
    }
}
