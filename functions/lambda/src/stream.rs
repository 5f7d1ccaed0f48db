//! # The stream function
//!
//! The stream function's read-only Router with response streaming, behind a function URL in
//! RESPONSE_STREAM mode (so SSE and long-polls stream instead of being buffered). Writes to
//! streams go to the API function.

use std::sync::Arc;

use spool_chat::revocation::Revocations;

/// Serves the stream function's requests until the runtime stops it.
pub async fn serve() -> Result<(), lambda_http::Error> {
    // The environment, with the secrets SPOOL_SECRET_ARNS names over it (nothing secret is in
    // the environment); the signing keys follow the secret's rotation.
    let configured = spool_aws::configure().await?;
    let config = &configured.config;
    let (keys, origin) = configured.edge_keys()?;
    let log: Arc<dyn spool_log::port::StreamLog> = spool_aws::Stores::connect(config, None).await?.log();
    let revocations = Arc::new(Revocations::new(log.clone(), config.revocation_check));
    let api = spool_stream::StreamApi::new(log, spool_stream::Access::Tokens(Box::new(keys)), config.live)
        .with_rate_limiter(Arc::new(spool_auth::RateLimiter::new(config.rate_limits)))
        .with_revocations(revocations);
    // The AI SDK's routes post through the API function, with CloudFront's origin header.
    let api = match &config.aws.chat_api_url {
        Some(url) => {
            use secrecy::ExposeSecret;
            let origin = config.origin_secret.as_ref().map(|s| s.expose_secret().to_owned());
            api.with_chat_writes(Arc::new(spool_stream::writes::Remote::new(url, origin.as_deref())))
        }
        None => api,
    };
    // Reads only: writes go to the API function (the template's role grants no writes here).
    let app = spool_stream::reader(api);
    // Only through the deployment's CloudFront distributions (they add the origin secret).
    let app = spool_edge::only_through_cdn(app, origin);
    lambda_http::run_with_streaming_response(app).await
}
