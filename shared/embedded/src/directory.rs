//! # Organizations and API keys in the embedded metadata store

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use spool_chat::directory::{ApiKeyRecord, Directory, Org, key_label, org_label};
use spool_log::error::Error;

use crate::{
    db::sql,
    metadata::{EmbeddedMetadata, is_constraint},
};

#[async_trait]
impl Directory for EmbeddedMetadata {
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

    async fn remove_api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, Error> {
        let removed = self.api_key(key_id).await?;
        let key_id = key_id.to_owned();
        self.with(move |conn| {
            conn.execute("DELETE FROM api_keys WHERE key_id = ?1", params![key_id])
                .map(drop)
                .map_err(|e| sql("delete an API key", e))
        })
        .await?;
        Ok(removed)
    }

    async fn claim_root(&self, root: &str, org: &str) -> Result<String, Error> {
        let (root, org) = (root.to_owned(), org.to_owned());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.with(move |conn| {
            // The first claim stays; every claimant then reads who holds it (one connection, and
            // SQLite's write lock across processes, so nothing comes between).
            conn.execute(
                "INSERT OR IGNORE INTO root_claims (root, org, claimed_ms) VALUES (?1, ?2, ?3)",
                params![root, org, now],
            )
            .map_err(|e| sql("claim a workspace root", e))?;
            conn.query_row("SELECT org FROM root_claims WHERE root = ?1", params![root], |r| {
                r.get(0)
            })
            .map_err(|e| sql("read a workspace root's claim", e))
        })
        .await
    }

    async fn root_owner(&self, root: &str) -> Result<Option<String>, Error> {
        let root = root.to_owned();
        self.with(move |conn| {
            conn.query_row("SELECT org FROM root_claims WHERE root = ?1", params![root], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| sql("read a workspace root's claim", e))
        })
        .await
    }
}
