//! # Telling a person when an agent needs them
//!
//! A workspace's [`Notifications`] settings name an address and what to tell it about: an
//! agent asks a question, a turn fails, a task is made. [`notify`] builds the
//! message and hands it to the [`Notifier`] the deployment has: Amazon SES on AWS when an
//! operator configures a sender, otherwise [`LogNotifier`], a line in the server's log. Either
//! way the workspace's feed records what was sent (`notification.sent`) or why not
//! (`notification.failed`), so the UI can show it, and a failure never fails the turn.

use async_trait::async_trait;
use serde::Serialize;

use crate::{
    event::FeedEvent,
    manage::announce,
    settings::{NotificationKind, Notifications},
    workspace::Workspace,
};
use spool_log::{aggregate::Aggregates, error::Error};

/// The longest detail a notification quotes, in characters.
const MAX_DETAIL_CHARS: usize = 2000;
/// How long a notifier may take to send one: the turn waits for it.
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// One message to one person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// What about.
    pub kind: NotificationKind,
    /// The address.
    pub to: String,
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub body: String,
}

/// How notifications leave Spool.
#[async_trait]
pub trait Notifier: Send + Sync {
    /// `email` if it sends mail, `log` if it only logs.
    fn via(&self) -> &'static str;

    /// The address it sends from, if it sends mail.
    fn sender(&self) -> Option<&str>;

    /// Delivers one notification.
    async fn send(&self, notification: &Notification) -> Result<(), Error>;
}

/// The notifier of a deployment with no email sender: a line in the log.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogNotifier;

#[async_trait]
impl Notifier for LogNotifier {
    fn via(&self) -> &'static str {
        "log"
    }

    fn sender(&self) -> Option<&str> {
        None
    }

    async fn send(&self, n: &Notification) -> Result<(), Error> {
        tracing::info!(to = %n.to, kind = ?n.kind, subject = %n.subject, "notification (no email sender is configured; set SPOOL_NOTIFY_FROM to send email)");
        Ok(())
    }
}

/// Whether a workspace's notifications reach anyone, for people to see.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// No address, or nothing chosen: nothing is sent.
    Off,
    /// Recorded in the server's log and the workspace's feed; no email leaves.
    LogOnly,
    /// Sent by email.
    Email,
}

/// What a workspace's notification settings do on this deployment.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotificationStatus {
    /// Where notifications go.
    pub state: DeliveryState,
    /// The same, in a sentence, with what to do if it is not what the person wants.
    pub message: String,
}

/// What `settings` do with `notifier`.
pub fn status(settings: &Notifications, notifier: &dyn Notifier) -> NotificationStatus {
    let any = settings.on_question || settings.on_failure || settings.on_task;
    match (&settings.email, notifier.sender()) {
        (None, _) => NotificationStatus {
            state: DeliveryState::Off,
            message: "No email address is set, so nothing is sent.".to_owned(),
        },
        (Some(_), _) if !any => NotificationStatus {
            state: DeliveryState::Off,
            message: "Every notification is turned off.".to_owned(),
        },
        (Some(to), Some(from)) => NotificationStatus {
            state: DeliveryState::Email,
            message: format!("Emails go to {to} from {from}."),
        },
        (Some(to), None) => NotificationStatus {
            state: DeliveryState::LogOnly,
            message: format!(
                "This server sends no email, so notifications for {to} appear in its log and in the workspace's activity; an operator sets SPOOL_NOTIFY_FROM to send them."
            ),
        },
    }
}

/// What a notification is about.
#[derive(Debug, Clone, Copy)]
pub struct About<'a> {
    /// The chat, with its title.
    pub chat: Option<(&'a str, &'a str)>,
    /// Who: the agent's name.
    pub actor: &'a str,
    /// What happened, in the words to quote (a question, an error, a task's summary).
    pub detail: &'a str,
}

/// Tells `workspace`'s person about `kind`, if its settings ask for it, and records on its feed
/// what was sent or why not. Never fails: a notification is a courtesy, not part of the turn.
pub async fn notify(
    feeds: &dyn Aggregates,
    notifier: &dyn Notifier,
    org: &str,
    workspace: &Workspace,
    kind: NotificationKind,
    about: About<'_>,
    now_rfc3339: &str,
) {
    let Some(to) = workspace.notifications.recipient(kind) else {
        return;
    };
    let notification = compose(workspace, kind, to, about);
    let chat_id = about.chat.map(|(id, _)| id.to_owned());
    let sent = match tokio::time::timeout(SEND_TIMEOUT, notifier.send(&notification)).await {
        Ok(sent) => sent,
        Err(_) => Err(Error::unavailable(
            "send a notification",
            format!("no answer within {} s", SEND_TIMEOUT.as_secs()),
        )),
    };
    let event = match sent {
        Ok(()) => FeedEvent::NotificationSent {
            kind,
            to: to.to_owned(),
            via: notifier.via().to_owned(),
            subject: notification.subject,
            chat_id,
            workspace_id: workspace.id.clone(),
        },
        Err(e) => {
            tracing::warn!(org, workspace = %workspace.id, error = %e, "cannot send a notification");
            FeedEvent::NotificationFailed {
                kind,
                to: to.to_owned(),
                error: match &e {
                    Error::Unavailable { message, source } => format!("{message}: {source}"),
                    other => other.to_string(),
                },
                chat_id,
                workspace_id: workspace.id.clone(),
            }
        }
    };
    if let Err(e) = announce(feeds, org, &workspace.id, &event, now_rfc3339).await {
        tracing::warn!(org, workspace = %workspace.id, error = %e, "cannot record a notification on the feed");
    }
}

/// The message: a subject that says where and what, a body that quotes it.
fn compose(workspace: &Workspace, kind: NotificationKind, to: &str, about: About<'_>) -> Notification {
    let what = match kind {
        NotificationKind::Question => format!("{} needs your answer", about.actor),
        NotificationKind::Failure => format!("{}'s turn failed", about.actor),
        NotificationKind::Task => format!("{} created a task", about.actor),
    };
    let place = match about.chat {
        Some((_, title)) => format!("{} · {title}", workspace.name),
        None => workspace.name.clone(),
    };
    let mut detail: String = about.detail.chars().take(MAX_DETAIL_CHARS).collect();
    if detail.len() < about.detail.len() {
        detail.push('…');
    }
    let chat = about
        .chat
        .map(|(id, title)| format!("Chat: {title} ({id})\n"))
        .unwrap_or_default();
    let body = format!(
        "{what}:\n\n{detail}\n\nWorkspace: {} ({})\n{chat}\nYou get this because the workspace's notification settings send it to {to}; change them on the workspace's settings page.\n",
        workspace.name, workspace.id
    );
    Notification {
        kind,
        to: to.to_owned(),
        subject: format!("[Spool] {place}: {what}"),
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_says_where_notifications_go() {
        let mut settings = Notifications::default();
        assert_eq!(status(&settings, &LogNotifier).state, DeliveryState::Off);
        settings.email = Some("a@b.io".into());
        let local = status(&settings, &LogNotifier);
        assert_eq!(local.state, DeliveryState::LogOnly);
        assert!(local.message.contains("SPOOL_NOTIFY_FROM"), "{}", local.message);
        settings.on_question = false;
        settings.on_failure = false;
        settings.on_task = false;
        assert_eq!(status(&settings, &LogNotifier).state, DeliveryState::Off);
    }

    #[test]
    fn a_message_says_where_and_what_and_quotes_a_bounded_detail() {
        let mut ws = Workspace::new("ws_1".into(), "Docs".into(), 0);
        ws.notifications.email = Some("a@b.io".into());
        let long = "x".repeat(5000);
        let about = About {
            chat: Some(("ses_1", "Release")),
            actor: "Planner",
            detail: &long,
        };
        let n = compose(&ws, NotificationKind::Question, "a@b.io", about);
        assert_eq!(n.subject, "[Spool] Docs · Release: Planner needs your answer");
        assert!(n.body.contains("Chat: Release (ses_1)"));
        assert!(n.body.len() < 2600, "{}", n.body.len());
    }
}
