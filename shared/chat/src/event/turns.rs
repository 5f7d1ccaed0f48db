//! An agent's turn: its start and end, its messages and tool calls, what it cost, and Spool's
//! own notes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[cfg(doc)]
use super::ClientTool;
use super::Uploaded;

fn is_false(b: &bool) -> bool {
    !*b
}

/// A turn's start.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStart {
    /// What answers (`scripted`, `openai:gpt-4o-mini`, `cli:claude`, `none`).
    pub runtime: String,
    /// The agent.
    pub agent_id: Option<String>,
    /// Its name.
    pub agent_name: String,
    /// The event that started the turn.
    pub trigger_seq: u64,
}

/// Who speaks in an agent message: always the assistant (the first source design's role).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The agent.
    #[default]
    Assistant,
}

/// An agent message's start.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageStart {
    /// The message.
    pub message_id: String,
    /// Who speaks.
    #[serde(default)]
    pub role: Role,
}

/// More text of an agent message.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageUpdate {
    /// The message.
    pub message_id: String,
    /// The text added.
    pub delta: String,
}

/// A tool the agent wants called.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, unique in the turn.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: Value,
}

/// An agent message's end.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageEnd {
    /// The message.
    pub message_id: String,
    /// Its whole text.
    pub text: String,
    /// The tools it called, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// A CLI agent's actions: they ran at once, and this was the turn's last reply.
    #[serde(default, skip_serializing_if = "is_false")]
    pub one_shot: bool,
    /// Stopped by an abort, as far as it got.
    #[serde(default, skip_serializing_if = "is_false")]
    pub aborted: bool,
    /// Cut short (a failure, or a worker that stopped), as far as it got.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interrupted: bool,
}

/// A tool's start.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStart {
    /// The call.
    pub tool_call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// A tool the client runs ([`ClientTool`]): the turn waits for its output.
    #[serde(default, skip_serializing_if = "is_false")]
    pub client: bool,
    /// The MCP server whose tool it is ([`crate::mcp`]); `tool` is then the name the model called
    /// (`{server}__{tool}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// A tool's end.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolEnd {
    /// The call.
    pub tool_call_id: String,
    /// The tool.
    pub tool: String,
    /// Its result, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed, or did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A person declined it: it never ran.
    #[serde(default, skip_serializing_if = "is_false")]
    pub declined: bool,
    /// The MCP server whose tool it is ([`crate::mcp`]); `tool` is then the name the model called
    /// (`{server}__{tool}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// Token counts of one model call, as the provider reports them; the usage ledger
/// ([`crate::usage`]) adds them up.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read, the cached ones included.
    pub input_tokens: u64,
    /// Of those, how many the provider read from its prompt cache (`0` in events written before
    /// it was recorded).
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// The model the runtime asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// How a turn ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The agent answered without calling more tools.
    Complete,
    /// A person aborted it.
    Aborted,
    /// It failed; a `system` event says why.
    Error,
}

impl EndReason {
    /// The reason's name, as the events and turn records spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Aborted => "aborted",
            Self::Error => "error",
        }
    }
}

/// A turn's end.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEnd {
    /// How it ended.
    pub reason: EndReason,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How much a system note matters.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// For information.
    Info,
    /// Something failed; the message says what to do.
    Error,
}

/// Spool's own note.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemNote {
    /// How much it matters.
    pub level: Level,
    /// What happened, and what to do.
    pub message: String,
    /// The file a person uploaded, when that is what happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<Uploaded>,
}
