//! # Slash commands over HTTP
//!
//! The organization's global commands (`/v1/slash-commands/{name}`) and each workspace's
//! (`/v1/workspaces/{id}/slash-commands/{name}`) are markdown files, sent and answered as
//! `text/markdown`; a workspace's list is every command its chats see, with where each comes
//! from. A chat resolves, previews and invokes what a person typed ([`run`]).

use std::sync::Arc;

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use spool_commands::{
    CommandAction, CommandKind, CommandScope, CommandSource, StoredCommand, check_name, markdown::SlashCommand,
    registry::Entry,
};
use spool_edge::{ApiError, ErrorBody, Refusals};
use utoipa::ToSchema;

use crate::{
    ChatApi,
    extract::{BodyBytes, Caller, Id, PathOf},
};

pub(crate) mod run;

/// The largest command file a route takes (the domain's limit, plus room).
pub(crate) const MAX_BODY_BYTES: usize = 128 * 1024;

const NAME: &str = "The command's name (`review`, `git:commit`)";
const WORKSPACE_ID: &str = "The workspace";

/// A stored command.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StoredView {
    /// Its name.
    name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// What its arguments are.
    #[serde(skip_serializing_if = "Option::is_none")]
    argument_hint: Option<String>,
    /// Prompt or action.
    kind: CommandKind,
    /// The action it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<CommandAction>,
    /// When it was saved (RFC 3339).
    updated_at: String,
}

impl StoredView {
    fn new(stored: &StoredCommand, command: &SlashCommand) -> Self {
        Self {
            name: stored.name.clone(),
            description: command.description.clone(),
            argument_hint: command.argument_hint.clone(),
            kind: command.kind(),
            action: command.action,
            updated_at: spool_log::clock::rfc3339_ms(stored.updated_ms),
        }
    }
}

/// Stored commands.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StoredList {
    commands: Vec<StoredView>,
}

/// A command as a chat sees it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EntryView {
    /// Its name.
    name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// What its arguments are.
    #[serde(skip_serializing_if = "Option::is_none")]
    argument_hint: Option<String>,
    /// Where it comes from.
    source: CommandSource,
    /// Prompt or action (absent when its file does not parse).
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<CommandKind>,
    /// The action it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<CommandAction>,
    /// The source of the command of the same name it hides.
    #[serde(skip_serializing_if = "Option::is_none")]
    overrides: Option<CommandSource>,
    /// The file it was read from, relative to the working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    /// Why its file does not parse (it cannot run until fixed).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl From<&Entry> for EntryView {
    fn from(e: &Entry) -> Self {
        Self {
            name: e.name.clone(),
            description: e.command.as_ref().and_then(|c| c.description.clone()),
            argument_hint: e.command.as_ref().and_then(|c| c.argument_hint.clone()),
            source: e.source,
            kind: e.kind(),
            action: e.command.as_ref().and_then(|c| c.action),
            overrides: e.overrides,
            file: e.file.clone(),
            error: e.error.clone(),
        }
    }
}

/// The commands of a workspace's chats.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EntryList {
    commands: Vec<EntryView>,
}

fn name_of(name: &str) -> Result<String, ApiError> {
    check_name(name)?;
    Ok(name.to_owned())
}

/// The markdown of a PUT: `text/markdown` (or `text/plain`), UTF-8.
fn markdown_of(headers: &HeaderMap, body: &Bytes) -> Result<String, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if content_type != "text/markdown" && content_type != "text/plain" {
        return Err(ApiError::UnsupportedMediaType(
            "send the command's markdown file itself, as `Content-Type: text/markdown`".to_owned(),
        ));
    }
    String::from_utf8(body.to_vec()).map_err(|_| ApiError::BadRequest("the command file is not UTF-8".to_owned()))
}

fn markdown_response(stored: &StoredCommand) -> Response {
    (
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        stored.markdown.clone(),
    )
        .into_response()
}

impl ChatApi {
    async fn scope_of(&self, caller: &Caller, workspace: Option<&str>) -> Result<CommandScope, ApiError> {
        Ok(match workspace {
            Some(id) => CommandScope::Workspace(self.workspace_of(caller, id).await?.id),
            None => CommandScope::Global,
        })
    }

    async fn stored_list(&self, caller: &Caller, scope: &CommandScope) -> Result<StoredList, ApiError> {
        let stored = self.metadata.commands(caller.org(), scope).await?;
        let commands = stored
            .iter()
            .filter_map(|s| {
                SlashCommand::parse(&s.name, &s.markdown)
                    .ok()
                    .map(|c| StoredView::new(s, &c))
            })
            .collect();
        Ok(StoredList { commands })
    }

    async fn get_stored(&self, caller: &Caller, scope: &CommandScope, name: &str) -> Result<Response, ApiError> {
        let name = name_of(name)?;
        match self.metadata.command(caller.org(), scope, &name).await? {
            Some(stored) => Ok(markdown_response(&stored)),
            None => Err(missing(&name)),
        }
    }

    async fn put_stored(
        &self,
        caller: &Caller,
        scope: &CommandScope,
        name: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Result<Json<StoredView>, ApiError> {
        let name = name_of(name)?;
        let markdown = markdown_of(headers, body)?;
        let command = SlashCommand::parse(&name, &markdown)?;
        let stored = StoredCommand {
            name,
            markdown,
            updated_ms: self.clock.now_ms(),
        };
        self.metadata.put_command(caller.org(), scope, &stored).await?;
        Ok(Json(StoredView::new(&stored, &command)))
    }

    async fn delete_stored(&self, caller: &Caller, scope: &CommandScope, name: &str) -> Result<StatusCode, ApiError> {
        let name = name_of(name)?;
        if self.metadata.delete_command(caller.org(), scope, &name).await? {
            Ok(StatusCode::NO_CONTENT)
        } else {
            Err(missing(&name))
        }
    }
}

fn missing(name: &str) -> ApiError {
    ApiError::Domain(spool_log::error::Error::Missing {
        what: format!("slash command `{name}`"),
    })
}

/// `GET /v1/slash-commands`: the organization's global commands.
#[utoipa::path(get, path = "/v1/slash-commands", tag = "commands",
    responses((status = 200, description = "The organization's global commands", body = StoredList), Refusals))]
pub(crate) async fn list_global(State(api): State<Arc<ChatApi>>, caller: Caller) -> Result<Json<StoredList>, ApiError> {
    Ok(Json(api.stored_list(&caller, &CommandScope::Global).await?))
}

/// `GET /v1/slash-commands/{name}`: a global command's markdown file.
#[utoipa::path(get, path = "/v1/slash-commands/{name}", tag = "commands", params(("name" = String, Path, description = NAME)),
    responses((status = 200, description = "The markdown file", content_type = "text/markdown", body = String),
        (status = 404, description = "No such global command", body = ErrorBody), Refusals))]
pub(crate) async fn get_global(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(name): PathOf<String>,
) -> Result<Response, ApiError> {
    api.get_stored(&caller, &CommandScope::Global, &name).await
}

/// `PUT /v1/slash-commands/{name}` with the markdown file: stores a global command.
#[utoipa::path(put, path = "/v1/slash-commands/{name}", tag = "commands", params(("name" = String, Path, description = NAME)),
    request_body(content = String, content_type = "text/markdown", description = "The command's markdown file"),
    responses((status = 200, description = "Stored", body = StoredView),
        (status = 400, description = "A bad name or front matter, or an unknown action (the message says which)", body = ErrorBody),
        (status = 409, description = "It would take the organization's global commands, or the organization's commands in all, past their number or bytes (`limit_reached`)", body = ErrorBody),
        (status = 415, description = "Not `text/markdown`", body = ErrorBody), Refusals))]
pub(crate) async fn put_global(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(name): PathOf<String>,
    headers: HeaderMap,
    BodyBytes(body): BodyBytes,
) -> Result<Json<StoredView>, ApiError> {
    api.put_stored(&caller, &CommandScope::Global, &name, &headers, &body)
        .await
}

/// `DELETE /v1/slash-commands/{name}`.
#[utoipa::path(delete, path = "/v1/slash-commands/{name}", tag = "commands", params(("name" = String, Path, description = NAME)),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such global command", body = ErrorBody), Refusals))]
pub(crate) async fn delete_global(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(name): PathOf<String>,
) -> Result<StatusCode, ApiError> {
    api.delete_stored(&caller, &CommandScope::Global, &name).await
}

/// `GET /v1/workspaces/{id}/slash-commands`: every command its chats see (built-in, global,
/// stored in the workspace, files in its working directory), with where each comes from.
#[utoipa::path(get, path = "/v1/workspaces/{id}/slash-commands", tag = "commands", params(("id" = String, Path, description = WORKSPACE_ID)),
    responses((status = 200, description = "The workspace's commands, by name", body = EntryList),
        (status = 404, description = "No such workspace in the caller's organization", body = ErrorBody), Refusals))]
pub(crate) async fn list_workspace(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
) -> Result<Json<EntryList>, ApiError> {
    let ws = api.workspace_of(&caller, &id).await?;
    let registry = api.chats.commands(caller.org(), Some(&ws.id)).await?;
    Ok(Json(EntryList {
        commands: registry.entries().map(EntryView::from).collect(),
    }))
}

/// `GET /v1/workspaces/{id}/slash-commands/{name}`: a stored workspace command's file.
#[utoipa::path(get, path = "/v1/workspaces/{id}/slash-commands/{name}", tag = "commands", operation_id = "get_workspace_command",
    params(("id" = String, Path, description = WORKSPACE_ID), ("name" = String, Path, description = NAME)),
    responses((status = 200, description = "The markdown file", content_type = "text/markdown", body = String),
        (status = 404, description = "No such workspace or command", body = ErrorBody), Refusals))]
pub(crate) async fn get_workspace(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf((id, name)): PathOf<(Id, String)>,
) -> Result<Response, ApiError> {
    let scope = api.scope_of(&caller, Some(&id)).await?;
    api.get_stored(&caller, &scope, &name).await
}

/// `PUT /v1/workspaces/{id}/slash-commands/{name}` with the markdown file.
#[utoipa::path(put, path = "/v1/workspaces/{id}/slash-commands/{name}", tag = "commands",
    params(("id" = String, Path, description = WORKSPACE_ID), ("name" = String, Path, description = NAME)),
    request_body(content = String, content_type = "text/markdown", description = "The command's markdown file"),
    responses((status = 200, description = "Stored", body = StoredView),
        (status = 400, description = "A bad name or front matter, or an unknown action", body = ErrorBody),
        (status = 404, description = "No such workspace", body = ErrorBody),
        (status = 409, description = "It would take the workspace's commands, or the organization's in all, past their number or bytes (`limit_reached`)", body = ErrorBody),
        (status = 415, description = "Not `text/markdown`", body = ErrorBody), Refusals))]
pub(crate) async fn put_workspace(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf((id, name)): PathOf<(Id, String)>,
    headers: HeaderMap,
    BodyBytes(body): BodyBytes,
) -> Result<Json<StoredView>, ApiError> {
    let scope = api.scope_of(&caller, Some(&id)).await?;
    api.put_stored(&caller, &scope, &name, &headers, &body).await
}

/// `DELETE /v1/workspaces/{id}/slash-commands/{name}`.
#[utoipa::path(delete, path = "/v1/workspaces/{id}/slash-commands/{name}", tag = "commands", operation_id = "delete_workspace_command",
    params(("id" = String, Path, description = WORKSPACE_ID), ("name" = String, Path, description = NAME)),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such workspace or command", body = ErrorBody), Refusals))]
pub(crate) async fn delete_workspace(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf((id, name)): PathOf<(Id, String)>,
) -> Result<StatusCode, ApiError> {
    let scope = api.scope_of(&caller, Some(&id)).await?;
    api.delete_stored(&caller, &scope, &name).await
}
