//! # A workspace's tasks
//!
//! Made by an agent (the `create_task` action) or by a person (by hand), with one rule either
//! way: a title and a description within their limits, a chat of the same workspace if one is
//! named, a `task.created` event on the workspace's feed (and so to its webhooks), and a
//! notification when the workspace's settings ask for one.

use super::{WorkspaceService, workspace::missing};
use crate::{
    event::FeedEvent,
    listing::{Page, TaskQuery},
    notifier::About,
    settings::NotificationKind,
    workspace::{Task, new_id},
};
use spool_log::error::Error;

/// What a new task is made of.
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    /// What it is.
    pub title: String,
    /// What to do.
    pub description: String,
    /// The workspace's chat it belongs to, if any.
    pub session_id: Option<String>,
}

/// Who makes a task.
#[derive(Debug, Clone, Copy)]
pub struct TaskAuthor<'a> {
    /// The person: by hand, or whose message led an agent to it (their token subject).
    pub person: Option<&'a str>,
    /// The agent's name, when an agent makes it.
    pub agent: Option<&'a str>,
}

/// A change to a task: only what it names changes.
#[derive(Debug, Clone, Default)]
pub struct TaskEdit {
    /// What it is.
    pub title: Option<String>,
    /// What to do.
    pub description: Option<String>,
}

impl WorkspaceService {
    /// The organization's task `id` ([`Error::Missing`] if it has none).
    pub async fn task(&self, org: &str, id: &str) -> Result<Task, Error> {
        self.metadata.task(org, id).await?.ok_or_else(|| missing("task", id))
    }

    /// A page of a workspace's tasks, newest first (none for a workspace the organization does
    /// not have: [`Self::workspace`] tells it apart).
    pub async fn tasks(&self, org: &str, query: &TaskQuery) -> Result<Page<Task>, Error> {
        self.metadata.tasks(org, query).await
    }

    /// Makes a task in a workspace (in one of its chats, if `new` names one), announces it on
    /// the feed and tells the workspace's person if its settings ask for it. The store refuses
    /// it when the workspace has as many tasks as it may ([`Error::CapReached`]).
    pub async fn create_task(
        &self,
        org: &str,
        workspace_id: &str,
        new: NewTask,
        by: TaskAuthor<'_>,
    ) -> Result<Task, Error> {
        let workspace = self.workspace(org, workspace_id).await?;
        let task = Task {
            id: new_id("task"),
            workspace_id: workspace_id.to_owned(),
            session_id: new.session_id,
            title: crate::names::clean(&new.title),
            description: new.description,
            created_ms: self.now_ms(),
        };
        // The description before the chat, the title after, as the API has always answered.
        crate::workspace::check_text("task description", &task.description)?;
        let chat = match &task.session_id {
            Some(id) => {
                let session = self
                    .metadata
                    .session(org, id)
                    .await?
                    .ok_or_else(|| missing("session", id))?;
                if session.workspace_id.as_deref() != Some(workspace_id) {
                    return Err(missing("chat of this workspace", id));
                }
                Some(session)
            }
            None => None,
        };
        task.validate()?;
        self.metadata.create_task(org, &task).await?;
        let actor = by.person.or(by.agent).unwrap_or_default();
        let event = FeedEvent::TaskCreated {
            task_id: task.id.clone(),
            summary: task.title.clone(),
            chat_id: task.session_id.clone(),
            workspace_id: workspace_id.to_owned(),
            actor: actor.to_owned(),
            agent: by.agent.map(str::to_owned),
        };
        self.announce(org, workspace_id, &event).await?;
        // The task is made: telling someone about it is a courtesy that cannot fail the request
        // (a retried action would make the task twice).
        let about = About {
            chat: chat.as_ref().map(|s| (s.id.as_str(), s.title.as_str())),
            actor: by.agent.unwrap_or(actor),
            detail: &task.title,
        };
        crate::notifier::notify(
            self.feeds(),
            self.notifier.as_ref(),
            org,
            &workspace,
            NotificationKind::Task,
            about,
            &self.now_rfc3339(),
        )
        .await;
        Ok(task)
    }

    /// Changes task `id` by `edit`.
    pub async fn update_task(&self, org: &str, id: &str, edit: TaskEdit) -> Result<Task, Error> {
        let mut task = self.task(org, id).await?;
        if let Some(title) = edit.title {
            task.title = crate::names::clean(&title);
        }
        if let Some(description) = edit.description {
            task.description = description;
        }
        task.validate()?;
        self.metadata.update_task(org, &task).await?;
        Ok(task)
    }

    /// Deletes task `id` ([`Error::Missing`] if the organization has none).
    pub async fn delete_task(&self, org: &str, id: &str) -> Result<(), Error> {
        self.metadata.delete_task(org, id).await
    }
}
