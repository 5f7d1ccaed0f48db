//! Runner jobs and runners in the metadata store ([`spool_chat::runner`]).

use async_trait::async_trait;
use spool_chat::runner::{RunnerJob, RunnerOutcome, RunnerRecord, RunnerStore};
use spool_log::error::Error;

use crate::metadata::EmbeddedMetadata;

#[async_trait]
impl RunnerStore for EmbeddedMetadata {
    async fn offer_job(&self, _org: &str, _job: &RunnerJob) -> Result<bool, Error> {
        todo!("runner jobs")
    }

    async fn runner_job(&self, _org: &str, _turn_id: &str) -> Result<Option<RunnerJob>, Error> {
        todo!("runner jobs")
    }

    async fn runner_jobs(&self, _org: &str, _limit: usize) -> Result<Vec<RunnerJob>, Error> {
        todo!("runner jobs")
    }

    async fn claim_job(
        &self,
        _org: &str,
        _turn_id: &str,
        _epoch: u64,
        _runner: &str,
        _lease_until_ms: i64,
    ) -> Result<bool, Error> {
        todo!("runner jobs")
    }

    async fn renew_job(&self, _org: &str, _turn_id: &str, _epoch: u64, _lease_until_ms: i64) -> Result<bool, Error> {
        todo!("runner jobs")
    }

    async fn settle_job(
        &self,
        _org: &str,
        _turn_id: &str,
        _epoch: u64,
        _outcome: &RunnerOutcome,
    ) -> Result<bool, Error> {
        todo!("runner jobs")
    }

    async fn remove_job(&self, _org: &str, _turn_id: &str) -> Result<(), Error> {
        todo!("runner jobs")
    }

    async fn runner_seen(&self, _org: &str, _runner: &RunnerRecord) -> Result<(), Error> {
        todo!("runners")
    }

    async fn runners(&self, _org: &str) -> Result<Vec<RunnerRecord>, Error> {
        todo!("runners")
    }
}
