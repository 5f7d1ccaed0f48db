//! # The AWS stream log
//!
//! The stream log on DynamoDB (order, the hot tail, producer state) and S3 (sealed pages and
//! large appends), with seal requests on SQS. The same code reaches AWS, LocalStack or moto:
//! endpoints come from the standard variables (`AWS_ENDPOINT_URL`, …) through
//! [`spool_platform::AwsSettings`]. See [`log`] for how order and sealing work.

pub mod items;
pub mod log;
pub mod metrics;
pub mod sdk;
pub mod seal_queue;

pub use log::{AwsLog, AwsLogOptions};
pub use metrics::RequestCounter;
pub use sdk::{AwsClients, behavior_version, load_sdk_config};
pub use seal_queue::SqsSealScheduler;
