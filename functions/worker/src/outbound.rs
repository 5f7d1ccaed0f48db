//! # Webhook requests, kept off the deployment's own network
//!
//! [`Webhooks`] makes subscription webhooks' `POST`s. A URL was checked when the subscription
//! was made; a name is checked again where it matters, when it is resolved: an address that is
//! not on the public internet (private, loopback, link-local, the instance metadata service) is
//! never connected to, so a name that resolves (or is later re-pointed) to one is refused, not
//! reached. No proxy from the environment, no redirects, 10 s per request, and at most 64 KiB
//! of the answer is read.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use async_trait::async_trait;
use spool_log::subscription::{
    Outbound, Reply,
    address::is_public,
    spec::{UrlPolicy, check_webhook_url},
};

/// How long a webhook has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How much of an answer is read (a `{"done": true}` is far shorter).
const MAX_REPLY_BYTES: usize = 64 * 1024;

/// Makes webhook requests under a [`UrlPolicy`].
#[derive(Clone)]
pub struct Webhooks {
    client: reqwest::Client,
    urls: UrlPolicy,
}

/// Resolves names to public addresses only (and `localhost` to loopback, where the policy
/// allows developers' hooks).
struct PublicOnly(UrlPolicy);

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let allowed = allowed(&host, found, policy)?;
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The addresses of `found` a webhook to `host` may connect to: public ones, and loopback for
/// `localhost` where the policy allows; an error when none is left.
fn allowed(
    host: &str,
    found: impl IntoIterator<Item = SocketAddr>,
    policy: UrlPolicy,
) -> Result<Vec<SocketAddr>, String> {
    let local = policy.loopback_http && host.eq_ignore_ascii_case("localhost");
    let allowed: Vec<SocketAddr> = found
        .into_iter()
        .filter(|a| is_public(a.ip()) || (local && a.ip().is_loopback()))
        .collect();
    if allowed.is_empty() {
        return Err(format!(
            "`{host}` resolves to no public address; webhooks may not reach private networks"
        ));
    }
    Ok(allowed)
}

impl Webhooks {
    /// A client for webhooks under `urls`.
    pub fn new(urls: UrlPolicy) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(PublicOnly(urls)))
            .user_agent(concat!("spool/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { client, urls })
    }
}

#[async_trait]
impl Outbound for Webhooks {
    async fn post(&self, url: &str, headers: &[(&'static str, String)], body: Vec<u8>) -> Result<Reply, String> {
        check_webhook_url(url, self.urls).map_err(|r| r.message)?;
        let mut request = self.client.post(url).body(body);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        // Without the URL: its query may hold the receiver's own secret, and this goes to logs
        // and to the attempts the API shows.
        let mut response = request.send().await.map_err(|e| describe(&e.without_url()))?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while body.len() < MAX_REPLY_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        body.truncate(MAX_REPLY_BYTES);
        Ok(Reply { status, body })
    }
}

/// An error and its causes, `: `-separated (reqwest's own message hides the resolver's).
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolving_to_private_addresses_are_not_connected_to() {
        let prod = UrlPolicy { loopback_http: false };
        let dev = UrlPolicy { loopback_http: true };
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        let found = [
            addr("127.0.0.1:0"),
            addr("10.1.2.3:0"),
            addr("[fd00::1]:0"),
            addr("169.254.169.254:0"),
        ];
        assert!(allowed("evil.example", found, prod).is_err());
        assert!(
            allowed("evil.example", found, dev).is_err(),
            "only localhost may be loopback"
        );
        assert_eq!(allowed("localhost", found, dev).unwrap(), [addr("127.0.0.1:0")]);
        assert!(allowed("localhost", found, prod).is_err());
        let mixed = [addr("10.0.0.1:0"), addr("93.184.216.34:0")];
        assert_eq!(
            allowed("hooks.example", mixed, prod).unwrap(),
            [addr("93.184.216.34:0")]
        );
    }
}
