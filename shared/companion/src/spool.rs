//! # The companion's side of the handshake
//!
//! The companion holds an API key of the person's organization (`SPOOL_API_KEY` or a key file)
//! and a stable id for its library ([`library_id`]: a hash of the library's resolved path and a
//! salt kept on this machine, so the id says nothing about the path). [`SpoolLink`] exchanges
//! the key for Spool's token for that library at `POST /v1/handshake`, keeps it, and asks for a
//! new one an hour before it expires. At start, [`start_lines`] says which capabilities the key
//! carries, and warns with the command that makes a usable key when it carries none the UI uses.

use std::{path::Path, time::Duration};

use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use spool_auth::Capability;
use tokio::sync::Mutex;

/// A token is replaced this long before it expires.
const REFRESH_BEFORE_MS: i64 = 3600 * 1000;
/// How long Spool has to answer a handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The capabilities the UI asks Spool to enable with the companion's token.
pub const UI_CAPABILITIES: &[&str] = &[
    Capability::ContextForQuery.as_str(),
    Capability::CaptureIngest.as_str(),
    Capability::McpTools.as_str(),
];

/// Why Spool gave no token.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Spool could not be reached.
    #[error("cannot reach Spool at {url}: {reason}; check --spool-url and that Spool is running")]
    Unreachable {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// Spool refused the key.
    #[error("Spool refused the handshake ({status}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Spool's message.
        message: String,
    },
}

/// Spool's token for the library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The JWT.
    pub jwt: String,
    /// What it grants.
    pub capabilities: Vec<String>,
    /// The organization whose key it was made from.
    pub org_id: String,
    /// When it expires (ms since the Unix epoch).
    pub expires_ms: i64,
}

#[derive(Deserialize)]
struct Answer {
    jwt: String,
    #[serde(default)]
    capabilities: Vec<String>,
    #[serde(default)]
    org_id: String,
    expires_at: String,
}

/// The link to one Spool, for one library.
#[derive(Debug)]
pub struct SpoolLink {
    http: reqwest::Client,
    url: String,
    api_key: String,
    library_id: String,
    token: Mutex<Option<Token>>,
}

impl SpoolLink {
    /// A link to the Spool at `url` with `api_key`, for `library_id`.
    pub fn new(url: &str, api_key: String, library_id: String) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.trim_end_matches('/').to_owned(),
            api_key,
            library_id,
            token: Mutex::new(None),
        }
    }

    /// The library's id.
    pub fn library_id(&self) -> &str {
        &self.library_id
    }

    /// A token valid for at least an hour more: the one held, or a new one.
    pub async fn token(&self, now_ms: i64) -> Result<Token, SpoolError> {
        let mut held = self.token.lock().await;
        if let Some(token) = held.as_ref()
            && token.expires_ms - now_ms > REFRESH_BEFORE_MS
        {
            return Ok(token.clone());
        }
        let token = self.handshake().await?;
        *held = Some(token.clone());
        Ok(token)
    }

    async fn handshake(&self) -> Result<Token, SpoolError> {
        let url = format!("{}/v1/handshake", self.url);
        let unreachable = |e: reqwest::Error| SpoolError::Unreachable {
            url: self.url.clone(),
            reason: e.to_string(),
        };
        let response = self
            .http
            .post(&url)
            .timeout(HANDSHAKE_TIMEOUT)
            .json(&json!({
                "api_key": self.api_key,
                "version": "1",
                "user_agent": concat!("spool-companion/", env!("CARGO_PKG_VERSION")),
                "library_id": self.library_id,
            }))
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        if !status.is_success() {
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            return Err(SpoolError::Refused {
                status: status.as_u16(),
                message: body["error"]["message"]
                    .as_str()
                    .unwrap_or("no reason given")
                    .to_owned(),
            });
        }
        let answer: Answer = response.json().await.map_err(unreachable)?;
        let expires_ms =
            time::OffsetDateTime::parse(&answer.expires_at, &time::format_description::well_known::Rfc3339)
                .map_or(0, |t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0));
        Ok(Token {
            jwt: answer.jwt,
            capabilities: answer.capabilities,
            org_id: answer.org_id,
            expires_ms,
        })
    }
}

/// What `spool companion` says at start about its key: the capabilities it carries, and a
/// warning naming the command that makes a usable key when it carries none the UI uses.
pub fn start_lines(token: &Token) -> Vec<String> {
    let carried = if token.capabilities.is_empty() {
        "none".to_owned()
    } else {
        token.capabilities.join(", ")
    };
    let mut lines = vec![format!("The API key carries these capabilities: {carried}")];
    if !token.capabilities.iter().any(|c| UI_CAPABILITIES.contains(&c.as_str())) {
        let org = if token.org_id.is_empty() {
            "ORG"
        } else {
            token.org_id.as_str()
        };
        let flags: String = UI_CAPABILITIES.iter().map(|c| format!(" --capability {c}")).collect();
        lines.push(format!(
            "Warning: the API key carries no capability the UI can use ({}), so answers will not know your notes; make a key that does with `spool admin create-api-key {org}{flags}` and give it in SPOOL_API_KEY or --api-key-file",
            UI_CAPABILITIES.join(", ")
        ));
    }
    lines
}

/// The library's id: `lib_` and a hash of its resolved path and this machine's `salt`.
pub fn library_id(root: &Path, salt: &str) -> String {
    let digest = Sha256::digest(format!("{salt}\n{}", root.display()).as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("lib_{hex}")
}

/// The salt kept in `file` (made, readable by its owner only, on first use).
pub fn salt(file: &Path) -> std::io::Result<String> {
    if let Ok(text) = std::fs::read_to_string(file)
        && !text.trim().is_empty()
    {
        return Ok(text.trim().to_owned());
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let salt: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(&mut options.open(file)?, salt.as_bytes())?;
    Ok(salt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_lines_name_the_capabilities_and_warn_when_the_ui_can_use_none() {
        // GIVEN a key that carries `context_for_query`, and one that carries only `agent`
        // (`capture_ingest` alone is usable too: the UI saves messages to notes with it)
        let token = |capabilities: &[&str]| Token {
            jwt: "j".to_owned(),
            capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
            org_id: "org_a".to_owned(),
            expires_ms: 0,
        };
        // WHEN the companion starts with each
        let usable = start_lines(&token(&["context_for_query"]));
        let unusable = start_lines(&token(&["agent"]));
        // THEN both name what the key carries; only the second warns, with the exact command
        assert_eq!(usable, ["The API key carries these capabilities: context_for_query"]);
        assert_eq!(start_lines(&token(&["capture_ingest"])).len(), 1);
        assert_eq!(unusable[0], "The API key carries these capabilities: agent");
        assert!(unusable[1].starts_with("Warning:"), "{unusable:?}");
        assert!(
            unusable[1].contains(
                "`spool admin create-api-key org_a --capability context_for_query --capability capture_ingest --capability mcp_tools`"
            ),
            "{unusable:?}"
        );
        assert_eq!(
            start_lines(&token(&[]))[0],
            "The API key carries these capabilities: none"
        );
    }

    #[test]
    fn a_library_id_is_stable_and_says_nothing_of_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("conf/salt");
        let salt_a = salt(&file).unwrap();
        assert_eq!(salt(&file).unwrap(), salt_a, "kept");
        let id = library_id(Path::new("/home/ada/notes"), &salt_a);
        assert_eq!(id, library_id(Path::new("/home/ada/notes"), &salt_a));
        assert_ne!(id, library_id(Path::new("/home/ada/other"), &salt_a));
        assert_ne!(id, library_id(Path::new("/home/ada/notes"), "another machine"));
        assert!(id.starts_with("lib_") && !id.contains("ada"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
