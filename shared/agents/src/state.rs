//! # A turn, read back from its chat's events
//!
//! A turn keeps no state of its own between invocations: everything it did is an event in the
//! chat's stream, so the worker that resumes it (after an answer, a crash or a redelivery)
//! replays the stream into a [`TurnState`] and carries on from there. The same events give the
//! conversation a runtime answers ([`conversation`]).

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use spool_chat::{
    event::{ChatEvent, ControlAction, ControlSubmitted, Decision, HistoryCompacted, PlanAction, UserMessage},
    session::Event,
};
use spool_commands::CommandAction;

use crate::runtime::{Attached, Message, ToolCall};

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
        if let ChatEvent::ControlSubmitted(ControlSubmitted {
            action: ControlAction::Abort,
        }) = &event.event
            && self.start_seq.is_some_and(|start| event.seq > start)
            && !self.ended
            && self.abort_seq.is_none()
        {
            self.abort_seq = Some(event.seq);
        }
        if event.turn_id.as_deref() != Some(turn_id) {
            return;
        }
        // A prompt command's `slash_command_invoked` names the turn its prompt starts; the
        // turn starts at the prompt.
        if self.start_seq.is_none() && !matches!(event.event, ChatEvent::SlashCommandInvoked(_)) {
            self.start_seq = Some(event.seq);
        }
        match &event.event {
            ChatEvent::AgentStart(_) => self.started = true,
            ChatEvent::AgentEnd(_) => self.ended = true,
            ChatEvent::MessageStart(start) => {
                self.open_message = Some(OpenMessage {
                    id: start.message_id.clone(),
                    text: String::new(),
                });
            }
            ChatEvent::MessageUpdate(update) => {
                if let Some(open) = &mut self.open_message {
                    open.text.push_str(&update.delta);
                }
            }
            ChatEvent::MessageEnd(end) => {
                self.open_message = None;
                // A message cut short by a dying worker is no reply: the step asks again.
                if !end.interrupted {
                    self.replies += 1;
                    self.last_calls.clone_from(&end.tool_calls);
                }
            }
            // A client's tool runs in the client: the turn asked for its output.
            ChatEvent::ToolStart(start) if start.client => {
                self.requested.insert(start.tool_call_id.clone());
            }
            ChatEvent::ToolStart(start) => self.open_tools.push((start.tool_call_id.clone(), start.tool.clone())),
            ChatEvent::ToolEnd(end) => {
                self.open_tools.retain(|(open, _)| *open != end.tool_call_id);
                self.resolved.insert(end.tool_call_id.clone());
            }
            ChatEvent::ToolApprovalRequired(asked) => {
                self.requested.insert(asked.tool_call_id.clone());
            }
            ChatEvent::AskQuestion(asked) => {
                self.requested.insert(asked.question_id.clone());
            }
            ChatEvent::PlanApprovalRequired(asked) => {
                self.requested.insert(asked.plan_id.clone());
            }
            ChatEvent::ApprovalSubmitted(answer) => {
                self.answers.insert(
                    answer.tool_call_id.clone(),
                    Answer::Approval(answer.decision == Decision::Approve),
                );
            }
            ChatEvent::QuestionAnswered(answer) => {
                self.answers
                    .insert(answer.question_id.clone(), Answer::Question(answer.answer.clone()));
            }
            ChatEvent::PlanSubmitted(answer) => {
                self.answers.insert(
                    answer.plan_id.clone(),
                    Answer::Plan(answer.action == PlanAction::Approve, answer.feedback.clone()),
                );
            }
            ChatEvent::ToolOutputSubmitted(out) => {
                let output = match &out.error {
                    Some(error) => serde_json::json!({ "error": error }),
                    None => out.output.clone().unwrap_or(Value::Null),
                };
                self.answers
                    .insert(out.tool_call_id.clone(), Answer::ToolOutput(output));
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

/// The text a person's message shows a runtime: its content, and the context a client attached
/// when the chat has the `context_for_query` capability.
/// How a person's message names the files it refers to, after its text.
const FILES_NOTE: &str = "\n\n(Attached: ";

/// A person's message as they wrote it, without the note naming its files.
pub fn as_written(text: &str) -> &str {
    let text = text.split(FILES_NOTE).next().unwrap_or(text);
    text.split(CONTEXT_OPEN).next().unwrap_or(text)
}

/// How a message's `client_context` is set after its text.
const CONTEXT_OPEN: &str = "\n\n<client_context>\n";
const CONTEXT_CLOSE: &str = "\n</client_context>";

/// The `client_context` a person's message carried to the agent (its chat has the
/// `context_for_query` capability), as JSON.
pub fn client_context_of(text: &str) -> Option<Value> {
    let (_, rest) = text.split_once(CONTEXT_OPEN)?;
    let (context, _) = rest.rsplit_once(CONTEXT_CLOSE)?;
    serde_json::from_str(context).ok()
}

fn user_text(message: &UserMessage, with_context: bool) -> String {
    let mut content = message.content.clone();
    if !message.files.is_empty() {
        let names: Vec<&str> = message.files.iter().map(|f| f.filename.as_str()).collect();
        content.push_str(&format!("{FILES_NOTE}{})", names.join(", ")));
    }
    match message.client_context.as_ref().filter(|_| with_context) {
        Some(context) if !context.is_null() => {
            let context = match context {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{content}{CONTEXT_OPEN}{context}{CONTEXT_CLOSE}")
        }
        _ => content,
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
    conversation_timed(events, with_context).0
}

/// [`conversation`], with when each message was written (its event's `ts`).
pub fn conversation_timed(events: &[Event], with_context: bool) -> (Vec<Message>, Vec<String>) {
    let (messages, stamps, _) = conversation_traced(events, with_context);
    (messages, stamps)
}

/// [`conversation_timed`], with the seq of the event that added each message (for a summary,
/// the last seq it covers).
pub fn conversation_traced(events: &[Event], with_context: bool) -> (Vec<Message>, Vec<String>, Vec<u64>) {
    let mut stamps: Vec<String> = Vec::new();
    // The seq of the event that added each message, for a summary to replace those it covers.
    let mut seqs: Vec<u64> = Vec::new();
    let mut compacting: Option<String> = None;
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
        match &event.event {
            // `/compact`'s prompt asks Spool, not the agent: its summary stands for it.
            ChatEvent::SlashCommandInvoked(invoked) if invoked.action == Some(CommandAction::CompactHistory) => {
                compacting = event.turn_id.clone();
            }
            ChatEvent::UserMessageSubmitted(_) if compacting.is_some() && event.turn_id == compacting => {}
            ChatEvent::UserMessageSubmitted(message) => {
                close(&mut messages, &mut open_calls);
                messages.push(Message::User {
                    text: user_text(message, with_context),
                });
            }
            ChatEvent::AgentMessage(message) => {
                close(&mut messages, &mut open_calls);
                messages.push(Message::User {
                    text: format!("[{}] {}", message.author, message.text),
                });
            }
            // `/clear`: the agent starts afresh; the chat keeps every event.
            ChatEvent::SlashCommandInvoked(invoked) if invoked.action == Some(CommandAction::ClearContext) => {
                messages.clear();
                open_calls.clear();
            }
            ChatEvent::MessageEnd(end) if end.interrupted => {}
            ChatEvent::MessageEnd(end) => {
                close(&mut messages, &mut open_calls);
                open_calls = end.tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())).collect();
                messages.push(Message::Assistant {
                    text: end.text.clone(),
                    tool_calls: end.tool_calls.clone(),
                });
            }
            ChatEvent::ToolEnd(end) => {
                let content = match &end.error {
                    Some(error) => format!("error: {error}"),
                    None => end.result.as_ref().map(Value::to_string).unwrap_or_default(),
                };
                result(&mut messages, &mut open_calls, &end.tool_call_id, content);
            }
            ChatEvent::QuestionAnswered(answer) => {
                let text = answer_text(&Answer::Question(answer.answer.clone()));
                result(&mut messages, &mut open_calls, &answer.question_id, text);
            }
            ChatEvent::PlanSubmitted(answer) => {
                let decision = Answer::Plan(answer.action == PlanAction::Approve, answer.feedback.clone());
                result(&mut messages, &mut open_calls, &answer.plan_id, answer_text(&decision));
            }
            ChatEvent::ToolOutputSubmitted(out) => {
                let output = match &out.error {
                    Some(error) => format!("error: {error}"),
                    None => out.output.as_ref().map(Value::to_string).unwrap_or_default(),
                };
                result(&mut messages, &mut open_calls, &out.tool_call_id, output);
            }
            // A summary stands in for the messages it covers (those still here, after a
            // `/clear` or an earlier summary), wherever the summary's event is.
            ChatEvent::HistoryCompacted(compacted) => {
                let keep: Vec<bool> = seqs.iter().map(|&seq| seq > compacted.through_seq).collect();
                let mut keep_iter = keep.iter();
                messages.retain(|_| *keep_iter.next().unwrap_or(&true));
                let mut keep_iter = keep.iter();
                stamps.retain(|_| *keep_iter.next().unwrap_or(&true));
                let mut keep_iter = keep.iter();
                seqs.retain(|_| *keep_iter.next().unwrap_or(&true));
                open_calls.retain(|(id, _)| messages.iter().any(|m| calls(m, id)));
                messages.insert(
                    0,
                    Message::System {
                        text: summary_text(compacted),
                    },
                );
                stamps.insert(0, event.ts.clone());
                seqs.insert(0, compacted.through_seq);
            }
            ChatEvent::System(note) => messages.push(match &note.upload {
                Some(upload) => Message::File(Attached {
                    file: upload.file.clone(),
                    path: upload.path.clone(),
                    content: None,
                }),
                None => Message::System {
                    text: note.message.clone(),
                },
            }),
            _ => {}
        }
        // What this event added was written when it was (a `/clear` empties both).
        stamps.resize(messages.len(), event.ts.clone());
        seqs.resize(messages.len(), event.seq);
    }
    (messages, stamps, seqs)
}

/// Whether `message` is an assistant's reply that made call `id`.
fn calls(message: &Message, id: &str) -> bool {
    matches!(message, Message::Assistant { tool_calls, .. } if tool_calls.iter().any(|c| c.id == id))
}

/// How a summary reads to an agent.
pub fn summary_text(compacted: &HistoryCompacted) -> String {
    format!(
        "{SUMMARY_OPEN} (events {}–{} of this chat, summarised to fit your context; the chat still \
         holds them):\n{}",
        compacted.from_seq, compacted.through_seq, compacted.summary
    )
}

/// How a summary's text begins, so a summary of a summary can find the one before.
pub const SUMMARY_OPEN: &str = "Summary of the conversation so far";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_messages_context_is_read_back_and_not_echoed_as_its_words() {
        let message = UserMessage {
            content: "When do the tomatoes need water?".to_owned(),
            author: "p".to_owned(),
            files: Vec::new(),
            metadata: None,
            client_context: Some(json!({ "relevant_k_ids": ["k_0123456789abcdef"], "summary": "in July" })),
            answers: None,
            client_tools: Vec::new(),
            revision: None,
        };
        let text = user_text(&message, true);
        assert_eq!(as_written(&text), "When do the tomatoes need water?");
        assert_eq!(client_context_of(&text).unwrap()["summary"], "in July");
        let without = user_text(&message, false);
        assert_eq!(
            without, "When do the tomatoes need water?",
            "only a chat with the capability gets it"
        );
        assert_eq!(client_context_of(&without), None);
    }

    fn event(seq: u64, kind_type: &str, turn: Option<&str>, payload: Value) -> Event {
        let event: ChatEvent = serde_json::from_value(json!({ "type": kind_type, "payload": payload })).unwrap();
        Event {
            v: 1,
            seq,
            ts: String::new(),
            session_id: "ses_1".to_owned(),
            kind: event.kind(),
            event,
            client_message_id: None,
            turn_id: turn.map(str::to_owned),
        }
    }

    fn start() -> Value {
        json!({ "runtime": "scripted", "agent_id": null, "agent_name": "Spool", "trigger_seq": 1 })
    }

    #[test]
    fn a_turn_waiting_on_an_answer_replays_to_its_unresolved_call() {
        // GIVEN a turn that asked a question, and its answer
        let t = Some("t1");
        let call = json!([{ "id": "c1", "name": "ask_user", "arguments": { "question": "Color?" } }]);
        let events = [
            event(
                1,
                "user_message_submitted",
                t,
                json!({ "content": "hi", "author": "p" }),
            ),
            event(2, "agent_start", t, start()),
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
            event(
                1,
                "user_message_submitted",
                t,
                json!({ "content": "hi", "author": "p" }),
            ),
            event(2, "agent_start", t, start()),
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
                json!({ "content": "hi", "author": "p", "client_context": "on page 3" }),
            ),
            event(
                2,
                "message_end",
                t,
                json!({ "message_id": "m1", "text": "ok", "tool_calls": calls }),
            ),
            event(
                3,
                "user_message_submitted",
                Some("t2"),
                json!({ "content": "next", "author": "p" }),
            ),
        ];
        let messages = conversation(&events, true);
        assert!(matches!(&messages[0], Message::User { text } if text.contains("on page 3")));
        assert!(matches!(&messages[2], Message::Tool { call_id, .. } if call_id == "c1"));
        assert!(matches!(&conversation(&events, false)[0], Message::User { text } if text == "hi"));
    }

    #[test]
    fn clear_starts_the_agent_afresh_and_keeps_the_chat() {
        let events = [
            event(
                1,
                "user_message_submitted",
                Some("t1"),
                json!({ "content": "old", "author": "p" }),
            ),
            event(
                2,
                "message_end",
                Some("t1"),
                json!({ "message_id": "m1", "text": "old answer" }),
            ),
            event(
                3,
                "slash_command_invoked",
                None,
                json!({ "name": "clear", "invoked_as": "/clear", "arguments": "", "source": "builtin", "kind": "action", "action": "clear_context", "author": "p" }),
            ),
            event(
                4,
                "user_message_submitted",
                Some("t2"),
                json!({ "content": "new", "author": "p" }),
            ),
        ];
        let messages = conversation(&events, false);
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(matches!(&messages[0], Message::User { text } if text == "new"));
        assert_eq!(
            conversation(&events[..2], false).len(),
            2,
            "before the clear, all of it"
        );
    }
}
