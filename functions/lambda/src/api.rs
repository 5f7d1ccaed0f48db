//! # The chat API function
//!
//! The API's Router behind API Gateway or a function URL. The stream protocol's writes (and
//! reads, buffered) are served here too: the stream function, which faces the internet, only
//! reads.

use std::sync::Arc;

use spool_chat::{revocation::Revocations, settings::CliHost};
use spool_log::port::StreamLog;

/// Serves the API function's requests until the runtime stops it.
pub async fn serve() -> Result<(), lambda_http::Error> {
    // The environment, with the secrets SPOOL_SECRET_ARNS names over it (nothing secret is in
    // the environment); the signing keys follow the secret's rotation.
    let configured = spool_aws::configure().await?;
    let config = &configured.config;
    let (keys, origin) = configured.edge_keys()?;
    // Append conflicts, as CloudWatch metrics (EMF).
    let metrics = Arc::new(spool_aws::EmfMetrics::for_this_function());
    let aws = spool_aws::Stores::with_metrics(config, None, metrics).await?;
    let log: Arc<dyn StreamLog> = aws.log();
    let stores = spool_api::Stores {
        metadata: aws.metadata()?,
        turns: aws.turns()?,
        files: aws.files()?,
        log: log.clone(),
    };
    // Feed events and audit records go to the aggregates queue: no request contends at a
    // workspace's feed or an organization's audit stream.
    let aggregates = aws.aggregates();
    let revocations = Arc::new(Revocations::new(log.clone(), config.revocation_check));
    let access = spool_auth::Access::Tokens(Box::new(keys.clone()));
    let limiter = Arc::new(spool_auth::RateLimiter::new(config.rate_limits));
    let mut streams = spool_stream::StreamApi::new(log, access.clone(), config.live)
        .with_rate_limiter(limiter.clone())
        .with_revocations(revocations.clone());
    // The protocol's subscriptions (CloudFront sends `/v1/stream/__ds/*` here); the worker
    // delivers their wakes.
    if let Some(subscriptions) = aws.subscriptions(None)? {
        streams = streams.with_subscriptions(Arc::new(subscriptions));
    }
    let roots = config.workspace_roots(stores.metadata.clone());
    let api = spool_api::ChatApi::new(stores, keys, access, Arc::new(spool_log::clock::SystemClock))
        .with_aggregates(aggregates)
        .with_workspace_roots(roots)
        .with_rate_limiter(limiter)
        .with_revocations(revocations)
        .with_attachment_limits(config.attachments.limits())
        .with_notifier(aws.notifier().await)
        // The worker function has no CLIs: workspaces' CLI agents run on runners by default.
        .with_default_cli_host(config.agents.cli_host.unwrap_or(CliHost::Runners))
        // MCP servers' secrets are sealed with the data key's secret; a Lambda never starts a
        // stdio server's program.
        .with_mcp_servers(config.data_box()?.map(Arc::new), false)
        // "Test connection" reaches `http` servers from here; never a stdio one.
        .with_mcp_probe(Arc::new(spool_agents::mcp::Probe::new(spool_worker::mcp_settings(
            config,
            false,
            spool_log::subscription::spec::UrlPolicy { loopback_http: false },
        ))));
    let max_body = config.limits.max_append_bytes + spool_stream::BODY_SLACK_BYTES;
    let app = spool_api::router(api).merge(spool_stream::router(streams, max_body));
    // Only through the deployment's CloudFront distribution (it adds the origin secret).
    lambda_http::run(spool_edge::only_through_cdn(app, origin)).await
}
