//! # The embedded turn queue: a table in `metadata.db`
//!
//! Jobs survive restarts. A session's jobs form a group; only the oldest job of a group can be
//! leased, so a session's turns run one at a time and in order. A lease that runs out hands the
//! job out again (with one more attempt), as SQS's visibility timeout does; a worker that runs a
//! step keeps extending it (heartbeats), so leases are short. Each lease names its holder, so a
//! worker restarted under the same name ([`crate::WorkerSlot`]) takes back what it held at once.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::params;
use spool_chat::{
    turns::{Delivery, Receive, TurnJob, TurnQueue},
    workspace::new_id,
};
use spool_log::error::Error;

use crate::{db::sql, metadata::EmbeddedMetadata};

/// How often a waiting receive looks again.
const POLL: Duration = Duration::from_millis(50);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The jobs a receive may hand out, fairly: the oldest job of each session whose earlier jobs
/// are done (a session's turns in order), then ranked within its organization, counting what
/// the organization already runs; an organization at its bound (`?3`) gets nothing more, and
/// the others take turns (every organization's first, then every one's second, …), oldest
/// first among equals. A session's group is `{org}/{session}`.
const FAIR_HEADS: &str = "
    WITH heads AS (
        SELECT id, job, attempts, substr(grp, 1, instr(grp, '/') - 1) AS org
        FROM turn_queue t
        WHERE id = (SELECT MIN(id) FROM turn_queue WHERE grp = t.grp) AND leased_until_ms <= ?1
    ),
    running AS (
        SELECT substr(grp, 1, instr(grp, '/') - 1) AS org, COUNT(*) AS n
        FROM turn_queue WHERE leased_until_ms > ?1 GROUP BY 1
    ),
    ranked AS (
        SELECT h.id, h.job, h.attempts,
               COALESCE(r.n, 0) + ROW_NUMBER() OVER (PARTITION BY h.org ORDER BY h.id) AS place
        FROM heads h LEFT JOIN running r ON r.org = h.org
    )
    SELECT id, job, attempts FROM ranked WHERE place <= ?3 ORDER BY place, id LIMIT ?2";

/// Where a chat's first job stands in its organization's line, as [`FAIR_HEADS`] ranks it:
/// the job, whether it is leased, how many of the organization's jobs are leased, and how
/// many waiting first jobs of the organization are as old as it or older. `?1` the chat's group
/// (`{org}/{session}`), `?2` the organization's groups' first name (`{org}/`) and `?4` the name
/// after its last (`{org}0`, `0` following `/`), a range the group index serves; `?3` now.
const LINE_PLACE: &str = "
    WITH head AS (
        SELECT id, job, leased_until_ms > ?3 AS leased FROM turn_queue WHERE grp = ?1 ORDER BY id LIMIT 1
    )
    SELECT head.job, head.leased,
           (SELECT COUNT(*) FROM turn_queue WHERE grp >= ?2 AND grp < ?4 AND leased_until_ms > ?3),
           (SELECT COUNT(*) FROM turn_queue t
             WHERE t.grp >= ?2 AND t.grp < ?4 AND t.leased_until_ms <= ?3 AND t.id <= head.id
               AND t.id = (SELECT MIN(id) FROM turn_queue WHERE grp = t.grp))
    FROM head";

#[async_trait]
impl TurnQueue for EmbeddedMetadata {
    async fn enqueue(&self, job: &TurnJob) -> Result<(), Error> {
        let job = job.clone();
        let body = serde_json::to_string(&job).map_err(|e| Error::unavailable("encode a turn job", e))?;
        self.with(move |conn| {
            conn.execute(
                "INSERT OR IGNORE INTO turn_queue (job_key, grp, job) VALUES (?1, ?2, ?3)",
                params![job.key(), job.group(), body],
            )
            .map(drop)
            .map_err(|e| sql("enqueue a turn", e))
        })
        .await?;
        self.queued.notify_waiters();
        Ok(())
    }

    async fn receive(&self, request: &Receive) -> Result<Vec<Delivery>, Error> {
        let deadline = tokio::time::Instant::now() + request.wait;
        let max = i64::try_from(request.max).unwrap_or(i64::MAX);
        let per_org = i64::try_from(request.per_org).unwrap_or(i64::MAX);
        let lease = &request.lease;
        let lease_ms = i64::try_from(lease.ttl.as_millis()).unwrap_or(i64::MAX);
        loop {
            // Registered before looking, so an enqueue between the look and the wait wakes it.
            let queued = self.queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            let holder = lease.holder.clone();
            let got = self
                .with(move |conn| {
                    let tx = conn.unchecked_transaction().map_err(|e| sql("begin", e))?;
                    let now = now_ms();
                    let heads: Vec<(i64, String, u32)> = {
                        let mut statement = tx.prepare_cached(FAIR_HEADS).map_err(|e| sql("receive turns", e))?;
                        let rows = statement
                            .query_map(params![now, max, per_org], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                            .map_err(|e| sql("receive turns", e))?;
                        rows.collect::<Result<_, _>>().map_err(|e| sql("receive turns", e))?
                    };
                    let mut out = Vec::with_capacity(heads.len());
                    for (id, body, attempts) in heads {
                        let receipt = new_id("rcpt");
                        tx.execute(
                            "UPDATE turn_queue SET leased_until_ms = ?2, attempts = attempts + 1, receipt = ?3,
                                 holder = ?4
                             WHERE id = ?1",
                            params![id, now.saturating_add(lease_ms), receipt, holder],
                        )
                        .map_err(|e| sql("lease a turn", e))?;
                        let job: TurnJob = serde_json::from_str(&body).map_err(|e| Error::Corrupt {
                            what: format!("a queued turn: {e}"),
                        })?;
                        out.push(Delivery {
                            job,
                            receipt,
                            attempts: attempts + 1,
                        });
                    }
                    tx.commit().map_err(|e| sql("commit leases", e))?;
                    Ok(out)
                })
                .await?;
            if !got.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            let _ = tokio::time::timeout(POLL.min(deadline - tokio::time::Instant::now()), queued).await;
        }
    }

    async fn extend(&self, receipt: &str, ttl: Duration) -> Result<(), Error> {
        let receipt = receipt.to_owned();
        let until = now_ms().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        self.with(move |conn| {
            conn.execute(
                "UPDATE turn_queue SET leased_until_ms = ?2 WHERE receipt = ?1",
                params![receipt, until],
            )
            .map(drop)
            .map_err(|e| sql("extend a turn's lease", e))
        })
        .await
    }

    async fn recover(&self, holder: &str) -> Result<usize, Error> {
        let holder = holder.to_owned();
        let now = now_ms();
        let recovered = self
            .with(move |conn| {
                conn.execute(
                    "UPDATE turn_queue SET leased_until_ms = 0, holder = NULL, receipt = NULL
                     WHERE holder = ?1 AND leased_until_ms > ?2",
                    params![holder, now],
                )
                .map_err(|e| sql("recover a worker's leases", e))
            })
            .await?;
        if recovered > 0 {
            self.queued.notify_waiters();
        }
        Ok(recovered)
    }

    async fn retry(&self, receipt: &str, delay: Duration) -> Result<(), Error> {
        let receipt = receipt.to_owned();
        let at = now_ms().saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        self.with(move |conn| {
            conn.execute(
                "UPDATE turn_queue SET leased_until_ms = ?2 WHERE receipt = ?1",
                params![receipt, at],
            )
            .map(drop)
            .map_err(|e| sql("retry a turn", e))
        })
        .await
    }

    async fn queued_behind(
        &self,
        org: &str,
        session_id: &str,
        turn_id: &str,
        per_org: usize,
    ) -> Result<Option<u64>, Error> {
        let job = TurnJob::new(org, session_id, turn_id, 0);
        let (group, first, past) = (job.group(), format!("{org}/"), format!("{org}0"));
        let place = self
            .with(move |conn| {
                let mut statement = conn.prepare_cached(LINE_PLACE).map_err(|e| sql("place a turn", e))?;
                let mut rows = statement
                    .query(params![group, first, now_ms(), past])
                    .map_err(|e| sql("place a turn", e))?;
                let Some(row) = rows.next().map_err(|e| sql("place a turn", e))? else {
                    return Ok(None);
                };
                let read = |r: &rusqlite::Row<'_>| -> rusqlite::Result<(String, bool, i64, i64)> {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                };
                read(row).map(Some).map_err(|e| sql("place a turn", e))
            })
            .await?;
        let Some((body, leased, running, rank)) = place else {
            return Ok(None);
        };
        let head: TurnJob = serde_json::from_str(&body).map_err(|e| Error::Corrupt {
            what: format!("a queued turn: {e}"),
        })?;
        if leased || head.turn_id != turn_id {
            return Ok(None);
        }
        let per_org = i64::try_from(per_org.max(1)).unwrap_or(i64::MAX);
        Ok(Some(
            u64::try_from((running + rank).saturating_sub(per_org)).unwrap_or(0),
        ))
    }

    async fn ack(&self, receipt: &str) -> Result<(), Error> {
        let receipt = receipt.to_owned();
        self.with(move |conn| {
            conn.execute("DELETE FROM turn_queue WHERE receipt = ?1", params![receipt])
                .map(drop)
                .map_err(|e| sql("acknowledge a turn", e))
        })
        .await?;
        // The chat's next turn, if any, can be handed out now.
        self.queued.notify_waiters();
        Ok(())
    }
}
