//! # A turn as the AI SDK's UI message stream
//!
//! The Vercel AI SDK's `useChat` reads an answer as a *UI message stream*: server-sent events
//! whose data are JSON chunks (`start`, `start-step`, `text-start`/`-delta`/`-end`,
//! `tool-input-available`, `tool-output-*`, `tool-approval-request`, `finish`, …), ending with
//! `[DONE]`. [`TurnStream`] derives those chunks from one turn's durable events, so the same
//! chunks come out however often, and from wherever, the turn is read: a resumed stream is
//! the turn replayed from its start, exactly what a live one would have sent.
//!
//! The assistant message is the turn: its id is the turn's id. Each agent reply is a step; its
//! text a text part (the reply's `message_id`); each tool call a *dynamic* tool part (Spool's
//! tools are not declared by the front end). Tools Spool runs are `providerExecuted`; the
//! question tool ([`ASK_USER`]) is not: the front end answers it with the tool's output (the
//! AI SDK's client-side tools), and the answer comes back as that output. A call that waits
//! for approval, and a plan ([`PROPOSE_PLAN`]), are `tool-approval-request`s whose approval id
//! is the call's id. A turn that waits on a person ends its stream with `finish` (reason
//! `tool-calls`); the answer's request continues the same message.

use serde::Serialize;
use serde_json::{Value, json};

use spool_chat::{
    event::{ASK_USER, ChatEvent, EndReason, PROPOSE_PLAN, PlanAction},
    session::Event,
};

/// The header that marks a response as a UI message stream.
pub const STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");

/// The stream's last data line.
pub const DONE: &str = "[DONE]";

/// Why an answer's stream finished, as the protocol names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// The agent answered.
    Stop,
    /// The turn waits on a person (an approval, a question, a plan).
    ToolCalls,
    /// The turn failed.
    Error,
}

/// One chunk of the UI message stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub enum UiChunk {
    /// The assistant message starts (or continues, after an answer).
    Start {
        /// The message: the turn's id (none when no turn answers).
        #[serde(skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
        /// Spool's own data about it.
        message_metadata: Value,
    },
    /// An agent reply starts.
    StartStep,
    /// An agent reply ended.
    FinishStep,
    /// A text part starts.
    TextStart {
        /// The part: the reply's message id.
        id: String,
    },
    /// More text.
    TextDelta {
        /// The part.
        id: String,
        /// The text added.
        delta: String,
    },
    /// A text part ended.
    TextEnd {
        /// The part.
        id: String,
    },
    /// A tool call, with its whole input.
    ToolInputAvailable {
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_name: String,
        /// Its arguments.
        input: Value,
        /// Whether Spool runs it (the front end answers the others).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        provider_executed: bool,
        /// Always: the front end does not declare Spool's tools.
        dynamic: bool,
    },
    /// A call waits for a person's approval.
    ToolApprovalRequest {
        /// What the approval names: the call's id.
        approval_id: String,
        /// The call.
        tool_call_id: String,
    },
    /// A call's result.
    ToolOutputAvailable {
        /// The call.
        tool_call_id: String,
        /// Its output.
        output: Value,
        /// Whether Spool ran it.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        provider_executed: bool,
        /// Always.
        dynamic: bool,
    },
    /// A call failed.
    ToolOutputError {
        /// The call.
        tool_call_id: String,
        /// Why.
        error_text: String,
        /// Whether Spool ran it.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        provider_executed: bool,
        /// Always.
        dynamic: bool,
    },
    /// A person declined the call: it never ran.
    ToolOutputDenied {
        /// The call.
        tool_call_id: String,
    },
    /// The turn failed.
    Error {
        /// Why, and what to do.
        error_text: String,
    },
    /// The answer's stream is over.
    Finish {
        /// Why.
        finish_reason: FinishReason,
    },
    /// The turn was aborted.
    Abort {
        /// Who stopped it.
        reason: String,
    },
}

/// Where a turn's stream is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// More is to come.
    Running,
    /// The turn waits on a person: the stream ends here, and an answer continues it.
    Waiting,
    /// The turn ended: the stream is over.
    Ended,
}

/// Turns one turn's events into UI message stream chunks.
#[derive(Debug, Clone)]
pub struct TurnStream {
    turn_id: String,
    /// The reply in progress, and whether its text part has started.
    step: Option<(String, bool)>,
    /// Calls this stream gave no output yet.
    open_calls: Vec<String>,
    /// The tools the turn's message declared for the client to run.
    client_tools: Vec<String>,
    /// Calls of those the turn waits on (asked, no output yet).
    awaiting: Vec<String>,
    progress: Progress,
}

impl TurnStream {
    /// The stream of `turn_id`.
    pub fn new(turn_id: impl Into<String>) -> Self {
        Self {
            turn_id: turn_id.into(),
            step: None,
            open_calls: Vec::new(),
            client_tools: Vec::new(),
            awaiting: Vec::new(),
            progress: Progress::Running,
        }
    }

    /// The same, knowing the tools the turn's message declared for the front end to run (a
    /// stream that starts after that message, at an answer).
    #[must_use]
    pub fn with_client_tools(mut self, names: Vec<String>) -> Self {
        self.client_tools = names;
        self
    }

    /// The turn.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The stream's first chunk.
    pub fn start(&self) -> UiChunk {
        UiChunk::Start {
            message_id: (!self.turn_id.is_empty()).then(|| self.turn_id.clone()),
            message_metadata: json!({ "spool": { "turn_id": self.turn_id } }),
        }
    }

    /// Where the stream is.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Adds the chunks `event` makes to `out`; events of other turns make none.
    pub fn push(&mut self, event: &Event, out: &mut Vec<UiChunk>) {
        if event.turn_id.as_deref() != Some(&*self.turn_id) || self.progress == Progress::Ended {
            return;
        }
        if self.progress == Progress::Waiting {
            self.progress = Progress::Running;
        }
        let before = out.len();
        self.translate(event, out);
        for chunk in &out[before..] {
            match chunk {
                UiChunk::ToolInputAvailable { tool_call_id, .. } => self.open_calls.push(tool_call_id.clone()),
                UiChunk::ToolOutputAvailable { tool_call_id, .. }
                | UiChunk::ToolOutputError { tool_call_id, .. }
                | UiChunk::ToolOutputDenied { tool_call_id } => self.open_calls.retain(|c| c != tool_call_id),
                _ => {}
            }
        }
    }

    fn translate(&mut self, event: &Event, out: &mut Vec<UiChunk>) {
        match &event.event {
            ChatEvent::MessageStart(start) => {
                self.end_step(out);
                out.push(UiChunk::StartStep);
                self.step = Some((start.message_id.clone(), false));
            }
            ChatEvent::MessageUpdate(update) => {
                self.text(&update.message_id, out);
                out.push(UiChunk::TextDelta {
                    id: update.message_id.clone(),
                    delta: update.delta.clone(),
                });
            }
            ChatEvent::MessageEnd(end) => {
                let started = self
                    .step
                    .as_ref()
                    .is_some_and(|(id, text)| *id == end.message_id && *text);
                if !started && !end.text.is_empty() {
                    // A reply whose text came whole (a CLI's), or whose updates this stream
                    // never saw: its text in one delta.
                    self.text(&end.message_id, out);
                    out.push(UiChunk::TextDelta {
                        id: end.message_id.clone(),
                        delta: end.text.clone(),
                    });
                }
                if self.step.as_ref().is_some_and(|(_, text)| *text) {
                    out.push(UiChunk::TextEnd {
                        id: end.message_id.clone(),
                    });
                }
                if self.step.is_none() {
                    out.push(UiChunk::StartStep);
                }
                for call in &end.tool_calls {
                    // The front end runs ask_user (it asks its person) and its own tools.
                    let client = call.name == ASK_USER || self.client_tools.contains(&call.name);
                    out.push(UiChunk::ToolInputAvailable {
                        tool_call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        input: call.arguments.clone(),
                        provider_executed: !client,
                        dynamic: true,
                    });
                }
                out.push(UiChunk::FinishStep);
                self.step = None;
            }
            ChatEvent::ToolEnd(end) => {
                out.push(if end.declined {
                    UiChunk::ToolOutputDenied {
                        tool_call_id: end.tool_call_id.clone(),
                    }
                } else if let Some(error) = &end.error {
                    UiChunk::ToolOutputError {
                        tool_call_id: end.tool_call_id.clone(),
                        error_text: error.clone(),
                        provider_executed: true,
                        dynamic: true,
                    }
                } else {
                    UiChunk::ToolOutputAvailable {
                        tool_call_id: end.tool_call_id.clone(),
                        output: end.result.clone().unwrap_or(Value::Null),
                        provider_executed: true,
                        dynamic: true,
                    }
                });
            }
            ChatEvent::ToolApprovalRequired(asked) => {
                self.wait(&asked.tool_call_id, out);
            }
            ChatEvent::PlanApprovalRequired(asked) => {
                self.wait(&asked.plan_id, out);
            }
            ChatEvent::AskQuestion(_) => self.progress = Progress::Waiting,
            ChatEvent::UserMessageSubmitted(message) => {
                self.client_tools = message.client_tools.iter().map(|t| t.name.clone()).collect();
            }
            // A tool the front end runs: the turn waits for its output.
            ChatEvent::ToolStart(start) if start.client => {
                self.awaiting.push(start.tool_call_id.clone());
                self.progress = Progress::Waiting;
            }
            // Taken: Spool's from here on, so the front end never sends it again. The turn
            // still waits while another call of the reply has no output.
            ChatEvent::ToolOutputSubmitted(submitted) => {
                self.awaiting.retain(|c| *c != submitted.tool_call_id);
                if !self.awaiting.is_empty() {
                    self.progress = Progress::Waiting;
                }
                out.push(match &submitted.error {
                    Some(error) => UiChunk::ToolOutputError {
                        tool_call_id: submitted.tool_call_id.clone(),
                        error_text: error.clone(),
                        provider_executed: true,
                        dynamic: true,
                    },
                    None => UiChunk::ToolOutputAvailable {
                        tool_call_id: submitted.tool_call_id.clone(),
                        output: submitted.output.clone().unwrap_or(Value::Null),
                        provider_executed: true,
                        dynamic: true,
                    },
                });
            }
            // Answered: Spool's from here on, so the front end never sends it again.
            ChatEvent::QuestionAnswered(answer) => out.push(UiChunk::ToolOutputAvailable {
                tool_call_id: answer.question_id.clone(),
                output: json!({ "answer": answer.answer }),
                provider_executed: true,
                dynamic: true,
            }),
            ChatEvent::PlanSubmitted(decision) => out.push(match decision.action {
                PlanAction::Approve => UiChunk::ToolOutputAvailable {
                    tool_call_id: decision.plan_id.clone(),
                    output: json!({ "action": "approve", "feedback": decision.feedback }),
                    provider_executed: true,
                    dynamic: true,
                },
                PlanAction::Reject => UiChunk::ToolOutputDenied {
                    tool_call_id: decision.plan_id.clone(),
                },
            }),
            ChatEvent::AgentEnd(end) => {
                self.end_step(out);
                // A call the turn ended without answering (an abort while it waited): its
                // part is settled, so no front end answers it again.
                for call in std::mem::take(&mut self.open_calls) {
                    out.push(UiChunk::ToolOutputError {
                        tool_call_id: call,
                        error_text: format!("the turn ended ({}) before this call was answered", end.reason.as_str()),
                        provider_executed: true,
                        dynamic: true,
                    });
                }
                match end.reason {
                    EndReason::Complete => out.push(UiChunk::Finish {
                        finish_reason: FinishReason::Stop,
                    }),
                    EndReason::Aborted => out.push(UiChunk::Abort {
                        reason: "aborted by a person".to_owned(),
                    }),
                    EndReason::Error => {
                        out.push(UiChunk::Error {
                            error_text: end.error.clone().unwrap_or_else(|| "the turn failed".to_owned()),
                        });
                        out.push(UiChunk::Finish {
                            finish_reason: FinishReason::Error,
                        });
                    }
                }
                self.progress = Progress::Ended;
            }
            _ => {}
        }
    }

    /// The chunks that end a stream the turn waits in (after [`Progress::Waiting`]).
    pub fn pause(&mut self, out: &mut Vec<UiChunk>) {
        self.end_step(out);
        out.push(UiChunk::Finish {
            finish_reason: FinishReason::ToolCalls,
        });
    }

    fn wait(&mut self, call_id: &str, out: &mut Vec<UiChunk>) {
        out.push(UiChunk::ToolApprovalRequest {
            approval_id: call_id.to_owned(),
            tool_call_id: call_id.to_owned(),
        });
        self.progress = Progress::Waiting;
    }

    /// Starts the reply's text part, if it has not started.
    fn text(&mut self, message_id: &str, out: &mut Vec<UiChunk>) {
        match &mut self.step {
            Some((id, started)) if id == message_id => {
                if !*started {
                    *started = true;
                    out.push(UiChunk::TextStart { id: id.clone() });
                }
            }
            _ => {
                // Text of a reply whose start this stream did not see.
                self.end_step(out);
                out.push(UiChunk::StartStep);
                out.push(UiChunk::TextStart {
                    id: message_id.to_owned(),
                });
                self.step = Some((message_id.to_owned(), true));
            }
        }
    }

    fn end_step(&mut self, out: &mut Vec<UiChunk>) {
        if let Some((id, text)) = self.step.take() {
            if text {
                out.push(UiChunk::TextEnd { id });
            }
            out.push(UiChunk::FinishStep);
        }
    }
}

/// Whether `event` asks a person about the call `call_id` (its approval, question or plan).
pub fn asks_about(event: &ChatEvent, call_id: &str) -> bool {
    match event {
        ChatEvent::ToolApprovalRequired(a) => a.tool_call_id == call_id,
        ChatEvent::AskQuestion(q) => q.question_id == call_id,
        ChatEvent::PlanApprovalRequired(p) => p.plan_id == call_id,
        ChatEvent::ToolStart(t) => t.client && t.tool_call_id == call_id,
        _ => false,
    }
}

/// Whether `event` is a person's answer about the call `call_id`.
pub fn answers(event: &ChatEvent, call_id: &str) -> bool {
    match event {
        ChatEvent::ApprovalSubmitted(a) => a.tool_call_id == call_id,
        ChatEvent::QuestionAnswered(q) => q.question_id == call_id,
        ChatEvent::PlanSubmitted(p) => p.plan_id == call_id,
        ChatEvent::ToolOutputSubmitted(t) => t.tool_call_id == call_id,
        _ => false,
    }
}

/// Whether a tool's approval is a plan's decision.
pub fn is_plan(tool_name: &str) -> bool {
    tool_name == PROPOSE_PLAN
}

/// Whether a tool's output is a person's answer to a question.
pub fn is_question(tool_name: &str) -> bool {
    tool_name == ASK_USER
}

#[cfg(test)]
mod tests;
