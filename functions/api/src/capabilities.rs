//! # `PUT /v1/sessions/{id}/capabilities`: a companion's capabilities on a session
//!
//! The handshake source design: a companion library (on the user's machine) holds a token from
//! `POST /v1/handshake` issued for its `library_id`, and presents it to enable capabilities
//! (such as `context_for_query`) on a session. Spool verifies the token's signature and expiry,
//! that it is the caller's organization's and that its `library_id` is the one named, and
//! enables the capabilities both asked for and granted: the answer is the design's Step 3,
//! `{session_id, status: "authenticated", library_id, capabilities_enabled}`, with a `reason`
//! when that enables nothing (the key behind the token carries none of what was asked, and the
//! reason names the `spool admin create-api-key` command that makes one that does). A token
//! that is expired, altered,
//! another organization's, for another library or not a companion's leaves the session in
//! anonymous mode: working, with no capabilities, the answer
//! `{session_id, status: "rejected", reason, capabilities_enabled: []}`; it is logged
//! as a security event. Every attempt is audited. A companion's token is good for nothing else:
//! the bearer check refuses it.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};
use serde_json::json;
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::ToSchema;

use crate::{
    ChatApi, audit,
    extract::{Caller, Id, JsonBody, PathOf, rfc3339_ms},
};

/// A companion's request for capabilities on a session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CapabilityRequest {
    /// The companion library the token was issued for.
    library_id: String,
    /// The companion's token (from `POST /v1/handshake` with this `library_id`).
    jwt: String,
    /// The capabilities to enable, e.g. `context_for_query`.
    capabilities: Vec<String>,
}

/// Whether capabilities were enabled.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CapabilityStatus {
    /// The token was valid: what it grants of what was asked is enabled.
    Authenticated,
    /// The token was not valid here: the session has no capabilities now.
    Rejected,
}

/// The outcome of a capability request.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CapabilityOutcome {
    session_id: String,
    status: CapabilityStatus,
    /// The companion library the token was issued for (when `authenticated`).
    #[serde(skip_serializing_if = "Option::is_none")]
    library_id: Option<String>,
    /// The session's capabilities now.
    capabilities_enabled: Vec<String>,
    /// Why the request was rejected, or why an authenticated one enabled nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// `PUT /v1/sessions/{id}/capabilities` `{library_id, jwt, capabilities}` →
/// `{session_id, status: "authenticated", library_id, capabilities_enabled, reason?}`, or
/// `{session_id, status: "rejected", reason, capabilities_enabled: []}`.
#[utoipa::path(put, path = "/v1/sessions/{id}/capabilities", tag = "sessions", params(("id" = String, Path, description = "The session")),
    request_body = CapabilityRequest,
    responses((status = 200, description = "Authenticated (with why when it enables nothing), or rejected with the reason (the session keeps working without them)", body = CapabilityOutcome),
        (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn put_capabilities(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(request): JsonBody<CapabilityRequest>,
) -> Result<Json<CapabilityOutcome>, ApiError> {
    if request.capabilities.len() > 32 || request.capabilities.iter().any(|c| c.is_empty() || c.len() > 64) {
        return Err(ApiError::BadRequest(
            "`capabilities` must be at most 32 names of 1 to 64 characters".to_owned(),
        ));
    }
    let mut session = api.session_of(&caller, &id).await?;
    let verdict = match api.keys.verify_companion(&request.jwt) {
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
        "reason": verdict.as_ref().map_or_else(|e| Some(e.clone()), |enabled| nothing_enabled(&request.capabilities, enabled, caller.org())),
        "by": caller.0.sub,
    });
    audit::record(api.aggregates.as_ref(), caller.org(), event).await?;
    match verdict {
        Ok(mut enabled) => {
            enabled.sort();
            enabled.dedup();
            api.records
                .set_capabilities(caller.org(), &mut session, enabled.clone())
                .await?;
            Ok(Json(CapabilityOutcome {
                session_id: id.into(),
                status: CapabilityStatus::Authenticated,
                library_id: Some(request.library_id),
                reason: nothing_enabled(&request.capabilities, &enabled, caller.org()),
                capabilities_enabled: enabled,
            }))
        }
        Err(reason) => {
            // A token that is expired, altered or another's leaves the chat in anonymous mode:
            // it keeps working, without what a companion enables.
            tracing::warn!(security = true, org = %caller.org(), session = %id, library_id = %request.library_id, %reason, "companion token refused; the chat is in anonymous mode");
            if !session.capabilities.is_empty() {
                api.records
                    .set_capabilities(caller.org(), &mut session, Vec::new())
                    .await?;
            }
            Ok(Json(CapabilityOutcome {
                session_id: id.into(),
                status: CapabilityStatus::Rejected,
                library_id: None,
                capabilities_enabled: Vec::new(),
                reason: Some(reason),
            }))
        }
    }
}

/// Why a valid token enabled nothing of what was `requested` (`None` when it enabled some).
fn nothing_enabled(requested: &[String], enabled: &[String], org: &str) -> Option<String> {
    if !enabled.is_empty() {
        return None;
    }
    if requested.is_empty() {
        return Some("no capabilities were asked for".to_owned());
    }
    let mut missing = requested.to_vec();
    missing.sort();
    missing.dedup();
    let flags: String = missing.iter().map(|c| format!(" --capability {c}")).collect();
    Some(format!(
        "the key behind this token does not carry {}; make one with `spool admin create-api-key {org}{flags}`",
        missing.join(" or ")
    ))
}
