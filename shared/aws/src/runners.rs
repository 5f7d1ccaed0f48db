//! # Runner jobs and runners in the metadata table ([`spool_chat::runner`])
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | runner job | `o#{org}#rjobs` | `{turn id}` | `data` (the job as offered, JSON), `off` (its offer time), `ep` (its epoch), `lease`, `rn` (the runner), `out` (the outcome, JSON, once settled), `ttl` |
//! | runner | `o#{org}#runners` | `{name}` | `data` (the record, JSON), `seen`, `ttl` |
//!
//! A job is offered with a `PutItem` on `attribute_not_exists(pk)`. A claim, a renewal and a
//! settle are each one `UpdateItem` on the condition that `ep` is still the epoch named and
//! `out` does not exist, so of two claims naming one epoch exactly one applies; the item's
//! attributes, not `data`, are the truth for the fields they change. Epoch 0 names no claim:
//! a renewal or a settle of it is refused. An organization's jobs are one consistent `Query`
//! of its partition (so a claim sees a job the moment it is offered), sorted by offer time
//! afterwards: the partition holds only the organization's CLI turns in progress, each
//! removed when its turn ends, so it is small. A job its turn's end left behind (a crash
//! between the two) goes through the table's TTL attribute, [`JOB_TTL_MS`] after its offer.
//!
//! A runner's record carries the table's TTL attribute, [`RUNNER_RECORD_TTL_MS`] after it was
//! last seen; DynamoDB deletes such items late (within days), so [`RunnerStore::runners`]
//! leaves out every record whose `ttl` has passed.

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use spool_chat::runner::{JOB_TTL_MS, RUNNER_RECORD_TTL_MS, RunnerJob, RunnerOutcome, RunnerRecord, RunnerStore};
use spool_log::{
    clock::{Clock, SystemClock},
    error::Error,
};

use crate::{
    errors::ddb,
    items::{Item, ItemExt, n, s},
    keys::{runner_jobs_pk, runners_pk},
    metadata::{AwsMetadata, applied, string},
};

/// What a claim, a renewal and a settle require: the job is there, still at the epoch named,
/// and not settled.
const CURRENT_CLAIM: &str = "attribute_exists(pk) AND #ep = :ep AND attribute_not_exists(#out)";

fn encode<T: serde::Serialize>(what: &str, value: &T) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::unavailable(format!("encode {what}"), e))
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, data: &str) -> Result<T, Error> {
    serde_json::from_str(data).map_err(|e| Error::Corrupt {
        what: format!("{what}: {e}"),
    })
}

/// The job an item holds: as offered, with the claim's attributes over it.
fn job_from(item: &Item) -> Result<RunnerJob, Error> {
    let mut job: RunnerJob = decode("a runner job", &string(item, "data", "a runner job")?)?;
    job.epoch = item.num("ep")?;
    job.lease_until_ms = item.num("lease")?;
    job.runner = item.opt_str("rn").map(str::to_owned);
    job.outcome = item
        .opt_str("out")
        .map(|o| decode("a runner job's outcome", o))
        .transpose()?;
    Ok(job)
}

fn job_item(org: &str, job: &RunnerJob) -> Result<Item, Error> {
    let mut item = Item::from([
        ("pk".to_owned(), s(runner_jobs_pk(org))),
        ("sk".to_owned(), s(&job.turn_id)),
        ("data".to_owned(), s(encode("a runner job", job)?)),
        ("off".to_owned(), n(job.offered_ms)),
        ("ep".to_owned(), n(job.epoch)),
        ("lease".to_owned(), n(job.lease_until_ms)),
        (
            "ttl".to_owned(),
            n(job.offered_ms.saturating_add(JOB_TTL_MS).div_euclid(1000)),
        ),
    ]);
    if let Some(runner) = &job.runner {
        item.insert("rn".to_owned(), s(runner));
    }
    if let Some(outcome) = &job.outcome {
        item.insert("out".to_owned(), s(encode("a runner job's outcome", outcome)?));
    }
    Ok(item)
}

/// A record's `ttl` (seconds, as DynamoDB's TTL reads it): a day after it was last seen.
fn runner_ttl(last_seen_ms: i64) -> i64 {
    last_seen_ms.saturating_add(RUNNER_RECORD_TTL_MS).div_euclid(1000)
}

impl AwsMetadata {
    /// An `UpdateItem` of a job on the condition that claim `epoch` is current; the caller
    /// adds what it sets.
    fn update_claimed(&self, org: &str, turn_id: &str, epoch: u64) -> UpdateItemFluentBuilder {
        self.dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(runner_jobs_pk(org)))
            .key("sk", s(turn_id))
            .condition_expression(CURRENT_CLAIM)
            .expression_attribute_names("#ep", "ep")
            .expression_attribute_names("#out", "out")
            .expression_attribute_values(":ep", n(epoch))
    }
}

#[async_trait]
impl RunnerStore for AwsMetadata {
    async fn offer_job(&self, org: &str, job: &RunnerJob) -> Result<bool, Error> {
        self.put_if(job_item(org, job)?, "attribute_not_exists(pk)", "PutItem (runner job)")
            .await
    }

    async fn runner_job(&self, org: &str, turn_id: &str) -> Result<Option<RunnerJob>, Error> {
        self.get(runner_jobs_pk(org), turn_id, "GetItem (runner job)")
            .await?
            .map(|item| job_from(&item))
            .transpose()
    }

    async fn runner_jobs(&self, org: &str, limit: usize) -> Result<Vec<RunnerJob>, Error> {
        let mut jobs = self
            .query_prefix(runner_jobs_pk(org), "")
            .await?
            .iter()
            .map(job_from)
            .collect::<Result<Vec<_>, _>>()?;
        jobs.sort_by(|a, b| (a.offered_ms, &a.turn_id).cmp(&(b.offered_ms, &b.turn_id)));
        jobs.truncate(limit);
        Ok(jobs)
    }

    async fn claim_job(
        &self,
        org: &str,
        turn_id: &str,
        epoch: u64,
        runner: &str,
        lease_until_ms: i64,
    ) -> Result<bool, Error> {
        let Some(next) = epoch.checked_add(1) else {
            return Ok(false);
        };
        let update = self
            .update_claimed(org, turn_id, epoch)
            .update_expression("SET #ep = :next, #rn = :rn, #lease = :lease")
            .expression_attribute_names("#rn", "rn")
            .expression_attribute_names("#lease", "lease")
            .expression_attribute_values(":next", n(next))
            .expression_attribute_values(":rn", s(runner))
            .expression_attribute_values(":lease", n(lease_until_ms));
        applied(update.send().await, "UpdateItem (claim a runner job)")
    }

    async fn renew_job(&self, org: &str, turn_id: &str, epoch: u64, lease_until_ms: i64) -> Result<bool, Error> {
        if epoch == 0 {
            return Ok(false);
        }
        let update = self
            .update_claimed(org, turn_id, epoch)
            .update_expression("SET #lease = :lease")
            .expression_attribute_names("#lease", "lease")
            .expression_attribute_values(":lease", n(lease_until_ms));
        applied(update.send().await, "UpdateItem (renew a runner job)")
    }

    async fn settle_job(&self, org: &str, turn_id: &str, epoch: u64, outcome: &RunnerOutcome) -> Result<bool, Error> {
        if epoch == 0 {
            return Ok(false);
        }
        let update = self
            .update_claimed(org, turn_id, epoch)
            .update_expression("SET #out = :out")
            .expression_attribute_values(":out", s(encode("a runner job's outcome", outcome)?));
        applied(update.send().await, "UpdateItem (settle a runner job)")
    }

    async fn remove_job(&self, org: &str, turn_id: &str) -> Result<(), Error> {
        self.dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(runner_jobs_pk(org)))
            .key("sk", s(turn_id))
            .send()
            .await
            .map(drop)
            .map_err(|e| ddb("DeleteItem (runner job)", e))
    }

    async fn runner_seen(&self, org: &str, runner: &RunnerRecord) -> Result<(), Error> {
        self.dynamodb
            .put_item()
            .table_name(&self.table)
            .item("pk", s(runners_pk(org)))
            .item("sk", s(&runner.name))
            .item("data", s(encode("a runner", runner)?))
            .item("seen", n(runner.last_seen_ms))
            .item("ttl", n(runner_ttl(runner.last_seen_ms)))
            .send()
            .await
            .map(drop)
            .map_err(|e| ddb("PutItem (runner)", e))
    }

    async fn runners(&self, org: &str) -> Result<Vec<RunnerRecord>, Error> {
        let now_ms = SystemClock.now_ms();
        let mut runners = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .dynamodb
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .filter_expression("#ttl > :now")
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":pk", s(runners_pk(org)))
                .expression_attribute_values(":now", n(now_ms.div_euclid(1000)))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb("Query (runners)", e))?;
            for item in page.items.unwrap_or_default() {
                let runner: RunnerRecord = decode("a runner", &string(&item, "data", "a runner")?)?;
                if runner.last_seen_ms.saturating_add(RUNNER_RECORD_TTL_MS) > now_ms {
                    runners.push(runner);
                }
            }
            match page.last_evaluated_key {
                Some(key) => start = Some(key),
                None => return Ok(runners),
            }
        }
    }
}
