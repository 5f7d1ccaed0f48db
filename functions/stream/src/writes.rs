//! # The front ends' writes
//!
//! The front ends' routes of the stream function (the AI SDK's, AG-UI's) post a person's
//! messages and answers through the chat's one write port, [`ChatWrites`], so a write is
//! checked, limited and made idempotent in one place, whichever route it came by: in process
//! under `spool serve` (the chat API's adapter, `spool_api::router_with_writes`), or with
//! [`Remote`], the one HTTP client to the API function across the AWS permission boundary,
//! where the stream function's role holds no write rights.

use std::time::Duration;

use crate::wire::ui_message;
use axum::http::{HeaderValue, StatusCode, header, request::Parts};
use serde_json::Value;
use spool_chat::{event::ChatEvent, session::Event};
use spool_edge::{
    ApiError,
    writes::{Answer, ChatWrites, Credentials, NewMessage, Posted, Revise, Written, revise_route_and_body},
};
use spool_log::stream::StreamPath;

use spool_chat::current_turn::find_back;

use crate::{StreamApi, turn_stream::request_event};

/// What a front end's request asks.
#[derive(Debug, PartialEq)]
pub(crate) enum Ask {
    /// Post a person's message.
    Message(NewMessage),
    /// Make a new version of a person's message (an edit, a regenerate).
    Revise(Revise),
    /// Answer what the turn waits on, then continue its stream.
    Answer {
        /// The answer.
        answer: Answer,
        /// The request's event, when the caller has read it already (to know its kind).
        asked: Option<Box<Event>>,
    },
}

/// Posts `ask` to the session `session` (at `path`) as the caller of `parts`: the turn to
/// stream and the seq its stream starts after.
pub(crate) async fn post(
    api: &StreamApi,
    parts: &Parts,
    session: &str,
    path: &StreamPath,
    ask: Ask,
) -> Result<(Option<String>, u64), ApiError> {
    let writes = api.chat_writes.clone().ok_or_else(|| {
        ApiError::NotImplemented("this endpoint cannot post to the chat; use the deployment's URL".to_owned())
    })?;
    let credentials = Credentials {
        authorization: parts.headers.get(header::AUTHORIZATION).cloned(),
        extensions: parts.extensions.clone(),
    };
    match ask {
        Ask::Message(message) => {
            let (cmid, content) = (message.client_message_id.clone(), message.content.clone());
            let posted = writes.post_message(credentials.clone(), session, message).await?;
            // A front end's message resent under its id with other text than its latest version
            // is an edit of that version (the same text is a retry).
            let latest = match posted.duplicate {
                true => version_of(api, path, &cmid).await?,
                false => None,
            };
            let posted = match latest {
                Some(Event {
                    seq,
                    event: ChatEvent::UserMessageSubmitted(version),
                    ..
                }) if seq != posted.seq || version.content != content => {
                    writes.revise(credentials, session, edit(seq, &cmid, content)).await?
                }
                _ => posted,
            };
            Ok((posted.turn_id, posted.seq.saturating_sub(1)))
        }
        Ask::Revise(revise) => {
            let posted = writes.revise(credentials, session, revise).await?;
            Ok((posted.turn_id, posted.seq.saturating_sub(1)))
        }
        Ask::Answer { answer, asked } => {
            let call_id = answer.call_id().to_owned();
            let asked = match asked {
                Some(asked) => *asked,
                None => request_event(api, path, &call_id).await?,
            };
            match writes.answer(credentials, session, answer).await {
                Ok(_) => {}
                // Answered already, by this request's earlier try or by someone else: the
                // stream shows what happened. (A refusal for any other reason is passed on.)
                Err(e)
                    if e.status_and_code().0 == StatusCode::CONFLICT
                        && find_back(api.log.as_ref(), path, |e| {
                            e.seq > asked.seq && ui_message::answers(&e.event, &call_id)
                        })
                        .await?
                        .is_some() => {}
                Err(e) => return Err(e),
            }
            Ok((asked.turn_id, asked.seq))
        }
    }
}

/// The latest version of the person's message a front end posted under the client id `cmid`
/// (its first version has that id; later ones have it as a prefix: [`edit`], [`regenerate`]).
pub(crate) async fn version_of(api: &StreamApi, path: &StreamPath, cmid: &str) -> Result<Option<Event>, ApiError> {
    let prefix = format!("{cmid}:");
    Ok(find_back(api.log.as_ref(), path, |e| {
        matches!(e.event, ChatEvent::UserMessageSubmitted(_))
            && e.client_message_id
                .as_deref()
                .is_some_and(|c| c == cmid || c.starts_with(&prefix))
    })
    .await?)
}

/// An edit of the message at `seq`, which a front end knows by `cmid`, to `content`: its own
/// client id names the message and the text, so the front end's retry is the same edit
/// ([`post`] makes one of a message resent under its id with other text).
fn edit(seq: u64, cmid: &str, content: String) -> Revise {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(content.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Revise::Edit {
        seq,
        content,
        client_message_id: Some(format!("{cmid}:e{hex}")),
    }
}

/// The answer to the message a front end knows by `cmid` (found at `seq`), made again; none: the
/// chat's last message's.
pub(crate) fn regenerate(found: Option<(u64, &str)>) -> Ask {
    Ask::Revise(match found {
        Some((seq, cmid)) => Revise::Regenerate {
            seq: Some(seq),
            client_message_id: Some(format!("{cmid}:{}", spool_chat::workspace::new_id("r"))),
        },
        None => Revise::Regenerate {
            seq: None,
            client_message_id: None,
        },
    })
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

    /// Posts `body` to the API's route `path` as the caller of `credentials`: its `2xx`
    /// answer, or its refusal passed on ([`ApiError::Upstream`]).
    fn send(&self, credentials: Credentials, path: &str, body: &Value) -> Written<Posted> {
        let mut sent = self
            .http
            .post(format!("{}{path}", self.base))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(authorization) = credentials.authorization {
            sent = sent.header(header::AUTHORIZATION, authorization);
        }
        if let Some(origin) = &self.origin {
            sent = sent.header(spool_edge::ORIGIN_HEADER, origin.clone());
        }
        Box::pin(async move {
            let answer = sent
                .send()
                .await
                .map_err(|e| ApiError::Unavailable(format!("the chat API could not be reached ({e}); retry")))?;
            let status = answer.status();
            let retry_after = answer.headers().get(header::RETRY_AFTER).cloned();
            let body = answer
                .bytes()
                .await
                .map_err(|e| ApiError::Unavailable(format!("the chat API's answer was cut off ({e}); retry")))?;
            if !status.is_success() {
                return Err(ApiError::Upstream {
                    status,
                    body,
                    retry_after,
                });
            }
            let posted: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            Ok(Posted {
                seq: posted.get("seq").and_then(Value::as_u64).unwrap_or(0),
                turn_id: posted.get("turn_id").and_then(Value::as_str).map(str::to_owned),
                duplicate: posted.get("duplicate").and_then(Value::as_bool).unwrap_or(false),
            })
        })
    }
}

impl ChatWrites for Remote {
    fn post_message(&self, credentials: Credentials, session: &str, message: NewMessage) -> Written<Posted> {
        self.send(
            credentials,
            &format!("/v1/sessions/{session}/messages"),
            &message.body(),
        )
    }

    fn answer(&self, credentials: Credentials, session: &str, answer: Answer) -> Written<Posted> {
        let (route, body) = answer.route_and_body();
        self.send(credentials, &format!("/v1/sessions/{session}/{route}"), &body)
    }

    fn revise(&self, credentials: Credentials, session: &str, revise: Revise) -> Written<Posted> {
        let (route, body) = revise_route_and_body(&revise);
        self.send(credentials, &format!("/v1/sessions/{session}/{route}"), &body)
    }
}
