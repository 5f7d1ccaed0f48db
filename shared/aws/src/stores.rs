//! # The AWS backend's ports, built in one place
//!
//! [`Stores`] is what a process runs on with the AWS backend: the SDK clients and the stream
//! log it connects once from its configuration, and each other port (metadata, the turns queue,
//! chats' files, aggregates, push delivery, the job queues, the notifier) built from them when
//! the process asks for it. A function asks only for what it uses, so it needs only the
//! settings of those ports: a port whose setting is missing is an error when asked for.

use std::sync::Arc;

use spool_chat::{notifier::Notifier, webhook::service::ChatHooks};
use spool_log::{
    aggregate::Aggregates,
    metrics::Metrics,
    port::SealScheduler,
    subscription::{Outbound, service::Subscriptions, spec::UrlPolicy},
};
use spool_platform::{AwsSettings, Config, Error};

use crate::{
    AwsClients, AwsLog, AwsLogOptions, AwsMetadata, RequestCounter, S3Files, SqsAggregates, SqsJobInbox,
    SqsSealScheduler, SqsTurnQueue, notifier_from_config,
};

/// The AWS backend's ports for one process, over one set of SDK clients.
pub struct Stores {
    config: Config,
    log: Arc<AwsLog>,
}

impl Stores {
    /// Connects to the configured streams table and pages bucket (the SDK clients, the stream
    /// log with seal requests to the maintenance queue when one is configured); `counter`
    /// counts the requests (`spool-bench`).
    pub async fn connect(config: &Config, counter: Option<RequestCounter>) -> Result<Self, Error> {
        Self::with_metrics(config, counter, Arc::new(spool_log::metrics::LogMetrics)).await
    }

    /// [`Stores::connect`], counting append conflicts in `metrics` (a Lambda function's
    /// [`EmfMetrics`](crate::EmfMetrics)).
    pub async fn with_metrics(
        config: &Config,
        counter: Option<RequestCounter>,
        metrics: Arc<dyn Metrics>,
    ) -> Result<Self, Error> {
        let table = AwsSettings::require(&config.aws.streams_table, "SPOOL_STREAMS_TABLE")?.to_owned();
        let bucket = AwsSettings::require(&config.aws.pages_bucket, "SPOOL_PAGES_BUCKET")?.to_owned();
        let clients = AwsClients::new(&config.aws, counter).await;
        let mut options = AwsLogOptions::new(table, bucket);
        options.limits = config.limits;
        options.poll_interval = config.live_poll;
        options.metrics = metrics;
        options.scheduler = config
            .aws
            .maintenance_queue_url
            .as_ref()
            .map(|url| Arc::new(SqsSealScheduler::new(clients.sqs.clone(), url.clone())) as Arc<dyn SealScheduler>);
        Ok(Self {
            config: config.clone(),
            log: Arc::new(AwsLog::new(clients, options)),
        })
    }

    /// The stream log.
    pub fn log(&self) -> Arc<AwsLog> {
        self.log.clone()
    }

    /// The SDK clients every port here shares.
    pub fn clients(&self) -> &AwsClients {
        self.log.clients()
    }

    /// The metadata store (organizations, keys, workspaces, agents) in the configured metadata
    /// table.
    pub fn metadata(&self) -> Result<Arc<AwsMetadata>, Error> {
        let table = AwsSettings::require(&self.config.aws.metadata_table, "SPOOL_METADATA_TABLE")?;
        Ok(Arc::new(AwsMetadata::new(self.clients().dynamodb.clone(), table)))
    }

    /// The turns queue (`SPOOL_TURNS_QUEUE_URL`).
    pub fn turns(&self) -> Result<Arc<SqsTurnQueue>, Error> {
        let url = AwsSettings::require(&self.config.aws.turns_queue_url, "SPOOL_TURNS_QUEUE_URL")?;
        Ok(Arc::new(SqsTurnQueue::new(self.clients().sqs.clone(), url)))
    }

    /// Whether a turns queue is configured.
    pub fn has_turns(&self) -> bool {
        self.config.aws.turns_queue_url.is_some()
    }

    /// Chats' files (`SPOOL_ATTACHMENTS_BUCKET`, else the pages bucket).
    pub fn files(&self) -> Result<Arc<S3Files>, Error> {
        let bucket = AwsSettings::require(&self.config.aws.attachments_bucket, "SPOOL_ATTACHMENTS_BUCKET")?;
        Ok(Arc::new(S3Files::new(self.clients().s3.clone(), bucket)))
    }

    /// Where the process hands over workspaces' feed events and audit records: the aggregates
    /// queue (`SPOOL_AGGREGATES_QUEUE_URL`) when one is configured, else the log itself, at once.
    pub fn aggregates(&self) -> Arc<dyn Aggregates> {
        match &self.config.aws.aggregates_queue_url {
            Some(url) => Arc::new(SqsAggregates::new(self.clients().sqs.clone(), url.clone())),
            None => Arc::new(spool_log::aggregate::Direct(self.log.clone())),
        }
    }

    /// Whether an aggregates queue is configured (else [`Stores::aggregates`] appends at once).
    pub fn has_aggregates_queue(&self) -> bool {
        self.config.aws.aggregates_queue_url.is_some()
    }

    /// Jobs (seal requests, subscriptions' wakes, webhook attempts) on the maintenance queue,
    /// when one is configured.
    pub fn maintenance_jobs(&self) -> Option<Arc<SqsSealScheduler>> {
        let url = self.config.aws.maintenance_queue_url.as_ref()?;
        Some(Arc::new(SqsSealScheduler::new(self.clients().sqs.clone(), url.clone())))
    }

    /// The queues a worker outside Lambda polls for jobs: the maintenance queue and the
    /// aggregates queue, those configured.
    pub fn job_inboxes(&self) -> Vec<Arc<SqsJobInbox>> {
        let aws = &self.config.aws;
        [&aws.maintenance_queue_url, &aws.aggregates_queue_url]
            .into_iter()
            .flatten()
            .map(|url| Arc::new(SqsJobInbox::new(self.clients().sqs.clone(), url.clone())))
            .collect()
    }

    /// The protocol's subscriptions: records in the metadata table, jobs on the maintenance
    /// queue, keys from `SPOOL_WEBHOOK_SECRET`, webhooks only to the public internet. `None` when
    /// the process has no webhook secret (subscriptions are then not served). `outbound` makes
    /// the webhook requests where jobs run (the worker).
    pub fn subscriptions(&self, outbound: Option<Arc<dyn Outbound>>) -> Result<Option<Subscriptions>, Error> {
        let Some(keys) = self.config.webhook_keys()? else {
            return Ok(None);
        };
        let queue = AwsSettings::require(&self.config.aws.maintenance_queue_url, "SPOOL_MAINTENANCE_QUEUE_URL")?;
        let service = Subscriptions::new(
            self.metadata()?,
            self.log.clone(),
            Arc::new(SqsSealScheduler::new(self.clients().sqs.clone(), queue)),
            Arc::new(keys),
            Arc::new(spool_log::clock::SystemClock),
            UrlPolicy { loopback_http: false },
        );
        Ok(Some(match outbound {
            Some(outbound) => service.with_outbound(outbound),
            None => service,
        }))
    }

    /// Chat webhooks: endpoints and deliveries in the metadata table, attempts as jobs on the
    /// maintenance queue, made by `outbound` (the worker's, to public addresses only). `None`
    /// when no maintenance queue is configured.
    pub fn hooks(&self, outbound: Arc<dyn Outbound>) -> Result<Option<ChatHooks>, Error> {
        let Some(jobs) = self.maintenance_jobs() else {
            return Ok(None);
        };
        let hooks = ChatHooks::new(
            self.metadata()?,
            jobs,
            Arc::new(spool_log::clock::SystemClock),
            UrlPolicy { loopback_http: false },
        );
        Ok(Some(hooks.with_outbound(outbound)))
    }

    /// Notifications by email through SES when `SPOOL_NOTIFY_FROM` is set, else to the log.
    pub async fn notifier(&self) -> Arc<dyn Notifier> {
        notifier_from_config(&self.config).await
    }

    /// What this backend is, for people: the endpoint it reaches.
    pub fn description(&self) -> String {
        let endpoint = self.config.aws.endpoint_url.as_deref().unwrap_or("AWS");
        format!("AWS backend at {endpoint}")
    }
}
