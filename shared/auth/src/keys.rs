//! The keys that sign and verify tokens, and their rotation.

use std::sync::{Arc, PoisonError, RwLock};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::Serialize;

use crate::{AuthError, Claims, ISSUER, check_org, to_hex};

/// The keys that sign and verify tokens. Each token names its key (`kid`, derived from the
/// secret, never revealing it), so a secret can be rotated without signing everyone out:
/// - a rotated-out secret still verifies its own tokens until a set time
///   ([`TokenKeys::with_previous`], for `SPOOL_JWT_PREVIOUS_SECRET`);
/// - a secret that is coming in or has just gone out (Secrets Manager's `AWSPENDING` and
///   `AWSPREVIOUS` stages) verifies for as long as it is listed ([`TokenKeys::with_verifier`]).
///
/// Clones share one key ring: [`TokenKeys::replace`] changes the keys of every clone at once,
/// so a process refreshes its secrets while it serves.
#[derive(Clone)]
pub struct TokenKeys {
    ring: Arc<RwLock<Arc<KeySet>>>,
}

/// One generation of keys: the one that signs, and the others that only verify.
#[derive(Clone)]
struct KeySet {
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    others: Vec<OtherKey>,
}

/// A secret that verifies, never signs.
#[derive(Clone)]
struct OtherKey {
    kid: String,
    decoding: DecodingKey,
    /// Until when (seconds since the Unix epoch) its tokens are accepted; `None`: while listed.
    until: Option<i64>,
}

impl OtherKey {
    fn open(&self) -> bool {
        self.until.is_none_or(|until| unix_now() <= until)
    }
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
        write!(f, "TokenKeys({:?})", self.kids())
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
        Ok(Self::of(KeySet {
            kid: key_id(secret),
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            others: Vec::new(),
        }))
    }

    fn of(set: KeySet) -> Self {
        Self {
            ring: Arc::new(RwLock::new(Arc::new(set))),
        }
    }

    fn set(&self) -> Arc<KeySet> {
        self.ring.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// These keys (on a ring of their own), also accepting tokens signed with `secret`.
    fn with_other(self, secret: &[u8], until: Option<i64>) -> Result<Self, AuthError> {
        check_secret(secret)?;
        let mut set = (*self.set()).clone();
        let kid = key_id(secret);
        if kid != set.kid && !set.others.iter().any(|other| other.kid == kid) {
            set.others.push(OtherKey {
                kid,
                decoding: DecodingKey::from_secret(secret),
                until,
            });
        }
        Ok(Self::of(set))
    }

    /// The same keys, also accepting tokens signed with the `previous` secret until `until`
    /// (seconds since the Unix epoch): a rotation's window. Set it to at least a token's
    /// lifetime after the rotation ([`crate::TOKEN_TTL_SECONDS`]) and nobody is signed out.
    pub fn with_previous(self, previous: &[u8], until: i64) -> Result<Self, AuthError> {
        self.with_other(previous, Some(until))
    }

    /// The same keys, also accepting tokens signed with `secret`, for as long as these keys
    /// are in use: a secret about to sign (so tokens from processes that already sign with it
    /// verify here), or one that just stopped.
    pub fn with_verifier(self, secret: &[u8]) -> Result<Self, AuthError> {
        self.with_other(secret, None)
    }

    /// Makes every clone of these keys use `other`'s keys from now on.
    pub fn replace(&self, other: &TokenKeys) {
        let set = other.set();
        *self.ring.write().unwrap_or_else(PoisonError::into_inner) = set;
    }

    /// The id of the key that signs (`kid` in every token's header).
    pub fn kid(&self) -> String {
        self.set().kid.clone()
    }

    /// The ids of every key that verifies, the signing one first.
    pub fn kids(&self) -> Vec<String> {
        let set = self.set();
        std::iter::once(set.kid.clone())
            .chain(set.others.iter().map(|other| other.kid.clone()))
            .collect()
    }

    /// Signs `claims` with the current key, naming it in the header.
    pub(crate) fn sign<T: Serialize>(&self, claims: &T) -> Result<String, AuthError> {
        let set = self.set();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(set.kid.clone());
        jsonwebtoken::encode(&header, claims, &set.encoding).map_err(|e| AuthError::Invalid(e.to_string()))
    }

    /// Signs `claims` into a token.
    pub fn issue(&self, claims: &Claims) -> Result<String, AuthError> {
        check_org(&claims.org)?;
        self.sign(claims)
    }

    /// Verifies a token's signature (with the key its `kid` names: the current one, or another
    /// one while it is accepted), algorithm, issuer and expiry, and returns its claims.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let validation = self.set().validation.clone();
        let claims: Claims = self.decode(token, &validation)?;
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

    /// A token's claims, checked by `validation` (an expired one is [`AuthError::Expired`]),
    /// with the key its header names. A token that names no key (issued before keys had ids)
    /// is tried with the current key, then with each other accepted one.
    pub(crate) fn decode<T: serde::de::DeserializeOwned>(
        &self,
        token: &str,
        validation: &Validation,
    ) -> Result<T, AuthError> {
        use jsonwebtoken::errors::ErrorKind;
        let decode = |key: &DecodingKey| {
            jsonwebtoken::decode::<T>(token, key, validation)
                .map(|data| data.claims)
                .map_err(|e| match e.kind() {
                    ErrorKind::ExpiredSignature => AuthError::Expired,
                    _ => AuthError::Invalid(e.to_string()),
                })
        };
        let set = self.set();
        let header = jsonwebtoken::decode_header(token).map_err(|e| AuthError::Invalid(e.to_string()))?;
        let Some(kid) = header.kid.as_deref() else {
            return set
                .others
                .iter()
                .filter(|other| other.open())
                .fold(decode(&set.decoding), |found, other| {
                    found.or_else(|current| decode(&other.decoding).map_err(|_| current))
                });
        };
        if kid == set.kid {
            return decode(&set.decoding);
        }
        match set.others.iter().find(|other| other.kid == kid) {
            Some(other) if other.open() => decode(&other.decoding),
            Some(_) => Err(AuthError::Invalid(
                "signed with a rotated-out key after its window".to_owned(),
            )),
            None => Err(AuthError::Invalid(format!("signed with an unknown key `{kid}`"))),
        }
    }
}
