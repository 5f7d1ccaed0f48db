//! # Spool's whole configuration, read once from the environment

use std::{collections::HashMap, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use secrecy::SecretString;
use spool_log::limits::{LiveSettings, LogLimits};

use crate::{
    AgentSettings, AttachmentSettings, AwsSettings, Backend, Error, ServerSettings, StaticCredentials,
    agents::{CLI_INHERITED_VARS, cli_env, llm, workspace_roots},
    vars::{millis, parse, read_env_file},
};

/// Spool's whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// `SPOOL_BACKEND`: `embedded` (default) or `aws`.
    pub backend: Backend,
    /// `SPOOL_ADDR`: where `spool serve` listens (default `127.0.0.1:8080`).
    pub addr: SocketAddr,
    /// `SPOOL_DATA_DIR`: the embedded store's directory (default `.spool`).
    pub data_dir: PathBuf,
    /// `SPOOL_WEB_DIR`: the built web UI that `spool serve` serves at `/` (default `web/dist`,
    /// what `make web` builds).
    pub web_dir: PathBuf,
    /// `SPOOL_MAX_APPEND_BYTES`, `SPOOL_MAX_READ_BYTES`, `SPOOL_PAGE_BYTES`,
    /// `SPOOL_PAGE_MAX_MESSAGES`, `SPOOL_IDLE_SEAL_MS` (how long a chat is idle before its short
    /// last page is sealed; default 10 minutes, at most 15 on AWS).
    pub limits: LogLimits,
    /// `SPOOL_LIVE_POLL_MS`: how often a live reader re-checks a stream that another process
    /// may write (default 500).
    pub live_poll: Duration,
    /// `SPOOL_LONG_POLL_MS`, `SPOOL_SSE_MAX_MS`, `SPOOL_SSE_KEEPALIVE_MS`: live reads.
    pub live: LiveSettings,
    /// `SPOOL_HEADER_TIMEOUT_MS`, `SPOOL_REQUEST_TIMEOUT_MS`, `SPOOL_MAX_CONNECTIONS`.
    pub server: ServerSettings,
    /// `SPOOL_RATE_HANDSHAKES_PER_MIN` (per client address and per API key, default 20),
    /// `SPOOL_RATE_WRITES_PER_S` (per organization and per client address, default 100, with
    /// bursts of ten times that), `SPOOL_RATE_CREATES_PER_MIN` (streams, chats and workspaces
    /// per organization, default 600); `0` turns one off, `SPOOL_RATE_LIMITS=off` all.
    pub rate_limits: spool_auth::RateLimits,
    /// `SPOOL_REVOCATION_CHECK_MS`: how often a process reads the revoked API keys again, so a
    /// revoked key's tokens stop working within this bound (default 30000).
    pub revocation_check: Duration,
    /// `SPOOL_JWT_SECRET`: the token signing secret (at least 32 bytes). `spool serve` makes
    /// and keeps one in its data directory when it is not set; on AWS it is read
    /// from the Secrets Manager secret `SPOOL_SECRET_ARNS` names, never from the environment.
    pub jwt_secret: Option<SecretString>,
    /// `SPOOL_WEBHOOK_SECRET`: the secret the webhook signing key (Ed25519) and subscription
    /// callback tokens are derived from (at least 32 bytes). On AWS it is its own Secrets
    /// Manager secret, which the worker reads too (it never gets the token signing secret);
    /// `spool serve` derives them from the token signing secret when it is not set.
    pub webhook_secret: Option<SecretString>,
    /// `SPOOL_ORIGIN_SECRET`: on AWS, the value CloudFront sends in `x-spool-origin` with every
    /// request to the functions; set, the API and stream functions refuse requests without it,
    /// so only the deployment's CloudFront URL reaches them. Read from Secrets Manager.
    pub origin_secret: Option<SecretString>,
    /// `SPOOL_DATA_KEY`: the key that seals MCP servers' header and env values at rest (the
    /// base64 of 32 random bytes, e.g. `openssl rand -base64 32`, or their 64 hex digits; checked
    /// at start). `spool
    /// serve` makes and keeps one in its data directory (`data-key`) when it is not set; on AWS
    /// it is read from its own Secrets Manager secret that `SPOOL_SECRET_ARNS` names.
    pub data_key: Option<SecretString>,
    /// `SPOOL_JWT_PREVIOUS_SECRET`: the secret being rotated out; tokens it signed are still
    /// accepted until `SPOOL_JWT_PREVIOUS_UNTIL` (seconds since the Unix epoch; a day after the
    /// rotation keeps everyone signed in).
    pub jwt_previous: Option<(SecretString, i64)>,
    /// AWS access and resource names.
    pub aws: AwsSettings,
    /// Chats' files.
    pub attachments: AttachmentSettings,
    /// How agents run.
    pub agents: AgentSettings,
}

impl Config {
    /// The token signing secret's bytes, required on Lambda (the template passes it).
    pub fn require_jwt_secret(&self) -> Result<&[u8], Error> {
        use secrecy::ExposeSecret;
        self.jwt_secret
            .as_ref()
            .map(|s| s.expose_secret().as_bytes())
            .ok_or(Error::Missing {
                var: "SPOOL_JWT_SECRET",
                hint: "on AWS it comes from the secret SPOOL_SECRET_ARNS names (the template makes it); locally, set at least 32 random bytes",
            })
    }

    /// The webhook signing keys, from `SPOOL_WEBHOOK_SECRET`, or `None` when it is not set
    /// (a process that runs no subscriptions, like the turns function).
    pub fn webhook_keys(&self) -> Result<Option<spool_auth::WebhookKeys>, Error> {
        use secrecy::ExposeSecret;
        let Some(secret) = &self.webhook_secret else {
            return Ok(None);
        };
        let secret = secret.expose_secret().as_bytes();
        if secret.len() < spool_auth::TokenKeys::MIN_SECRET_BYTES {
            return Err(Error::Invalid {
                var: "SPOOL_WEBHOOK_SECRET",
                value: "(secret)".to_owned(),
                reason: format!("must be at least {} bytes", spool_auth::TokenKeys::MIN_SECRET_BYTES),
            });
        }
        spool_auth::WebhookKeys::derive(secret)
            .map(Some)
            .map_err(|e| Error::Invalid {
                var: "SPOOL_WEBHOOK_SECRET",
                value: "(secret)".to_owned(),
                reason: e.to_string(),
            })
    }

    /// The token keys over `secret`, with the secret being rotated out when one is set.
    pub fn token_keys(&self, secret: &[u8]) -> Result<spool_auth::TokenKeys, Error> {
        use secrecy::ExposeSecret;
        let invalid = |var: &'static str, e: spool_auth::AuthError| Error::Invalid {
            var,
            value: "(secret)".to_owned(),
            reason: e.to_string(),
        };
        let keys = spool_auth::TokenKeys::new(secret).map_err(|e| invalid("SPOOL_JWT_SECRET", e))?;
        match &self.jwt_previous {
            Some((previous, until)) => keys
                .with_previous(previous.expose_secret().as_bytes(), *until)
                .map_err(|e| invalid("SPOOL_JWT_PREVIOUS_SECRET", e)),
            None => Ok(keys),
        }
    }

    /// The box that seals MCP servers' secrets with `SPOOL_DATA_KEY`, or `None` when it is not
    /// set.
    pub fn data_box(&self) -> Result<Option<spool_chat::mcp::SecretBox>, Error> {
        use secrecy::ExposeSecret;
        self.data_key
            .as_ref()
            .map(|key| data_box(key.expose_secret()))
            .transpose()
    }

    /// Where chats' own folders for CLI agents are made: `SPOOL_CLI_WORK_DIR`, else `cli` in
    /// the data directory; always absolute, since a CLI runs in another directory.
    pub fn cli_work_dir(&self) -> PathBuf {
        let dir = self
            .agents
            .cli_work_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("cli"));
        std::path::absolute(&dir).unwrap_or(dir)
    }

    /// The roots under which workspaces' working directories may be, with Spool's own folders
    /// (the data directory, the CLI work directory, the web UI) kept out of them, and `claims`
    /// recording which organization owns each shared root.
    pub fn workspace_roots(
        &self,
        claims: Arc<dyn spool_chat::directory::Directory>,
    ) -> spool_chat::confine::WorkspaceRoots {
        let absolute = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
        let own = [absolute(&self.data_dir), self.cli_work_dir(), absolute(&self.web_dir)];
        spool_chat::confine::WorkspaceRoots::new(&self.agents.workspace_roots, &own, claims)
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_vars(std::env::vars())
    }

    /// Reads `env_file` if it exists, then the process environment, which wins.
    pub fn from_env_and_file(env_file: &std::path::Path) -> Result<Self, Error> {
        let mut vars = read_env_file(env_file)?;
        vars.extend(std::env::vars());
        Self::from_vars(vars)
    }

    /// Builds the configuration from `(name, value)` pairs; a later pair overrides an earlier.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self, Error> {
        let vars: HashMap<String, String> = vars.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        let get = |name: &str| vars.get(name).cloned();
        let defaults = LogLimits::default();
        let live = LiveSettings::default();
        let limits = LogLimits {
            max_append_bytes: parse(&vars, "SPOOL_MAX_APPEND_BYTES", defaults.max_append_bytes)?,
            max_read_bytes: parse(&vars, "SPOOL_MAX_READ_BYTES", defaults.max_read_bytes)?,
            page_bytes: parse(&vars, "SPOOL_PAGE_BYTES", defaults.page_bytes)?,
            page_max_messages: parse(&vars, "SPOOL_PAGE_MAX_MESSAGES", defaults.page_max_messages)?,
            idle_seal: millis(&vars, "SPOOL_IDLE_SEAL_MS", defaults.idle_seal)?,
        };
        for (var, value) in [
            ("SPOOL_MAX_READ_BYTES", limits.max_read_bytes),
            ("SPOOL_PAGE_BYTES", limits.page_bytes),
            ("SPOOL_PAGE_MAX_MESSAGES", limits.page_max_messages),
        ] {
            if value == 0 {
                return Err(Error::Invalid {
                    var,
                    value: "0".to_owned(),
                    reason: "must be at least 1".to_owned(),
                });
            }
        }
        let credentials = match (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) {
            (Some(access_key_id), Some(secret)) => Some(StaticCredentials {
                access_key_id,
                secret_access_key: SecretString::from(secret),
                session_token: get("AWS_SESSION_TOKEN").map(SecretString::from),
            }),
            _ => None,
        };
        Ok(Self {
            backend: parse(&vars, "SPOOL_BACKEND", Backend::Embedded)?,
            addr: parse(&vars, "SPOOL_ADDR", SocketAddr::from(([127, 0, 0, 1], 8080)))?,
            data_dir: get("SPOOL_DATA_DIR").map_or_else(|| PathBuf::from(".spool"), PathBuf::from),
            web_dir: get("SPOOL_WEB_DIR").map_or_else(|| PathBuf::from("web/dist"), PathBuf::from),
            limits,
            live_poll: Duration::from_millis(parse(&vars, "SPOOL_LIVE_POLL_MS", 500u64)?.max(10)),
            live: LiveSettings {
                long_poll: millis(&vars, "SPOOL_LONG_POLL_MS", live.long_poll)?,
                sse_max: millis(&vars, "SPOOL_SSE_MAX_MS", live.sse_max)?,
                sse_keepalive: millis(&vars, "SPOOL_SSE_KEEPALIVE_MS", live.sse_keepalive)?,
            },
            server: {
                let defaults = ServerSettings::default();
                ServerSettings {
                    header_timeout: millis(&vars, "SPOOL_HEADER_TIMEOUT_MS", defaults.header_timeout)?,
                    request_timeout: millis(&vars, "SPOOL_REQUEST_TIMEOUT_MS", defaults.request_timeout)?,
                    max_connections: parse(&vars, "SPOOL_MAX_CONNECTIONS", defaults.max_connections)?.max(1),
                }
            },
            rate_limits: rate_limits(&vars)?,
            revocation_check: millis(&vars, "SPOOL_REVOCATION_CHECK_MS", Duration::from_secs(30))?,
            jwt_secret: get("SPOOL_JWT_SECRET").map(SecretString::from),
            origin_secret: get("SPOOL_ORIGIN_SECRET").map(SecretString::from),
            webhook_secret: get("SPOOL_WEBHOOK_SECRET").map(SecretString::from),
            data_key: match get("SPOOL_DATA_KEY") {
                Some(key) => {
                    data_box(&key)?;
                    Some(SecretString::from(key))
                }
                None => None,
            },
            jwt_previous: match get("SPOOL_JWT_PREVIOUS_SECRET") {
                Some(secret) => {
                    if !vars.contains_key("SPOOL_JWT_PREVIOUS_UNTIL") {
                        return Err(Error::Missing {
                            var: "SPOOL_JWT_PREVIOUS_UNTIL",
                            hint: "a rotated-out secret needs the end of its window (seconds since the Unix epoch, e.g. `date -d '+1 day' +%s`)",
                        });
                    }
                    Some((
                        SecretString::from(secret),
                        parse(&vars, "SPOOL_JWT_PREVIOUS_UNTIL", 0i64)?,
                    ))
                }
                None => None,
            },
            attachments: {
                let defaults = AttachmentSettings::default();
                AttachmentSettings {
                    max_bytes: parse(&vars, "SPOOL_MAX_ATTACHMENT_BYTES", defaults.max_bytes)?,
                    inline_text_bytes: parse(&vars, "SPOOL_ATTACHMENT_TEXT_BYTES", defaults.inline_text_bytes)?,
                    inline_image_bytes: parse(&vars, "SPOOL_ATTACHMENT_IMAGE_BYTES", defaults.inline_image_bytes)?,
                }
            },
            agents: AgentSettings {
                // At most 30 each: a run's producer epoch counts them in 5 bits.
                turn_max_attempts: parse(&vars, "SPOOL_TURN_MAX_ATTEMPTS", 3u32)?.clamp(1, 28),
                turn_max_deliveries: parse(
                    &vars,
                    "SPOOL_TURN_MAX_DELIVERIES",
                    parse(&vars, "SPOOL_TURN_MAX_ATTEMPTS", 3u32)?.clamp(1, 28) + 2,
                )?
                .min(30),
                turn_lease: millis(&vars, "SPOOL_TURN_LEASE_MS", Duration::from_secs(120))?.max(Duration::from_secs(1)),
                worker_concurrency: parse(
                    &vars,
                    "SPOOL_WORKER_CONCURRENCY",
                    spool_chat::turns::DEFAULT_WORKER_CONCURRENCY,
                )?
                .max(1),
                org_turn_concurrency: parse(
                    &vars,
                    "SPOOL_ORG_TURN_CONCURRENCY",
                    spool_chat::turns::DEFAULT_ORG_TURN_CONCURRENCY,
                )?
                .max(1),
                openai: llm(&vars, "OPENAI", "https://api.openai.com/v1", "gpt-4o-mini"),
                anthropic: llm(&vars, "ANTHROPIC", "https://api.anthropic.com", "claude-sonnet-4-5"),
                cli_timeout: millis(&vars, "SPOOL_CLI_TIMEOUT_MS", Duration::from_secs(600))?,
                cli_path: get("SPOOL_CLI_PATH")
                    .or_else(|| get("PATH"))
                    .map(|p| std::env::split_paths(&p).collect())
                    .unwrap_or_default(),
                cli_work_dir: get("SPOOL_CLI_WORK_DIR").map(PathBuf::from),
                cli_env: cli_env(&vars)?,
                cli_inherited: CLI_INHERITED_VARS
                    .iter()
                    .filter_map(|name| get(name).map(|v| ((*name).to_owned(), v)))
                    .collect(),
                workspace_roots: workspace_roots(&vars)?,
                turn_timeout: millis(&vars, "SPOOL_TURN_TIMEOUT_MS", Duration::from_secs(600))?,
                knowledge_base_url: get("SPOOL_KNOWLEDGE_BASE_URL").unwrap_or_else(|| "/v1/docs".to_owned()),
                cli_host: get("SPOOL_CLI_HOST")
                    .map(|v| {
                        v.parse().map_err(|reason: String| Error::Invalid {
                            var: "SPOOL_CLI_HOST",
                            value: v.clone(),
                            reason,
                        })
                    })
                    .transpose()?,
                runner_wait: millis(&vars, "SPOOL_RUNNER_WAIT_MS", Duration::from_secs(600))?
                    .max(Duration::from_secs(1)),
                public_url: get("SPOOL_PUBLIC_URL").map(|u| u.trim_end_matches('/').to_owned()),
                mcp_call_timeout: millis(&vars, "SPOOL_MCP_CALL_TIMEOUT_MS", Duration::from_secs(60))?
                    .max(Duration::from_millis(100)),
            },
            aws: AwsSettings {
                endpoint_url: get("AWS_ENDPOINT_URL"),
                dynamodb_endpoint_url: get("AWS_ENDPOINT_URL_DYNAMODB"),
                region: get("AWS_REGION").or_else(|| get("AWS_DEFAULT_REGION")),
                credentials,
                streams_table: get("SPOOL_STREAMS_TABLE"),
                metadata_table: get("SPOOL_METADATA_TABLE"),
                pages_bucket: get("SPOOL_PAGES_BUCKET"),
                attachments_bucket: get("SPOOL_ATTACHMENTS_BUCKET").or_else(|| get("SPOOL_PAGES_BUCKET")),
                turns_queue_url: get("SPOOL_TURNS_QUEUE_URL"),
                maintenance_queue_url: get("SPOOL_MAINTENANCE_QUEUE_URL"),
                aggregates_queue_url: get("SPOOL_AGGREGATES_QUEUE_URL"),
                chat_api_url: get("SPOOL_CHAT_API_URL"),
                notify_from: get("SPOOL_NOTIFY_FROM"),
                secret_arns: get("SPOOL_SECRET_ARNS")
                    .map(|arns| {
                        arns.split(',')
                            .map(str::trim)
                            .filter(|arn| !arn.is_empty())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default(),
                secrets_refresh: millis(&vars, "SPOOL_SECRETS_REFRESH_MS", Duration::from_secs(300))?
                    .max(Duration::from_secs(1)),
            },
        })
    }
}

/// The rate limits: the defaults, each overridden by its variable (`0` is off), or none.
fn rate_limits(vars: &HashMap<String, String>) -> Result<spool_auth::RateLimits, Error> {
    use spool_auth::{Rate, RateLimits};
    match vars.get("SPOOL_RATE_LIMITS").map(|v| v.trim().to_ascii_lowercase()) {
        Some(off) if off == "off" => return Ok(RateLimits::OFF),
        Some(on) if on == "on" => {}
        Some(_) => {
            return Err(Error::Invalid {
                var: "SPOOL_RATE_LIMITS",
                value: vars["SPOOL_RATE_LIMITS"].clone(),
                reason: "use `on` or `off`".to_owned(),
            });
        }
        None => {}
    }
    let defaults = RateLimits::default();
    let or_off = |rate: Rate, count: u32| if count == 0 { Rate::OFF } else { rate };
    Ok(RateLimits {
        handshakes: match vars.get("SPOOL_RATE_HANDSHAKES_PER_MIN") {
            None => defaults.handshakes,
            Some(_) => {
                let n = parse(vars, "SPOOL_RATE_HANDSHAKES_PER_MIN", 0u32)?;
                or_off(Rate::per_minute(n), n)
            }
        },
        writes: match vars.get("SPOOL_RATE_WRITES_PER_S") {
            None => defaults.writes,
            Some(_) => {
                let n = parse(vars, "SPOOL_RATE_WRITES_PER_S", 0u32)?;
                or_off(Rate::per_second(n, n.saturating_mul(10)), n)
            }
        },
        creates: match vars.get("SPOOL_RATE_CREATES_PER_MIN") {
            None => defaults.creates,
            Some(_) => {
                let n = parse(vars, "SPOOL_RATE_CREATES_PER_MIN", 0u32)?;
                or_off(Rate::per_minute(n), n)
            }
        },
    })
}

/// The box over a data key's text, or why the key is not one (without repeating it).
fn data_box(key: &str) -> Result<spool_chat::mcp::SecretBox, Error> {
    spool_chat::mcp::SecretBox::parse(key).map_err(|reason| Error::Invalid {
        var: "SPOOL_DATA_KEY",
        value: "(secret)".to_owned(),
        reason,
    })
}
