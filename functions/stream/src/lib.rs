//! # The stream function
//!
//! Will serve the Durable Streams protocol (`/v1/stream/{path…}`: catch-up, long-poll and SSE
//! reads, appends, TTL, producers) over the stream log; the stream-function issue fills it.
//! Until then its Router has no route, and `spool serve` mounts nothing from it.

use axum::Router;

/// The stream function's routes.
pub fn router() -> Router {
    Router::new()
}
