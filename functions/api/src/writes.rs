//! # The front ends' writes, in process
//!
//! Where the stream function's front-end routes run beside the chat API (`spool serve`), they
//! write through [`InProcess`]: the chat API's own path to the chat service, with its checks
//! in the same order as its routes apply them — the caller's token, its revocation and the
//! rate limits of writes, the route's body limit, the fields' checks, the chat — so a message
//! or an answer is the same write whichever route it came by.

use std::sync::Arc;

use axum::Json;
use serde_json::Value;
use spool_edge::{
    ApiError,
    writes::{Answer, ChatWrites, Credentials, NewMessage, Posted, Revise, Written, revise_route_and_body},
};

use crate::{ChatApi, MAX_BODY_BYTES, messages};

/// The chat API's writes, called in process.
pub(crate) struct InProcess(pub(crate) Arc<ChatApi>);

/// `413` for a body over `limit` bytes, as the route's body limit refuses it.
fn within(body: &Value, limit: usize) -> Result<(), ApiError> {
    if body.to_string().len() > limit {
        return Err(ApiError::TooLarge(
            "the request body is larger than this route takes".to_owned(),
        ));
    }
    Ok(())
}

impl ChatWrites for InProcess {
    fn post_message(&self, credentials: Credentials, session: &str, message: NewMessage) -> Written<Posted> {
        let api = self.0.clone();
        let session = session.to_owned();
        Box::pin(async move {
            let authorization = credentials.authorization.as_ref().and_then(|v| v.to_str().ok());
            let caller = api.admit(authorization, &credentials.extensions, true).await?;
            within(&message.body(), messages::MAX_MESSAGE_BODY_BYTES)?;
            let tools = serde_json::from_value(Value::Array(message.client_tools))
                .map_err(|e| ApiError::BadRequest(format!("the body is not valid here: {e}")))?;
            let message =
                messages::NewMessage::text(message.content, Some(message.client_message_id)).with_client_tools(tools);
            let (_, Json(accepted)) = api.user_message(&caller, &session, message).await?;
            Ok(Posted {
                seq: accepted.seq,
                turn_id: accepted.turn_id,
                duplicate: accepted.duplicate,
            })
        })
    }

    fn answer(&self, credentials: Credentials, session: &str, answer: Answer) -> Written<Posted> {
        let api = self.0.clone();
        let session = session.to_owned();
        Box::pin(async move {
            let authorization = credentials.authorization.as_ref().and_then(|v| v.to_str().ok());
            let caller = api.admit(authorization, &credentials.extensions, true).await?;
            within(&answer.route_and_body().1, MAX_BODY_BYTES)?;
            let (_, Json(submitted)) = api.give(&caller, &session, answer).await?;
            Ok(Posted {
                seq: submitted.seq,
                turn_id: submitted.turn_id,
                duplicate: false,
            })
        })
    }

    fn revise(&self, credentials: Credentials, session: &str, revise: Revise) -> Written<Posted> {
        let api = self.0.clone();
        let session = session.to_owned();
        Box::pin(async move {
            let authorization = credentials.authorization.as_ref().and_then(|v| v.to_str().ok());
            let caller = api.admit(authorization, &credentials.extensions, true).await?;
            within(&revise_route_and_body(&revise).1, messages::MAX_MESSAGE_BODY_BYTES)?;
            let (_, Json(accepted)) = api.revise(&caller, &session, revise).await?;
            Ok(Posted {
                seq: accepted.seq,
                turn_id: accepted.turn_id,
                duplicate: accepted.duplicate,
            })
        })
    }
}
