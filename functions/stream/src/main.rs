//! The stream Lambda: the stream function's Router with response streaming, behind a function
//! URL in RESPONSE_STREAM mode (so SSE and long-polls stream instead of being buffered).

use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    // The environment, with the secrets SPOOL_SECRET_ARNS names over it (nothing secret is in
    // the environment); the signing keys follow the secret's rotation.
    let configured = spool_aws::configure().await?;
    let config = &configured.config;
    let keys = configured.token_keys()?;
    configured.keep_fresh(&keys);
    let log: Arc<dyn spool_domain::StreamLog> = Arc::new(spool_aws::log_from_config(config, None).await?);
    let revocations = Arc::new(spool_domain::revocation::Revocations::new(
        log.clone(),
        config.revocation_check,
    ));
    let api = spool_stream::StreamApi::new(log, spool_stream::Access::Tokens(Box::new(keys)), config.live)
        .with_rate_limiter(Arc::new(spool_auth::RateLimiter::new(config.rate_limits)))
        .with_revocations(revocations);
    let app = spool_stream::router(api, config.limits.max_append_bytes + spool_stream::BODY_SLACK_BYTES);
    lambda_http::run_with_streaming_response(app).await
}
