//! The chat API Lambda: the API's Router behind API Gateway or a function URL.

use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    // The environment, with the secrets SPOOL_SECRET_ARNS names over it (nothing secret is in
    // the environment); the signing keys follow the secret's rotation.
    let configured = spool_aws::configure().await?;
    let config = &configured.config;
    let keys = configured.token_keys()?;
    let origin = configured.origin_check();
    configured.keep_fresh(&keys, origin.as_ref());
    // Append conflicts, as CloudWatch metrics (EMF).
    let metrics = Arc::new(spool_aws::EmfMetrics::for_this_function());
    let log = spool_aws::log_with_metrics(config, None, metrics).await?;
    let clients = log.clients().clone();
    let stores = spool_api::Stores {
        metadata: Arc::new(spool_aws::metadata_from_config(config, &clients)?),
        turns: Arc::new(spool_aws::turn_queue_from_config(config, &clients)?),
        files: Arc::new(spool_aws::files_from_config(config, &clients)?),
        log: Arc::new(log),
    };
    // Feed events and audit records go to the aggregates queue: no request contends at a
    // workspace's feed or an organization's audit stream.
    let aggregates = spool_aws::aggregates_from_config(config, &clients, stores.log.clone());
    let revocations = Arc::new(spool_chat::revocation::Revocations::new(
        stores.log.clone(),
        config.revocation_check,
    ));
    let access = spool_auth::Access::Tokens(Box::new(keys.clone()));
    let limiter = Arc::new(spool_auth::RateLimiter::new(config.rate_limits));
    // The stream protocol's writes (and reads, buffered) are served here too: the stream
    // function, which faces the internet, only reads.
    let mut streams = spool_stream::StreamApi::new(stores.log.clone(), access.clone(), config.live)
        .with_rate_limiter(limiter.clone())
        .with_revocations(revocations.clone());
    // The protocol's subscriptions (CloudFront sends `/v1/stream/__ds/*` here); the worker
    // delivers their wakes.
    if let Some(subscriptions) = spool_aws::subscriptions_from_config(config, &clients, stores.log.clone(), None)? {
        streams = streams.with_subscriptions(Arc::new(subscriptions));
    }
    let roots = config.workspace_roots(stores.metadata.clone());
    let api = spool_api::ChatApi::new(stores, keys, access, Arc::new(spool_log::clock::SystemClock))
        .with_aggregates(aggregates)
        .with_workspace_roots(roots)
        .with_rate_limiter(limiter)
        .with_revocations(revocations)
        .with_attachment_limits(config.attachments.limits())
        .with_notifier(spool_aws::notifier_from_config(config).await);
    let max_body = config.limits.max_append_bytes + spool_stream::BODY_SLACK_BYTES;
    let app = spool_api::router(api).merge(spool_stream::router(streams, max_body));
    // Only through the deployment's CloudFront distribution (it adds the origin secret).
    lambda_http::run(spool_edge::only_through_cdn(app, origin)).await
}
