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
use spool_domain::{
    ChatEvent, ProducerClaim, RequestKind, Session,
    chat::event::{
        ApprovalSubmitted, ControlAction, ControlSubmitted, Decision, PlanAction, PlanSubmitted, QuestionAnswered,
        ToolOutputSubmitted,
    },
    claim::Reconciled,
    session::{EventDraft, append_events},
};
use utoipa::ToSchema;

use crate::{
    ApiError, ChatApi, ErrorBody,
    error::Refusals,
    extract::{Caller, Id, JsonBody, PathOf, rfc3339_ms},
};

/// How old a claim must be before an abort questions it.
const ABORT_GRACE_MS: i64 = 5_000;

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
    /// The tool's result (or give `error`).
    #[serde(default)]
    output: Option<Value>,
    #[serde(default)]
    error: Option<String>,
}

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
    /// Appends one submit event to a session; its seq.
    pub(crate) async fn submit(&self, caller: &Caller, session: &Session, event: ChatEvent) -> Result<u64, ApiError> {
        let path = Session::stream(caller.org(), &session.id)?;
        let now = rfc3339_ms(self.clock.now_ms());
        let draft = EventDraft::new(event, None);
        let appended = append_events(self.log.as_ref(), &path, &session.id, &[draft], None, &now, None).await?;
        Ok(appended.first)
    }

    /// Records the answer to the session's open request `id` of `kind` and enqueues the waiting
    /// turn; `409` when there is no such request, or it has another answer already.
    ///
    /// The answer's event is the record: it is appended under an idempotent producer named after
    /// the request (`answer:{id}`), so of two racing answers the log keeps exactly one, and a
    /// retried answer (a lost response, a crash before its request was closed) is recognised by
    /// its payload and answered as the first time. The turn is queued, then the open request
    /// closed; one that a crash left open is finished by the next answer to it.
    pub(crate) async fn answer(
        &self,
        caller: &Caller,
        session_id: &str,
        kind: RequestKind,
        id: &str,
        answer: ChatEvent,
    ) -> Result<(StatusCode, Json<Submitted>), ApiError> {
        let session = self.session_of(caller, session_id).await?;
        let open = self.metadata.open_requests(caller.org(), session_id).await?;
        let Some(request) = open.into_iter().find(|r| r.id == id && r.kind == kind) else {
            return Err(ApiError::Conflict(format!(
                "session `{session_id}` has no open {} `{id}`: it was answered already, or never asked",
                kind_name(kind)
            )));
        };
        let path = Session::stream(caller.org(), &session.id)?;
        let draft = EventDraft::new(answer.clone(), request.turn_id.clone());
        let producer = ProducerClaim {
            id: format!("answer:{id}"),
            epoch: 0,
            seq: 0,
        };
        let now = rfc3339_ms(self.clock.now_ms());
        let appended = append_events(
            self.log.as_ref(),
            &path,
            &session.id,
            std::slice::from_ref(&draft),
            Some(producer),
            &now,
            None,
        )
        .await?;
        if appended.duplicate {
            let first = spool_domain::session::read_events(self.log.as_ref(), &path, appended.first - 1, 1)
                .await?
                .events
                .pop();
            let same = first.is_some_and(|e| e.event == answer);
            if !same {
                // Another answer is the one recorded (its process may have died before closing
                // the request and resuming the turn): finish that, and refuse this one.
                if let Some(turn_id) = &request.turn_id {
                    self.enqueue_turn(caller.org(), session_id, turn_id, appended.first)
                        .await?;
                }
                self.metadata
                    .take_request(caller.org(), session_id, id, Some(kind))
                    .await?;
                return Err(ApiError::AnsweredAlready(format!(
                    "the {} `{id}` of session `{session_id}` has another answer already",
                    kind_name(kind)
                )));
            }
        }
        // The turn is queued before the request is closed: a crash in between leaves the
        // request open, so the client's retry (told nothing yet) queues it again.
        let seq = appended.first;
        if let Some(turn_id) = &request.turn_id {
            self.enqueue_turn(caller.org(), session_id, turn_id, seq).await?;
        }
        self.metadata
            .take_request(caller.org(), session_id, id, Some(kind))
            .await?;
        self.metadata
            .touch_session(caller.org(), session_id, self.clock.now_ms(), &session.preview)
            .await?;
        let turn_id = request.turn_id;
        Ok((StatusCode::ACCEPTED, Json(Submitted { seq, turn_id })))
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
    let seq = api
        .submit(
            &caller,
            &session,
            ChatEvent::ControlSubmitted(ControlSubmitted { action: control.action }),
        )
        .await?;
    // A turn that waits on a person runs nowhere to see the abort: its step is queued, to end
    // it. (A running step sees the event itself; the queued one then finds the turn ended.) A
    // claim with no turn behind it (a crash between a message's claim and its append) is
    // released instead: a person aborts because the chat is stuck. (A claim of the last few
    // seconds is left alone: its message may be on its way, and then its turn sees the abort.)
    let mut turn_id = None;
    if let Some(holder) = &session.pending_turn
        && api
            .reconcile_claim(caller.org(), &session.id, holder, ABORT_GRACE_MS)
            .await?
            != Reconciled::Released
    {
        api.enqueue_turn(caller.org(), &session.id, &holder.turn_id, seq)
            .await?;
        turn_id = Some(holder.turn_id.clone());
    }
    Ok((StatusCode::ACCEPTED, Json(Submitted { seq, turn_id })))
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
    if out.output.is_some() == out.error.is_some() {
        return Err(ApiError::BadRequest("give either `output` or `error`".to_owned()));
    }
    if let Some(error) = &out.error {
        check_text("error", error)?;
    }
    let id_of_call = out.tool_call_id.clone();
    let answer = ChatEvent::ToolOutputSubmitted(ToolOutputSubmitted {
        tool: out.tool,
        tool_call_id: out.tool_call_id,
        output: out.output,
        error: out.error,
    });
    api.answer(&caller, &id, RequestKind::ToolOutput, &id_of_call, answer)
        .await
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
    check_id("tool_call_id", &approval.tool_call_id)?;
    let answer = ChatEvent::ApprovalSubmitted(ApprovalSubmitted {
        decision: approval.decision,
        tool_call_id: approval.tool_call_id.clone(),
    });
    api.answer(&caller, &id, RequestKind::Approval, &approval.tool_call_id, answer)
        .await
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
    check_id("question_id", &answer.question_id)?;
    if answer.answer.trim().is_empty() {
        return Err(ApiError::BadRequest("`answer` is blank".to_owned()));
    }
    check_text("answer", &answer.answer)?;
    let question_id = answer.question_id.clone();
    let answer = ChatEvent::QuestionAnswered(QuestionAnswered {
        question_id: answer.question_id,
        answer: answer.answer,
    });
    api.answer(&caller, &id, RequestKind::Question, &question_id, answer)
        .await
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
    check_id("plan_id", &response.plan_id)?;
    if let Some(feedback) = &response.feedback {
        check_text("feedback", feedback)?;
    }
    let answer = ChatEvent::PlanSubmitted(PlanSubmitted {
        plan_id: response.plan_id.clone(),
        action: response.action,
        feedback: response.feedback,
    });
    api.answer(&caller, &id, RequestKind::Plan, &response.plan_id, answer)
        .await
}
