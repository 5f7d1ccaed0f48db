//! # Subscriptions in the metadata database
//!
//! One row per subscription: the record as JSON and a version that every save checks and
//! raises, so a compare-and-set is one `UPDATE … WHERE version = ?`. Also the task that runs
//! subscription jobs in `spool serve` ([`LocalWakes`]), since the embedded store has no queue.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use spool_domain::{
    Error,
    subscription::{Subscription, SubscriptionJob, SubscriptionStore, Subscriptions, Versioned, WakeScheduler},
};
use tokio::sync::mpsc;

use crate::{EmbeddedMetadata, db::sql};

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
        self.with(move |conn| {
            let changed = match expected {
                None => conn.execute(
                    "INSERT INTO subscriptions (org, id, version, body) VALUES (?1, ?2, 1, ?3)
                     ON CONFLICT (org, id) DO NOTHING",
                    params![org, id, body],
                ),
                Some(version) => conn.execute(
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

impl EmbeddedMetadata {
    /// Every subscription with an open wake, by organization: what a restarted `spool serve`
    /// delivers or expires again.
    pub async fn open_wakes(&self) -> Result<Vec<(String, Subscription)>, Error> {
        self.with(move |conn| {
            let mut stmt = conn
                .prepare("SELECT org, body FROM subscriptions WHERE json_extract(body, '$.wake') IS NOT NULL")
                .map_err(|e| sql("list open wakes", e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list open wakes", e))?;
            rows.into_iter().map(|(org, body)| Ok((org, decode(&body)?))).collect()
        })
        .await
    }
}

/// Runs subscription jobs in this process, after their delay: `spool serve`'s stand-in for the
/// maintenance queue. Jobs live in memory; the records they act on do not, so a restart
/// schedules every open wake's jobs again ([`LocalWakes::recover`]).
#[derive(Clone)]
pub struct LocalWakes {
    tx: mpsc::UnboundedSender<(SubscriptionJob, Duration)>,
}

/// The receiving end of [`LocalWakes`], to hand to [`LocalWakes::run`].
pub struct LocalWakeJobs(mpsc::UnboundedReceiver<(SubscriptionJob, Duration)>);

impl LocalWakes {
    /// A scheduler and the jobs it schedules.
    pub fn new() -> (Self, LocalWakeJobs) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, LocalWakeJobs(rx))
    }

    /// Runs the scheduled jobs with `service`, each after its delay, until the scheduler is
    /// dropped. A job that fails (the store was busy) runs again a second later.
    pub async fn run(LocalWakeJobs(mut rx): LocalWakeJobs, service: Arc<Subscriptions>, again: Self) {
        while let Some((job, delay)) = rx.recv().await {
            let service = service.clone();
            let again = again.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Err(e) = service.run(&job).await {
                    tracing::warn!(org = %job.org, subscription = %job.id, error = %e, "a subscription job failed; trying again in a second");
                    let _ = again.tx.send((job, Duration::from_secs(1)));
                }
            });
        }
    }

    /// Schedules the jobs every open wake needs after a restart: its delivery (which does
    /// nothing if it was delivered) and its expiry.
    pub async fn recover(&self, metadata: &EmbeddedMetadata) -> Result<usize, Error> {
        let open = metadata.open_wakes().await?;
        for (org, sub) in &open {
            for kind in [
                spool_domain::subscription::JobKind::Deliver,
                spool_domain::subscription::JobKind::Expire,
            ] {
                let job = SubscriptionJob {
                    org: org.clone(),
                    id: sub.id.clone(),
                    generation: sub.generation,
                    kind,
                };
                let _ = self.tx.send((job, Duration::ZERO));
            }
        }
        Ok(open.len())
    }
}

#[async_trait]
impl WakeScheduler for LocalWakes {
    async fn schedule(&self, job: SubscriptionJob, delay: Duration) -> Result<(), Error> {
        self.tx
            .send((job, delay))
            .map_err(|_| Error::unavailable("schedule a subscription job", "the job runner has stopped"))
    }
}
