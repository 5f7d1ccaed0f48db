//! # A workspace's MCP servers
//!
//! A workspace may name Model Context Protocol servers whose tools its agents call: remote ones
//! over the protocol's Streamable HTTP transport (`http`, reachable from anywhere, Lambda
//! included), and local programs over `stdio`, started by whoever runs the turn where a process
//! may be spawned (the worker of `spool serve`, a runner), never by a Lambda.
//!
//! - [`McpServer`] is a server as stored: its header and environment values are secrets, kept
//!   sealed ([`SealedSecret`]) and never shown, logged or written to events;
//! - [`McpEndpoint`] is a server as a turn uses it, with its secrets opened ([`McpSecret`]);
//! - [`McpServerStore`] is the port that keeps servers (part of [`crate::metadata::Metadata`]);
//! - [`McpCatalog`] is what the engine, the CLIs and runners ask for a workspace's enabled
//!   servers;
//! - [`McpProbe`] connects to a server and lists its tools (a workspace's "test").
//!
//! A tool of a server is offered to models as `{server}__{tool}` ([`tool_name`]); each tool has
//! a [`ToolPolicy`]: `allow` runs at once, `ask` waits for the person's approval, `deny` is not
//! offered. A tool with no policy set follows the server's own annotations ([`default_policy`]).

pub mod secrets;

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use spool_log::{error::Error, subscription::refusal::Refusal};

pub use secrets::{SecretBox, SecretMap, SecretPlace};

/// How a server is reached.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// The protocol's Streamable HTTP transport, at `url`.
    Http,
    /// A program Spool starts, spoken to over its standard input and output.
    Stdio,
}

impl McpTransport {
    /// Its name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Stdio => "stdio",
        }
    }
}

/// What happens when an agent calls a tool.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolPolicy {
    /// It runs at once.
    Allow,
    /// The person approves it first (`tool_approval_required`).
    Ask,
    /// It is not offered.
    Deny,
}

/// The policy of a tool with none set: a tool its server marks read-only runs at once, any
/// other asks first.
pub const fn default_policy(read_only: bool) -> ToolPolicy {
    if read_only { ToolPolicy::Allow } else { ToolPolicy::Ask }
}

/// What separates a server's name from its tool's in the name a model sees.
pub const TOOL_SEPARATOR: &str = "__";

/// The name a model sees for `tool` of server `server`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{server}{TOOL_SEPARATOR}{tool}")
}

/// A secret as stored: sealed with the deployment's data key, bound to its server and name, so
/// it opens nowhere else.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SealedSecret(pub String);

impl std::fmt::Debug for SealedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealedSecret(…)")
    }
}

/// A secret's value, opened for the one use that needs it (a header sent, a variable set). Its
/// `Debug` shows nothing; it is serialized only on the wire to the runner that uses it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct McpSecret(String);

impl McpSecret {
    /// A secret of `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Its value, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for McpSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("McpSecret(…)")
    }
}

/// A workspace's MCP server, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServer {
    /// Its id (`mcp_…`).
    pub id: String,
    /// The workspace it belongs to.
    pub workspace_id: String,
    /// Its name, unique in the workspace: the prefix of its tools' names.
    pub name: String,
    /// How it is reached.
    pub transport: McpTransport,
    /// Its URL (`http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent with every request (`http`), sealed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, SealedSecret>,
    /// The program (`stdio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments (`stdio`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its environment beyond the scrubbed one agents get (`stdio`), sealed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, SealedSecret>,
    /// Policies set per tool (by the tool's own name); a tool not named follows
    /// [`default_policy`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolPolicy>,
    /// Whether its tools are offered.
    pub enabled: bool,
    /// When it was made (ms since the epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
}

/// How a turn reaches a server, with its secrets opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum McpLaunch {
    /// Streamable HTTP.
    Http {
        /// Its URL.
        url: String,
        /// Headers sent with every request.
        #[serde(default)]
        headers: BTreeMap<String, McpSecret>,
    },
    /// A program over stdio.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Its environment beyond the scrubbed one.
        #[serde(default)]
        env: BTreeMap<String, McpSecret>,
    },
}

impl McpLaunch {
    /// Its transport.
    pub const fn transport(&self) -> McpTransport {
        match self {
            Self::Http { .. } => McpTransport::Http,
            Self::Stdio { .. } => McpTransport::Stdio,
        }
    }

    /// Every secret value it carries (for checks that none leaks).
    pub fn secrets(&self) -> impl Iterator<Item = &McpSecret> {
        let (a, b) = match self {
            Self::Http { headers, .. } => (Some(headers.values()), None),
            Self::Stdio { env, .. } => (None, Some(env.values())),
        };
        a.into_iter().flatten().chain(b.into_iter().flatten())
    }
}

/// An enabled server as a turn uses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpEndpoint {
    /// Its id.
    pub id: String,
    /// Its name (the prefix of its tools' names).
    pub name: String,
    /// How it is reached.
    pub launch: McpLaunch,
    /// Policies set per tool; others follow [`default_policy`].
    #[serde(default)]
    pub tools: BTreeMap<String, ToolPolicy>,
}

/// The refusal of an update of server `id` that was changed since it was read (`409 conflict`):
/// [`McpServerStore::update_mcp_server`]'s answer when the stored `updated_ms` is not the one
/// read.
pub fn mcp_server_changed(id: &str) -> Error {
    Refusal::new(
        409,
        CHANGED,
        format!("MCP server `{id}` was changed meanwhile; read it again and retry"),
    )
    .into()
}

/// Whether `e` is [`mcp_server_changed`].
pub fn is_mcp_server_changed(e: &Error) -> bool {
    matches!(e, Error::Refused(r) if r.code == CHANGED)
}

const CHANGED: &str = "changed";

/// Where a workspace's MCP servers are kept.
#[async_trait]
pub trait McpServerStore: Send + Sync {
    /// Stores a new server; [`Error::Exists`] (and nothing stored) if its workspace has one of
    /// its name, [`Error::CapReached`] if the workspace has
    /// [`crate::caps::Caps::mcp_servers_per_workspace`] already; both hold under races.
    async fn create_mcp_server(&self, org: &str, server: &McpServer) -> Result<(), Error>;

    /// The server, if the organization has it.
    async fn mcp_server(&self, org: &str, id: &str) -> Result<Option<McpServer>, Error>;

    /// A workspace's servers, oldest first.
    async fn mcp_servers(&self, org: &str, workspace_id: &str) -> Result<Vec<McpServer>, Error>;

    /// Replaces a server, only if the stored one is still the one read: its `updated_ms` is
    /// `read_ms` ([`mcp_server_changed`] otherwise, and nothing changed; [`Error::Missing`] if it
    /// does not exist, [`Error::Exists`] if its new name is another's of the workspace).
    async fn update_mcp_server(&self, org: &str, server: &McpServer, read_ms: i64) -> Result<(), Error>;

    /// Deletes a server ([`Error::Missing`] if it does not exist).
    async fn delete_mcp_server(&self, org: &str, id: &str) -> Result<(), Error>;
}

/// A workspace's enabled servers with their secrets opened, for whoever runs a turn.
#[async_trait]
pub trait McpCatalog: Send + Sync {
    /// The enabled servers of workspace `workspace_id`, oldest first.
    async fn endpoints(&self, org: &str, workspace_id: &str) -> Result<Vec<McpEndpoint>, Error>;
}

/// A tool a server offers, as a probe found it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolInfo {
    /// Its name on the server.
    pub name: String,
    /// What it does, as the server says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the server marks it read-only (`readOnlyHint`).
    #[serde(default)]
    pub read_only: bool,
    /// Its arguments' JSON schema.
    #[serde(default)]
    pub input_schema: serde_json::Value,
}

/// Connects to a server and lists its tools: a workspace's "test the connection".
#[async_trait]
pub trait McpProbe: Send + Sync {
    /// The server's tools, or why it could not be reached (said for a person).
    async fn probe(&self, endpoint: &McpEndpoint) -> Result<Vec<McpToolInfo>, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show_in_debug_output() {
        let launch = McpLaunch::Http {
            url: "https://mcp.example.com/mcp".into(),
            headers: BTreeMap::from([("Authorization".to_owned(), McpSecret::new("Bearer s3cr3t"))]),
        };
        assert!(!format!("{launch:?}").contains("s3cr3t"));
        assert!(!format!("{:?}", SealedSecret("v1.abc".into())).contains("abc"));
        assert_eq!(
            launch.secrets().map(McpSecret::expose).collect::<Vec<_>>(),
            ["Bearer s3cr3t"]
        );
    }

    #[test]
    fn read_only_tools_run_and_others_ask_by_default() {
        assert_eq!(default_policy(true), ToolPolicy::Allow);
        assert_eq!(default_policy(false), ToolPolicy::Ask);
        assert_eq!(tool_name("github", "search"), "github__search");
    }
}
