//! # The Lambda functions
//!
//! Each deployed function's wiring and entry point: it reads the function's configuration (the
//! environment, with the secrets `SPOOL_SECRET_ARNS` names over it), takes its ports from
//! [`spool_aws::Stores`] and serves one function's Router or handler until the runtime stops
//! it. The binaries (`spool-api`, `spool-stream`, `spool-worker`, the ones `cargo lambda build`
//! packages) each call one of them.
//!
//! - [`api`]: the chat API's Router, with the stream protocol's writes composed in here (so
//!   the `spool-api` and `spool-stream` crates stay apart);
//! - [`stream`]: the stream protocol's reads, with response streaming;
//! - [`worker`]: SQS batches of agent turns, maintenance jobs and aggregates' events.

pub mod api;
pub mod stream;
pub mod worker;
