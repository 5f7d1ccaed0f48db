//! # Files in chats over HTTP
//!
//! Three steps, the same on both backends: `POST /v1/sessions/{id}/attachments` declares a
//! file and answers where its bytes go (`upload`: a pre-signed S3 `PUT` on AWS, Spool's own
//! `PUT /v1/uploads/{grant}` under `spool serve`); the client sends them there; `POST
//! …/attachments/{attachment_id}/complete` checks them and records the file in the chat.
//! `GET …/attachments/{attachment_id}` hands the file back (a redirect to a pre-signed S3 `GET`;
//! streamed by `spool serve`) as a download that a browser never renders in place.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use spool_auth::UploadGrant;
use spool_chat::{
    attachment::{Attachment, AttachmentStatus, Transfer, content_disposition},
    service::{Completion, NewUpload, Received},
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use spool_log::clock::rfc3339_ms;
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, PathOf},
    sessions::SESSION_ID,
};

const ATTACHMENT_ID: &str = "The attachment (`att_…`)";

/// A file a client is about to upload.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewAttachment {
    /// Its name; reduced to a safe base name (no folders, no control characters, at most 200
    /// characters).
    filename: String,
    /// Its media type (`application/octet-stream` when empty).
    #[serde(default)]
    content_type: String,
    /// Its exact size in bytes; over `SPOOL_MAX_ATTACHMENT_BYTES` is refused with `413`.
    size: u64,
    /// The SHA-256 of its bytes (64 hex digits), checked when it is completed.
    #[serde(default)]
    sha256: Option<String>,
}

/// A file of a chat.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttachmentView {
    /// Its id.
    id: String,
    /// Its safe base name.
    filename: String,
    /// Its media type.
    content_type: String,
    /// Its size in bytes.
    size: u64,
    /// `uploading` until it is completed.
    status: AttachmentStatus,
    /// Who uploaded it.
    author: String,
    /// When it was declared (RFC 3339).
    created_at: String,
    /// When it was completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<String>,
}

impl From<&Attachment> for AttachmentView {
    fn from(a: &Attachment) -> Self {
        Self {
            id: a.id.clone(),
            filename: a.filename.clone(),
            content_type: a.content_type.clone(),
            size: a.size,
            status: a.status,
            author: a.author.clone(),
            created_at: rfc3339_ms(a.created_ms),
            completed_at: a.completed_ms.map(rfc3339_ms),
        }
    }
}

/// Where and how to send a file's bytes.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UploadRequest {
    /// The HTTP method (`PUT`).
    method: String,
    /// The URL: absolute (storage's), or relative to the API's base (`/v1/uploads/…`).
    url: String,
    /// Headers to send with it, exactly (the signature covers them).
    headers: BTreeMap<String, String>,
}

/// A file declared.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttachmentDeclared {
    /// Its id, to complete it and to name it in a message's `files`.
    attachment_id: String,
    /// The file, as recorded.
    attachment: AttachmentView,
    /// Where to send its bytes: once, exactly `size` bytes, before `expires_at`.
    upload: UploadRequest,
    /// When the upload URL stops working (RFC 3339).
    expires_at: String,
}

/// A file recorded in its chat.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttachmentCompleted {
    /// The file.
    attachment: AttachmentView,
    /// Its `system` event's sequence number.
    seq: u64,
    /// The earlier file of the same name it replaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    replaces: Option<String>,
}

/// A chat's files.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttachmentList {
    /// Oldest first.
    attachments: Vec<AttachmentView>,
}

/// `POST /v1/sessions/{id}/attachments` `{filename, content_type, size, sha256?}`: declares a
/// file and answers where to send its bytes.
#[utoipa::path(post, path = "/v1/sessions/{id}/attachments", tag = "sessions",
    params(("id" = String, Path, description = SESSION_ID)), request_body = NewAttachment,
    responses((status = 201, description = "Declared: send the bytes as `upload` says, then complete it", body = AttachmentDeclared),
        (status = 404, description = "No such session in the caller's organization", body = ErrorBody),
        (status = 409, description = "The chat has as many files as it may (`limit_reached`)", body = ErrorBody),
        (status = 413, description = "Larger than `SPOOL_MAX_ATTACHMENT_BYTES`", body = ErrorBody), Refusals))]
pub(crate) async fn declare(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(new): JsonBody<NewAttachment>,
) -> Result<impl IntoResponse, ApiError> {
    api.limit_create(&caller)?;
    let session = api.session_of(&caller, &id).await?;
    let upload = NewUpload {
        filename: new.filename,
        content_type: new.content_type,
        size: new.size,
        sha256: new.sha256,
        author: caller.0.sub.clone(),
    };
    let declared = api.chats.declare_upload(caller.org(), &session, upload).await?;
    let a = &declared.attachment;
    let upload = match declared.transfer {
        Transfer::Direct { method, url, headers } => UploadRequest {
            method,
            url,
            headers: headers.into_iter().collect(),
        },
        Transfer::ThroughSpool => {
            let grant = UploadGrant {
                org: caller.org().to_owned(),
                session_id: session.id.clone(),
                attachment_id: a.id.clone(),
                size: a.size,
                content_type: a.content_type.clone(),
                exp: a.upload_expires_ms.div_euclid(1000),
            };
            let token = api
                .keys
                .issue_upload(&grant)
                .map_err(|e| ApiError::Domain(spool_log::error::Error::unavailable("sign an upload URL", e)))?;
            UploadRequest {
                method: "PUT".to_owned(),
                url: format!("/v1/uploads/{token}"),
                headers: BTreeMap::from([("content-type".to_owned(), a.content_type.clone())]),
            }
        }
    };
    let body = AttachmentDeclared {
        attachment_id: a.id.clone(),
        attachment: a.into(),
        upload,
        expires_at: rfc3339_ms(a.upload_expires_ms),
    };
    Ok((StatusCode::CREATED, Json(body)))
}

/// `GET /v1/sessions/{id}/attachments`: the chat's files, oldest first.
#[utoipa::path(get, path = "/v1/sessions/{id}/attachments", tag = "sessions",
    params(("id" = String, Path, description = SESSION_ID)),
    responses((status = 200, description = "The chat's files", body = AttachmentList),
        (status = 404, description = "No such session in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<AttachmentList>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let attachments = api.chats.attachments(caller.org(), &session.id).await?;
    Ok(Json(AttachmentList {
        attachments: attachments.iter().map(AttachmentView::from).collect(),
    }))
}

/// `POST /v1/sessions/{id}/attachments/{attachment_id}/complete`: checks the uploaded bytes (their
/// size, and their SHA-256 if one was declared) and records the file in the chat as a `system`
/// event. Completing it again answers the same.
#[utoipa::path(post, path = "/v1/sessions/{id}/attachments/{attachment_id}/complete", tag = "sessions",
    params(("id" = String, Path, description = SESSION_ID), ("attachment_id" = String, Path, description = ATTACHMENT_ID)),
    responses((status = 200, description = "Recorded in the chat", body = AttachmentCompleted),
        (status = 404, description = "No such file in this chat of the caller's organization", body = ErrorBody),
        (status = 409, description = "Its bytes are not all there, or it expired long ago (`upload_incomplete`), or they are not the declared ones (`checksum_mismatch`)", body = ErrorBody),
        Refusals))]
pub(crate) async fn complete(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf((id, attachment_id)): PathOf<(Id, Id)>,
) -> Result<Json<AttachmentCompleted>, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    match api
        .chats
        .complete_upload(caller.org(), &session, &attachment_id)
        .await?
    {
        Completion::Recorded {
            attachment,
            seq,
            replaces,
        } => Ok(Json(AttachmentCompleted {
            attachment: attachment.as_ref().into(),
            seq,
            replaces,
        })),
        Completion::NotUploaded(stored) => {
            let declared = api.chats.attachment(caller.org(), &session, &attachment_id).await?.size;
            Err(ApiError::UploadIncomplete(match stored {
                None => "nothing was uploaded for this file yet; send its bytes to the upload URL, then complete it"
                    .to_owned(),
                Some(n) => format!("the upload has {n} bytes, not the {declared} declared; declare the file again"),
            }))
        }
        Completion::ChecksumMismatch => Err(ApiError::ChecksumMismatch(
            "the uploaded bytes do not have the declared SHA-256; declare the file again and upload it whole"
                .to_owned(),
        )),
        Completion::Expired => Err(ApiError::UploadIncomplete(
            "this upload expired long ago and is being cleaned up; declare the file again".to_owned(),
        )),
    }
}

/// `GET /v1/sessions/{id}/attachments/{attachment_id}`: the file, as a download
/// (`Content-Disposition: attachment`, `X-Content-Type-Options: nosniff`): a `302` to a
/// short-lived storage URL on AWS, the bytes themselves under `spool serve`.
#[utoipa::path(get, path = "/v1/sessions/{id}/attachments/{attachment_id}", tag = "sessions",
    params(("id" = String, Path, description = SESSION_ID), ("attachment_id" = String, Path, description = ATTACHMENT_ID)),
    responses((status = 200, description = "The file's bytes, with its media type", content_type = "*/*"),
        (status = 302, description = "Where to fetch it: a URL that works for a few minutes"),
        (status = 404, description = "No such completed file in this chat of the caller's organization", body = ErrorBody),
        Refusals))]
pub(crate) async fn download(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf((id, attachment_id)): PathOf<(Id, Id)>,
) -> Result<Response, ApiError> {
    let session = api.session_of(&caller, &id).await?;
    let (attachment, transfer) = api.chats.download(caller.org(), &session, &attachment_id).await?;
    let mut response = match transfer {
        Transfer::Direct { url, .. } => {
            let mut response = StatusCode::FOUND.into_response();
            let location = HeaderValue::from_str(&url)
                .map_err(|e| ApiError::Domain(spool_log::error::Error::unavailable("make a download URL", e)))?;
            response.headers_mut().insert(header::LOCATION, location);
            response
        }
        Transfer::ThroughSpool => {
            let reader = api.chats.read_file(caller.org(), &session.id, &attachment.id).await?;
            let stream = tokio_util::io::ReaderStream::with_capacity(reader, 256 * 1024);
            let mut response = Response::new(Body::from_stream(stream));
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(attachment.size));
            if let Ok(kind) = HeaderValue::from_str(&attachment.content_type) {
                headers.insert(header::CONTENT_TYPE, kind);
            }
            if let Ok(disposition) = HeaderValue::from_str(&content_disposition(&attachment.filename)) {
                headers.insert(header::CONTENT_DISPOSITION, disposition);
            }
            response
        }
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    Ok(response)
}

/// `PUT /v1/uploads/{grant}`: `spool serve`'s upload URL, as `POST …/attachments` hands it out
/// (on AWS the bytes go to S3 instead). The grant in the path is the credential: it names one
/// file, and expires with the URL; the request log never shows it. Exactly the declared bytes
/// are taken, once; bytes of another type or size use the URL up, and the file is declared
/// again.
#[utoipa::path(put, path = "/v1/uploads/{grant}", tag = "sessions", security(()),
    params(("grant" = String, Path, description = "The upload grant, as the upload URL has it")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file's bytes, exactly as declared"),
    responses((status = 204, description = "Stored; complete the file next"),
        (status = 400, description = "Not the declared size or type: the URL is used up, declare the file again", body = ErrorBody),
        (status = 403, description = "The URL is not valid, has expired, or was used up by a refused upload", body = ErrorBody),
        (status = 409, description = "Already uploaded (a URL works once)", body = ErrorBody)))]
pub(crate) async fn upload(
    State(api): State<Arc<ChatApi>>,
    PathOf(grant): PathOf<String>,
    request: Request,
) -> Result<StatusCode, ApiError> {
    let grant = api
        .keys
        .verify_upload(&grant)
        .map_err(|_| ApiError::Forbidden(FORBIDDEN.to_owned()))?;
    let sent_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let stream = request
        .into_body()
        .into_data_stream()
        .map_err(|e| std::io::Error::other(e.to_string()));
    let body = Box::pin(tokio_util::io::StreamReader::new(stream));
    match api
        .chats
        .receive_upload(&grant.org, &grant.session_id, &grant.attachment_id, &sent_type, body)
        .await?
    {
        Received::Stored => Ok(StatusCode::NO_CONTENT),
        Received::NoFile => Err(ApiError::Forbidden(FORBIDDEN.to_owned())),
        Received::AlreadyUploaded => Err(ApiError::Conflict(
            "this file is uploaded already; an upload URL works once".to_owned(),
        )),
    }
}

const FORBIDDEN: &str = "this upload URL is not valid, has expired, or was used up by a refused upload; declare the \
     file again with POST /v1/sessions/{id}/attachments";
