//! # A workspace's feed
//!
//! Where a workspace's list-level events go and how one is announced, for the services
//! ([`crate::service::WorkspaceService`], [`crate::service::ChatService`]) and the worker.

use serde_json::Value;

use crate::{event::FeedEvent, workspace::Agent};
use spool_log::{
    aggregate::{Aggregates, IfMissing},
    error::Error,
    stream::StreamPath,
};

/// A workspace's feed: list-level events ([`FeedEvent`]: `chat.created`, `chat.renamed`,
/// `chat.deleted`, `chat.message_added`, `chat.processing_started`, `chat.processing_finished`,
/// `task.created`, `agent.created`, `agent.updated`, `agent.deleted`, `agent.reordered`) as a
/// JSON stream, read by clients at `/v1/stream/workspaces/{id}/feed`.
pub fn feed_path(org: &str, workspace_id: &str) -> Result<StreamPath, Error> {
    StreamPath::in_org(org, &format!("workspaces/{workspace_id}/feed"))
}

/// What happened to an agent, for its feed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentChange {
    /// Added.
    Created,
    /// Changed.
    Updated,
    /// Deleted.
    Deleted,
}

/// The feed event of a change to `agent`.
pub fn agent_event(agent: &Agent, change: AgentChange) -> FeedEvent {
    let (agent_id, agent_name, workspace_id) = (agent.id.clone(), agent.name.clone(), agent.workspace_id.clone());
    match change {
        AgentChange::Created => FeedEvent::AgentCreated {
            agent_id,
            agent_name,
            workspace_id,
        },
        AgentChange::Updated => FeedEvent::AgentUpdated {
            agent_id,
            agent_name,
            workspace_id,
        },
        AgentChange::Deleted => FeedEvent::AgentDeleted {
            agent_id,
            agent_name,
            workspace_id,
        },
    }
}

/// Hands a list-level event over for a workspace's feed ([`Aggregates`]: appended off the
/// request path on AWS), with its time as `ts` and a new `id`. A workspace's feed is made with
/// it and deleted with it: an event for a deleted workspace is dropped.
pub async fn announce(
    aggregates: &dyn Aggregates,
    org: &str,
    workspace_id: &str,
    event: &FeedEvent,
    now_rfc3339: &str,
) -> Result<(), Error> {
    let mut event = serde_json::to_value(event).map_err(|e| Error::unavailable("encode a feed event", e))?;
    event["ts"] = Value::String(now_rfc3339.to_owned());
    aggregates
        .add(&feed_path(org, workspace_id)?, event, IfMissing::Drop)
        .await
}
