//! What an agent asks a person (a question, a tool call to approve, a plan to review) and the
//! person's answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The tool an agent calls to ask a person a question (its call becomes [`AskQuestion`], the
/// call's id the question's).
pub const ASK_USER: &str = "ask_user";
/// The tool an agent calls to propose a plan (its call becomes [`PlanApprovalRequired`], the
/// call's id the plan's).
pub const PROPOSE_PLAN: &str = "propose_plan";
/// The tool an agent calls to propose saving a note into the person's companion library (a
/// [`ToolApprovalRequired`]; the person's app saves it as the person approves).
pub const PROPOSE_CAPTURE: &str = "propose_capture";

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
    /// The MCP server whose tool it is ([`crate::mcp`]); `tool` is then the name the model called
    /// (`{server}__{tool}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
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
