//! # A turn, read back from its chat's events
//!
//! A turn keeps no state of its own between invocations: everything it did is an event in the
//! chat's stream, so the worker that resumes it (after an answer, a crash or a redelivery)
//! replays the stream into a [`TurnState`] and carries on from there. The same events give the
//! conversation a runtime answers ([`conversation`]).

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use spool_domain::Event;

use crate::runtime::{Message, ToolCall};

/// A person's answer to what a turn asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `approval_submitted`: approve (true) or decline.
    Approval(bool),
    /// `question_answered`.
    Question(String),
    /// `plan_submitted`: approve (true) or reject, with feedback.
    Plan(bool, Option<String>),
    /// `tool_output_submitted`: a client tool's output (or error).
    ToolOutput(Value),
}

/// A message the turn started and did not end (its worker died mid-answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenMessage {
    /// Its id.
    pub id: String,
    /// The text written so far.
    pub text: String,
}

/// What a turn has done, from its events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnState {
    /// The seq of the event that started it (its message).
    pub start_seq: Option<u64>,
    /// Whether `agent_start` was written.
    pub started: bool,
    /// Whether `agent_end` was written.
    pub ended: bool,
    /// A message started and not ended.
    pub open_message: Option<OpenMessage>,
    /// Tools started and not ended: (call id, tool).
    pub open_tools: Vec<(String, String)>,
    /// The tool calls of the turn's latest reply, if it made any.
    pub last_calls: Vec<ToolCall>,
    /// How many replies the turn has made.
    pub replies: usize,
    /// Calls with a result (`tool_end`).
    pub resolved: HashSet<String>,
    /// Calls for which the person was asked (an approval, a question or a plan).
    pub requested: HashSet<String>,
    /// The person's answers, by call id.
    pub answers: HashMap<String, Answer>,
    /// The seq of an abort sent while the turn was pending.
    pub abort_seq: Option<u64>,
}

impl TurnState {
    /// Replays `events` (a whole chat, oldest first) for the turn `turn_id`.
    pub fn replay(events: &[Event], turn_id: &str) -> Self {
        let mut state = Self::default();
        for event in events {
            state.apply(event, turn_id);
        }
        state
    }

    /// Takes one more event of the chat into account.
    pub fn apply(&mut self, event: &Event, turn_id: &str) {
        let p = &event.payload;
        let text = |key: &str| p.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        if event.kind_type == "control_submitted"
            && text("action") == "abort"
            && self.start_seq.is_some_and(|start| event.seq > start)
            && !self.ended
            && self.abort_seq.is_none()
        {
            self.abort_seq = Some(event.seq);
        }
        if event.turn_id.as_deref() != Some(turn_id) {
            return;
        }
        if self.start_seq.is_none() {
            self.start_seq = Some(event.seq);
        }
        match event.kind_type.as_str() {
            "agent_start" => self.started = true,
            "agent_end" => self.ended = true,
            "message_start" => {
                self.open_message = Some(OpenMessage {
                    id: text("message_id"),
                    text: String::new(),
                });
            }
            "message_update" => {
                if let Some(open) = &mut self.open_message {
                    open.text.push_str(&text("delta"));
                }
            }
            "message_end" => {
                self.open_message = None;
                // A message cut short by a dying worker is no reply: the step asks again.
                if p["interrupted"] != true {
                    self.replies += 1;
                    self.last_calls = calls_of(p);
                }
            }
            "tool_start" => self.open_tools.push((text("tool_call_id"), text("tool"))),
            "tool_end" => {
                let id = text("tool_call_id");
                self.open_tools.retain(|(open, _)| *open != id);
                self.resolved.insert(id);
            }
            "tool_approval_required" => {
                self.requested.insert(text("tool_call_id"));
            }
            "ask_question" => {
                self.requested.insert(text("question_id"));
            }
            "plan_approval_required" => {
                self.requested.insert(text("plan_id"));
            }
            "approval_submitted" => {
                self.answers
                    .insert(text("tool_call_id"), Answer::Approval(text("decision") == "approve"));
            }
            "question_answered" => {
                self.answers
                    .insert(text("question_id"), Answer::Question(text("answer")));
            }
            "plan_submitted" => {
                let feedback = p.get("feedback").and_then(Value::as_str).map(str::to_owned);
                self.answers
                    .insert(text("plan_id"), Answer::Plan(text("action") == "approve", feedback));
            }
            "tool_output_submitted" => {
                let output = match p.get("error").and_then(Value::as_str) {
                    Some(error) => serde_json::json!({ "error": error }),
                    None => p.get("output").cloned().unwrap_or(Value::Null),
                };
                self.answers.insert(text("tool_call_id"), Answer::ToolOutput(output));
            }
            _ => {}
        }
    }

    /// The calls of the latest reply that have no result yet, in order. An answer to a question
    /// or a plan, or a client's tool output, is the call's result; an approval is not (the
    /// approved tool still has to run).
    pub fn unresolved(&self) -> Vec<&ToolCall> {
        self.last_calls
            .iter()
            .filter(|c| {
                !self.resolved.contains(&c.id)
                    && !matches!(
                        self.answers.get(&c.id),
                        Some(Answer::Question(_) | Answer::Plan(..) | Answer::ToolOutput(_))
                    )
            })
            .collect()
    }
}

fn calls_of(payload: &Value) -> Vec<ToolCall> {
    payload
        .get("tool_calls")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

/// The text a person's message shows a runtime: its content, and the context a client attached
/// when the chat has the `context_for_query` capability.
fn user_text(payload: &Value, with_context: bool) -> String {
    let content = payload.get("content").and_then(Value::as_str).unwrap_or_default();
    match payload.get("client_context").filter(|_| with_context) {
        Some(context) if !context.is_null() => {
            let context = match context {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{content}\n\n<client_context>\n{context}\n</client_context>")
        }
        _ => content.to_owned(),
    }
}

/// What a person's answer tells the agent, as a tool result.
pub fn answer_text(answer: &Answer) -> String {
    match answer {
        Answer::Approval(true) => "approved".to_owned(),
        Answer::Approval(false) => "The person declined this call; it was not run.".to_owned(),
        Answer::Question(text) => text.clone(),
        Answer::Plan(true, _) => "approved".to_owned(),
        Answer::Plan(false, None) => "rejected".to_owned(),
        Answer::Plan(false, Some(feedback)) => format!("rejected: {feedback}"),
        Answer::ToolOutput(value) => value.to_string(),
    }
}

/// The conversation of a chat, as runtimes take it: people's messages, the agent's replies with
/// their tool calls, each call's result, and Spool's notes. A call left without a result (a
/// turn that was aborted or failed) gets one saying so, as the providers' APIs require.
pub fn conversation(events: &[Event], with_context: bool) -> Vec<Message> {
    let mut messages = Vec::new();
    let mut open_calls: Vec<(String, String)> = Vec::new();
    let close = |messages: &mut Vec<Message>, open: &mut Vec<(String, String)>| {
        for (call_id, name) in open.drain(..) {
            messages.push(Message::Tool {
                call_id,
                name,
                content: "(not run: the turn ended first)".to_owned(),
            });
        }
    };
    let result = |messages: &mut Vec<Message>, open: &mut Vec<(String, String)>, id: &str, content: String| {
        if let Some(at) = open.iter().position(|(call, _)| call == id) {
            let (call_id, name) = open.remove(at);
            messages.push(Message::Tool { call_id, name, content });
        }
    };
    for event in events {
        let p = &event.payload;
        let text = |key: &str| p.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        match event.kind_type.as_str() {
            "user_message_submitted" => {
                close(&mut messages, &mut open_calls);
                messages.push(Message::User {
                    text: user_text(p, with_context),
                });
            }
            "agent_message" => {
                close(&mut messages, &mut open_calls);
                messages.push(Message::User {
                    text: format!("[{}] {}", text("author"), text("text")),
                });
            }
            "message_end" if p["interrupted"] == true => {}
            "message_end" => {
                close(&mut messages, &mut open_calls);
                let tool_calls = calls_of(p);
                open_calls = tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())).collect();
                messages.push(Message::Assistant {
                    text: text("text"),
                    tool_calls,
                });
            }
            "tool_end" => {
                let content = match p.get("error").and_then(Value::as_str) {
                    Some(error) => format!("error: {error}"),
                    None => p.get("result").map(Value::to_string).unwrap_or_default(),
                };
                result(&mut messages, &mut open_calls, &text("tool_call_id"), content);
            }
            "question_answered" => {
                let answer = Answer::Question(text("answer"));
                result(
                    &mut messages,
                    &mut open_calls,
                    &text("question_id"),
                    answer_text(&answer),
                );
            }
            "plan_submitted" => {
                let feedback = p.get("feedback").and_then(Value::as_str).map(str::to_owned);
                let answer = Answer::Plan(text("action") == "approve", feedback);
                result(&mut messages, &mut open_calls, &text("plan_id"), answer_text(&answer));
            }
            "tool_output_submitted" => {
                let output = match p.get("error").and_then(Value::as_str) {
                    Some(error) => format!("error: {error}"),
                    None => p.get("output").map(Value::to_string).unwrap_or_default(),
                };
                result(&mut messages, &mut open_calls, &text("tool_call_id"), output);
            }
            "system" => messages.push(Message::System { text: text("message") }),
            _ => {}
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use spool_domain::EventKind;

    use super::*;

    fn event(seq: u64, kind_type: &str, turn: Option<&str>, payload: Value) -> Event {
        Event {
            v: 1,
            seq,
            ts: String::new(),
            session_id: "ses_1".to_owned(),
            kind: EventKind::Harness,
            kind_type: kind_type.to_owned(),
            payload,
            client_message_id: None,
            turn_id: turn.map(str::to_owned),
        }
    }

    #[test]
    fn a_turn_waiting_on_an_answer_replays_to_its_unresolved_call() {
        // GIVEN a turn that asked a question, and its answer
        let t = Some("t1");
        let call = json!([{ "id": "c1", "name": "ask_user", "arguments": { "question": "Color?" } }]);
        let events = [
            event(1, "user_message_submitted", t, json!({ "content": "hi" })),
            event(2, "agent_start", t, json!({})),
            event(3, "message_start", t, json!({ "message_id": "m1" })),
            event(4, "message_update", t, json!({ "message_id": "m1", "delta": "One " })),
            event(
                5,
                "message_end",
                t,
                json!({ "message_id": "m1", "text": "One q", "tool_calls": call }),
            ),
            event(
                6,
                "ask_question",
                t,
                json!({ "question_id": "c1", "question": "Color?" }),
            ),
            event(
                7,
                "question_answered",
                t,
                json!({ "question_id": "c1", "answer": "blue" }),
            ),
        ];
        // WHEN it is replayed
        let state = TurnState::replay(&events, "t1");
        // THEN it started, asked and got its answer
        assert!(state.started && !state.ended);
        assert_eq!(state.open_message, None);
        assert!(state.requested.contains("c1"));
        assert_eq!(state.answers["c1"], Answer::Question("blue".to_owned()));
        assert!(state.unresolved().is_empty(), "the answer is the call's result");
        // AND the conversation carries the answer as the call's result
        let messages = conversation(&events, false);
        assert_eq!(
            messages.last(),
            Some(&Message::Tool {
                call_id: "c1".to_owned(),
                name: "ask_user".to_owned(),
                content: "blue".to_owned()
            })
        );
    }

    #[test]
    fn a_crash_mid_message_leaves_it_open_and_an_abort_is_seen() {
        let t = Some("t1");
        let events = [
            event(1, "user_message_submitted", t, json!({ "content": "hi" })),
            event(2, "agent_start", t, json!({})),
            event(3, "message_start", t, json!({ "message_id": "m1" })),
            event(4, "message_update", t, json!({ "message_id": "m1", "delta": "Hel" })),
            event(5, "control_submitted", None, json!({ "action": "abort" })),
        ];
        let state = TurnState::replay(&events, "t1");
        assert_eq!(state.open_message.as_ref().map(|m| m.text.as_str()), Some("Hel"));
        assert_eq!(state.abort_seq, Some(5));
        // An abort before the turn's message is not this turn's.
        assert_eq!(TurnState::replay(&events[4..], "t1").abort_seq, None);
    }

    #[test]
    fn calls_left_without_results_get_one_and_context_needs_the_capability() {
        let t = Some("t1");
        let calls = json!([{ "id": "c1", "name": "create_task", "arguments": {} }]);
        let events = [
            event(
                1,
                "user_message_submitted",
                t,
                json!({ "content": "hi", "client_context": "on page 3" }),
            ),
            event(2, "message_end", t, json!({ "text": "ok", "tool_calls": calls })),
            event(3, "user_message_submitted", Some("t2"), json!({ "content": "next" })),
        ];
        let messages = conversation(&events, true);
        assert!(matches!(&messages[0], Message::User { text } if text.contains("on page 3")));
        assert!(matches!(&messages[2], Message::Tool { call_id, .. } if call_id == "c1"));
        assert!(matches!(&conversation(&events, false)[0], Message::User { text } if text == "hi"));
    }
}
