//! # Ports: what the stream log asks of a storage backend
//!
//! Small capability traits, each asked for only where it is used (a reader never gets to
//! write), and [`StreamLog`], which every adapter implements in full. The embedded adapter
//! (`spool-embedded`) and the AWS adapter (`spool-aws`) pass the same contract suite.

use std::time::Duration;

use async_trait::async_trait;

use crate::{
    error::Error,
    notify::WaitOutcome,
    stream::{
        Append, AppendAck, Chunk, CreateStream, Created, Offset, Position, SealMode, SealReport, StreamMeta, StreamPath,
    },
};

/// Creating, appending to, closing and deleting streams.
#[async_trait]
pub trait StreamWriter: Send + Sync {
    /// Creates a stream, or confirms that one with the same configuration exists
    /// ([`Created::Existing`]); a different configuration is [`Error::ConfigMismatch`].
    async fn create(&self, path: &StreamPath, req: CreateStream) -> Result<Created, Error>;

    /// Appends a batch (and/or closes the stream), atomically: every message or none, with
    /// consecutive sequence numbers no other append shares.
    async fn append(&self, path: &StreamPath, req: Append) -> Result<AppendAck, Error>;

    /// Closes the stream, with `last` as its final append (empty for a close-only).
    async fn close(&self, path: &StreamPath, mut last: Append) -> Result<AppendAck, Error> {
        last.close = true;
        self.append(path, last).await
    }

    /// Deletes the stream and its data.
    async fn delete(&self, path: &StreamPath) -> Result<(), Error>;
}

/// Reading streams, catching up and waiting for the live tail.
#[async_trait]
pub trait StreamReader: Send + Sync {
    /// The stream's metadata (does not count as a read for a sliding TTL).
    async fn metadata(&self, path: &StreamPath) -> Result<StreamMeta, Error>;

    /// Reads messages after `from`: at least one if any exists, about `max_bytes` in all
    /// (the configured maximum when `None`).
    async fn read(&self, path: &StreamPath, from: Position, max_bytes: Option<usize>) -> Result<Chunk, Error>;

    /// Waits until the stream has messages after `after` or is closed, or `timeout` passes.
    async fn wait(&self, path: &StreamPath, after: Offset, timeout: Duration) -> Result<WaitOutcome, Error>;
}

/// Sealing a stream's hot tail into immutable pages.
#[async_trait]
pub trait StreamSealer: Send + Sync {
    /// Seals what `mode` says; idempotent and safe to run concurrently.
    async fn seal(&self, path: &StreamPath, mode: SealMode) -> Result<SealReport, Error>;

    /// Sees that `path`'s full pages are sealed (now, or as a seal scheduler was asked when
    /// appends crossed them), and its short last page once the stream has been idle for
    /// [`crate::limits::LogLimits::idle_seal`]: if its tail is then still `tail` ([`SealMode::Idle`]).
    /// (If it moved, whatever moved it ends with a call of its own: a chat's turns end with
    /// one, and the chat service makes one after each event no turn follows.) A chat whose
    /// every turn sealed its few events into a page of their own would cost a page write per
    /// turn.
    async fn seal_when_idle(&self, path: &StreamPath, tail: Offset) -> Result<(), Error>;
}

/// The whole stream log.
pub trait StreamLog: StreamWriter + StreamReader + StreamSealer {}

impl<T: StreamWriter + StreamReader + StreamSealer> StreamLog for T {}

/// Asks for a stream to be sealed off the request path (an SQS message on AWS, a background
/// task in `spool serve`). Best effort: a lost request is made good by the next page boundary
/// or by the final seal at the end of a turn.
#[async_trait]
pub trait SealScheduler: Send + Sync {
    /// Requests that `path` be sealed.
    async fn schedule(&self, path: &StreamPath) -> Result<(), Error>;

    /// Requests that `path` be sealed to its end after `delay`, if its tail is then still `tail`;
    /// the request carries `chain`, the token of the chain of idle checks it belongs to
    /// ([`SealMode::Idle`]).
    async fn schedule_idle(&self, path: &StreamPath, tail: u64, delay: Duration, chain: u64) -> Result<(), Error>;
}
