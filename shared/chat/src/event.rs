//! # A chat's events: one typed vocabulary
//!
//! Everything that happens in a chat is one [`ChatEvent`] in its stream, written inside the
//! envelope `{"v", "seq", "ts", "session_id", "kind", "type", "payload", "client_message_id"?,
//! "turn_id"?}` ([`crate::session::Event`]). The enum's tag is the envelope's `type` and its content the
//! `payload`, so writers build variants and readers match on them, and no event type is spelled
//! anywhere else. `kind` says who wrote it: a person or client (`submit`), an agent runtime
//! (`harness`), or Spool itself (`system`); each variant has one.
//!
//! The feed events of a workspace's feed stream are [`FeedEvent`]s.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use spool_commands::{CommandAction, CommandKind, CommandSource};

use crate::{global::AgentMeta, session::EventKind};

/// What happened in a chat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum ChatEvent {
    /// A person's message (it starts a turn, unless it answers an agent's question).
    UserMessageSubmitted(UserMessage),
    /// A control: an abort.
    ControlSubmitted(ControlSubmitted),
    /// The output of a tool the client ran.
    ToolOutputSubmitted(ToolOutputSubmitted),
    /// A person's decision on a tool call that needed approval.
    ApprovalSubmitted(ApprovalSubmitted),
    /// A person's answer to an agent's question.
    QuestionAnswered(QuestionAnswered),
    /// A person's decision on a plan.
    PlanSubmitted(PlanSubmitted),
    /// A message an outside agent posted (the global chat's agent-first messages).
    AgentMessage(AgentMessage),
    /// A turn started, with the runtime that answers.
    AgentStart(AgentStart),
    /// An agent message started.
    MessageStart(MessageStart),
    /// More text of an agent message.
    MessageUpdate(MessageUpdate),
    /// An agent message ended, with its text and the tools it called.
    MessageEnd(MessageEnd),
    /// A tool (an action Spool runs) started.
    ToolStart(ToolStart),
    /// A tool ended: its result, its error, or its refusal.
    ToolEnd(ToolEnd),
    /// A tool call waits for a person's approval.
    ToolApprovalRequired(ToolApprovalRequired),
    /// An agent asks a person a question and waits.
    AskQuestion(AskQuestion),
    /// An agent proposes a plan and waits for a person's decision.
    PlanApprovalRequired(PlanApprovalRequired),
    /// What a reply cost, as the provider counted it.
    Usage(Usage),
    /// A turn ended.
    AgentEnd(AgentEnd),
    /// Spool's own note: an error or a notice.
    System(SystemNote),
    /// A person invoked a slash command (before it acts).
    SlashCommandInvoked(SlashCommandInvoked),
    /// A slash command could not run.
    SlashCommandFailed(SlashCommandFailed),
}

impl ChatEvent {
    /// Who writes events of this type.
    pub fn kind(&self) -> EventKind {
        match self {
            Self::UserMessageSubmitted(_)
            | Self::ControlSubmitted(_)
            | Self::ToolOutputSubmitted(_)
            | Self::ApprovalSubmitted(_)
            | Self::QuestionAnswered(_)
            | Self::PlanSubmitted(_)
            | Self::SlashCommandInvoked(_) => EventKind::Submit,
            Self::AgentMessage(_)
            | Self::AgentStart(_)
            | Self::MessageStart(_)
            | Self::MessageUpdate(_)
            | Self::MessageEnd(_)
            | Self::ToolStart(_)
            | Self::ToolEnd(_)
            | Self::ToolApprovalRequired(_)
            | Self::AskQuestion(_)
            | Self::PlanApprovalRequired(_)
            | Self::Usage(_)
            | Self::AgentEnd(_) => EventKind::Harness,
            Self::System(_) | Self::SlashCommandFailed(_) => EventKind::System,
        }
    }

    /// The event's type, as the envelope's `type` spells it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::UserMessageSubmitted(_) => "user_message_submitted",
            Self::ControlSubmitted(_) => "control_submitted",
            Self::ToolOutputSubmitted(_) => "tool_output_submitted",
            Self::ApprovalSubmitted(_) => "approval_submitted",
            Self::QuestionAnswered(_) => "question_answered",
            Self::PlanSubmitted(_) => "plan_submitted",
            Self::AgentMessage(_) => "agent_message",
            Self::AgentStart(_) => "agent_start",
            Self::MessageStart(_) => "message_start",
            Self::MessageUpdate(_) => "message_update",
            Self::MessageEnd(_) => "message_end",
            Self::ToolStart(_) => "tool_start",
            Self::ToolEnd(_) => "tool_end",
            Self::ToolApprovalRequired(_) => "tool_approval_required",
            Self::AskQuestion(_) => "ask_question",
            Self::PlanApprovalRequired(_) => "plan_approval_required",
            Self::Usage(_) => "usage",
            Self::AgentEnd(_) => "agent_end",
            Self::System(_) => "system",
            Self::SlashCommandInvoked(_) => "slash_command_invoked",
            Self::SlashCommandFailed(_) => "slash_command_failed",
        }
    }

    /// A `system` event.
    pub fn system(level: Level, message: impl Into<String>) -> Self {
        Self::System(SystemNote {
            level,
            message: message.into(),
            upload: None,
        })
    }
}

/// The tool an agent calls to ask a person a question (its call becomes [`AskQuestion`], the
/// call's id the question's).
pub const ASK_USER: &str = "ask_user";
/// The tool an agent calls to propose a plan (its call becomes [`PlanApprovalRequired`], the
/// call's id the plan's).
pub const PROPOSE_PLAN: &str = "propose_plan";
/// The tool an agent calls to propose saving a note into the person's companion library (a
/// [`ToolApprovalRequired`]; the person's app saves it as the person approves).
pub const PROPOSE_CAPTURE: &str = "propose_capture";

fn is_false(b: &bool) -> bool {
    !*b
}

/// A person's message.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The text.
    pub content: String,
    /// Who sent it (the token's subject).
    pub author: String,
    /// The chat's files it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "file_refs")]
    pub files: Vec<FileRef>,
    /// The client's own data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Context from the person's local companion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_context: Option<Value>,
    /// The agent's question this message answers (in the global chat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<String>,
    /// Tools the client declares and runs (the AI SDK's client tools): the agent may call
    /// them in this message's turn, which waits for each call's output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_tools: Vec<ClientTool>,
}

/// A tool a client declares and runs: an agent's call of it is a `tool_start` marked
/// `client`, and the turn waits for `POST /v1/sessions/{id}/tool-output`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientTool {
    /// Its name: 1 to 64 of `A-Z a-z 0-9 _ -`.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its input's JSON schema (an object schema; none: no input).
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "inputSchema")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub input_schema: Option<Value>,
}

impl ClientTool {
    /// The most tools a message declares.
    pub const MAX: usize = 16;
    /// The names of Spool's own tools, which a client's may not take (`spool_agents::tools`
    /// holds each to this list in a test).
    pub const RESERVED: [&'static str; 11] = [
        ASK_USER,
        PROPOSE_PLAN,
        PROPOSE_CAPTURE,
        "rename_chat",
        "create_task",
        "get_workspace_context",
        "create_agent",
        "update_agent",
        "delete_agent",
        "reorder_agents",
        "update_workspace",
    ];

    /// Checks a message's client tools: at most [`Self::MAX`], each name valid and once, a
    /// description of at most 1024 characters, a schema of at most 16 KiB.
    pub fn check(tools: &[ClientTool]) -> Result<(), spool_log::error::Error> {
        let bad = |reason: String| spool_log::error::Error::invalid("client_tools", reason);
        if tools.len() > Self::MAX {
            return Err(bad(format!("at most {} tools", Self::MAX)));
        }
        let mut seen = std::collections::HashSet::new();
        for tool in tools {
            let name_ok = (1..=64).contains(&tool.name.len())
                && tool
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !name_ok {
                return Err(bad(format!(
                    "`{}`: a tool's name is 1 to 64 of letters, digits, `_` and `-`",
                    tool.name.chars().take(80).collect::<String>()
                )));
            }
            if !seen.insert(tool.name.as_str()) {
                return Err(bad(format!("`{}` is declared twice", tool.name)));
            }
            if Self::RESERVED.contains(&tool.name.as_str()) {
                return Err(bad(format!(
                    "`{}` is one of Spool's own tools; name yours otherwise",
                    tool.name
                )));
            }
            if tool.description.as_ref().is_some_and(|d| d.chars().count() > 1024) {
                return Err(bad(format!("`{}`'s description is over 1024 characters", tool.name)));
            }
            if let Some(schema) = &tool.input_schema {
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(bad(format!(
                        "`{}`'s input_schema is not a JSON Schema of an object (`{{\"type\": \"object\", …}}`)",
                        tool.name
                    )));
                }
                if schema.to_string().len() > 16 * 1024 {
                    return Err(bad(format!("`{}`'s input_schema is over 16 KiB", tool.name)));
                }
            }
        }
        Ok(())
    }
}

/// What a control asks.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlAction {
    /// Stop the running turn.
    Abort,
}

/// A control.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlSubmitted {
    /// What it asks.
    pub action: ControlAction,
}

/// A tool's output from the client.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutputSubmitted {
    /// The tool.
    pub tool: String,
    /// The call it answers.
    pub tool_call_id: String,
    /// Its output (or `error`).
    pub output: Option<Value>,
    /// Its error (or `output`).
    pub error: Option<String>,
}

/// An approval decision.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run it.
    Approve,
    /// Never run it.
    Decline,
}

/// A decision on a tool call.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalSubmitted {
    /// The decision.
    pub decision: Decision,
    /// The call it decides.
    pub tool_call_id: String,
}

/// An answer to a question.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionAnswered {
    /// The question.
    pub question_id: String,
    /// The answer.
    pub answer: String,
}

/// A decision on a plan.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanAction {
    /// Go ahead.
    Approve,
    /// Do not; see the feedback.
    Reject,
}

/// A person's decision on a plan.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSubmitted {
    /// The plan.
    pub plan_id: String,
    /// The decision.
    pub action: PlanAction,
    /// What to change.
    pub feedback: Option<String>,
}

/// A message an outside agent posted.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentMessage {
    /// The agent's name.
    pub author: String,
    /// The text.
    pub text: String,
    /// Whether it asks the people a question (answered by the next message).
    pub ask: bool,
    /// The credential that posted it.
    #[serde(default)]
    pub posted_by: String,
    /// The question's id, when it asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_id: Option<String>,
    /// What the agent says it replies to and how it tags the message (absent from events
    /// written before agents could say so).
    #[serde(default, skip_serializing_if = "AgentMeta::is_empty")]
    pub meta: AgentMeta,
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
}

/// A tool call waiting for approval.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolApprovalRequired {
    /// The call.
    pub tool_call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
}

/// A question for a person.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskQuestion {
    /// The question's id, which the answer names.
    pub question_id: String,
    /// The question.
    pub question: String,
}

/// A plan for a person to decide on.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanApprovalRequired {
    /// The plan's id, which the decision names.
    pub plan_id: String,
    /// The plan, in markdown.
    pub plan: String,
}

/// Token counts, as the provider reports them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read.
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
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

/// A file of the chat, as events name it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// The attachment's id (`att_…`).
    pub id: String,
    /// Its safe base name.
    pub filename: String,
    /// Its media type.
    pub content_type: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A file a person uploaded into the chat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uploaded {
    /// The file.
    #[serde(flatten)]
    pub file: FileRef,
    /// Where an agent reads it, relative to the chat's folder (`attachments/{filename}`).
    pub path: String,
    /// The earlier file of the same name it replaces (the newest wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// A message's `files`, skipping entries that are not [`FileRef`]s (messages written before
/// files were typed carried any JSON there), so every stored event stays readable.
fn file_refs<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<FileRef>, D::Error> {
    let values: Vec<Value> = Vec::deserialize(deserializer)?;
    Ok(values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

/// A slash command, as invoked.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlashCommandInvoked {
    /// The command's name (`review`, `git:commit`).
    pub name: String,
    /// What the person typed (`/review src/lib.rs`).
    pub invoked_as: String,
    /// The raw arguments.
    pub arguments: String,
    /// Where the command comes from.
    pub source: CommandSource,
    /// Whether it runs an action or prompts the agent.
    pub kind: CommandKind,
    /// The action it runs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<CommandAction>,
    /// The model a prompt command's turn uses (its front matter's `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The chat `/new` makes, named before it is made, so a retry makes no second one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_session_id: Option<String>,
    /// Who invoked it (the token's subject).
    pub author: String,
}

/// A slash command that could not run, and what to do about it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlashCommandFailed {
    /// The name the person typed.
    pub name: String,
    /// What the person typed.
    pub invoked_as: String,
    /// Why it failed, for the person.
    pub reason: String,
}

/// A list-level event on a workspace's feed (`/v1/stream/workspaces/{id}/feed`), so lists can
/// update without reading chats.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum FeedEvent {
    /// A chat was made.
    #[serde(rename = "chat.created")]
    ChatCreated {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// A chat was renamed.
    #[serde(rename = "chat.renamed")]
    ChatRenamed {
        /// The chat.
        chat_id: String,
        /// Its new title.
        chat_title: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// A chat was deleted.
    #[serde(rename = "chat.deleted")]
    ChatDeleted {
        /// The chat.
        chat_id: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// A message (a person's, an agent's or Spool's own) was added to a chat.
    #[serde(rename = "chat.message_added")]
    MessageAdded {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// Who wrote it.
        author_type: AuthorType,
        /// Its workspace.
        workspace_id: String,
    },
    /// A turn started in a chat.
    #[serde(rename = "chat.processing_started")]
    ProcessingStarted {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// The agent that answers.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// A turn ended in a chat.
    #[serde(rename = "chat.processing_finished")]
    ProcessingFinished {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// The agent that answered.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
        /// How it ended.
        reason: EndReason,
    },
    /// A task was made (by an agent's action or by hand).
    #[serde(rename = "task.created")]
    TaskCreated {
        /// The task.
        task_id: String,
        /// What it is.
        summary: String,
        /// The chat it came from, if any.
        chat_id: Option<String>,
        /// Its workspace.
        workspace_id: String,
        /// Who caused it: the person (token subject) whose message the agent answered, or who
        /// made it by hand; the agent's name only when no person asked (the third source
        /// design's "with the actor being the user").
        actor: String,
        /// The agent that made it, by name; `null` when a person made it by hand.
        #[serde(default)]
        agent: Option<String>,
    },
    /// An agent waits on a person: a question, a tool call to approve, a plan to review.
    #[serde(rename = "input.required")]
    InputRequired {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// The agent that asks.
        agent_name: String,
        /// What it waits for: `question`, `approval` or `plan`.
        kind: crate::session::RequestKind,
        /// The request to answer (a question's, a tool call's or a plan's id).
        request_id: String,
        /// What is asked, in a line.
        summary: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// An agent was added.
    #[serde(rename = "agent.created")]
    AgentCreated {
        /// The agent.
        agent_id: String,
        /// Its name.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// An agent was changed.
    #[serde(rename = "agent.updated")]
    AgentUpdated {
        /// The agent.
        agent_id: String,
        /// Its name.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// An agent was deleted (its chats moved to the built-in agent).
    #[serde(rename = "agent.deleted")]
    AgentDeleted {
        /// The agent.
        agent_id: String,
        /// Its name.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// The workspace's agents were put in a new order.
    #[serde(rename = "agent.reordered")]
    AgentsReordered {
        /// Every agent, in the new order.
        agent_ids: Vec<String>,
        /// The workspace.
        workspace_id: String,
    },
    /// Spool told a person about something in the workspace ([`crate::notifier`]).
    #[serde(rename = "notification.sent")]
    NotificationSent {
        /// What about.
        kind: crate::settings::NotificationKind,
        /// To whom.
        to: String,
        /// How: `email` or `log` (no email sender is configured).
        via: String,
        /// Its subject line.
        subject: String,
        /// The chat it is about.
        chat_id: Option<String>,
        /// The workspace.
        workspace_id: String,
    },
    /// Spool could not tell a person: what went wrong, for the operator.
    #[serde(rename = "notification.failed")]
    NotificationFailed {
        /// What about.
        kind: crate::settings::NotificationKind,
        /// To whom.
        to: String,
        /// Why.
        error: String,
        /// The chat it is about.
        chat_id: Option<String>,
        /// The workspace.
        workspace_id: String,
    },
}

/// Who wrote a message, as feed events say it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthorType {
    /// A person.
    User,
    /// An agent.
    Agent,
    /// Spool itself.
    System,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn file() -> FileRef {
        FileRef {
            id: "att_1".into(),
            filename: "a.txt".into(),
            content_type: "text/plain".into(),
            size: 2,
        }
    }

    /// A message stored before files were typed is still read, without what it cannot name.
    #[test]
    fn untyped_files_of_old_messages_are_skipped() {
        let event: ChatEvent = serde_json::from_value(json!({ "type": "user_message_submitted",
            "payload": { "content": "x", "author": "a", "files": ["old", { "name": "n" },
                { "id": "att_1", "filename": "a.txt", "content_type": "text/plain", "size": 2 }] } }))
        .unwrap();
        let ChatEvent::UserMessageSubmitted(message) = event else {
            panic!()
        };
        assert_eq!(message.files, vec![file()]);
    }

    /// Every variant's JSON, pinned: the wire format clients read.
    #[test]
    fn every_variant_has_its_pinned_json() {
        let call = ToolCall {
            id: "c1".into(),
            name: "rename_chat".into(),
            arguments: json!({ "title": "T" }),
        };
        let cases: Vec<(ChatEvent, Value)> = vec![
            (
                ChatEvent::UserMessageSubmitted(UserMessage {
                    content: "hi".into(),
                    author: "key:k1".into(),
                    ..UserMessage::default()
                }),
                json!({ "type": "user_message_submitted", "payload": { "content": "hi", "author": "key:k1" } }),
            ),
            (
                ChatEvent::ControlSubmitted(ControlSubmitted {
                    action: ControlAction::Abort,
                }),
                json!({ "type": "control_submitted", "payload": { "action": "abort" } }),
            ),
            (
                ChatEvent::ToolOutputSubmitted(ToolOutputSubmitted {
                    tool: "t".into(),
                    tool_call_id: "c1".into(),
                    output: Some(json!(1)),
                    error: None,
                }),
                json!({ "type": "tool_output_submitted", "payload": { "tool": "t", "tool_call_id": "c1", "output": 1, "error": null } }),
            ),
            (
                ChatEvent::ApprovalSubmitted(ApprovalSubmitted {
                    decision: Decision::Decline,
                    tool_call_id: "c1".into(),
                }),
                json!({ "type": "approval_submitted", "payload": { "decision": "decline", "tool_call_id": "c1" } }),
            ),
            (
                ChatEvent::QuestionAnswered(QuestionAnswered {
                    question_id: "q1".into(),
                    answer: "blue".into(),
                }),
                json!({ "type": "question_answered", "payload": { "question_id": "q1", "answer": "blue" } }),
            ),
            (
                ChatEvent::PlanSubmitted(PlanSubmitted {
                    plan_id: "p1".into(),
                    action: PlanAction::Reject,
                    feedback: Some("shorter".into()),
                }),
                json!({ "type": "plan_submitted", "payload": { "plan_id": "p1", "action": "reject", "feedback": "shorter" } }),
            ),
            (
                ChatEvent::AgentMessage(AgentMessage {
                    author: "bot".into(),
                    text: "hello".into(),
                    ask: true,
                    posted_by: "key:k2".into(),
                    question_id: Some("q2".into()),
                    meta: AgentMeta::default(),
                }),
                json!({ "type": "agent_message", "payload": { "author": "bot", "text": "hello", "ask": true, "posted_by": "key:k2", "question_id": "q2" } }),
            ),
            (
                ChatEvent::AgentMessage(AgentMessage {
                    author: "bot".into(),
                    text: "done".into(),
                    ask: false,
                    posted_by: "key:k2".into(),
                    question_id: None,
                    meta: AgentMeta {
                        reply_to: Some("q2".into()),
                        tags: vec!["deploy".into()],
                    },
                }),
                json!({ "type": "agent_message", "payload": { "author": "bot", "text": "done", "ask": false, "posted_by": "key:k2", "meta": { "reply_to": "q2", "tags": ["deploy"] } } }),
            ),
            (
                ChatEvent::AgentStart(AgentStart {
                    runtime: "scripted".into(),
                    agent_id: None,
                    agent_name: "Spool".into(),
                    trigger_seq: 1,
                }),
                json!({ "type": "agent_start", "payload": { "runtime": "scripted", "agent_id": null, "agent_name": "Spool", "trigger_seq": 1 } }),
            ),
            (
                ChatEvent::MessageStart(MessageStart {
                    message_id: "m1".into(),
                    role: Role::Assistant,
                }),
                json!({ "type": "message_start", "payload": { "message_id": "m1", "role": "assistant" } }),
            ),
            (
                ChatEvent::MessageUpdate(MessageUpdate {
                    message_id: "m1".into(),
                    delta: "Hel".into(),
                }),
                json!({ "type": "message_update", "payload": { "message_id": "m1", "delta": "Hel" } }),
            ),
            (
                ChatEvent::MessageEnd(MessageEnd {
                    message_id: "m1".into(),
                    text: "Hello".into(),
                    tool_calls: vec![call],
                    one_shot: true,
                    ..MessageEnd::default()
                }),
                json!({ "type": "message_end", "payload": { "message_id": "m1", "text": "Hello",
                    "tool_calls": [{ "id": "c1", "name": "rename_chat", "arguments": { "title": "T" } }], "one_shot": true } }),
            ),
            (
                ChatEvent::ToolStart(ToolStart {
                    tool_call_id: "c1".into(),
                    tool: "rename_chat".into(),
                    arguments: json!({ "title": "T" }),
                    client: false,
                }),
                json!({ "type": "tool_start", "payload": { "tool_call_id": "c1", "tool": "rename_chat", "arguments": { "title": "T" } } }),
            ),
            (
                ChatEvent::ToolStart(ToolStart {
                    tool_call_id: "c2".into(),
                    tool: "get_location".into(),
                    arguments: json!({}),
                    client: true,
                }),
                json!({ "type": "tool_start", "payload": { "tool_call_id": "c2", "tool": "get_location", "arguments": {}, "client": true } }),
            ),
            (
                ChatEvent::UserMessageSubmitted(UserMessage {
                    content: "where?".into(),
                    author: "p".into(),
                    client_tools: vec![ClientTool {
                        name: "get_location".into(),
                        description: Some("Where".into()),
                        input_schema: Some(json!({ "type": "object" })),
                    }],
                    ..UserMessage::default()
                }),
                json!({ "type": "user_message_submitted", "payload": { "content": "where?", "author": "p",
                        "client_tools": [{ "name": "get_location", "description": "Where", "input_schema": { "type": "object" } }] } }),
            ),
            (
                ChatEvent::ToolEnd(ToolEnd {
                    tool_call_id: "c1".into(),
                    tool: "rename_chat".into(),
                    result: None,
                    error: Some("declined by the person; not run".into()),
                    declined: true,
                }),
                json!({ "type": "tool_end", "payload": { "tool_call_id": "c1", "tool": "rename_chat",
                    "error": "declined by the person; not run", "declined": true } }),
            ),
            (
                ChatEvent::ToolApprovalRequired(ToolApprovalRequired {
                    tool_call_id: "c1".into(),
                    tool: "create_agent".into(),
                    arguments: json!({}),
                }),
                json!({ "type": "tool_approval_required", "payload": { "tool_call_id": "c1", "tool": "create_agent", "arguments": {} } }),
            ),
            (
                ChatEvent::AskQuestion(AskQuestion {
                    question_id: "q1".into(),
                    question: "Which?".into(),
                }),
                json!({ "type": "ask_question", "payload": { "question_id": "q1", "question": "Which?" } }),
            ),
            (
                ChatEvent::PlanApprovalRequired(PlanApprovalRequired {
                    plan_id: "p1".into(),
                    plan: "1. go".into(),
                }),
                json!({ "type": "plan_approval_required", "payload": { "plan_id": "p1", "plan": "1. go" } }),
            ),
            (
                ChatEvent::Usage(Usage {
                    input_tokens: 3,
                    output_tokens: 5,
                }),
                json!({ "type": "usage", "payload": { "input_tokens": 3, "output_tokens": 5 } }),
            ),
            (
                ChatEvent::AgentEnd(AgentEnd {
                    reason: EndReason::Error,
                    error: Some("no input".into()),
                }),
                json!({ "type": "agent_end", "payload": { "reason": "error", "error": "no input" } }),
            ),
            (
                ChatEvent::system(Level::Info, "picked up again"),
                json!({ "type": "system", "payload": { "level": "info", "message": "picked up again" } }),
            ),
            (
                ChatEvent::System(SystemNote {
                    level: Level::Info,
                    message: "User has uploaded a.txt".into(),
                    upload: Some(Uploaded {
                        file: file(),
                        path: "attachments/a.txt".into(),
                        replaces: Some("att_0".into()),
                    }),
                }),
                json!({ "type": "system", "payload": { "level": "info", "message": "User has uploaded a.txt",
                    "upload": { "id": "att_1", "filename": "a.txt", "content_type": "text/plain", "size": 2,
                        "path": "attachments/a.txt", "replaces": "att_0" } } }),
            ),
            (
                ChatEvent::UserMessageSubmitted(UserMessage {
                    content: "see".into(),
                    author: "key:k1".into(),
                    files: vec![file()],
                    ..UserMessage::default()
                }),
                json!({ "type": "user_message_submitted", "payload": { "content": "see", "author": "key:k1",
                    "files": [{ "id": "att_1", "filename": "a.txt", "content_type": "text/plain", "size": 2 }] } }),
            ),
            (
                ChatEvent::SlashCommandInvoked(SlashCommandInvoked {
                    name: "model".into(),
                    invoked_as: "/model small".into(),
                    arguments: "small".into(),
                    source: CommandSource::Builtin,
                    kind: CommandKind::Action,
                    action: Some(CommandAction::SetModel),
                    model: None,
                    new_session_id: None,
                    author: "key:k1".into(),
                }),
                json!({ "type": "slash_command_invoked", "payload": { "name": "model", "invoked_as": "/model small", "arguments": "small", "source": "builtin", "kind": "action", "action": "set_model", "author": "key:k1" } }),
            ),
            (
                ChatEvent::SlashCommandFailed(SlashCommandFailed {
                    name: "reveiw".into(),
                    invoked_as: "/reveiw".into(),
                    reason: "no command `/reveiw`; did you mean /review?".into(),
                }),
                json!({ "type": "slash_command_failed", "payload": { "name": "reveiw", "invoked_as": "/reveiw", "reason": "no command `/reveiw`; did you mean /review?" } }),
            ),
        ];
        for (event, pinned) in cases {
            assert_eq!(serde_json::to_value(&event).unwrap(), pinned, "{}", event.type_name());
            assert_eq!(pinned["type"], event.type_name());
            let back: ChatEvent = serde_json::from_value(pinned).unwrap();
            assert_eq!(back, event);
        }
    }

    /// Feed events are flat, with exactly the third source design's fields.
    #[test]
    fn feed_events_are_flat_with_the_designs_fields() {
        let cases = [
            (
                FeedEvent::MessageAdded {
                    chat_id: "s".into(),
                    chat_title: "T".into(),
                    author_type: AuthorType::System,
                    workspace_id: "w".into(),
                },
                json!({ "type": "chat.message_added", "chat_id": "s", "chat_title": "T", "author_type": "system", "workspace_id": "w" }),
            ),
            (
                FeedEvent::ProcessingStarted {
                    chat_id: "s".into(),
                    chat_title: "T".into(),
                    agent_name: "Spool".into(),
                    workspace_id: "w".into(),
                },
                json!({ "type": "chat.processing_started", "chat_id": "s", "chat_title": "T", "agent_name": "Spool", "workspace_id": "w" }),
            ),
            (
                FeedEvent::ProcessingFinished {
                    chat_id: "s".into(),
                    chat_title: "T".into(),
                    agent_name: "Spool".into(),
                    workspace_id: "w".into(),
                    reason: EndReason::Complete,
                },
                json!({ "type": "chat.processing_finished", "chat_id": "s", "chat_title": "T", "agent_name": "Spool", "workspace_id": "w", "reason": "complete" }),
            ),
            (
                FeedEvent::TaskCreated {
                    task_id: "t".into(),
                    summary: "Do".into(),
                    chat_id: Some("s".into()),
                    workspace_id: "w".into(),
                    actor: "key:ana".into(),
                    agent: Some("Planner".into()),
                },
                json!({ "type": "task.created", "task_id": "t", "summary": "Do", "chat_id": "s", "workspace_id": "w", "actor": "key:ana", "agent": "Planner" }),
            ),
            (
                FeedEvent::NotificationSent {
                    kind: crate::settings::NotificationKind::Question,
                    to: "a@b.io".into(),
                    via: "email".into(),
                    subject: "S".into(),
                    chat_id: Some("s".into()),
                    workspace_id: "w".into(),
                },
                json!({ "type": "notification.sent", "kind": "question", "to": "a@b.io", "via": "email", "subject": "S", "chat_id": "s", "workspace_id": "w" }),
            ),
            (
                FeedEvent::NotificationFailed {
                    kind: crate::settings::NotificationKind::Failure,
                    to: "a@b.io".into(),
                    error: "E".into(),
                    chat_id: None,
                    workspace_id: "w".into(),
                },
                json!({ "type": "notification.failed", "kind": "failure", "to": "a@b.io", "error": "E", "chat_id": null, "workspace_id": "w" }),
            ),
            (
                FeedEvent::InputRequired {
                    chat_id: "s".into(),
                    chat_title: "T".into(),
                    agent_name: "Spool".into(),
                    kind: crate::session::RequestKind::Plan,
                    request_id: "p1".into(),
                    summary: "1. paint".into(),
                    workspace_id: "w".into(),
                },
                json!({ "type": "input.required", "chat_id": "s", "chat_title": "T", "agent_name": "Spool", "kind": "plan", "request_id": "p1", "summary": "1. paint", "workspace_id": "w" }),
            ),
        ];
        for (event, pinned) in cases {
            assert_eq!(serde_json::to_value(&event).unwrap(), pinned);
        }
    }
}
