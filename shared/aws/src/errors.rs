//! # SDK errors as the domain's
//!
//! Every AWS call's failure becomes an [`Error::Unavailable`] naming the service, the operation
//! and what the service said (its code and message), or what failed on the way.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use spool_log::error::Error;

/// A short description of an SDK error: the service's code and message, or what failed on the
/// way (a timeout, a refused connection).
pub(crate) fn describe<E, R>(e: &SdkError<E, R>) -> String
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match e {
        SdkError::ServiceError(service) => {
            let err = service.err();
            format!(
                "{}: {}",
                err.code().unwrap_or("unknown error"),
                err.message().unwrap_or_default()
            )
        }
        other => aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string(),
    }
}

pub(crate) fn ddb<E, R>(what: &str, e: SdkError<E, R>) -> Error
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    Error::unavailable(format!("DynamoDB {what}"), describe(&e))
}

pub(crate) fn s3<E, R>(what: &str, e: SdkError<E, R>) -> Error
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    Error::unavailable(format!("S3 {what}"), describe(&e))
}

/// A request builder's result (a missing required field) as the domain's error.
pub(crate) fn build<T, E: std::error::Error + Send + Sync + 'static>(r: Result<T, E>) -> Result<T, Error> {
    r.map_err(|e| Error::unavailable("build a DynamoDB request", e))
}

/// Each item's cancellation code of a cancelled transaction (`ConditionalCheckFailed`,
/// `TransactionConflict`, `None`), or the error itself when the transaction failed otherwise.
pub(crate) fn cancellation_reasons(
    what: &str,
    e: SdkError<
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
        aws_sdk_dynamodb::config::http::HttpResponse,
    >,
) -> Result<Vec<String>, Error> {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    match e {
        SdkError::ServiceError(ref service) => match service.err() {
            TransactWriteItemsError::TransactionCanceledException(c) => Ok(c
                .cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None").to_owned())
                .collect()),
            _ => Err(ddb(what, e)),
        },
        other => Err(ddb(what, other)),
    }
}
