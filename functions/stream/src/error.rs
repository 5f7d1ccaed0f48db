//! # The stream function's error type
//!
//! Every handler returns [`ApiError`]. A stream-log error keeps its meaning (and the headers the
//! protocol asks for, such as `Stream-Closed` on an append to a closed stream); a request the
//! protocol layer itself refuses is a [`ApiError::BadRequest`] and friends. Bodies are the
//! contract's JSON error, `{"error": {"code": "...", "message": "..."}}`.

use axum::{
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use spool_domain::Error;
use utoipa::ToSchema;

use crate::protocol::{
    PRODUCER_EPOCH, PRODUCER_EXPECTED_SEQ, PRODUCER_RECEIVED_SEQ, STREAM_CLOSED, STREAM_NEXT_OFFSET,
};

/// The contract's error body, `{"error": {"code", "message"}}`: the stream function's and the
/// chat API's.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, for programs (`code`) and for people (`message`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable, machine-readable code, e.g. `not_found`, `turn_pending`.
    pub code: &'static str,
    /// What happened and what to do next.
    pub message: String,
    /// With `turn_pending`: the turn the chat waits on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_turn_id: Option<String>,
}

impl ErrorBody {
    /// An error body with `code` and `message`.
    pub fn new(code: &'static str, message: String) -> Self {
        Self {
            error: ErrorDetail {
                code,
                message,
                pending_turn_id: None,
            },
        }
    }
}

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
            Self::Log(e) => match e {
                Error::NotFound { .. } => (StatusCode::NOT_FOUND, "stream_not_found"),
                Error::Gone { .. } => (StatusCode::GONE, "stream_gone"),
                Error::ConfigMismatch { .. } => (StatusCode::CONFLICT, "stream_exists"),
                Error::Closed { .. } => (StatusCode::CONFLICT, "stream_closed"),
                Error::ContentTypeMismatch { .. } => (StatusCode::CONFLICT, "content_type_mismatch"),
                Error::StreamSeqConflict { .. } => (StatusCode::CONFLICT, "stream_seq_conflict"),
                Error::StaleProducerEpoch { .. } => (StatusCode::FORBIDDEN, "stale_producer_epoch"),
                Error::InvalidProducerEpochSeq { .. } => (StatusCode::BAD_REQUEST, "invalid_producer_seq"),
                Error::ProducerSeqGap { .. } => (StatusCode::CONFLICT, "producer_seq_gap"),
                Error::InvalidOffset { .. } => (StatusCode::BAD_REQUEST, "invalid_offset"),
                Error::OffsetBeyondTail { .. } => (StatusCode::BAD_REQUEST, "offset_beyond_tail"),
                Error::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
                Error::EmptyAppend => (StatusCode::BAD_REQUEST, "empty_append"),
                Error::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid"),
                Error::Missing { .. } => (StatusCode::NOT_FOUND, "not_found"),
                Error::TailMismatch { .. } => (StatusCode::CONFLICT, "tail_mismatch"),
                Error::Exists { .. } => (StatusCode::CONFLICT, "exists"),
                Error::Contention { .. } => (StatusCode::SERVICE_UNAVAILABLE, "contention"),
                Error::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                Error::Corrupt { .. } | Error::Injected { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            },
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
            Self::Log(Error::Contention { .. } | Error::Unavailable { .. }) => {
                vec![(header::RETRY_AFTER, "1".to_owned())]
            }
            Self::Unauthorized(_) => vec![(header::WWW_AUTHENTICATE, "Bearer".to_owned())],
            Self::RateLimited(limited) => vec![(header::RETRY_AFTER, limited.retry_after_secs().to_string())],
            _ => Vec::new(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(error = %self, source = ?std::error::Error::source(&self), "stream request failed");
        } else {
            tracing::debug!(error = %self, %status, "stream request refused");
        }
        let body = ErrorBody::new(code, self.to_string());
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        for (name, value) in self.headers() {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
        response
    }
}
