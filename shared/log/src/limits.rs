//! # Limits of the stream log
//!
//! One struct, read once from configuration and shared by both adapters, so the two backends
//! accept and reject exactly the same requests.

/// Size limits and page geometry of the stream log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// The largest append (sum of its messages' bytes) the log accepts.
    pub max_append_bytes: usize,
    /// The most bytes one read returns (a read always returns at least one message if any is
    /// available, even a larger one).
    pub max_read_bytes: usize,
    /// Target size of a sealed page: a page is cut before the message that would overflow it.
    pub page_bytes: usize,
    /// The most messages one sealed page holds.
    pub page_max_messages: usize,
    /// How long a chat's short last page waits after its last turn before it is sealed
    /// ([`crate::port::StreamSealer::seal_when_idle`]): full pages are sealed as they fill, and a
    /// chat's partial tail once it has been quiet this long, so a busy chat writes one page per
    /// page of events rather than one per turn.
    pub idle_seal: std::time::Duration,
}

impl LogLimits {
    /// Refuses an append (or a creation's initial messages) of `size` bytes over the limit;
    /// passes `size` on otherwise.
    pub fn check_append(&self, size: usize) -> Result<usize, crate::error::Error> {
        if size > self.max_append_bytes {
            return Err(crate::error::Error::PayloadTooLarge {
                size,
                max: self.max_append_bytes,
            });
        }
        Ok(size)
    }

    /// 16 MiB: far above any chat event, below what one Lambda invocation can carry in.
    pub const DEFAULT_MAX_APPEND_BYTES: usize = 16 * 1024 * 1024;
    /// 1 MiB per read keeps responses quick to first byte and cheap to cache.
    pub const DEFAULT_MAX_READ_BYTES: usize = 1024 * 1024;
    /// 1 MiB pages: one S3 GET serves about ten thousand chat events.
    pub const DEFAULT_PAGE_BYTES: usize = 1024 * 1024;
    /// Bounds the per-message index work of decoding one page.
    pub const DEFAULT_PAGE_MAX_MESSAGES: usize = 16_384;
    /// 10 minutes: within SQS's 15-minute limit on a delayed message.
    pub const DEFAULT_IDLE_SEAL: std::time::Duration = std::time::Duration::from_secs(600);
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            max_append_bytes: Self::DEFAULT_MAX_APPEND_BYTES,
            max_read_bytes: Self::DEFAULT_MAX_READ_BYTES,
            page_bytes: Self::DEFAULT_PAGE_BYTES,
            page_max_messages: Self::DEFAULT_PAGE_MAX_MESSAGES,
            idle_seal: Self::DEFAULT_IDLE_SEAL,
        }
    }
}

/// How long live reads wait and last, for every host of the stream function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveSettings {
    /// How long a long-poll waits for data before answering `204` (`SPOOL_LONG_POLL_MS`,
    /// default 20 s: under API Gateway's 30-second integration limit).
    pub long_poll: std::time::Duration,
    /// How long one SSE response lasts before the server ends it and the client resumes from
    /// its last offset (`SPOOL_SSE_MAX_MS`, default 60 s): the protocol asks for about a minute
    /// so CDNs can collapse readers, and on Lambda it must end before the 15-minute limit.
    pub sse_max: std::time::Duration,
    /// How often an idle SSE response sends a comment line (`SPOOL_SSE_KEEPALIVE_MS`, default
    /// 15 s), well within the idle timeouts of proxies, API Gateway and CloudFront.
    pub sse_keepalive: std::time::Duration,
}

impl Default for LiveSettings {
    fn default() -> Self {
        Self {
            long_poll: std::time::Duration::from_secs(20),
            sse_max: std::time::Duration::from_secs(60),
            sse_keepalive: std::time::Duration::from_secs(15),
        }
    }
}
