//! # The stream log's error type
//!
//! Every port method returns [`Error`]. Variants name what the caller got wrong (each maps to one
//! 4xx status at the HTTP edge) apart from [`Error::Unavailable`], [`Error::Contention`] and
//! [`Error::Corrupt`], which are the store's fault, and [`Error::Injected`], which only tests see.

use crate::stream::{Offset, StreamPath};

/// A boxed error from a storage backend, kept as the source of [`Error::Unavailable`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a stream-log operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No stream lives at this path (never created, deleted, or expired).
    #[error("stream `{path}` does not exist")]
    NotFound {
        /// The path that was asked for.
        path: StreamPath,
    },
    /// The stream was deleted but is kept for its forks (or the stream a fork names is).
    #[error("stream `{path}` was deleted; it is kept only for the streams forked from it")]
    Gone {
        /// The path that was asked for.
        path: StreamPath,
    },
    /// A stream already lives at this path with a different configuration.
    #[error("stream `{path}` already exists with a different configuration: {reason}")]
    ConfigMismatch {
        /// The path that was asked for.
        path: StreamPath,
        /// Which part of the configuration differs.
        reason: String,
    },
    /// The stream is closed: it takes no more appends.
    #[error("stream `{path}` is closed at offset {tail}")]
    Closed {
        /// The stream.
        path: StreamPath,
        /// Its final offset.
        tail: Offset,
    },
    /// The append's content type is not the stream's.
    #[error("content type `{got}` does not match the stream's `{expected}`")]
    ContentTypeMismatch {
        /// The stream's content type.
        expected: String,
        /// The append's content type.
        got: String,
    },
    /// A `Stream-Seq` that is not greater than the last one accepted.
    #[error("Stream-Seq `{got}` is not greater than the last accepted `{last}`")]
    StreamSeqConflict {
        /// The last accepted value.
        last: String,
        /// The value sent.
        got: String,
    },
    /// An idempotent producer with an epoch older than the stream has seen (a zombie).
    #[error("producer epoch {got} is stale; the current epoch is {current}")]
    StaleProducerEpoch {
        /// The epoch the stream has accepted.
        current: u64,
        /// The epoch sent.
        got: u64,
    },
    /// A new producer epoch must start at sequence 0.
    #[error("a new producer epoch ({epoch}) must start at sequence 0, not {seq}")]
    InvalidProducerEpochSeq {
        /// The new epoch.
        epoch: u64,
        /// The sequence sent.
        seq: u64,
    },
    /// An idempotent producer skipped a sequence number.
    #[error("producer sequence gap: expected {expected}, received {received}")]
    ProducerSeqGap {
        /// The next sequence the stream expects.
        expected: u64,
        /// The sequence sent.
        received: u64,
    },
    /// An offset that is not one this log issues.
    #[error("invalid offset `{value}`: {reason}")]
    InvalidOffset {
        /// The offset as sent.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An offset past the stream's tail.
    #[error("offset {offset} is beyond the stream's tail {tail}")]
    OffsetBeyondTail {
        /// The offset asked for.
        offset: Offset,
        /// The stream's tail.
        tail: Offset,
    },
    /// An append larger than the configured maximum.
    #[error("append of {size} bytes exceeds the maximum of {max} bytes (SPOOL_MAX_APPEND_BYTES)")]
    PayloadTooLarge {
        /// The append's size.
        size: usize,
        /// The configured maximum (`SPOOL_MAX_APPEND_BYTES`).
        max: usize,
    },
    /// A file larger than the configured maximum.
    #[error(
        "a file of {size} bytes exceeds the maximum of {max} bytes (SPOOL_MAX_ATTACHMENT_BYTES); split or compress it"
    )]
    FileTooLarge {
        /// The file's declared size.
        size: u64,
        /// The configured maximum.
        max: u64,
    },
    /// An append with no message that does not close the stream either.
    #[error("an append needs at least one message (or must close the stream)")]
    EmptyAppend,
    /// Input that fails validation (a path, content type or expiry).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was invalid.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The stream's tail is not the one the append expected ([`crate::stream::Append::expected_tail`]).
    #[error("stream `{path}` has moved on: its tail is {tail}, not {expected}")]
    TailMismatch {
        /// The stream.
        path: StreamPath,
        /// The tail the append expected.
        expected: u64,
        /// The stream's tail.
        tail: u64,
    },
    /// A record other than a stream (an organization, an API key) does not exist.
    #[error("{what} does not exist")]
    Missing {
        /// What was looked for, e.g. "organization `acme`".
        what: String,
    },
    /// A record other than a stream (an organization, an API key) exists already.
    #[error("{what} already exists")]
    Exists {
        /// What was created, e.g. "organization `acme`".
        what: String,
    },
    /// A create that would take a record's owner past one of its caps ([`Cap`]); nothing was
    /// changed.
    #[error("{}", .capped.refusal(*.max))]
    CapReached {
        /// Which cap.
        capped: Cap,
        /// Its value.
        max: u64,
    },
    /// Concurrent writers kept winning for longer than the retry budget.
    #[error("stream `{path}` is too contended right now; retry shortly")]
    Contention {
        /// The stream.
        path: StreamPath,
    },
    /// Stored data failed an integrity check.
    #[error("stored data is corrupt: {what}")]
    Corrupt {
        /// What failed to verify.
        what: String,
    },
    /// The backing store failed or could not be reached.
    #[error("the stream store is unavailable: {message}")]
    Unavailable {
        /// What was being done.
        message: String,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
    /// A request refused with its own status and code: the subscription protocol's, or a rule's
    /// (the built-in agent cannot be deleted: `409 conflict`).
    #[error(transparent)]
    Refused(Box<crate::subscription::refusal::Refusal>),
    /// A test armed this fail point.
    #[error("fail point `{point}` was hit")]
    Injected {
        /// The fail point's name.
        point: &'static str,
    },
}

/// A cap a create can reach, as whoever sets it names it: what the person is told, with
/// `{max}` where the cap's value goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    refusal: &'static str,
}

impl Cap {
    /// The cap whose refusal is `refusal` (`{max}` stands for its value).
    pub const fn new(refusal: &'static str) -> Self {
        Self { refusal }
    }

    /// What the person is told when the cap is `max`: the cap, and what to do.
    pub fn refusal(self, max: u64) -> String {
        self.refusal.replace("{max}", &max.to_string())
    }
}

impl Error {
    /// Wraps a backend error with what was being done.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: source.into(),
        }
    }

    /// One error of every kind, for tests that walk how each is answered (the HTTP edge's
    /// status table). A new variant belongs here too.
    pub fn one_of_each() -> Vec<Self> {
        use crate::stream::{Offset, StreamPath};
        let path = StreamPath::parse("a").expect("`a` is a stream path");
        vec![
            Self::NotFound { path: path.clone() },
            Self::Gone { path: path.clone() },
            Self::ConfigMismatch {
                path: path.clone(),
                reason: "r".into(),
            },
            Self::Closed {
                path: path.clone(),
                tail: Offset::START,
            },
            Self::ContentTypeMismatch {
                expected: "a".into(),
                got: "b".into(),
            },
            Self::StreamSeqConflict {
                last: "b".into(),
                got: "a".into(),
            },
            Self::StaleProducerEpoch { current: 2, got: 1 },
            Self::InvalidProducerEpochSeq { epoch: 1, seq: 1 },
            Self::ProducerSeqGap {
                expected: 1,
                received: 3,
            },
            Self::InvalidOffset {
                value: "x".into(),
                reason: "r",
            },
            Self::OffsetBeyondTail {
                offset: Offset::after(9),
                tail: Offset::START,
            },
            Self::PayloadTooLarge { size: 2, max: 1 },
            Self::FileTooLarge { size: 2, max: 1 },
            Self::EmptyAppend,
            Self::invalid("x", "y"),
            Self::TailMismatch {
                path: path.clone(),
                expected: 1,
                tail: 2,
            },
            Self::Missing { what: "x".into() },
            Self::Exists { what: "x".into() },
            Self::CapReached {
                capped: Cap::new("at most {max} of these"),
                max: 20,
            },
            Self::Contention { path },
            Self::Corrupt { what: "x".into() },
            Self::unavailable("x", "y"),
            Self::Injected { point: "p" },
            crate::subscription::refusal::Refusal::fenced().into(),
        ]
    }

    /// An [`Error::Invalid`].
    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            reason: reason.into(),
        }
    }

    /// True when the caller sent something wrong (a 4xx at the HTTP edge), false when the store
    /// failed.
    pub fn is_client_error(&self) -> bool {
        !matches!(
            self,
            Self::Unavailable { .. } | Self::Contention { .. } | Self::Corrupt { .. } | Self::Injected { .. }
        )
    }
}

impl From<crate::subscription::refusal::Refusal> for Error {
    fn from(refusal: crate::subscription::refusal::Refusal) -> Self {
        Error::Refused(Box::new(refusal))
    }
}
