//! # What handlers take from requests: the caller and JSON bodies

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::{StatusCode, header, request::Parts},
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use spool_auth::Claims;
use spool_chat::listing;
use spool_edge::ApiError;

use crate::ChatApi;

/// The verified caller of a request: its token's claims (or the open organization's, under
/// `spool serve --no-auth`). A request without a valid token is refused with `401` before the
/// handler runs.
#[derive(Debug, Clone)]
pub struct Caller(pub Claims);

impl Caller {
    /// The organization the caller acts for.
    pub fn org(&self) -> &str {
        &self.0.org
    }
}

impl FromRequestParts<Arc<ChatApi>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<ChatApi>) -> Result<Self, ApiError> {
        let authorization = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        api.admit(authorization, &parts.extensions, !parts.method.is_safe())
            .await
    }
}

impl ChatApi {
    /// The caller of a request with `authorization` and `extensions`: its token verified, not
    /// revoked, not a runner's (those reach only the runner routes, [`RunnerCaller`]), and (a
    /// `write`) within the rate limits of writes.
    pub(crate) async fn admit(
        &self,
        authorization: Option<&str>,
        extensions: &axum::http::Extensions,
        write: bool,
    ) -> Result<Caller, ApiError> {
        let caller = self.verified(authorization, extensions).await?;
        if caller.0.is_runner() {
            return Err(ApiError::Forbidden(spool_auth::RUNNER_ONLY.to_owned()));
        }
        if write {
            let address = spool_edge::client_address(extensions);
            spool_edge::limit_write(&self.limiter, caller.org(), address, false)?;
        }
        Ok(caller)
    }

    /// The caller of a request with `authorization`: its token verified and not revoked.
    async fn verified(
        &self,
        authorization: Option<&str>,
        extensions: &axum::http::Extensions,
    ) -> Result<Caller, ApiError> {
        // The chat API's routes take their token in the header only: tokens in URLs are for
        // the stream routes' EventSource readers.
        let caller = self
            .access
            .caller(authorization, None, self.clock.now_ms().div_euclid(1000))
            .map(Caller)
            .map_err(|e| ApiError::Unauthorized(e.to_string()))?;
        if let Some(revocations) = &self.revocations
            && revocations.is_revoked(&caller.0.sub).await
        {
            return Err(ApiError::Unauthorized(REVOKED.to_owned()));
        }
        spool_edge::note_caller(extensions, caller.org());
        Ok(caller)
    }
}

/// The verified caller of a runner route: a runner's token ([`spool_auth::Capability::Runner`]),
/// or anyone under `spool serve --no-auth`. Any other token is refused with `403`, as a
/// runner's token is everywhere else.
#[derive(Debug, Clone)]
pub struct RunnerCaller(pub Claims);

impl RunnerCaller {
    /// The organization the runner serves.
    pub fn org(&self) -> &str {
        &self.0.org
    }
}

impl FromRequestParts<Arc<ChatApi>> for RunnerCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<ChatApi>) -> Result<Self, ApiError> {
        let authorization = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let Caller(claims) = api.verified(authorization, &parts.extensions).await?;
        if !claims.is_runner() && !matches!(api.access, spool_auth::Access::Open { .. }) {
            return Err(ApiError::Forbidden(spool_auth::RUNNERS_ONLY.to_owned()));
        }
        Ok(Self(claims))
    }
}

/// The refusal of a token whose API key was revoked.
pub const REVOKED: &str = "the API key this token was issued for has been revoked; use another key";

/// A query string parsed into `T`; a malformed one gets the contract's JSON `400` (axum's own
/// `Query` answers in plain text).
#[derive(Debug)]
pub struct QueryOf<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryOf<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Self(q.0))
            .map_err(|e| ApiError::BadRequest(format!("the query string is not valid here: {}", e.body_text())))
    }
}

/// An id a client names (in a path, a query or a body): 1 to 128 characters, no control
/// characters, no `/`. Anything else cannot name a record, and is refused before any store sees
/// it (a 3,000-byte id would otherwise reach DynamoDB's key limits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Id(String);

impl TryFrom<String> for Id {
    type Error = String;

    fn try_from(id: String) -> Result<Self, String> {
        if id.is_empty() || id.len() > 128 || id.chars().any(|c| c.is_control() || c == '/') {
            Err("an id is 1 to 128 characters, without `/` or control characters".to_owned())
        } else {
            Ok(Self(id))
        }
    }
}

impl utoipa::PartialSchema for Id {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(128))
            .description(Some("An id: 1 to 128 characters, without `/` or control characters"))
            .into()
    }
}

impl utoipa::ToSchema for Id {}

impl std::ops::Deref for Id {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Id> for String {
    fn from(id: Id) -> Self {
        id.0
    }
}

/// Path parameters parsed into `T`; a malformed one (bad percent-encoding) gets the contract's
/// JSON `400`.
#[derive(Debug)]
pub struct PathOf<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathOf<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Self(p.0))
            .map_err(|e| ApiError::BadRequest(format!("the path is not valid: {}", e.body_text())))
    }
}

/// A request body's bytes. A body over the route's limit gets the contract's JSON `413` (axum's
/// own rejection answers in plain text).
#[derive(Debug)]
pub struct BodyBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for BodyBytes {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(request, state).await.map(Self).map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge("the request body is larger than this route takes".to_owned())
            } else {
                ApiError::BadRequest(format!("the request body could not be read: {}", e.body_text()))
            }
        })
    }
}

/// A JSON request body parsed into `T` ([`json_body`]); any refusal is the contract's JSON.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let BodyBytes(body) = BodyBytes::from_request(request, state).await?;
        json_body(&body).map(Self)
    }
}

/// Parses a JSON request body into `T`, or says what is wrong with it (`400`). Every body the
/// API takes is a JSON object: serde would also read a struct from an array of its fields in
/// order (`["hi"]` as a message), which no client means, so anything else is refused first.
pub fn json_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::BadRequest("the request needs a JSON body".to_owned()));
    }
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::BadRequest(
            "the body must be a JSON object, like {\"field\": value}".to_owned(),
        ));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("the body is not valid here: {e}")))
}

/// A body every field of which may be left out: no body at all (no content type either) is
/// `T::default()`; a body that says it is something is read as [`json_body`] reads one (an
/// empty one is then `400`).
pub fn optional_json_body<T: DeserializeOwned + Default>(
    headers: &axum::http::HeaderMap,
    body: &Bytes,
) -> Result<T, ApiError> {
    if body.is_empty() && !headers.contains_key(axum::http::header::CONTENT_TYPE) {
        Ok(T::default())
    } else {
        json_body(body)
    }
}

pub use spool_chat::settings::Patch;
pub use spool_log::clock::rfc3339_ms;

/// A list's page size: `limit` as sent (1 to [`listing::MAX_LIMIT`]), or
/// [`listing::DEFAULT_LIMIT`].
pub fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(listing::DEFAULT_LIMIT);
    if (1..=listing::MAX_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::BadRequest(format!("`limit` is 1 to {}", listing::MAX_LIMIT)))
    }
}

/// Where a page of the list `scope` names starts: after the position its `cursor` names (a
/// malformed or foreign cursor is a `400` that says what to do), or at the newest.
pub fn page_after(scope: &[&str], cursor: Option<&str>) -> Result<Option<listing::After>, ApiError> {
    cursor
        .map(|c| listing::decode_cursor(scope, c))
        .transpose()
        .map_err(ApiError::from)
}

/// The `next_cursor` a page answers with: `null` on the last page.
pub fn next_cursor(scope: &[&str], next: Option<&listing::After>) -> Option<String> {
    next.map(|after| listing::encode_cursor(scope, after))
}
