//! # Subscriptions in the metadata database
//!
//! One row per subscription: the record as JSON and a version that every save checks and
//! raises, so a compare-and-set is one `UPDATE … WHERE version = ?`. A new one is inserted in a
//! write transaction that counts the organization's first, so the cap holds.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use spool_chat::caps::Capped;
use spool_log::{
    error::Error,
    subscription::{SubscriptionStore, Versioned, record::Subscription},
};

use crate::{EmbeddedMetadata, db::sql, metadata::under_cap};

fn decode(body: &str) -> Result<Subscription, Error> {
    serde_json::from_str(body).map_err(|e| Error::Corrupt {
        what: format!("a stored subscription: {e}"),
    })
}

fn encode(record: &Subscription) -> Result<String, Error> {
    serde_json::to_string(record).map_err(|e| Error::unavailable("encode a subscription", e))
}

#[async_trait]
impl SubscriptionStore for EmbeddedMetadata {
    async fn get(&self, org: &str, id: &str) -> Result<Option<Versioned>, Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            let row: Option<(i64, String)> = conn
                .query_row(
                    "SELECT version, body FROM subscriptions WHERE org = ?1 AND id = ?2",
                    params![org, id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(|e| sql("read a subscription", e))?;
            row.map(|(version, body)| {
                Ok(Versioned {
                    record: decode(&body)?,
                    version: version as u64,
                })
            })
            .transpose()
        })
        .await
    }

    async fn save(&self, org: &str, record: &Subscription, expected: Option<u64>) -> Result<bool, Error> {
        let (org, id, body) = (org.to_owned(), record.id.clone(), encode(record)?);
        let max = self.caps.subscriptions_per_org;
        self.write(move |tx| {
            let changed = match expected {
                None => {
                    let exists = tx
                        .query_row(
                            "SELECT 1 FROM subscriptions WHERE org = ?1 AND id = ?2",
                            params![org, id],
                            |_| Ok(()),
                        )
                        .optional()
                        .map_err(|e| sql("read a subscription", e))?
                        .is_some();
                    if exists {
                        return Ok(false);
                    }
                    under_cap(
                        tx,
                        "SELECT COUNT(*) FROM subscriptions WHERE org = ?1",
                        params![org],
                        1,
                        max,
                        Capped::Subscriptions,
                    )?;
                    tx.execute(
                        "INSERT INTO subscriptions (org, id, version, body) VALUES (?1, ?2, 1, ?3)",
                        params![org, id, body],
                    )
                }
                Some(version) => tx.execute(
                    "UPDATE subscriptions SET version = version + 1, body = ?4
                     WHERE org = ?1 AND id = ?2 AND version = ?3",
                    params![org, id, version as i64, body],
                ),
            }
            .map_err(|e| sql("save a subscription", e))?;
            Ok(changed == 1)
        })
        .await
    }

    async fn delete(&self, org: &str, id: &str) -> Result<bool, Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            let n = conn
                .execute("DELETE FROM subscriptions WHERE org = ?1 AND id = ?2", params![org, id])
                .map_err(|e| sql("delete a subscription", e))?;
            Ok(n == 1)
        })
        .await
    }

    async fn list(&self, org: &str) -> Result<Vec<Subscription>, Error> {
        let org = org.to_owned();
        self.with(move |conn| {
            let mut stmt = conn
                .prepare("SELECT body FROM subscriptions WHERE org = ?1 ORDER BY id")
                .map_err(|e| sql("list subscriptions", e))?;
            let bodies = stmt
                .query_map(params![org], |r| r.get::<_, String>(0))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list subscriptions", e))?;
            bodies.iter().map(|b| decode(b)).collect()
        })
        .await
    }
}
