use serde_json::{Value, json};
use spool_commands::{CommandAction, CommandKind, CommandSource};

use super::*;
use crate::global::AgentMeta;

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
                server: None,
            }),
            json!({ "type": "tool_start", "payload": { "tool_call_id": "c1", "tool": "rename_chat", "arguments": { "title": "T" } } }),
        ),
        (
            ChatEvent::ToolStart(ToolStart {
                tool_call_id: "c2".into(),
                tool: "get_location".into(),
                arguments: json!({}),
                client: true,
                server: None,
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
                    server: None,
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
                server: None,
            }),
            json!({ "type": "tool_end", "payload": { "tool_call_id": "c1", "tool": "rename_chat",
                "error": "declined by the person; not run", "declined": true } }),
        ),
        (
            ChatEvent::ToolApprovalRequired(ToolApprovalRequired {
                tool_call_id: "c1".into(),
                tool: "create_agent".into(),
                arguments: json!({}),
                server: None,
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
                cached_input_tokens: 2,
                output_tokens: 5,
                model: Some("gpt-4o-mini".into()),
            }),
            json!({ "type": "usage", "payload": {
                "input_tokens": 3, "cached_input_tokens": 2, "output_tokens": 5, "model": "gpt-4o-mini"
            } }),
        ),
        (
            ChatEvent::AgentEnd(AgentEnd {
                reason: EndReason::Error,
                error: Some("no input".into()),
            }),
            json!({ "type": "agent_end", "payload": { "reason": "error", "error": "no input" } }),
        ),
        (
            ChatEvent::HistoryCompacted(HistoryCompacted {
                from_seq: 1,
                through_seq: 40,
                summary: "They planned the launch.".into(),
                by: "extract".into(),
                tokens_before: 900,
                tokens_after: 12,
                reason: CompactReason::Budget,
            }),
            json!({ "type": "history_compacted", "payload": { "from_seq": 1, "through_seq": 40,
                "summary": "They planned the launch.", "by": "extract", "tokens_before": 900,
                "tokens_after": 12, "reason": "budget" } }),
        ),
        (
            ChatEvent::BranchSelected(BranchSelected {
                seq: 7,
                author: "u1".into(),
                from_seq: 30,
                hidden: vec![[12, 20]],
            }),
            json!({ "type": "branch_selected", "payload": { "seq": 7, "author": "u1", "from_seq": 30,
                "hidden": [[12, 20]] } }),
        ),
        (
            ChatEvent::UserMessageSubmitted(UserMessage {
                content: "hi again".into(),
                author: "u1".into(),
                revision: Some(Revision {
                    of: 3,
                    kind: RevisionKind::Edit,
                    from_seq: 2,
                    hidden: Vec::new(),
                }),
                ..UserMessage::default()
            }),
            json!({ "type": "user_message_submitted", "payload": { "content": "hi again", "author": "u1",
                "revision": { "of": 3, "kind": "edit", "from_seq": 2 } } }),
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

#[test]
fn usage_written_before_cached_tokens_and_models_still_parses() {
    let old: ChatEvent =
        serde_json::from_value(json!({ "type": "usage", "payload": { "input_tokens": 3, "output_tokens": 5 } }))
            .unwrap();
    assert_eq!(
        old,
        ChatEvent::Usage(Usage {
            input_tokens: 3,
            cached_input_tokens: 0,
            output_tokens: 5,
            model: None,
        })
    );
}
