//! # Backoff
//!
//! The one backoff every retry loop uses (conditional-write conflicts, tail mismatches, pages
//! written concurrently): full jitter, a random sleep between 1 ms and a cap that doubles with
//! each attempt from 2 ms to 200 ms, so writers that collided spread out at once and a long run
//! of conflicts never sleeps long.

use std::time::Duration;

/// The sleep before retry `attempt` (from 0).
pub fn delay(attempt: u32) -> Duration {
    let cap = (2u64 << attempt.min(7)).min(200);
    Duration::from_millis(fastrand::u64(1..=cap))
}

/// Sleeps before retry `attempt`.
pub async fn backoff(attempt: u32) {
    tokio::time::sleep(delay(attempt)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_a_cap() {
        for _ in 0..100 {
            assert!(delay(0) <= Duration::from_millis(2));
            assert!(delay(3) <= Duration::from_millis(16));
            assert!(delay(30) <= Duration::from_millis(200));
            assert!(delay(30) >= Duration::from_millis(1));
        }
    }
}
