//! How `spool chat` shows a chat's events in a terminal: an answer as it streams, tools as
//! one line each, and what an agent asks of the person.

use spool_chat::{
    event::{ChatEvent, EndReason, Level},
    session::Event,
};

/// What the person is asked to answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    /// A question (`question_id`).
    Question { id: String },
    /// A tool call's approval.
    Approval { call_id: String },
    /// A plan's approval (or rejection with feedback).
    Plan { id: String },
}

impl Request {
    /// The prompt the answer is typed at.
    pub(crate) fn prompt(&self) -> &'static str {
        match self {
            Self::Question { .. } => "answer> ",
            Self::Approval { .. } => "approve? [y/n]> ",
            Self::Plan { .. } => "approve the plan? [y, or what to change]> ",
        }
    }
}

/// The text `event` shows (empty for events a person need not see).
pub(crate) fn text(event: &Event) -> String {
    match &event.event {
        ChatEvent::UserMessageSubmitted(m) => format!("{}: {}\n", m.author, m.content),
        ChatEvent::AgentStart(start) => format!("{}: ", start.agent_name),
        ChatEvent::MessageUpdate(update) => update.delta.clone(),
        ChatEvent::MessageEnd(end) if end.aborted => " [stopped]\n".to_owned(),
        ChatEvent::MessageEnd(end) if end.interrupted => " [interrupted]\n".to_owned(),
        ChatEvent::MessageEnd(_) => "\n".to_owned(),
        ChatEvent::ToolStart(tool) => format!("  · {} {}\n", tool.tool, tool.arguments),
        ChatEvent::ToolEnd(end) if end.declined => format!("  · {} declined\n", end.tool),
        ChatEvent::ToolEnd(end) => match &end.error {
            Some(error) => format!("  · {} failed: {error}\n", end.tool),
            None => format!("  · {} done\n", end.tool),
        },
        ChatEvent::AskQuestion(q) => format!("? {}\n", q.question),
        ChatEvent::ToolApprovalRequired(a) => format!("? The agent wants to run `{}` with {}\n", a.tool, a.arguments),
        ChatEvent::PlanApprovalRequired(p) => format!("? The agent proposes a plan:\n{}\n", p.plan),
        ChatEvent::AgentEnd(end) => match end.reason {
            EndReason::Complete => String::new(),
            EndReason::Aborted => "(the turn was aborted)\n".to_owned(),
            EndReason::Error => format!("(the turn failed: {})\n", end.error.as_deref().unwrap_or("see above")),
        },
        ChatEvent::System(note) => match note.level {
            Level::Error => format!("! {}\n", note.message),
            Level::Info => format!("  ({})\n", note.message),
        },
        ChatEvent::SlashCommandInvoked(c) => format!("{}: {}\n", c.author, c.invoked_as),
        ChatEvent::SlashCommandFailed(f) => format!("! {}: {}\n", f.invoked_as, f.reason),
        ChatEvent::AgentMessage(m) => format!("{}: {}\n", m.author, m.text),
        ChatEvent::HistoryCompacted(c) => format!(
            "  (history compacted: events {}–{} summarised for the agent; the chat keeps them)\n",
            c.from_seq, c.through_seq
        ),
        _ => String::new(),
    }
}

/// Whether `event` answers `asked` (someone answered it, here or elsewhere).
pub(crate) fn answers(event: &Event, asked: &Request) -> bool {
    match (&event.event, asked) {
        (ChatEvent::QuestionAnswered(a), Request::Question { id }) => a.question_id == *id,
        (ChatEvent::ApprovalSubmitted(a), Request::Approval { call_id }) => a.tool_call_id == *call_id,
        (ChatEvent::PlanSubmitted(p), Request::Plan { id }) => p.plan_id == *id,
        _ => false,
    }
}

/// What `event` asks the person, if anything.
pub(crate) fn request(event: &Event) -> Option<Request> {
    match &event.event {
        ChatEvent::AskQuestion(q) => Some(Request::Question {
            id: q.question_id.clone(),
        }),
        ChatEvent::ToolApprovalRequired(a) => Some(Request::Approval {
            call_id: a.tool_call_id.clone(),
        }),
        ChatEvent::PlanApprovalRequired(p) => Some(Request::Plan { id: p.plan_id.clone() }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_chat::event::{AgentEnd, AskQuestion, EventKind, MessageUpdate};

    fn event(event: ChatEvent) -> Event {
        Event {
            v: 1,
            seq: 1,
            ts: String::new(),
            session_id: "s".into(),
            kind: EventKind::Harness,
            event,
            client_message_id: None,
            turn_id: Some("t".into()),
        }
    }

    #[test]
    fn answers_stream_and_questions_ask() {
        let delta = event(ChatEvent::MessageUpdate(MessageUpdate {
            message_id: "m".into(),
            delta: "Hel".into(),
        }));
        assert_eq!(text(&delta), "Hel");
        let asked = event(ChatEvent::AskQuestion(AskQuestion {
            question_id: "q".into(),
            question: "Name?".into(),
        }));
        assert_eq!(text(&asked), "? Name?\n");
        assert_eq!(request(&asked), Some(Request::Question { id: "q".into() }));
        let failed = event(ChatEvent::AgentEnd(AgentEnd {
            reason: EndReason::Error,
            error: Some("boom".into()),
        }));
        assert_eq!(text(&failed), "(the turn failed: boom)\n");
        assert_eq!(request(&failed), None);
    }
}
