//! The stream Lambda: the stream function's Router with response streaming, behind a function
//! URL in RESPONSE_STREAM mode.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    let _config = spool_platform::Config::from_env()?;
    lambda_http::run_with_streaming_response(spool_stream::router()).await
}
