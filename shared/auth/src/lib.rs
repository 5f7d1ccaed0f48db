//! # Tokens
//!
//! The handshake exchanges an organization's API key for an HS256 JWT; every other route
//! verifies that token statelessly with the same secret, which comes from configuration
//! (`SPOOL_JWT_SECRET`; Secrets Manager on AWS), never from code. A token names its subject,
//! its organization, its capabilities and, optionally, the companion library it was issued for.
//! API keys ([`ApiKey`]) are generated, parsed and hashed here too, and the origin secret a
//! request must carry to have come through the CDN is checked here ([`OriginCheck`]).

mod api_key;
mod keys;
mod origin;
pub mod rate;
mod read;
mod upload;
mod webhook;

pub use api_key::{API_KEY_PREFIX, ApiKey, random_secret, to_hex};
pub use keys::TokenKeys;
pub use origin::{ORIGIN_HEADER, OriginCheck};
pub use rate::{Limit, Limited, Rate, RateLimiter, RateLimits};
pub use read::{READ_WINDOW_SECONDS, ReadGrant};
use serde::{Deserialize, Serialize};
pub use upload::UploadGrant;
pub use webhook::{WebhookKeys, standard_webhook_secret};

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

    /// True when the token is a runner's ([`Capability::Runner`]): it reaches the runner routes
    /// and nothing else ([`RUNNER_ONLY`]).
    pub fn is_runner(&self) -> bool {
        self.can(Capability::Runner.as_str())
    }
}

/// The refusal of a runner's token on every route but the runner routes.
pub const RUNNER_ONLY: &str = "this token is a runner's: it can only take and run turns at /v1/runner/…";

/// The refusal of any other token on the runner routes.
pub const RUNNERS_ONLY: &str = "only runners take and run turns here: run `spool runner` with a key made by \
     `spool admin create-api-key ORG --capability runner`";

/// Checks that an organization id is safe to use as one segment of a storage key.
pub fn check_org(org: &str) -> Result<(), AuthError> {
    let ok = (1..=64).contains(&org.len()) && org.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(AuthError::InvalidOrg(org.to_owned()))
    }
}

/// What a token may let its bearer do beyond the basics: the capabilities Spool and its
/// companion know, as tokens, keys and sessions spell them ([`Capability::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Post into chats as an agent (`POST /v1/sessions/{id}/agent-messages`).
    Agent,
    /// What the person's companion says about a message reaches the agent's prompt (the fourth
    /// source design's `context_for_query`).
    ContextForQuery,
    /// Notes are captured into the person's companion library: "Save to notes" on a message,
    /// and an agent's proposed capture once the person approves it (`capture_ingest`).
    CaptureIngest,
    /// Take and run the organization's CLI turns as a runner (`spool runner`), and nothing
    /// else: a key with it carries no other capability, and its tokens reach only the runner
    /// routes (`/v1/runner/…`).
    Runner,
    /// The person's companion offers the tools of the MCP servers it runs on their machine to
    /// the chats it enabled this for (`mcp_tools`); without it those tools are absent.
    McpTools,
}

impl Capability {
    /// Every capability.
    pub const ALL: [Self; 5] = [
        Self::Agent,
        Self::ContextForQuery,
        Self::CaptureIngest,
        Self::Runner,
        Self::McpTools,
    ];

    /// Its name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::ContextForQuery => "context_for_query",
            Self::CaptureIngest => "capture_ingest",
            Self::Runner => "runner",
            Self::McpTools => "mcp_tools",
        }
    }

    /// The capability named `name`, if Spool knows it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a caller may do under [`Access::Open`]: everything a person may (the runner routes
/// take an open caller as it is).
pub const OPEN_CAPABILITIES: &[&str] = &[
    Capability::Agent.as_str(),
    Capability::ContextForQuery.as_str(),
    Capability::CaptureIngest.as_str(),
];

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
    query_param(query, "token")
}

/// The `read_token` query parameter: a [`ReadGrant`].
pub fn read_token(query: Option<&str>) -> Option<&str> {
    query_param(query, "read_token")
}

fn query_param<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, v)| *k == name && !v.is_empty())
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
    use jsonwebtoken::{Algorithm, EncodingKey, Header};

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
        assert_eq!(header.kid, Some(keys.kid()));
        assert!(!keys.kid().is_empty() && !String::from_utf8_lossy(SECRET).contains(&keys.kid()));
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
    fn a_listed_verifier_accepts_its_tokens_without_signing_and_clones_share_a_replacement() {
        const NEXT: &[u8] = b"fedcba9876543210fedcba9876543210";
        // The next secret is staged: these keys accept its tokens, and still sign with the current one.
        let keys = TokenKeys::new(SECRET).unwrap().with_verifier(NEXT).unwrap();
        let next = TokenKeys::new(NEXT).unwrap();
        let from_next = next.issue(&Claims::new("n", "org_a", now())).unwrap();
        assert_eq!(keys.verify(&from_next).unwrap().sub, "n");
        assert_eq!(keys.kids(), vec![TokenKeys::new(SECRET).unwrap().kid(), next.kid()]);
        let from_here = keys.issue(&Claims::new("h", "org_a", now())).unwrap();
        assert_eq!(jsonwebtoken::decode_header(&from_here).unwrap().kid, Some(keys.kid()));
        assert_ne!(keys.kid(), next.kid());
        // Listing the signing secret again, or twice, changes nothing.
        assert_eq!(keys.clone().with_verifier(SECRET).unwrap().kids().len(), 2);
        assert_eq!(keys.clone().with_verifier(NEXT).unwrap().kids().len(), 2);
        // A replacement reaches every clone: a router holding one sees the new keys.
        let held = keys.clone();
        keys.replace(&TokenKeys::new(NEXT).unwrap().with_verifier(SECRET).unwrap());
        assert_eq!(held.kid(), next.kid());
        assert_eq!(held.verify(&from_here).unwrap().sub, "h");
        keys.replace(&TokenKeys::new(NEXT).unwrap());
        assert!(matches!(held.verify(&from_here), Err(AuthError::Invalid(_))));
        assert!(TokenKeys::new(SECRET).unwrap().with_verifier(b"short").is_err());
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
