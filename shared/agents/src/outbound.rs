//! # Requests to addresses a tenant chose, kept off the deployment's own network
//!
//! Webhooks and workspaces' MCP servers are reached at URLs a tenant gave, from inside the
//! deployment. A URL is checked as written ([`check_webhook_url`]); a name is checked again where
//! it matters, when it is resolved: an address that is not on the public internet (private,
//! loopback, link-local, the instance metadata service; [`is_public`]) is never connected to, so
//! a name that resolves (or is later re-pointed) to one is refused, not reached. The one rule for
//! both: [`client_builder`] (no proxy from the environment, no redirects, a connect timeout).

use std::{net::SocketAddr, sync::Arc, time::Duration};

pub use spool_log::subscription::spec::check_webhook_url;
use spool_log::subscription::{address::is_public, spec::UrlPolicy};

/// A `reqwest` client builder that connects only where `urls` allows: names resolve to public
/// addresses only (and `localhost` to loopback, where the policy allows developers' servers);
/// no proxy, no redirects, 5 s to connect. Callers add their own time limits.
pub fn client_builder(urls: UrlPolicy) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(PublicOnly(urls)))
        .user_agent(concat!("spool/", env!("CARGO_PKG_VERSION")))
}

/// Resolves names to public addresses only (and `localhost` to loopback, where the policy
/// allows developers' servers).
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

/// The addresses of `found` a request to `host` may connect to: public ones, and loopback for
/// `localhost` where the policy allows; an error when none is left.
pub fn allowed(
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
            "`{host}` resolves to no public address; Spool may not reach private networks"
        ));
    }
    Ok(allowed)
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

    /// The resolver itself filters what the system's resolver answers: `localhost` answers
    /// loopback, which only the developer's policy keeps.
    #[tokio::test]
    async fn the_resolver_drops_a_loopback_answer_under_the_public_policy() {
        use reqwest::dns::Resolve;
        let name = |s: &str| s.parse::<reqwest::dns::Name>().unwrap();
        let prod = PublicOnly(UrlPolicy { loopback_http: false });
        assert!(prod.resolve(name("localhost")).await.is_err());
        let dev = PublicOnly(UrlPolicy { loopback_http: true });
        let addrs: Vec<SocketAddr> = dev.resolve(name("localhost")).await.unwrap().collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
