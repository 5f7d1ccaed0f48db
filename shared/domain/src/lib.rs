//! # Spool's domain
//!
//! Everything in Spool stands on one primitive: an append-only stream of messages with one
//! gapless order, durable once acknowledged and readable from any offset. This crate holds that
//! primitive's vocabulary and rules, free of any storage, HTTP or AWS dependency:
//!
//! - [`stream`]: paths, content types, offsets, expiry and the request/response types;
//! - [`state`]: a stream's persisted head and the one function that validates and applies an
//!   append ([`state::apply_append`]), shared by every adapter so both backends agree;
//! - [`page`]: the byte format of sealed pages and of message frames;
//! - [`seal`]: the deterministic rule that cuts runs of messages into pages;
//! - [`port`]: the traits the storage adapters implement;
//! - [`group_commit`]: merges concurrent appends to one stream into one durable write;
//! - [`directory`]: organizations and their API keys, and the port that stores them;
//! - [`session`]: chat sessions, their event envelope and the port that stores their records;
//! - [`chat`]: a chat's typed event vocabulary ([`chat::event::ChatEvent`]) and feed events;
//! - [`claim`]: a chat's pending turn, and how a claim a crash left behind is reconciled;
//! - [`retry`]: the one backoff of every retry loop;
//! - [`revocation`]: revoked API keys, whose tokens stop working within a bound;
//! - [`turns`]: the queue of agent turns between a submission and the worker;
//! - [`workspace`]: workspaces and their agents, and the port that stores them;
//! - [`confine`]: where agents may run (working directories under configured roots);
//! - [`manage`]: what people and agents share in managing a workspace (agents, feeds);
//! - [`clock`] and [`failpoint`]: injected time and crash points, so tests can be exact.

pub mod chat;
pub mod claim;
pub mod clock;
pub mod confine;
pub mod directory;
pub mod error;
pub mod failpoint;
pub mod group_commit;
pub mod jobs;
pub mod limits;
pub mod manage;
pub mod notify;
pub mod page;
pub mod port;
pub mod retry;
pub mod revocation;
pub mod seal;
pub mod session;
pub mod state;
pub mod stream;
pub mod turns;
pub mod workspace;

pub use chat::event::{ChatEvent, FeedEvent};
pub use clock::{Clock, ManualClock, SystemClock};
pub use confine::WorkspaceRoots;
pub use directory::{ApiKeyRecord, Directory, Org};
pub use error::Error;
pub use failpoint::FailPoints;
pub use limits::{LiveSettings, LogLimits};
pub use port::{SealScheduler, StreamLog, StreamReader, StreamSealer, StreamWriter};
pub use session::{
    Event, EventDraft, EventKind, OpenRequest, PendingTurn, RequestKind, Session, Sessions, TurnRecord, TurnStatus,
};
pub use stream::{
    Append, AppendAck, Chunk, ContentType, CreateStream, Created, Expiry, ForkRequest, Offset, Position, ProducerAck,
    ProducerClaim, SealMode, SealReport, SeqRange, StreamMeta, StreamPath, WaitOutcome,
};
pub use turns::{Delivery, Lease, Receive, TurnJob, TurnQueue};
pub use workspace::{Agent, CliType, Metadata, Runtime, Task, Workspace, Workspaces};
