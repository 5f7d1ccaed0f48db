//! # `PUT /v1/sessions/{id}/capabilities`: a companion's capabilities on a session
//!
//! The handshake source design: a companion library (on the user's machine) holds a token from
//! `POST /v1/handshake` issued for its `library_id`, and presents it to enable capabilities
//! (such as `context_for_query`) on a session. Spool verifies the token's signature and expiry,
//! that it is the caller's organization's and that its `library_id` is the one named, and
//! enables the capabilities both asked for and granted. Any failure leaves the session working
//! without them: the answer says `rejected` and why, and changes nothing. Every attempt is
//! audited.

use std::sync::Arc;

use axum::{Json, body::Bytes, extract::State};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    ApiError, ChatApi, audit,
    extract::{Caller, Id, PathOf, json_body, rfc3339_ms},
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapabilityRequest {
    library_id: String,
    jwt: String,
    capabilities: Vec<String>,
}

/// `PUT /v1/sessions/{id}/capabilities` `{library_id, jwt, capabilities}` →
/// `{session_id, status: "enabled" | "rejected", capabilities_enabled, reason?}`.
pub(crate) async fn put_capabilities(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: CapabilityRequest = json_body(&body)?;
    if request.capabilities.len() > 32 || request.capabilities.iter().any(|c| c.is_empty() || c.len() > 64) {
        return Err(ApiError::BadRequest(
            "`capabilities` must be at most 32 names of 1 to 64 characters".to_owned(),
        ));
    }
    let mut session = api.session_of(&caller, &id).await?;
    let verdict = match api.keys.verify(&request.jwt) {
        Err(e) => Err(e.to_string()),
        Ok(claims) if claims.org != caller.org() => Err("the token is another organization's".to_owned()),
        Ok(claims) if claims.library_id.as_deref() != Some(request.library_id.as_str()) => {
            Err(format!("the token was not issued for library `{}`", request.library_id))
        }
        Ok(claims) => Ok(request
            .capabilities
            .iter()
            .filter(|c| claims.can(c))
            .cloned()
            .collect::<Vec<_>>()),
    };
    let now = api.clock.now_ms();
    let event = json!({
        "type": "capabilities",
        "ts": rfc3339_ms(now),
        "session_id": id,
        "library_id": request.library_id,
        "requested": request.capabilities,
        "outcome": if verdict.is_ok() { "enabled" } else { "rejected" },
        "enabled": verdict.as_ref().ok(),
        "reason": verdict.as_ref().err(),
        "by": caller.0.sub,
    });
    audit::record(api.log.as_ref(), caller.org(), &event).await?;
    match verdict {
        Ok(mut enabled) => {
            enabled.sort();
            enabled.dedup();
            session.capabilities.clone_from(&enabled);
            api.metadata.update_session(caller.org(), &session).await?;
            Ok(Json(
                json!({ "session_id": id, "status": "enabled", "capabilities_enabled": enabled }),
            ))
        }
        Err(reason) => {
            tracing::info!(session = %id, %reason, "capabilities rejected");
            Ok(Json(json!({
                "session_id": id,
                "status": "rejected",
                "capabilities_enabled": session.capabilities,
                "reason": reason,
            })))
        }
    }
}
