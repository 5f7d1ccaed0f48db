//! # What the HTTP runtimes share: the client, errors a person can act on, and an SSE reader
//!
//! Both providers stream their answers as server-sent events. [`SseReader`] turns a response's
//! body into events, with a bound on how long it waits for the next bytes, so a provider that
//! stalls fails the reply instead of holding the turn forever.

use std::time::Duration;

use crate::runtime::Error;

/// How long a provider may go without sending anything before the reply fails.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// A provider's endpoint: its base URL, key and default model, and an HTTP client (one
/// connection pool per provider).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub(crate) http: reqwest::Client,
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) model: String,
}

impl Endpoint {
    /// The provider at `base_url`, with `model` for agents that name none.
    pub fn new(base_url: &str, api_key: Option<String>, model: &str) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            model: model.to_owned(),
        }
    }

    /// The model a request names, else the provider's.
    pub(crate) fn model<'a>(&'a self, request: &'a crate::runtime::Request) -> &'a str {
        request.model.as_deref().unwrap_or(&self.model)
    }
}

/// A request that could not be sent or was refused, as a message a person can act on.
pub async fn failed(
    provider: &str,
    response: Result<reqwest::Response, reqwest::Error>,
) -> Result<reqwest::Response, Error> {
    let response = response.map_err(|e| {
        Error::Failed(format!(
            "cannot reach {provider} ({}); check its base URL and the network",
            e.without_url()
        ))
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    let detail = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.chars().take(300).collect());
    let hint = match status.as_u16() {
        401 | 403 => "; check the API key",
        404 => "; check the base URL and the model name",
        429 => "; the provider is rate-limiting, try again shortly",
        _ => "",
    };
    Err(Error::Failed(format!("{provider} answered {status}: {detail}{hint}")))
}

/// One server-sent event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// Its `event:` name, if any.
    pub event: Option<String>,
    /// Its `data:` lines, joined by newlines.
    pub data: String,
}

/// Reads server-sent events from a response body.
pub struct SseReader {
    response: reqwest::Response,
    buffer: Vec<u8>,
    provider: &'static str,
}

impl SseReader {
    /// A reader of `response`'s body.
    pub fn new(response: reqwest::Response, provider: &'static str) -> Self {
        Self {
            response,
            buffer: Vec::new(),
            provider,
        }
    }

    /// The next event; `None` when the body ended.
    pub async fn next(&mut self) -> Result<Option<SseEvent>, Error> {
        loop {
            if let Some(event) = self.take_event() {
                return Ok(Some(event));
            }
            let chunk = tokio::time::timeout(IDLE_TIMEOUT, self.response.chunk())
                .await
                .map_err(|_| {
                    Error::Failed(format!(
                        "{} sent nothing for {} s; the reply was abandoned",
                        self.provider,
                        IDLE_TIMEOUT.as_secs()
                    ))
                })?
                .map_err(|e| Error::Failed(format!("{}'s stream broke: {}", self.provider, e.without_url())))?;
            match chunk {
                Some(bytes) => self.buffer.extend_from_slice(&bytes),
                None => {
                    // A last event without its blank line still counts.
                    if self.buffer.iter().any(|b| !b.is_ascii_whitespace()) {
                        self.buffer.extend_from_slice(b"\n\n");
                        continue;
                    }
                    return Ok(None);
                }
            }
        }
    }

    fn take_event(&mut self) -> Option<SseEvent> {
        loop {
            let text = &self.buffer;
            let end = find_blank_line(text)?;
            let block: Vec<u8> = self.buffer.drain(..end.1).collect();
            let block = String::from_utf8_lossy(&block[..end.0]).into_owned();
            let mut event = SseEvent::default();
            let mut has_data = false;
            for line in block.lines().map(|l| l.trim_end_matches('\r')) {
                if let Some(value) = line.strip_prefix("data:") {
                    if has_data {
                        event.data.push('\n');
                    }
                    event.data.push_str(value.strip_prefix(' ').unwrap_or(value));
                    has_data = true;
                } else if let Some(value) = line.strip_prefix("event:") {
                    event.event = Some(value.trim().to_owned());
                }
            }
            if has_data || event.event.is_some() {
                return Some(event);
            }
        }
    }
}

/// The end of the first event block: (where its text ends, where the next block starts).
fn find_blank_line(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' {
            let rest = &bytes[i + 1..];
            if rest.first() == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if rest.starts_with(b"\r\n") {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}
