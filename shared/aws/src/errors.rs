//! # SDK errors as the domain's
//!
//! Every AWS call's failure becomes an [`Error::Unavailable`] naming the service, the operation
//! and what the service said (its code and message), or what failed on the way.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use spool_domain::Error;

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
