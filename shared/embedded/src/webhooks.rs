//! # Chat webhooks in the metadata database
//!
//! `webhooks` holds each endpoint as JSON, indexed by workspace; `webhook_deliveries` each
//! delivery as JSON with its state (indexed for the pending ones a restart runs again) and its
//! time (an endpoint's newest first). Deliveries older than
//! [`spool_chat::webhook::DELIVERY_RECORD_MS`] are deleted as new ones are added. An endpoint
//! is inserted in a write transaction that counts its workspace's first, so the cap holds.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use serde::{Serialize, de::DeserializeOwned};
use spool_chat::{
    caps::Capped,
    webhook::{DELIVERY_RECORD_MS, Delivery, DeliveryStatus, Hook, HookStore},
};
use spool_log::error::Error;

use crate::{EmbeddedMetadata, db::sql, metadata::under_cap};

fn decode<T: DeserializeOwned>(body: &str, what: &str) -> Result<T, Error> {
    serde_json::from_str(body).map_err(|e| Error::Corrupt {
        what: format!("a stored {what}: {e}"),
    })
}

fn encode<T: Serialize>(value: &T, what: &str) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::unavailable(format!("encode a {what}"), e))
}

fn state(state: DeliveryStatus) -> &'static str {
    match state {
        DeliveryStatus::Pending => "pending",
        DeliveryStatus::Delivered => "delivered",
        DeliveryStatus::Failed => "failed",
    }
}

fn missing(id: &str) -> Error {
    Error::Missing {
        what: format!("webhook `{id}`"),
    }
}

#[async_trait]
impl HookStore for EmbeddedMetadata {
    async fn create_hook(&self, org: &str, hook: &Hook) -> Result<(), Error> {
        let (org, id, ws, created, body) = (
            org.to_owned(),
            hook.id.clone(),
            hook.workspace_id.clone(),
            hook.created_ms,
            encode(hook, "webhook")?,
        );
        let max = self.caps.hooks_per_workspace;
        self.write(move |tx| {
            under_cap(
                tx,
                "SELECT COUNT(*) FROM webhooks WHERE org = ?1 AND workspace_id = ?2",
                params![org, ws],
                1,
                max,
                Capped::Hooks,
            )?;
            tx.execute(
                "INSERT INTO webhooks (org, id, workspace_id, created_ms, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![org, id, ws, created, body],
            )
            .map_err(|e| {
                if crate::metadata::is_constraint(&e) {
                    Error::Exists {
                        what: format!("webhook `{id}`"),
                    }
                } else {
                    sql("store a webhook", e)
                }
            })?;
            Ok(())
        })
        .await
    }

    async fn hook(&self, org: &str, id: &str) -> Result<Option<Hook>, Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            let body: Option<String> = conn
                .query_row(
                    "SELECT body FROM webhooks WHERE org = ?1 AND id = ?2",
                    params![org, id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| sql("read a webhook", e))?;
            body.map(|b| decode(&b, "webhook")).transpose()
        })
        .await
    }

    async fn hooks(&self, org: &str, workspace_id: &str) -> Result<Vec<Hook>, Error> {
        let (org, ws) = (org.to_owned(), workspace_id.to_owned());
        self.with(move |conn| {
            let mut stmt = conn
                .prepare("SELECT body FROM webhooks WHERE org = ?1 AND workspace_id = ?2 ORDER BY created_ms, id")
                .map_err(|e| sql("list webhooks", e))?;
            let bodies = stmt
                .query_map(params![org, ws], |r| r.get::<_, String>(0))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list webhooks", e))?;
            bodies.iter().map(|b| decode(b, "webhook")).collect()
        })
        .await
    }

    async fn update_hook(&self, org: &str, hook: &Hook) -> Result<(), Error> {
        let (org, id, body) = (org.to_owned(), hook.id.clone(), encode(hook, "webhook")?);
        self.with(move |conn| {
            let n = conn
                .execute(
                    "UPDATE webhooks SET body = ?3 WHERE org = ?1 AND id = ?2",
                    params![org, id, body],
                )
                .map_err(|e| sql("update a webhook", e))?;
            if n == 0 { Err(missing(&id)) } else { Ok(()) }
        })
        .await
    }

    async fn delete_hook(&self, org: &str, id: &str) -> Result<(), Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            conn.execute(
                "DELETE FROM webhook_deliveries WHERE org = ?1 AND hook_id = ?2",
                params![org, id],
            )
            .map_err(|e| sql("delete a webhook's deliveries", e))?;
            let n = conn
                .execute("DELETE FROM webhooks WHERE org = ?1 AND id = ?2", params![org, id])
                .map_err(|e| sql("delete a webhook", e))?;
            if n == 0 { Err(missing(&id)) } else { Ok(()) }
        })
        .await
    }

    async fn add_delivery(&self, org: &str, delivery: &Delivery) -> Result<bool, Error> {
        let org = org.to_owned();
        let (hook, id, created, st, body) = (
            delivery.hook_id.clone(),
            delivery.id.clone(),
            delivery.created_ms,
            state(delivery.state),
            encode(delivery, "delivery")?,
        );
        self.with(move |conn| {
            conn.execute(
                "DELETE FROM webhook_deliveries WHERE org = ?1 AND hook_id = ?2 AND created_ms < ?3 AND state != 'pending'",
                params![org, hook, created - DELIVERY_RECORD_MS],
            )
            .map_err(|e| sql("delete old deliveries", e))?;
            let n = conn
                .execute(
                    "INSERT INTO webhook_deliveries (org, hook_id, id, created_ms, state, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                    params![org, hook, id, created, st, body],
                )
                .map_err(|e| sql("store a delivery", e))?;
            Ok(n == 1)
        })
        .await
    }

    async fn delivery(&self, org: &str, hook_id: &str, id: &str) -> Result<Option<Delivery>, Error> {
        let (org, hook, id) = (org.to_owned(), hook_id.to_owned(), id.to_owned());
        self.with(move |conn| {
            let body: Option<String> = conn
                .query_row(
                    "SELECT body FROM webhook_deliveries WHERE org = ?1 AND hook_id = ?2 AND id = ?3",
                    params![org, hook, id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| sql("read a delivery", e))?;
            body.map(|b| decode(&b, "delivery")).transpose()
        })
        .await
    }

    async fn save_delivery(&self, org: &str, delivery: &Delivery, attempts: usize) -> Result<bool, Error> {
        let org = org.to_owned();
        let attempts = i64::try_from(attempts).unwrap_or(i64::MAX);
        let (hook, id, st, body) = (
            delivery.hook_id.clone(),
            delivery.id.clone(),
            state(delivery.state),
            encode(delivery, "delivery")?,
        );
        self.with(move |conn| {
            let n = conn
                .execute(
                    "UPDATE webhook_deliveries SET state = ?4, body = ?5
                     WHERE org = ?1 AND hook_id = ?2 AND id = ?3 AND json_array_length(body, '$.attempts') = ?6",
                    params![org, hook, id, st, body, attempts],
                )
                .map_err(|e| sql("save a delivery", e))?;
            Ok(n == 1)
        })
        .await
    }

    async fn deliveries(&self, org: &str, hook_id: &str, limit: usize) -> Result<Vec<Delivery>, Error> {
        let (org, hook) = (org.to_owned(), hook_id.to_owned());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with(move |conn| {
            let mut stmt = conn
                .prepare(
                    "SELECT body FROM webhook_deliveries WHERE org = ?1 AND hook_id = ?2
                     ORDER BY created_ms DESC, id DESC LIMIT ?3",
                )
                .map_err(|e| sql("list deliveries", e))?;
            let bodies = stmt
                .query_map(params![org, hook, limit], |r| r.get::<_, String>(0))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list deliveries", e))?;
            bodies.iter().map(|b| decode(b, "delivery")).collect()
        })
        .await
    }
}
