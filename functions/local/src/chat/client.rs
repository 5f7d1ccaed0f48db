//! The chat API as `spool chat` calls it: the handshake, JSON requests with the token, and a
//! chat's events followed over SSE, resuming from the last seq across drops.

use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_chat::session::Event;
use tokio::sync::mpsc;

/// A signed-in client of one Spool.
#[derive(Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    /// The key, to sign in again when the token expires (24 h).
    key: String,
}

/// What the follower reports.
pub(crate) enum Followed {
    /// An event of the chat.
    Event(Box<Event>),
    /// An event this build does not know (a newer server's): skipped.
    Unknown,
    /// The connection dropped; it is being made again.
    Reconnecting(String),
    /// The chat cannot be followed (refused, or gone): why, and what to do.
    Gone(String),
}

impl Client {
    /// Exchanges `api_key` for a token at `base`.
    pub(crate) async fn sign_in(base: &str, api_key: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        let base = base.trim_end_matches('/').to_owned();
        let answer = http
            .post(format!("{base}/v1/handshake"))
            .json(&json!({ "version": "1", "user_agent": concat!("spool-chat/", env!("CARGO_PKG_VERSION")), "api_key": api_key }))
            .send()
            .await
            .with_context(|| format!("cannot reach Spool at {base}; is `spool serve` running, or is --url right?"))?;
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!(
                "the handshake was refused ({status}): {}; check --api-key (or SPOOL_API_KEY)",
                message(&body)
            );
        }
        let token = body["jwt"]
            .as_str()
            .context("the handshake answered no token")?
            .to_owned();
        Ok(Self {
            http,
            base,
            token,
            key: api_key.to_owned(),
        })
    }

    /// A JSON request; a refusal is an error that says what the API said.
    pub(crate) async fn call(&self, method: Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let (status, value) = self.try_call(method.clone(), path, body).await?;
        if !status.is_success() {
            bail!("Spool answered {status}: {}", message(&value));
        }
        Ok(value)
    }

    /// A JSON request, answered with its status.
    pub(crate) async fn try_call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.base))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// Follows the chat `session`'s events after `after` until `events` is dropped: over SSE,
    /// reconnecting from the last event seen (with backoff) when the connection drops or the
    /// server recycles it.
    pub(crate) fn follow(&self, session: String, mut after: u64, events: mpsc::Sender<Followed>) {
        let mut client = self.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(250);
            loop {
                let url = format!("{}/v1/sessions/{session}/stream?after={after}", client.base);
                let outcome = match client.http.get(url).bearer_auth(&client.token).send().await {
                    Ok(response) if response.status().is_success() => {
                        backoff = Duration::from_millis(250);
                        read_sse(response, &mut after, &events).await
                    }
                    // The token expired: sign in again with the key.
                    Ok(response) if response.status() == StatusCode::UNAUTHORIZED => {
                        match Self::sign_in(&client.base, &client.key).await {
                            Ok(fresh) => {
                                client = fresh;
                                continue;
                            }
                            Err(e) => {
                                let _ = events.send(Followed::Gone(format!("{e:#}"))).await;
                                return;
                            }
                        }
                    }
                    Ok(response) if response.status().is_client_error() => {
                        let status = response.status();
                        let body: Value = response.json().await.unwrap_or(Value::Null);
                        let why = format!("the chat cannot be followed ({status}): {}", message(&body));
                        let _ = events.send(Followed::Gone(why)).await;
                        return;
                    }
                    Ok(response) => Err(format!("the stream answered {}", response.status())),
                    Err(e) => Err(e.to_string()),
                };
                if events.is_closed() {
                    return;
                }
                if let Err(why) = outcome {
                    if events.send(Followed::Reconnecting(why)).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        });
    }
}

/// Reads one SSE response (with the agents' reader, which also gives up on a connection
/// silent past its keep-alives), sending each event on; `Ok` when the server ended it.
async fn read_sse(response: reqwest::Response, after: &mut u64, events: &mpsc::Sender<Followed>) -> Result<(), String> {
    let mut reader = spool_agents::http::SseReader::new(response, "Spool");
    while let Some(sse) = reader.next().await.map_err(|e| e.to_string())? {
        let value: Value =
            serde_json::from_str(&sse.data).map_err(|e| format!("Spool sent something not JSON: {e}"))?;
        let seq = value["seq"].as_u64().ok_or("Spool sent an event without a seq")?;
        *after = seq;
        let followed = match serde_json::from_value::<Event>(value) {
            Ok(event) => Followed::Event(Box::new(event)),
            Err(_) => Followed::Unknown,
        };
        if events.send(followed).await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// The message of the contract's JSON error, or the body.
fn message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_owned)
}
