//! # The stream log on DynamoDB and S3
//!
//! - **Order.** An append puts its batch item at the key after the tail (`m#{tail+1}`) on the
//!   condition that the key is free. A writer's tail is always the end of a stored batch, so
//!   batches form one chain: two writers can never both take the same numbers, and a number is
//!   taken exactly when its batch is stored, so none is skipped. The loser reads what came
//!   after its tail and decides again. See [`crate::items`] for the layout.
//! - **Cost.** The head is not written by appends, and writers remember the state they last
//!   wrote, so an uncontended small append is one `PutItem`: one write unit, no read.
//!   Concurrent appends from one process are merged by [`GroupCommit`] into one put.
//! - **Large appends.** A batch whose frames exceed an item's room goes to S3 first
//!   (`blobs/{uuid}`); its item holds the key.
//! - **Pages.** Sealing writes `streams/{sid}/pages/{first:020}-{last:020}` create-only
//!   (`If-None-Match: *`) and records it (and the tail it ends at) in the head. Batches are not
//!   deleted: DynamoDB's TTL removes them 14 days after they were written, and idle checks,
//!   armed by the write that begins a stream's unsealed batches, see them sealed long before.
//! - **Reads** stitch pages (for `seq <= sealed`) and the batches after.
//!
//! The adapter's parts: [`head`] (reading, caching and touching a stream's head), [`append`]
//! (group commit into transactions), [`read`] (the domain's read path over items and pages),
//! [`pages`] (sealed pages in S3, and sealing) and [`lifecycle`] (creating, forking and
//! deleting streams, and collecting what a removed stream leaves).

mod append;
mod batches;
mod head;
mod lifecycle;
mod pages;
mod read;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use spool_log::{
    clock::{Clock, SystemClock},
    error::Error,
    failpoint::FailPoints,
    group_commit::GroupCommit,
    limits::LogLimits,
    notify::Notifier,
    page::page_name,
    port::{SealScheduler, StreamWriter},
    stream::{Append, AppendAck, CreateStream, Created, SeqRange, StreamPath},
};

use crate::{AwsClients, items::Head};
use append::TRANSACTION_APPENDS_MAX;
use batches::Prepared;
use pages::page_key;

/// How an [`AwsLog`] is set up.
#[derive(Clone)]
pub struct AwsLogOptions {
    /// The streams table (`SPOOL_STREAMS_TABLE`).
    pub table: String,
    /// The pages bucket (`SPOOL_PAGES_BUCKET`).
    pub bucket: String,
    /// Size limits and page geometry.
    pub limits: LogLimits,
    /// The clock expiry is decided by.
    pub clock: Arc<dyn Clock>,
    /// Crash points for tests.
    pub fail_points: Arc<FailPoints>,
    /// How often a live reader probes a stream's newest batch to see other processes' appends.
    pub poll_interval: Duration,
    /// Where to ask for sealing when a page's worth of messages is waiting.
    pub scheduler: Option<Arc<dyn SealScheduler>>,
    /// Where append conflicts are counted.
    pub metrics: Arc<dyn spool_log::metrics::Metrics>,
}

impl AwsLogOptions {
    /// Options with default limits, the system clock and no seal scheduler.
    pub fn new(table: impl Into<String>, bucket: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            bucket: bucket.into(),
            limits: LogLimits::default(),
            clock: Arc::new(SystemClock),
            fail_points: Arc::new(FailPoints::default()),
            poll_interval: Duration::from_millis(500),
            scheduler: None,
            metrics: Arc::new(spool_log::metrics::LogMetrics),
        }
    }
}

impl std::fmt::Debug for AwsLogOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsLogOptions")
            .field("table", &self.table)
            .field("bucket", &self.bucket)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

struct Inner {
    clients: AwsClients,
    opts: AwsLogOptions,
    notifier: Notifier,
    heads: Mutex<HashMap<StreamPath, Remembered>>,
    /// The storage id each path was last seen with, for live readers' probes.
    sids: Mutex<HashMap<StreamPath, String>>,
    pages: Mutex<HashMap<String, BTreeMap<u64, SeqRange>>>,
    commits: Arc<GroupCommit<StreamPath, Prepared, AppendAck>>,
}

/// The state this process last wrote (or read) for a stream, with what it knows of producers
/// as of that tail, and when. Batches are immutable and put only at a free key, so while no
/// other writer put after this tail (which the next put's condition checks) it is current.
#[derive(Clone)]
struct Remembered {
    head: Head,
    producers: HashMap<String, head::Known>,
    at_ms: i64,
}

/// The AWS stream log; cheap to clone.
#[derive(Clone)]
pub struct AwsLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AwsLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsLog").field("opts", &self.inner.opts).finish()
    }
}

impl AwsLog {
    /// A log over the table and bucket in `opts`.
    pub fn new(clients: AwsClients, opts: AwsLogOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                clients,
                opts,
                notifier: Notifier::default(),
                heads: Mutex::new(HashMap::new()),
                sids: Mutex::new(HashMap::new()),
                pages: Mutex::new(HashMap::new()),
                commits: GroupCommit::new(TRANSACTION_APPENDS_MAX),
            }),
        }
    }

    /// The SDK clients this log uses.
    pub fn clients(&self) -> &AwsClients {
        &self.inner.clients
    }

    /// The raw bytes of every sealed page of the stream at `path`, by page name (for tests and
    /// tools that check what sealing wrote).
    pub async fn page_files(&self, path: &StreamPath) -> Result<Vec<(String, Bytes)>, Error> {
        let Some(head) = self.inner.fetch_head(path).await? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for range in self.inner.list_pages(&head.state.sid, None).await? {
            let key = page_key(&head.state.sid, range);
            out.push((page_name(range), self.inner.get_object(&key).await?));
        }
        Ok(out)
    }
}

#[async_trait]
impl StreamWriter for AwsLog {
    async fn create(&self, path: &StreamPath, req: CreateStream) -> Result<Created, Error> {
        self.inner.create(path, req).await
    }

    async fn append(&self, path: &StreamPath, req: Append) -> Result<AppendAck, Error> {
        let prepared = self.inner.prepare(req).await?;
        let inner = Arc::clone(&self.inner);
        let key = path.clone();
        self.inner
            .commits
            .submit(key.clone(), prepared, move |group| {
                Arc::clone(&inner).commit(key.clone(), group)
            })
            .await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), Error> {
        let kept_for_forks = self.inner.delete(path).await?;
        // The forks of a deleted stream read its pages once its batches expire: seal it all
        // (with a maintenance queue, the delete armed a check before it committed).
        if kept_for_forks && self.inner.opts.scheduler.is_none() {
            spool_log::port::StreamSealer::seal(self, path, spool_log::stream::SealMode::Final).await?;
        }
        Ok(())
    }
}
