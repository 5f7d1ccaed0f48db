//! # What a runtime is
//!
//! A runtime answers a conversation: given the agent's instruction, the messages so far and the
//! tools it may call, it streams text and ends with the tool calls it wants made. The engine
//! ([`crate::engine`]) turns that into events, runs or gates the tools, and calls the runtime
//! again with their results until it answers without a tool call. The OpenAI-compatible and
//! Anthropic runtimes map this onto their APIs; the CLI runtime answers in one go (its actions
//! come back as tool calls the engine runs at once); the scripted runtime answers from a
//! script.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::files::{Attached, FileAccess};
/// A tool call and token counts are the events' own types.
pub use spool_chat::event::{ToolCall, Usage};

/// The context budget of a runtime that does not say ([`Runtime::context_budget`]), in tokens.
pub const DEFAULT_BUDGET: u64 = 96_000;
/// The budget of a runtime that works on disk (a CLI's input file), in tokens (about a
/// megabyte): the CLI reads the history itself, and its own context management does the rest.
pub const CLI_BUDGET: u64 = 250_000;

/// One message of the conversation a runtime answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// A person's message (or an agent's in the global chat), with context a client attached.
    User {
        /// The text.
        text: String,
    },
    /// The agent's answer and the tools it called.
    Assistant {
        /// The text.
        text: String,
        /// The tools it called, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result (or a person's answer to a question, approval or plan).
    Tool {
        /// The call it answers.
        call_id: String,
        /// The tool.
        name: String,
        /// The result, as text.
        content: String,
    },
    /// Spool's own notes (errors, notices), for runtimes that take them.
    System {
        /// The text.
        text: String,
    },
    /// A file a person uploaded, where its upload is in the chat.
    File(Attached),
}

/// A tool a runtime may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its arguments' JSON schema.
    pub parameters: Value,
}

/// What a runtime is asked.
#[derive(Debug, Clone)]
pub struct Request {
    /// The agent's instruction (its system prompt): for the built-in agent, Spool's own and
    /// the workspace's extension of it.
    pub instruction: String,
    /// The agent's own instruction as stored (a scripted agent's script).
    pub agent_instruction: String,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// The tools it may call.
    pub tools: Vec<ToolSpec>,
    /// The model, when the agent names one.
    pub model: Option<String>,
    /// What the runtime may need beyond the conversation (the CLI runtime's input file).
    pub context: TurnContext,
    /// The workspace's context ([`crate::context`]), in a workspace's chat, for runtimes that
    /// work on disk.
    pub workspace_context: Option<String>,
    /// When each of `messages` was written (RFC 3339), for runtimes that show it.
    pub stamps: Vec<String>,
    /// The chat's current files (the newest of each name), for runtimes that work on disk.
    pub files: Vec<Attached>,
    /// Where the files' bytes are read, when the worker has a file store.
    pub file_access: Option<FileAccess>,
    /// The workspace's enabled MCP servers, with their secrets, for runtimes that give them to
    /// a program of their own (a CLI's MCP configuration); model runtimes get the servers'
    /// tools in `tools` instead, and the engine calls them.
    pub mcp_servers: Vec<spool_chat::mcp::McpEndpoint>,
    /// For each of `mcp_servers` (by id) whose tools the engine could list, its tools and
    /// whether the server marks each read-only: a CLI, which cannot pause for approval, is
    /// offered the tools whose policy is `allow` and those without a policy marked read-only,
    /// and no other.
    pub mcp_listed: std::collections::BTreeMap<String, std::collections::BTreeMap<String, bool>>,
}

/// Facts about the chat a turn runs in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnContext {
    /// The organization.
    pub org: String,
    /// The chat.
    pub session_id: String,
    /// Its title.
    pub title: String,
    /// The turn.
    pub turn_id: String,
    /// The agent's name.
    pub agent_name: String,
    /// The workspace, if the chat is in one.
    pub workspace_id: Option<String>,
    /// Its title.
    pub workspace_name: Option<String>,
    /// The workspace's working directory, if it has one (CLI agents run there).
    pub working_dir: Option<String>,
    /// Whether the agent is the workspace's built-in one (which may manage the workspace).
    pub builtin: bool,
}

/// A runtime's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// Its text (also streamed through the sink as it came).
    pub text: String,
    /// The tools it wants called, in order.
    pub tool_calls: Vec<ToolCall>,
    /// What it cost, if known.
    pub usage: Option<Usage>,
    /// Its calls are a CLI agent's actions: they run at once, and the reply is the turn's last.
    pub one_shot: bool,
}

/// Where a runtime streams its text as it comes.
#[async_trait]
pub trait Sink: Send {
    /// More of the answer's text.
    async fn text(&mut self, delta: &str) -> Result<(), Error>;
}

/// Why a runtime could not answer; the message says what a person can do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The provider or program failed or answered something unusable.
    #[error("{0}")]
    Failed(String),
    /// Writing the events failed (the engine's own failure, passed through the sink).
    #[error(transparent)]
    Store(#[from] spool_log::error::Error),
}

/// A way of producing an agent's answers.
#[async_trait]
pub trait Runtime: Send + Sync {
    /// What answered, recorded in `agent_start` (`scripted`, `openai:gpt-4o-mini`, `cli:claude`).
    fn describe(&self, request: &Request) -> String;

    /// Whether the engine fills in the conversation's files' content ([`crate::files::inline`])
    /// before [`Self::respond`]: model runtimes do; runtimes that read the files themselves
    /// (CLIs) or only name them do not.
    fn inline_files(&self) -> bool {
        false
    }

    /// Whether it works in a folder (a CLI): the engine then gives it the chat's current files
    /// to place ([`Request::files`]) and the workspace's context as text
    /// ([`Request::workspace_context`]), which other runtimes are spared reading.
    fn works_on_disk(&self) -> bool {
        false
    }

    /// The CLI a runner runs for it, when it is a CLI of a workspace whose CLI agents run on
    /// runners ([`spool_chat::runner`]): the engine then offers the reply to runners instead
    /// of calling [`Self::respond`].
    fn runner_cli(&self) -> Option<spool_chat::workspace::CliType> {
        None
    }

    /// About how many tokens of conversation it takes ([`crate::history`]): most of its
    /// model's context window, leaving room for the answer (a CLI's: the size of its input
    /// file). An agent's `context_tokens` overrides it.
    fn context_budget(&self, _request: &Request) -> u64 {
        if self.works_on_disk() {
            CLI_BUDGET
        } else {
            DEFAULT_BUDGET
        }
    }

    /// Whether it can write a summary of a long chat itself (a model can); the others get
    /// Spool's own ([`crate::history::extract`]).
    fn summarizes(&self) -> bool {
        false
    }

    /// Answers the conversation, streaming its text into `sink`. Dropping the future stops it
    /// (an abort): HTTP streams close and subprocesses are killed.
    async fn respond(&self, request: &Request, sink: &mut dyn Sink) -> Result<Reply, Error>;
}
