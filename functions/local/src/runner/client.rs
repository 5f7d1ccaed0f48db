//! # The runner's HTTP client of a Spool deployment
//!
//! Every call a runner makes: the handshake (its API key for a token, kept and replaced well
//! before it expires, and again when a route answers `401`), then the runner routes. The
//! deployment's URL may carry a path prefix (a CloudFront path, an API Gateway stage): every
//! route is joined onto it ([`join`]).

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use spool_chat::runner::wire::{Assignment, Beat, Claim, Heartbeat, Settle};
use tokio::sync::Mutex;

/// A token is replaced this long before it expires (or halfway through a shorter life).
const REFRESH_BEFORE_MS: i64 = 3600 * 1000;
/// How long a token whose expiry the handshake did not say is used.
const UNSAID_LIFE_MS: i64 = 3600 * 1000;
/// How long a call that does not wait for work (handshake, settle, file) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How much longer than its own wait a long-poll (claim, heartbeat) may take to answer.
const POLL_SLACK: Duration = Duration::from_secs(15);
/// How long a file download may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(300);

/// Why a call to the deployment failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// It could not be reached, or did not answer in time.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The URL called.
        url: String,
        /// What failed.
        reason: String,
    },
    /// It answered with an error status.
    #[error("{url} answered {status}: {message}")]
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The error's message, as the deployment put it.
        message: String,
        /// Whether Spool itself answered (its JSON error), not something on the way (a WAF's
        /// or a CDN's `403`).
        spool: bool,
    },
}

impl CallError {
    /// Whether trying again later may work: the deployment was unreachable, overloaded or
    /// failed on its side.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Status { status, spool, .. } => {
                *status >= 500 || *status == 429 || *status == 408 || (*status == 403 && !spool)
            }
        }
    }

    /// Whether the key was refused: not valid, or not a runner key (Spool's own `403`; one from
    /// a firewall on the way is not the key's fault, and is tried again).
    pub(crate) fn is_refused_key(&self) -> bool {
        matches!(
            self,
            Self::Status { status: 401, .. }
                | Self::Status {
                    status: 403,
                    spool: true,
                    ..
                }
        )
    }

    /// The status it answered, if it answered.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            Self::Unreachable { .. } => None,
        }
    }
}

/// What the handshake gave.
#[derive(Debug, Clone)]
struct Token {
    jwt: String,
    org: String,
    /// When it is replaced: well before it expires.
    renew_at_ms: i64,
}

/// When a token got at `now_ms` that expires at `expires_ms` is replaced: an hour before, or
/// halfway through a shorter life.
fn renew_at(now_ms: i64, expires_ms: Option<i64>) -> i64 {
    let expires_ms = expires_ms.unwrap_or(now_ms + UNSAID_LIFE_MS);
    let life = expires_ms.saturating_sub(now_ms).max(0);
    expires_ms - REFRESH_BEFORE_MS.min(life / 2)
}

/// How a settle was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The outcome was recorded (now or by an earlier try of the same settle).
    Accepted,
    /// Another claim superseded this one, or the turn ended (`409`).
    Superseded,
}

/// A client of one deployment with one API key.
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    api_key: SecretString,
    token: Mutex<Option<Token>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// `path` (starting with `/`) joined onto `base`, keeping the base's own path (a stage or a
/// prefix) and dropping the slashes between them.
pub(crate) fn join(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

/// The deployment's URL, checked: http or https, with a host, no query or fragment.
pub(crate) fn check_url(url: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!("`{url}` is not an http(s) URL of a Spool deployment"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!(
            "`{url}` has a query or fragment; give the deployment's base URL"
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

fn now_ms() -> i64 {
    crate::now_ms()
}

impl Client {
    /// A client of the deployment at `base` (as [`check_url`] accepted it) with `api_key`.
    pub(crate) fn new(base: String, api_key: SecretString) -> Self {
        Self {
            http: reqwest::Client::new(),
            base,
            api_key,
            token: Mutex::new(None),
        }
    }

    /// The deployment's base URL.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The organization the key is of, after a handshake.
    pub(crate) async fn org(&self) -> Result<String, CallError> {
        Ok(self.token(false).await?.org)
    }

    /// A token that is not due for renewal ([`renew_at`]): the one held, or a new one (always
    /// a new one when `renew`, after a `401`).
    async fn token(&self, renew: bool) -> Result<Token, CallError> {
        let mut held = self.token.lock().await;
        if !renew
            && let Some(token) = held.as_ref()
            && now_ms() < token.renew_at_ms
        {
            return Ok(token.clone());
        }
        let url = join(&self.base, "/v1/handshake");
        let body = json!({
            "api_key": self.api_key.expose_secret(),
            "version": "1",
            "user_agent": concat!("spool-runner/", env!("CARGO_PKG_VERSION")),
        });
        let response = self.http.post(&url).timeout(CALL_TIMEOUT).json(&body).send().await;
        let answer: Value = answered(&url, response)
            .await?
            .json()
            .await
            .map_err(|e| unreachable(&url, &e))?;
        let expires_ms = answer["expires_at"]
            .as_str()
            .and_then(|at| time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).ok())
            .and_then(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok());
        let token = Token {
            jwt: answer["jwt"].as_str().unwrap_or_default().to_owned(),
            org: answer["org_id"].as_str().unwrap_or_default().to_owned(),
            renew_at_ms: renew_at(now_ms(), expires_ms),
        };
        *held = Some(token.clone());
        Ok(token)
    }

    /// Sends `build`'s request with the token; on a `401`, once more with a new token.
    async fn send(
        &self,
        url: &str,
        build: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CallError> {
        let token = self.token(false).await?;
        let response = build(&token.jwt).send().await;
        match answered(url, response).await {
            Err(e) if e.status() == Some(401) => {
                let token = self.token(true).await?;
                answered(url, build(&token.jwt).send().await).await
            }
            other => other,
        }
    }

    async fn post<B: Serialize>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<reqwest::Response, CallError> {
        let url = join(&self.base, path);
        self.send(&url, |jwt| {
            self.http.post(&url).bearer_auth(jwt).timeout(timeout).json(body)
        })
        .await
    }

    /// Waits (up to `claim.wait_ms`) for a job and claims it; `None` when none came.
    pub(crate) async fn claim(&self, claim: &Claim) -> Result<Option<Assignment>, CallError> {
        let wait = Duration::from_millis(claim.wait_ms.unwrap_or(0));
        let path = "/v1/runner/claim";
        let response = self.post(path, claim, wait + POLL_SLACK).await?;
        if response.status() == reqwest::StatusCode::NO_CONTENT {
            return Ok(None);
        }
        json_of(&join(&self.base, path), response).await.map(Some)
    }

    /// Renews the claim of `turn_id`, waiting up to `beat.wait_ms` for an abort.
    pub(crate) async fn heartbeat(&self, turn_id: &str, beat: &Heartbeat) -> Result<Beat, CallError> {
        let wait = Duration::from_millis(beat.wait_ms.unwrap_or(0));
        let path = format!("/v1/runner/turns/{turn_id}/heartbeat");
        let response = self.post(&path, beat, wait + POLL_SLACK).await?;
        json_of(&join(&self.base, &path), response).await
    }

    /// Settles the claim of `turn_id`.
    pub(crate) async fn settle(&self, turn_id: &str, settle: &Settle) -> Result<Settled, CallError> {
        let path = format!("/v1/runner/turns/{turn_id}/result");
        match self.post(&path, settle, CALL_TIMEOUT).await {
            Ok(_) => Ok(Settled::Accepted),
            Err(e) if e.status() == Some(409) => Ok(Settled::Superseded),
            Err(e) => Err(e),
        }
    }

    /// The chat's file `file_id`, for claim `epoch` of `turn_id`, as the deployment answered
    /// it (its bytes to read); `None` when it has no such file.
    pub(crate) async fn file(
        &self,
        turn_id: &str,
        file_id: &str,
        epoch: u64,
    ) -> Result<Option<reqwest::Response>, CallError> {
        let url = join(
            &self.base,
            &format!("/v1/runner/turns/{turn_id}/files/{file_id}?epoch={epoch}"),
        );
        let response = self
            .send(&url, |jwt| self.http.get(&url).bearer_auth(jwt).timeout(FILE_TIMEOUT))
            .await;
        match response {
            Ok(response) => Ok(Some(response)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn unreachable(url: &str, e: &reqwest::Error) -> CallError {
    // reqwest's error names the URL itself; keep only the cause.
    let reason = std::error::Error::source(e).map_or_else(|| e.to_string(), ToString::to_string);
    let reason = if e.is_timeout() {
        "no answer in time".to_owned()
    } else {
        reason
    };
    CallError::Unreachable {
        url: url.to_owned(),
        reason,
    }
}

/// The response, if it was a success; its error otherwise.
async fn answered(
    url: &str,
    response: Result<reqwest::Response, reqwest::Error>,
) -> Result<reqwest::Response, CallError> {
    let response = response.map_err(|e| unreachable(url, &e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body: Value = response.json().await.unwrap_or_default();
    let spool = body["error"]["code"].is_string();
    let message = body["error"]["message"]
        .as_str()
        .or_else(|| body["message"].as_str())
        .unwrap_or("no reason given")
        .to_owned();
    Err(CallError::Status {
        url: url.to_owned(),
        status: status.as_u16(),
        message,
        spool,
    })
}

async fn json_of<T: DeserializeOwned>(url: &str, response: reqwest::Response) -> Result<T, CallError> {
    response.json().await.map_err(|e| CallError::Status {
        url: url.to_owned(),
        status: 200,
        message: format!("an answer this runner cannot read ({e}); is the runner's version the deployment's?"),
        spool: false,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    #[test]
    fn routes_are_joined_onto_the_deployments_path() {
        assert_eq!(
            join("https://x.example", "/v1/runner/claim"),
            "https://x.example/v1/runner/claim"
        );
        assert_eq!(
            join("https://abc.execute-api.eu-west-1.amazonaws.com/prod/", "/v1/handshake"),
            "https://abc.execute-api.eu-west-1.amazonaws.com/prod/v1/handshake"
        );
        assert_eq!(
            join("http://127.0.0.1:8080/spool", "v1/x"),
            "http://127.0.0.1:8080/spool/v1/x"
        );
    }

    #[test]
    fn a_token_is_renewed_well_before_it_expires() {
        let hour = 3600 * 1000;
        // A day's token: an hour before it expires.
        assert_eq!(renew_at(0, Some(24 * hour)), 23 * hour);
        // A ten-minute token: halfway.
        assert_eq!(renew_at(0, Some(hour / 6)), hour / 12);
        // No expiry said: within the hour; an expired one at once.
        assert!(renew_at(0, None) <= hour);
        assert!(renew_at(10, Some(5)) <= 10);
    }

    #[test]
    fn only_a_deployments_base_url_is_accepted() {
        assert_eq!(check_url("https://x.example/prod/").unwrap(), "https://x.example/prod");
        for bad in ["x.example", "ftp://x.example", "https://x.example/?a=1", "http://"] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    /// A deployment under the stage `/prod` whose first token is refused by the claim route.
    async fn deployment(handshakes: Arc<AtomicUsize>) -> String {
        use axum::{Json, http::HeaderMap, http::StatusCode, routing::post};
        let handshake = move || {
            let n = handshakes.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Json(json!({ "jwt": format!("t{n}"), "org_id": "acme", "expires_at": "2999-01-01T00:00:00Z" })) }
        };
        let claim = |headers: HeaderMap| async move {
            match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some("Bearer t1") => StatusCode::UNAUTHORIZED,
                Some(_) => StatusCode::NO_CONTENT,
                None => StatusCode::FORBIDDEN,
            }
        };
        let app = axum::Router::new()
            .route("/prod/v1/handshake", post(handshake))
            .route("/prod/v1/runner/claim", post(claim));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/prod/")
    }

    #[tokio::test]
    async fn a_refused_token_is_renewed_once_and_routes_sit_under_the_urls_path() {
        // GIVEN a deployment under a stage, whose first token stops working
        let handshakes = Arc::new(AtomicUsize::new(0));
        let url = deployment(handshakes.clone()).await;
        let client = Client::new(check_url(&url).unwrap(), String::from("spool_k_s").into());
        // WHEN the runner connects and claims
        assert_eq!(client.org().await.unwrap(), "acme");
        let claim = Claim {
            name: "box".into(),
            version: None,
            clis: Vec::new(),
            workspaces: Vec::new(),
            wait_ms: Some(0),
        };
        // THEN the claim's 401 renews the token once, and the claim goes through
        assert!(client.claim(&claim).await.unwrap().is_none());
        assert_eq!(handshakes.load(Ordering::SeqCst), 2);
        // AND the renewed token is kept
        assert!(client.claim(&claim).await.unwrap().is_none());
        assert_eq!(handshakes.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn server_failures_and_silence_are_transient_and_refused_keys_are_not() {
        let status = |status| CallError::Status {
            url: String::new(),
            status,
            message: String::new(),
            spool: true,
        };
        assert!(status(503).is_transient() && status(429).is_transient());
        assert!(!status(401).is_transient() && status(401).is_refused_key() && status(403).is_refused_key());
        assert!(!status(400).is_transient() && !status(409).is_refused_key());
        let silent = CallError::Unreachable {
            url: String::new(),
            reason: String::new(),
        };
        assert!(silent.is_transient() && !silent.is_refused_key());
        // A 403 from a firewall on the way (not Spool's JSON error) is not the key's fault.
        let firewall = CallError::Status {
            url: String::new(),
            status: 403,
            message: "no reason given".to_owned(),
            spool: false,
        };
        assert!(!firewall.is_refused_key() && firewall.is_transient());
    }
}
