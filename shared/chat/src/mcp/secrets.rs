//! # MCP servers' secrets, sealed at rest
//!
//! A header or env value of an MCP server is stored only sealed ([`SealedSecret`]): AES-256-GCM
//! under the deployment's data key (`SPOOL_DATA_KEY`, 32 bytes), with a fresh random nonce per
//! value and associated data that binds it to its place: the organization, the server's id,
//! which map (`headers` or `env`) and the name. A sealed value copied to another server, another
//! organization or another name does not open; nor does one sealed under another key. A sealed
//! value is `v1.` and the URL-safe base64 (no padding) of the nonce followed by the ciphertext
//! and its tag; the version says how to open it if the scheme ever changes.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::{
    Engine,
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
};
use spool_log::error::Error;

use super::{McpSecret, SealedSecret};

/// The prefix of a value sealed by this version.
const VERSION: &str = "v1.";

/// How long a data key is, in bytes.
pub const DATA_KEY_BYTES: usize = 32;

/// Which of a server's maps a secret is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretMap {
    /// Its HTTP headers.
    Headers,
    /// Its program's environment.
    Env,
}

impl SecretMap {
    /// Its name, as the API says it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Headers => "headers",
            Self::Env => "env",
        }
    }
}

/// Where a secret belongs: what its seal is bound to.
#[derive(Debug, Clone, Copy)]
pub struct SecretPlace<'a> {
    /// The organization.
    pub org: &'a str,
    /// The server's id.
    pub server_id: &'a str,
    /// Which map.
    pub map: SecretMap,
    /// The header's or variable's name.
    pub name: &'a str,
}

impl SecretPlace<'_> {
    /// The associated data: each part with its length, so no two places share one.
    fn aad(&self) -> Vec<u8> {
        let mut aad = b"spool-mcp-secret".to_vec();
        for part in [self.org, self.server_id, self.map.as_str(), self.name] {
            aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        aad
    }
}

/// Seals and opens MCP servers' secrets with the deployment's data key. Its `Debug` shows
/// nothing of the key.
pub struct SecretBox {
    key: LessSafeKey,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(…)")
    }
}

impl SecretBox {
    /// A box over the 32 bytes of `key`.
    pub fn new(key: &[u8; DATA_KEY_BYTES]) -> Self {
        // A 32-byte key is always an AES-256 key.
        #[allow(clippy::expect_used)]
        let key = UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte AES-256-GCM key");
        Self {
            key: LessSafeKey::new(key),
        }
    }

    /// A box over the key `text` holds (what `SPOOL_DATA_KEY` holds): the standard base64 of 32
    /// bytes, or their 64 hex digits (what a generated Secrets Manager secret can hold); why
    /// not otherwise, without repeating the text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bytes = if text.len() == 2 * DATA_KEY_BYTES && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..DATA_KEY_BYTES)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|_| "is not hex".to_owned())?
        } else {
            STANDARD
                .decode(text)
                .map_err(|_| "is neither base64 nor 64 hex digits (use e.g. `openssl rand -base64 32`)".to_owned())?
        };
        let key: [u8; DATA_KEY_BYTES] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!(
                "holds {} bytes; a data key is {DATA_KEY_BYTES} (use e.g. `openssl rand -base64 32`)",
                b.len()
            )
        })?;
        Ok(Self::new(&key))
    }

    /// A new random data key, as `SPOOL_DATA_KEY` holds it (base64).
    pub fn generate() -> Result<String, Error> {
        let mut key = [0u8; DATA_KEY_BYTES];
        aws_lc_rs::rand::fill(&mut key).map_err(|_| Error::unavailable("make a data key", "no randomness"))?;
        Ok(STANDARD.encode(key))
    }

    /// `value` sealed for `place`.
    pub fn seal(&self, place: &SecretPlace<'_>, value: &str) -> Result<SealedSecret, Error> {
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).map_err(|_| Error::unavailable("seal a secret", "no randomness"))?;
        let mut sealed = value.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(place.aad()), &mut sealed)
            .map_err(|_| Error::unavailable("seal a secret", "AES-GCM failed"))?;
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        Ok(SealedSecret(format!("{VERSION}{}", URL_SAFE_NO_PAD.encode(bytes))))
    }

    /// The value of `sealed`, if it was sealed for `place` under this key; [`Error::Corrupt`]
    /// saying which secret does not open otherwise.
    pub fn open(&self, place: &SecretPlace<'_>, sealed: &SealedSecret) -> Result<McpSecret, Error> {
        let fail = |why: &str| Error::Corrupt {
            what: format!(
                "MCP server `{}`'s {} `{}` does not open: {why}",
                place.server_id,
                place.map.as_str(),
                place.name
            ),
        };
        let body = sealed
            .0
            .strip_prefix(VERSION)
            .ok_or_else(|| fail("it is not sealed by a version this deployment knows"))?;
        let mut bytes = URL_SAFE_NO_PAD.decode(body).map_err(|_| fail("it is not base64"))?;
        if bytes.len() < NONCE_LEN {
            return Err(fail("it is too short"));
        }
        let mut ciphertext = bytes.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&bytes).map_err(|_| fail("its nonce is malformed"))?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(place.aad()), &mut ciphertext)
            .map_err(|_| {
                fail("it was sealed under another data key (SPOOL_DATA_KEY changed?) or for another server")
            })?;
        let text = std::str::from_utf8(plain).map_err(|_| fail("it is not text"))?;
        Ok(McpSecret::new(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place<'a>(org: &'a str, server: &'a str, map: SecretMap, name: &'a str) -> SecretPlace<'a> {
        SecretPlace {
            org,
            server_id: server,
            map,
            name,
        }
    }

    #[test]
    fn a_sealed_value_opens_only_in_its_place_and_under_its_key() {
        // GIVEN a value sealed for org o, server mcp_1, header Authorization
        let sealer = SecretBox::parse(&SecretBox::generate().unwrap()).unwrap();
        let here = place("o", "mcp_1", SecretMap::Headers, "Authorization");
        let sealed = sealer.seal(&here, "Bearer s3cr3t").unwrap();

        // THEN it shows nothing of the value, is versioned, and opens in its place
        assert!(sealed.0.starts_with("v1.") && !sealed.0.contains("s3cr3t"));
        assert_eq!(sealer.open(&here, &sealed).unwrap().expose(), "Bearer s3cr3t");
        // AND two seals of one value differ (a fresh nonce each)
        assert_ne!(sealer.seal(&here, "Bearer s3cr3t").unwrap(), sealed);

        // AND it opens nowhere else: another org, server, map, name, or key
        for other in [
            place("p", "mcp_1", SecretMap::Headers, "Authorization"),
            place("o", "mcp_2", SecretMap::Headers, "Authorization"),
            place("o", "mcp_1", SecretMap::Env, "Authorization"),
            place("o", "mcp_1", SecretMap::Headers, "X-Other"),
        ] {
            let e = sealer.open(&other, &sealed).unwrap_err();
            assert!(matches!(e, Error::Corrupt { .. }), "{e}");
            assert!(e.to_string().contains("does not open"), "{e}");
        }
        let stranger = SecretBox::new(&[7; 32]);
        assert!(stranger.open(&here, &sealed).is_err());
        // AND a tampered or unversioned value does not open either
        let mut tampered = sealed.0;
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        assert!(sealer.open(&here, &SealedSecret(tampered)).is_err());
        assert!(sealer.open(&here, &SealedSecret("Bearer s3cr3t".into())).is_err());
    }

    #[test]
    fn a_malformed_key_is_refused_without_repeating_it() {
        let e = SecretBox::parse("not base64 at all!").unwrap_err();
        assert!(e.contains("neither base64") && !e.contains("at all"), "{e}");
        let e = SecretBox::parse(&STANDARD.encode([1u8; 16])).unwrap_err();
        assert!(e.contains("16 bytes"), "{e}");
        assert!(format!("{:?}", SecretBox::new(&[1; 32])).contains('…'));
        // AND 64 hex digits are the same key as its base64
        let place = place("o", "s", SecretMap::Env, "K");
        let sealed = SecretBox::parse(&"ab".repeat(32)).unwrap().seal(&place, "v").unwrap();
        let opened = SecretBox::parse(&STANDARD.encode([0xab; 32]))
            .unwrap()
            .open(&place, &sealed);
        assert_eq!(opened.unwrap().expose(), "v");
    }
}
