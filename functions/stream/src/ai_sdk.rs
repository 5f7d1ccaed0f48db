//! # The AI SDK's chat routes
//!
//! `useChat` with the `ai` package's `DefaultChatTransport({ api: BASE + '/v1/ai-sdk/chat' })`
//! talks to a Spool chat with no adapter:
//!
//! - `POST /v1/ai-sdk/chat` takes the transport's body (`{id, messages, trigger, messageId}`,
//!   `id` being the Spool session). A last message from the user is posted to the chat the way
//!   `POST /v1/sessions/{id}/messages` posts one (its UI message id is the `client_message_id`,
//!   so the transport's retry is the same message); a last assistant message carries a
//!   person's answer (an approval, a plan's decision, a question's answer as the question
//!   tool's output), which is posted to the answer route. The response is the turn as a UI
//!   message stream ([`spool_domain::ui_message`]).
//! - `GET /v1/ai-sdk/chat/{id}/stream` resumes: the chat's latest turn, replayed from its start
//!   while it runs or waits on a person, or `204` when it has ended.
//!
//! Both read the chat's durable events, so a reload or a dropped connection loses and repeats
//! nothing. The writes go through the chat API's own routes ([`ChatWrites`]): in-process under
//! `spool serve`, over HTTP on AWS, where this function holds no write rights.

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    extract::{Path, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use futures_util::{future::BoxFuture, stream};
use serde::Deserialize;
use serde_json::{Value, json};
use spool_domain::{
    Event, Offset, StreamPath, WaitOutcome,
    session::read_events,
    ui_message::{self, Progress, TurnStream, UiChunk},
};
use tokio::time::Instant;

use crate::{ApiError, Intent, StreamApi};

/// The longest a UI message stream stays open: under the stream function's 15-minute limit.
/// A turn still running then is resumed by the client (`resumeStream`).
const MAX_STREAM: Duration = Duration::from_secs(14 * 60);

/// The largest request body: the transport sends the whole conversation each time.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Events read per window when looking back for a turn.
const WINDOW: usize = 500;
/// The most windows looked back (a turn of more events than this is not found).
const MAX_WINDOWS: u64 = 64;

/// The chat API's routes, as these routes reach them to write.
pub trait ChatWrites: Send + Sync {
    /// Sends `request` to the chat API and answers its response.
    fn call(&self, request: Request) -> BoxFuture<'static, Result<Response, String>>;
}

/// The chat API's Router in the same process (`spool serve`).
pub struct InProcess(axum::Router);

impl InProcess {
    /// Writes through `router`.
    pub fn new(router: axum::Router) -> Self {
        Self(router)
    }
}

impl ChatWrites for InProcess {
    fn call(&self, request: Request) -> BoxFuture<'static, Result<Response, String>> {
        use tower::ServiceExt;
        let router = self.0.clone();
        Box::pin(async move { Ok(router.oneshot(request).await.into_response()) })
    }
}

/// The chat API at a URL (AWS: the API function, which this read-only function reaches over
/// HTTPS with the caller's token and CloudFront's origin header, as CloudFront would).
pub struct Remote {
    http: reqwest::Client,
    base: String,
    origin: Option<HeaderValue>,
}

impl Remote {
    /// The chat API at `base` (`https://…`, no trailing path), sending `origin_secret` in
    /// [`spool_edge::ORIGIN_HEADER`] when the API requires it.
    pub fn new(base: &str, origin_secret: Option<&str>) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
            base: base.trim_end_matches('/').to_owned(),
            origin: origin_secret.and_then(|s| HeaderValue::from_str(s).ok()),
        }
    }
}

impl ChatWrites for Remote {
    fn call(&self, request: Request) -> BoxFuture<'static, Result<Response, String>> {
        let (parts, body) = request.into_parts();
        let url = format!(
            "{}{}",
            self.base,
            parts.uri.path_and_query().map_or("/", |p| p.as_str())
        );
        let mut sent = self.http.request(parts.method, url);
        for name in [header::AUTHORIZATION, header::CONTENT_TYPE] {
            if let Some(value) = parts.headers.get(&name) {
                sent = sent.header(name, value.clone());
            }
        }
        if let Some(origin) = &self.origin {
            sent = sent.header(spool_edge::ORIGIN_HEADER, origin.clone());
        }
        Box::pin(async move {
            let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
                .await
                .map_err(|e| e.to_string())?;
            let answer = sent
                .body(body)
                .send()
                .await
                .map_err(|e| format!("the chat API could not be reached ({e}); retry"))?;
            let status = answer.status();
            let bytes = answer
                .bytes()
                .await
                .map_err(|e| format!("the chat API's answer was cut off ({e}); retry"))?;
            Ok((status, bytes).into_response())
        })
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
}

#[derive(Debug, Deserialize)]
struct UiMessage {
    id: String,
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

/// What a request asks.
#[derive(Debug, PartialEq)]
enum Ask {
    /// Post a person's message.
    Message { content: String, client_message_id: String },
    /// Answer what the turn waits on, then continue its stream.
    Answer {
        call_id: String,
        route: &'static str,
        body: Value,
    },
}

/// `POST /v1/ai-sdk/chat`.
#[utoipa::path(post, path = "/v1/ai-sdk/chat", tag = "ai-sdk",
    request_body(content = Value, description = "The AI SDK transport's body: `{id, messages, trigger, messageId}`, `id` being the session"),
    responses((status = 200, description = "The turn as the AI SDK's UI message stream (`x-vercel-ai-ui-message-stream: v1`)", content_type = "text/event-stream"),
        (status = 400, description = "A malformed body, or nothing to post", body = crate::ErrorBody), (status = 401, description = "No valid token", body = crate::ErrorBody),
        (status = 404, description = "No such session in the caller's organization", body = crate::ErrorBody),
        (status = 409, description = "A turn is pending, or the request was answered already", body = crate::ErrorBody),
        (status = 503, description = "The store or the chat API is unavailable for a moment; retry", body = crate::ErrorBody)))]
pub(crate) async fn post(State(api): State<Arc<StreamApi>>, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    // Who asks, before anything of the body is read.
    api.resolve(
        (&parts.headers, &parts.extensions),
        &parts.uri,
        "sessions",
        Intent::Read,
    )
    .await?;
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::bad_request("the body is too large or was cut off"))?;
    let chat: ChatRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not the AI SDK transport's request: {e}")))?;
    let path = api
        .resolve(
            (&parts.headers, &parts.extensions),
            &parts.uri,
            &format!("sessions/{}", chat.id),
            Intent::Read,
        )
        .await?;
    let writes = api.chat_writes.clone().ok_or_else(|| {
        ApiError::NotImplemented("this endpoint cannot post to the chat; use the deployment's URL".to_owned())
    })?;
    if chat.trigger.as_deref() == Some("regenerate-message") {
        return Err(ApiError::bad_request(
            "a Spool chat keeps every answer: send the message again instead of regenerating one",
        ));
    }
    let forward = |route: String, body: Value| {
        let mut request = Request::new(Body::from(body.to_string()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = route.parse().unwrap_or_default();
        if let Some(auth) = parts.headers.get(header::AUTHORIZATION) {
            request.headers_mut().insert(header::AUTHORIZATION, auth.clone());
        }
        request
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        *request.extensions_mut() = parts.extensions.clone();
        writes.call(request)
    };
    match ask(&chat)? {
        Ask::Message {
            content,
            client_message_id,
        } => {
            let route = format!("/v1/sessions/{}/messages", chat.id);
            let posted = accepted(
                forward(
                    route,
                    json!({ "content": content, "client_message_id": client_message_id }),
                )
                .await,
            )
            .await?;
            let seq = posted.get("seq").and_then(Value::as_u64).unwrap_or(0);
            let turn = posted.get("turn_id").and_then(Value::as_str).map(str::to_owned);
            Ok(respond(api, path, turn, seq.saturating_sub(1)))
        }
        Ask::Answer { call_id, route, body } => {
            let asked = find_back(&api, &path, |e| {
                e.turn_id.is_some() && ui_message::asks_about(&e.event, &call_id)
            })
            .await?
            .ok_or_else(|| ApiError::bad_request(format!("this chat never asked about `{call_id}`")))?;
            let answered = forward(format!("/v1/sessions/{}/{route}", chat.id), body).await;
            match accepted(answered).await {
                Ok(_) => {}
                // Answered already, by this request's earlier try or by someone else: the
                // stream shows what happened.
                Err(ApiError::Upstream { status, .. }) if status == StatusCode::CONFLICT => {}
                Err(e) => return Err(e),
            }
            Ok(respond(api, path, asked.turn_id, asked.seq))
        }
    }
}

/// `GET /v1/ai-sdk/chat/{id}/stream`.
#[utoipa::path(get, path = "/v1/ai-sdk/chat/{id}/stream", tag = "ai-sdk",
    params(("id" = String, Path, description = "The session")),
    responses((status = 200, description = "The chat's running or waiting turn from its start, as a UI message stream", content_type = "text/event-stream"),
        (status = 204, description = "No turn runs or waits"),
        (status = 401, description = "No valid token", body = crate::ErrorBody), (status = 404, description = "No such session in the caller's organization", body = crate::ErrorBody),
        (status = 503, description = "The store is unavailable for a moment; retry", body = crate::ErrorBody)))]
pub(crate) async fn resume(
    State(api): State<Arc<StreamApi>>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let path = api
        .resolve(
            (&headers, &axum::http::Extensions::new()),
            &uri,
            &format!("sessions/{id}"),
            Intent::Read,
        )
        .await?;
    let Some(latest) = find_back(&api, &path, |e| e.turn_id.is_some()).await? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    if matches!(latest.event, spool_domain::ChatEvent::AgentEnd(_)) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let turn = latest.turn_id.clone();
    // The turn's first event: where its replay starts.
    let first = find_back(&api, &path, |e| {
        e.turn_id == turn
            && matches!(
                e.event,
                spool_domain::ChatEvent::UserMessageSubmitted(_) | spool_domain::ChatEvent::SlashCommandInvoked(_)
            )
    })
    .await?;
    let after = first.map_or(latest.seq.saturating_sub(1), |e| e.seq);
    Ok(respond(api, path, turn, after))
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
            Ok(Ask::Message {
                content,
                client_message_id: format!("ai-sdk:{}", last.id),
            })
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
                Some(if ui_message::is_plan(tool) {
                    let action = if approved { "approve" } else { "reject" };
                    Ask::Answer {
                        route: "plan",
                        body: json!({ "plan_id": call_id, "action": action, "feedback": reason }),
                        call_id,
                    }
                } else {
                    let decision = if approved { "approve" } else { "decline" };
                    Ask::Answer {
                        route: "approval",
                        body: json!({ "tool_call_id": call_id, "decision": decision }),
                        call_id,
                    }
                })
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
                    route: "question",
                    body: json!({ "question_id": call_id, "answer": answer }),
                    call_id,
                })
            }
            _ => None,
        }
    })
}

/// The chat API's `2xx` answer as JSON, or its refusal passed on.
async fn accepted(response: Result<Response, String>) -> Result<Value, ApiError> {
    let response = response.map_err(ApiError::Unavailable)?;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1024 * 1024)
        .await
        .map_err(|e| ApiError::Unavailable(format!("the chat API's answer was cut off: {e}")))?;
    if status.is_success() {
        Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
    } else {
        Err(ApiError::Upstream { status, body })
    }
}

/// The latest event of the chat that `pick` picks, looking back from its tail.
async fn find_back(
    api: &StreamApi,
    path: &StreamPath,
    pick: impl Fn(&Event) -> bool,
) -> Result<Option<Event>, ApiError> {
    let tail = api.log.metadata(path).await?.tail.seq();
    let mut end = tail;
    for _ in 0..MAX_WINDOWS {
        if end == 0 {
            break;
        }
        let start = end.saturating_sub(WINDOW as u64);
        let page = read_events(api.log.as_ref(), path, start, (end - start) as usize).await?;
        if let Some(found) = page.events.iter().rev().find(|e| pick(e)) {
            return Ok(Some(found.clone()));
        }
        end = start;
    }
    Ok(None)
}

/// Where a UI message stream is.
struct Reader {
    api: Arc<StreamApi>,
    path: StreamPath,
    turn: TurnStream,
    /// The last seq read.
    after: u64,
    deadline: Instant,
    started: bool,
    done: bool,
}

/// The turn `turn` of the chat at `path` as a UI message stream, from its events after `after`;
/// with no turn, a stream that starts and finishes at once.
fn respond(api: Arc<StreamApi>, path: StreamPath, turn: Option<String>, after: u64) -> Response {
    let Some(turn) = turn else {
        let mut out = Vec::new();
        let turn = TurnStream::new(String::new());
        out.push(turn.start());
        out.push(UiChunk::Finish {
            finish_reason: ui_message::FinishReason::Stop,
        });
        return sse(stream::iter([Ok::<_, std::convert::Infallible>(frame(&out, true))]));
    };
    let reader = Reader {
        deadline: Instant::now() + MAX_STREAM,
        api,
        path,
        turn: TurnStream::new(turn),
        after,
        started: false,
        done: false,
    };
    sse(stream::unfold(reader, |mut reader| async move {
        let bytes = reader.next().await?;
        Some((Ok::<_, std::convert::Infallible>(bytes), reader))
    }))
}

fn sse<S>(body: S) -> Response
where
    S: futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
{
    let mut response = (StatusCode::OK, Body::from_stream(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    let (name, value) = ui_message::STREAM_HEADER;
    headers.insert(name, HeaderValue::from_static(value));
    response
}

/// `chunks` as SSE `data:` lines, and `[DONE]` when `done`.
fn frame(chunks: &[UiChunk], done: bool) -> Bytes {
    let mut out = String::new();
    for chunk in chunks {
        out.push_str("data: ");
        out.push_str(&serde_json::to_string(chunk).unwrap_or_default());
        out.push_str("\n\n");
    }
    if done {
        out.push_str("data: ");
        out.push_str(ui_message::DONE);
        out.push_str("\n\n");
    }
    Bytes::from(out)
}

impl Reader {
    /// The next bytes to send, or `None` when the stream is over.
    async fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.turn.start());
        }
        loop {
            let page = match read_events(self.api.log.as_ref(), &self.path, self.after, WINDOW).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::debug!(path = %self.path, error = %e, "ending a UI message stream");
                    self.done = true;
                    return Some(frame(&out, false));
                }
            };
            for event in &page.events {
                self.turn.push(event, &mut out);
                self.after = event.seq;
            }
            let up_to_date = self.after >= page.tail;
            match self.turn.progress() {
                Progress::Ended => {
                    self.done = true;
                    return Some(frame(&out, true));
                }
                Progress::Waiting if up_to_date => {
                    self.turn.pause(&mut out);
                    self.done = true;
                    return Some(frame(&out, true));
                }
                _ if !out.is_empty() => return Some(frame(&out, false)),
                _ if !up_to_date => continue,
                _ => {}
            }
            // Up to date, nothing to send: wait for the next append, or keep the line alive.
            let now = Instant::now();
            if now >= self.deadline {
                self.done = true;
                return None;
            }
            let nap = self.api.live.sse_keepalive.min(self.deadline - now);
            let waited = tokio::select! {
                waited = self.api.log.wait(&self.path, Offset::after(self.after), nap) => waited,
                () = self.api.stopping() => {
                    self.done = true;
                    return None;
                }
            };
            match waited {
                Ok(WaitOutcome::TimedOut { .. }) => return Some(Bytes::from_static(b": keep-alive\n\n")),
                Ok(WaitOutcome::Ready { .. }) => {}
                Err(e) => {
                    tracing::debug!(path = %self.path, error = %e, "ending a UI message stream");
                    self.done = true;
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(messages: Value) -> ChatRequest {
        serde_json::from_value(json!({ "id": "s", "messages": messages, "trigger": "submit-message" })).unwrap()
    }

    #[test]
    fn a_user_message_is_posted_with_its_id() {
        let chat = request(json!([{ "id": "u1", "role": "user", "parts": [{ "type": "text", "text": "hi" }] }]));
        assert_eq!(
            ask(&chat).unwrap(),
            Ask::Message {
                content: "hi".into(),
                client_message_id: "ai-sdk:u1".into()
            }
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
                call_id: "c1".into(),
                route: "approval",
                body: json!({ "tool_call_id": "c1", "decision": "approve" })
            }
        );
        let question = request(json!([{ "id": "a", "role": "assistant", "parts": [
            { "type": "dynamic-tool", "toolName": "ask_user", "toolCallId": "q", "state": "output-available", "output": "Ada" },
        ] }]));
        assert_eq!(
            ask(&question).unwrap(),
            Ask::Answer {
                call_id: "q".into(),
                route: "question",
                body: json!({ "question_id": "q", "answer": "Ada" })
            }
        );
        let plan = request(json!([{ "id": "a", "role": "assistant", "parts": [
            { "type": "tool-propose_plan", "toolCallId": "p", "state": "approval-responded",
              "approval": { "id": "p", "approved": false, "reason": "shorter" } },
        ] }]));
        assert_eq!(
            ask(&plan).unwrap(),
            Ask::Answer {
                call_id: "p".into(),
                route: "plan",
                body: json!({ "plan_id": "p", "action": "reject", "feedback": "shorter" })
            }
        );
        let nothing = request(json!([{ "id": "a", "role": "assistant", "parts": [{ "type": "text", "text": "hi" }] }]));
        assert!(matches!(ask(&nothing), Err(ApiError::BadRequest(_))));
    }
}
