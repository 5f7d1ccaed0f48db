//! # Spool's stream log
//!
//! Everything in Spool stands on one primitive: an append-only stream of messages with one
//! gapless order, durable once acknowledged and readable from any offset. This crate holds that
//! primitive's vocabulary and rules, free of any storage, HTTP or AWS dependency, and knows
//! nothing of what is written in the streams (the chat, `spool_chat`, builds on it):
//!
//! - [`stream`]: paths, content types, offsets, expiry and the request/response types;
//! - [`state`]: a stream's persisted head and the one function that validates and applies an
//!   append ([`state::apply_append`]), shared by every adapter so both backends agree;
//! - [`page`]: the byte format of sealed pages and of message frames;
//! - [`seal`]: the deterministic rule that cuts runs of messages into pages;
//! - [`port`]: the traits the storage adapters implement;
//! - [`read`]: the one read path: which run (inherited, sealed, hot) holds a message, and how
//!   far a read goes, without I/O, for every adapter to drive;
//! - [`limits`]: the log's configured bounds (append size, live-read settings);
//! - [`notify`]: wakes live readers when a stream moves;
//! - [`follow`]: the one loop under every live reader (read, wait at the tail, keep-alive,
//!   deadline), handing over in-memory what a wait brings;
//! - [`group_commit`]: merges concurrent appends to one stream into one durable write;
//! - [`jobs`]: maintenance work (sealing) carried off the request path;
//! - [`aggregate`]: streams many requests add to (feeds, audit), appended off their path;
//! - [`subscription`]: the protocol's subscriptions, durable cursors that wake workers;
//! - [`error`], [`retry`], [`clock`] and [`failpoint`]: the one error type, the one backoff,
//!   injected time and crash points, so tests can be exact; [`metrics`]: what Spool measures
//!   about itself.
//!
//! Invariants: a stream's offsets only grow and are never reused; an acknowledged append is in
//! the head (and later in exactly one sealed page) before it is acknowledged; every adapter
//! validates an append with [`state::apply_append`], so both backends refuse the same things
//! the same way.

pub mod aggregate;
pub mod clock;
pub mod error;
pub mod failpoint;
pub mod follow;
pub mod group_commit;
pub mod jobs;
pub mod limits;
pub mod metrics;
pub mod notify;
pub mod page;
pub mod port;
pub mod read;
pub mod retry;
pub mod seal;
pub mod state;
pub mod stream;
pub mod subscription;
