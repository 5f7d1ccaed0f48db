//! # The embedded stream log
//!
//! The backend of `spool serve` and `make run`: one SQLite file (`spool.db`) for stream heads,
//! producer state and the hot tail, plus a directory of immutable page files (`pages/`) that
//! sealing fills. It implements the same ports, and passes the same contract suite, as the AWS
//! adapter.
//!
//! - Writes go through one writer thread that group-commits (see [`writer`]).
//! - Reads run on a small pool of read connections, each inside a read transaction, so the head
//!   and the rows it points at are one consistent snapshot.
//! - Several processes may share a data directory: SQLite's locks serialize their writes, page
//!   files are create-only, and live readers re-check the file every `poll_interval` to see
//!   other processes' appends (in-process appends wake them at once).
//!
//! [`EmbeddedMetadata`] keeps organizations, API keys, workspaces and agents in `metadata.db`
//! beside it.

mod attachments;
mod commands;
mod db;
mod directory;
mod files;
mod jobs;
mod mcp;
mod metadata;
mod pages;
mod private;
mod recent;
mod runners;
mod sessions;
mod stores;
mod subscriptions;
mod turn_queue;
mod usage;
mod webhooks;
mod worker_slot;
mod workspaces;
mod writer;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex, Weak, mpsc},
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::Connection;
use spool_log::{
    clock::{Clock, SystemClock},
    error::Error,
    failpoint::FailPoints,
    limits::LogLimits,
    notify::WaitOutcome,
    notify::{Notifier, TailProbe, wait_for_data},
    page::Page,
    port::{StreamReader, StreamSealer, StreamWriter},
    read::{StoredRuns, read_stored_now},
    seal::{PageStore, seal_stream},
    state::StreamState,
    stream::{
        Append, AppendAck, Chunk, CreateStream, Created, Offset, Position, SealMode, SealReport, SeqRange, StreamMeta,
        StreamPath,
    },
};
use tokio::sync::{mpsc as tokio_mpsc, oneshot};

pub use crate::{
    attachments::sweep_uploads,
    files::LocalFiles,
    jobs::{LocalJobQueue, LocalJobs},
    metadata::EmbeddedMetadata,
    stores::{OpenError, Stores},
    worker_slot::WorkerSlot,
};
use crate::{pages::PageFiles, writer::Job};

/// How an [`EmbeddedLog`] is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// Size limits and page geometry.
    pub limits: LogLimits,
    /// The clock expiry is decided by.
    pub clock: Arc<dyn Clock>,
    /// Crash points for tests.
    pub fail_points: Arc<FailPoints>,
    /// How often a live reader re-checks for other processes' appends.
    pub poll_interval: Duration,
    /// Seal full pages in a background task as streams grow (needs a Tokio runtime).
    pub auto_seal: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            limits: LogLimits::default(),
            clock: Arc::new(SystemClock),
            fail_points: Arc::new(FailPoints::default()),
            poll_interval: Duration::from_millis(500),
            auto_seal: true,
        }
    }
}

/// State shared by the handle, the writer thread and the sealer task.
pub(crate) struct Shared {
    limits: LogLimits,
    clock: Arc<dyn Clock>,
    notifier: Notifier,
    pages: PageFiles,
    /// The messages this process appended lately, for reads of hot tails.
    recent: recent::Recent,
    seal_requests: Option<tokio_mpsc::UnboundedSender<StreamPath>>,
}

impl Shared {
    fn request_seal(&self, path: StreamPath) {
        if let Some(tx) = &self.seal_requests {
            let _ = tx.send(path);
        }
    }
}

/// A small pool of read connections.
struct Readers {
    db: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T, Error>) -> Result<T, Error> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => db::open(&self.db)?,
        };
        let result = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < 8 {
            idle.push(conn);
        }
        result
    }

    /// Runs `f` inside one read transaction: a consistent snapshot of the whole database.
    fn snapshot<T>(&self, f: impl FnOnce(&Connection) -> Result<T, Error>) -> Result<T, Error> {
        self.with(|conn| {
            conn.execute_batch("BEGIN").map_err(|e| db::sql("begin read", e))?;
            let result = f(conn);
            let _ = conn.execute_batch("COMMIT");
            result
        })
    }
}

struct Inner {
    dir: PathBuf,
    shared: Arc<Shared>,
    jobs: Mutex<mpsc::Sender<Job>>,
    readers: Readers,
    fail: Arc<FailPoints>,
    poll_interval: Duration,
}

/// The embedded stream log; cheap to clone.
#[derive(Clone)]
pub struct EmbeddedLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EmbeddedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedLog").field("dir", &self.inner.dir).finish()
    }
}

impl EmbeddedLog {
    /// How many live reads of `path` wait in this process now (for tests that must start
    /// an append only once a reader waits).
    pub fn waiters(&self, path: &StreamPath) -> usize {
        self.inner.shared.notifier.waiters(path)
    }

    /// Opens (creating if need be) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Self, Error> {
        let dir = dir.as_ref().to_path_buf();
        let db_path = private::prepare(&dir, &["pages"], "spool.db")?;
        let conn = db::open(&db_path)?;

        let seal_rx;
        let seal_requests = if options.auto_seal {
            let (tx, rx) = tokio_mpsc::unbounded_channel();
            seal_rx = Some(rx);
            Some(tx)
        } else {
            seal_rx = None;
            None
        };
        let shared = Arc::new(Shared {
            limits: options.limits,
            clock: options.clock,
            notifier: Notifier::default(),
            pages: PageFiles::new(dir.join("pages")),
            recent: recent::Recent::default(),
            seal_requests,
        });

        // Page directories of streams deleted just before a crash.
        for sid in db::garbage(&conn)? {
            shared.pages.remove_all(&sid)?;
            db::forget_garbage(&conn, &sid)?;
        }

        let (tx, rx) = mpsc::channel();
        let writer_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("spool-writer".to_owned())
            .spawn(move || writer::run(conn, writer_shared, rx))
            .map_err(|e| Error::unavailable("cannot start the writer thread", e))?;

        let log = Self {
            inner: Arc::new(Inner {
                readers: Readers {
                    db: db_path,
                    idle: Mutex::new(Vec::new()),
                },
                dir,
                shared,
                jobs: Mutex::new(tx),
                fail: options.fail_points,
                poll_interval: options.poll_interval,
            }),
        };
        if let Some(rx) = seal_rx {
            log.spawn_sealer(rx)?;
        }
        Ok(log)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The raw bytes of every sealed page of the stream at `path`, by page name. For tests and
    /// tools that check what sealing wrote.
    pub async fn page_files(&self, path: &StreamPath) -> Result<Vec<(String, Bytes)>, Error> {
        let inner = Arc::clone(&self.inner);
        let path = path.clone();
        blocking(move || {
            let state = inner.readers.with(|conn| db::load_state(conn, &path))?;
            match state {
                Some(state) => inner.shared.pages.raw(&state.sid),
                None => Ok(Vec::new()),
            }
        })
        .await
    }

    fn spawn_sealer(&self, mut rx: tokio_mpsc::UnboundedReceiver<StreamPath>) -> Result<(), Error> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| Error::unavailable("auto-seal needs a Tokio runtime; open the store inside one", e))?;
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        handle.spawn(async move {
            while let Some(path) = rx.recv().await {
                let Some(inner) = weak.upgrade() else { break };
                let log = EmbeddedLog { inner };
                match log.seal(&path, SealMode::Full).await {
                    Ok(report) if !report.written.is_empty() => {
                        tracing::debug!(%path, pages = report.written.len(), "sealed in the background");
                    }
                    Ok(_) | Err(Error::NotFound { .. }) => {}
                    Err(e) => tracing::warn!(%path, error = %e, "background sealing failed; retried at the next page"),
                }
            }
        });
        Ok(())
    }

    async fn submit<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T, Error>>) -> Job) -> Result<T, Error> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(make(tx))
            .map_err(|_| Error::unavailable("embedded store", "the writer thread has stopped"))?;
        rx.await
            .map_err(|_| Error::unavailable("embedded store", "the writer thread dropped the request"))?
    }

    async fn live_state(&self, path: &StreamPath) -> Result<StreamState, Error> {
        let inner = Arc::clone(&self.inner);
        let path = path.clone();
        let now = self.inner.shared.clock.now_ms();
        blocking(move || {
            let state = inner
                .readers
                .with(|conn| db::load_state(conn, &path))?
                .ok_or_else(|| Error::NotFound { path: path.clone() })?;
            state.check_live(now)?;
            Ok(state)
        })
        .await
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, Error> + Send + 'static) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::unavailable("embedded store: a blocking task failed", e))?
}

/// One read inside a snapshot: the chunk, and whether the stream's TTL needs a touch.
fn read_snapshot(
    conn: &Connection,
    shared: &Shared,
    path: &StreamPath,
    from: Position,
    max_bytes: usize,
    now: i64,
) -> Result<(Chunk, Option<String>), Error> {
    let state = db::load_state(conn, path)?.ok_or_else(|| Error::NotFound { path: path.clone() })?;
    state.check_live(now)?;
    let start = state.read_start(from)?;
    let snapshot = Snapshot {
        conn,
        pages: &shared.pages,
        recent: &shared.recent,
    };
    let (messages, from_pages) = read_stored_now(&snapshot, &state, start, max_bytes)?;
    let chunk = state.chunk(start, messages, from_pages);
    Ok((chunk, state.needs_touch(now).then(|| state.sid.clone())))
}

/// A read's view of the store: one SQLite snapshot and the page files, fetched without
/// waiting ([`read_stored_now`]).
pub(crate) struct Snapshot<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) pages: &'a PageFiles,
    pub(crate) recent: &'a recent::Recent,
}

impl StoredRuns for Snapshot<'_> {
    async fn hot(&self, sid: &str, after: u64, through: u64, max_bytes: usize) -> Result<Vec<Bytes>, Error> {
        if let Some(messages) = self.recent.get(sid, after, through, max_bytes) {
            return Ok(messages);
        }
        db::read_messages(self.conn, sid, after, through, max_bytes)
    }

    async fn page_containing(&self, sid: &str, seq: u64) -> Result<Option<Page>, Error> {
        match self.pages.find_containing(sid, seq)? {
            Some(range) => Ok(Some(self.pages.read(sid, range)?)),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl StreamWriter for EmbeddedLog {
    async fn create(&self, path: &StreamPath, req: CreateStream) -> Result<Created, Error> {
        let path = path.clone();
        self.submit(|reply| Job::Create { path, req, reply }).await
    }

    async fn append(&self, path: &StreamPath, req: Append) -> Result<AppendAck, Error> {
        let path = path.clone();
        self.submit(|reply| Job::Append { path, req, reply }).await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), Error> {
        let path = path.clone();
        self.submit(|reply| Job::Delete { path, reply }).await
    }
}

#[async_trait]
impl StreamReader for EmbeddedLog {
    async fn metadata(&self, path: &StreamPath) -> Result<StreamMeta, Error> {
        Ok(self.live_state(path).await?.meta())
    }

    async fn read(&self, path: &StreamPath, from: Position, max_bytes: Option<usize>) -> Result<Chunk, Error> {
        let inner = Arc::clone(&self.inner);
        let max_bytes = max_bytes.unwrap_or(self.inner.shared.limits.max_read_bytes);
        let now = self.inner.shared.clock.now_ms();
        let owned = path.clone();
        let (chunk, touch) = blocking(move || {
            inner
                .readers
                .snapshot(|conn| read_snapshot(conn, &inner.shared, &owned, from, max_bytes, now))
        })
        .await?;
        if let Some(sid) = touch {
            let path = path.clone();
            self.submit(|reply| Job::Touch { path, sid, reply }).await?;
        }
        Ok(chunk)
    }

    async fn wait(&self, path: &StreamPath, after: Offset, timeout: Duration) -> Result<WaitOutcome, Error> {
        let notifier = &self.inner.shared.notifier;
        wait_for_data(notifier, path, after, timeout, self.inner.poll_interval, || async {
            self.metadata(path).await.map(TailProbe::from)
        })
        .await
    }
}

#[async_trait]
impl StreamSealer for EmbeddedLog {
    async fn seal(&self, path: &StreamPath, mode: SealMode) -> Result<SealReport, Error> {
        let limits = self.inner.shared.limits;
        seal_stream(self, &self.inner.fail, &limits, path, mode).await
    }

    async fn seal_when_idle(&self, path: &StreamPath, tail: Offset) -> Result<(), Error> {
        self.seal(path, SealMode::Full).await?;
        let idle = self.inner.shared.limits.idle_seal;
        if idle.is_zero() {
            return self.seal(path, SealMode::Final).await.map(drop);
        }
        // A timer in this process: a restart forgets it, and the tail stays in SQLite until the
        // chat's next turn ends. It does not keep the log open.
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let path = path.clone();
        tokio::spawn(async move {
            tokio::time::sleep(idle).await;
            let Some(inner) = weak.upgrade() else { return };
            let log = EmbeddedLog { inner };
            if let Err(e) = log.seal(&path, SealMode::Idle { tail, chain: None }).await {
                tracing::warn!(%path, error = %e, "cannot seal an idle stream's last page; its next turn will");
            }
        });
        Ok(())
    }
}

#[async_trait]
impl PageStore for EmbeddedLog {
    async fn load_state(&self, path: &StreamPath) -> Result<Option<StreamState>, Error> {
        match self.live_state(path).await {
            Ok(state) => Ok(Some(state)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn find_page_starting_at(&self, sid: &str, first: u64) -> Result<Option<SeqRange>, Error> {
        let inner = Arc::clone(&self.inner);
        let sid = sid.to_owned();
        blocking(move || inner.shared.pages.find_starting_at(&sid, first)).await
    }

    async fn read_hot(&self, sid: &str, after: u64, through: u64, max_bytes: usize) -> Result<Vec<Bytes>, Error> {
        let inner = Arc::clone(&self.inner);
        let sid = sid.to_owned();
        blocking(move || {
            inner
                .readers
                .with(|conn| db::read_messages(conn, &sid, after, through, max_bytes))
        })
        .await
    }

    async fn write_page(&self, state: &StreamState, range: SeqRange, page: Bytes) -> Result<(), Error> {
        let inner = Arc::clone(&self.inner);
        let sid = state.sid.clone();
        blocking(move || inner.shared.pages.write(&sid, range, &page)).await
    }

    async fn commit_sealed(&self, state: &StreamState, from: u64, to: u64) -> Result<bool, Error> {
        let sid = state.sid.clone();
        self.submit(|reply| Job::CommitSealed { sid, from, to, reply }).await
    }

    async fn release_hot(&self, state: &StreamState, through: u64) -> Result<(), Error> {
        let sid = state.sid.clone();
        self.submit(|reply| Job::ReleaseHot { sid, through, reply }).await
    }
}
