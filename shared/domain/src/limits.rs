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
}

impl LogLimits {
    /// 16 MiB: far above any chat event, below what one Lambda invocation can carry in.
    pub const DEFAULT_MAX_APPEND_BYTES: usize = 16 * 1024 * 1024;
    /// 1 MiB per read keeps responses quick to first byte and cheap to cache.
    pub const DEFAULT_MAX_READ_BYTES: usize = 1024 * 1024;
    /// 1 MiB pages: one S3 GET serves about ten thousand chat events.
    pub const DEFAULT_PAGE_BYTES: usize = 1024 * 1024;
    /// Bounds the per-message index work of decoding one page.
    pub const DEFAULT_PAGE_MAX_MESSAGES: usize = 16_384;
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            max_append_bytes: Self::DEFAULT_MAX_APPEND_BYTES,
            max_read_bytes: Self::DEFAULT_MAX_READ_BYTES,
            page_bytes: Self::DEFAULT_PAGE_BYTES,
            page_max_messages: Self::DEFAULT_PAGE_MAX_MESSAGES,
        }
    }
}
