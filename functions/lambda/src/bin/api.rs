//! The chat API Lambda: the API's Router behind API Gateway or a function URL.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    spool_lambda::api::serve().await
}
