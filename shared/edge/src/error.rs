//! # Errors at the edge: one type, one body, one table
//!
//! Every handler of every function returns [`ApiError`], and every refusal is
//! `{"error": {"code", "message"}}` ([`ErrorBody`]) from its one [`IntoResponse`]: a domain
//! error gets the same status and code whichever function answers it ([`status_of`]), with the
//! headers the Durable Streams protocol asks for on it ([`protocol_headers`]). The statuses are
//! the protocol's where it fixes them, and every error the caller can cause is a 4xx. A 5xx
//! says nothing of its cause ([`respond`]): that goes to the log, under the request's id. Refusals
//! axum makes before a handler runs get the same body ([`json_errors`]).

use axum::{
    Json,
    body::Bytes,
    extract::Request,
    http::{HeaderName, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use spool_log::error::Error;
use utoipa::{IntoResponses, ToSchema};

use crate::headers::{PRODUCER_EPOCH, PRODUCER_EXPECTED_SEQ, PRODUCER_RECEIVED_SEQ, STREAM_CLOSED, STREAM_NEXT_OFFSET};

/// The contract's error body, `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, for programs (`code`) and for people (`message`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable, machine-readable code (one of [`CODES`]), e.g. `not_found`, `turn_pending`.
    #[schema(schema_with = code_schema)]
    pub code: &'static str,
    /// What happened and what to do next.
    pub message: String,
    /// With `turn_pending`: the turn the chat waits on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_turn_id: Option<String>,
    /// With `ALREADY_CLAIMED`: the worker that holds the subscription's wake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_holder: Option<String>,
    /// With `ALREADY_CLAIMED`: the wake's generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

/// Every error code of every route, once: Spool's own (lower case) and the Durable Streams
/// subscription protocol's (upper case, as the protocol names them).
pub const CODES: &[&str] = &[
    "answered_already",
    "bad_request",
    "budget_exceeded",
    "checksum_mismatch",
    "closed",
    "conflict",
    "content_type_mismatch",
    "empty_append",
    "exists",
    "forbidden",
    "gone",
    "internal",
    "invalid",
    "invalid_offset",
    "invalid_producer_seq",
    "limit_reached",
    "method_not_allowed",
    "no_route",
    "no_working_directory",
    "not_found",
    "not_implemented",
    "offset_beyond_tail",
    "payload_too_large",
    "producer_seq_gap",
    "rate_limited",
    "read_only",
    "refused",
    "request_timeout",
    "stale_producer_epoch",
    "stream_seq_conflict",
    "superseded",
    "turn_pending",
    "unauthorized",
    "unavailable",
    "unknown_command",
    "unsupported_media_type",
    "upload_incomplete",
    "ALREADY_CLAIMED",
    "FENCED",
    "INVALID_OFFSET",
    "INVALID_REQUEST",
    "NO_PENDING_WORK",
    "SUBSCRIPTION_ALREADY_EXISTS",
    "SUBSCRIPTION_NOT_FOUND",
    "TOKEN_INVALID",
    "TOO_MANY_STREAMS",
    "WEBHOOK_URL_REJECTED",
];

/// The schema of `code`: one of [`CODES`].
fn code_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(CODES.iter().copied()))
        .description(Some(
            "A stable, machine-readable code, e.g. `not_found`, `turn_pending`: the same for the same error on every route.",
        ))
        .build()
}

impl ErrorBody {
    /// An error body with `code` and `message`.
    pub fn new(code: &'static str, message: String) -> Self {
        Self {
            error: ErrorDetail {
                code,
                message,
                pending_turn_id: None,
                current_holder: None,
                generation: None,
            },
        }
    }
}

/// The status and code of a domain error, the same on every route.
pub fn status_of(e: &Error) -> (StatusCode, &'static str) {
    match e {
        Error::NotFound { .. } | Error::Missing { .. } => (StatusCode::NOT_FOUND, "not_found"),
        Error::Gone { .. } => (StatusCode::GONE, "gone"),
        Error::ConfigMismatch { .. } | Error::Exists { .. } => (StatusCode::CONFLICT, "exists"),
        Error::CapReached { .. } => (StatusCode::CONFLICT, "limit_reached"),
        Error::Closed { .. } => (StatusCode::CONFLICT, "closed"),
        Error::ContentTypeMismatch { .. } => (StatusCode::CONFLICT, "content_type_mismatch"),
        Error::StreamSeqConflict { .. } => (StatusCode::CONFLICT, "stream_seq_conflict"),
        Error::StaleProducerEpoch { .. } => (StatusCode::FORBIDDEN, "stale_producer_epoch"),
        Error::InvalidProducerEpochSeq { .. } => (StatusCode::BAD_REQUEST, "invalid_producer_seq"),
        Error::ProducerSeqGap { .. } => (StatusCode::CONFLICT, "producer_seq_gap"),
        Error::InvalidOffset { .. } => (StatusCode::BAD_REQUEST, "invalid_offset"),
        Error::OffsetBeyondTail { .. } => (StatusCode::BAD_REQUEST, "offset_beyond_tail"),
        Error::PayloadTooLarge { .. } | Error::FileTooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        }
        Error::EmptyAppend => (StatusCode::BAD_REQUEST, "empty_append"),
        Error::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid"),
        Error::TailMismatch { .. } => (StatusCode::CONFLICT, "conflict"),
        Error::Contention { .. } | Error::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        Error::Corrupt { .. } | Error::Injected { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        Error::Refused(r) => (
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST),
            r.code,
        ),
    }
}

/// The headers the Durable Streams protocol asks for on a domain error: `Stream-Closed` and
/// `Stream-Next-Offset` on an append to a closed stream, the producer's epoch on a stale one,
/// the expected and received sequences on a producer's gap.
pub fn protocol_headers(e: &Error) -> Vec<(HeaderName, String)> {
    match e {
        Error::Closed { tail, .. } => vec![
            (HeaderName::from_static(STREAM_CLOSED), "true".to_owned()),
            (HeaderName::from_static(STREAM_NEXT_OFFSET), tail.to_string()),
        ],
        Error::StaleProducerEpoch { current, .. } => {
            vec![(HeaderName::from_static(PRODUCER_EPOCH), current.to_string())]
        }
        Error::ProducerSeqGap { expected, received } => vec![
            (HeaderName::from_static(PRODUCER_EXPECTED_SEQ), expected.to_string()),
            (HeaderName::from_static(PRODUCER_RECEIVED_SEQ), received.to_string()),
        ],
        _ => Vec::new(),
    }
}

/// The refusals every authenticated route may answer, for the OpenAPI document.
#[derive(IntoResponses)]
#[allow(dead_code)] // a description of answers, never built
pub enum Refusals {
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

/// Why a request failed, on any route of any function.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The domain (a store, the stream log, the chat's rules) refused or failed the operation.
    #[error(transparent)]
    Domain(#[from] Error),
    /// A malformed request: a bad header, query parameter, path or body.
    #[error("{0}")]
    BadRequest(String),
    /// Missing, expired, revoked or invalid credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// Valid credentials that do not allow this operation.
    #[error("{0}")]
    Forbidden(String),
    /// A request that conflicts with the current state (e.g. deleting the built-in agent).
    #[error("{0}")]
    Conflict(String),
    /// The chat is busy with another turn.
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
    /// A write sent to a deployment's read-only stream function (`405` with `Allow`).
    #[error("{0}")]
    ReadOnly(String),
    /// A protocol feature this endpoint does not serve.
    #[error("{0}")]
    NotImplemented(String),
    /// Over a rate limit (`429` with `Retry-After`).
    #[error(transparent)]
    RateLimited(#[from] spool_auth::Limited),
    /// The chat API, called across the AWS permission boundary, refused a write made for the
    /// caller: its answer, passed on as it is.
    #[error("the chat API answered {status}")]
    Upstream {
        /// Its status.
        status: StatusCode,
        /// Its body (the contract's JSON error).
        body: Bytes,
        /// When to retry, if it said.
        retry_after: Option<HeaderValue>,
    },
    /// A service this one calls could not be reached, or its answer was cut off.
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    /// A [`ApiError::BadRequest`].
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::BadRequest(message.into())
    }

    /// The status and the code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::AnsweredAlready(_) => (StatusCode::CONFLICT, "answered_already"),
            Self::Busy { .. } => (StatusCode::CONFLICT, "turn_pending"),
            Self::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            Self::UnknownCommand(_) => (StatusCode::NOT_FOUND, "unknown_command"),
            Self::NoWorkingDirectory(_) => (StatusCode::CONFLICT, "no_working_directory"),
            Self::UploadIncomplete(_) => (StatusCode::CONFLICT, "upload_incomplete"),
            Self::ChecksumMismatch(_) => (StatusCode::CONFLICT, "checksum_mismatch"),
            Self::NoRoute(_) => (StatusCode::NOT_FOUND, "no_route"),
            Self::NoMethod(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::ReadOnly(_) => (StatusCode::METHOD_NOT_ALLOWED, "read_only"),
            Self::NotImplemented(_) => (StatusCode::NOT_IMPLEMENTED, "not_implemented"),
            Self::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::Upstream { status, .. } => (*status, "upstream"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            Self::Domain(e) => status_of(e),
        }
    }

    /// The headers this error carries besides the body's: the protocol's on a domain error
    /// ([`protocol_headers`]), `Retry-After` over a rate limit, `Allow` on a read-only route.
    fn headers(&self) -> Vec<(HeaderName, String)> {
        match self {
            Self::Domain(e) => protocol_headers(e),
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
            // Already the contract's answer, from the function that refused.
            let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
            if let Some(retry_after) = retry_after {
                response.headers_mut().insert(header::RETRY_AFTER, retry_after);
            }
            return response;
        }
        let (status, code) = self.status_and_code();
        let headers = self.headers();
        let mut body = ErrorBody::new(code, self.to_string());
        match &self {
            Self::Busy { turn_id, .. } => body.error.pending_turn_id = Some(turn_id.clone()),
            Self::Domain(Error::Refused(refusal)) => {
                body.error.current_holder.clone_from(&refusal.current_holder);
                body.error.generation = refusal.generation;
            }
            _ => {}
        }
        respond(status, body, headers)
    }
}

/// The message a 5xx shows: never its cause.
fn generic(status: StatusCode) -> String {
    if status == StatusCode::SERVICE_UNAVAILABLE {
        "the store is unavailable for a moment; retry shortly (see Retry-After)".to_owned()
    } else {
        "something failed on our side; it is logged with this request's x-request-id".to_owned()
    }
}

/// The contract's error answer: `body` (its message replaced by a generic one on a 5xx, whose
/// cause `detail` is logged instead), `no-store`, `Retry-After: 1` on a 503, `WWW-Authenticate`
/// on a 401, and `headers`.
pub fn respond(status: StatusCode, mut body: ErrorBody, headers: Vec<(HeaderName, String)>) -> Response {
    if status.is_server_error() {
        let cause = crate::redact(&body.error.message);
        tracing::error!(status = status.as_u16(), code = body.error.code, %cause, "request failed");
        body.error.message = generic(status);
    } else {
        let message = crate::redact(&body.error.message);
        tracing::debug!(status = status.as_u16(), code = body.error.code, %message, "request refused");
    }
    let mut response = (status, Json(body)).into_response();
    let out = response.headers_mut();
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if status == StatusCode::UNAUTHORIZED {
        out.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        out.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            out.insert(name, value);
        }
    }
    response
}

/// Refusals axum makes before a handler runs (a body over the limit, a path that is not
/// UTF-8, a method a route does not take) answer in plain text or with no body; this puts them,
/// and any other error without a JSON body, in the contract's JSON. Answers to `HEAD` keep their
/// empty bodies.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let head = request.method() == Method::HEAD;
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if head || is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let code = match status.as_u16() {
        400 => "bad_request",
        404 => "no_route",
        405 => "method_not_allowed",
        408 => "request_timeout",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        _ if status.is_server_error() => "internal",
        _ => "refused",
    };
    let message = match (text.is_empty(), status.canonical_reason()) {
        (false, _) => text,
        (true, Some(reason)) => reason.to_owned(),
        (true, None) => status.to_string(),
    };
    let kept = parts
        .headers
        .iter()
        .filter(|(name, _)| *name != header::CONTENT_LENGTH && *name != header::CONTENT_TYPE)
        .filter_map(|(name, value)| Some((name.clone(), value.to_str().ok()?.to_owned())))
        .collect();
    respond(status, ErrorBody::new(code, message), kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_the_caller_causes_is_a_4xx_and_the_stores_a_5xx() {
        for e in Error::one_of_each() {
            let (status, code) = status_of(&e);
            assert_eq!(status.is_client_error(), e.is_client_error(), "{e}: {status} {code}");
            assert!(status.is_client_error() || status.is_server_error(), "{e}");
        }
    }

    #[test]
    fn every_code_is_in_the_one_list() {
        for e in Error::one_of_each() {
            let (_, code) = status_of(&e);
            assert!(CODES.contains(&code), "{e}: {code}");
        }
        for e in [
            ApiError::bad_request(""),
            ApiError::Unauthorized(String::new()),
            ApiError::Forbidden(String::new()),
            ApiError::Conflict(String::new()),
            ApiError::Busy {
                turn_id: String::new(),
                message: String::new(),
            },
            ApiError::AnsweredAlready(String::new()),
            ApiError::TooLarge(String::new()),
            ApiError::UnsupportedMediaType(String::new()),
            ApiError::UnknownCommand(String::new()),
            ApiError::NoWorkingDirectory(String::new()),
            ApiError::UploadIncomplete(String::new()),
            ApiError::ChecksumMismatch(String::new()),
            ApiError::NoRoute(String::new()),
            ApiError::NoMethod(String::new()),
            ApiError::ReadOnly(String::new()),
            ApiError::NotImplemented(String::new()),
            ApiError::Unavailable(String::new()),
        ] {
            let (_, code) = e.status_and_code();
            assert!(CODES.contains(&code), "{e:?}: {code}");
        }
    }

    #[test]
    fn a_5xx_says_nothing_of_its_cause() {
        let response = respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorBody::new("internal", "the secret table `x` broke".into()),
            Vec::new(),
        );
        let body = futures_body(response);
        assert!(!body.contains("secret table"), "{body}");
    }

    fn futures_body(response: Response) -> String {
        let bytes = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(axum::body::to_bytes(response.into_body(), 1 << 16))
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }
}
