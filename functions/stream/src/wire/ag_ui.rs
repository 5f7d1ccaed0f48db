//! # A turn as AG-UI events
//!
//! AG-UI (the Agent–User Interaction protocol of CopilotKit and others) streams a *run* as
//! events: `RUN_STARTED`, `TEXT_MESSAGE_START`/`_CONTENT`/`_END`, `TOOL_CALL_START`/`_ARGS`/
//! `_END`, `TOOL_CALL_RESULT`, and `RUN_FINISHED` or `RUN_ERROR`. [`RunStream`] derives them
//! from one turn's durable events: the run is the turn (the thread is the chat), each agent
//! reply a text message (its `message_id`), each tool call the reply's tool call, each tool's
//! end its result. A turn that waits on a person finishes its run with the outcome
//! `interrupt`, naming what it waits on (an approval, a question, a plan) by the call's id;
//! the next run's `resume` entry answers it. An abort is the outcome `cancelled`; a failure is
//! `RUN_ERROR`. Every event carries its chat event's seq in `metadata.spool.seq`: where a
//! client that kept its state resumes (`?after=`).

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::wire::ui_message::Progress;
use spool_chat::{
    event::{ChatEvent, EndReason, PlanAction},
    session::Event,
};

/// Why a run waits, as its interrupt's `reason` says.
pub mod reason {
    /// A tool call waits for a person's approval.
    pub const APPROVAL: &str = "tool_approval";
    /// An agent asks a person a question.
    pub const QUESTION: &str = "question";
    /// An agent proposes a plan to approve or reject.
    pub const PLAN: &str = "plan_approval";
    /// A tool the client declared (over the chat API) waits for its output.
    pub const CLIENT_TOOL: &str = "client_tool";
}

/// One AG-UI event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE", rename_all_fields = "camelCase")]
pub enum AgUiEvent {
    /// The run starts.
    RunStarted {
        /// The chat.
        thread_id: String,
        /// The run.
        run_id: String,
        /// Spool's own data (the turn).
        metadata: Value,
    },
    /// An agent reply starts.
    TextMessageStart {
        /// The reply.
        message_id: String,
        /// Always `assistant`.
        role: &'static str,
        /// Where it is in the chat.
        metadata: Value,
    },
    /// More of its text.
    TextMessageContent {
        /// The reply.
        message_id: String,
        /// The text added.
        delta: String,
        /// Where it is in the chat.
        metadata: Value,
    },
    /// The reply's text ended.
    TextMessageEnd {
        /// The reply.
        message_id: String,
        /// Where it is in the chat.
        metadata: Value,
    },
    /// A tool call.
    ToolCallStart {
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_call_name: String,
        /// The reply that calls it.
        parent_message_id: String,
        /// Where it is in the chat.
        metadata: Value,
    },
    /// Its arguments, as JSON text.
    ToolCallArgs {
        /// The call.
        tool_call_id: String,
        /// The arguments.
        delta: String,
        /// Where it is in the chat.
        metadata: Value,
    },
    /// Its arguments are complete.
    ToolCallEnd {
        /// The call.
        tool_call_id: String,
        /// Where it is in the chat.
        metadata: Value,
    },
    /// A call's result.
    ToolCallResult {
        /// The result's message.
        message_id: String,
        /// The call.
        tool_call_id: String,
        /// The result, as text (JSON for structured results).
        content: String,
        /// Always `tool`.
        role: &'static str,
        /// Where it is in the chat.
        metadata: Value,
    },
    /// The run ended: it finished, waits on a person, or was cancelled.
    RunFinished {
        /// The chat.
        thread_id: String,
        /// The run.
        run_id: String,
        /// How.
        outcome: Value,
        /// Where it is in the chat.
        metadata: Value,
    },
    /// The run failed.
    RunError {
        /// Why, and what to do.
        message: String,
        /// `resume` when the run goes on and only this stream ended.
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<&'static str>,
        /// Where it is in the chat.
        metadata: Value,
    },
}

/// Turns one turn's events into AG-UI events.
#[derive(Debug, Clone)]
pub struct RunStream {
    thread_id: String,
    run_id: String,
    turn_id: String,
    /// The reply whose text message is open.
    open: Option<String>,
    /// What the turn waits on: the interrupt, when the last request has no answer yet.
    waiting: Option<Value>,
    progress: Progress,
    /// The seq of the last event pushed.
    seq: u64,
}

fn at(seq: u64) -> Value {
    json!({ "spool": { "seq": seq } })
}

impl RunStream {
    /// The run `run_id` of the chat `thread_id`, following the turn `turn_id`.
    pub fn new(thread_id: impl Into<String>, run_id: impl Into<String>, turn_id: impl Into<String>) -> Self {
        Self {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            turn_id: turn_id.into(),
            open: None,
            waiting: None,
            progress: Progress::Running,
            seq: 0,
        }
    }

    /// The run's first event.
    pub fn start(&self) -> AgUiEvent {
        AgUiEvent::RunStarted {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            metadata: json!({ "spool": { "turn_id": self.turn_id } }),
        }
    }

    /// Where the turn is.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Adds the events `event` makes to `out`; events of other turns make none.
    pub fn push(&mut self, event: &Event, out: &mut Vec<AgUiEvent>) {
        self.seq = event.seq;
        if event.turn_id.as_deref() != Some(&*self.turn_id) || self.progress == Progress::Ended {
            return;
        }
        let seq = event.seq;
        if self.progress == Progress::Waiting {
            self.progress = Progress::Running;
            self.waiting = None;
        }
        match &event.event {
            ChatEvent::MessageStart(start) => {
                self.end_text(seq, out);
                self.open_text(&start.message_id, seq, out);
            }
            ChatEvent::MessageUpdate(update) => {
                if self.open.as_deref() != Some(&*update.message_id) {
                    self.end_text(seq, out);
                    self.open_text(&update.message_id, seq, out);
                }
                if !update.delta.is_empty() {
                    out.push(AgUiEvent::TextMessageContent {
                        message_id: update.message_id.clone(),
                        delta: update.delta.clone(),
                        metadata: at(seq),
                    });
                }
            }
            ChatEvent::MessageEnd(end) => {
                let streamed = self.open.as_deref() == Some(&*end.message_id);
                if !streamed {
                    // A reply whose text came whole (a CLI's), or whose start this stream did
                    // not see.
                    self.end_text(seq, out);
                    self.open_text(&end.message_id, seq, out);
                    if !end.text.is_empty() {
                        out.push(AgUiEvent::TextMessageContent {
                            message_id: end.message_id.clone(),
                            delta: end.text.clone(),
                            metadata: at(seq),
                        });
                    }
                }
                self.end_text(seq, out);
                for call in &end.tool_calls {
                    out.push(AgUiEvent::ToolCallStart {
                        tool_call_id: call.id.clone(),
                        tool_call_name: call.name.clone(),
                        parent_message_id: end.message_id.clone(),
                        metadata: at(seq),
                    });
                    out.push(AgUiEvent::ToolCallArgs {
                        tool_call_id: call.id.clone(),
                        delta: call.arguments.to_string(),
                        metadata: at(seq),
                    });
                    out.push(AgUiEvent::ToolCallEnd {
                        tool_call_id: call.id.clone(),
                        metadata: at(seq),
                    });
                }
            }
            ChatEvent::ToolEnd(end) => {
                let content = if end.declined {
                    json!({ "declined": true, "error": end.error }).to_string()
                } else if let Some(error) = &end.error {
                    json!({ "error": error }).to_string()
                } else {
                    match &end.result {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => "null".to_owned(),
                    }
                };
                out.push(result(&end.tool_call_id, content, seq));
            }
            ChatEvent::ToolApprovalRequired(asked) => self.wait(
                &asked.tool_call_id,
                reason::APPROVAL,
                format!("Approve `{}` with {}?", asked.tool, asked.arguments),
            ),
            ChatEvent::AskQuestion(asked) => self.wait(&asked.question_id, reason::QUESTION, asked.question.clone()),
            ChatEvent::ToolStart(start) if start.client => self.wait(
                &start.tool_call_id,
                reason::CLIENT_TOOL,
                format!(
                    "Run `{}` with {} and send its output to POST /v1/sessions/{{id}}/tool-output",
                    start.tool, start.arguments
                ),
            ),
            ChatEvent::PlanApprovalRequired(asked) => self.wait(&asked.plan_id, reason::PLAN, asked.plan.clone()),
            ChatEvent::QuestionAnswered(answer) => {
                out.push(result(&answer.question_id, answer.answer.clone(), seq));
            }
            ChatEvent::PlanSubmitted(decision) => {
                let action = match decision.action {
                    PlanAction::Approve => "approve",
                    PlanAction::Reject => "reject",
                };
                let content = json!({ "action": action, "feedback": decision.feedback }).to_string();
                out.push(result(&decision.plan_id, content, seq));
            }
            ChatEvent::AgentEnd(end) => {
                self.end_text(seq, out);
                out.push(match end.reason {
                    EndReason::Complete => self.finished(json!({ "type": "success" }), seq),
                    EndReason::Aborted => self.finished(json!({ "type": "cancelled" }), seq),
                    EndReason::Error => AgUiEvent::RunError {
                        message: end.error.clone().unwrap_or_else(|| "the turn failed".to_owned()),
                        code: None,
                        metadata: at(seq),
                    },
                });
                self.progress = Progress::Ended;
            }
            _ => {}
        }
    }

    /// After events a client already has: opens again the text message they left open.
    pub fn reopen(&mut self, out: &mut Vec<AgUiEvent>) {
        let seq = self.seq;
        if let Some(id) = self.open.clone() {
            out.push(AgUiEvent::TextMessageStart {
                message_id: id,
                role: "assistant",
                metadata: json!({ "spool": { "seq": seq, "reopened": true } }),
            });
        }
    }

    /// The event that ends a run the turn waits in (after [`Progress::Waiting`]).
    pub fn pause(&mut self, out: &mut Vec<AgUiEvent>) {
        let seq = self.seq;
        self.end_text(seq, out);
        let interrupts = self.waiting.clone().map_or_else(Vec::new, |i| vec![i]);
        out.push(self.finished(json!({ "type": "interrupt", "interrupts": interrupts }), seq));
    }

    /// The event that ends a stream cut short while the run goes on: the client resumes it.
    pub fn cut(&mut self, out: &mut Vec<AgUiEvent>) {
        out.push(AgUiEvent::RunError {
            message: format!(
                "this stream ended before the run did; resume it with GET /v1/ag-ui/chat/{}/stream?after={}",
                self.thread_id, self.seq
            ),
            code: Some("resume"),
            metadata: at(self.seq),
        });
    }

    fn finished(&self, outcome: Value, seq: u64) -> AgUiEvent {
        AgUiEvent::RunFinished {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            outcome,
            metadata: at(seq),
        }
    }

    fn wait(&mut self, call_id: &str, reason: &str, message: String) {
        let mut interrupt = Map::new();
        interrupt.insert("id".into(), json!(call_id));
        interrupt.insert("reason".into(), json!(reason));
        interrupt.insert("message".into(), json!(message));
        interrupt.insert("toolCallId".into(), json!(call_id));
        // What the next run's `resume` entry carries as its payload.
        let schema = match reason {
            reason::QUESTION => {
                json!({ "type": "object", "properties": { "answer": { "type": "string" } }, "required": ["answer"] })
            }
            reason::PLAN => {
                json!({ "type": "object", "properties": { "approved": { "type": "boolean" }, "feedback": { "type": "string" } }, "required": ["approved"] })
            }
            reason::CLIENT_TOOL => json!({ "type": "object", "properties": { "output": {} }, "required": ["output"] }),
            _ => {
                json!({ "type": "object", "properties": { "approved": { "type": "boolean" } }, "required": ["approved"] })
            }
        };
        interrupt.insert("responseSchema".into(), schema);
        self.waiting = Some(Value::Object(interrupt));
        self.progress = Progress::Waiting;
    }

    fn open_text(&mut self, message_id: &str, seq: u64, out: &mut Vec<AgUiEvent>) {
        out.push(AgUiEvent::TextMessageStart {
            message_id: message_id.to_owned(),
            role: "assistant",
            metadata: at(seq),
        });
        self.open = Some(message_id.to_owned());
    }

    fn end_text(&mut self, seq: u64, out: &mut Vec<AgUiEvent>) {
        if let Some(message_id) = self.open.take() {
            out.push(AgUiEvent::TextMessageEnd {
                message_id,
                metadata: at(seq),
            });
        }
    }
}

fn result(call_id: &str, content: String, seq: u64) -> AgUiEvent {
    AgUiEvent::ToolCallResult {
        message_id: format!("result-{call_id}"),
        tool_call_id: call_id.to_owned(),
        content,
        role: "tool",
        metadata: at(seq),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_chat::event::{
        AgentEnd, AskQuestion, EventKind, MessageEnd, MessageStart, MessageUpdate, Role, ToolCall,
    };

    fn event(seq: u64, event: ChatEvent) -> Event {
        Event {
            v: 1,
            seq,
            ts: String::new(),
            session_id: "s".to_owned(),
            kind: EventKind::Harness,
            event,
            client_message_id: None,
            turn_id: Some("t".to_owned()),
        }
    }

    fn types(events: &[AgUiEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap()["type"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn a_reply_is_a_text_message_and_a_run_that_finishes() {
        let mut run = RunStream::new("s", "r", "t");
        let mut out = vec![run.start()];
        run.push(
            &event(
                2,
                ChatEvent::MessageStart(MessageStart {
                    message_id: "m".into(),
                    role: Role::Assistant,
                }),
            ),
            &mut out,
        );
        run.push(
            &event(
                3,
                ChatEvent::MessageUpdate(MessageUpdate {
                    message_id: "m".into(),
                    delta: "Hi".into(),
                }),
            ),
            &mut out,
        );
        let end = MessageEnd {
            message_id: "m".into(),
            text: "Hi".into(),
            ..Default::default()
        };
        run.push(&event(4, ChatEvent::MessageEnd(end)), &mut out);
        run.push(
            &event(
                5,
                ChatEvent::AgentEnd(AgentEnd {
                    reason: EndReason::Complete,
                    error: None,
                }),
            ),
            &mut out,
        );
        assert_eq!(
            types(&out),
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(
            serde_json::to_value(&out[2]).unwrap(),
            json!({ "type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "Hi", "metadata": { "spool": { "seq": 3 } } })
        );
        assert_eq!(
            serde_json::to_value(&out[4]).unwrap()["outcome"],
            json!({ "type": "success" })
        );
        assert_eq!(run.progress(), &Progress::Ended);
    }

    #[test]
    fn a_question_interrupts_the_run() {
        let mut run = RunStream::new("s", "r", "t");
        let mut out = Vec::new();
        let end = MessageEnd {
            message_id: "m".into(),
            tool_calls: vec![ToolCall {
                id: "q".into(),
                name: "ask_user".into(),
                arguments: json!({ "question": "Name?" }),
            }],
            ..Default::default()
        };
        run.push(&event(2, ChatEvent::MessageEnd(end)), &mut out);
        run.push(
            &event(
                3,
                ChatEvent::AskQuestion(AskQuestion {
                    question_id: "q".into(),
                    question: "Name?".into(),
                }),
            ),
            &mut out,
        );
        assert_eq!(run.progress(), &Progress::Waiting);
        run.pause(&mut out);
        assert_eq!(
            types(&out),
            [
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(
            serde_json::to_value(out.last().unwrap()).unwrap()["outcome"],
            json!({ "type": "interrupt", "interrupts": [
                { "id": "q", "reason": "question", "message": "Name?", "toolCallId": "q",
                  "responseSchema": { "type": "object", "properties": { "answer": { "type": "string" } }, "required": ["answer"] } }] })
        );
    }

    #[test]
    fn a_client_that_kept_its_state_gets_its_open_message_again() {
        let mut run = RunStream::new("s", "r", "t");
        let mut seen = Vec::new();
        run.push(
            &event(
                2,
                ChatEvent::MessageUpdate(MessageUpdate {
                    message_id: "m".into(),
                    delta: "a".into(),
                }),
            ),
            &mut seen,
        );
        let mut out = Vec::new();
        run.reopen(&mut out);
        run.push(
            &event(
                3,
                ChatEvent::MessageUpdate(MessageUpdate {
                    message_id: "m".into(),
                    delta: "b".into(),
                }),
            ),
            &mut out,
        );
        assert_eq!(types(&out), ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]);
        let failed = AgentEnd {
            reason: EndReason::Error,
            error: Some("boom".into()),
        };
        run.push(&event(4, ChatEvent::AgentEnd(failed)), &mut out);
        assert_eq!(types(&out)[2..], ["TEXT_MESSAGE_END", "RUN_ERROR"]);
    }
}
