//! # The protocol's header names
//!
//! One list of every header the protocol reads or writes, for the parsers in
//! [`protocol`](crate::protocol), the handlers that answer, and the errors that carry them.

/// The tail offset after a response (every successful answer carries it).
pub const STREAM_NEXT_OFFSET: &str = "stream-next-offset";
/// The response holds everything the stream had when it was generated.
pub const STREAM_UP_TO_DATE: &str = "stream-up-to-date";
/// The stream is closed (on a read: and the reader reached its end).
pub const STREAM_CLOSED: &str = "stream-closed";
/// The collapsing cursor of live responses.
pub const STREAM_CURSOR: &str = "stream-cursor";
/// A writer's lexicographic sequence.
pub const STREAM_SEQ: &str = "stream-seq";
/// A sliding expiry window, in seconds.
pub const STREAM_TTL: &str = "stream-ttl";
/// An absolute expiry time (RFC 3339).
pub const STREAM_EXPIRES_AT: &str = "stream-expires-at";
/// A fork's source stream (its URL path on this server).
pub const STREAM_FORKED_FROM: &str = "stream-forked-from";
/// Where a fork diverges from its source.
pub const STREAM_FORK_OFFSET: &str = "stream-fork-offset";
/// How far past the fork offset the fork inherits.
pub const STREAM_FORK_SUB_OFFSET: &str = "stream-fork-sub-offset";
/// Set to `base64` on SSE responses of binary streams.
pub const STREAM_SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";
/// An idempotent producer's id.
pub const PRODUCER_ID: &str = "producer-id";
/// An idempotent producer's epoch.
pub const PRODUCER_EPOCH: &str = "producer-epoch";
/// An idempotent producer's batch sequence.
pub const PRODUCER_SEQ: &str = "producer-seq";
/// On a producer sequence gap: the sequence the stream expected.
pub const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
/// On a producer sequence gap: the sequence it received.
pub const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";

/// Request headers a browser may send, and response headers it may read (CORS).
pub use spool_edge::headers::{ALLOWED_HEADERS, EXPOSED_HEADERS};
