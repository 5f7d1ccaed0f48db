//! # Time, injected
//!
//! Expiry (`Stream-TTL`, `Stream-Expires-At`) is decided against a [`Clock`] so that tests can
//! move time forward instead of sleeping, and so that every adapter reads time the same way.

use std::sync::{
    Arc,
    atomic::{AtomicI64, Ordering},
};

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A manual clock starting at the system's current time.
    pub fn new() -> Self {
        Self(Arc::new(AtomicI64::new(SystemClock.now_ms())))
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// An RFC 3339 time as milliseconds since the Unix epoch; `None` if it is not one.
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    use time::{OffsetDateTime, format_description::well_known::Rfc3339};
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Milliseconds since the Unix epoch as RFC 3339 (UTC), as Spool shows times.
pub fn rfc3339_ms(ms: i64) -> String {
    use time::{OffsetDateTime, format_description::well_known::Rfc3339};
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}
