//! # A workspace's settings, and how a change to them is checked and applied
//!
//! Where a workspace's CLI agents run ([`WorkingDirMode`]), how long what its chats leave
//! behind is kept ([`Cleanup`]) and whom Spool tells when an agent needs a person
//! ([`Notifications`]). People change them through `PATCH /v1/workspaces/{id}` and agents
//! through the `update_workspace` action: both hand a [`WorkspaceChange`] to
//! [`WorkspaceChange::apply`], so a setting means the same and is checked the same either way.

use serde::{Deserialize, Deserializer, Serialize};

use spool_log::error::Error;

/// The most days a cleanup setting may keep something.
pub const MAX_KEEP_DAYS: u32 = 3650;
/// The largest monthly token budget a workspace may set (a trillion tokens).
pub const MAX_MONTHLY_TOKEN_BUDGET: u64 = 1_000_000_000_000;
/// How long finished turn records and idle chats' folders are kept unless a workspace says.
pub const DEFAULT_KEEP_DAYS: u32 = 7;

/// A field of a change that may be cleared: absent keeps the value, `null` clears it, a value
/// sets it. Use with `#[serde(default)]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Patch<T> {
    /// The field was absent: keep the current value.
    #[default]
    Keep,
    /// The field was `null`: clear the value.
    Clear,
    /// The field had a value: set it.
    Set(T),
}

impl<T> Patch<T> {
    /// Applies the change to `current`.
    pub fn apply(self, current: &mut Option<T>) {
        match self {
            Self::Keep => {}
            Self::Clear => *current = None,
            Self::Set(value) => *current = Some(value),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Patch<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Option::<T>::deserialize(deserializer)?.map_or(Self::Clear, Self::Set))
    }
}

/// Where a workspace's CLI agents run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkingDirMode {
    /// In one folder for every chat, at `working_directory_path` (which must exist where the
    /// worker runs, under its configured roots).
    Static,
    /// In a folder of each chat's own, made by Spool and removed by the cleanup.
    Temp,
}

/// Where a workspace's CLI agents run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CliHost {
    /// The worker runs them, as subprocesses (the default under `spool serve`).
    Server,
    /// Runners run them (the default on AWS, where the worker has no CLIs).
    Runners,
}

impl CliHost {
    /// Its name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Runners => "runners",
        }
    }
}

impl std::str::FromStr for CliHost {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "server" => Ok(Self::Server),
            "runners" => Ok(Self::Runners),
            other => Err(format!("`{other}` is not a CLI host: use `server` or `runners`")),
        }
    }
}

/// How long what a workspace's chats leave behind is kept.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleanup {
    /// Days a finished turn's record (`GET /v1/sessions/{id}/turns`) is kept.
    #[serde(default = "default_days")]
    pub turn_record_days: u32,
    /// Days a chat's own folder (a CLI agent's input, output, home and temporary files) is kept
    /// after the chat was last active; the daily sweep removes older ones.
    #[serde(default = "default_days")]
    pub chat_folder_days: u32,
}

fn default_days() -> u32 {
    DEFAULT_KEEP_DAYS
}

impl Default for Cleanup {
    fn default() -> Self {
        Self {
            turn_record_days: DEFAULT_KEEP_DAYS,
            chat_folder_days: DEFAULT_KEEP_DAYS,
        }
    }
}

impl Cleanup {
    /// [`Self::turn_record_days`] in milliseconds.
    pub fn turn_record_ms(&self) -> i64 {
        days_ms(self.turn_record_days)
    }

    /// [`Self::chat_folder_days`] in milliseconds.
    pub fn chat_folder_ms(&self) -> i64 {
        days_ms(self.chat_folder_days)
    }
}

fn days_ms(days: u32) -> i64 {
    i64::from(days) * 24 * 3600 * 1000
}

/// What a workspace's notifications are about.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotificationKind {
    /// An agent asked a question, or waits for an approval or a plan's review.
    Question,
    /// A turn failed.
    Failure,
    /// An agent created a task.
    Task,
}

/// Whom Spool tells, and when.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notifications {
    /// Where notifications go; none are sent without one.
    #[serde(default)]
    pub email: Option<String>,
    /// When an agent asks a question (or waits for an approval).
    #[serde(default = "yes")]
    pub on_question: bool,
    /// When a turn fails.
    #[serde(default = "yes")]
    pub on_failure: bool,
    /// When a task is created (by an agent or by hand).
    #[serde(default = "yes")]
    pub on_task: bool,
}

fn yes() -> bool {
    true
}

impl Default for Notifications {
    fn default() -> Self {
        Self {
            email: None,
            on_question: true,
            on_failure: true,
            on_task: true,
        }
    }
}

impl Notifications {
    /// Where a notification of `kind` goes, if anywhere.
    pub fn recipient(&self, kind: NotificationKind) -> Option<&str> {
        let wanted = match kind {
            NotificationKind::Question => self.on_question,
            NotificationKind::Failure => self.on_failure,
            NotificationKind::Task => self.on_task,
        };
        self.email.as_deref().filter(|_| wanted)
    }
}

/// The longest email address, in bytes (RFC 5321's path limit).
const MAX_EMAIL_BYTES: usize = 254;

/// Checks an email address's shape: one `@` between a local part and a dotted domain, no
/// spaces or control characters. Whether it receives mail is the mail system's to find out.
pub fn check_email(email: &str) -> Result<(), Error> {
    let refuse = || Error::invalid("notification email", "give one address like name@example.com");
    if email.len() > MAX_EMAIL_BYTES || email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse());
    }
    let (local, domain) = email.split_once('@').ok_or_else(refuse)?;
    let labels_ok = domain.split('.').all(|l| !l.is_empty());
    if local.is_empty() || domain.contains('@') || !domain.contains('.') || !labels_ok {
        return Err(refuse());
    }
    Ok(())
}

/// A change to a workspace's cleanup settings: only what it names.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CleanupChange {
    /// Days a finished turn's record is kept (1 to 3650).
    #[serde(default)]
    pub turn_record_days: Option<u32>,
    /// Days an idle chat's folder is kept (1 to 3650).
    #[serde(default)]
    pub chat_folder_days: Option<u32>,
}

/// A change to a workspace's notification settings: only what it names.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationsChange {
    /// The address; `null` or `""` stops notifications.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub email: Patch<String>,
    /// Notify when an agent asks a question.
    #[serde(default)]
    pub on_question: Option<bool>,
    /// Notify when a turn fails.
    #[serde(default)]
    pub on_failure: Option<bool>,
    /// Notify when a task is created (by an agent or by hand).
    #[serde(default)]
    pub on_task: Option<bool>,
}

/// A change to a workspace: only what it names changes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceChange {
    /// Its title (`name` is accepted too).
    #[serde(default, alias = "name")]
    pub title: Option<String>,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// `static` (with `working_directory_path`, or the one set) or `temp`.
    #[serde(default)]
    pub working_directory_mode: Option<WorkingDirMode>,
    /// The folder of a `static` working directory (`working_dir` is accepted too); `null`
    /// makes it `temp`.
    #[serde(default, alias = "working_dir")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub working_directory_path: Patch<String>,
    /// Cleanup settings.
    #[serde(default)]
    pub cleanup: Option<CleanupChange>,
    /// Notification settings.
    #[serde(default)]
    pub notifications: Option<NotificationsChange>,
    /// Where its CLI agents run: `server` (the worker) or `runners` (`spool runner`); `null`:
    /// the deployment's default (`SPOOL_CLI_HOST`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::settings::CliHost>))]
    pub cli_host: Patch<crate::settings::CliHost>,
    /// The most input and output tokens its chats' models may use in a calendar month (UTC);
    /// `null` removes the budget.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>, minimum = 1))]
    pub monthly_token_budget: Patch<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{confine::WorkspaceRoots, workspace::Workspace};

    fn workspace() -> Workspace {
        Workspace::new("ws_1".to_owned(), "Docs".to_owned(), 1)
    }

    fn change(json: &str) -> WorkspaceChange {
        serde_json::from_str(json).unwrap()
    }

    #[tokio::test]
    async fn a_change_sets_only_what_it_names() {
        let mut ws = workspace();
        let roots = WorkspaceRoots::none();
        change(r#"{"title":" Research ","cleanup":{"chat_folder_days":30},"notifications":{"email":"a@b.io","on_task":false}}"#)
            .apply("acme", &mut ws, &roots, CliHost::Server)
            .await
            .unwrap();
        assert_eq!(ws.name, "Research");
        assert_eq!(ws.cleanup.chat_folder_days, 30);
        assert_eq!(ws.cleanup.turn_record_days, DEFAULT_KEEP_DAYS);
        assert_eq!(ws.notifications.email.as_deref(), Some("a@b.io"));
        assert!(ws.notifications.on_question && !ws.notifications.on_task);
        assert_eq!(ws.notifications.recipient(NotificationKind::Task), None);
        assert_eq!(ws.notifications.recipient(NotificationKind::Failure), Some("a@b.io"));
        change(r#"{"notifications":{"email":""}}"#)
            .apply("acme", &mut ws, &roots, CliHost::Server)
            .await
            .unwrap();
        assert_eq!(ws.notifications.email, None);
    }

    #[tokio::test]
    async fn bad_settings_are_refused() {
        let roots = WorkspaceRoots::none();
        for bad in [
            r#"{"cleanup":{"turn_record_days":0}}"#,
            r#"{"cleanup":{"chat_folder_days":4000}}"#,
            r#"{"notifications":{"email":"not an address"}}"#,
            r#"{"notifications":{"email":"a@b"}}"#,
            r#"{"notifications":{"email":"a@@b.io"}}"#,
            r#"{"working_directory_mode":"static"}"#,
            r#"{"working_directory_mode":"temp","working_directory_path":"/tmp"}"#,
            r#"{"title":"  "}"#,
            r#"{"monthly_token_budget":0}"#,
            r#"{"monthly_token_budget":1000000000001}"#,
        ] {
            let mut ws = workspace();
            assert!(
                change(bad)
                    .apply("acme", &mut ws, &roots, CliHost::Server)
                    .await
                    .is_err(),
                "{bad} was accepted"
            );
        }
        assert!(serde_json::from_str::<WorkspaceChange>(r#"{"cleanup":{"forever":true}}"#).is_err());
        assert!(serde_json::from_str::<WorkspaceChange>(r#"{"working_directory_mode":"shared"}"#).is_err());
    }

    #[tokio::test]
    async fn the_working_directory_modes() {
        let dir = tempfile::tempdir().unwrap();
        let roots = crate::confine::tests::roots(&[dir.path().to_path_buf()], &[]);
        let inside = dir.path().join("repo");
        std::fs::create_dir(&inside).unwrap();
        let mut ws = workspace();
        let set = format!(r#"{{"working_directory_mode":"static","working_directory_path":{inside:?}}}"#);
        change(&set)
            .apply("acme", &mut ws, &roots, CliHost::Server)
            .await
            .unwrap();
        assert_eq!(ws.working_dir_mode(), WorkingDirMode::Static);
        // `static` alone keeps the folder set; `temp` clears it.
        change(r#"{"working_directory_mode":"static"}"#)
            .apply("acme", &mut ws, &roots, CliHost::Server)
            .await
            .unwrap();
        assert!(ws.working_dir.is_some());
        change(r#"{"working_directory_mode":"temp"}"#)
            .apply("acme", &mut ws, &roots, CliHost::Server)
            .await
            .unwrap();
        assert_eq!(ws.working_dir_mode(), WorkingDirMode::Temp);
        // A folder that does not exist, or lies outside the roots, is refused.
        let missing = format!(r#"{{"working_dir":{:?}}}"#, dir.path().join("nope"));
        assert!(
            change(&missing)
                .apply("acme", &mut workspace(), &roots, CliHost::Server)
                .await
                .is_err()
        );
        assert!(
            change(r#"{"working_dir":"/etc"}"#)
                .apply("acme", &mut workspace(), &roots, CliHost::Server)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_folder_on_runners_is_not_confined_here_but_must_be_absolute_and_normalized() {
        let roots = WorkspaceRoots::none();
        // On a deployment whose default is runners, a folder the server does not have is kept.
        let mut ws = workspace();
        change(r#"{"working_dir":"/home/dev/repo"}"#)
            .apply("acme", &mut ws, &roots, CliHost::Runners)
            .await
            .unwrap();
        assert_eq!(ws.working_dir.as_deref(), Some("/home/dev/repo"));
        assert_eq!(ws.cli_host, None);
        for bad in [
            "repo",
            "./repo",
            "/home/dev/../etc",
            "/home/./dev",
            "/home//dev",
            "/home/dev/",
        ] {
            let set = format!(r#"{{"working_dir":{bad:?}}}"#);
            assert!(
                change(&set)
                    .apply("acme", &mut workspace(), &roots, CliHost::Runners)
                    .await
                    .is_err(),
                "{bad} was accepted"
            );
        }
        // On the server's default, a workspace that says `runners` is the same.
        let mut ws = workspace();
        change(r#"{"cli_host":"runners","working_dir":"/srv/code"}"#)
            .apply("acme", &mut ws, &roots, CliHost::Server)
            .await
            .unwrap();
        assert_eq!(ws.cli_host, Some(CliHost::Runners));
        // Back to the server: the folder is confined to the server's roots now (none here).
        let mut back = ws.clone();
        assert!(
            change(r#"{"cli_host":"server"}"#)
                .apply("acme", &mut back, &roots, CliHost::Server)
                .await
                .is_err()
        );
        // `null` is the deployment's default again; with a `temp` folder nothing is confined.
        change(r#"{"cli_host":null,"working_directory_mode":"temp"}"#)
            .apply("acme", &mut ws, &roots, CliHost::Server)
            .await
            .unwrap();
        assert_eq!((ws.cli_host, ws.working_dir.as_deref()), (None, None));
        assert!(serde_json::from_str::<WorkspaceChange>(r#"{"cli_host":"laptop"}"#).is_err());
    }

    #[test]
    fn records_without_settings_read_with_the_defaults() {
        let old = r#"{"id":"ws_1","name":"Docs","created_ms":1,"updated_ms":1}"#;
        let ws: Workspace = serde_json::from_str(old).unwrap();
        assert_eq!(ws.cleanup, Cleanup::default());
        assert_eq!(ws.notifications, Notifications::default());
        assert_eq!(ws.working_dir_mode(), WorkingDirMode::Temp);
    }
}
