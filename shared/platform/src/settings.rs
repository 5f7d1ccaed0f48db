//! # The typed settings of the backend, AWS, the server and chats' files
//!
//! What [`Config`](crate::Config) holds besides the agents' settings
//! ([`AgentSettings`](crate::AgentSettings)), with the defaults each starts from.

use std::{str::FromStr, time::Duration};

use secrecy::SecretString;

use crate::Error;

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
    pub fn limits(&self) -> spool_chat::service::AttachmentLimits {
        spool_chat::service::AttachmentLimits {
            max_bytes: self.max_bytes,
            ..spool_chat::service::AttachmentLimits::default()
        }
    }
}

impl Default for AttachmentSettings {
    fn default() -> Self {
        Self {
            max_bytes: spool_chat::attachment::DEFAULT_MAX_ATTACHMENT_BYTES,
            inline_text_bytes: 100_000,
            inline_image_bytes: 5 * 1024 * 1024,
        }
    }
}
