//! A stream log that counts what is read through it: a step's reads measured by count and
//! bytes, never by time, so a test can say a long chat costs a step what a short one does.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use spool_log::{
    error::Error,
    notify::WaitOutcome,
    port::{StreamLog, StreamReader, StreamSealer, StreamWriter},
    stream::{
        Append, AppendAck, Chunk, CreateStream, Created, Offset, Position, SealMode, SealReport, StreamMeta, StreamPath,
    },
};

/// Reads and bytes read, so far.
#[derive(Debug, Default)]
pub struct Counts {
    reads: AtomicU64,
    bytes: AtomicU64,
}

impl Counts {
    /// (reads, bytes) since the last call, and starts counting afresh.
    pub fn take(&self) -> (u64, u64) {
        (
            self.reads.swap(0, Ordering::SeqCst),
            self.bytes.swap(0, Ordering::SeqCst),
        )
    }
}

/// `inner`, counting its reads in `counts`.
pub struct CountingLog {
    /// The log read through.
    pub inner: Arc<dyn StreamLog>,
    /// What was read.
    pub counts: Arc<Counts>,
}

#[async_trait]
impl StreamWriter for CountingLog {
    async fn create(&self, path: &StreamPath, req: CreateStream) -> Result<Created, Error> {
        self.inner.create(path, req).await
    }
    async fn append(&self, path: &StreamPath, req: Append) -> Result<AppendAck, Error> {
        self.inner.append(path, req).await
    }
    async fn delete(&self, path: &StreamPath) -> Result<(), Error> {
        self.inner.delete(path).await
    }
}

#[async_trait]
impl StreamReader for CountingLog {
    async fn metadata(&self, path: &StreamPath) -> Result<StreamMeta, Error> {
        self.inner.metadata(path).await
    }
    async fn read(&self, path: &StreamPath, from: Position, max_bytes: Option<usize>) -> Result<Chunk, Error> {
        let chunk = self.inner.read(path, from, max_bytes).await?;
        self.counts.reads.fetch_add(1, Ordering::SeqCst);
        let bytes: usize = chunk.messages.iter().map(|m| m.len()).sum();
        self.counts.bytes.fetch_add(bytes as u64, Ordering::SeqCst);
        Ok(chunk)
    }
    async fn wait(&self, path: &StreamPath, after: Offset, timeout: Duration) -> Result<WaitOutcome, Error> {
        self.inner.wait(path, after, timeout).await
    }
}

#[async_trait]
impl StreamSealer for CountingLog {
    async fn seal(&self, path: &StreamPath, mode: SealMode) -> Result<SealReport, Error> {
        self.inner.seal(path, mode).await
    }
    async fn seal_when_idle(&self, path: &StreamPath, tail: Offset) -> Result<(), Error> {
        self.inner.seal_when_idle(path, tail).await
    }
}
