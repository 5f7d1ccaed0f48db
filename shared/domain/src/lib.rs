//! # Spool's domain
//!
//! Everything in Spool stands on one primitive: an append-only stream of messages with one
//! gapless order, durable once acknowledged and readable from any offset. This crate holds that
//! primitive's vocabulary and rules, free of any storage, HTTP or AWS dependency:
//!
//! - [`log`]: the stream log (paths, offsets, the head and its append rule, pages and sealing,
//!   the storage ports, group commit, live-read notification);
//! - [`chat`]: chats above the log (the typed events, sessions, the chat service, turns and
//!   their claims, workspaces and agents, organizations and keys);
//! - [`error`], [`retry`], [`clock`] and [`failpoint`]: the one error type, the one backoff,
//!   injected time and crash points, so tests can be exact; [`metrics`]: what Spool measures
//!   about itself.
//!
//! Both halves' modules are re-exported here by name (`spool_domain::stream`,
//! `spool_domain::session`, …).

pub mod chat;
pub mod clock;
pub mod error;
pub mod failpoint;
pub mod log;
pub mod metrics;
pub mod retry;

pub use chat::{
    ag_ui, attachment, caps, claim, clis, commands, confine, directory, global, listing, manage, names, notifier,
    revocation, service, session, settings, turns, ui_message, webhook, workspace,
};
pub use log::{aggregate, group_commit, jobs, limits, notify, page, port, read, seal, state, stream, subscription};

pub use aggregate::{Aggregates, IfMissing};
pub use chat::event::{ChatEvent, FeedEvent};
pub use clock::{Clock, ManualClock, SystemClock};
pub use confine::WorkspaceRoots;
pub use directory::{ApiKeyRecord, Directory, Org};
pub use error::Error;
pub use failpoint::FailPoints;
pub use limits::{LiveSettings, LogLimits};
pub use metrics::{LogMetrics, Metric, Metrics};
pub use port::{SealScheduler, StreamLog, StreamReader, StreamSealer, StreamWriter};
pub use session::{
    Event, EventDraft, EventKind, OpenRequest, PendingTurn, RequestKind, Session, Sessions, TurnRecord, TurnStatus,
    UNTITLED_CHAT,
};
pub use stream::{
    Append, AppendAck, Chunk, ContentType, CreateStream, Created, Expiry, ForkRequest, Offset, Position, ProducerAck,
    ProducerClaim, SealMode, SealReport, SeqRange, StreamMeta, StreamPath, WaitOutcome,
};
pub use turns::{
    DEFAULT_ORG_TURN_CONCURRENCY, DEFAULT_WORKER_CONCURRENCY, Delivery, Lease, MAX_CONTINUATIONS, Receive, TurnJob,
    TurnQueue,
};
pub use workspace::{Agent, CliType, Metadata, Runtime, Task, Workspace, Workspaces};
