//! # Workspaces and their agents
//!
//! A workspace groups an organization's chats, agents and tasks. Every workspace has the
//! built-in Spool agent, made with it, which cannot be deleted; other agents are ordered by
//! `position`. Everything here belongs to one organization: the [`Workspaces`] port takes the
//! organization with every call, and adapters key every record by it, so one organization can
//! never address another's records (they are missing, not forbidden).

use std::path::Component;

use serde::{Deserialize, Serialize};

use crate::{
    confine::WorkspaceRoots,
    settings::CliHost,
    settings::{Cleanup, MAX_KEEP_DAYS, Notifications, Patch, WorkingDirMode, WorkspaceChange, check_email},
};
use spool_log::error::Error;

/// The longest name of a workspace or an agent, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// The longest description or agent instruction, in characters.
pub const MAX_TEXT_CHARS: usize = 20_000;
/// The built-in agent's name.
pub const BUILTIN_AGENT_NAME: &str = "Spool";

/// A workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspace {
    /// Its id (`ws_…`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it is for; given to agents as context.
    #[serde(default)]
    pub description: String,
    /// Where CLI agents run for this workspace's chats (a per-chat temporary directory when
    /// unset).
    #[serde(default)]
    pub working_dir: Option<String>,
    /// How long what its chats leave behind is kept.
    #[serde(default)]
    pub cleanup: Cleanup,
    /// Whom Spool tells when an agent needs a person.
    #[serde(default)]
    pub notifications: Notifications,
    /// Where its CLI agents run; `None`: the deployment's default (`SPOOL_CLI_HOST`: the
    /// worker under `spool serve`, runners on AWS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_host: Option<crate::settings::CliHost>,
    /// The most input and output tokens its chats' models may use in a calendar month (UTC);
    /// past it new turns are refused ([`crate::service::UsageService::budget_exceeded`]). None:
    /// no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_token_budget: Option<u64>,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
}

impl Workspace {
    /// A new workspace named `name`, with the default settings: a folder of each chat's own,
    /// things kept [`crate::settings::DEFAULT_KEEP_DAYS`] days, no notifications.
    pub fn new(id: String, name: String, now_ms: i64) -> Self {
        Self {
            id,
            name,
            description: String::new(),
            working_dir: None,
            cleanup: Cleanup::default(),
            notifications: Notifications::default(),
            cli_host: None,
            monthly_token_budget: None,
            created_ms: now_ms,
            updated_ms: now_ms,
        }
    }

    /// Where its CLI agents run.
    pub fn working_dir_mode(&self) -> WorkingDirMode {
        if self.working_dir.is_some() {
            WorkingDirMode::Static
        } else {
            WorkingDirMode::Temp
        }
    }
}

/// How an agent produces its answers.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    /// Deterministic replies from a script (demos and tests; needs no key).
    Scripted,
    /// An OpenAI-compatible chat-completions endpoint.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// A CLI agent run as a subprocess.
    Cli,
}

/// The CLI agents Spool can run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CliType {
    /// Anthropic's `claude`.
    Claude,
    /// Google's `gemini`.
    Gemini,
    /// OpenAI's `codex`.
    Codex,
    /// `opencode`.
    Opencode,
}

impl CliType {
    /// Every CLI, in the built-in agent's order of preference.
    pub const ALL: [Self; 4] = [Self::Claude, Self::Gemini, Self::Codex, Self::Opencode];
}

/// An agent of a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// Its id (`ag_…`).
    pub id: String,
    /// The workspace it belongs to.
    pub workspace_id: String,
    /// Its name.
    pub name: String,
    /// Its instruction (system prompt).
    #[serde(default)]
    pub instruction: String,
    /// Its runtime; `None` lets Spool choose (the built-in agent's default: a configured LLM,
    /// else the first installed CLI, else the scripted runtime).
    #[serde(default)]
    pub runtime: Option<Runtime>,
    /// The model, for LLM runtimes.
    #[serde(default)]
    pub model: Option<String>,
    /// The CLI, for the CLI runtime.
    #[serde(default)]
    pub cli_type: Option<CliType>,
    /// How many tokens of the chat's history it is given before the oldest part is
    /// summarised; `None`: its runtime's own budget (most of its model's context window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// Its place in the workspace's list, from 0.
    pub position: u32,
    /// Whether this is the workspace's built-in Spool agent.
    #[serde(default)]
    pub builtin: bool,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
}

/// The smallest context budget an agent may set, in tokens.
pub const MIN_CONTEXT_TOKENS: u64 = 256;
/// The largest.
pub const MAX_CONTEXT_TOKENS: u64 = 2_000_000;

impl Agent {
    /// The built-in Spool agent of workspace `workspace_id`.
    pub fn builtin(id: String, workspace_id: String, now_ms: i64) -> Self {
        Self {
            id,
            workspace_id,
            name: BUILTIN_AGENT_NAME.to_owned(),
            // Its instruction is Spool's, in the code; this is the workspace's extension of it.
            instruction: String::new(),
            runtime: None,
            model: None,
            cli_type: None,
            context_tokens: None,
            position: 0,
            builtin: true,
            created_ms: now_ms,
            updated_ms: now_ms,
        }
    }

    /// Checks the fields a client sets.
    pub fn validate(&self) -> Result<(), Error> {
        check_name("agent name", &self.name)?;
        check_text("agent instruction", &self.instruction)?;
        if let Some(model) = &self.model {
            spool_commands::model::check_model(model)?;
        }
        if self.runtime == Some(Runtime::Cli) && self.cli_type.is_none() {
            return Err(Error::invalid("agent", "the cli runtime needs a cli_type"));
        }
        if let Some(tokens) = self.context_tokens
            && !(MIN_CONTEXT_TOKENS..=MAX_CONTEXT_TOKENS).contains(&tokens)
        {
            return Err(Error::invalid(
                "context_tokens",
                format!(
                    "give a number of tokens from {MIN_CONTEXT_TOKENS} to {MAX_CONTEXT_TOKENS}, or null for the runtime's own"
                ),
            ));
        }
        Ok(())
    }
}

impl Workspace {
    /// Checks the fields a client sets.
    pub fn validate(&self) -> Result<(), Error> {
        check_name("workspace name", &self.name)?;
        check_text("workspace description", &self.description)?;
        if let Some(dir) = &self.working_dir
            && (dir.is_empty() || dir.len() > 4096 || dir.chars().any(char::is_control))
        {
            return Err(Error::invalid(
                "working directory",
                "give a path of 1 to 4096 bytes without control characters",
            ));
        }
        for (what, days) in [
            ("cleanup turn_record_days", self.cleanup.turn_record_days),
            ("cleanup chat_folder_days", self.cleanup.chat_folder_days),
        ] {
            if !(1..=MAX_KEEP_DAYS).contains(&days) {
                return Err(Error::invalid(
                    what,
                    format!("give a number of days from 1 to {MAX_KEEP_DAYS}"),
                ));
            }
        }
        if let Some(email) = &self.notifications.email {
            check_email(email)?;
        }
        if let Some(budget) = self.monthly_token_budget
            && !(1..=crate::settings::MAX_MONTHLY_TOKEN_BUDGET).contains(&budget)
        {
            return Err(Error::invalid(
                "monthly_token_budget",
                format!(
                    "give a number of tokens from 1 to {}, or null for no budget",
                    crate::settings::MAX_MONTHLY_TOKEN_BUDGET
                ),
            ));
        }
        Ok(())
    }
}

impl Workspace {
    /// Confines a working directory that was just set to the roots `org` may use
    /// ([`crate::confine`]) and keeps it resolved, so what is stored is the folder agents will
    /// run in.
    pub async fn confine_working_dir(
        &mut self,
        org: &str,
        roots: &crate::confine::WorkspaceRoots,
    ) -> Result<(), Error> {
        if let Some(dir) = &self.working_dir {
            let resolved = roots.confine(org, dir).await?;
            self.working_dir = Some(resolved.to_string_lossy().into_owned());
        }
        Ok(())
    }
}

/// A name: 1 to [`MAX_NAME_CHARS`] characters, not blank, no control or format characters.
/// Where a name comes in it is [`crate::names::clean`]ed first, so a format character here is a
/// path that forgot to, refused rather than stored.
pub fn check_name(what: &'static str, name: &str) -> Result<(), Error> {
    if name.trim().is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(|c| c.is_control() || crate::names::is_format(c))
    {
        return Err(Error::invalid(
            what,
            format!("give 1 to {MAX_NAME_CHARS} characters, not blank, without control or invisible format characters"),
        ));
    }
    Ok(())
}

/// A text: at most [`MAX_TEXT_CHARS`] characters.
pub fn check_text(what: &'static str, text: &str) -> Result<(), Error> {
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(Error::invalid(
            what,
            format!("give at most {MAX_TEXT_CHARS} characters"),
        ));
    }
    Ok(())
}

/// The positions `ids` gives the workspace's `agents`: `ids` must name each of them exactly
/// once. Returns `(agent id, new position)` for the agents whose position changes.
pub fn plan_reorder(agents: &[Agent], ids: &[String]) -> Result<Vec<(String, u32)>, Error> {
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = ids.iter().find(|id| !seen.insert(id.as_str())) {
        return Err(Error::invalid("agent order", format!("`{dup}` is listed twice")));
    }
    if ids.len() != agents.len() || agents.iter().any(|a| !seen.contains(a.id.as_str())) {
        return Err(Error::invalid(
            "agent order",
            format!(
                "list each of the workspace's {} agents exactly once (the list changed? reload it)",
                agents.len()
            ),
        ));
    }
    Ok(ids
        .iter()
        .enumerate()
        .filter_map(|(i, id)| {
            let position = u32::try_from(i).unwrap_or(u32::MAX);
            let agent = agents.iter().find(|a| &a.id == id)?;
            (agent.position != position).then(|| (id.clone(), position))
        })
        .collect())
}

/// A task of a workspace, made by an agent (the `create_task` action) or by hand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Its id (`task_…`).
    pub id: String,
    /// The workspace it belongs to.
    pub workspace_id: String,
    /// The chat it came from.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Its title.
    pub title: String,
    /// What to do.
    #[serde(default)]
    pub description: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: i64,
}

impl Task {
    /// Checks the fields a client sets.
    pub fn validate(&self) -> Result<(), Error> {
        check_name("task title", &self.title)?;
        check_text("task description", &self.description)
    }
}

impl WorkspaceChange {
    /// Applies the change to `workspace` of `org`, checking every field; a folder newly set is
    /// confined to the organization's `roots` and stored resolved. A workspace whose CLI agents
    /// run on runners (its `cli_host`, or the deployment's `default_host`) keeps its folder on
    /// the runners' machines instead: the server does not confine it (each runner confines it
    /// to its own roots when it runs), it only checks that it is an absolute, normalized path.
    /// On an error `workspace` may be half changed: drop it.
    pub async fn apply(
        self,
        org: &str,
        workspace: &mut Workspace,
        roots: &WorkspaceRoots,
        default_host: CliHost,
    ) -> Result<(), Error> {
        let host_before = workspace.cli_host.unwrap_or(default_host);
        self.cli_host.apply(&mut workspace.cli_host);
        self.monthly_token_budget.apply(&mut workspace.monthly_token_budget);
        if let Some(title) = self.title {
            workspace.name = crate::names::clean(&title);
        }
        if let Some(description) = self.description {
            workspace.description = description;
        }
        let before = workspace.working_dir.clone();
        match (self.working_directory_mode, self.working_directory_path) {
            (Some(WorkingDirMode::Temp), Patch::Set(_)) => {
                return Err(Error::invalid(
                    "working directory",
                    "a `temp` working directory has no `working_directory_path`",
                ));
            }
            (Some(WorkingDirMode::Temp), _) | (None, Patch::Clear) => workspace.working_dir = None,
            (Some(WorkingDirMode::Static), Patch::Clear) => {
                return Err(Error::invalid(
                    "working directory",
                    "a `static` working directory needs its `working_directory_path`",
                ));
            }
            (_, Patch::Set(path)) => workspace.working_dir = Some(path),
            (Some(WorkingDirMode::Static), Patch::Keep) if workspace.working_dir.is_none() => {
                return Err(Error::invalid(
                    "working directory",
                    "a `static` working directory needs its `working_directory_path`",
                ));
            }
            (_, Patch::Keep) => {}
        }
        if let Some(cleanup) = self.cleanup {
            if let Some(days) = cleanup.turn_record_days {
                workspace.cleanup.turn_record_days = days;
            }
            if let Some(days) = cleanup.chat_folder_days {
                workspace.cleanup.chat_folder_days = days;
            }
        }
        if let Some(change) = self.notifications {
            let settings = &mut workspace.notifications;
            match change.email {
                Patch::Set(email) if !email.trim().is_empty() => settings.email = Some(email.trim().to_owned()),
                Patch::Set(_) | Patch::Clear => settings.email = None,
                Patch::Keep => {}
            }
            settings.on_question = change.on_question.unwrap_or(settings.on_question);
            settings.on_failure = change.on_failure.unwrap_or(settings.on_failure);
            settings.on_task = change.on_task.unwrap_or(settings.on_task);
        }
        workspace.validate()?;
        let host = workspace.cli_host.unwrap_or(default_host);
        match host {
            CliHost::Server if workspace.working_dir != before || host_before != host => {
                workspace.confine_working_dir(org, roots).await?;
            }
            CliHost::Runners if workspace.working_dir != before => {
                if let Some(dir) = &workspace.working_dir {
                    check_runner_dir(dir)?;
                }
            }
            CliHost::Server | CliHost::Runners => {}
        }
        Ok(())
    }
}

/// Checks a working directory that lives on runners' machines: an absolute path, written
/// normalized (no `.` or `..`, no empty or trailing separators), which each runner confines to
/// its own roots when it runs.
fn check_runner_dir(dir: &str) -> Result<(), Error> {
    let path = std::path::Path::new(dir);
    let normal = path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_) | Component::Prefix(_)));
    let rebuilt: std::path::PathBuf = path.components().collect();
    if !path.is_absolute() || !normal || rebuilt.as_os_str() != path.as_os_str() {
        return Err(Error::invalid(
            "working directory",
            "on runners, give an absolute path without `.` or `..` parts, like /home/dev/repo (each runner finds it under its own SPOOL_WORKSPACE_ROOTS)",
        ));
    }
    Ok(())
}

/// A new id with a kind prefix, e.g. `ws_0192f…`: a UUIDv7 in hex, so ids sort by creation.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str, position: u32) -> Agent {
        let mut a = Agent::builtin(id.to_owned(), "ws".to_owned(), 0);
        a.builtin = false;
        a.position = position;
        a
    }

    #[test]
    fn a_reorder_names_every_agent_once_and_moves_only_what_changes() {
        let agents = [agent("a", 0), agent("b", 1), agent("c", 2)];
        let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            plan_reorder(&agents, &ids(&["a", "c", "b"])).unwrap(),
            vec![("c".to_owned(), 1), ("b".to_owned(), 2)]
        );
        assert!(plan_reorder(&agents, &ids(&["a", "b", "c"])).unwrap().is_empty());
        for bad in [
            &["a", "b"][..],
            &["a", "b", "c", "d"],
            &["a", "a", "b"],
            &["a", "b", "x"],
        ] {
            assert!(
                matches!(plan_reorder(&agents, &ids(bad)), Err(Error::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn names_and_texts_are_bounded() {
        let mut a = agent("a", 0);
        assert!(a.validate().is_ok());
        for name in ["", "   ", "a\u{7}b", "\u{202e}a", &"x".repeat(MAX_NAME_CHARS + 1)] {
            a.name = name.to_owned();
            assert!(a.validate().is_err(), "{name:?}");
        }
        a.name = "ok".to_owned();
        a.runtime = Some(Runtime::Cli);
        assert!(a.validate().is_err(), "cli needs a cli_type");
        a.cli_type = Some(CliType::Codex);
        assert!(a.validate().is_ok());
    }
}
