//! # The AI SDK's chat routes
//!
//! `useChat` with the `ai` package's `DefaultChatTransport({ api: BASE + '/v1/ai-sdk/chat' })`
//! talks to a Spool chat with no adapter:
//!
//! - `POST /v1/ai-sdk/chat` takes the transport's body (`{id, messages, trigger, messageId}`,
//!   `id` being the Spool session). A last message from the user is posted to the chat the way
//!   `POST /v1/sessions/{id}/messages` posts one (its UI message id makes the `client_message_id`,
//!   so the transport's retry is the same message); a last assistant message carries a
//!   person's answer (an approval, a plan's decision, a question's answer as the question
//!   tool's output), which is posted to the answer route. A person's message resent under its
//!   id with new text (`sendMessage({text, messageId})`) is a new version of it, and
//!   `trigger: "regenerate-message"` answers the last person's message again (`regenerate()`):
//!   both start a branch of the chat ([`spool_chat::branch`]). The response is the turn as a UI
//!   message stream ([`crate::wire::ui_message`]).
//! - `GET /v1/ai-sdk/chat/{id}/stream` resumes: the chat's latest turn, replayed from its start
//!   while it runs or waits on a person, or `204` when it has ended.
//!
//! Both read the chat's durable events, so a reload or a dropped connection loses and repeats
//! nothing. The writes go through the chat API's own routes ([`ChatWrites`]): in-process under
//! `spool serve`, over HTTP on AWS, where this function holds no write rights.

use std::sync::Arc;

use axum::{
    extract::{Path, Request, State},
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::Value;
use spool_chat::current_turn::{CurrentTurn, current_turn, find_back};

use crate::wire::ui_message::{self, FinishReason, Progress, TurnStream, UiChunk};
use crate::{
    StreamApi,
    turn_stream::{self, Translate},
    writes::{self, Ask},
};
use spool_chat::event::{Decision, PlanAction};
use spool_edge::{
    ApiError,
    writes::{Answer, NewMessage},
};

const HEADERS: &[(&str, &str)] = &[ui_message::STREAM_HEADER];

impl Translate for TurnStream {
    type Frame = UiChunk;

    fn open(&mut self, out: &mut Vec<UiChunk>) {
        out.push(self.start());
    }

    fn push(&mut self, event: &spool_chat::session::Event, out: &mut Vec<UiChunk>) {
        TurnStream::push(self, event, out);
    }

    fn reopen(&mut self, _out: &mut Vec<UiChunk>) {}

    fn progress(&self) -> &Progress {
        TurnStream::progress(self)
    }

    fn pause(&mut self, out: &mut Vec<UiChunk>) {
        TurnStream::pause(self, out);
    }

    fn done_line(&self) -> Option<&'static str> {
        Some(ui_message::DONE)
    }
}

/// The transport's request body; the fields a front end adds with `body` are ignored.
#[derive(Debug, Deserialize)]
struct ChatRequest {
    id: String,
    #[serde(default)]
    messages: Vec<UiMessage>,
    #[serde(default)]
    trigger: Option<String>,
    /// Tools the front end runs (the transport's `body: {tools: [{name, description,
    /// inputSchema}]}`): the agent may call them; their outputs come back as the assistant
    /// message's tool parts (`addToolOutput`).
    #[serde(default)]
    tools: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct UiMessage {
    id: String,
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

/// `POST /v1/ai-sdk/chat`.
#[utoipa::path(post, path = "/v1/ai-sdk/chat", tag = "ai-sdk", operation_id = "ai_sdk_chat",
    request_body(content = Value, description = "The AI SDK transport's body: `{id, messages, trigger, messageId}`, `id` being the session"),
    responses((status = 200, description = "The turn as the AI SDK's UI message stream (`x-vercel-ai-ui-message-stream: v1`)", content_type = "text/event-stream"),
        (status = 400, description = "A malformed body, or nothing to post", body = spool_edge::ErrorBody), (status = 401, description = "No valid token", body = spool_edge::ErrorBody),
        (status = 404, description = "No such session in the caller's organization", body = spool_edge::ErrorBody),
        (status = 409, description = "A turn is pending, or the request was answered already", body = spool_edge::ErrorBody),
        (status = 503, description = "The store or the chat API is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn post(State(api): State<Arc<StreamApi>>, request: Request) -> Result<Response, ApiError> {
    let (parts, chat): (_, ChatRequest) =
        turn_stream::read_post(&api, request, "the AI SDK transport's request").await?;
    let path = turn_stream::authorize(&api, &parts, Some(&chat.id)).await?;
    let ask = if chat.trigger.as_deref() == Some("regenerate-message") {
        // The messages end with the person's message whose answer is made again (its latest
        // version); without one the chat's last message's is.
        let last_user = chat.messages.iter().rev().find(|m| m.role == "user");
        let cmid = last_user.map(|m| turn_stream::client_message_id("ai-sdk", &m.id));
        let found = match &cmid {
            Some(cmid) => writes::version_of(&api, &path, cmid).await?.map(|e| e.seq),
            None => None,
        };
        writes::regenerate(found.zip(cmid.as_deref()))
    } else {
        // An edit resends a person's message under its id with new text (`writes::post` makes
        // it a new version of that message).
        ask(&chat)?
    };
    let answering = matches!(ask, Ask::Answer { .. });
    match writes::post(&api, &parts, &chat.id, &path, ask).await? {
        (Some(turn), mut after) => {
            // A stream from an answer starts after the turn's message: it is told what the
            // message declared for the front end to run.
            let mut stream = TurnStream::new(turn.clone());
            if answering {
                let declared = find_back(api.log.as_ref(), &path, |e| {
                    e.turn_id.as_deref() == Some(turn.as_str())
                        && matches!(e.event, spool_chat::event::ChatEvent::UserMessageSubmitted(_))
                })
                .await?;
                if let Some(spool_chat::session::Event {
                    event: spool_chat::event::ChatEvent::UserMessageSubmitted(message),
                    ..
                }) = declared
                {
                    stream = stream.with_client_tools(message.client_tools.iter().map(|t| t.name.clone()).collect());
                }
                // An output of one of a reply's client calls: the stream starts right after the
                // reply, at its first client call (so it knows which still wait, and ends while
                // one does).
                let asked_client = find_back(api.log.as_ref(), &path, |e| e.seq == after)
                    .await?
                    .is_some_and(|e| matches!(&e.event, spool_chat::event::ChatEvent::ToolStart(t) if t.client));
                if asked_client
                    && let Some(reply) = find_back(api.log.as_ref(), &path, |e| {
                        e.seq < after
                            && e.turn_id.as_deref() == Some(turn.as_str())
                            && matches!(&e.event, spool_chat::event::ChatEvent::MessageEnd(_))
                    })
                    .await?
                {
                    after = reply.seq;
                }
            }
            Ok(turn_stream::respond(api, path, stream, after, after, HEADERS))
        }
        // The message answered an agent's question (the global chat): no turn of Spool's.
        (None, _) => {
            let frames = [
                TurnStream::new(String::new()).start(),
                UiChunk::Finish {
                    finish_reason: FinishReason::Stop,
                },
            ];
            Ok(turn_stream::respond_frames(&frames, Some(ui_message::DONE), HEADERS))
        }
    }
}

/// `GET /v1/ai-sdk/chat/{id}/stream`.
#[utoipa::path(get, path = "/v1/ai-sdk/chat/{id}/stream", tag = "ai-sdk", operation_id = "ai_sdk_resume",
    params(("id" = String, Path, description = "The session")),
    responses((status = 200, description = "The chat's running or waiting turn from its start, as a UI message stream", content_type = "text/event-stream"),
        (status = 204, description = "No turn runs or waits"),
        (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 404, description = "No such session in the caller's organization", body = spool_edge::ErrorBody),
        (status = 503, description = "The store is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn resume(
    State(api): State<Arc<StreamApi>>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let path = turn_stream::session_for_read(&api, &headers, &uri, &id).await?;
    match current_turn(api.log.as_ref(), &path).await? {
        Some(CurrentTurn { turn_id, after }) => Ok(turn_stream::respond(
            api,
            path,
            TurnStream::new(turn_id),
            after,
            after,
            HEADERS,
        )),
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// What the transport's request asks.
fn ask(chat: &ChatRequest) -> Result<Ask, ApiError> {
    let last = chat
        .messages
        .last()
        .ok_or_else(|| ApiError::bad_request("`messages` is empty: there is nothing to send"))?;
    match last.role.as_str() {
        "user" => {
            let content: String = last
                .parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n");
            if content.trim().is_empty() {
                return Err(ApiError::bad_request(
                    "the last message has no text part; send text (files go through /v1/sessions/{id}/attachments)",
                ));
            }
            Ok(Ask::Message(NewMessage {
                content,
                client_message_id: turn_stream::client_message_id("ai-sdk", &last.id),
                client_tools: match &chat.tools {
                    Some(Value::Array(tools)) => tools.clone(),
                    _ => Vec::new(),
                },
            }))
        }
        "assistant" => answer_in(&last.parts).ok_or_else(|| {
            ApiError::bad_request(
                "the last assistant message answers nothing: respond to its approval request or its question first",
            )
        }),
        other => Err(ApiError::bad_request(format!(
            "the last message's role is `{other}`; send a user message, or an assistant message with an answer"
        ))),
    }
}

/// The answer a person gave in the last step of an assistant message, if any.
fn answer_in(parts: &[Value]) -> Option<Ask> {
    let last_step = parts
        .iter()
        .rposition(|p| p.get("type").and_then(Value::as_str) == Some("step-start"))
        .map_or(0, |i| i + 1);
    parts[last_step..].iter().rev().find_map(|part| {
        let kind = part.get("type").and_then(Value::as_str)?;
        let tool = if kind == "dynamic-tool" {
            part.get("toolName").and_then(Value::as_str)?
        } else {
            kind.strip_prefix("tool-")?
        };
        let call_id = part.get("toolCallId").and_then(Value::as_str)?.to_owned();
        match part.get("state").and_then(Value::as_str)? {
            "approval-responded" => {
                let approval = part.get("approval")?;
                let approved = approval.get("approved").and_then(Value::as_bool)?;
                let reason = approval.get("reason").and_then(Value::as_str);
                let answer = if ui_message::is_plan(tool) {
                    Answer::Plan {
                        plan_id: call_id,
                        action: if approved {
                            PlanAction::Approve
                        } else {
                            PlanAction::Reject
                        },
                        feedback: reason.map(str::to_owned),
                    }
                } else {
                    Answer::Approval {
                        tool_call_id: call_id,
                        decision: if approved { Decision::Approve } else { Decision::Decline },
                    }
                };
                Some(Ask::Answer { answer, asked: None })
            }
            "output-available"
                if ui_message::is_question(tool) && part.get("providerExecuted") != Some(&Value::Bool(true)) =>
            {
                let output = part.get("output")?;
                let answer = match output {
                    Value::String(s) => s.clone(),
                    Value::Object(o) if o.get("answer").is_some_and(Value::is_string) => {
                        o["answer"].as_str().unwrap_or_default().to_owned()
                    }
                    other => other.to_string(),
                };
                Some(Ask::Answer {
                    answer: Answer::Question {
                        question_id: call_id,
                        answer,
                    },
                    asked: None,
                })
            }
            // The output of a tool the front end ran (`addToolOutput`).
            state @ ("output-available" | "output-error")
                if !ui_message::is_question(tool) && part.get("providerExecuted") != Some(&Value::Bool(true)) =>
            {
                let output = if state == "output-error" {
                    let error = part
                        .get("errorText")
                        .and_then(Value::as_str)
                        .unwrap_or("the tool failed");
                    Err(error.to_owned())
                } else {
                    Ok(part.get("output").cloned().unwrap_or(Value::Null))
                };
                Some(Ask::Answer {
                    answer: Answer::ToolOutput {
                        tool: tool.to_owned(),
                        tool_call_id: call_id,
                        output,
                    },
                    asked: None,
                })
            }
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(messages: Value) -> ChatRequest {
        serde_json::from_value(json!({ "id": "s", "messages": messages, "trigger": "submit-message" })).unwrap()
    }

    #[test]
    fn a_user_message_is_posted_with_its_id() {
        let chat = request(json!([{ "id": "u1", "role": "user", "parts": [{ "type": "text", "text": "hi" }] }]));
        assert_eq!(
            ask(&chat).unwrap(),
            Ask::Message(NewMessage {
                content: "hi".into(),
                client_message_id: turn_stream::client_message_id("ai-sdk", "u1"),
                client_tools: Vec::new(),
            })
        );
        let empty = request(json!([{ "id": "u1", "role": "user", "parts": [] }]));
        assert!(matches!(ask(&empty), Err(ApiError::BadRequest(_))));
        assert!(matches!(ask(&request(json!([]))), Err(ApiError::BadRequest(_))));
    }

    #[test]
    fn answers_come_from_the_last_step() {
        let chat = request(json!([{ "id": "a", "role": "assistant", "parts": [
            { "type": "step-start" },
            { "type": "dynamic-tool", "toolName": "create_agent", "toolCallId": "old", "state": "approval-responded",
              "approval": { "id": "old", "approved": false } },
            { "type": "step-start" },
            { "type": "dynamic-tool", "toolName": "create_agent", "toolCallId": "c1", "state": "approval-responded",
              "approval": { "id": "c1", "approved": true } },
        ] }]));
        assert_eq!(
            ask(&chat).unwrap(),
            Ask::Answer {
                asked: None,
                answer: Answer::Approval {
                    tool_call_id: "c1".into(),
                    decision: Decision::Approve
                }
            }
        );
        let question = request(json!([{ "id": "a", "role": "assistant", "parts": [
            { "type": "dynamic-tool", "toolName": "ask_user", "toolCallId": "q", "state": "output-available", "output": "Ada" },
        ] }]));
        assert_eq!(
            ask(&question).unwrap(),
            Ask::Answer {
                asked: None,
                answer: Answer::Question {
                    question_id: "q".into(),
                    answer: "Ada".into()
                }
            }
        );
        let plan = request(json!([{ "id": "a", "role": "assistant", "parts": [
            { "type": "tool-propose_plan", "toolCallId": "p", "state": "approval-responded",
              "approval": { "id": "p", "approved": false, "reason": "shorter" } },
        ] }]));
        assert_eq!(
            ask(&plan).unwrap(),
            Ask::Answer {
                asked: None,
                answer: Answer::Plan {
                    plan_id: "p".into(),
                    action: PlanAction::Reject,
                    feedback: Some("shorter".into())
                }
            }
        );
        let nothing = request(json!([{ "id": "a", "role": "assistant", "parts": [{ "type": "text", "text": "hi" }] }]));
        assert!(matches!(ask(&nothing), Err(ApiError::BadRequest(_))));
    }
}
