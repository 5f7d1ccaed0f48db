//! A step's MCP toolbox: the tools of the chat's workspace's enabled MCP servers
//! ([`spool_chat::mcp`]), offered to model runtimes and called when a model calls them.
//!
//! - Built once per step, the first time the step needs it (its first reply, or a call of a
//!   previous step to resolve): the servers are connected in parallel and their tools listed
//!   once; every reply of the step is offered the same list. The connections are closed, and
//!   stdio servers' processes killed, when the step ends, however it ends.
//! - A server that cannot be reached is left out with a system message for the person; a
//!   stdio server where programs may not be started ([`McpSettings::spawn_stdio`], false on
//!   Lambda) is left out with one system message per turn.
//! - `deny` tools are not offered; the others are offered as [`offered_name`] with their
//!   schemas as the server gave them.
//! - A call runs by its policy (the server's `tools`, else [`default_policy`]): `allow` at once,
//!   `ask` through the approval flow (the approved call runs in a later step, which connects
//!   again). A server that fails, hangs past [`McpSettings::call_timeout`] or dies ends the
//!   call with an error the model reads, and a system message the person reads.
//! - Runtimes that work on disk (CLIs) are not given tools: they get the endpoints
//!   ([`Request::mcp_servers`]) and give them to their program.

use std::collections::BTreeMap;

use spool_chat::mcp::{McpCatalog, McpEndpoint, McpLaunch, ToolPolicy, default_policy, tool_name};

use super::*;
use crate::{
    mcp::{Connection, McpSettings, STDIO_NOT_HERE, stdio::Place},
    runtime::ToolSpec,
};

/// The longest name a provider takes for a tool (`^[a-zA-Z0-9_-]{1,64}$`).
const MAX_NAME: usize = 64;

/// The most tools a step offers (providers refuse long lists).
const MAX_TOOLS: usize = 128;
/// The largest input schema offered, serialized (a larger one's tool is left out).
const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// The start of the system message a turn gets once when tools are left out by those limits.
const TOOLS_LEFT_OUT: &str = "Some MCP tools are not offered";

/// The start of the system message a turn gets once when its stdio servers are left out.
const STDIO_SKIPPED: &str = "The workspace's stdio MCP servers";

impl Engine {
    /// The same engine, offering model agents the tools of their workspace's MCP servers from
    /// `catalog` (and CLI agents the servers themselves); without, no MCP server is used.
    #[must_use]
    pub fn with_mcp(mut self, catalog: Arc<dyn McpCatalog>) -> Self {
        self.mcp = Some(catalog);
        self
    }
}

/// A tool of a server, as the step offers it.
#[derive(Debug, Clone)]
pub(super) struct McpTool {
    /// The server's name.
    pub(super) server: String,
    /// Its connection, in [`Toolbox::connections`].
    connection: usize,
    /// Its name on the server.
    pub(super) tool: String,
    pub(super) policy: ToolPolicy,
    /// What the model is offered.
    pub(super) spec: ToolSpec,
}

/// The servers a step connected to and the tools they offer.
#[derive(Debug, Default)]
pub(super) struct Toolbox {
    connections: Vec<Connection>,
    tools: Vec<McpTool>,
}

impl Toolbox {
    /// What models are offered.
    pub(super) fn specs(&self) -> impl Iterator<Item = ToolSpec> + '_ {
        self.tools.iter().map(|t| t.spec.clone())
    }

    /// The tool offered as `name`.
    pub(super) fn find(&self, name: &str) -> Option<&McpTool> {
        self.tools.iter().find(|t| t.spec.name == name)
    }

    /// Closes every connection (stdio servers' processes are killed).
    pub(super) async fn close(self) {
        futures_util::future::join_all(self.connections.into_iter().map(Connection::close)).await;
    }
}

/// The name a model is offered for `tool` of `server`: [`tool_name`] when it is one providers
/// take; else its characters outside `[a-zA-Z0-9_-]` replaced by `_`, cut to fit, and a hash of
/// the whole name added, so the same tool has the same name in every step and two never share
/// one.
pub fn offered_name(server: &str, tool: &str) -> String {
    let name = tool_name(server, tool);
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !name.is_empty() && name.len() <= MAX_NAME && name.chars().all(valid) {
        return name;
    }
    // FNV-1a: stable across builds and platforms.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let suffix = format!("_{:08x}", hash & 0xffff_ffff);
    let clean: String = name
        .chars()
        .map(|c| if valid(c) { c } else { '_' })
        .take(MAX_NAME - suffix.len())
        .collect();
    clean + &suffix
}

/// What a step offers of `tools` (in the servers' order, so the same in every step): each
/// offered name once (a later tool whose name is taken is left out), no schema over
/// [`MAX_SCHEMA_BYTES`], at most [`MAX_TOOLS`]; and what was left out, said for a person.
fn admit(tools: Vec<McpTool>) -> (Vec<McpTool>, Vec<String>) {
    let mut names = std::collections::HashSet::new();
    let mut admitted = Vec::new();
    let mut notes = Vec::new();
    let mut over = 0;
    for tool in tools {
        let size = serde_json::to_string(&tool.spec.parameters).map_or(usize::MAX, |s| s.len());
        if size > MAX_SCHEMA_BYTES {
            notes.push(format!(
                "`{}` of `{}` has an input schema over {} KiB",
                tool.tool,
                tool.server,
                MAX_SCHEMA_BYTES / 1024
            ));
        } else if names.contains(&tool.spec.name) {
            notes.push(format!(
                "`{}` of `{}` would be offered as `{}`, the name of another server's tool",
                tool.tool, tool.server, tool.spec.name
            ));
        } else if admitted.len() == MAX_TOOLS {
            over += 1;
        } else {
            names.insert(tool.spec.name.clone());
            admitted.push(tool);
        }
    }
    if over > 0 {
        notes.push(format!("{over} more past the limit of {MAX_TOOLS} tools per step"));
    }
    (admitted, notes)
}

impl Step<'_> {
    /// The enabled MCP servers of the chat's workspace (none outside a workspace or without a
    /// catalog).
    pub(super) async fn mcp_endpoints(&self) -> Result<Vec<McpEndpoint>, Error> {
        match (&self.engine.mcp, &self.session.workspace_id) {
            (Some(catalog), Some(ws)) => catalog.endpoints(&self.job.org, ws).await,
            _ => Ok(Vec::new()),
        }
    }

    /// The step's toolbox, built the first time it is needed (empty for a runtime that is not
    /// a model's).
    pub(super) async fn toolbox(&mut self) -> Result<&Toolbox, Error> {
        if self.toolbox.is_none() {
            let toolbox = if self.mcp_models {
                self.build_toolbox().await?
            } else {
                Toolbox::default()
            };
            self.toolbox = Some(toolbox);
        }
        Ok(self.toolbox.get_or_insert_default())
    }

    /// For a CLI's request: the tools of each of `endpoints` and whether it marks each
    /// read-only, for the servers the
    /// engine can list (HTTP ones, and stdio ones where programs may be started), each listed
    /// once within [`McpSettings`]' bounds. A server left out (or that fails) gets only its
    /// `allow` tools offered to the CLI.
    pub(super) async fn mcp_listed(&self, endpoints: &[McpEndpoint]) -> BTreeMap<String, BTreeMap<String, bool>> {
        let settings = &self.engine.settings.mcp;
        let listable: Vec<&McpEndpoint> = endpoints
            .iter()
            .filter(|e| settings.spawn_stdio || !matches!(e.launch, McpLaunch::Stdio { .. }))
            .collect();
        if listable.is_empty() {
            return BTreeMap::new();
        }
        let place = self.stdio_place(endpoints, settings).await;
        let listed = futures_util::future::join_all(listable.iter().map(|endpoint| async {
            let place = match &place {
                Ok(place) => place.as_ref(),
                Err(e) if matches!(endpoint.launch, McpLaunch::Stdio { .. }) => return Err(e.clone()),
                Err(_) => None,
            };
            let connection = Connection::open(endpoint, settings, place).await?;
            let tools = connection.tools(settings).await;
            connection.close().await;
            tools
        }))
        .await;
        let mut read_only = BTreeMap::new();
        for (endpoint, listed) in listable.into_iter().zip(listed) {
            match listed {
                Ok(tools) => {
                    let names = tools.into_iter().map(|t| (t.name, t.read_only)).collect();
                    read_only.insert(endpoint.id.clone(), names);
                }
                Err(reason) => {
                    tracing::warn!(server = %endpoint.name, %reason, "an MCP server's tools could not be listed for a CLI; only its `allow` tools are offered");
                }
            }
        }
        read_only
    }

    async fn build_toolbox(&mut self) -> Result<Toolbox, Error> {
        let endpoints = self.mcp_endpoints().await?;
        if endpoints.is_empty() {
            return Ok(Toolbox::default());
        }
        let engine = self.engine;
        let settings = &engine.settings.mcp;
        let (reachable, stdio_skipped): (Vec<McpEndpoint>, Vec<McpEndpoint>) = endpoints
            .into_iter()
            .partition(|e| settings.spawn_stdio || !matches!(e.launch, McpLaunch::Stdio { .. }));
        let mut notes = Vec::new();
        if !stdio_skipped.is_empty() && !self.said_this_turn(STDIO_SKIPPED) {
            let names: Vec<String> = stdio_skipped.iter().map(|e| format!("`{}`", e.name)).collect();
            notes.push(format!(
                "{STDIO_SKIPPED} ({}) are not offered to this agent: {STDIO_NOT_HERE}.",
                names.join(", ")
            ));
        }
        let place = self.stdio_place(&reachable, settings).await;
        let opened = futures_util::future::join_all(reachable.iter().map(|endpoint| async {
            let connection = match &place {
                Err(e) if matches!(endpoint.launch, McpLaunch::Stdio { .. }) => return Err(e.clone()),
                Err(_) => Connection::open(endpoint, settings, None).await?,
                Ok(place) => Connection::open(endpoint, settings, place.as_ref()).await?,
            };
            match connection.tools(settings).await {
                Ok(tools) => Ok((connection, tools)),
                Err(e) => {
                    connection.close().await;
                    Err(e)
                }
            }
        }))
        .await;
        let mut toolbox = Toolbox::default();
        for (endpoint, opened) in reachable.iter().zip(opened) {
            let (connection, tools) = match opened {
                Ok(opened) => opened,
                Err(reason) => {
                    tracing::warn!(server = %endpoint.name, %reason, "an MCP server could not be reached");
                    notes.push(format!(
                        "The MCP server `{}` could not be reached ({reason}); its tools are not offered in this step.",
                        endpoint.name
                    ));
                    continue;
                }
            };
            let index = toolbox.connections.len();
            toolbox.connections.push(connection);
            for tool in tools {
                let policy = endpoint
                    .tools
                    .get(&tool.name)
                    .copied()
                    .unwrap_or_else(|| default_policy(tool.read_only));
                if policy == ToolPolicy::Deny {
                    continue;
                }
                let name = offered_name(&endpoint.name, &tool.name);
                let description = tool
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("`{}` of the MCP server `{}`", tool.name, endpoint.name));
                toolbox.tools.push(McpTool {
                    server: endpoint.name.clone(),
                    connection: index,
                    tool: tool.name,
                    policy,
                    spec: ToolSpec {
                        name,
                        description,
                        parameters: tool.input_schema,
                    },
                });
            }
        }
        let (tools, left_out) = admit(std::mem::take(&mut toolbox.tools));
        toolbox.tools = tools;
        if !left_out.is_empty() && !self.said_this_turn(TOOLS_LEFT_OUT) {
            notes.push(format!("{TOOLS_LEFT_OUT}: {}.", left_out.join("; ")));
        }
        for note in notes {
            self.system(Level::Error, &note).await?;
        }
        Ok(toolbox)
    }

    /// Where the step's stdio servers run, if it has any: the chat's folder, in the workspace's
    /// working directory when it has one.
    async fn stdio_place(&self, endpoints: &[McpEndpoint], settings: &McpSettings) -> Result<Option<Place>, String> {
        if !endpoints.iter().any(|e| matches!(e.launch, McpLaunch::Stdio { .. })) {
            return Ok(None);
        }
        let working_dir = self
            .workspace_record()
            .await
            .map_err(|e| e.to_string())?
            .and_then(|w| w.working_dir);
        let roots = &self.engine.settings.workspace_roots;
        Place::for_chat(settings, roots, &self.job.org, &self.session.id, working_dir.as_deref())
            .await
            .map(Some)
    }

    /// Whether this turn has a system message that starts with `start`.
    fn said_this_turn(&self, start: &str) -> bool {
        self.events.iter().any(|e| {
            e.turn_id.as_deref() == Some(&*self.job.turn_id)
                && matches!(&e.event, ChatEvent::System(note) if note.message.starts_with(start))
        })
    }

    /// Resolves `call` if it is one of the toolbox's tools: by its policy, asking the person
    /// first when it is `ask`. `None` when it is not an MCP tool.
    pub(super) async fn resolve_mcp(
        &mut self,
        call: &ToolCall,
        state: &TurnState,
    ) -> Result<Option<Resolution>, Error> {
        let tool = self.toolbox().await?.find(&call.name).cloned();
        let Some(server) = tool
            .as_ref()
            .map(|t| t.server.clone())
            .or_else(|| self.asked_server(&call.id))
        else {
            return Ok(None);
        };
        let server = Some(server);
        if let Some(tool) = tool.as_ref().filter(|t| t.policy == ToolPolicy::Allow) {
            return self.run_mcp(call, tool).await.map(Some);
        }
        match (state.answers.get(&call.id), &tool) {
            (Some(Answer::Approval(true)), Some(tool)) => self.run_mcp(call, tool).await.map(Some),
            // Asked in an earlier step, whose server is not offered now: it could not be
            // reached (the reason is in this step's system message).
            (Some(Answer::Approval(true)), None) => {
                let error = format!(
                    "the MCP server `{}` could not be reached, so `{}` did not run",
                    server.as_deref().unwrap_or_default(),
                    call.name
                );
                let end = ToolEnd {
                    tool_call_id: call.id.clone(),
                    tool: call.name.clone(),
                    result: None,
                    error: Some(error.clone()),
                    declined: false,
                    server,
                };
                let note = ChatEvent::system(Level::Error, format!("The approved tool did not run: {error}."));
                self.append(vec![self.draft(ChatEvent::ToolEnd(end)), self.draft(note)])
                    .await?;
                Ok(Some(Resolution::Done))
            }
            (Some(Answer::Approval(false)), _) => {
                let end = ToolEnd {
                    tool_call_id: call.id.clone(),
                    tool: call.name.clone(),
                    result: None,
                    error: Some(tools::DECLINED.to_owned()),
                    declined: true,
                    server,
                };
                self.append(vec![self.draft(ChatEvent::ToolEnd(end))]).await?;
                Ok(Some(Resolution::Done))
            }
            _ => {
                if !state.requested.contains(&call.id) {
                    let asked = ChatEvent::ToolApprovalRequired(ToolApprovalRequired {
                        tool_call_id: call.id.clone(),
                        tool: call.name.clone(),
                        arguments: call.arguments.clone(),
                        server,
                    });
                    self.request(RequestKind::Approval, &call.id, asked).await?;
                }
                Ok(Some(Resolution::Wait))
            }
        }
    }

    /// The MCP server of the tool whose approval `call_id` asked (in an earlier step).
    fn asked_server(&self, call_id: &str) -> Option<String> {
        self.events.iter().find_map(|e| match &e.event {
            ChatEvent::ToolApprovalRequired(asked) if asked.tool_call_id == call_id => asked.server.clone(),
            _ => None,
        })
    }

    /// Runs `call` on its server: `tool_start`, the call (bounded by the call timeout and the
    /// step's time limit, and stopped by an abort of the turn), `tool_end` with its result or
    /// error (and a system message when the server failed).
    async fn run_mcp(&mut self, call: &ToolCall, tool: &McpTool) -> Result<Resolution, Error> {
        let server = Some(tool.server.clone());
        let start = ChatEvent::ToolStart(ToolStart {
            tool_call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            client: false,
            server: server.clone(),
        });
        self.append(vec![self.draft(start)]).await?;
        let timeout = self
            .engine
            .settings
            .mcp
            .call_timeout
            .min(self.deadline.saturating_duration_since(tokio::time::Instant::now()));
        let after = self.read_tail;
        let abort = super::reply::watch_abort(
            self.engine.log.clone(),
            self.path.clone(),
            after,
            self.state().start_seq.unwrap_or(after),
            self.engine.settings.abort_wait,
            self.own_tail.clone(),
        );
        let outcome = match self.toolbox.as_ref().and_then(|t| t.connections.get(tool.connection)) {
            Some(connection) => tokio::select! {
                outcome = connection.call(&tool.tool, &call.arguments, timeout) => outcome,
                () = abort => Err("the turn was aborted while it ran".to_owned()),
            },
            None => Err("its connection is gone".to_owned()),
        };
        let mut drafts = Vec::new();
        let end = |result, error| ToolEnd {
            tool_call_id: call.id.clone(),
            tool: call.name.clone(),
            result,
            error,
            declined: false,
            server: server.clone(),
        };
        match outcome {
            Ok(outcome) => drafts.push(self.draft(ChatEvent::ToolEnd(end(Some(outcome.result), outcome.error)))),
            Err(reason) => {
                let error = format!("the MCP server `{}` failed: {reason}", tool.server);
                drafts.push(self.draft(ChatEvent::ToolEnd(end(None, Some(error.clone())))));
                drafts.push(self.draft(ChatEvent::system(
                    Level::Error,
                    format!("The tool `{}` did not run to the end: {error}.", call.name),
                )));
            }
        }
        self.append(drafts).await?;
        Ok(Resolution::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_names_fit_providers_and_stay_apart() {
        assert_eq!(offered_name("everything", "get-sum"), "everything__get-sum");
        let dotted = offered_name("files", "read.file");
        let underscored = offered_name("files", "read_file");
        assert_ne!(dotted, underscored);
        assert!(dotted.starts_with("files__read_file_"));
        assert_eq!(dotted, offered_name("files", "read.file"), "the same in every step");
        let long = offered_name("a-server-with-a-rather-long-name", &"t".repeat(80));
        assert_eq!(long.len(), MAX_NAME);
        assert!(long.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        assert_ne!(long, offered_name("a-server-with-a-rather-long-name", &"t".repeat(81)));
    }

    fn tool(server: &str, name: &str, parameters: serde_json::Value) -> McpTool {
        McpTool {
            server: server.to_owned(),
            connection: 0,
            tool: name.to_owned(),
            policy: ToolPolicy::Allow,
            spec: ToolSpec {
                name: offered_name(server, name),
                description: String::new(),
                parameters,
            },
        }
    }

    #[test]
    fn tools_are_offered_once_by_name_with_small_schemas_and_at_most_the_limit() {
        let small = serde_json::json!({"type": "object"});
        let mut tools = vec![
            tool("a_", "_b", small.clone()),
            tool("a", "__b", small.clone()),
            tool(
                "big",
                "schema",
                serde_json::json!({"description": "x".repeat(MAX_SCHEMA_BYTES)}),
            ),
        ];
        tools.extend((0..200).map(|i| tool("many", &format!("t{i}"), small.clone())));
        let (offered, notes) = admit(tools);
        assert_eq!(offered.len(), MAX_TOOLS);
        assert_eq!(offered[0].server, "a_", "the first of two same names stays");
        assert!(offered.iter().all(|t| t.server != "a" && t.server != "big"));
        let names: std::collections::HashSet<_> = offered.iter().map(|t| &t.spec.name).collect();
        assert_eq!(names.len(), offered.len());
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].contains("`__b` of `a`"), "{notes:?}");
        assert!(notes[1].contains("`schema` of `big`"), "{notes:?}");
        assert!(notes[2].starts_with("73 more"), "{notes:?}");
    }
}
