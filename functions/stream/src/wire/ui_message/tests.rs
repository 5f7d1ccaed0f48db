//! Tests of the UI message stream: the chunks each turn's events become.

use super::*;
use spool_chat::event::{
    AgentEnd, AgentStart, AskQuestion, EventKind, MessageEnd, MessageStart, MessageUpdate, QuestionAnswered, Role,
    ToolApprovalRequired, ToolCall, ToolEnd, UserMessage,
};

fn event(seq: u64, turn: &str, event: ChatEvent) -> Event {
    Event {
        v: 1,
        seq,
        ts: String::new(),
        session_id: "s".to_owned(),
        kind: EventKind::Harness,
        event,
        client_message_id: None,
        turn_id: Some(turn.to_owned()),
    }
}

fn types(chunks: &[UiChunk]) -> Vec<String> {
    chunks
        .iter()
        .map(|c| serde_json::to_value(c).unwrap()["type"].as_str().unwrap().to_owned())
        .collect()
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: json!({}),
    }
}

#[test]
fn an_answer_streams_as_one_step_and_finishes() {
    let mut s = TurnStream::new("t1");
    let mut out = Vec::new();
    let user = ChatEvent::UserMessageSubmitted(UserMessage {
        content: "hi".into(),
        ..Default::default()
    });
    let start = ChatEvent::AgentStart(AgentStart {
        runtime: "scripted".into(),
        agent_id: None,
        agent_name: "Spool".into(),
        trigger_seq: 1,
    });
    let events = [
        event(1, "t1", user),
        event(2, "t1", start),
        event(
            3,
            "t1",
            ChatEvent::MessageStart(MessageStart {
                message_id: "m".into(),
                role: Role::Assistant,
            }),
        ),
        event(
            4,
            "t1",
            ChatEvent::MessageUpdate(MessageUpdate {
                message_id: "m".into(),
                delta: "Hel".into(),
            }),
        ),
        event(
            5,
            "other",
            ChatEvent::MessageUpdate(MessageUpdate {
                message_id: "x".into(),
                delta: "no".into(),
            }),
        ),
        event(
            6,
            "t1",
            ChatEvent::MessageUpdate(MessageUpdate {
                message_id: "m".into(),
                delta: "lo".into(),
            }),
        ),
        event(
            7,
            "t1",
            ChatEvent::MessageEnd(MessageEnd {
                message_id: "m".into(),
                text: "Hello".into(),
                ..Default::default()
            }),
        ),
        event(
            8,
            "t1",
            ChatEvent::AgentEnd(AgentEnd {
                reason: EndReason::Complete,
                error: None,
            }),
        ),
    ];
    for e in &events {
        s.push(e, &mut out);
    }
    assert_eq!(
        types(&out),
        [
            "start-step",
            "text-start",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    assert_eq!(s.progress(), &Progress::Ended);
    let json = serde_json::to_value(&out[2]).unwrap();
    assert_eq!(json, json!({ "type": "text-delta", "id": "m", "delta": "Hel" }));
    assert_eq!(
        serde_json::to_value(s.start()).unwrap(),
        json!({ "type": "start", "messageId": "t1", "messageMetadata": { "spool": { "turn_id": "t1" } } })
    );
}

#[test]
fn an_approval_waits_and_its_answer_continues() {
    let mut s = TurnStream::new("t");
    let mut out = Vec::new();
    let end = MessageEnd {
        message_id: "m".into(),
        text: "Shall I?".into(),
        tool_calls: vec![call("c1", "create_agent")],
        ..Default::default()
    };
    s.push(&event(2, "t", ChatEvent::MessageEnd(end)), &mut out);
    let asked = ToolApprovalRequired {
        tool_call_id: "c1".into(),
        tool: "create_agent".into(),
        arguments: json!({}),
        server: None,
    };
    s.push(&event(3, "t", ChatEvent::ToolApprovalRequired(asked)), &mut out);
    assert_eq!(s.progress(), &Progress::Waiting);
    s.pause(&mut out);
    assert_eq!(
        types(&out),
        [
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "tool-input-available",
            "finish-step",
            "tool-approval-request",
            "finish"
        ]
    );
    assert_eq!(
        serde_json::to_value(&out[4]).unwrap(),
        json!({ "type": "tool-input-available", "toolCallId": "c1", "toolName": "create_agent", "input": {},
                "providerExecuted": true, "dynamic": true })
    );
    let mut more = Vec::new();
    let ran = ToolEnd {
        tool_call_id: "c1".into(),
        tool: "create_agent".into(),
        result: Some(json!({ "id": "a1" })),
        error: None,
        declined: false,
        server: None,
    };
    s.push(&event(5, "t", ChatEvent::ToolEnd(ran)), &mut more);
    assert_eq!(s.progress(), &Progress::Running);
    assert_eq!(types(&more), ["tool-output-available"]);
}

#[test]
fn a_question_is_a_tool_the_front_end_answers() {
    let mut s = TurnStream::new("t");
    let mut out = Vec::new();
    let end = MessageEnd {
        message_id: "m".into(),
        tool_calls: vec![call("q1", ASK_USER)],
        ..Default::default()
    };
    s.push(&event(2, "t", ChatEvent::MessageEnd(end)), &mut out);
    let asked = AskQuestion {
        question_id: "q1".into(),
        question: "Name?".into(),
    };
    s.push(&event(3, "t", ChatEvent::AskQuestion(asked)), &mut out);
    assert_eq!(s.progress(), &Progress::Waiting);
    assert_eq!(types(&out), ["start-step", "tool-input-available", "finish-step"]);
    assert!(serde_json::to_value(&out[1]).unwrap().get("providerExecuted").is_none());
    let answered = QuestionAnswered {
        question_id: "q1".into(),
        answer: "Ada".into(),
    };
    let mut more = Vec::new();
    s.push(&event(4, "t", ChatEvent::QuestionAnswered(answered)), &mut more);
    assert_eq!(
        serde_json::to_value(&more[0]).unwrap(),
        json!({ "type": "tool-output-available", "toolCallId": "q1", "output": { "answer": "Ada" },
                "providerExecuted": true, "dynamic": true })
    );
}

#[test]
fn a_tool_the_front_end_declared_is_its_to_run() {
    use spool_chat::event::{ToolOutputSubmitted, ToolStart};
    let mut s = TurnStream::new("t");
    let mut out = Vec::new();
    let user = UserMessage {
        content: "where?".into(),
        client_tools: vec![spool_chat::event::ClientTool {
            name: "get_location".into(),
            description: None,
            input_schema: None,
            server: None,
        }],
        ..Default::default()
    };
    s.push(&event(1, "t", ChatEvent::UserMessageSubmitted(user)), &mut out);
    let end = MessageEnd {
        message_id: "m".into(),
        tool_calls: vec![call("c1", "get_location"), call("c2", "create_agent")],
        ..Default::default()
    };
    s.push(&event(2, "t", ChatEvent::MessageEnd(end)), &mut out);
    let start = ToolStart {
        tool_call_id: "c1".into(),
        tool: "get_location".into(),
        arguments: json!({}),
        client: true,
        server: None,
    };
    s.push(&event(3, "t", ChatEvent::ToolStart(start)), &mut out);
    assert_eq!(s.progress(), &Progress::Waiting);
    let inputs: Vec<Value> = out.iter().map(|c| serde_json::to_value(c).unwrap()).collect();
    assert!(
        inputs[1].get("providerExecuted").is_none(),
        "the front end runs its own tool"
    );
    assert_eq!(inputs[2]["providerExecuted"], true, "Spool runs its own");
    let mut more = Vec::new();
    let output = ToolOutputSubmitted {
        tool: "get_location".into(),
        tool_call_id: "c1".into(),
        output: Some(json!({ "city": "Paris" })),
        error: None,
    };
    s.push(&event(4, "t", ChatEvent::ToolOutputSubmitted(output)), &mut more);
    assert_eq!(
        serde_json::to_value(&more[0]).unwrap(),
        json!({ "type": "tool-output-available", "toolCallId": "c1", "output": { "city": "Paris" },
                "providerExecuted": true, "dynamic": true })
    );
    assert!(asks_about(
        &ChatEvent::ToolStart(ToolStart {
            tool_call_id: "c1".into(),
            tool: "get_location".into(),
            arguments: json!({}),
            client: true,
            server: None,
        }),
        "c1"
    ));
}

#[test]
fn a_stream_waits_while_a_client_call_of_the_reply_has_no_output() {
    use spool_chat::event::{ToolOutputSubmitted, ToolStart};
    let mut s = TurnStream::new("t").with_client_tools(vec!["a".into(), "b".into()]);
    let start = |id: &str| {
        ChatEvent::ToolStart(ToolStart {
            tool_call_id: id.into(),
            tool: "a".into(),
            arguments: json!({}),
            client: true,
            server: None,
        })
    };
    let output = |id: &str| {
        ChatEvent::ToolOutputSubmitted(ToolOutputSubmitted {
            tool: "a".into(),
            tool_call_id: id.into(),
            output: Some(Value::Null),
            error: None,
        })
    };
    let mut out = Vec::new();
    s.push(&event(3, "t", start("c1")), &mut out);
    s.push(&event(4, "t", start("c2")), &mut out);
    assert_eq!(s.progress(), &Progress::Waiting);
    s.push(&event(5, "t", output("c2")), &mut out);
    assert_eq!(s.progress(), &Progress::Waiting, "c1 still waits");
    s.push(&event(6, "t", output("c1")), &mut out);
    assert_eq!(s.progress(), &Progress::Running, "the turn goes on");
    assert_eq!(types(&out), ["tool-output-available", "tool-output-available"]);
}

#[test]
fn failures_and_aborts_close_what_is_open() {
    let mut s = TurnStream::new("t");
    let mut out = Vec::new();
    s.push(
        &event(
            2,
            "t",
            ChatEvent::MessageUpdate(MessageUpdate {
                message_id: "m".into(),
                delta: "a".into(),
            }),
        ),
        &mut out,
    );
    s.push(
        &event(
            3,
            "t",
            ChatEvent::AgentEnd(AgentEnd {
                reason: EndReason::Error,
                error: Some("boom".into()),
            }),
        ),
        &mut out,
    );
    assert_eq!(
        types(&out),
        [
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "error",
            "finish"
        ]
    );
    // Nothing after the end.
    s.push(
        &event(
            4,
            "t",
            ChatEvent::MessageUpdate(MessageUpdate {
                message_id: "m".into(),
                delta: "b".into(),
            }),
        ),
        &mut out,
    );
    assert_eq!(out.len(), 7);
    // An abort while a call waited settles the call, so no front end answers it again.
    let mut a = TurnStream::new("t");
    let mut out = Vec::new();
    let end = MessageEnd {
        message_id: "m".into(),
        tool_calls: vec![call("c1", "create_agent")],
        ..Default::default()
    };
    a.push(&event(2, "t", ChatEvent::MessageEnd(end)), &mut out);
    a.push(
        &event(
            2,
            "t",
            ChatEvent::AgentEnd(AgentEnd {
                reason: EndReason::Aborted,
                error: None,
            }),
        ),
        &mut out,
    );
    assert_eq!(
        types(&out),
        [
            "start-step",
            "tool-input-available",
            "finish-step",
            "tool-output-error",
            "abort"
        ]
    );
}
