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
//!
//! The payloads are kept by family: a person's messages and controls and the files they name
//! (`messages`), an agent's turns (`turns`), what an agent asks a person and the answers
//! (`requests`), slash commands (`commands`), what agents remember of a long chat (`history`),
//! a chat's branches (`branches`) and the feed's events (`feed`); each is one of this
//! module's types.

mod branches;
mod commands;
mod feed;
mod history;
mod messages;
mod requests;
mod turns;

pub use branches::{BranchSelected, Revision, RevisionKind};
pub use commands::{SlashCommandFailed, SlashCommandInvoked};
pub use feed::{AuthorType, FeedEvent};
pub use history::{CompactReason, HistoryCompacted};
pub use messages::{
    AgentMessage, ClientTool, ControlAction, ControlSubmitted, FileRef, ToolOutputSubmitted, Uploaded, UserMessage,
};
pub use requests::{
    ASK_USER, ApprovalSubmitted, AskQuestion, Decision, PROPOSE_CAPTURE, PROPOSE_PLAN, PlanAction,
    PlanApprovalRequired, PlanSubmitted, QuestionAnswered, ToolApprovalRequired,
};
pub use turns::{
    AgentEnd, AgentStart, EndReason, Level, MessageEnd, MessageStart, MessageUpdate, Role, SystemNote, ToolCall,
    ToolEnd, ToolStart, Usage,
};

use serde::{Deserialize, Serialize};

/// Who wrote an event.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A person's or a client's submission (a message, a control, an answer).
    Submit,
    /// What an agent runtime did.
    Harness,
    /// Spool itself (errors, notices).
    System,
}

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
    /// The chat's oldest history, summarised for agents (nothing is deleted).
    HistoryCompacted(HistoryCompacted),
    /// An earlier version of a message is on the chat's active branch again.
    BranchSelected(BranchSelected),
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
            | Self::SlashCommandInvoked(_)
            | Self::BranchSelected(_) => EventKind::Submit,
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
            Self::System(_) | Self::SlashCommandFailed(_) | Self::HistoryCompacted(_) => EventKind::System,
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
            Self::HistoryCompacted(_) => "history_compacted",
            Self::BranchSelected(_) => "branch_selected",
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

#[cfg(test)]
mod tests;
