//! # The embedded directory: organizations and API keys in `metadata.db`
//!
//! A SQLite file beside `spool.db`, apart from the stream log's because its writes are few and
//! small: one connection behind a mutex, each call in a blocking task. Several processes may
//! share it, like the log (SQLite's locks, a 10 s busy timeout).

use std::{
    path::Path,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use spool_domain::{
    ApiKeyRecord, Directory, Error, Org,
    directory::{key_label, org_label},
};

use crate::db::{connect, sql};

const SCHEMA_VERSION: i64 = 1;

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
";

/// Organizations and API keys on the embedded store; cheap to clone.
#[derive(Clone)]
pub struct EmbeddedDirectory {
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for EmbeddedDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmbeddedDirectory")
    }
}

impl EmbeddedDirectory {
    /// Opens (creating if need be) `metadata.db` in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, Error> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::unavailable(
                format!(
                    "cannot create the data directory {}; check SPOOL_DATA_DIR",
                    dir.display()
                ),
                e,
            )
        })?;
        let path = dir.join("metadata.db");
        let (conn, version) = connect(&path, SCHEMA_VERSION)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| sql("enable foreign keys", e))?;
        if version < SCHEMA_VERSION {
            conn.execute_batch(&format!(
                "BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            ))
            .map_err(|e| sql("create the metadata schema", e))?;
        }
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with<T: Send + 'static>(
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

/// A uniqueness (or other constraint) violation: the row exists already.
fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ConstraintViolation)
}

#[async_trait]
impl Directory for EmbeddedDirectory {
    async fn create_org(&self, org: &Org) -> Result<(), Error> {
        let org = org.clone();
        self.with(move |conn| {
            conn.execute(
                "INSERT INTO orgs (id, name, created_ms) VALUES (?1, ?2, ?3)",
                params![org.id, org.name, org.created_ms],
            )
            .map(drop)
            .map_err(|e| {
                if is_constraint(&e) {
                    Error::Exists {
                        what: org_label(&org.id),
                    }
                } else {
                    sql("insert an organization", e)
                }
            })
        })
        .await
    }

    async fn org(&self, id: &str) -> Result<Option<Org>, Error> {
        let id = id.to_owned();
        self.with(move |conn| {
            conn.query_row(
                "SELECT id, name, created_ms FROM orgs WHERE id = ?1",
                params![id],
                |r| {
                    Ok(Org {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        created_ms: r.get(2)?,
                    })
                },
            )
            .optional()
            .map_err(|e| sql("read an organization", e))
        })
        .await
    }

    async fn add_api_key(&self, key: &ApiKeyRecord) -> Result<(), Error> {
        let key = key.clone();
        self.with(move |conn| {
            let org_exists = conn
                .query_row("SELECT 1 FROM orgs WHERE id = ?1", params![key.org_id], |_| Ok(()))
                .optional()
                .map_err(|e| sql("read an organization", e))?
                .is_some();
            if !org_exists {
                return Err(Error::Missing {
                    what: org_label(&key.org_id),
                });
            }
            let capabilities = serde_json::to_string(&key.capabilities)
                .map_err(|e| Error::unavailable("embedded directory: encode capabilities", e))?;
            conn.execute(
                "INSERT INTO api_keys (key_id, org_id, secret_hash, capabilities, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![key.key_id, key.org_id, key.secret_hash, capabilities, key.created_ms],
            )
            .map(drop)
            .map_err(|e| {
                if is_constraint(&e) {
                    Error::Exists {
                        what: key_label(&key.key_id),
                    }
                } else {
                    sql("insert an API key", e)
                }
            })
        })
        .await
    }

    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, Error> {
        let key_id = key_id.to_owned();
        self.with(move |conn| {
            let row = conn
                .query_row(
                    "SELECT key_id, org_id, secret_hash, capabilities, created_ms FROM api_keys WHERE key_id = ?1",
                    params![key_id],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, String>(3)?,
                            r.get::<_, i64>(4)?,
                        ))
                    },
                )
                .optional()
                .map_err(|e| sql("read an API key", e))?;
            row.map(|(key_id, org_id, secret_hash, capabilities, created_ms)| {
                let capabilities = serde_json::from_str(&capabilities).map_err(|e| Error::Corrupt {
                    what: format!("capabilities of API key `{key_id}`: {e}"),
                })?;
                Ok(ApiKeyRecord {
                    key_id,
                    org_id,
                    secret_hash,
                    capabilities,
                    created_ms,
                })
            })
            .transpose()
        })
        .await
    }
}
