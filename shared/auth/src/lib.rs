//! # Tokens
//!
//! The handshake exchanges an organization's API key for an HS256 JWT; every other route
//! verifies that token statelessly with the same secret, which comes from configuration
//! (`SPOOL_JWT_SECRET`; Secrets Manager on AWS), never from code. A token names its subject,
//! its organization, its capabilities and, optionally, the companion library it was issued for.
//! API keys ([`ApiKey`]) are generated, parsed and hashed here too.

mod api_key;
pub mod rate;
mod upload;

pub use api_key::{API_KEY_PREFIX, ApiKey, random_secret, to_hex};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
pub use rate::{Limit, Limited, Rate, RateLimiter, RateLimits};
use serde::{Deserialize, Serialize};
pub use upload::UploadGrant;

/// How long a token lives: one day.
pub const TOKEN_TTL_SECONDS: i64 = 24 * 3600;
/// Who issues Spool's tokens (`iss`).
pub const ISSUER: &str = "spool";

fn issuer() -> String {
    ISSUER.to_owned()
}

/// Why a token or a secret was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The signing secret is too short to be safe.
    #[error("the token signing secret must be at least {min} bytes (got {got}); set SPOOL_JWT_SECRET")]
    WeakSecret {
        /// The minimum.
        min: usize,
        /// The secret's length.
        got: usize,
    },
    /// The request carries no token.
    #[error("send a token as `Authorization: Bearer <jwt>` (get one from POST /v1/handshake)")]
    MissingToken,
    /// The `Authorization` header is not `Bearer <token>`.
    #[error("the Authorization header must be `Bearer <jwt>` (get a token from POST /v1/handshake)")]
    MalformedAuthorization,
    /// The token has expired.
    #[error("the token has expired; get a new one from POST /v1/handshake")]
    Expired,
    /// The token is malformed, tampered with, signed with another key or has bad claims. The
    /// reason is kept for logs; callers see only that it is not valid.
    #[error(
        "the token is not valid (malformed, altered, or issued by another server); get a new one from POST /v1/handshake"
    )]
    Invalid(String),
    /// An API key that is malformed, unknown or does not match (the message never repeats it).
    #[error("the API key is not valid: {0}")]
    InvalidApiKey(String),
    /// The system's random number generator failed.
    #[error("no system randomness: {0}")]
    Random(String),
    /// An organization id that cannot be used.
    #[error("organization id `{0}` is invalid: use 1 to 64 letters, digits, `-` or `_`")]
    InvalidOrg(String),
}

/// What a token says about its bearer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Who issued it: [`ISSUER`] (tokens from before it was written read as Spool's).
    #[serde(default = "issuer")]
    pub iss: String,
    /// Who the token was issued to (a user, an API key, an agent).
    pub sub: String,
    /// The organization whose data the bearer may use.
    pub org: String,
    /// What the bearer may do beyond the basics (e.g. `agent`, `context_for_query`).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The companion library the token was issued for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_id: Option<String>,
    /// The client's protocol version at the handshake, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Issued at (seconds since the Unix epoch).
    pub iat: i64,
    /// Expires at (seconds since the Unix epoch).
    pub exp: i64,
}

impl Claims {
    /// Claims for `sub` in `org`, issued at `now` (seconds) and valid for a day.
    pub fn new(sub: impl Into<String>, org: impl Into<String>, now: i64) -> Self {
        Self {
            iss: issuer(),
            sub: sub.into(),
            org: org.into(),
            capabilities: Vec::new(),
            library_id: None,
            version: None,
            iat: now,
            exp: now + TOKEN_TTL_SECONDS,
        }
    }

    /// True when the token grants `capability`.
    pub fn can(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// The keys that sign and verify tokens. Each token names its key (`kid`, derived from the
/// secret, never revealing it), so a secret can be rotated without signing everyone out: the
/// previous secret still verifies its own tokens until a set time ([`TokenKeys::with_previous`]),
/// after which they are refused.
#[derive(Clone)]
pub struct TokenKeys {
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    previous: Option<PreviousKey>,
}

/// A secret being rotated out: it verifies, it never signs.
#[derive(Clone)]
struct PreviousKey {
    kid: String,
    decoding: DecodingKey,
    /// Until when (seconds since the Unix epoch) its tokens are accepted.
    until: i64,
}

/// A key's id: the first 8 bytes of the SHA-256 of `spool-kid` and the secret, in hex.
fn key_id(secret: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"spool-kid\n");
    hash.update(secret);
    to_hex(&hash.finalize()[..8])
}

fn check_secret(secret: &[u8]) -> Result<(), AuthError> {
    if secret.len() < TokenKeys::MIN_SECRET_BYTES {
        return Err(AuthError::WeakSecret {
            min: TokenKeys::MIN_SECRET_BYTES,
            got: secret.len(),
        });
    }
    Ok(())
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKeys(..)")
    }
}

impl TokenKeys {
    /// The shortest secret accepted: 256 bits, HS256's own strength.
    pub const MIN_SECRET_BYTES: usize = 32;

    /// Keys from a shared secret.
    pub fn new(secret: &[u8]) -> Result<Self, AuthError> {
        check_secret(secret)?;
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Ok(Self {
            kid: key_id(secret),
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            previous: None,
        })
    }

    /// The same keys, also accepting tokens signed with the `previous` secret until `until`
    /// (seconds since the Unix epoch): a rotation's window. Set it to at least a token's
    /// lifetime after the rotation ([`TOKEN_TTL_SECONDS`]) and nobody is signed out.
    pub fn with_previous(mut self, previous: &[u8], until: i64) -> Result<Self, AuthError> {
        check_secret(previous)?;
        self.previous = Some(PreviousKey {
            kid: key_id(previous),
            decoding: DecodingKey::from_secret(previous),
            until,
        });
        Ok(self)
    }

    /// The id of the key that signs (`kid` in every token's header).
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// Signs `claims` into a token.
    pub fn issue(&self, claims: &Claims) -> Result<String, AuthError> {
        check_org(&claims.org)?;
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(|e| AuthError::Invalid(e.to_string()))
    }

    /// Verifies a token's signature (with the key its `kid` names: the current one, or the
    /// previous one inside its window), algorithm, issuer and expiry, and returns its claims.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let claims: Claims = self.decode(token, &self.validation)?;
        check_org(&claims.org)?;
        if claims.iss != ISSUER {
            return Err(AuthError::Invalid(format!("issued by `{}`, not Spool", claims.iss)));
        }
        Ok(claims)
    }

    /// Verifies a bearer's token ([`Self::verify`]): a companion's token, issued for a
    /// library, is refused here. It only enables a chat's capabilities
    /// ([`Self::verify_companion`]), so a page or process that gets one from the companion cannot
    /// act as the person.
    pub fn verify_bearer(&self, token: &str) -> Result<Claims, AuthError> {
        let claims = self.verify(token)?;
        if claims.library_id.is_some() {
            return Err(AuthError::Invalid(
                "a companion's token only enables capabilities; sign in with an API key".to_owned(),
            ));
        }
        Ok(claims)
    }

    /// Verifies a companion's token ([`Self::verify`]): one issued for a library.
    pub fn verify_companion(&self, token: &str) -> Result<Claims, AuthError> {
        let claims = self.verify(token)?;
        if claims.library_id.is_none() {
            return Err(AuthError::Invalid(
                "not a companion's token (it names no library)".to_owned(),
            ));
        }
        Ok(claims)
    }

    /// The key a token's header names: the current one when it names none.
    fn key_for(&self, token: &str) -> Result<&DecodingKey, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| AuthError::Invalid(e.to_string()))?;
        match (header.kid.as_deref(), &self.previous) {
            (None, _) => Ok(&self.decoding),
            (Some(kid), _) if kid == self.kid => Ok(&self.decoding),
            (Some(kid), Some(previous)) if kid == previous.kid => {
                if unix_now() <= previous.until {
                    Ok(&previous.decoding)
                } else {
                    Err(AuthError::Invalid(
                        "signed with a rotated-out key after its window".to_owned(),
                    ))
                }
            }
            (Some(kid), _) => Err(AuthError::Invalid(format!("signed with an unknown key `{kid}`"))),
        }
    }

    /// A token's claims, checked by `validation` (an expired one is [`AuthError::Expired`]). A
    /// token that names no key (issued before keys had ids, or an upload grant) is tried with
    /// the current key, then with the previous one inside its window.
    fn decode<T: serde::de::DeserializeOwned>(&self, token: &str, validation: &Validation) -> Result<T, AuthError> {
        use jsonwebtoken::errors::ErrorKind;
        let decode = |key: &DecodingKey| {
            jsonwebtoken::decode::<T>(token, key, validation)
                .map(|data| data.claims)
                .map_err(|e| match e.kind() {
                    ErrorKind::ExpiredSignature => AuthError::Expired,
                    _ => AuthError::Invalid(e.to_string()),
                })
        };
        let named = jsonwebtoken::decode_header(token)
            .map_err(|e| AuthError::Invalid(e.to_string()))?
            .kid;
        match (&named, &self.previous) {
            (None, Some(previous)) if unix_now() <= previous.until => {
                decode(&self.decoding).or_else(|current| decode(&previous.decoding).map_err(|_| current))
            }
            _ => decode(self.key_for(token)?),
        }
    }
}

/// Checks that an organization id is safe to use as one segment of a storage key.
pub fn check_org(org: &str) -> Result<(), AuthError> {
    let ok = (1..=64).contains(&org.len()) && org.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(AuthError::InvalidOrg(org.to_owned()))
    }
}

/// What a caller may do under [`Access::Open`]: everything.
pub const OPEN_CAPABILITIES: &[&str] = &["agent", "context_for_query"];

/// Who may call: everyone as one organization (with every capability), or the bearers of
/// valid tokens.
#[derive(Debug, Clone)]
pub enum Access {
    /// No authorization (`spool serve --no-auth`, only on a loopback address): every request
    /// acts for this organization.
    Open {
        /// The organization every request acts for.
        org: String,
    },
    /// A bearer token (`Authorization: Bearer <jwt>`, or `?token=` on the routes that read
    /// streams, for browsers' EventSource, which cannot set headers) verified with these keys;
    /// it acts for its organization.
    Tokens(Box<TokenKeys>),
}

impl Access {
    /// The caller of a request with this `Authorization` header, at `now` (seconds since the
    /// Unix epoch). `query` is the query string of a request that may carry its token there
    /// (only reads of streams: a token in a URL ends up in logs and histories, so nothing that
    /// changes data takes one); `None` elsewhere. A request with an `Authorization` header is
    /// judged by it alone.
    pub fn caller(&self, authorization: Option<&str>, query: Option<&str>, now: i64) -> Result<Claims, AuthError> {
        match self {
            Self::Open { org } => {
                let mut claims = Claims::new("local", org.clone(), now);
                claims.capabilities = OPEN_CAPABILITIES.iter().map(|c| (*c).to_owned()).collect();
                Ok(claims)
            }
            Self::Tokens(keys) => {
                let token = match authorization {
                    Some(header) => bearer(header).ok_or(AuthError::MalformedAuthorization)?,
                    None => query_token(query).ok_or(AuthError::MissingToken)?,
                };
                keys.verify_bearer(token)
            }
        }
    }
}

/// The `token` query parameter. Tokens are base64url and dots, so they need no decoding.
fn query_token(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, v)| *k == "token" && !v.is_empty())
        .map(|(_, v)| v)
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    pub(crate) fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    #[test]
    fn a_token_carries_the_designs_claims_and_names_its_key() {
        let keys = TokenKeys::new(SECRET).unwrap();
        let mut claims = Claims::new("key:k1", "org_a", now());
        claims.library_id = Some("lib_1".to_owned());
        claims.version = Some("1".to_owned());
        claims.capabilities.push("context_for_query".to_owned());
        let token = keys.issue(&claims).unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(keys.kid()));
        assert!(!keys.kid().is_empty() && !String::from_utf8_lossy(SECRET).contains(keys.kid()));
        let payload = token.split('.').nth(1).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&base64_url(payload)).unwrap();
        for claim in ["iss", "sub", "library_id", "version", "iat", "exp", "capabilities"] {
            assert!(json.get(claim).is_some(), "{claim} in {json}");
        }
        assert_eq!(json["iss"], ISSUER);
        assert_eq!(
            json["exp"].as_i64().unwrap() - json["iat"].as_i64().unwrap(),
            TOKEN_TTL_SECONDS
        );
        assert_eq!(keys.verify(&token).unwrap(), claims);
        // Another issuer's token, even signed with the same secret, is not Spool's.
        claims.iss = "someone-else".to_owned();
        assert!(matches!(
            keys.verify(&keys.issue(&claims).unwrap()),
            Err(AuthError::Invalid(_))
        ));
    }

    #[test]
    fn a_rotated_out_key_verifies_its_tokens_during_its_window_only() {
        const NEW: &[u8] = b"fedcba9876543210fedcba9876543210";
        let old = TokenKeys::new(SECRET).unwrap();
        let token = old.issue(&Claims::new("u", "org_a", now())).unwrap();
        // Rotated: the new secret signs, the old one is accepted for a window.
        let during = TokenKeys::new(NEW)
            .unwrap()
            .with_previous(SECRET, now() + 3600)
            .unwrap();
        assert_ne!(during.kid(), old.kid());
        assert_eq!(during.verify(&token).unwrap().sub, "u");
        let fresh = during.issue(&Claims::new("v", "org_a", now())).unwrap();
        assert_eq!(during.verify(&fresh).unwrap().sub, "v");
        assert!(
            old.verify(&fresh).is_err(),
            "the old secret does not verify the new key's tokens"
        );
        // After the window, the old key's tokens are refused.
        let after = TokenKeys::new(NEW).unwrap().with_previous(SECRET, now() - 1).unwrap();
        assert!(matches!(after.verify(&token), Err(AuthError::Invalid(_))));
        assert!(matches!(
            TokenKeys::new(NEW).unwrap().verify(&token),
            Err(AuthError::Invalid(_))
        ));
        // A token from before keys had ids is covered by the window too.
        let unnamed = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &Claims::new("w", "org_a", now()),
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        assert_eq!(during.verify(&unnamed).unwrap().sub, "w");
        assert!(after.verify(&unnamed).is_err());
    }

    #[test]
    fn a_companions_token_enables_capabilities_and_is_no_bearers() {
        let keys = TokenKeys::new(SECRET).unwrap();
        let person = keys.issue(&Claims::new("key:k", "org_a", now())).unwrap();
        let mut claims = Claims::new("key:k", "org_a", now());
        claims.library_id = Some("lib_1".to_owned());
        let companion = keys.issue(&claims).unwrap();
        let access = Access::Tokens(Box::new(keys.clone()));
        assert!(access.caller(Some(&format!("Bearer {person}")), None, now()).is_ok());
        assert!(matches!(
            access.caller(Some(&format!("Bearer {companion}")), None, now()),
            Err(AuthError::Invalid(_))
        ));
        assert!(keys.verify_companion(&companion).is_ok());
        assert!(keys.verify_companion(&person).is_err());
    }

    fn base64_url(text: &str) -> Vec<u8> {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut bits = 0u32;
        let mut count = 0;
        let mut out = Vec::new();
        for c in text.bytes() {
            let v = alphabet.iter().position(|a| *a == c).unwrap() as u32;
            bits = (bits << 6) | v;
            count += 6;
            if count >= 8 {
                count -= 8;
                out.push((bits >> count) as u8);
                bits &= (1 << count) - 1;
            }
        }
        out
    }

    #[test]
    fn a_token_verifies_with_its_own_secret_only() {
        let keys = TokenKeys::new(SECRET).unwrap();
        let mut claims = Claims::new("user-1", "org_a", now());
        claims.capabilities.push("agent".to_owned());
        let token = keys.issue(&claims).unwrap();
        assert_eq!(keys.verify(&token).unwrap(), claims);
        assert!(claims.can("agent") && !claims.can("admin"));

        let other = TokenKeys::new(b"another secret, 32 bytes or more!").unwrap();
        assert!(matches!(other.verify(&token), Err(AuthError::Invalid(_))));
    }

    #[test]
    fn tampered_expired_and_malformed_tokens_are_refused() {
        let keys = TokenKeys::new(SECRET).unwrap();
        let token = keys.issue(&Claims::new("u", "org_a", now())).unwrap();
        // Flip one character of the payload.
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let flipped = if parts[1].ends_with('A') { 'B' } else { 'A' };
        parts[1].pop();
        parts[1].push(flipped);
        assert!(keys.verify(&parts.join(".")).is_err());

        let old = keys
            .issue(&Claims::new("u", "org_a", now() - 2 * TOKEN_TTL_SECONDS))
            .unwrap();
        assert!(matches!(keys.verify(&old), Err(AuthError::Expired)));
        for junk in ["", "a.b.c", "not a token"] {
            assert!(keys.verify(junk).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn weak_secrets_and_bad_orgs_are_refused() {
        assert!(matches!(TokenKeys::new(b"short"), Err(AuthError::WeakSecret { .. })));
        let keys = TokenKeys::new(SECRET).unwrap();
        for org in ["", "a/b", "..", &"x".repeat(65)] {
            assert!(keys.issue(&Claims::new("u", org, now())).is_err(), "{org:?}");
        }
    }

    #[test]
    fn bearer_headers_parse() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }

    #[test]
    fn access_takes_a_bearer_header_or_a_token_parameter() {
        let keys = TokenKeys::new(SECRET).unwrap();
        let token = keys.issue(&Claims::new("s", "acme", now())).unwrap();
        let access = Access::Tokens(Box::new(keys));
        let header = format!("Bearer {token}");
        assert_eq!(access.caller(Some(&header), None, now()).unwrap().org, "acme");
        let query = format!("offset=-1&token={token}&live=sse");
        assert_eq!(access.caller(None, Some(&query), now()).unwrap().org, "acme");
        assert!(matches!(
            access.caller(None, Some("token="), now()),
            Err(AuthError::MissingToken)
        ));
        assert!(matches!(
            access.caller(Some("Basic abc"), None, now()),
            Err(AuthError::MalformedAuthorization)
        ));
        // A request with a header is judged by it alone, never by a token in its URL.
        for bad in ["Basic abc", "Bearer nope", "Bearer"] {
            assert!(access.caller(Some(bad), Some(&query), now()).is_err(), "{bad}");
        }
        assert!(matches!(
            access.caller(Some("Bearer nope"), None, now()),
            Err(AuthError::Invalid(_))
        ));
        let open = Access::Open {
            org: "local".to_owned(),
        };
        assert_eq!(open.caller(None, None, now()).unwrap().org, "local");
    }
}
