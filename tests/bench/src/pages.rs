//! Sealed-page size on the AWS backend, over the emulator: how the size of a page trades S3
//! PUTs when sealing against what a resuming reader has to fetch.
//!
//! For each size, one stream of `messages` 100-byte messages is written, sealed
//! (`SealMode::Final`), read whole from its start, and then read by `resumes` readers from
//! random offsets (the first chunk of each: what a reconnecting client waits for). A sealed read
//! fetches the whole page that holds its offset, so bigger pages mean fewer PUTs and more bytes
//! (and time) per resume.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use spool_aws::RequestCounter;
use spool_log::{
    limits::LogLimits,
    port::{StreamReader, StreamSealer, StreamWriter},
    stream::{Append, Offset, Position, SealMode},
};
use spool_platform::Config;

use crate::protocol::percentile;

/// One page size's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PageSize {
    pub(crate) page_kib: usize,
    pub(crate) pages: u64,
    /// S3 PUTs (and LISTs) of sealing, per million messages.
    pub(crate) s3_writes_per_million: f64,
    /// Reading the whole stream from its start.
    pub(crate) catch_up_mb_per_s: f64,
    /// S3 GETs per million messages read from the start.
    pub(crate) s3_gets_per_million_read: f64,
    /// Time to the first chunk of a read from a random offset.
    pub(crate) resume_p50_ms: f64,
    pub(crate) resume_p99_ms: f64,
    /// S3 GETs per resume.
    pub(crate) s3_gets_per_resume: f64,
}

/// The page sizes compared, in KiB.
pub(crate) const SIZES_KIB: [usize; 4] = [64, 256, 1024, 4096];

pub(crate) async fn run(config: &Config, messages: u64, resumes: usize) -> anyhow::Result<Vec<PageSize>> {
    let mut out = Vec::new();
    for kib in SIZES_KIB {
        crate::progress("aws pages", &format!("{kib} KiB pages"));
        let mut config = config.clone();
        config.aws.maintenance_queue_url = None; // sealed here, explicitly
        config.limits = LogLimits {
            page_bytes: kib * 1024,
            // Let the size alone cut pages.
            page_max_messages: 1 << 20,
            ..config.limits
        };
        let counter = RequestCounter::default();
        let log = spool_aws::Stores::connect(&config, Some(counter.clone())).await?.log();
        let path = crate::path(&format!("pages-{kib}"));
        log.create(&path, crate::json()).await?;
        let batch = 500;
        for start in (0..messages).step_by(batch) {
            let end = (start + batch as u64).min(messages);
            log.append(&path, Append::messages((start..end).map(crate::message)))
                .await?;
        }

        counter.reset();
        let report = log.seal(&path, SealMode::Final).await?;
        anyhow::ensure!(
            report.sealed_through == Offset::after(messages),
            "sealed through {}",
            report.sealed_through
        );
        let million = messages as f64 / 1e6;
        let s3_writes = counter.total("S3", |op| op == "PutObject" || op.starts_with("List"));

        // A fresh log, as a new Lambda instance reads: nothing cached.
        let counter = RequestCounter::default();
        let reader = spool_aws::Stores::connect(&config, Some(counter.clone())).await?.log();
        let catch_up_mb_per_s = crate::read_all(&*reader, &path, messages).await?;
        let gets = counter.total("S3", |op| op == "GetObject");

        counter.reset();
        let mut samples = Vec::with_capacity(resumes);
        for k in crate::protocol::pick(resumes, messages) {
            let at = Offset::after(k);
            let started = Instant::now();
            let chunk = reader.read(&path, Position::At(at), None).await?;
            samples.push(started.elapsed());
            anyhow::ensure!(!chunk.messages.is_empty(), "nothing read at {at}");
        }
        samples.sort();
        let resume_gets = counter.total("S3", |op| op == "GetObject");
        out.push(PageSize {
            page_kib: kib,
            pages: report.written.len() as u64,
            s3_writes_per_million: s3_writes as f64 / million,
            catch_up_mb_per_s,
            s3_gets_per_million_read: gets as f64 / million,
            resume_p50_ms: percentile(&samples, 0.50),
            resume_p99_ms: percentile(&samples, 0.99),
            s3_gets_per_resume: resume_gets as f64 / resumes as f64,
        });
    }
    Ok(out)
}
