//! # The worker function
//!
//! Builds the [`Worker`] from the function's configuration (the AWS stores, the engine and its
//! runtimes, the queues, push delivery) and serves the invocations of its SQS triggers.

use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use spool_worker::Worker;

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
    let aws = spool_aws::Stores::with_metrics(config, None, metrics.clone()).await?;
    let log = aws.log();
    let metadata = aws.metadata()?;
    let sweep = Arc::new(spool_worker::folder_sweep(config, metadata.clone()));
    let engine = spool_agents::Engine::new(
        log.clone(),
        metadata.clone(),
        Arc::new(spool_worker::runtimes(config, metadata.clone())),
        Arc::new(spool_log::clock::SystemClock),
        // On Lambda the worker has no CLIs: they run on runners unless SPOOL_CLI_HOST says.
        spool_worker::engine_settings(config, metadata.clone(), spool_chat::settings::CliHost::Runners),
    )
    .with_files(aws.files()?)
    .with_notifier(aws.notifier().await)
    .with_feeds(aws.aggregates())
    .with_metrics(metrics.clone())
    // Model agents call the workspaces' MCP servers (`http` ones: a Lambda starts no program).
    .with_mcp(Arc::new(spool_chat::service::McpServerService::new(
        metadata.clone(),
        Arc::new(spool_log::clock::SystemClock),
        config.data_box()?.map(Arc::new),
        false,
    )));
    let engine = match aws.maintenance_jobs() {
        Some(jobs) => engine.with_jobs(jobs),
        None => engine,
    };
    let mut worker = Worker::new(log.clone())
        .with_aggregates(log)
        .with_metrics(metrics)
        .with_turns(Arc::new(engine), config.agents.turn_max_attempts)
        .with_max_deliveries(config.agents.turn_max_deliveries)
        .with_sweep(sweep);
    // The turns a batch holds stay leased while their steps run (the queue's visibility
    // timeout is the short lease).
    if aws.has_turns() {
        worker = worker
            .with_heartbeats(aws.turns()?, config.agents.turn_lease)
            .with_runner_checks(metadata, aws.log(), aws.turns()?);
    }
    // Push delivery, only to the public internet: subscriptions' wakes where the webhook
    // secret is given (the worker function, not the turns function), chat webhooks.
    let webhooks = Arc::new(spool_worker::Webhooks::new(spool_log::subscription::spec::UrlPolicy {
        loopback_http: false,
    })?);
    if let Some(subscriptions) = aws.subscriptions(Some(webhooks.clone()))? {
        worker = worker.with_subscriptions(Arc::new(subscriptions));
    }
    // Chat webhooks (each endpoint has its own secret): the feed events this worker appends,
    // and their deliveries' attempts (with a maintenance queue).
    if let Some(hooks) = aws.hooks(webhooks)? {
        worker = worker.with_hooks(Arc::new(hooks));
    }
    Ok(worker)
}
