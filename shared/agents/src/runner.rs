//! # A CLI reply run on a runner
//!
//! For a workspace whose CLI agents run on runners ([`spool_chat::runner`]), the engine does not
//! call the CLI: it writes the reply's [`Request`] as a [`RunnerRequest`] (everything but where
//! the files are read from), a runner claims it, rebuilds the request with its own way of
//! fetching the chat's files and runs the CLI runtime ([`crate::cli`]) on its machine.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use spool_chat::{
    clis::{CliProbe, CliStatus},
    mcp::McpEndpoint,
    runner::{RunnerMcpServer, RunnerRecord},
    workspace::CliType,
};

use crate::{
    runtime::{Attached, Error, FileAccess, Message, Reply, Request, Runtime, Sink, ToolSpec, TurnContext},
    runtimes::CliRuntimes,
};

/// A reply's request as it travels to a runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunnerRequest {
    /// The agent's instruction.
    pub instruction: String,
    /// The agent's own instruction as stored.
    #[serde(default)]
    pub agent_instruction: String,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// The tools (for a CLI: the actions it may write).
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// The model, when the agent names one.
    #[serde(default)]
    pub model: Option<String>,
    /// Facts about the chat.
    pub context: TurnContext,
    /// The workspace's context, for the context file.
    #[serde(default)]
    pub workspace_context: Option<String>,
    /// When each message was written (RFC 3339).
    #[serde(default)]
    pub stamps: Vec<String>,
    /// The chat's current files, to place in its folder.
    #[serde(default)]
    pub files: Vec<Attached>,
    /// The workspace's MCP servers the CLI gets, by id and name only: the claim resolves them
    /// ([`spool_chat::runner::wire::Assignment::mcp_servers`]), so no secret is stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<RunnerMcpServer>,
    /// Each server's tools and whether it marks them read-only, as the engine listed them
    /// ([`Request::mcp_listed`]; names only).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_listed: std::collections::BTreeMap<String, std::collections::BTreeMap<String, bool>>,
}

impl RunnerRequest {
    /// What of `request` travels.
    pub fn of(request: &Request) -> Self {
        Self {
            instruction: request.instruction.clone(),
            agent_instruction: request.agent_instruction.clone(),
            messages: request.messages.clone(),
            tools: request.tools.clone(),
            model: request.model.clone(),
            context: request.context.clone(),
            workspace_context: request.workspace_context.clone(),
            stamps: request.stamps.clone(),
            files: request.files.clone(),
            mcp_servers: request
                .mcp_servers
                .iter()
                .map(|s| RunnerMcpServer {
                    id: s.id.clone(),
                    name: s.name.clone(),
                })
                .collect(),
            mcp_listed: request.mcp_listed.clone(),
        }
    }

    /// The request again, its files read through `file_access`, with `mcp_servers` (the
    /// endpoints its claim resolved).
    pub fn into_request(self, file_access: Option<FileAccess>, mcp_servers: Vec<McpEndpoint>) -> Request {
        Request {
            instruction: self.instruction,
            agent_instruction: self.agent_instruction,
            messages: self.messages,
            tools: self.tools,
            model: self.model,
            context: self.context,
            workspace_context: self.workspace_context,
            stamps: self.stamps,
            files: self.files,
            file_access,
            mcp_servers,
            mcp_listed: self.mcp_listed,
        }
    }
}

/// A CLI of a workspace whose CLI agents run on runners: the engine offers its replies to
/// runners ([`crate::runtime::Runtime::runner_cli`]) and never calls it.
#[derive(Debug)]
struct OnRunner {
    cli: CliType,
}

#[async_trait]
impl Runtime for OnRunner {
    fn describe(&self, _: &Request) -> String {
        format!("cli:{}", crate::cli::program(self.cli))
    }

    fn works_on_disk(&self) -> bool {
        true
    }

    fn runner_cli(&self) -> Option<CliType> {
        Some(self.cli)
    }

    async fn respond(&self, _: &Request, _: &mut dyn Sink) -> Result<Reply, Error> {
        Err(Error::Failed(format!(
            "`{}` runs on a runner, not here",
            crate::cli::program(self.cli)
        )))
    }
}

/// The CLIs the online runners serving a workspace offer, as the engine picks among them.
#[derive(Debug, Clone)]
pub struct RunnerClis {
    offered: Vec<CliStatus>,
}

impl RunnerClis {
    /// What `runners` (the organization's, as recorded) offer a chat of `workspace` at `now_ms`:
    /// each CLI once, healthy if an online runner serving it runs it.
    pub fn offered(runners: &[RunnerRecord], workspace: Option<&str>, now_ms: i64) -> Self {
        let serving: Vec<&RunnerRecord> = runners
            .iter()
            .filter(|r| r.online(now_ms) && r.serves(workspace))
            .collect();
        let offered = CliType::ALL
            .into_iter()
            .map(|cli| {
                let healthy = serving
                    .iter()
                    .find_map(|r| r.clis.iter().find(|c| c.cli == cli && c.healthy).map(|c| (r, c)));
                match healthy {
                    Some((runner, status)) => CliStatus {
                        reason: Some(format!("on the runner `{}`", runner.name)),
                        ..status.clone()
                    },
                    None => CliStatus::unavailable(cli, "no runner online for this workspace runs it"),
                }
            })
            .collect();
        Self { offered }
    }
}

#[async_trait]
impl CliProbe for RunnerClis {
    async fn clis(&self) -> Vec<CliStatus> {
        self.offered.clone()
    }
}

impl CliRuntimes for RunnerClis {
    fn known_clis(&self) -> Vec<CliStatus> {
        self.offered.clone()
    }

    /// Any CLI: a turn for one no runner offers yet waits for a runner that does.
    fn runtime(&self, cli: CliType) -> Result<Arc<dyn Runtime>, String> {
        Ok(Arc::new(OnRunner { cli }))
    }

    fn first_installed(&self) -> Option<CliType> {
        self.offered.iter().find(|c| c.healthy).map(|c| c.cli)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use spool_chat::mcp::{McpLaunch, McpSecret};

    use super::*;

    #[test]
    fn a_stored_request_names_the_mcp_servers_without_their_secrets() {
        let request = Request {
            instruction: "Answer.".into(),
            agent_instruction: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            model: None,
            context: TurnContext::default(),
            workspace_context: None,
            stamps: Vec::new(),
            files: Vec::new(),
            file_access: None,
            mcp_servers: vec![McpEndpoint {
                id: "mcp_1".into(),
                name: "github".into(),
                launch: McpLaunch::Stdio {
                    command: "github-mcp".into(),
                    args: Vec::new(),
                    env: BTreeMap::from([("GITHUB_TOKEN".to_owned(), McpSecret::new("ghp_s3cr3t"))]),
                },
                tools: BTreeMap::new(),
            }],
            mcp_listed: BTreeMap::from([("mcp_1".to_owned(), BTreeMap::from([("list_issues".to_owned(), true)]))]),
        };
        let stored = serde_json::to_string(&RunnerRequest::of(&request)).unwrap();
        assert!(
            !stored.contains("s3cr3t") && !stored.contains("GITHUB_TOKEN"),
            "{stored}"
        );
        let back: RunnerRequest = serde_json::from_str(&stored).unwrap();
        assert_eq!(
            back.mcp_servers,
            [RunnerMcpServer {
                id: "mcp_1".into(),
                name: "github".into()
            }]
        );
        // The runner's request gets the endpoints its claim resolved.
        let resolved = back.into_request(None, request.mcp_servers.clone());
        assert_eq!(resolved.mcp_servers, request.mcp_servers);
        assert_eq!(resolved.mcp_listed, request.mcp_listed);
    }
}
