//! # API keys
//!
//! An API key is `spool_{key_id}_{secret}`: a public id (16 hex digits) by which the directory
//! finds the key's record, and a 256-bit secret (64 hex digits) of which the directory keeps
//! only the SHA-256. A fast hash is right here: the secret is random, so there is nothing to
//! guess a dictionary of, and the handshake stays one hash per call.

use sha2::{Digest, Sha256};

use crate::AuthError;

/// The text every API key starts with, so leaked keys are easy to recognise and scan for.
pub const API_KEY_PREFIX: &str = "spool_";

const KEY_ID_BYTES: usize = 8;
const SECRET_BYTES: usize = 32;

/// An API key, as its holder has it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    key_id: String,
    secret: String,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKey({}, ..)", self.key_id)
    }
}

impl ApiKey {
    /// A new random key.
    pub fn generate() -> Result<Self, AuthError> {
        Ok(Self {
            key_id: random_hex(KEY_ID_BYTES)?,
            secret: random_hex(SECRET_BYTES)?,
        })
    }

    /// Parses a key a client sent; the error never repeats the key.
    pub fn parse(text: &str) -> Result<Self, AuthError> {
        let malformed = || AuthError::InvalidApiKey("it is not of the form spool_<id>_<secret>".to_owned());
        let rest = text.trim().strip_prefix(API_KEY_PREFIX).ok_or_else(malformed)?;
        let (key_id, secret) = rest.split_once('_').ok_or_else(malformed)?;
        let hex = |s: &str, bytes: usize| s.len() == 2 * bytes && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex(key_id, KEY_ID_BYTES) || !hex(secret, SECRET_BYTES) {
            return Err(malformed());
        }
        Ok(Self {
            key_id: key_id.to_ascii_lowercase(),
            secret: secret.to_ascii_lowercase(),
        })
    }

    /// The key's public id.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The whole key, to show its holder once.
    pub fn reveal(&self) -> String {
        format!("{API_KEY_PREFIX}{}_{}", self.key_id, self.secret)
    }

    /// The SHA-256 of the secret in lowercase hex: what the directory stores.
    pub fn secret_hash(&self) -> String {
        to_hex(&Sha256::digest(self.secret.as_bytes()))
    }

    /// Whether this key's secret has the stored hash, compared in constant time.
    pub fn matches(&self, stored_hash: &str) -> bool {
        let ours = self.secret_hash();
        ours.len() == stored_hash.len()
            && ours
                .bytes()
                .zip(stored_hash.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

fn random_hex(bytes: usize) -> Result<String, AuthError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(to_hex(&buf))
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xf)]])
        .map(char::from)
        .collect()
}

/// A new random secret of `bytes` bytes, in hex (for token signing secrets).
pub fn random_secret(bytes: usize) -> Result<String, AuthError> {
    random_hex(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_parses_back_and_matches_only_its_own_hash() {
        let key = ApiKey::generate().unwrap();
        let text = key.reveal();
        assert!(text.starts_with("spool_"));
        assert_eq!(text.len(), 6 + 16 + 1 + 64);
        let parsed = ApiKey::parse(&text).unwrap();
        assert_eq!(parsed, key);
        assert!(parsed.matches(&key.secret_hash()));
        let other = ApiKey::generate().unwrap();
        assert_ne!(other.key_id(), key.key_id());
        assert!(!parsed.matches(&other.secret_hash()));
        assert!(!parsed.matches(""));
    }

    #[test]
    fn the_hash_is_sha256_of_the_secret() {
        let key = ApiKey::parse(&format!("spool_{}_{}", "0".repeat(16), "a".repeat(64))).unwrap();
        // sha256("aaaa…a" × 64)
        assert_eq!(
            key.secret_hash(),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"
        );
    }

    #[test]
    fn malformed_keys_are_refused_without_echoing_them() {
        for bad in [
            "",
            "spool_",
            "sk_0000000000000000_aaaa",
            "spool_0000000000000000",
            "spool_000000000000000_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "spool_000000000000000g_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "spool_0000000000000000_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ] {
            let err = ApiKey::parse(bad).unwrap_err().to_string();
            assert!(bad.len() < 10 || !err.contains(bad), "{err}");
        }
    }
}
