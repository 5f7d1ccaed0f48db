//! Read grants: short-lived tokens that let their bearer read one stream, made so that a CDN
//! can serve one origin answer to every reader of a chat.
//!
//! A live reader through a CDN is cheap only if the CDN can answer many readers with one origin
//! request, which it can do only for requests with the same cache key. A bearer token is
//! personal, so it cannot be in a shared key; leaving it out would let one organization's
//! reader be served another's cached answer. A read grant solves both: it names one stream of
//! one organization and expires at the end of a fixed time window, and it carries nothing
//! else (no subject, no issue time, no nonce), so every grant for that stream issued in the same
//! window is the same string. The cache key keeps the grant, readers of a chat share it, and a
//! reader without a valid grant for that stream never matches a cached answer: the origin sees
//! its request and refuses it.
//!
//! A grant is signed with the tokens' secret for its own audience (`spool-read`), so it is never
//! a bearer token, and a bearer token is never a grant. It cannot be revoked: it lives at most
//! [`READ_WINDOW_SECONDS`] × 2.

use jsonwebtoken::{Algorithm, Validation};
use serde::{Deserialize, Serialize};

use crate::{AuthError, TokenKeys, check_org};

/// The audience of read grants.
const AUDIENCE: &str = "spool-read";

/// Grants issued within one window of this many seconds (counted from the Unix epoch) are the
/// same string; each expires at the end of the window after its own, so it lives 5 to 10
/// minutes.
pub const READ_WINDOW_SECONDS: i64 = 300;

/// What a read grant allows: reading one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadGrant {
    /// The organization.
    pub org: String,
    /// The stream, as its owner names it (`sessions/{id}`, not the stored `o/{org}/…`).
    pub path: String,
    /// Expires at (seconds since the Unix epoch): the end of the window after the one it was
    /// issued in.
    pub exp: i64,
}

impl ReadGrant {
    /// The grant for `path` of `org` at `now` (seconds since the Unix epoch).
    pub fn at(org: impl Into<String>, path: impl Into<String>, now: i64) -> Self {
        Self {
            org: org.into(),
            path: path.into(),
            exp: (now.div_euclid(READ_WINDOW_SECONDS) + 2) * READ_WINDOW_SECONDS,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Signed {
    aud: String,
    #[serde(flatten)]
    grant: ReadGrant,
}

impl TokenKeys {
    /// Signs a read grant. The same grant signed with the same key is the same string.
    pub fn issue_read(&self, grant: &ReadGrant) -> Result<String, AuthError> {
        check_org(&grant.org)?;
        self.sign(&Signed {
            aud: AUDIENCE.to_owned(),
            grant: grant.clone(),
        })
    }

    /// Verifies a read grant: signature, audience and expiry.
    pub fn verify_read(&self, token: &str) -> Result<ReadGrant, AuthError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "aud"]);
        let signed: Signed = self.decode(token, &validation)?;
        check_org(&signed.grant.org)?;
        Ok(signed.grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Claims, UploadGrant,
        tests::{SECRET, now},
    };

    #[test]
    fn grants_of_one_window_are_one_string_and_name_one_stream() {
        let keys = TokenKeys::new(SECRET).unwrap();
        let start = 1_800_000_000 - 1_800_000_000 % READ_WINDOW_SECONDS;
        let a = keys.issue_read(&ReadGrant::at("org_a", "sessions/s1", start)).unwrap();
        let b = keys
            .issue_read(&ReadGrant::at("org_a", "sessions/s1", start + READ_WINDOW_SECONDS - 1))
            .unwrap();
        assert_eq!(a, b, "one window, one string: a CDN's cache key can hold it");
        let next = keys
            .issue_read(&ReadGrant::at("org_a", "sessions/s1", start + READ_WINDOW_SECONDS))
            .unwrap();
        assert_ne!(a, next);
        let other_stream = keys.issue_read(&ReadGrant::at("org_a", "sessions/s2", start)).unwrap();
        let other_org = keys.issue_read(&ReadGrant::at("org_b", "sessions/s1", start)).unwrap();
        assert_ne!(a, other_stream);
        assert_ne!(a, other_org);
        let grant = ReadGrant::at("org_a", "sessions/s1", start);
        assert_eq!(grant.exp, start + 2 * READ_WINDOW_SECONDS);
    }

    #[test]
    fn a_grant_is_only_a_grant() {
        let keys = TokenKeys::new(SECRET).unwrap();
        let grant = ReadGrant::at("org_a", "sessions/s1", now());
        let token = keys.issue_read(&grant).unwrap();
        assert_eq!(keys.verify_read(&token).unwrap(), grant);
        assert!(
            matches!(keys.verify(&token), Err(AuthError::Invalid(_))),
            "never a bearer token"
        );
        let bearer = keys.issue(&Claims::new("key:k", "org_a", now())).unwrap();
        assert!(matches!(keys.verify_read(&bearer), Err(AuthError::Invalid(_))));
        let upload = keys
            .issue_upload(&UploadGrant {
                org: "org_a".to_owned(),
                session_id: "s1".to_owned(),
                attachment_id: "a".to_owned(),
                size: 1,
                content_type: "text/plain".to_owned(),
                exp: now() + 60,
            })
            .unwrap();
        assert!(matches!(keys.verify_read(&upload), Err(AuthError::Invalid(_))));
        let expired = keys
            .issue_read(&ReadGrant::at("org_a", "sessions/s1", now() - 3 * READ_WINDOW_SECONDS))
            .unwrap();
        assert!(matches!(keys.verify_read(&expired), Err(AuthError::Expired)));
        let other = TokenKeys::new(b"another secret, 32 bytes or more!").unwrap();
        assert!(matches!(other.verify_read(&token), Err(AuthError::Invalid(_))));
    }
}
