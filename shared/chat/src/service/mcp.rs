//! # A workspace's MCP servers, as callers manage them
//!
//! [`McpServerService`] makes, reads, changes, deletes and tests a workspace's MCP servers
//! ([`crate::mcp`]), holding every one to the same rules ([`super::mcp_checks`]) whoever asks:
//! a server belongs to a workspace of the organization, has a name its tools can be prefixed
//! with (unique in the workspace, held by the store), the fields of its transport, a URL by the
//! deployment's [`UrlPolicy`], and its header and env values sealed with the deployment's data
//! key ([`SecretBox`]) before they are stored. A `stdio` server is refused where the worker
//! cannot start programs (Lambda) unless the workspace's CLI agents run on runners: it then
//! serves only them ([`RunsOn::Runners`]).
//!
//! It is also the [`McpCatalog`] turns ask for a workspace's enabled servers, with their secrets
//! opened, and tests a server through an injected [`McpProbe`] when the deployment has one.
//! Callers parse, call one method and shape its answer; who may ask is theirs to check.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use serde::Serialize;
use spool_log::{clock::Clock, error::Error, subscription::refusal::Refusal, subscription::spec::UrlPolicy};

use super::mcp_checks::{
    bad_request, check_env_name, check_env_value, check_header_name, check_header_value, check_server,
};
use crate::{
    mcp::{
        McpCatalog, McpEndpoint, McpLaunch, McpProbe, McpSecret, McpServer, McpToolInfo, McpTransport, SealedSecret,
        SecretBox, SecretMap, SecretPlace, ToolPolicy, default_policy, is_mcp_server_changed,
    },
    metadata::Metadata,
    settings::CliHost,
    workspace::{Workspace, new_id},
};

/// How long a test of a server may take before it is said to have failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// A new server, as the caller asks for it; values in `headers` and `env` are plain here and
/// sealed before they are kept.
#[derive(Clone, Default)]
pub struct NewMcpServer {
    /// Its name.
    pub name: String,
    /// How it is reached.
    pub transport: Option<McpTransport>,
    /// Its URL (`http`).
    pub url: Option<String>,
    /// Its headers (`http`).
    pub headers: BTreeMap<String, String>,
    /// Its program (`stdio`).
    pub command: Option<String>,
    /// Its arguments (`stdio`).
    pub args: Vec<String>,
    /// Its environment (`stdio`).
    pub env: BTreeMap<String, String>,
    /// Policies per tool.
    pub tools: BTreeMap<String, ToolPolicy>,
    /// On (when absent) or off.
    pub enabled: Option<bool>,
}

/// A change to a server: only what it names changes. A header, variable or tool set to `None`
/// is removed (a tool then follows its default policy).
#[derive(Clone, Default)]
pub struct McpServerEdit {
    /// Its name.
    pub name: Option<String>,
    /// Its URL (`http`).
    pub url: Option<String>,
    /// Headers to set (`Some`) or remove (`None`).
    pub headers: BTreeMap<String, Option<String>>,
    /// Its program (`stdio`).
    pub command: Option<String>,
    /// Its arguments, all of them (`stdio`).
    pub args: Option<Vec<String>>,
    /// Variables to set (`Some`) or remove (`None`).
    pub env: BTreeMap<String, Option<String>>,
    /// Tool policies to set (`Some`) or remove (`None`).
    pub tools: BTreeMap<String, Option<ToolPolicy>>,
    /// On or off.
    pub enabled: Option<bool>,
}

// Their values are secrets: a `Debug` shows their names only.
impl std::fmt::Debug for NewMcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewMcpServer")
            .field("name", &self.name)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for McpServerEdit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerEdit")
            .field("name", &self.name)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Where a `stdio` server's program runs.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunsOn {
    /// Whoever runs the turn: the worker of `spool serve`, or a runner for CLI agents on runners.
    Worker,
    /// Only runners (the deployment's worker cannot start programs): it serves the workspace's
    /// CLI agents on runners, not its model agents.
    Runners,
}

/// A server as kept, with where its program runs (`stdio`).
#[derive(Debug, Clone)]
pub struct PlacedMcpServer {
    /// The server.
    pub server: McpServer,
    /// Where its program runs; `None` for `http`.
    pub runs_on: Option<RunsOn>,
}

/// A test of a server: its tools with their policies, or why it could not be reached.
#[derive(Debug, Clone)]
pub struct McpTest {
    /// Whether the server answered with its tools.
    pub ok: bool,
    /// Its tools, each with the policy it has (set, or its default).
    pub tools: Vec<(McpToolInfo, ToolPolicy)>,
    /// Why not, said for a person.
    pub error: Option<String>,
}

/// A workspace's MCP servers over their store.
#[derive(Clone)]
pub struct McpServerService {
    metadata: Arc<dyn Metadata>,
    clock: Arc<dyn Clock>,
    secrets: Option<Arc<SecretBox>>,
    /// Whether the deployment's worker can start programs (`spool serve`), unlike Lambda.
    spawns: bool,
    urls: UrlPolicy,
    default_cli_host: CliHost,
    probe: Option<Arc<dyn McpProbe>>,
}

impl McpServerService {
    /// The servers over `metadata`, sealing secrets with `secrets` (the deployment's data key;
    /// without it, servers with header or env values are refused). `spawns` says whether the
    /// deployment's worker can start programs (`stdio` servers). URLs are held to public
    /// `https` addresses, workspaces' CLI agents run on the server unless they say otherwise,
    /// and there is no probe until the `with_` methods say otherwise.
    pub fn new(
        metadata: Arc<dyn Metadata>,
        clock: Arc<dyn Clock>,
        secrets: Option<Arc<SecretBox>>,
        spawns: bool,
    ) -> Self {
        Self {
            metadata,
            clock,
            secrets,
            spawns,
            urls: UrlPolicy { loopback_http: false },
            default_cli_host: CliHost::Server,
            probe: None,
        }
    }

    /// The same, accepting servers' URLs under `urls` (loopback for a loopback-bound `spool serve`).
    #[must_use]
    pub fn with_urls(mut self, urls: UrlPolicy) -> Self {
        self.urls = urls;
        self
    }

    /// The same, with workspaces' CLI agents on `host` unless they say otherwise.
    #[must_use]
    pub fn with_default_cli_host(mut self, host: CliHost) -> Self {
        self.default_cli_host = host;
        self
    }

    /// The same, sealing and opening secrets with `secrets` (the deployment's data key).
    #[must_use]
    pub fn with_secrets(mut self, secrets: Option<Arc<SecretBox>>) -> Self {
        self.secrets = secrets;
        self
    }

    /// The same, saying whether the deployment's worker can start programs.
    #[must_use]
    pub fn with_spawning(mut self, spawns: bool) -> Self {
        self.spawns = spawns;
        self
    }

    /// The same, testing servers with `probe`.
    #[must_use]
    pub fn with_probe(mut self, probe: Arc<dyn McpProbe>) -> Self {
        self.probe = Some(probe);
        self
    }

    /// Makes a server of workspace `workspace_id` ([`Error::Missing`] without it); the store
    /// refuses a name the workspace has ([`Error::Exists`]) and a server past its cap
    /// ([`Error::CapReached`]), atomically.
    pub async fn create(&self, org: &str, workspace_id: &str, new: NewMcpServer) -> Result<PlacedMcpServer, Error> {
        let workspace = self.workspace(org, workspace_id).await?;
        let now = self.clock.now_ms();
        let transport = new
            .transport
            .ok_or_else(|| bad_request("`transport` is required: `http` or `stdio`"))?;
        let mut server = McpServer {
            id: new_id("mcp"),
            workspace_id: workspace_id.to_owned(),
            name: new.name,
            transport,
            url: new.url,
            headers: BTreeMap::new(),
            command: new.command,
            args: new.args,
            env: BTreeMap::new(),
            tools: new.tools,
            enabled: new.enabled.unwrap_or(true),
            created_ms: now,
            updated_ms: now,
        };
        for (name, value) in new.headers {
            self.set_secret(org, &mut server, SecretMap::Headers, name, &value)?;
        }
        for (name, value) in new.env {
            self.set_secret(org, &mut server, SecretMap::Env, name, &value)?;
        }
        check_server(&server, self.urls)?;
        let runs_on = self.runs_on(&server, &workspace)?;
        self.metadata
            .create_mcp_server(org, &server)
            .await
            .map_err(named(&server))?;
        tracing::info!(org, workspace = %workspace_id, mcp_server = %server.id, name = %server.name, "MCP server made");
        Ok(PlacedMcpServer { server, runs_on })
    }

    /// The organization's server `id` ([`Error::Missing`] if it has none).
    pub async fn server(&self, org: &str, id: &str) -> Result<PlacedMcpServer, Error> {
        let server = self.stored(org, id).await?;
        let workspace = self.workspace(org, &server.workspace_id).await?;
        Ok(self.placed(server, &workspace))
    }

    /// Workspace `workspace_id`'s servers, oldest first ([`Error::Missing`] without it).
    pub async fn servers(&self, org: &str, workspace_id: &str) -> Result<Vec<PlacedMcpServer>, Error> {
        let workspace = self.workspace(org, workspace_id).await?;
        let servers = self.metadata.mcp_servers(org, workspace_id).await?;
        Ok(servers.into_iter().map(|s| self.placed(s, &workspace)).collect())
    }

    /// Changes server `id` as `edit` says; returns it changed. The change applies to the server
    /// as read; when another change came in between, it is read and applied again once, then
    /// refused ([`mcp_server_changed`], `409`).
    pub async fn update(&self, org: &str, id: &str, edit: McpServerEdit) -> Result<PlacedMcpServer, Error> {
        match self.update_once(org, id, edit.clone()).await {
            Err(e) if is_mcp_server_changed(&e) => {
                tracing::info!(org, mcp_server = %id, "MCP server changed meanwhile; applying the change again");
                self.update_once(org, id, edit).await
            }
            done => done,
        }
    }

    async fn update_once(&self, org: &str, id: &str, edit: McpServerEdit) -> Result<PlacedMcpServer, Error> {
        let mut server = self.stored(org, id).await?;
        let read_ms = server.updated_ms;
        let workspace = self.workspace(org, &server.workspace_id).await?;
        if let Some(name) = edit.name {
            server.name = name;
        }
        if let Some(url) = edit.url {
            server.url = Some(url);
        }
        if let Some(command) = edit.command {
            server.command = Some(command);
        }
        if let Some(args) = edit.args {
            server.args = args;
        }
        for (map, changes) in [(SecretMap::Headers, edit.headers), (SecretMap::Env, edit.env)] {
            for (name, value) in changes {
                match value {
                    Some(value) => self.set_secret(org, &mut server, map, name, &value)?,
                    None => {
                        match map {
                            SecretMap::Headers => server.headers.remove(&name),
                            SecretMap::Env => server.env.remove(&name),
                        };
                    }
                }
            }
        }
        for (tool, policy) in edit.tools {
            match policy {
                Some(policy) => server.tools.insert(tool, policy),
                None => server.tools.remove(&tool),
            };
        }
        if let Some(enabled) = edit.enabled {
            server.enabled = enabled;
        }
        // Later than the one read even within its millisecond, so each change is a new version.
        server.updated_ms = self.clock.now_ms().max(read_ms + 1);
        check_server(&server, self.urls)?;
        let runs_on = self.runs_on(&server, &workspace)?;
        self.metadata
            .update_mcp_server(org, &server, read_ms)
            .await
            .map_err(named(&server))?;
        tracing::info!(org, mcp_server = %server.id, "MCP server changed");
        Ok(PlacedMcpServer { server, runs_on })
    }

    /// Deletes server `id` ([`Error::Missing`] if it does not exist).
    pub async fn remove(&self, org: &str, id: &str) -> Result<(), Error> {
        self.metadata.delete_mcp_server(org, id).await?;
        tracing::info!(org, mcp_server = %id, "MCP server deleted");
        Ok(())
    }

    /// Tests server `id`: connects with the probe and lists its tools, each with its policy. A
    /// server that cannot be reached, or a deployment without a probe, is an answer (`ok:
    /// false` with why), not an error.
    pub async fn test(&self, org: &str, id: &str) -> Result<McpTest, Error> {
        let placed = self.server(org, id).await?;
        let Some(probe) = &self.probe else {
            return Ok(failed(
                "testing an MCP server is not available in this deployment: its API cannot connect to MCP servers",
            ));
        };
        if placed.runs_on == Some(RunsOn::Runners) {
            return Ok(failed(
                "this stdio server runs only on runners; this deployment cannot start it to test it",
            ));
        }
        let endpoint = self.endpoint(org, placed.server)?;
        let policies = endpoint.tools.clone();
        match tokio::time::timeout(PROBE_TIMEOUT, probe.probe(&endpoint)).await {
            Err(_) => Ok(failed(format!(
                "the server did not list its tools within {} s",
                PROBE_TIMEOUT.as_secs()
            ))),
            Ok(Err(why)) => Ok(failed(why)),
            Ok(Ok(tools)) => Ok(McpTest {
                ok: true,
                tools: tools
                    .into_iter()
                    .map(|t| {
                        let policy = policies.get(&t.name).copied().unwrap_or(default_policy(t.read_only));
                        (t, policy)
                    })
                    .collect(),
                error: None,
            }),
        }
    }

    /// Where a server's program runs, or a refusal of a `stdio` server nothing here could run.
    fn runs_on(&self, server: &McpServer, workspace: &Workspace) -> Result<Option<RunsOn>, Error> {
        let placed = self.placement(server, workspace);
        if placed.is_none() && server.transport == McpTransport::Stdio {
            return Err(bad_request(
                "this deployment cannot start programs, so a `stdio` server works here only in a workspace whose \
                 CLI agents run on runners (`cli_host: runners`); use an `http` server, or set the workspace's \
                 `cli_host` to `runners` first",
            ));
        }
        Ok(placed)
    }

    fn placement(&self, server: &McpServer, workspace: &Workspace) -> Option<RunsOn> {
        match server.transport {
            McpTransport::Http => None,
            McpTransport::Stdio if self.spawns => Some(RunsOn::Worker),
            McpTransport::Stdio => {
                (workspace.cli_host.unwrap_or(self.default_cli_host) == CliHost::Runners).then_some(RunsOn::Runners)
            }
        }
    }

    fn placed(&self, server: McpServer, workspace: &Workspace) -> PlacedMcpServer {
        // A stdio server a changed setting left without a host says where it would run.
        let runs_on = match server.transport {
            McpTransport::Http => None,
            McpTransport::Stdio => Some(self.placement(&server, workspace).unwrap_or(RunsOn::Runners)),
        };
        PlacedMcpServer { server, runs_on }
    }

    fn set_secret(
        &self,
        org: &str,
        server: &mut McpServer,
        map: SecretMap,
        name: String,
        value: &str,
    ) -> Result<(), Error> {
        match map {
            SecretMap::Headers => {
                check_header_name(&name)?;
                check_header_value(&name, value)?;
            }
            SecretMap::Env => {
                check_env_name(&name)?;
                check_env_value(&name, value)?;
            }
        }
        let secrets = self.secrets.as_ref().ok_or_else(no_data_key)?;
        let place = SecretPlace {
            org,
            server_id: &server.id,
            map,
            name: &name,
        };
        let sealed = secrets.seal(&place, value)?;
        match map {
            SecretMap::Headers => server.headers.insert(name, sealed),
            SecretMap::Env => server.env.insert(name, sealed),
        };
        Ok(())
    }

    /// `server` as a turn uses it, its secrets opened.
    fn endpoint(&self, org: &str, server: McpServer) -> Result<McpEndpoint, Error> {
        let open = |map: SecretMap, values: &BTreeMap<String, SealedSecret>| {
            values
                .iter()
                .map(|(name, sealed)| {
                    let secrets = self.secrets.as_ref().ok_or_else(no_data_key)?;
                    let place = SecretPlace {
                        org,
                        server_id: &server.id,
                        map,
                        name,
                    };
                    Ok((name.clone(), secrets.open(&place, sealed)?))
                })
                .collect::<Result<BTreeMap<String, McpSecret>, Error>>()
        };
        let launch = match server.transport {
            McpTransport::Http => McpLaunch::Http {
                url: server.url.clone().unwrap_or_default(),
                headers: open(SecretMap::Headers, &server.headers)?,
            },
            McpTransport::Stdio => McpLaunch::Stdio {
                command: server.command.clone().unwrap_or_default(),
                args: server.args.clone(),
                env: open(SecretMap::Env, &server.env)?,
            },
        };
        Ok(McpEndpoint {
            id: server.id,
            name: server.name,
            launch,
            tools: server.tools,
        })
    }

    async fn stored(&self, org: &str, id: &str) -> Result<McpServer, Error> {
        self.metadata.mcp_server(org, id).await?.ok_or_else(|| Error::Missing {
            what: format!("MCP server `{id}`"),
        })
    }

    async fn workspace(&self, org: &str, id: &str) -> Result<Workspace, Error> {
        self.metadata.workspace(org, id).await?.ok_or_else(|| Error::Missing {
            what: format!("workspace `{id}`"),
        })
    }
}

#[async_trait]
impl McpCatalog for McpServerService {
    /// The workspace's enabled servers, oldest first, secrets opened. A `stdio` server is
    /// among them wherever it is kept: whoever runs the turn starts it only where it may
    /// ([`McpLaunch::transport`]; never a Lambda). A server whose secrets cannot be opened (no
    /// data key, or one that does not open them) is left out with a warning, so the others
    /// still serve.
    async fn endpoints(&self, org: &str, workspace_id: &str) -> Result<Vec<McpEndpoint>, Error> {
        let servers = self.metadata.mcp_servers(org, workspace_id).await?;
        let mut endpoints = Vec::with_capacity(servers.len());
        for server in servers.into_iter().filter(|s| s.enabled) {
            let id = server.id.clone();
            match self.endpoint(org, server) {
                Ok(endpoint) => endpoints.push(endpoint),
                Err(e) => tracing::warn!(
                    org,
                    workspace = workspace_id,
                    mcp_server = %id,
                    error = %e,
                    "MCP server left out: its secrets cannot be opened"
                ),
            }
        }
        Ok(endpoints)
    }
}

fn failed(why: impl Into<String>) -> McpTest {
    McpTest {
        ok: false,
        tools: Vec::new(),
        error: Some(why.into()),
    }
}

fn no_data_key() -> Error {
    Refusal::new(
        409,
        "refused",
        "this deployment has no data key (SPOOL_DATA_KEY), so it cannot keep MCP servers' header or env values; \
         set one (32 random bytes, base64) or add the server without them",
    )
    .into()
}

/// The store's [`Error::Exists`] of a taken name, said with the name.
fn named(server: &McpServer) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::Exists { .. } => Refusal::new(
            409,
            "conflict",
            format!("the workspace has an MCP server named `{}` already", server.name),
        )
        .into(),
        e => e,
    }
}
