//! The worker Lambda: agent turns, maintenance jobs and aggregate streams' events from SQS.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    spool_lambda::worker::serve().await
}
