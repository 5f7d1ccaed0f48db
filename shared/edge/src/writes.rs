//! # Writes the front ends' routes make for their callers
//!
//! The front ends' routes (the AI SDK's, AG-UI's) post a person's message, or an answer to what
//! a turn waits on, as the caller who sent them: [`ChatWrites`] is that port. The chat API
//! implements it in process where both run side by side (`spool serve`), calling the chat
//! service with the same checks, limits and idempotency as its own routes; on AWS, where the
//! stream function's role holds no write rights, it is one HTTP client to the API function.
//! Either way a refusal is the one [`ApiError`].

use std::{future::Future, pin::Pin};

use axum::http::{Extensions, HeaderValue};
use serde_json::{Value, json};
use spool_chat::event::{Decision, PlanAction};
pub use spool_chat::service::Revise;

use crate::ApiError;

/// What a write answers, once it is done (or refused).
pub type Written<T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'static>>;

/// Who a write is made for: their request's `Authorization` header (checked again by the chat
/// API, which counts the write against the caller's rate limits) and its extensions (the
/// client's address, the request's log slot).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The `Authorization` header, as sent.
    pub authorization: Option<HeaderValue>,
    /// The request's extensions.
    pub extensions: Extensions,
}

/// A person's message to post.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// Its text.
    pub content: String,
    /// The front end's id for it, so a retry posts nothing twice.
    pub client_message_id: String,
    /// Tools the front end declares and runs, for the turn (checked by the chat API).
    pub client_tools: Vec<Value>,
}

impl NewMessage {
    /// Its body at `POST /v1/sessions/{id}/messages`.
    pub fn body(&self) -> Value {
        let mut body = json!({ "content": self.content, "client_message_id": self.client_message_id });
        if !self.client_tools.is_empty() {
            body["client_tools"] = Value::Array(self.client_tools.clone());
        }
        body
    }
}

/// An answer to what a turn waits on.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A decision on a tool call that needs approval.
    Approval {
        /// The call.
        tool_call_id: String,
        /// Run it or not.
        decision: Decision,
    },
    /// A decision on a proposed plan.
    Plan {
        /// The plan.
        plan_id: String,
        /// Go ahead or not.
        action: PlanAction,
        /// What to change, if anything.
        feedback: Option<String>,
    },
    /// An answer to an agent's question.
    Question {
        /// The question.
        question_id: String,
        /// The answer.
        answer: String,
    },
    /// The result of a tool the front end ran.
    ToolOutput {
        /// The tool.
        tool: String,
        /// The call.
        tool_call_id: String,
        /// Its output, or the error it failed with.
        output: Result<Value, String>,
    },
}

impl Answer {
    /// The id of the call or request it answers.
    pub fn call_id(&self) -> &str {
        match self {
            Self::Approval { tool_call_id, .. } | Self::ToolOutput { tool_call_id, .. } => tool_call_id,
            Self::Plan { plan_id, .. } => plan_id,
            Self::Question { question_id, .. } => question_id,
        }
    }

    /// Its route under `/v1/sessions/{id}/`, and its body there.
    pub fn route_and_body(&self) -> (&'static str, Value) {
        match self {
            Self::Approval { tool_call_id, decision } => (
                "approval",
                json!({ "tool_call_id": tool_call_id, "decision": decision }),
            ),
            Self::Plan {
                plan_id,
                action,
                feedback,
            } => (
                "plan",
                json!({ "plan_id": plan_id, "action": action, "feedback": feedback }),
            ),
            Self::Question { question_id, answer } => {
                ("question", json!({ "question_id": question_id, "answer": answer }))
            }
            Self::ToolOutput {
                tool,
                tool_call_id,
                output: Ok(output),
            } => (
                "tool-output",
                json!({ "tool": tool, "tool_call_id": tool_call_id, "output": output }),
            ),
            Self::ToolOutput {
                tool,
                tool_call_id,
                output: Err(error),
            } => (
                "tool-output",
                json!({ "tool": tool, "tool_call_id": tool_call_id, "error": error }),
            ),
        }
    }
}

/// A new version's route under `/v1/sessions/{id}/`, and its body there.
pub fn revise_route_and_body(revise: &Revise) -> (String, Value) {
    match revise {
        Revise::Edit {
            seq,
            content,
            client_message_id,
        } => (
            format!("messages/{seq}/edit"),
            json!({ "content": content, "client_message_id": client_message_id }),
        ),
        Revise::Regenerate { seq, client_message_id } => (
            "regenerate".to_owned(),
            json!({ "seq": seq, "client_message_id": client_message_id }),
        ),
    }
}

/// A write done: its event's `seq`, and the turn it starts or resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// The event's sequence number.
    pub seq: u64,
    /// The turn; none when a message answered an agent's question instead.
    pub turn_id: Option<String>,
    /// Whether it repeated an earlier write's client id: that write's answer.
    pub duplicate: bool,
}

/// The chat's writes, as the front ends' routes make them for their callers.
pub trait ChatWrites: Send + Sync {
    /// Posts `message` to the chat `session` as the caller of `credentials`.
    fn post_message(&self, credentials: Credentials, session: &str, message: NewMessage) -> Written<Posted>;
    /// Gives `answer` in the chat `session` as the caller of `credentials`.
    fn answer(&self, credentials: Credentials, session: &str, answer: Answer) -> Written<Posted>;
    /// Makes a new version of a person's message (an edit, a regenerate) in the chat `session`
    /// as the caller of `credentials`.
    fn revise(&self, credentials: Credentials, session: &str, revise: Revise) -> Written<Posted>;
}
