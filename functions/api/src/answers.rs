//! # Controls and answers
//!
//! `POST /v1/sessions/{id}/control`, `…/tool-output`, `…/approval`, `…/question` and `…/plan`.
//! Each appends its own submit event (`control_submitted`, `tool_output_submitted`,
//! `approval_submitted`, `question_answered`, `plan_submitted`) before anything acts on it. An
//! answer must name a request the session waits on: it takes the request atomically, so an
//! unknown id, a stale one or a second answer to the same request gets `409` and appends
//! nothing. An answer to a turn's request enqueues the turn again, to resume it.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spool_chat::{
    event::{
        ApprovalSubmitted, ChatEvent, ControlAction, Decision, PlanAction, PlanSubmitted, QuestionAnswered,
        ToolOutputSubmitted,
    },
    service::{self, Answered},
    session::RequestKind,
};
use spool_edge::{ApiError, ErrorBody, Refusals, writes};
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, PathOf},
};

/// The longest answer, feedback or tool output accepted, in characters.
const MAX_ANSWER_CHARS: usize = 100_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Control {
    action: ControlAction,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolOutput {
    tool: String,
    tool_call_id: String,
    /// The tool's result (or give `error`); `null` is a result too.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    output: Option<Value>,
    #[serde(default)]
    error: Option<String>,
}

/// A field that is there, even as `null` (`Some(Value::Null)`); `None` only when it is absent.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The largest tool output accepted, as JSON (it is in the prompt of the turn's later replies).
const MAX_OUTPUT_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Approval {
    decision: Decision,
    tool_call_id: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Answer {
    question_id: String,
    answer: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanResponse {
    plan_id: String,
    action: PlanAction,
    #[serde(default)]
    feedback: Option<String>,
}

/// A submission accepted: its event's `seq`, and the turn it resumes.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Submitted {
    /// The submit event's sequence number.
    pub(crate) seq: u64,
    /// The turn the answer resumes, if a turn waits on it.
    pub(crate) turn_id: Option<String>,
}

impl From<service::Submitted> for Submitted {
    fn from(s: service::Submitted) -> Self {
        Self {
            seq: s.seq,
            turn_id: s.turn_id,
        }
    }
}

/// The session in a path.
const SESSION_ID: &str = "The session";

fn check_id(name: &str, id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 128 || id.chars().any(char::is_control) {
        return Err(ApiError::BadRequest(format!("`{name}` must be 1 to 128 characters")));
    }
    Ok(())
}

fn check_text(name: &str, text: &str) -> Result<(), ApiError> {
    if text.chars().count() > MAX_ANSWER_CHARS {
        return Err(ApiError::BadRequest(format!(
            "`{name}` is longer than {MAX_ANSWER_CHARS} characters"
        )));
    }
    Ok(())
}

fn kind_name(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Approval => "approval request",
        RequestKind::Question => "question",
        RequestKind::Plan => "plan",
        RequestKind::ToolOutput => "tool call",
    }
}

impl ChatApi {
    /// The answer to the caller's session's open request `id` of `kind`: `409` when there is no
    /// such request, or it has another answer already.
    pub(crate) async fn answer(
        &self,
        caller: &Caller,
        session_id: &str,
        kind: RequestKind,
        id: &str,
        answer: ChatEvent,
    ) -> Result<(StatusCode, Json<Submitted>), ApiError> {
        let session = self.session_of(caller, session_id).await?;
        match self.chats.answer(caller.org(), &session, kind, id, answer).await? {
            Answered::Accepted(done) => Ok((StatusCode::ACCEPTED, Json(done.into()))),
            Answered::NotOpen => Err(ApiError::Conflict(format!(
                "session `{session_id}` has no open {} `{id}`: it was answered already, or never asked",
                kind_name(kind)
            ))),
            Answered::Taken => Err(ApiError::AnsweredAlready(format!(
                "the {} `{id}` of session `{session_id}` has another answer already",
                kind_name(kind)
            ))),
        }
    }

    /// `answer` to the caller's session `session_id`, once its fields are checked: the same
    /// whether it came by its own route or by a front end's ([`crate::writes`]).
    pub(crate) async fn give(
        &self,
        caller: &Caller,
        session_id: &str,
        answer: writes::Answer,
    ) -> Result<(StatusCode, Json<Submitted>), ApiError> {
        let (kind, id, event) = match answer {
            writes::Answer::ToolOutput {
                tool,
                tool_call_id,
                output,
            } => {
                check_id("tool_call_id", &tool_call_id)?;
                check_id("tool", &tool)?;
                let (output, error) = match output {
                    Ok(output) => (Some(output), None),
                    Err(error) => (None, Some(error)),
                };
                if let Some(error) = &error {
                    check_text("error", error)?;
                }
                if output.as_ref().is_some_and(|o| o.to_string().len() > MAX_OUTPUT_BYTES) {
                    return Err(ApiError::BadRequest(format!(
                        "`output` is larger than {MAX_OUTPUT_BYTES} bytes as JSON"
                    )));
                }
                let event = ChatEvent::ToolOutputSubmitted(ToolOutputSubmitted {
                    tool,
                    tool_call_id: tool_call_id.clone(),
                    output,
                    error,
                });
                (RequestKind::ToolOutput, tool_call_id, event)
            }
            writes::Answer::Approval { tool_call_id, decision } => {
                check_id("tool_call_id", &tool_call_id)?;
                let event = ChatEvent::ApprovalSubmitted(ApprovalSubmitted {
                    decision,
                    tool_call_id: tool_call_id.clone(),
                });
                (RequestKind::Approval, tool_call_id, event)
            }
            writes::Answer::Question { question_id, answer } => {
                check_id("question_id", &question_id)?;
                if answer.trim().is_empty() {
                    return Err(ApiError::BadRequest("`answer` is blank".to_owned()));
                }
                check_text("answer", &answer)?;
                let event = ChatEvent::QuestionAnswered(QuestionAnswered {
                    question_id: question_id.clone(),
                    answer,
                });
                (RequestKind::Question, question_id, event)
            }
            writes::Answer::Plan {
                plan_id,
                action,
                feedback,
            } => {
                check_id("plan_id", &plan_id)?;
                if let Some(feedback) = &feedback {
                    check_text("feedback", feedback)?;
                }
                let event = ChatEvent::PlanSubmitted(PlanSubmitted {
                    plan_id: plan_id.clone(),
                    action,
                    feedback,
                });
                (RequestKind::Plan, plan_id, event)
            }
        };
        self.answer(caller, session_id, kind, &id, event).await
    }
}

/// `POST /v1/sessions/{id}/control` `{action: "abort"}`: `control_submitted`. The running turn
/// sees it in the stream, a waiting one is woken to end; with nothing pending it changes
/// nothing. The answer names the pending turn it aborts, if any.
#[utoipa::path(post, path = "/v1/sessions/{id}/control", tag = "answers", params(("id" = String, Path, description = SESSION_ID)), request_body = Control,
    responses((status = 202, description = "Appended as `control_submitted`", body = Submitted), (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn control(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(control): JsonBody<Control>,
) -> Result<impl IntoResponse, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let done = api.chats.control(caller.org(), &session, control.action).await?;
    Ok((StatusCode::ACCEPTED, Json(Submitted::from(done))))
}

/// `POST /v1/sessions/{id}/tool-output` `{tool, tool_call_id, output | error}`.
#[utoipa::path(post, path = "/v1/sessions/{id}/tool-output", tag = "answers", params(("id" = String, Path, description = SESSION_ID)), request_body = ToolOutput,
    responses((status = 202, description = "Appended; the waiting turn is queued to resume", body = Submitted), (status = 404, description = "No such session in the caller's organization", body = ErrorBody),
        (status = 409, description = "The session has no open tool call of that id (never asked, or answered already)", body = ErrorBody), Refusals))]
pub(crate) async fn tool_output(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(out): JsonBody<ToolOutput>,
) -> Result<impl IntoResponse, ApiError> {
    check_id("tool_call_id", &out.tool_call_id)?;
    check_id("tool", &out.tool)?;
    let output = match (out.output, out.error) {
        (Some(output), None) => Ok(output),
        (None, Some(error)) => Err(error),
        _ => return Err(ApiError::BadRequest("give either `output` or `error`".to_owned())),
    };
    let answer = writes::Answer::ToolOutput {
        tool: out.tool,
        tool_call_id: out.tool_call_id,
        output,
    };
    api.give(&caller, &id, answer).await
}

/// `POST /v1/sessions/{id}/approval` `{decision: "approve" | "decline", tool_call_id}`.
#[utoipa::path(post, path = "/v1/sessions/{id}/approval", tag = "answers", params(("id" = String, Path, description = SESSION_ID)), request_body = Approval,
    responses((status = 202, description = "Appended; the waiting turn is queued to resume", body = Submitted), (status = 404, description = "No such session in the caller's organization", body = ErrorBody),
        (status = 409, description = "The session has no open approval request of that id (never asked, or answered already)", body = ErrorBody), Refusals))]
pub(crate) async fn approval(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(approval): JsonBody<Approval>,
) -> Result<impl IntoResponse, ApiError> {
    let answer = writes::Answer::Approval {
        tool_call_id: approval.tool_call_id,
        decision: approval.decision,
    };
    api.give(&caller, &id, answer).await
}

/// `POST /v1/sessions/{id}/question` `{question_id, answer}`.
#[utoipa::path(post, path = "/v1/sessions/{id}/question", tag = "answers", params(("id" = String, Path, description = SESSION_ID)), request_body = Answer,
    responses((status = 202, description = "Appended; the waiting turn is queued to resume", body = Submitted), (status = 404, description = "No such session in the caller's organization", body = ErrorBody),
        (status = 409, description = "The session has no open question of that id (never asked, or answered already)", body = ErrorBody), Refusals))]
pub(crate) async fn question(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(answer): JsonBody<Answer>,
) -> Result<impl IntoResponse, ApiError> {
    let answer = writes::Answer::Question {
        question_id: answer.question_id,
        answer: answer.answer,
    };
    api.give(&caller, &id, answer).await
}

/// `POST /v1/sessions/{id}/plan` `{plan_id, action: "approve" | "reject", feedback?}`.
#[utoipa::path(post, path = "/v1/sessions/{id}/plan", tag = "answers", params(("id" = String, Path, description = SESSION_ID)), request_body = PlanResponse,
    responses((status = 202, description = "Appended; the waiting turn is queued to resume", body = Submitted), (status = 404, description = "No such session in the caller's organization", body = ErrorBody),
        (status = 409, description = "The session has no open plan of that id (never asked, or answered already)", body = ErrorBody), Refusals))]
pub(crate) async fn plan(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(response): JsonBody<PlanResponse>,
) -> Result<impl IntoResponse, ApiError> {
    let answer = writes::Answer::Plan {
        plan_id: response.plan_id,
        action: response.action,
        feedback: response.feedback,
    };
    api.give(&caller, &id, answer).await
}
