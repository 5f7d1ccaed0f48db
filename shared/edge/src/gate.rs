//! # Who calls, and how often
//!
//! What both functions check before they act: the caller's address (for per-address rate
//! limits) and the rate limits of writes. The token itself is verified by
//! [`spool_auth::Access`]; revocations by `spool_chat::revocation::Revocations`.

use spool_auth::{Limit, Limited, RateLimiter};

/// The address of a request's client, when the server that took it records one
/// (`spool serve` does; on Lambda, API Gateway's throttling stands in for per-address limits).
pub fn client_address(extensions: &axum::http::Extensions) -> Option<std::net::IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// Takes one write of `org` (and of the client's address), and one creation if `create`.
pub fn limit_write(
    limiter: &RateLimiter,
    org: &str,
    address: Option<std::net::IpAddr>,
    create: bool,
) -> Result<(), Limited> {
    limiter.check(Limit::WriteByOrg, org)?;
    if let Some(address) = address {
        limiter.check(Limit::WriteFromAddress, &address.to_string())?;
    }
    if create {
        limiter.check(Limit::CreateByOrg, org)?;
    }
    Ok(())
}
