//! # The HTTP edge every Spool function shares
//!
//! The chat API and the stream function answer the same way: one error body and one table from
//! domain errors to statuses and codes ([`error`]), the same CORS and browser headers and JSON
//! for axum's own refusals ([`headers`]), the same caller checks ([`gate`]), the CDN-only check of a deployment ([`origin`]), and one log line
//! and `x-request-id` per request ([`trace`]).

pub mod error;
pub mod gate;
pub mod headers;
pub mod origin;
pub mod trace;

pub use error::{ErrorBody, ErrorDetail, respond, status_of};
pub use gate::{client_address, limit_write};
pub use headers::{browser_headers, json_errors};
pub use origin::{ORIGIN_HEADER, OriginCheck, only_through_cdn, require_origin};
pub use trace::{CallerSlot, loggable_path, note_caller, redact, trace_requests};
