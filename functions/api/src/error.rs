//! # The chat API's error type
//!
//! Every handler returns [`ApiError`]; its body is the contract's JSON error,
//! `{"error": {"code": "...", "message": "..."}}`, with a 4xx status for anything the caller got
//! wrong and 503 when the store fails.

use axum::{
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
pub use spool_edge::ErrorBody;
use spool_log::error::Error;
use utoipa::IntoResponses;

/// The refusals every authenticated route may answer.
#[derive(IntoResponses)]
#[allow(dead_code)] // a description of answers, never built
pub(crate) enum Refusals {
    /// The request is malformed: a body, path or query the route does not take.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No token, or an expired, tampered or wrongly signed one.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Too many requests: over a rate limit; retry after `Retry-After` seconds.
    #[response(status = 429)]
    RateLimited(ErrorBody),
    /// The store is unavailable for a moment; retry (`Retry-After`).
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// Why an API request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The store refused or failed the operation.
    #[error(transparent)]
    Store(#[from] Error),
    /// A malformed request: a body that is not the JSON the route takes, or a bad field.
    #[error("{0}")]
    BadRequest(String),
    /// Missing, expired or invalid credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// Valid credentials without the capability the route needs.
    #[error("{0}")]
    Forbidden(String),
    /// A request that conflicts with the current state (e.g. deleting the built-in agent).
    #[error("{0}")]
    Conflict(String),
    /// The session is busy with another turn.
    #[error("{message}")]
    Busy {
        /// The pending turn.
        turn_id: String,
        /// What to do.
        message: String,
    },
    /// An answer to a request that another answer closed first.
    #[error("{0}")]
    AnsweredAlready(String),
    /// A body larger than the route takes.
    #[error("{0}")]
    TooLarge(String),
    /// A body of a type the route does not take.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A slash command that does not exist (the message names the closest ones).
    #[error("{0}")]
    UnknownCommand(String),
    /// A workspace without a working directory this process can read.
    #[error("{0}")]
    NoWorkingDirectory(String),
    /// A file completed before all its bytes were uploaded.
    #[error("{0}")]
    UploadIncomplete(String),
    /// A file whose uploaded bytes are not the ones declared.
    #[error("{0}")]
    ChecksumMismatch(String),
    /// No route at this path.
    #[error("{0}")]
    NoRoute(String),
    /// The route does not take this method.
    #[error("{0}")]
    NoMethod(String),
    /// Over a rate limit (`429` with `Retry-After`).
    #[error(transparent)]
    RateLimited(#[from] spool_auth::Limited),
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::AnsweredAlready(_) => (StatusCode::CONFLICT, "answered_already"),
            Self::Busy { .. } => (StatusCode::CONFLICT, "turn_pending"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            Self::UnknownCommand(_) => (StatusCode::NOT_FOUND, "unknown_command"),
            Self::NoWorkingDirectory(_) => (StatusCode::CONFLICT, "no_working_directory"),
            Self::UploadIncomplete(_) => (StatusCode::CONFLICT, "upload_incomplete"),
            Self::ChecksumMismatch(_) => (StatusCode::CONFLICT, "checksum_mismatch"),
            Self::NoRoute(_) => (StatusCode::NOT_FOUND, "no_route"),
            Self::NoMethod(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::Store(e) => spool_edge::status_of(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let mut body = ErrorBody::new(code, self.to_string());
        if let Self::Busy { turn_id, .. } = &self {
            body.error.pending_turn_id = Some(turn_id.clone());
        }
        let mut headers = Vec::new();
        if let Self::RateLimited(limited) = &self {
            headers.push((header::RETRY_AFTER, limited.retry_after_secs().to_string()));
        }
        spool_edge::respond(status, body, headers)
    }
}
