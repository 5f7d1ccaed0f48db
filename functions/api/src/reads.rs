//! # `POST /v1/read-tokens`: a read grant for one stream
//!
//! Live readers behind a CDN cost one origin request per chat rather than per reader when they
//! share a cache key, and a bearer token is personal. A read grant ([`spool_auth::ReadGrant`])
//! names one stream of the caller's organization and is the same string for every caller who
//! asks for it within a five-minute window, so readers who use it (`?read_token=`, no
//! `Authorization` header) share the CDN's cached and collapsed answers; the stream routes
//! verify it on every request that reaches them, so a reader without a valid grant for that
//! stream is refused. The grant only reads, expires in 5 to 10 minutes, and cannot be revoked:
//! ask again when it nears its end.

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};
use spool_auth::ReadGrant;
use spool_edge::{ApiError, ErrorBody, Refusals};
use spool_log::{clock::rfc3339_ms, stream::StreamPath};
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{Caller, JsonBody},
};

/// The stream to read.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadTokenRequest {
    /// The stream, as the stream routes name it: `sessions/{id}` for a chat's events,
    /// `workspaces/{id}/feed`, `audit`, or a stream of your own.
    path: String,
}

/// A read grant and where to use it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReadToken {
    /// The stream.
    path: String,
    /// The grant: send it as `?read_token=` on `GET`/`HEAD /v1/stream/{path}`, without an
    /// `Authorization` header.
    read_token: String,
    /// When it stops working (RFC 3339); ask for a new one before.
    expires_at: String,
    /// The stream's URL with the grant, to which a reader adds `offset`, `live` and `cursor`.
    url: String,
}

/// `path` as a URL path: every byte but unreserved ones and `/` percent-encoded (a stream's
/// path may hold spaces, `#`, `?`, `%` or any other printable character).
fn url_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `POST /v1/read-tokens` `{path}` → `{path, read_token, expires_at, url}`.
#[utoipa::path(post, path = "/v1/read-tokens", tag = "streams",
    request_body = ReadTokenRequest,
    responses((status = 200, description = "A read grant for the stream, shared by every reader who asks in the same five minutes", body = ReadToken),
        (status = 404, description = "No such stream in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn read_token(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    JsonBody(request): JsonBody<ReadTokenRequest>,
) -> Result<Json<ReadToken>, ApiError> {
    let path = StreamPath::parse(&request.path)?;
    // The grant reads what the caller's token reads: any stream of its organization that exists.
    api.chats.check_stream(caller.org(), &path).await?;
    let grant = ReadGrant::at(caller.org(), path.as_str(), api.clock.now_ms().div_euclid(1000));
    let read_token = api
        .keys
        .issue_read(&grant)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(Json(ReadToken {
        url: format!(
            "{}{}?read_token={read_token}",
            spool_edge::STREAM_PREFIX,
            url_path(path.as_str())
        ),
        path: path.as_str().to_owned(),
        expires_at: rfc3339_ms(grant.exp * 1000),
        read_token,
    }))
}
