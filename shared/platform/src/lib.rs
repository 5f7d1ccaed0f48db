//! # Configuration and telemetry for every Spool binary
//!
//! The environment is read once, at start-up, into a typed [`Config`]; nothing else in Spool
//! calls `std::env::var`. Values can also come from an env file (`.env.emulator`, written by
//! `make emulator-up`), which the process environment overrides, so no code ever needs
//! `set_var`.

use std::{collections::HashMap, net::SocketAddr, path::PathBuf, str::FromStr, sync::Arc, time::Duration};

use secrecy::SecretString;
use spool_domain::{LiveSettings, LogLimits};

/// A configuration value that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A variable has a value that does not parse.
    #[error("{var}={value:?} is invalid: {reason}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A variable the chosen backend needs is not set.
    #[error("{var} is not set; {hint}")]
    Missing {
        /// The variable.
        var: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// A secret named by `SPOOL_SECRET_ARNS` could not be read or is not what Spool expects.
    #[error(
        "cannot use secret {arn}: {reason}. It must exist, hold a JSON object of configuration variables (e.g. {{\"SPOOL_JWT_SECRET\": \"…\"}}), and be readable by the function's role (secretsmanager:GetSecretValue)"
    )]
    Secret {
        /// The secret's ARN.
        arn: String,
        /// What went wrong.
        reason: String,
    },
    /// The env file could not be read.
    #[error("cannot read env file {path}: {source}")]
    EnvFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Where streams are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One SQLite file plus a directory of page files under the data directory.
    Embedded,
    /// DynamoDB, S3 and SQS (or an emulator of them).
    Aws,
}

impl FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "embedded" => Ok(Self::Embedded),
            "aws" => Ok(Self::Aws),
            other => Err(format!("unknown backend `{other}`; use `embedded` or `aws`")),
        }
    }
}

/// Static credentials, for an emulator or a developer machine.
#[derive(Debug, Clone)]
pub struct StaticCredentials {
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: SecretString,
    /// `AWS_SESSION_TOKEN`.
    pub session_token: Option<SecretString>,
}

/// An LLM provider's endpoint.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// The API's base URL (for OpenAI-compatible servers, up to and including `/v1`).
    pub base_url: String,
    /// The API key, if the server needs one (Ollama and vLLM may not).
    pub api_key: Option<SecretString>,
    /// The model used when an agent names none.
    pub model: String,
}

/// How agents run.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// `SPOOL_TURN_MAX_ATTEMPTS`: how many times a turn step is tried before the turn is ended
    /// with an error (default 3; the template's dead-letter redrive says the same).
    pub turn_max_attempts: u32,
    /// `SPOOL_TURN_MAX_DELIVERIES`: how many times the turns queue delivers a job before its
    /// dead-letter queue (the template's `maxReceiveCount`; default the attempts and two more).
    /// Attempts count runs, not deliveries; the last delivery ends a turn whose step fails.
    pub turn_max_deliveries: u32,
    /// `SPOOL_TURN_LEASE_MS`: how long a worker holds a turn without a heartbeat (default
    /// 120000; the turns queue's visibility timeout in the template): a worker that dies loses
    /// its turns after at most this long, while a running step extends its lease every third
    /// of it.
    pub turn_lease: Duration,
    /// `SPOOL_WORKER_CONCURRENCY`: how many turns `spool serve`'s worker runs at once (default
    /// [`spool_domain::DEFAULT_WORKER_CONCURRENCY`]).
    pub worker_concurrency: usize,
    /// `SPOOL_ORG_TURN_CONCURRENCY`: how many of them one organization may run at once (default
    /// [`spool_domain::DEFAULT_ORG_TURN_CONCURRENCY`]); the queue hands turns out round-robin
    /// across organizations, and a turn waiting for this bound shows how many are ahead of it.
    pub org_turn_concurrency: usize,
    /// `SPOOL_OPENAI_API_KEY`, `SPOOL_OPENAI_BASE_URL` (default `https://api.openai.com/v1`),
    /// `SPOOL_OPENAI_MODEL` (default `gpt-4o-mini`): an OpenAI-compatible provider, configured
    /// when a key or a base URL is set.
    pub openai: Option<LlmSettings>,
    /// `SPOOL_ANTHROPIC_API_KEY`, `SPOOL_ANTHROPIC_BASE_URL` (default
    /// `https://api.anthropic.com`), `SPOOL_ANTHROPIC_MODEL` (default `claude-sonnet-4-5`).
    pub anthropic: Option<LlmSettings>,
    /// `SPOOL_CLI_TIMEOUT_MS`: how long a CLI agent may run (default 600000).
    pub cli_timeout: Duration,
    /// `SPOOL_CLI_PATH` (default: `PATH`): where CLI agents are looked for, `:`-separated.
    pub cli_path: Vec<PathBuf>,
    /// `SPOOL_CLI_WORK_DIR`: where chats' own folders for CLI agents are made (with their input
    /// and output files); unset, `{data_dir}/cli` ([`Config::cli_work_dir`]), so `--data-dir`
    /// moves it too.
    pub cli_work_dir: Option<PathBuf>,
    /// `SPOOL_CLI_ENV`: the names of variables (provider keys, e.g.
    /// `ANTHROPIC_API_KEY,OPENAI_API_KEY`) passed through to CLI agents, with their values. A
    /// CLI gets nothing else of Spool's environment but `PATH` and the locale, so Spool's own
    /// variables (`SPOOL_*`) and cloud credentials (`AWS_*`) cannot be listed.
    pub cli_env: Vec<(String, SecretString)>,
    /// What a CLI keeps of Spool's environment: `PATH` (after the CLI search path, so the
    /// CLI finds its interpreter) and the locale (`LANG`, `LANGUAGE`, `LC_*`, `TZ`).
    pub cli_inherited: Vec<(String, String)>,
    /// `SPOOL_WORKSPACE_ROOTS`: the folders (`:`-separated) under which a workspace's working
    /// directory may be; none by default, so agents run only in folders of each chat's own. A
    /// root with `{org}` as a folder name (`/srv/repos/{org}`) is each organization's own; a
    /// plain one belongs to the first organization that uses it. Roots may not nest.
    pub workspace_roots: Vec<PathBuf>,
    /// `SPOOL_KNOWLEDGE_BASE_URL`: where the built-in agent points for documents about using
    /// Spool (default: Spool's own `/v1/docs`).
    pub knowledge_base_url: String,
    /// `SPOOL_TURN_TIMEOUT_MS`: the longest one step of a turn may spend in its runtime (model
    /// calls, a CLI, a script's pauses) before it is stopped and the turn fails (default
    /// 600000; the CLI's own limit cannot exceed it).
    pub turn_timeout: Duration,
}

/// Variables a CLI agent keeps from Spool's environment: `PATH`, and the locale, so its output
/// is in the right language and encoding.
const CLI_INHERITED_VARS: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_COLLATE",
    "LC_NUMERIC",
    "LC_TIME",
    "TZ",
];

/// The variables `SPOOL_CLI_ENV` names, with their values; Spool's own and cloud credentials
/// are refused.
fn cli_env(vars: &HashMap<String, String>) -> Result<Vec<(String, SecretString)>, Error> {
    let Some(list) = vars.get("SPOOL_CLI_ENV") else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let valid = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        let upper = name.to_ascii_uppercase();
        let reason = if !valid {
            Some(format!("`{name}` is not a variable name"))
        } else if upper.starts_with("SPOOL_") || upper.starts_with("AWS_") {
            Some(format!(
                "`{name}` is Spool's own configuration or a cloud credential, which agents must never see"
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::Invalid {
                var: "SPOOL_CLI_ENV",
                value: list.clone(),
                reason,
            });
        }
        if let Some(value) = vars.get(name) {
            out.push((name.to_owned(), SecretString::from(value.clone())));
        }
    }
    Ok(out)
}

/// How to reach AWS (or an emulator) and which resources to use.
#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    /// `AWS_ENDPOINT_URL`: one endpoint for every service (LocalStack, moto).
    pub endpoint_url: Option<String>,
    /// `AWS_ENDPOINT_URL_DYNAMODB`: DynamoDB's own endpoint, overriding `endpoint_url` (the
    /// tests run AWS's DynamoDB Local beside moto).
    pub dynamodb_endpoint_url: Option<String>,
    /// `AWS_REGION`.
    pub region: Option<String>,
    /// Static credentials, when both `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` are given;
    /// otherwise the SDK's default chain (the Lambda role, a profile, …) is used.
    pub credentials: Option<StaticCredentials>,
    /// `SPOOL_STREAMS_TABLE`: stream heads and the hot tail.
    pub streams_table: Option<String>,
    /// `SPOOL_METADATA_TABLE`: sessions, workspaces, agents, tasks.
    pub metadata_table: Option<String>,
    /// `SPOOL_PAGES_BUCKET`: sealed pages and large appends.
    pub pages_bucket: Option<String>,
    /// `SPOOL_ATTACHMENTS_BUCKET`: chats' files (default: the pages bucket, under
    /// `attachments/`).
    pub attachments_bucket: Option<String>,
    /// `SPOOL_TURNS_QUEUE_URL`: the FIFO queue of agent turns.
    pub turns_queue_url: Option<String>,
    /// `SPOOL_MAINTENANCE_QUEUE_URL`: page sealing and other background jobs.
    pub maintenance_queue_url: Option<String>,
    /// `SPOOL_AGGREGATES_QUEUE_URL`: the FIFO queue that carries workspaces' feed events and
    /// organizations' audit records to the worker, off the request path. Unset, requests
    /// append them themselves.
    pub aggregates_queue_url: Option<String>,
    /// `SPOOL_CHAT_API_URL`: the chat API's URL, where the stream function posts what the AI
    /// SDK's routes send (`POST /v1/ai-sdk/chat`); it holds no write rights itself.
    pub chat_api_url: Option<String>,
    /// `SPOOL_NOTIFY_FROM`: the verified Amazon SES address workspaces' notifications are sent
    /// from (with either backend); without it they go to the log and the workspace's feed.
    pub notify_from: Option<String>,
    /// `SPOOL_SECRET_ARNS`: Secrets Manager secrets (`,`-separated ARNs), each a JSON object of
    /// configuration variables read at cold start, so nothing secret is in the environment.
    pub secret_arns: Vec<String>,
    /// `SPOOL_SECRETS_REFRESH_MS`: how often a serving process reads those secrets again, so a
    /// rotated signing secret reaches it (default 300000).
    pub secrets_refresh: Duration,
}

impl AwsSettings {
    /// A required resource name, or an error that says what to set.
    pub fn require<'a>(value: &'a Option<String>, var: &'static str) -> Result<&'a str, Error> {
        value.as_deref().ok_or(Error::Missing {
            var,
            hint: "run `make emulator-up` (it writes .env.emulator) or take the value from the stack outputs",
        })
    }
}

/// How `spool serve` treats its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSettings {
    /// `SPOOL_HEADER_TIMEOUT_MS`: how long a client may take to send a request's headers, and
    /// how long a kept-alive connection may sit idle (default 10000).
    pub header_timeout: Duration,
    /// `SPOOL_REQUEST_TIMEOUT_MS`: how long a request may take from its headers to its answer,
    /// its body included (default 30000; never less than a long-poll's wait plus 2 s). SSE
    /// responses, once started, end by their own lifetime (`SPOOL_SSE_MAX_MS`).
    pub request_timeout: Duration,
    /// `SPOOL_MAX_CONNECTIONS`: the most connections served at once (default 900, under the
    /// common limit of 1024 open files); more wait to be accepted.
    pub max_connections: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 900,
        }
    }
}

/// Chats' files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachmentSettings {
    /// `SPOOL_MAX_ATTACHMENT_BYTES`: the largest file a person may upload (default 100 MiB).
    pub max_bytes: u64,
    /// `SPOOL_ATTACHMENT_TEXT_BYTES`: the largest text-like file a model gets whole, as text
    /// (default 100 KB); a larger one is named in a note.
    pub inline_text_bytes: u64,
    /// `SPOOL_ATTACHMENT_IMAGE_BYTES`: the largest image a model gets as an image (default
    /// 5 MiB, Anthropic's limit); a larger one is named in a note.
    pub inline_image_bytes: u64,
}

impl AttachmentSettings {
    /// What the chat service holds files to.
    pub fn limits(&self) -> spool_domain::service::AttachmentLimits {
        spool_domain::service::AttachmentLimits {
            max_bytes: self.max_bytes,
            ..spool_domain::service::AttachmentLimits::default()
        }
    }
}

impl Default for AttachmentSettings {
    fn default() -> Self {
        Self {
            max_bytes: spool_domain::attachment::DEFAULT_MAX_ATTACHMENT_BYTES,
            inline_text_bytes: 100_000,
            inline_image_bytes: 5 * 1024 * 1024,
        }
    }
}

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
    pub fn workspace_roots(&self, claims: Arc<dyn spool_domain::Directory>) -> spool_domain::WorkspaceRoots {
        let absolute = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
        let own = [absolute(&self.data_dir), self.cli_work_dir(), absolute(&self.web_dir)];
        spool_domain::WorkspaceRoots::new(&self.agents.workspace_roots, &own, claims)
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
                    spool_domain::DEFAULT_WORKER_CONCURRENCY,
                )?
                .max(1),
                org_turn_concurrency: parse(
                    &vars,
                    "SPOOL_ORG_TURN_CONCURRENCY",
                    spool_domain::DEFAULT_ORG_TURN_CONCURRENCY,
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

/// `SPOOL_WORKSPACE_ROOTS`, `:`-separated, checked ([`spool_domain::confine::check_roots`]).
fn workspace_roots(vars: &HashMap<String, String>) -> Result<Vec<PathBuf>, Error> {
    let Some(value) = vars.get("SPOOL_WORKSPACE_ROOTS") else {
        return Ok(Vec::new());
    };
    let roots: Vec<PathBuf> = std::env::split_paths(value)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    spool_domain::confine::check_roots(&roots).map_err(|reason| Error::Invalid {
        var: "SPOOL_WORKSPACE_ROOTS",
        value: value.clone(),
        reason,
    })?;
    Ok(roots)
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

/// A provider's settings (`SPOOL_{name}_API_KEY`, `_BASE_URL`, `_MODEL`), when its key or base
/// URL is set.
fn llm(vars: &HashMap<String, String>, name: &str, base_url: &str, model: &str) -> Option<LlmSettings> {
    let get = |suffix: &str| vars.get(&format!("SPOOL_{name}_{suffix}")).cloned();
    let api_key = get("API_KEY");
    let url = get("BASE_URL");
    if api_key.is_none() && url.is_none() {
        return None;
    }
    Some(LlmSettings {
        base_url: url
            .unwrap_or_else(|| base_url.to_owned())
            .trim_end_matches('/')
            .to_owned(),
        api_key: api_key.map(SecretString::from),
        model: get("MODEL").unwrap_or_else(|| model.to_owned()),
    })
}

/// A duration in milliseconds, at least 1 ms.
fn millis(vars: &HashMap<String, String>, var: &'static str, default: Duration) -> Result<Duration, Error> {
    let ms = parse(vars, var, u64::try_from(default.as_millis()).unwrap_or(u64::MAX))?;
    Ok(Duration::from_millis(ms.max(1)))
}

fn parse<T>(vars: &HashMap<String, String>, var: &'static str, default: T) -> Result<T, Error>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    match vars.get(var) {
        None => Ok(default),
        Some(value) => value.trim().parse().map_err(|e: T::Err| Error::Invalid {
            var,
            value: value.clone(),
            reason: e.to_string(),
        }),
    }
}

/// Reads `KEY=VALUE` lines from an env file (blank lines and `#` comments skipped, values may
/// be single- or double-quoted). A missing file reads as empty.
pub fn read_env_file(path: &std::path::Path) -> Result<Vec<(String, String)>, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::EnvFile {
                path: path.to_owned(),
                source,
            });
        }
    };
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let (key, value) = line.trim_start_matches("export ").split_once('=')?;
            let value = value.trim();
            let unquoted = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value);
            Some((key.trim().to_owned(), unquoted.to_owned()))
        })
        .collect())
}

/// Sets up `tracing` for a local process: human-readable lines on stderr (coloured only on a
/// terminal, so a log file or a pipe gets plain text), filtered by `RUST_LOG` (default `info`). Lambda functions use `lambda_runtime`'s subscriber instead,
/// which honours `AWS_LAMBDA_LOG_FORMAT=JSON`.
pub fn init_local_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A second call (several tests in one process) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn defaults_need_no_variable() {
        let config = Config::from_vars(Vec::new()).unwrap();
        assert_eq!(config.backend, Backend::Embedded);
        assert_eq!(config.addr.to_string(), "127.0.0.1:8080");
        assert_eq!(config.limits, LogLimits::default());
        assert!(config.aws.credentials.is_none());
        // The third source design sets no limit on chats processed at once: an organization runs
        // 16 turns at once, and a flood of its chats leaves as many slots to the others.
        assert_eq!(config.agents.org_turn_concurrency, 16);
        assert!(config.agents.worker_concurrency >= 2 * config.agents.org_turn_concurrency);
        let set = Config::from_vars(vars(&[("SPOOL_ORG_TURN_CONCURRENCY", "2")])).unwrap();
        assert_eq!(set.agents.org_turn_concurrency, 2);
    }

    #[test]
    fn later_values_win_and_bad_values_name_the_variable() {
        let config = Config::from_vars(vars(&[("SPOOL_BACKEND", "embedded"), ("SPOOL_BACKEND", "aws")])).unwrap();
        assert_eq!(config.backend, Backend::Aws);
        let err = Config::from_vars(vars(&[("SPOOL_PAGE_BYTES", "lots")])).unwrap_err();
        assert!(err.to_string().contains("SPOOL_PAGE_BYTES"), "{err}");
        assert!(Config::from_vars(vars(&[("SPOOL_PAGE_BYTES", "0")])).is_err());
    }

    #[test]
    fn the_cli_work_dir_follows_the_data_dir_and_is_absolute() {
        let mut config = Config::from_vars(vars(&[("SPOOL_DATA_DIR", "from-env")])).unwrap();
        // a flag that sets the data directory after the environment was read moves it too
        config.data_dir = PathBuf::from("from-flag");
        let dir = config.cli_work_dir();
        assert!(dir.is_absolute(), "{}", dir.display());
        assert!(dir.ends_with("from-flag/cli"), "{}", dir.display());
        let config = Config::from_vars(vars(&[("SPOOL_CLI_WORK_DIR", "/srv/cli")])).unwrap();
        assert_eq!(config.cli_work_dir(), PathBuf::from("/srv/cli"));
    }

    #[test]
    fn workspace_roots_are_checked_at_start() {
        let config = Config::from_vars(vars(&[("SPOOL_WORKSPACE_ROOTS", "/srv/repos/{org}:/srv/shared")])).unwrap();
        assert_eq!(config.agents.workspace_roots.len(), 2);
        for bad in ["/srv:/srv/a", "relative", "/srv/{org}:/srv/shared", "/srv/x{org}"] {
            let err = Config::from_vars(vars(&[("SPOOL_WORKSPACE_ROOTS", bad)])).unwrap_err();
            assert!(err.to_string().contains("SPOOL_WORKSPACE_ROOTS"), "{bad}: {err}");
        }
    }

    #[test]
    fn cli_env_passes_named_keys_and_refuses_spool_secrets() {
        use secrecy::ExposeSecret;
        let config = Config::from_vars(vars(&[
            ("SPOOL_CLI_ENV", "ANTHROPIC_API_KEY, UNSET_KEY"),
            ("ANTHROPIC_API_KEY", "sk-1"),
            ("LANG", "C.UTF-8"),
        ]))
        .unwrap();
        let env: Vec<(&str, &str)> = config
            .agents
            .cli_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose_secret()))
            .collect();
        assert_eq!(env, [("ANTHROPIC_API_KEY", "sk-1")]);
        assert_eq!(config.agents.cli_inherited, [("LANG".to_owned(), "C.UTF-8".to_owned())]);
        for bad in ["SPOOL_JWT_SECRET", "aws_secret_access_key", "A-B", "1X"] {
            let err = Config::from_vars(vars(&[("SPOOL_CLI_ENV", bad)])).unwrap_err();
            assert!(err.to_string().contains("SPOOL_CLI_ENV"), "{err}");
        }
    }

    #[test]
    fn env_files_allow_comments_quotes_and_export() {
        let dir = std::env::temp_dir().join(format!("spool-env-{}", std::process::id()));
        std::fs::write(&dir, "# emulator\nexport A=1\nB=\"two\"\n\nC='3'\n").unwrap();
        let read = read_env_file(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(read, vars(&[("A", "1"), ("B", "two"), ("C", "3")]));
        assert!(
            read_env_file(std::path::Path::new("/nonexistent/.env"))
                .unwrap()
                .is_empty()
        );
    }
}
