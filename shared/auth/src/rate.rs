//! # Rate limits
//!
//! Every public route is rate-limited, so one client cannot starve the others or fill a store:
//! handshakes per client address and per API key (guessing secrets, and the audit writes a
//! refusal costs), writes per organization and per client address, and the creation of
//! streams, chats and workspaces per organization. A refusal is `429` with `Retry-After`.
//!
//! The limits are token buckets in this process's memory: on `spool serve` they hold for the
//! whole server; on Lambda each instance holds its own, and API Gateway's throttling bounds the
//! total. Buckets that have refilled are forgotten once there are many, so the memory they
//! take is bounded whatever keys clients send.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// What is limited, and per what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Handshakes from one client address.
    HandshakeFromAddress,
    /// Handshakes with one API key id.
    HandshakeWithKey,
    /// Writes (anything but reads) of one organization.
    WriteByOrg,
    /// Writes from one client address.
    WriteFromAddress,
    /// Streams, chats and workspaces one organization creates.
    CreateByOrg,
}

impl Limit {
    fn what(self) -> &'static str {
        match self {
            Self::HandshakeFromAddress => "handshakes from this address",
            Self::HandshakeWithKey => "handshakes with this API key",
            Self::WriteByOrg => "writes by this organization",
            Self::WriteFromAddress => "writes from this address",
            Self::CreateByOrg => "streams, chats and workspaces created by this organization",
        }
    }
}

/// A rate: `per_second` on average, up to `burst` at once. A zero rate is no limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// The sustained rate.
    pub per_second: f64,
    /// The most allowed at once.
    pub burst: f64,
}

impl Rate {
    /// No limit.
    pub const OFF: Self = Self {
        per_second: 0.0,
        burst: 0.0,
    };

    /// `count` per minute, all of them at once if need be.
    pub fn per_minute(count: u32) -> Self {
        Self {
            per_second: f64::from(count) / 60.0,
            burst: f64::from(count),
        }
    }

    /// `count` per second, up to `burst` at once.
    pub fn per_second(count: u32, burst: u32) -> Self {
        Self {
            per_second: f64::from(count),
            burst: f64::from(burst.max(count)),
        }
    }

    fn is_off(self) -> bool {
        self.per_second <= 0.0
    }
}

/// The rates of every [`Limit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    /// Handshakes per client address and per API key (default 20 a minute).
    pub handshakes: Rate,
    /// Writes per organization and per client address (default 100 a second, 1000 at once).
    pub writes: Rate,
    /// Creations per organization (default 600 a minute).
    pub creates: Rate,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            handshakes: Rate::per_minute(20),
            writes: Rate::per_second(100, 1000),
            creates: Rate::per_minute(600),
        }
    }
}

impl RateLimits {
    /// No limits at all (benchmarks).
    pub const OFF: Self = Self {
        handshakes: Rate::OFF,
        writes: Rate::OFF,
        creates: Rate::OFF,
    };

    fn rate(&self, limit: Limit) -> Rate {
        match limit {
            Limit::HandshakeFromAddress | Limit::HandshakeWithKey => self.handshakes,
            Limit::WriteByOrg | Limit::WriteFromAddress => self.writes,
            Limit::CreateByOrg => self.creates,
        }
    }
}

/// A request over its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("too many {what}; retry in {} s", retry_after.as_secs().max(1))]
pub struct Limited {
    /// What ran out.
    pub what: &'static str,
    /// When one more is allowed.
    pub retry_after: Duration,
}

impl Limited {
    /// `Retry-After` in whole seconds (at least 1).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// How many buckets are kept before full ones are forgotten.
const MAX_BUCKETS: usize = 100_000;

/// Token buckets for every [`Limit`] and key.
#[derive(Debug)]
pub struct RateLimiter {
    limits: RateLimits,
    buckets: Mutex<HashMap<(Limit, String), Bucket>>,
}

impl RateLimiter {
    /// A limiter with `limits`.
    pub fn new(limits: RateLimits) -> Self {
        Self {
            limits,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one of `limit` for `key`, or says when to retry.
    pub fn check(&self, limit: Limit, key: &str) -> Result<(), Limited> {
        self.check_at(limit, key, Instant::now())
    }

    fn check_at(&self, limit: Limit, key: &str, now: Instant) -> Result<(), Limited> {
        let rate = self.limits.rate(limit);
        if rate.is_off() {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS {
            // Forget the buckets that have refilled: they hold nothing a new one would not.
            buckets.retain(|(l, _), b| {
                let r = self.limits.rate(*l);
                now.duration_since(b.at).as_secs_f64().mul_add(r.per_second, b.tokens) < r.burst
            });
        }
        let bucket = buckets.entry((limit, key.to_owned())).or_insert(Bucket {
            tokens: rate.burst,
            at: now,
        });
        let refilled = now
            .duration_since(bucket.at)
            .as_secs_f64()
            .mul_add(rate.per_second, bucket.tokens)
            .min(rate.burst);
        bucket.at = now;
        if refilled >= 1.0 {
            bucket.tokens = refilled - 1.0;
            Ok(())
        } else {
            bucket.tokens = refilled;
            Err(Limited {
                what: limit.what(),
                retry_after: Duration::from_secs_f64((1.0 - refilled) / rate.per_second),
            })
        }
    }
}

impl Default for RateLimiter {
    fn default() -> Self {
        Self::new(RateLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_the_rate_and_keys_are_apart() {
        let limiter = RateLimiter::new(RateLimits {
            handshakes: Rate::per_minute(3),
            ..RateLimits::default()
        });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.check_at(Limit::HandshakeFromAddress, "1.2.3.4", t0).is_ok());
        }
        let refused = limiter
            .check_at(Limit::HandshakeFromAddress, "1.2.3.4", t0)
            .unwrap_err();
        assert_eq!(refused.retry_after_secs(), 20);
        // another address, and another limit, have their own buckets
        assert!(limiter.check_at(Limit::HandshakeFromAddress, "5.6.7.8", t0).is_ok());
        assert!(limiter.check_at(Limit::HandshakeWithKey, "1.2.3.4", t0).is_ok());
        // a third of a minute later, one more
        let later = t0 + Duration::from_secs(20);
        assert!(limiter.check_at(Limit::HandshakeFromAddress, "1.2.3.4", later).is_ok());
        assert!(limiter.check_at(Limit::HandshakeFromAddress, "1.2.3.4", later).is_err());
    }

    #[test]
    fn off_limits_nothing() {
        let limiter = RateLimiter::new(RateLimits::OFF);
        for _ in 0..10_000 {
            assert!(limiter.check(Limit::WriteByOrg, "org").is_ok());
        }
    }
}
