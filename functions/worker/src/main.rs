//! The worker Lambda: maintenance jobs from SQS.

use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use spool_worker::Worker;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = spool_platform::Config::from_env()?;
    let log = spool_aws::log_from_config(&config, None).await?;
    let worker = Arc::new(Worker::new(Arc::new(log)));
    let worker = &worker;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<_, lambda_runtime::Error>(worker.handle_batch(event.payload).await)
    }))
    .await
}
