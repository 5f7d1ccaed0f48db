//! # A CLI reply run on a runner
//!
//! For a workspace whose CLI agents run on runners ([`spool_chat::runner`]), the engine does not
//! call the CLI: it writes the reply's [`Request`] as a [`RunnerRequest`] (everything but where
//! the files are read from), a runner claims it, rebuilds the request with its own way of
//! fetching the chat's files and runs the CLI runtime ([`crate::cli`]) on its machine.

use serde::{Deserialize, Serialize};

use crate::runtime::{Attached, FileAccess, Message, Request, ToolSpec, TurnContext};

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
        }
    }

    /// The request again, its files read through `file_access`.
    pub fn into_request(self, file_access: Option<FileAccess>) -> Request {
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
        }
    }
}
