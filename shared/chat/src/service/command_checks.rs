//! What a command's action may do in a chat, and what a person is told about a command: why it
//! cannot run, what it would do, what they probably meant.

use spool_commands::CommandAction;

use crate::session::Session;
use spool_log::error::Error;

/// Why a command could not run: what the HTTP edge answers (404, 400 or 409).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No such command.
    Unknown,
    /// Its arguments or its file are wrong.
    Invalid,
    /// The chat is not in a state it can act on.
    Conflict,
}

/// The longest mode name.
const MAX_SETTING_CHARS: usize = 100;

/// Why an action cannot run in `session` with `arguments`, for the person.
pub(super) fn check_action(action: CommandAction, session: &Session, arguments: &str) -> Result<(), (Failure, String)> {
    let invalid = |reason: String| Err((Failure::Invalid, reason));
    let setting = |what: &str, value: &str| {
        if value.chars().count() > MAX_SETTING_CHARS || value.chars().any(|c| c.is_control() || c.is_whitespace()) {
            invalid(format!(
                "a {what} is one word of at most {MAX_SETTING_CHARS} characters, not `{value}`"
            ))
        } else {
            Ok(())
        }
    };
    match action {
        CommandAction::NewSession if session.workspace_id.is_none() => {
            invalid("/new makes a chat in a workspace; this chat is in none: open a workspace's chat first".to_owned())
        }
        CommandAction::StopStream if session.pending_turn.is_none() => {
            Err((Failure::Conflict, "nothing is running in this chat to stop".to_owned()))
        }
        // No name: back to the agent's model.
        CommandAction::SetModel if arguments.is_empty() => Ok(()),
        CommandAction::SetModel => {
            spool_commands::model::check_model(arguments).map_err(|e| (Failure::Invalid, reason_of(e)))
        }
        CommandAction::SwitchMode if arguments.is_empty() => {
            invalid("name a mode, as in `/mode plan` or `/mode act`".to_owned())
        }
        CommandAction::SwitchMode => setting("mode", arguments),
        CommandAction::Rename if arguments.trim().is_empty() => {
            invalid("give the new title, as in `/rename Q3 plan`".to_owned())
        }
        CommandAction::Rename => {
            let mut renamed = session.clone();
            renamed.title = crate::names::clean(arguments);
            renamed.validate().map_err(|e| (Failure::Invalid, reason_of(e)))
        }
        _ => Ok(()),
    }
}

/// An error's reason, for a person (without the error's kind).
pub(super) fn reason_of(e: Error) -> String {
    match e {
        Error::Invalid { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// What an action does, for a preview.
pub(super) fn effect(action: CommandAction, arguments: &str) -> String {
    match action {
        CommandAction::NewSession => "Opens a new chat with the same agent.".to_owned(),
        CommandAction::StopStream => "Stops the answer that is running.".to_owned(),
        CommandAction::SetModel if arguments.is_empty() => "Goes back to the agent's own model.".to_owned(),
        CommandAction::SetModel => format!("Answers in this chat use the model `{arguments}`."),
        CommandAction::SwitchMode => format!("The agent works in `{arguments}` mode in this chat."),
        CommandAction::Rename => format!("Renames this chat to “{arguments}”."),
        CommandAction::ClearContext => {
            "The agent starts afresh: the messages before this stay in the chat, outside its context.".to_owned()
        }
        CommandAction::Help => "Lists this chat's commands.".to_owned(),
        CommandAction::CompactHistory => "Summarises the chat so far for the agent, to free its context: the \
            messages stay in the chat, the agent sees their summary."
            .to_owned(),
    }
}

pub(super) fn unknown_reason(name: &str, closest: &[String]) -> String {
    match closest {
        [] => format!("there is no command `/{name}`; type / to see the commands"),
        names => format!(
            "there is no command `/{name}`; did you mean {}?",
            names.iter().map(|n| format!("/{n}")).collect::<Vec<_>>().join(", ")
        ),
    }
}
