//! # The worker function
//!
//! Runs Spool's background work from SQS: agent turns from the turns queue (FIFO, one group
//! per chat), maintenance jobs (page sealing, subscriptions' wakes) from the maintenance queue, and aggregate
//! streams' events (workspaces' feeds, audit records) from the aggregates queue (FIFO, one
//! group per stream, a group's batch appended at once). On AWS it is a Lambda function
//! triggered by the queues, reporting partial batch failures so one bad message never fails its
//! batch; under `spool serve` the same [`Worker`] drains the embedded turn queue
//! ([`poll_turns`]) and, with `--backend aws`, long-polls the other two ([`poll_queue`]).
//!
//! One module per concern, each adding its part of [`Worker`]'s methods:
//! - `worker`: the worker and what it is built with;
//! - `dispatch`: from a message to its job, FIFO groups and how a group runs, the rules
//!   Lambda's batches and polling share;
//! - `batch`: Lambda's SQS batches (partial batch failures, the invocation's deadline);
//! - `poll`: polling the turn queue and the job queues, under `spool serve`;
//! - `turns`: running a turn's step through the [`spool_agents::Engine`], its attempts;
//! - `runtimes`: the runtimes and engine settings configuration chooses;
//! - `maintenance`: sealing, subscriptions' and webhooks' jobs, the folders' sweep;
//! - `aggregates`: aggregate streams' events, a group appended at once;
//! - `heartbeat`: running steps keep their turns' leases;
//! - `outbound`: webhook requests, kept off the deployment's own network.
//!
//! The worker function's wiring and entry point on Lambda are `spool-lambda`'s.

mod aggregates;
mod batch;
mod dispatch;
mod error;
mod heartbeat;
mod maintenance;
mod outbound;
mod poll;
mod runtimes;
mod turns;
mod worker;

pub use batch::DEADLINE_MARGIN;
pub use error::Error;
pub use maintenance::folder_sweep;
pub use outbound::Webhooks;
pub use poll::{PollSettings, poll_queue, poll_turns};
pub use runtimes::{cli_agents, engine_settings, mcp_settings, runtimes};
pub use worker::{DEFAULT_MAX_ATTEMPTS, Worker};
