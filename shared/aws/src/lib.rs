//! # The AWS stream log
//!
//! The stream log on DynamoDB (order, the hot tail, producer state) and S3 (sealed pages and
//! large appends), with seal requests on SQS. The same code reaches AWS, LocalStack or moto:
//! endpoints come from the standard variables (`AWS_ENDPOINT_URL`, …) through
//! [`spool_platform::AwsSettings`]. See [`log`] for how order and sealing work, and
//! [`metadata`] for organizations, keys, workspaces and agents in the metadata table.

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
pub mod metadata;
pub mod metrics;
pub mod notifier;
pub mod sdk;
pub mod seal_queue;
pub mod secrets;
pub mod sessions;
pub mod subscriptions;
pub mod turn_queue;
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
pub use turn_queue::SqsTurnQueue;

use std::sync::Arc;

use spool_platform::{AwsSettings, Config};

/// Builds the AWS stream log a process uses from its configuration: the SDK clients, the
/// streams table and pages bucket, and seal requests to the maintenance queue when one is
/// configured.
pub async fn log_from_config(
    config: &Config,
    counter: Option<RequestCounter>,
) -> Result<AwsLog, spool_platform::Error> {
    log_with_metrics(config, counter, Arc::new(spool_log::metrics::LogMetrics)).await
}

/// [`log_from_config`], counting append conflicts in `metrics` (a Lambda function's
/// [`EmfMetrics`]).
pub async fn log_with_metrics(
    config: &Config,
    counter: Option<RequestCounter>,
    metrics: Arc<dyn spool_log::metrics::Metrics>,
) -> Result<AwsLog, spool_platform::Error> {
    let table = AwsSettings::require(&config.aws.streams_table, "SPOOL_STREAMS_TABLE")?.to_owned();
    let bucket = AwsSettings::require(&config.aws.pages_bucket, "SPOOL_PAGES_BUCKET")?.to_owned();
    let clients = AwsClients::new(&config.aws, counter).await;
    let mut options = AwsLogOptions::new(table, bucket);
    options.limits = config.limits;
    options.poll_interval = config.live_poll;
    options.metrics = metrics;
    options.scheduler = config.aws.maintenance_queue_url.as_ref().map(|url| {
        Arc::new(SqsSealScheduler::new(clients.sqs.clone(), url.clone())) as Arc<dyn spool_log::port::SealScheduler>
    });
    Ok(AwsLog::new(clients, options))
}

/// The metadata store (organizations, keys, workspaces, agents) in the configured metadata table, over
/// `clients` (those of the process's log).
pub fn metadata_from_config(config: &Config, clients: &AwsClients) -> Result<AwsMetadata, spool_platform::Error> {
    let table = AwsSettings::require(&config.aws.metadata_table, "SPOOL_METADATA_TABLE")?;
    Ok(AwsMetadata::new(clients.dynamodb.clone(), table))
}

/// Chats' files (`SPOOL_ATTACHMENTS_BUCKET`, else the pages bucket), over `clients`.
pub fn files_from_config(config: &Config, clients: &AwsClients) -> Result<S3Files, spool_platform::Error> {
    let bucket = AwsSettings::require(&config.aws.attachments_bucket, "SPOOL_ATTACHMENTS_BUCKET")?;
    Ok(S3Files::new(clients.s3.clone(), bucket))
}

/// Where a process hands over workspaces' feed events and audit records: the aggregates queue
/// (`SPOOL_AGGREGATES_QUEUE_URL`) when one is configured, else `log` itself, at once.
pub fn aggregates_from_config(
    config: &Config,
    clients: &AwsClients,
    log: Arc<dyn spool_log::port::StreamLog>,
) -> Arc<dyn spool_log::aggregate::Aggregates> {
    match &config.aws.aggregates_queue_url {
        Some(url) => Arc::new(SqsAggregates::new(clients.sqs.clone(), url.clone())),
        None => Arc::new(spool_log::aggregate::Direct(log)),
    }
}

/// The protocol's subscriptions on AWS: records in the metadata table, jobs on the maintenance
/// queue, keys from `SPOOL_WEBHOOK_SECRET`, webhooks only to the public internet. `None` when
/// the process has no webhook secret (subscriptions are then not served). `outbound` makes the
/// webhook requests where jobs run (the worker).
pub fn subscriptions_from_config(
    config: &Config,
    clients: &AwsClients,
    log: Arc<dyn spool_log::port::StreamLog>,
    outbound: Option<Arc<dyn spool_log::subscription::Outbound>>,
) -> Result<Option<spool_log::subscription::service::Subscriptions>, spool_platform::Error> {
    let Some(keys) = config.webhook_keys()? else {
        return Ok(None);
    };
    let queue = AwsSettings::require(&config.aws.maintenance_queue_url, "SPOOL_MAINTENANCE_QUEUE_URL")?;
    let service = spool_log::subscription::service::Subscriptions::new(
        Arc::new(metadata_from_config(config, clients)?),
        log,
        Arc::new(SqsSealScheduler::new(clients.sqs.clone(), queue)),
        Arc::new(keys),
        Arc::new(spool_log::clock::SystemClock),
        spool_log::subscription::spec::UrlPolicy { loopback_http: false },
    );
    Ok(Some(match outbound {
        Some(outbound) => service.with_outbound(outbound),
        None => service,
    }))
}

/// Chat webhooks on AWS: endpoints and deliveries in the metadata table, attempts as jobs on
/// the maintenance queue, made by `outbound` (the worker's, to public addresses only).
pub fn hooks_from_config(
    config: &Config,
    clients: &AwsClients,
    outbound: Arc<dyn spool_log::subscription::Outbound>,
) -> Result<spool_chat::webhook::service::ChatHooks, spool_platform::Error> {
    let queue = AwsSettings::require(&config.aws.maintenance_queue_url, "SPOOL_MAINTENANCE_QUEUE_URL")?;
    let hooks = spool_chat::webhook::service::ChatHooks::new(
        Arc::new(metadata_from_config(config, clients)?),
        Arc::new(SqsSealScheduler::new(clients.sqs.clone(), queue)),
        Arc::new(spool_log::clock::SystemClock),
        spool_log::subscription::spec::UrlPolicy { loopback_http: false },
    );
    Ok(hooks.with_outbound(outbound))
}

/// The turns queue (`SPOOL_TURNS_QUEUE_URL`), over `clients` (those of the process's log).
pub fn turn_queue_from_config(config: &Config, clients: &AwsClients) -> Result<SqsTurnQueue, spool_platform::Error> {
    let url = AwsSettings::require(&config.aws.turns_queue_url, "SPOOL_TURNS_QUEUE_URL")?;
    Ok(SqsTurnQueue::new(clients.sqs.clone(), url))
}
