//! Upload grants: short-lived, single-purpose tokens in the URL of Spool's own upload route
//! (`spool serve` has no S3 to pre-sign a URL for). A grant names one attachment of one chat,
//! its size and type, and expires in minutes. It is signed with the tokens' secret but for
//! another audience (`spool-upload`), so a grant is never a bearer token (a bearer check
//! refuses any token with an audience) and a bearer token is never a grant (a grant must
//! have this audience).

use jsonwebtoken::{Algorithm, Validation};
use serde::{Deserialize, Serialize};

use crate::{AuthError, TokenKeys, check_org};

/// The audience of upload grants.
const AUDIENCE: &str = "spool-upload";

/// What an upload grant allows: sending the bytes of one attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadGrant {
    /// The organization.
    pub org: String,
    /// The chat.
    pub session_id: String,
    /// The attachment.
    pub attachment_id: String,
    /// Its declared size: exactly this many bytes are taken.
    pub size: u64,
    /// Its declared media type.
    pub content_type: String,
    /// Expires at (seconds since the Unix epoch).
    pub exp: i64,
}

#[derive(Serialize, Deserialize)]
struct Signed {
    sub: String,
    aud: String,
    #[serde(flatten)]
    grant: UploadGrant,
}

impl TokenKeys {
    /// Signs an upload grant.
    pub fn issue_upload(&self, grant: &UploadGrant) -> Result<String, AuthError> {
        check_org(&grant.org)?;
        let signed = Signed {
            sub: "upload".to_owned(),
            aud: AUDIENCE.to_owned(),
            grant: grant.clone(),
        };
        self.sign(&signed)
    }

    /// Verifies an upload grant: signature, audience and expiry.
    pub fn verify_upload(&self, token: &str) -> Result<UploadGrant, AuthError> {
        let mut validation = Validation::new(Algorithm::HS256);
        // One process's clock signs and checks a grant: no skew to allow for.
        validation.leeway = 0;
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        let signed: Signed = self.decode(token, &validation)?;
        check_org(&signed.grant.org)?;
        Ok(signed.grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Claims,
        tests::{SECRET, now},
    };

    fn grant(exp: i64) -> UploadGrant {
        UploadGrant {
            org: "org_a".to_owned(),
            session_id: "ses_1".to_owned(),
            attachment_id: "att_1".to_owned(),
            size: 5,
            content_type: "text/plain".to_owned(),
            exp,
        }
    }

    #[test]
    fn a_grant_is_not_a_bearer_token_and_a_bearer_token_is_not_a_grant() {
        let keys = TokenKeys::new(SECRET).unwrap();
        let exp = now() + 600;
        let upload = keys.issue_upload(&grant(exp)).unwrap();
        assert_eq!(keys.verify_upload(&upload).unwrap(), grant(exp));
        assert!(
            matches!(keys.verify(&upload), Err(AuthError::Invalid(_))),
            "never a bearer token"
        );
        let bearer = keys.issue(&Claims::new("key:k", "org_a", now())).unwrap();
        assert!(
            matches!(keys.verify_upload(&bearer), Err(AuthError::Invalid(_))),
            "never a grant"
        );
        let expired = keys.issue_upload(&grant(now() - 60)).unwrap();
        assert!(matches!(keys.verify_upload(&expired), Err(AuthError::Expired)));
        let other = TokenKeys::new(b"another secret, 32 bytes or more!").unwrap();
        assert!(matches!(other.verify_upload(&upload), Err(AuthError::Invalid(_))));
    }
}
