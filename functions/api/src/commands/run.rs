//! # What a person typed in a chat
//!
//! `/v1/sessions/{id}/slash-commands/{resolve,preview,invoke}`: the command an input names,
//! what invoking it would do, and invoking it; the chat service decides.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode};
use serde::{Deserialize, Serialize};
use spool_chat::service::{ActionDone, CommandRequest, Failure, Invoked, Preview, Resolution};
use spool_commands::{CommandAction, CommandKind, CommandSource};
use utoipa::ToSchema;

use super::EntryView;
use spool_edge::{ApiError, ErrorBody, Refusals};

use crate::{
    ChatApi,
    extract::{Caller, Id, JsonBody, PathOf},
    messages::{OnBusy, check_client_message_id},
    sessions::{SESSION_ID, SessionView},
};

/// The longest input a person may invoke.
const MAX_INPUT_CHARS: usize = 20_000;

/// What a person typed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CommandInput {
    /// `/name arguments`.
    input: String,
}

/// What a person typed, to run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CommandInvocation {
    /// `/name arguments`.
    input: String,
    /// The client's id for this invocation: a retry with the same id runs nothing again.
    #[serde(default)]
    client_message_id: Option<String>,
    /// What to do when a prompt command meets a pending turn (`reject` by default).
    #[serde(default)]
    on_busy: Option<OnBusy>,
}

/// The command an input names.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Resolved {
    /// The command's name.
    name: String,
    /// The raw arguments.
    arguments: String,
    /// The arguments as words (quoted ones whole).
    words: Vec<String>,
    /// Where it comes from.
    source: CommandSource,
    /// Prompt or action.
    kind: CommandKind,
    /// The action it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<CommandAction>,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// What its arguments are.
    #[serde(skip_serializing_if = "Option::is_none")]
    argument_hint: Option<String>,
}

/// What invoking an input would do.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Previewed {
    /// The command's name.
    name: String,
    /// Prompt or action.
    kind: CommandKind,
    /// A prompt command's turn input, exactly as the agent gets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<String>,
    /// The model a prompt command's turn uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    /// An action command's action.
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<CommandAction>,
    /// What the action would do.
    #[serde(skip_serializing_if = "Option::is_none")]
    effect: Option<String>,
}

/// An invocation that ran.
#[derive(Debug, Default, Serialize, ToSchema)]
pub(crate) struct InvokeAccepted {
    /// The `slash_command_invoked` event's seq.
    seq: u64,
    /// Whether it was a retry (nothing ran again).
    duplicate: bool,
    /// The turn a prompt command started.
    #[serde(skip_serializing_if = "Option::is_none")]
    turn_id: Option<String>,
    /// The action that ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<CommandAction>,
    /// `/new`: the chat it made.
    #[serde(skip_serializing_if = "Option::is_none")]
    new_session: Option<SessionView>,
    /// `/model`, `/mode`, `/rename`: the chat as changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<SessionView>,
    /// `/help`: the chat's commands.
    #[serde(skip_serializing_if = "Option::is_none")]
    commands: Option<Vec<EntryView>>,
}

fn checked_input(input: &str) -> Result<(), ApiError> {
    if input.chars().count() > MAX_INPUT_CHARS {
        return Err(ApiError::BadRequest(format!(
            "a command's input is at most {MAX_INPUT_CHARS} characters"
        )));
    }
    Ok(())
}

/// `POST /v1/sessions/{id}/slash-commands/resolve` `{input}`: which command and arguments.
#[utoipa::path(post, path = "/v1/sessions/{id}/slash-commands/resolve", tag = "commands", params(("id" = String, Path, description = SESSION_ID)),
    request_body = CommandInput,
    responses((status = 200, description = "The command the input names", body = Resolved),
        (status = 400, description = "Not a command (no `/`), or its file does not parse", body = ErrorBody),
        (status = 404, description = "No such session, or no such command (`unknown_command`, naming the closest)", body = ErrorBody), Refusals))]
pub(crate) async fn resolve(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(body): JsonBody<CommandInput>,
) -> Result<Json<Resolved>, ApiError> {
    checked_input(&body.input)?;
    let session = api.session_of(&caller, &id).await?;
    let found = found(api.chats.resolve(caller.org(), &session, &body.input).await?)?;
    Ok(Json(Resolved {
        name: found.command.name.clone(),
        words: spool_commands::args::split(&found.invocation.arguments),
        arguments: found.invocation.arguments,
        source: found.source,
        kind: found.command.kind(),
        action: found.command.action,
        description: found.command.description,
        argument_hint: found.command.argument_hint,
    }))
}

fn found(resolution: Resolution) -> Result<spool_chat::service::Found, ApiError> {
    resolution.into_found().map_err(|r| refusal(r.failure, r.reason))
}

fn refusal(failure: Failure, reason: String) -> ApiError {
    match failure {
        Failure::Unknown => ApiError::UnknownCommand(reason),
        Failure::Invalid => ApiError::BadRequest(reason),
        Failure::Conflict => ApiError::Conflict(reason),
    }
}

/// `POST /v1/sessions/{id}/slash-commands/preview` `{input}`: the prompt exactly as the agent
/// would get it, or what the action would do. Nothing is appended.
#[utoipa::path(post, path = "/v1/sessions/{id}/slash-commands/preview", tag = "commands", params(("id" = String, Path, description = SESSION_ID)),
    request_body = CommandInput,
    responses((status = 200, description = "What invoking it would do", body = Previewed),
        (status = 400, description = "Not a command, or its file does not parse", body = ErrorBody),
        (status = 404, description = "No such session, or no such command", body = ErrorBody), Refusals))]
pub(crate) async fn preview(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(body): JsonBody<CommandInput>,
) -> Result<Json<Previewed>, ApiError> {
    checked_input(&body.input)?;
    let session = api.session_of(&caller, &id).await?;
    let found = found(api.chats.resolve(caller.org(), &session, &body.input).await?)?;
    let mut view = Previewed {
        name: found.command.name.clone(),
        kind: found.command.kind(),
        prompt: None,
        model: None,
        action: None,
        effect: None,
    };
    match api.chats.preview(&session, &found)? {
        Preview::Prompt { prompt, model } => {
            view.prompt = Some(prompt);
            view.model = model;
        }
        Preview::Action { action, effect } => {
            view.action = Some(action);
            view.effect = Some(effect);
        }
    }
    Ok(Json(view))
}

/// `POST /v1/sessions/{id}/slash-commands/invoke` `{input, client_message_id?, on_busy?}`:
/// appends `slash_command_invoked`, then runs the action or starts the turn with the prompt.
/// A command that cannot run appends `slash_command_failed` and is answered 4xx.
#[utoipa::path(post, path = "/v1/sessions/{id}/slash-commands/invoke", tag = "commands", params(("id" = String, Path, description = SESSION_ID)),
    request_body = CommandInvocation,
    responses((status = 202, description = "Invoked: the action ran, or the prompt's turn is queued", body = InvokeAccepted),
        (status = 400, description = "Bad arguments, or a command file that does not parse (`slash_command_failed` says why)", body = ErrorBody),
        (status = 404, description = "No such session, or no such command (`unknown_command`)", body = ErrorBody),
        (status = 409, description = "A turn is pending (`turn_pending`), or nothing runs to stop", body = ErrorBody), Refusals,
        (status = 429, description = "Over a rate limit (`rate_limited`), or a prompt's turn would pass the workspace's monthly token budget (`budget_exceeded`: nothing was appended)", body = ErrorBody)))]
pub(crate) async fn invoke(
    State(api): State<Arc<ChatApi>>,
    caller: Caller,
    PathOf(id): PathOf<Id>,
    JsonBody(body): JsonBody<CommandInvocation>,
) -> Result<(StatusCode, Json<InvokeAccepted>), ApiError> {
    checked_input(&body.input)?;
    if let Some(cmid) = &body.client_message_id {
        check_client_message_id(cmid)?;
    }
    let session = api.session_of(&caller, &id).await?;
    let request = CommandRequest {
        input: body.input,
        author: caller.0.sub.clone(),
        client_message_id: body.client_message_id,
        queue_if_busy: matches!(body.on_busy, Some(OnBusy::Enqueue)),
    };
    let invoked = match api.chats.plan(caller.org(), &session, request).await? {
        Ok(planned) => {
            // A new chat counts against the organization's creations, as `POST /v1/sessions`.
            if planned.action() == Some(CommandAction::NewSession) {
                api.limit_create(&caller)?;
            }
            api.chats.run(caller.org(), &session, planned).await?
        }
        Err(failed) => failed,
    };
    let mut view = InvokeAccepted::default();
    match invoked {
        Invoked::Prompt {
            seq,
            turn_id,
            duplicate,
        } => {
            view.seq = seq;
            view.turn_id = turn_id;
            view.duplicate = duplicate;
        }
        Invoked::Action { seq, done, duplicate } => {
            view.seq = seq;
            view.duplicate = duplicate;
            match done {
                ActionDone::NewSession(made) => {
                    view.action = Some(CommandAction::NewSession);
                    view.new_session = Some(api.view(&caller, *made).await?);
                }
                ActionDone::Stopped { turn_id } => {
                    view.action = Some(CommandAction::StopStream);
                    view.turn_id = turn_id;
                }
                ActionDone::Model(_) | ActionDone::Mode(_) | ActionDone::Renamed(_) => {
                    view.action = Some(match done {
                        ActionDone::Model(_) => CommandAction::SetModel,
                        ActionDone::Mode(_) => CommandAction::SwitchMode,
                        _ => CommandAction::Rename,
                    });
                    let changed = api.session_of(&caller, &id).await?;
                    view.session = Some(api.view(&caller, changed).await?);
                }
                ActionDone::Cleared => view.action = Some(CommandAction::ClearContext),
                ActionDone::Help(entries) => {
                    view.action = Some(CommandAction::Help);
                    view.commands = Some(entries.iter().map(EntryView::from).collect());
                }
            }
        }
        Invoked::Busy(holder) => {
            return Err(ApiError::Busy {
                message: format!(
                    "turn `{}` is still pending in this chat; wait for its agent_end, /stop it, \
                     or invoke with \"on_busy\": \"enqueue\"",
                    holder.turn_id
                ),
                turn_id: holder.turn_id,
            });
        }
        Invoked::Failed { failure, reason, .. } => return Err(refusal(failure, reason)),
    }
    Ok((StatusCode::ACCEPTED, Json(view)))
}
