//! # Errors at the edge: one body, one table
//!
//! Every refusal of every route is `{"error": {"code", "message"}}` ([`ErrorBody`]), and a
//! domain error gets the same status and code whichever function answers it ([`status_of`]):
//! the statuses are the Durable Streams protocol's where it fixes them, and every error the
//! caller can cause is a 4xx. A 5xx says nothing of its cause ([`respond`]): that goes to the
//! log, under the request's id.

use axum::{
    Json,
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use spool_log::error::Error;
use utoipa::ToSchema;

/// The contract's error body, `{"error": {"code", "message"}}`.
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
    /// With `ALREADY_CLAIMED`: the worker that holds the subscription's wake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_holder: Option<String>,
    /// With `ALREADY_CLAIMED`: the wake's generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
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
