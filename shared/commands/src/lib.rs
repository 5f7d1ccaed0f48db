//! # Slash commands
//!
//! A command is a markdown file with front matter, in the convention Claude Code and similar
//! agents use: the file's name is the command's (`review.md` is `/review`, `git/commit.md` is
//! `/git:commit`), the front matter describes it, and the body is a prompt template
//! ([`markdown`]). A command either runs one of Spool's actions ([`CommandAction`]) or becomes
//! a prompt for the chat's agent, wrapped so the agent knows where it came from ([`args`]).
//!
//! Commands come from four places, later ones winning on a name ([`registry`]): the built-in
//! ones shipped with Spool, the organization's global ones and the workspace's stored ones
//! (both in the metadata store, [`Commands`]), and the files in the workspace's
//! `.claude/commands/` and `.agents/commands/` folders. Resolving what a person typed reads
//! only the command of that name ([`lookup`]), however many are stored.
//!
//! Invariants: a stored command always parses (it is checked when saved); a name is one to
//! three segments of letters, digits, `-` and `_`, joined by `:`; rendering never fails (a
//! missing argument is empty). A model's name has one rule, here too ([`model`]), since a
//! command may name one.

pub mod args;
pub mod lookup;
pub mod markdown;
pub mod model;
pub mod registry;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use spool_log::error::Error;

/// The actions a command may run instead of prompting the agent.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandAction {
    /// A new chat with the same agent.
    NewSession,
    /// Stop the running answer (the abort control).
    StopStream,
    /// The chat's model override (none: the agent's own).
    SetModel,
    /// The chat's mode, which runtimes receive (for example `plan` or `act`).
    SwitchMode,
    /// Rename the chat.
    Rename,
    /// The agent forgets the chat before this point; the chat keeps every event.
    ClearContext,
    /// List the chat's commands.
    Help,
    /// Summarise the chat's history before this point for the agent (a turn of its own, whose
    /// worker writes `history_compacted`); the chat keeps every event.
    CompactHistory,
}

impl CommandAction {
    /// Every action, in the order `/help` lists them.
    pub const ALL: [Self; 8] = [
        Self::NewSession,
        Self::StopStream,
        Self::SetModel,
        Self::SwitchMode,
        Self::Rename,
        Self::ClearContext,
        Self::CompactHistory,
        Self::Help,
    ];

    /// Its name, as front matter spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NewSession => "new_session",
            Self::StopStream => "stop_stream",
            Self::SetModel => "set_model",
            Self::SwitchMode => "switch_mode",
            Self::Rename => "rename",
            Self::ClearContext => "clear_context",
            Self::CompactHistory => "compact_history",
            Self::Help => "help",
        }
    }

    /// The action named `name`, or an error that lists the actions there are.
    pub fn parse(name: &str) -> Result<Self, Error> {
        Self::ALL.into_iter().find(|a| a.as_str() == name).ok_or_else(|| {
            let known: Vec<&str> = Self::ALL.iter().map(|a| a.as_str()).collect();
            Error::invalid(
                "action",
                format!("`{name}` is not an action; the actions are {}", known.join(", ")),
            )
        })
    }
}

/// Whether a command runs an action or prompts the agent.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandKind {
    /// Its body, rendered, is the turn's input.
    Prompt,
    /// It runs one of Spool's actions.
    Action,
}

/// Where a command comes from, from the lowest precedence to the highest.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandSource {
    /// Shipped with Spool.
    Builtin,
    /// The organization's, for every chat.
    Global,
    /// The workspace's: stored, or a file in its working directory.
    Workspace,
}

/// Where stored commands live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandScope {
    /// The organization's global commands.
    Global,
    /// A workspace's commands.
    Workspace(String),
}

impl CommandScope {
    /// The scope's key in storage: `global` or `ws#{id}`.
    pub fn key(&self) -> String {
        match self {
            Self::Global => "global".to_owned(),
            Self::Workspace(id) => format!("ws#{id}"),
        }
    }
}

/// A command as stored: its name and its markdown, which parsed when it was saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCommand {
    /// Its name (`review`, `git:commit`).
    pub name: String,
    /// The markdown file.
    pub markdown: String,
    /// When it was saved (ms since the Unix epoch).
    pub updated_ms: i64,
}

/// The metadata store's commands: the organization's global ones and each workspace's.
#[async_trait]
pub trait Commands: Send + Sync {
    /// Stores `command` in `scope`, replacing one of the same name. [`Error::CapReached`] (and
    /// nothing stored) when it would take the scope or the organization past its caps
    /// ([`crate::caps::Caps`]: commands and their bytes, per scope and per organization); a
    /// replaced command counts once, with its new size.
    async fn put_command(&self, org: &str, scope: &CommandScope, command: &StoredCommand) -> Result<(), Error>;

    /// The command `name` of `scope`, if stored.
    async fn command(&self, org: &str, scope: &CommandScope, name: &str) -> Result<Option<StoredCommand>, Error>;

    /// The names of `scope`'s commands, by name, without their files.
    async fn command_names(&self, org: &str, scope: &CommandScope) -> Result<Vec<String>, Error>;

    /// Every command of `scope`, by name.
    async fn commands(&self, org: &str, scope: &CommandScope) -> Result<Vec<StoredCommand>, Error>;

    /// Deletes the command `name` of `scope`; whether there was one.
    async fn delete_command(&self, org: &str, scope: &CommandScope, name: &str) -> Result<bool, Error>;
}

/// Checks a command's name: one to three segments of letters, digits, `-` and `_` (each
/// starting with a letter or digit, at most 64 characters in all), joined by `:`.
pub fn check_name(name: &str) -> Result<(), Error> {
    let segment_ok = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let segments: Vec<&str> = name.split(':').collect();
    if name.len() > 64 || segments.len() > 3 || !segments.iter().all(|s| segment_ok(s)) {
        return Err(Error::invalid(
            "name",
            format!(
                "`{name}` is not a command name: use letters, digits, `-` and `_`, with `:` between \
                 at most three parts (`review`, `git:commit`)"
            ),
        ));
    }
    Ok(())
}
