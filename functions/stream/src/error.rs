//! # The stream function's error type
//!
//! Every handler returns [`ApiError`]. A stream-log error keeps its meaning (and the headers the
//! protocol asks for, such as `Stream-Closed` on an append to a closed stream); a request the
//! protocol layer itself refuses is a [`ApiError::BadRequest`] and friends. Bodies are the
//! contract's JSON error, `{"error": {"code": "...", "message": "..."}}`.

use axum::{
    http::{HeaderName, StatusCode, header},
    response::{IntoResponse, Response},
};
use spool_log::error::Error;

use crate::headers::{PRODUCER_EPOCH, PRODUCER_EXPECTED_SEQ, PRODUCER_RECEIVED_SEQ, STREAM_CLOSED, STREAM_NEXT_OFFSET};

pub use spool_edge::{ErrorBody, ErrorDetail};

/// Why a stream request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The stream log refused or failed the operation.
    #[error(transparent)]
    Log(#[from] Error),
    /// A malformed request: a bad header, query parameter or body.
    #[error("{0}")]
    BadRequest(String),
    /// No valid credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// Valid credentials that do not allow this operation.
    #[error("{0}")]
    Forbidden(String),
    /// A protocol feature Spool does not implement.
    #[error("{0}")]
    NotImplemented(String),
    /// Over a rate limit (`429` with `Retry-After`).
    #[error(transparent)]
    RateLimited(#[from] spool_auth::Limited),
    /// A write sent to a deployment's read-only stream function.
    #[error("{0}")]
    ReadOnly(String),
    /// The chat API refused a write made for the caller: its answer, passed on.
    #[error("the chat API answered {status}")]
    Upstream {
        /// Its status.
        status: StatusCode,
        /// Its body (the contract's JSON error).
        body: axum::body::Bytes,
        /// When to retry, if it said.
        retry_after: Option<axum::http::HeaderValue>,
    },
    /// A request body over the limit.
    #[error("{0}")]
    TooLarge(String),
    /// The chat API could not be reached.
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    /// A [`ApiError::BadRequest`].
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::BadRequest(message.into())
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::NotImplemented(_) => (StatusCode::NOT_IMPLEMENTED, "not_implemented"),
            Self::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::ReadOnly(_) => (StatusCode::METHOD_NOT_ALLOWED, "read_only"),
            Self::Upstream { status, .. } => (*status, "upstream"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            Self::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            Self::Log(e) => spool_edge::status_of(e),
        }
    }

    /// Headers the protocol asks for on this error.
    fn headers(&self) -> Vec<(HeaderName, String)> {
        match self {
            Self::Log(Error::Closed { tail, .. }) => vec![
                (HeaderName::from_static(STREAM_CLOSED), "true".to_owned()),
                (HeaderName::from_static(STREAM_NEXT_OFFSET), tail.to_string()),
            ],
            Self::Log(Error::StaleProducerEpoch { current, .. }) => {
                vec![(HeaderName::from_static(PRODUCER_EPOCH), current.to_string())]
            }
            Self::Log(Error::ProducerSeqGap { expected, received }) => vec![
                (HeaderName::from_static(PRODUCER_EXPECTED_SEQ), expected.to_string()),
                (HeaderName::from_static(PRODUCER_RECEIVED_SEQ), received.to_string()),
            ],
            Self::RateLimited(limited) => vec![(header::RETRY_AFTER, limited.retry_after_secs().to_string())],
            Self::ReadOnly(_) => vec![(header::ALLOW, "GET, HEAD, OPTIONS".to_owned())],
            _ => Vec::new(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Upstream {
            status,
            body,
            retry_after,
        } = self
        {
            let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
            if let Some(retry_after) = retry_after {
                response.headers_mut().insert(header::RETRY_AFTER, retry_after);
            }
            return response;
        }
        let (status, code) = self.status_and_code();
        let headers = self.headers();
        let mut body = ErrorBody::new(code, self.to_string());
        if let Self::Log(Error::Refused(refusal)) = &self {
            body.error.current_holder.clone_from(&refusal.current_holder);
            body.error.generation = refusal.generation;
        }
        spool_edge::respond(status, body, headers)
    }
}
