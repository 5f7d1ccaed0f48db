//! # AG-UI's run routes
//!
//! An AG-UI client (`@ag-ui/client`'s `HttpAgent({ url: BASE + '/v1/ag-ui/chat' })`) runs a
//! Spool chat as an agent:
//!
//! - `POST /v1/ag-ui/chat` takes a `RunAgentInput` (`threadId` being the Spool session). Its
//!   `resume` entries answer the interrupts the last run finished with (an approval, a plan's
//!   decision, a question's answer: see [`answer`]); otherwise its last user message is posted
//!   to the chat (a digest of its id is the `client_message_id`, so a retry posts nothing
//!   twice; sent again under its id with other text, it is a new version of the message, an
//!   edit: [`spool_chat::branch`]). The response is the turn as AG-UI events
//!   ([`crate::wire::ag_ui`]).
//! - `GET /v1/ag-ui/chat/{id}/stream` resumes the chat's running or waiting turn: from its
//!   start, or after `?after=<seq>` (every event's `metadata.spool.seq`) for a client that kept
//!   its state; `204` when no turn runs or waits.

use std::sync::Arc;

use axum::{
    extract::{Path, Request, State},
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};
use spool_chat::{
    current_turn::{CurrentTurn, current_turn},
    event::ChatEvent,
};

use crate::wire::{
    ag_ui::{AgUiEvent, RunStream},
    ui_message::Progress,
};
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

impl Translate for RunStream {
    type Frame = AgUiEvent;

    fn open(&mut self, out: &mut Vec<AgUiEvent>) {
        out.push(self.start());
    }

    fn push(&mut self, event: &spool_chat::session::Event, out: &mut Vec<AgUiEvent>) {
        RunStream::push(self, event, out);
    }

    fn reopen(&mut self, out: &mut Vec<AgUiEvent>) {
        RunStream::reopen(self, out);
    }

    fn progress(&self) -> &Progress {
        RunStream::progress(self)
    }

    fn pause(&mut self, out: &mut Vec<AgUiEvent>) {
        RunStream::pause(self, out);
    }

    fn cut(&mut self, out: &mut Vec<AgUiEvent>) {
        RunStream::cut(self, out);
    }
}

/// A `RunAgentInput`; the fields Spool does not use (`tools`, `context`, `state`,
/// `forwardedProps`) are ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunInput {
    thread_id: String,
    run_id: String,
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    resume: Vec<Resume>,
}

#[derive(Debug, Deserialize)]
struct Message {
    id: String,
    role: String,
    #[serde(default)]
    content: Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Resume {
    interrupt_id: String,
    status: String,
    #[serde(default)]
    payload: Value,
}

/// `POST /v1/ag-ui/chat`.
#[utoipa::path(post, path = "/v1/ag-ui/chat", tag = "ag-ui", operation_id = "ag_ui_run",
    request_body(content = Value, description = "An AG-UI `RunAgentInput`: `threadId` is the session; `resume` answers the last run's interrupts, else the last user message is posted"),
    responses((status = 200, description = "The turn as AG-UI events (`RUN_STARTED` … `RUN_FINISHED` or `RUN_ERROR`)", content_type = "text/event-stream"),
        (status = 400, description = "A malformed body, or nothing to post", body = spool_edge::ErrorBody), (status = 401, description = "No valid token", body = spool_edge::ErrorBody),
        (status = 404, description = "No such session in the caller's organization", body = spool_edge::ErrorBody),
        (status = 409, description = "A turn is pending", body = spool_edge::ErrorBody),
        (status = 503, description = "The store or the chat API is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn post(State(api): State<Arc<StreamApi>>, request: Request) -> Result<Response, ApiError> {
    let (parts, input): (_, RunInput) = turn_stream::read_post(&api, request, "an AG-UI RunAgentInput").await?;
    let path = turn_stream::authorize(&api, &parts, Some(&input.thread_id)).await?;
    let ask = match input.resume.as_slice() {
        [] => message(&input.messages)?,
        [entry] => {
            let asked = turn_stream::request_event(&api, &path, &entry.interrupt_id).await?;
            answer(asked, entry)?
        }
        _ => {
            return Err(ApiError::bad_request(
                "a Spool turn waits on one thing at a time: resume one interrupt per run",
            ));
        }
    };
    let (turn, after) = writes::post(&api, &parts, &input.thread_id, &path, ask).await?;
    let run = RunStream::new(&input.thread_id, &input.run_id, turn.clone().unwrap_or_default());
    if turn.is_none() {
        // The message answered an agent's question (the global chat): no turn of Spool's.
        let mut out = vec![run.start()];
        out.push(AgUiEvent::RunFinished {
            thread_id: input.thread_id,
            run_id: input.run_id,
            outcome: json!({ "type": "success" }),
            metadata: json!({ "spool": { "seq": after + 1 } }),
        });
        return Ok(turn_stream::respond_frames(&out, None, &[]));
    }
    Ok(turn_stream::respond(api, path, run, after, after, &[]))
}

/// `GET /v1/ag-ui/chat/{id}/stream`.
#[utoipa::path(get, path = "/v1/ag-ui/chat/{id}/stream", tag = "ag-ui", operation_id = "ag_ui_resume",
    params(("id" = String, Path, description = "The session"),
        ("after" = Option<u64>, Query, description = "The last `metadata.spool.seq` the client has: events up to it are not sent again")),
    responses((status = 200, description = "The chat's running or waiting turn as AG-UI events", content_type = "text/event-stream"),
        (status = 204, description = "No turn runs or waits"),
        (status = 400, description = "A malformed query", body = spool_edge::ErrorBody),
        (status = 401, description = "No valid token", body = spool_edge::ErrorBody), (status = 404, description = "No such session in the caller's organization", body = spool_edge::ErrorBody),
        (status = 503, description = "The store is unavailable for a moment; retry", body = spool_edge::ErrorBody)))]
pub(crate) async fn resume(
    State(api): State<Arc<StreamApi>>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let path = turn_stream::session_for_read(&api, &headers, &uri, &id).await?;
    let seen = crate::protocol::after_param(uri.query())?;
    if let Some(seen) = seen {
        let tail = api.log.metadata(&path).await?.tail.seq();
        if seen > tail {
            return Err(ApiError::bad_request(format!(
                "the chat has {tail} events; resume after a seq up to that"
            )));
        }
    }
    match current_turn(api.log.as_ref(), &path).await? {
        Some(CurrentTurn { turn_id: turn, after }) => {
            let run = RunStream::new(&id, &turn, &turn);
            Ok(turn_stream::respond(
                api,
                path,
                run,
                after,
                seen.unwrap_or(after).max(after),
                &[],
            ))
        }
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// The last user message, to post.
fn message(messages: &[Message]) -> Result<Ask, ApiError> {
    let last = messages
        .last()
        .ok_or_else(|| ApiError::bad_request("`messages` is empty and nothing is resumed: there is nothing to run"))?;
    if last.role != "user" {
        return Err(ApiError::bad_request(format!(
            "the last message's role is `{}`; send a user message, or `resume` an interrupt",
            last.role
        )));
    }
    let content = match &last.content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    if content.trim().is_empty() {
        return Err(ApiError::bad_request("the last user message has no text"));
    }
    Ok(Ask::Message(NewMessage {
        content,
        client_message_id: turn_stream::client_message_id("ag-ui", &last.id),
        client_tools: Vec::new(),
    }))
}

/// The answer a `resume` entry gives to what `asked` asks. An approval's payload is
/// `{approved}`, a plan's `{approved, feedback?}`, a question's `{answer}` (or the answer
/// itself); `cancelled` declines an approval and rejects a plan.
fn answer(asked: spool_chat::session::Event, entry: &Resume) -> Result<Ask, ApiError> {
    let resolved = match entry.status.as_str() {
        "resolved" => true,
        "cancelled" => false,
        other => {
            return Err(ApiError::bad_request(format!(
                "a resume entry's status is `resolved` or `cancelled`, not `{other}`"
            )));
        }
    };
    let call_id = entry.interrupt_id.clone();
    // An approval is explicit: `{"approved": true}` approves, `false` declines, and anything
    // else is refused rather than guessed.
    let approved = || -> Result<bool, ApiError> {
        if !resolved {
            return Ok(false);
        }
        entry.payload.get("approved").and_then(Value::as_bool).ok_or_else(|| {
            ApiError::bad_request(
                "this interrupt's resume payload is `{\"approved\": true}` or `{\"approved\": false}`",
            )
        })
    };
    let kind = asked.event.clone();
    let asked = Some(Box::new(asked));
    Ok(match kind {
        ChatEvent::ToolApprovalRequired(_) => Ask::Answer {
            answer: Answer::Approval {
                tool_call_id: call_id,
                decision: if approved()? {
                    Decision::Approve
                } else {
                    Decision::Decline
                },
            },
            asked,
        },
        ChatEvent::PlanApprovalRequired(_) => Ask::Answer {
            answer: Answer::Plan {
                plan_id: call_id,
                action: if approved()? {
                    PlanAction::Approve
                } else {
                    PlanAction::Reject
                },
                feedback: entry.payload.get("feedback").and_then(Value::as_str).map(str::to_owned),
            },
            asked,
        },
        ChatEvent::AskQuestion(_) => {
            if !resolved {
                return Err(ApiError::bad_request(
                    "a question cannot be cancelled: answer it, or abort the turn (POST /v1/sessions/{id}/control)",
                ));
            }
            let answer = match &entry.payload {
                Value::String(text) => text.clone(),
                payload => payload
                    .get("answer")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::bad_request("a question's resume payload is `{\"answer\": \"…\"}`"))?,
            };
            Ask::Answer {
                answer: Answer::Question {
                    question_id: call_id,
                    answer,
                },
                asked,
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "that interrupt is not an approval, a question or a plan",
            ));
        }
    })
}
