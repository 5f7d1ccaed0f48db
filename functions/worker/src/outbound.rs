//! # Webhook requests, kept off the deployment's own network
//!
//! [`Webhooks`] makes subscription webhooks' `POST`s. A URL was checked when the subscription
//! was made; a name is checked again where it matters, when it is resolved: an address that is
//! not on the public internet (private, loopback, link-local, the instance metadata service) is
//! never connected to, so a name that resolves (or is later re-pointed) to one is refused, not
//! reached (the rule is [`spool_agents::outbound`]'s, which MCP servers are reached under too).
//! No proxy from the environment, no redirects, 10 s per request, and at most 64 KiB of the
//! answer is read.

use std::time::Duration;

use async_trait::async_trait;
use spool_log::subscription::{
    Outbound, Reply,
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

impl Webhooks {
    /// A client for webhooks under `urls`.
    pub fn new(urls: UrlPolicy) -> Result<Self, reqwest::Error> {
        let client = spool_agents::outbound::client_builder(urls).timeout(TIMEOUT).build()?;
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
