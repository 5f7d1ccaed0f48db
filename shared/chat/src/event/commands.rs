//! Slash commands, as invoked and as failed.

use serde::{Deserialize, Serialize};

use spool_commands::{CommandAction, CommandKind, CommandSource};

/// A slash command, as invoked.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlashCommandInvoked {
    /// The command's name (`review`, `git:commit`).
    pub name: String,
    /// What the person typed (`/review src/lib.rs`).
    pub invoked_as: String,
    /// The raw arguments.
    pub arguments: String,
    /// Where the command comes from.
    pub source: CommandSource,
    /// Whether it runs an action or prompts the agent.
    pub kind: CommandKind,
    /// The action it runs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<CommandAction>,
    /// The model a prompt command's turn uses (its front matter's `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The chat `/new` makes, named before it is made, so a retry makes no second one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_session_id: Option<String>,
    /// Who invoked it (the token's subject).
    pub author: String,
}

/// A slash command that could not run, and what to do about it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlashCommandFailed {
    /// The name the person typed.
    pub name: String,
    /// What the person typed.
    pub invoked_as: String,
    /// Why it failed, for the person.
    pub reason: String,
}
