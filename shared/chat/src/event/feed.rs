//! A workspace's feed events: list-level news of its chats, tasks, agents and notifications.

use serde::{Deserialize, Serialize};

use super::EndReason;

/// A list-level event on a workspace's feed (`/v1/stream/workspaces/{id}/feed`), so lists can
/// update without reading chats.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum FeedEvent {
    /// A chat was made.
    #[serde(rename = "chat.created")]
    ChatCreated {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// A chat was renamed.
    #[serde(rename = "chat.renamed")]
    ChatRenamed {
        /// The chat.
        chat_id: String,
        /// Its new title.
        chat_title: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// A chat was deleted.
    #[serde(rename = "chat.deleted")]
    ChatDeleted {
        /// The chat.
        chat_id: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// A message (a person's, an agent's or Spool's own) was added to a chat.
    #[serde(rename = "chat.message_added")]
    MessageAdded {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// Who wrote it.
        author_type: AuthorType,
        /// Its workspace.
        workspace_id: String,
    },
    /// A turn started in a chat.
    #[serde(rename = "chat.processing_started")]
    ProcessingStarted {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// The agent that answers.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// A turn ended in a chat.
    #[serde(rename = "chat.processing_finished")]
    ProcessingFinished {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// The agent that answered.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
        /// How it ended.
        reason: EndReason,
    },
    /// A task was made (by an agent's action or by hand).
    #[serde(rename = "task.created")]
    TaskCreated {
        /// The task.
        task_id: String,
        /// What it is.
        summary: String,
        /// The chat it came from, if any.
        chat_id: Option<String>,
        /// Its workspace.
        workspace_id: String,
        /// Who caused it: the person (token subject) whose message the agent answered, or who
        /// made it by hand; the agent's name only when no person asked (the third source
        /// design's "with the actor being the user").
        actor: String,
        /// The agent that made it, by name; `null` when a person made it by hand.
        #[serde(default)]
        agent: Option<String>,
    },
    /// An agent waits on a person: a question, a tool call to approve, a plan to review.
    #[serde(rename = "input.required")]
    InputRequired {
        /// The chat.
        chat_id: String,
        /// Its title.
        chat_title: String,
        /// The agent that asks.
        agent_name: String,
        /// What it waits for: `question`, `approval` or `plan`.
        kind: crate::session::RequestKind,
        /// The request to answer (a question's, a tool call's or a plan's id).
        request_id: String,
        /// What is asked, in a line.
        summary: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// An agent was added.
    #[serde(rename = "agent.created")]
    AgentCreated {
        /// The agent.
        agent_id: String,
        /// Its name.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// An agent was changed.
    #[serde(rename = "agent.updated")]
    AgentUpdated {
        /// The agent.
        agent_id: String,
        /// Its name.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// An agent was deleted (its chats moved to the built-in agent).
    #[serde(rename = "agent.deleted")]
    AgentDeleted {
        /// The agent.
        agent_id: String,
        /// Its name.
        agent_name: String,
        /// Its workspace.
        workspace_id: String,
    },
    /// The workspace's agents were put in a new order.
    #[serde(rename = "agent.reordered")]
    AgentsReordered {
        /// Every agent, in the new order.
        agent_ids: Vec<String>,
        /// The workspace.
        workspace_id: String,
    },
    /// Spool told a person about something in the workspace ([`crate::notifier`]).
    #[serde(rename = "notification.sent")]
    NotificationSent {
        /// What about.
        kind: crate::settings::NotificationKind,
        /// To whom.
        to: String,
        /// How: `email` or `log` (no email sender is configured).
        via: String,
        /// Its subject line.
        subject: String,
        /// The chat it is about.
        chat_id: Option<String>,
        /// The workspace.
        workspace_id: String,
    },
    /// Spool could not tell a person: what went wrong, for the operator.
    #[serde(rename = "notification.failed")]
    NotificationFailed {
        /// What about.
        kind: crate::settings::NotificationKind,
        /// To whom.
        to: String,
        /// Why.
        error: String,
        /// The chat it is about.
        chat_id: Option<String>,
        /// The workspace.
        workspace_id: String,
    },
}

/// Who wrote a message, as feed events say it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthorType {
    /// A person.
    User,
    /// An agent.
    Agent,
    /// Spool itself.
    System,
}
