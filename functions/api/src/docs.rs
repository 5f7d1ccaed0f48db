//! # `GET /v1/docs`: the knowledge base about using Spool well
//!
//! Documents shipped with Spool (`docs/knowledge/*.md`, in the binary): writing agent
//! instructions, setting up a workspace, troubleshooting. The built-in Spool agent's
//! instruction points to them; an operator may point it elsewhere (`SPOOL_KNOWLEDGE_BASE_URL`).

use axum::{
    Json,
    http::header,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use spool_edge::{ApiError, ErrorBody};
use utoipa::ToSchema;

use crate::extract::{Id, PathOf};

/// The documents: (name, title, markdown).
pub(crate) const DOCS: [(&str, &str, &str); 3] = [
    (
        "writing-agent-instructions",
        "Writing agent instructions",
        include_str!("../../../docs/knowledge/writing-agent-instructions.md"),
    ),
    (
        "workspace-setup",
        "Setting up a workspace",
        include_str!("../../../docs/knowledge/workspace-setup.md"),
    ),
    (
        "troubleshooting",
        "Troubleshooting",
        include_str!("../../../docs/knowledge/troubleshooting.md"),
    ),
];

/// A document of the knowledge base.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DocEntry {
    name: &'static str,
    title: &'static str,
    /// Where it is served (`text/markdown`).
    url: String,
}

/// The knowledge base.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DocList {
    docs: Vec<DocEntry>,
}

/// `GET /v1/docs`: the documents about using Spool well.
#[utoipa::path(get, path = "/v1/docs", tag = "meta", security(()),
    responses((status = 200, description = "The knowledge base's documents", body = DocList)))]
pub(crate) async fn list_docs() -> Json<DocList> {
    Json(DocList {
        docs: DOCS
            .iter()
            .map(|(name, title, _)| DocEntry {
                name,
                title,
                url: format!("/v1/docs/{name}"),
            })
            .collect(),
    })
}

/// `GET /v1/docs/{name}`: one document, as markdown.
#[utoipa::path(get, path = "/v1/docs/{name}", tag = "meta", security(()),
    params(("name" = String, Path, description = "The document (`workspace-setup`, …)")),
    responses((status = 200, description = "The document", content_type = "text/markdown"),
        (status = 404, description = "No such document", body = ErrorBody)))]
pub(crate) async fn get_doc(PathOf(name): PathOf<Id>) -> Result<Response, ApiError> {
    let (_, _, text) = DOCS
        .iter()
        .find(|(n, _, _)| *n == &*name)
        .ok_or_else(|| ApiError::NoRoute(format!("there is no document `{name}`; GET /v1/docs lists them")))?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/markdown; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        *text,
    )
        .into_response())
}
