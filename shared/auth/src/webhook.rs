//! # Webhook signing keys
//!
//! Subscription webhooks are signed with Ed25519 (receivers verify with the public key from
//! the JWKS, `{stream-url}/__ds/jwks.json`), and each wake's callback token is an HMAC-SHA256.
//! Both keys are derived from the token signing secret, so every function of a deployment
//! signs with the same keys without storing another secret, and they survive restarts. Rotating
//! the secret rotates them: receivers pick the key by the `kid` each signature names.

use aws_lc_rs::{
    digest, hmac,
    signature::{Ed25519KeyPair, KeyPair},
};
use serde_json::json;

/// The webhook signing key pair and the callback-token key.
pub struct WebhookKeys {
    pair: Ed25519KeyPair,
    mac: hmac::Key,
    kid: String,
    x: String,
}

impl std::fmt::Debug for WebhookKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookKeys")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl WebhookKeys {
    /// The keys derived from `secret` (the token signing secret).
    pub fn derive(secret: &[u8]) -> Result<Self, crate::AuthError> {
        let root = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let seed = hmac::sign(&root, b"spool/ds-webhook-signing/v1");
        let pair = Ed25519KeyPair::from_seed_unchecked(seed.as_ref()).map_err(|_| crate::AuthError::WeakSecret {
            min: 32,
            got: secret.len(),
        })?;
        let mac = hmac::Key::new(
            hmac::HMAC_SHA256,
            hmac::sign(&root, b"spool/ds-callback-token/v1").as_ref(),
        );
        let x = b64(pair.public_key().as_ref());
        // The JWK thumbprint (RFC 7638): the hash of the key's required members, in order.
        let thumbprint = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        let kid = format!(
            "ds_{}",
            b64(digest::digest(&digest::SHA256, thumbprint.as_bytes()).as_ref())
        );
        Ok(Self { pair, mac, kid, x })
    }

    /// The key's id: `ds_` and its JWK thumbprint.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The Ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }

    /// The HMAC-SHA256 of `message` with the callback-token key.
    pub fn mac(&self, message: &[u8]) -> [u8; 32] {
        let tag = hmac::sign(&self.mac, message);
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// The public key as a JSON Web Key Set.
    pub fn jwks(&self) -> serde_json::Value {
        json!({
            "keys": [{
                "kty": "OKP",
                "crv": "Ed25519",
                "kid": self.kid,
                "use": "sig",
                "alg": "EdDSA",
                "x": self.x,
            }]
        })
    }
}

/// A new Standard Webhooks signing secret: `whsec_` and the base64 of 32 random bytes.
pub fn standard_webhook_secret() -> Result<String, crate::AuthError> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| crate::AuthError::Random(e.to_string()))?;
    Ok(format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    ))
}

impl spool_log::subscription::WebhookSigner for WebhookKeys {
    fn kid(&self) -> String {
        self.kid.clone()
    }

    fn sign(&self, message: &[u8]) -> Vec<u8> {
        WebhookKeys::sign(self, message)
    }

    fn mac(&self, message: &[u8]) -> [u8; 32] {
        WebhookKeys::mac(self, message)
    }

    fn jwks(&self) -> serde_json::Value {
        WebhookKeys::jwks(self)
    }
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::signature::{ED25519, UnparsedPublicKey};

    use super::*;

    #[test]
    fn keys_are_stable_per_secret_and_signatures_verify() {
        let a = WebhookKeys::derive(&[7; 32]).unwrap();
        let again = WebhookKeys::derive(&[7; 32]).unwrap();
        let other = WebhookKeys::derive(&[8; 32]).unwrap();
        assert_eq!(a.kid(), again.kid());
        assert_ne!(a.kid(), other.kid());
        assert!(a.kid().starts_with("ds_"));
        assert_eq!(a.mac(b"m"), again.mac(b"m"));
        assert_ne!(a.mac(b"m"), other.mac(b"m"));
        let signature = a.sign(b"1.{}");
        let public = UnparsedPublicKey::new(&ED25519, a.pair.public_key().as_ref().to_vec());
        assert!(public.verify(b"1.{}", &signature).is_ok());
        assert!(public.verify(b"1.{ }", &signature).is_err());
        let jwks = a.jwks();
        assert_eq!(jwks["keys"][0]["kid"], a.kid());
        assert_eq!(jwks["keys"][0]["crv"], "Ed25519");
    }
}
