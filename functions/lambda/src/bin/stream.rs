//! The stream Lambda: the stream function's read-only Router with response streaming, behind a
//! function URL in RESPONSE_STREAM mode.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    spool_lambda::stream::serve().await
}
