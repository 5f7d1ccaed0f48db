//! # `POST /v1/handshake`: an API key for a token
//!
//! The body is `{"api_key", "version"?, "user_agent"?, "library_id"?}`; the answer is
//! `{"jwt", "token_type", "org_id", "capabilities", "expires_at", "library_id"?}`. The token
//! is HS256, valid for a day, with the key's organization and capabilities; every other route
//! verifies it without a lookup. Every handshake with a known key is recorded in the
//! organization's audit stream before the token is returned; an unknown key and a wrong secret
//! get the same `401`, so the answer does not tell which key ids exist.

use std::sync::Arc;

use axum::{Json, extract::State, http::header, response::IntoResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;
use spool_auth::{ApiKey, Claims, Limit};
use spool_edge::{ApiError, ErrorBody};
use utoipa::ToSchema;

use crate::{
    ChatApi, audit,
    extract::{BodyBytes, json_body, rfc3339_ms},
};

/// The largest handshake body accepted.
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024;

const MAX_CLIENT_FIELD_CHARS: usize = 256;

/// A handshake: an API key for a token.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct HandshakeRequest {
    /// `spool_{key_id}_{secret}`, from `spool admin create-api-key` (or `spool serve`'s output).
    api_key: String,
    /// The client's protocol version.
    #[serde(default)]
    version: Option<String>,
    /// The client, e.g. `my-app/1.2`.
    #[serde(default)]
    user_agent: Option<String>,
    /// A companion library's id, carried in the token (for `PUT …/capabilities`).
    #[serde(default)]
    library_id: Option<String>,
}

/// The answer to a handshake.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HandshakeResponse {
    jwt: String,
    token_type: &'static str,
    org_id: String,
    capabilities: Vec<String>,
    #[schema(format = DateTime)]
    expires_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    library_id: Option<String>,
}

fn check_field(name: &str, value: Option<&str>) -> Result<(), ApiError> {
    match value {
        Some(v) if v.chars().count() > MAX_CLIENT_FIELD_CHARS => Err(ApiError::BadRequest(format!(
            "`{name}` is longer than {MAX_CLIENT_FIELD_CHARS} characters"
        ))),
        Some(v) if v.chars().any(char::is_control) => {
            Err(ApiError::BadRequest(format!("`{name}` contains control characters")))
        }
        _ => Ok(()),
    }
}

fn check_library_id(value: Option<&str>) -> Result<(), ApiError> {
    match value {
        Some(v)
            if v.is_empty()
                || v.len() > 128
                || !v
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) =>
        {
            Err(ApiError::BadRequest(
                "`library_id` must be 1 to 128 letters, digits, `-`, `_` or `.`".to_owned(),
            ))
        }
        _ => Ok(()),
    }
}

/// `POST /v1/handshake`.
///
/// A token is a credential: the answer is never stored by a cache (`Cache-Control: no-store`).
#[utoipa::path(post, path = "/v1/handshake", tag = "handshake", security(()), request_body = HandshakeRequest,
    responses((status = 200, description = "A token valid for 24 hours", body = HandshakeResponse),
        (status = 400, description = "The body is not a handshake", body = ErrorBody),
        (status = 401, description = "The API key is not valid", body = ErrorBody),
        (status = 413, description = "The body is larger than 16 KiB", body = ErrorBody),
        (status = 429, description = "Too many handshakes from this address or with this key; retry after `Retry-After` seconds", body = ErrorBody),
        (status = 503, description = "The store is unavailable for a moment; retry", body = ErrorBody)))]
pub(crate) async fn handshake(
    State(api): State<Arc<ChatApi>>,
    extensions: axum::http::Extensions,
    BodyBytes(body): BodyBytes,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(address) = spool_edge::client_address(&extensions) {
        api.limiter.check(Limit::HandshakeFromAddress, &address.to_string())?;
    }
    let request: HandshakeRequest = json_body(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "{e}; send JSON like {{\"api_key\": \"spool_…\", \"version\": \"1\", \"user_agent\": \"…\"}}"
        ))
    })?;
    check_field("version", request.version.as_deref())?;
    check_field("user_agent", request.user_agent.as_deref())?;
    check_library_id(request.library_id.as_deref())?;
    let refused = || ApiError::Unauthorized("the API key is not valid; check it or make a new one".to_owned());

    let key = ApiKey::parse(&request.api_key).map_err(|_| refused())?;
    api.limiter.check(Limit::HandshakeWithKey, key.key_id())?;
    let found = api.api_keys.key(key.key_id()).await?;
    if let Some(record) = &found {
        spool_edge::note_caller(&extensions, &record.org_id);
    }
    let Some(record) = found else {
        tracing::warn!(key_id = %key.key_id(), "handshake with an unknown API key");
        return Err(refused());
    };
    let now_ms = api.clock.now_ms();
    let accepted = key.matches(&record.secret_hash);
    let mut event = json!({
        "type": "handshake",
        "ts": rfc3339_ms(now_ms),
        "key_id": record.key_id,
        "outcome": if accepted { "accepted" } else { "refused" },
        "version": request.version,
        "user_agent": request.user_agent,
        "library_id": request.library_id,
    });
    // Refusals are recorded boundedly: the first of a minute, with the count left out before.
    let record_it = if accepted {
        true
    } else {
        match api.refusals.admit(&record.key_id) {
            Some(left_out) => {
                event["refused_unrecorded_before"] = json!(left_out);
                true
            }
            None => false,
        }
    };
    if record_it {
        audit::record(api.aggregates.as_ref(), &record.org_id, event).await?;
    }
    if !accepted {
        tracing::warn!(key_id = %record.key_id, org = %record.org_id, "handshake with a wrong API key secret");
        return Err(refused());
    }

    let mut claims = Claims::new(
        format!("key:{}", record.key_id),
        &record.org_id,
        now_ms.div_euclid(1000),
    );
    claims.capabilities.clone_from(&record.capabilities);
    claims.library_id.clone_from(&request.library_id);
    claims.version.clone_from(&request.version);
    let jwt = api
        .keys
        .issue(&claims)
        .map_err(|e| ApiError::Domain(spool_log::error::Error::unavailable("sign a token", e)))?;
    tracing::info!(key_id = %record.key_id, org = %record.org_id, "handshake accepted");
    let response = HandshakeResponse {
        jwt,
        token_type: "Bearer",
        org_id: record.org_id,
        capabilities: claims.capabilities,
        expires_at: rfc3339_ms(claims.exp * 1000),
        library_id: claims.library_id,
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(response)))
}
