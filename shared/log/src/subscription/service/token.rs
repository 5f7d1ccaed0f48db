//! # Wake tokens: the credential of a wake's callback, acks and release

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};

use super::*;

impl Subscriptions {
    /// A wake's token: `ds1.{org}.{generation}.{mac}`, the MAC over the organization, the
    /// subscription, the generation and the wake, so it opens this wake and no other.
    pub(super) fn token(&self, org: &str, id: &str, generation: u64, wake_id: &str) -> String {
        let mac = self
            .signer
            .mac(format!("ds1\n{org}\n{id}\n{generation}\n{wake_id}").as_bytes());
        format!("ds1.{}.{generation}.{}", B64.encode(org), B64.encode(mac))
    }

    /// The organization and generation a wake's token names; refused (`401 TOKEN_INVALID`) if
    /// it is not of the form this service gives. Whether it opens a given wake is checked
    /// with the wake's request.
    pub fn parse_token(token: &str) -> Result<(String, u64), Refusal> {
        let invalid = || {
            Refusal::new(
                401,
                "TOKEN_INVALID",
                "the token is not one this server gave for this wake",
            )
        };
        let mut parts = token.split('.');
        let (Some("ds1"), Some(org), Some(generation), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let org = B64
            .decode(org)
            .ok()
            .and_then(|o| String::from_utf8(o).ok())
            .ok_or_else(invalid)?;
        let generation = generation.parse().map_err(|_| invalid())?;
        Ok((org, generation))
    }

    pub(super) fn verify_token(
        &self,
        token: &str,
        org: &str,
        id: &str,
        generation: u64,
        wake_id: Option<&str>,
    ) -> Result<(), Refusal> {
        let expected = self.token(org, id, generation, wake_id.unwrap_or(""));
        if constant_time_eq(expected.as_bytes(), token.as_bytes()) {
            Ok(())
        } else {
            Err(Refusal::new(
                401,
                "TOKEN_INVALID",
                "the token is not one this server gave for this wake",
            ))
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
