//! # The origin secret: what a request must carry to have come through the CDN
//!
//! On AWS, CloudFront adds a secret header ([`ORIGIN_HEADER`]) to every request it sends to
//! Spool's functions; an [`OriginCheck`] holds the secret's accepted values (the current one and,
//! while it rotates, the previous one) and says whether a request carries one. The HTTP edge
//! refuses a request that does not (`spool_edge::only_through_cdn`); the secret comes from
//! Secrets Manager (`SPOOL_ORIGIN_SECRET`), like the signing secret, and is kept fresh the same
//! way.

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The header CloudFront adds to the requests it sends to Spool's functions.
pub const ORIGIN_HEADER: &str = "x-spool-origin";

/// What a request must carry in [`ORIGIN_HEADER`]: one of the secret's values (the current one,
/// and while the secret rotates, the one CloudFront may still send); only digests are kept.
/// Clones share the values: [`OriginCheck::replace`] changes every clone's.
#[derive(Clone)]
pub struct OriginCheck {
    digests: Arc<std::sync::RwLock<Vec<[u8; 32]>>>,
}

impl std::fmt::Debug for OriginCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OriginCheck(..)")
    }
}

fn digest(value: &[u8]) -> [u8; 32] {
    Sha256::digest(value).into()
}

impl OriginCheck {
    /// Requests must carry `secret`.
    pub fn new(secret: &str) -> Self {
        Self::any_of(&[secret])
    }

    /// Requests must carry one of `secrets`.
    pub fn any_of(secrets: &[&str]) -> Self {
        Self {
            digests: Arc::new(std::sync::RwLock::new(
                secrets.iter().map(|secret| digest(secret.as_bytes())).collect(),
            )),
        }
    }

    /// Makes every clone accept `other`'s values from now on.
    pub fn replace(&self, other: &OriginCheck) {
        let values = other
            .digests
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        *self.digests.write().unwrap_or_else(std::sync::PoisonError::into_inner) = values;
    }

    /// Whether a request with these headers came through the CDN. Digests of equal length are
    /// compared, so the comparison's time says nothing about the secret.
    pub fn admits(&self, headers: &http::HeaderMap) -> bool {
        let Some(value) = headers.get(ORIGIN_HEADER) else {
            return false;
        };
        let presented = digest(value.as_bytes());
        self.digests
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&presented)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_accepts_both_values_until_the_old_one_is_dropped_everywhere() {
        let headers = |value: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(ORIGIN_HEADER, value.parse().unwrap());
            headers
        };
        let check = OriginCheck::new("old");
        let held = check.clone();
        check.replace(&OriginCheck::any_of(&["new", "old"]));
        assert!(held.admits(&headers("old")) && held.admits(&headers("new")));
        check.replace(&OriginCheck::new("new"));
        assert!(!held.admits(&headers("old")) && held.admits(&headers("new")));
    }
}
