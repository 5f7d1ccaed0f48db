//! # The AWS stream log
//!
//! The stream log on DynamoDB (order, the hot tail, producer state) and S3 (sealed pages and
//! large appends), with seal requests on SQS. The same code reaches AWS, LocalStack or moto:
//! endpoints come from the standard variables (`AWS_ENDPOINT_URL`, …) through
//! [`spool_platform::AwsSettings`]. See [`log`] for how order and sealing work, and
//! [`metadata`] for organizations, keys, workspaces and agents in the metadata table.
//! [`Stores`] builds every port a process runs on from its configuration, in one place.

pub mod aggregate_queue;
pub mod attachments;
mod caps;
pub mod commands;
pub mod directory;
pub mod emf;
mod errors;
pub mod faults;
pub mod files;
pub mod items;
pub mod job_inbox;
mod keys;
pub mod log;
mod mcp;
pub mod metadata;
pub mod metrics;
pub mod notifier;
pub mod runners;
pub mod sdk;
pub mod seal_queue;
pub mod secrets;
pub mod sessions;
pub mod stores;
pub mod subscriptions;
pub mod turn_queue;
pub mod usage;
pub mod webhooks;
pub mod workspaces;

pub use aggregate_queue::SqsAggregates;
pub use emf::EmfMetrics;
pub use faults::{FaultCounts, FaultInjector, FaultPlan};
pub use files::{PENDING_TAG, S3Files};
pub use job_inbox::SqsJobInbox;
pub use log::{AwsLog, AwsLogOptions};
pub use metadata::AwsMetadata;
pub use metrics::RequestCounter;
pub use notifier::{SesNotifier, notifier_from_config};
pub use sdk::{AwsClients, behavior_version, load_sdk_config};
pub use seal_queue::SqsSealScheduler;
pub use secrets::{Configured, SecretSource, configure};
pub use stores::Stores;
pub use turn_queue::SqsTurnQueue;
