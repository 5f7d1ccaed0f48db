//! # Runner jobs and runners in the metadata database ([`spool_chat::runner`])
//!
//! One `runner_jobs` row per job, keyed by its organization and turn: the job as offered
//! (`data`, JSON) beside the columns a claim, a renewal and a settle change (`epoch`, `runner`,
//! `lease_until_ms`, `outcome`), which are the truth for those fields. Each of those writes is
//! one `UPDATE … WHERE epoch = ? AND outcome IS NULL`, atomic in SQLite whichever process
//! writes, so of two claims naming one epoch exactly one changes the row. Epoch 0 names no
//! claim: a renewal or a settle of it is refused. A job offered more than [`JOB_TTL_MS`] ago
//! (one its turn's end left behind) is deleted when its organization next offers one.
//!
//! One `runners` row per runner, keyed by its organization and name: the record as JSON and
//! when it was last seen. A record not seen for [`RUNNER_RECORD_TTL_MS`] is no longer listed,
//! and the organization's such rows are deleted when a runner of it is next seen.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params};
use serde::{Serialize, de::DeserializeOwned};
use spool_chat::runner::{JOB_TTL_MS, RUNNER_RECORD_TTL_MS, RunnerJob, RunnerOutcome, RunnerRecord, RunnerStore};
use spool_log::{
    clock::{Clock, SystemClock},
    error::Error,
};

use crate::{db::sql, metadata::EmbeddedMetadata};

fn encode<T: Serialize>(what: &str, value: &T) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::unavailable(format!("embedded metadata: encode {what}"), e))
}

fn decode<T: DeserializeOwned>(what: &str, data: &str) -> Result<T, Error> {
    serde_json::from_str(data).map_err(|e| Error::Corrupt {
        what: format!("{what}: {e}"),
    })
}

/// The columns [`job_row`] reads, in its order.
const JOB_COLUMNS: &str = "data, epoch, runner, lease_until_ms, outcome";

/// A `runner_jobs` row as SQLite stores it.
struct JobRow {
    data: String,
    epoch: i64,
    runner: Option<String>,
    lease_until_ms: i64,
    outcome: Option<String>,
}

fn job_row(row: &Row<'_>) -> rusqlite::Result<JobRow> {
    Ok(JobRow {
        data: row.get(0)?,
        epoch: row.get(1)?,
        runner: row.get(2)?,
        lease_until_ms: row.get(3)?,
        outcome: row.get(4)?,
    })
}

impl JobRow {
    /// The job: as offered, with its claim's columns over it.
    fn into_job(self) -> Result<RunnerJob, Error> {
        let mut job: RunnerJob = decode("a runner job", &self.data)?;
        job.epoch = u64::try_from(self.epoch).map_err(|_| Error::Corrupt {
            what: format!("runner job `{}`: a negative epoch", job.turn_id),
        })?;
        job.runner = self.runner;
        job.lease_until_ms = self.lease_until_ms;
        job.outcome = self
            .outcome
            .as_deref()
            .map(|o| decode("a runner job's outcome", o))
            .transpose()?;
        Ok(job)
    }
}

/// An epoch as SQLite's integer; one past its range matches no row.
fn epoch_column(epoch: u64) -> i64 {
    i64::try_from(epoch).unwrap_or(i64::MAX)
}

#[async_trait]
impl RunnerStore for EmbeddedMetadata {
    async fn offer_job(&self, org: &str, job: &RunnerJob) -> Result<bool, Error> {
        let org = org.to_owned();
        let data = encode("a runner job", job)?;
        let outcome = job
            .outcome
            .as_ref()
            .map(|o| encode("a runner job's outcome", o))
            .transpose()?;
        let job = job.clone();
        let left_before = SystemClock.now_ms().saturating_sub(JOB_TTL_MS);
        self.write(move |tx| {
            tx.execute(
                "DELETE FROM runner_jobs WHERE org = ?1 AND offered_ms < ?2",
                params![org, left_before],
            )
            .map_err(|e| sql("remove runner jobs left behind", e))?;
            let stored = tx
                .execute(
                    "INSERT INTO runner_jobs (org, turn_id, offered_ms, epoch, runner, lease_until_ms, outcome, data)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (org, turn_id) DO NOTHING",
                    params![
                        org,
                        job.turn_id,
                        job.offered_ms,
                        epoch_column(job.epoch),
                        job.runner,
                        job.lease_until_ms,
                        outcome,
                        data
                    ],
                )
                .map_err(|e| sql("offer a runner job", e))?;
            Ok(stored == 1)
        })
        .await
    }

    async fn runner_job(&self, org: &str, turn_id: &str) -> Result<Option<RunnerJob>, Error> {
        let (org, turn_id) = (org.to_owned(), turn_id.to_owned());
        self.with(move |conn| {
            conn.query_row(
                &format!("SELECT {JOB_COLUMNS} FROM runner_jobs WHERE org = ?1 AND turn_id = ?2"),
                params![org, turn_id],
                job_row,
            )
            .optional()
            .map_err(|e| sql("read a runner job", e))?
            .map(JobRow::into_job)
            .transpose()
        })
        .await
    }

    async fn runner_jobs(&self, org: &str, limit: usize) -> Result<Vec<RunnerJob>, Error> {
        let org = org.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {JOB_COLUMNS} FROM runner_jobs WHERE org = ?1 ORDER BY offered_ms, turn_id LIMIT ?2"
                ))
                .map_err(|e| sql("list runner jobs", e))?;
            let rows = statement
                .query_map(params![org, limit], job_row)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list runner jobs", e))?;
            rows.into_iter().map(JobRow::into_job).collect()
        })
        .await
    }

    async fn claim_job(
        &self,
        org: &str,
        turn_id: &str,
        epoch: u64,
        runner: &str,
        lease_until_ms: i64,
    ) -> Result<bool, Error> {
        let (org, turn_id, runner) = (org.to_owned(), turn_id.to_owned(), runner.to_owned());
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE runner_jobs SET epoch = epoch + 1, runner = ?4, lease_until_ms = ?5
                     WHERE org = ?1 AND turn_id = ?2 AND epoch = ?3 AND outcome IS NULL",
                    params![org, turn_id, epoch_column(epoch), runner, lease_until_ms],
                )
                .map_err(|e| sql("claim a runner job", e))?;
            Ok(changed == 1)
        })
        .await
    }

    async fn renew_job(&self, org: &str, turn_id: &str, epoch: u64, lease_until_ms: i64) -> Result<bool, Error> {
        if epoch == 0 {
            return Ok(false);
        }
        let (org, turn_id) = (org.to_owned(), turn_id.to_owned());
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE runner_jobs SET lease_until_ms = ?4
                     WHERE org = ?1 AND turn_id = ?2 AND epoch = ?3 AND outcome IS NULL",
                    params![org, turn_id, epoch_column(epoch), lease_until_ms],
                )
                .map_err(|e| sql("renew a runner job", e))?;
            Ok(changed == 1)
        })
        .await
    }

    async fn settle_job(&self, org: &str, turn_id: &str, epoch: u64, outcome: &RunnerOutcome) -> Result<bool, Error> {
        if epoch == 0 {
            return Ok(false);
        }
        let (org, turn_id) = (org.to_owned(), turn_id.to_owned());
        let outcome = encode("a runner job's outcome", outcome)?;
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE runner_jobs SET outcome = ?4
                     WHERE org = ?1 AND turn_id = ?2 AND epoch = ?3 AND outcome IS NULL",
                    params![org, turn_id, epoch_column(epoch), outcome],
                )
                .map_err(|e| sql("settle a runner job", e))?;
            Ok(changed == 1)
        })
        .await
    }

    async fn remove_job(&self, org: &str, turn_id: &str) -> Result<(), Error> {
        let (org, turn_id) = (org.to_owned(), turn_id.to_owned());
        self.with(move |conn| {
            conn.execute(
                "DELETE FROM runner_jobs WHERE org = ?1 AND turn_id = ?2",
                params![org, turn_id],
            )
            .map(drop)
            .map_err(|e| sql("remove a runner job", e))
        })
        .await
    }

    async fn runner_seen(&self, org: &str, runner: &RunnerRecord) -> Result<(), Error> {
        let org = org.to_owned();
        let data = encode("a runner", runner)?;
        let (name, seen) = (runner.name.clone(), runner.last_seen_ms);
        let gone_before = SystemClock.now_ms().saturating_sub(RUNNER_RECORD_TTL_MS);
        self.write(move |tx| {
            tx.execute(
                "INSERT INTO runners (org, name, last_seen_ms, data) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (org, name) DO UPDATE SET last_seen_ms = excluded.last_seen_ms, data = excluded.data",
                params![org, name, seen, data],
            )
            .map_err(|e| sql("record a runner", e))?;
            tx.execute(
                "DELETE FROM runners WHERE org = ?1 AND last_seen_ms <= ?2",
                params![org, gone_before],
            )
            .map(drop)
            .map_err(|e| sql("forget gone runners", e))
        })
        .await
    }

    async fn runners(&self, org: &str) -> Result<Vec<RunnerRecord>, Error> {
        let org = org.to_owned();
        let gone_before = SystemClock.now_ms().saturating_sub(RUNNER_RECORD_TTL_MS);
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached("SELECT data FROM runners WHERE org = ?1 AND last_seen_ms > ?2 ORDER BY name")
                .map_err(|e| sql("list runners", e))?;
            let rows = statement
                .query_map(params![org, gone_before], |r| r.get::<_, String>(0))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list runners", e))?;
            rows.iter().map(|data| decode("a runner", data)).collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use spool_chat::workspace::CliType;

    use super::*;

    fn job(turn_id: &str, offered_ms: i64) -> RunnerJob {
        RunnerJob {
            turn_id: turn_id.to_owned(),
            session_id: "s1".to_owned(),
            workspace_id: None,
            cli: CliType::Claude,
            offered_seq: 1,
            offered_ms,
            wait_ms: 60_000,
            epoch: 0,
            runner: None,
            lease_until_ms: 0,
            outcome: None,
        }
    }

    #[tokio::test]
    async fn a_job_left_behind_for_a_week_goes_at_its_organizations_next_offer() {
        // GIVEN a job offered more than a week ago, one just under, and another organization's
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedMetadata::open(dir.path()).unwrap();
        let now = SystemClock.now_ms();
        let old = now - JOB_TTL_MS - 60_000;
        store.offer_job("o", &job("t-old", old)).await.unwrap();
        store
            .offer_job("o", &job("t-kept", now - JOB_TTL_MS + 600_000))
            .await
            .unwrap();
        store.offer_job("p", &job("t-old", old)).await.unwrap();

        // WHEN the organization offers another
        store.offer_job("o", &job("t-new", now)).await.unwrap();

        // THEN the one left behind is gone, and the others stay
        let turns = |jobs: Vec<RunnerJob>| jobs.into_iter().map(|j| j.turn_id).collect::<Vec<_>>();
        assert_eq!(turns(store.runner_jobs("o", 10).await.unwrap()), ["t-kept", "t-new"]);
        assert_eq!(turns(store.runner_jobs("p", 10).await.unwrap()), ["t-old"]);
    }
}
