//! # The worker function on Lambda
//!
//! Builds the [`Worker`] from the function's configuration (the AWS stores, the engine and its
//! runtimes, the queues, push delivery) and serves the invocations of its SQS triggers.

use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{LambdaEvent, service_fn};

use crate::Worker;

/// Serves the worker function's invocations, each a batch from the queues, until the runtime
/// stops it.
pub async fn serve() -> Result<(), lambda_runtime::Error> {
    // The environment, with the secrets SPOOL_SECRET_ARNS names (provider keys) over it.
    let config = spool_aws::configure().await?.config;
    let worker = &Arc::new(from_config(&config).await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        // The invocation's deadline: steps stop cleanly before it and carry on in a new job.
        // (0 means the runtime API gave none, as emulators may.)
        let deadline = (event.context.deadline > 0)
            .then(|| std::time::UNIX_EPOCH + std::time::Duration::from_millis(event.context.deadline));
        if deadline.is_none() {
            tracing::warn!("the invocation has no deadline; steps end only by the turn's time limit");
        }
        Ok::<_, lambda_runtime::Error>(worker.handle_batch_until(event.payload, deadline).await)
    }))
    .await
}

/// The worker the function's configuration describes.
async fn from_config(config: &spool_platform::Config) -> Result<Worker, lambda_runtime::Error> {
    // Turn steps, tokens, append conflicts and seal lag, as CloudWatch metrics (EMF).
    let metrics: Arc<dyn spool_log::metrics::Metrics> = Arc::new(spool_aws::EmfMetrics::for_this_function());
    let log = Arc::new(spool_aws::log_with_metrics(config, None, metrics.clone()).await?);
    let metadata = Arc::new(spool_aws::metadata_from_config(config, log.clients())?);
    let sweep = Arc::new(crate::folder_sweep(config, metadata.clone()));
    let engine = spool_agents::Engine::new(
        log.clone(),
        metadata.clone(),
        Arc::new(crate::runtimes(config, metadata.clone())),
        Arc::new(spool_log::clock::SystemClock),
        crate::engine_settings(config, metadata),
    )
    .with_files(Arc::new(spool_aws::files_from_config(config, log.clients())?))
    .with_notifier(spool_aws::notifier_from_config(config).await)
    .with_feeds(spool_aws::aggregates_from_config(config, log.clients(), log.clone()))
    .with_metrics(metrics.clone());
    let mut worker = Worker::new(log.clone())
        .with_aggregates(log.clone())
        .with_metrics(metrics)
        .with_turns(Arc::new(engine), config.agents.turn_max_attempts)
        .with_max_deliveries(config.agents.turn_max_deliveries)
        .with_sweep(sweep);
    // The turns a batch holds stay leased while their steps run (the queue's visibility
    // timeout is the short lease).
    if config.aws.turns_queue_url.is_some() {
        let turns = spool_aws::turn_queue_from_config(config, log.clients())?;
        worker = worker.with_heartbeats(Arc::new(turns), config.agents.turn_lease);
    }
    // Push delivery, only to the public internet: subscriptions' wakes where the webhook
    // secret is given (the worker function, not the turns function), chat webhooks.
    let webhooks = Arc::new(crate::Webhooks::new(spool_log::subscription::spec::UrlPolicy {
        loopback_http: false,
    })?);
    if let Some(subscriptions) =
        spool_aws::subscriptions_from_config(config, log.clients(), log.clone(), Some(webhooks.clone()))?
    {
        worker = worker.with_subscriptions(Arc::new(subscriptions));
    }
    // Chat webhooks (each endpoint has its own secret): the feed events this worker appends,
    // and their deliveries' attempts.
    if config.aws.maintenance_queue_url.is_some() {
        worker = worker.with_hooks(Arc::new(spool_aws::hooks_from_config(config, log.clients(), webhooks)?));
    }
    Ok(worker)
}
