//! # The HTTP edge every Spool function shares
//!
//! The chat API and the stream function answer the same way: one error type, one error body and
//! one table from domain errors to statuses and codes, and JSON for axum's own refusals
//! ([`error`]), the protocol's header names, the same CORS and browser headers ([`headers`]), the same
//! caller checks ([`gate`]), the CDN-only check of a deployment ([`origin`]), and one log line
//! and `x-request-id` per request ([`trace`]). The front ends' routes write to the chat through
//! one port ([`writes`]), in process or across the AWS permission boundary.

pub mod error;
pub mod gate;
pub mod headers;
pub mod origin;
pub mod trace;
pub mod writes;

pub use error::{ApiError, ErrorBody, ErrorDetail, Refusals, json_errors, protocol_headers, respond, status_of};
pub use gate::{client_address, limit_write};
pub use headers::browser_headers;
pub use origin::{ORIGIN_HEADER, OriginCheck, only_through_cdn, require_origin};
pub use trace::{CallerSlot, loggable_path, note_caller, redact, trace_requests};

/// Where the stream routes live: a stream `{path}` is at `/v1/stream/{path}` (the stream
/// function serves them; the chat API names them in read grants).
pub const STREAM_PREFIX: &str = "/v1/stream/";
