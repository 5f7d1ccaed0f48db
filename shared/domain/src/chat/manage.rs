//! # Managing a workspace: what people (through the API) and agents (through actions) share
//!
//! Adding and removing agents, reordering them, and announcing list-level events on a
//! workspace's feed, written once so that a person's request and an agent's action do the same
//! thing.

use serde_json::Value;

use crate::{
    Agent, Aggregates, Error, FeedEvent, IfMissing, Metadata, StreamPath,
    listing::{self, SessionQuery},
    workspace::{CliType, Runtime, new_id, plan_reorder},
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

/// What a new agent is made of.
#[derive(Debug, Clone, Default)]
pub struct NewAgent {
    /// Its name.
    pub name: String,
    /// What it is told to do.
    pub instruction: String,
    /// How it answers.
    pub runtime: Option<Runtime>,
    /// Its model.
    pub model: Option<String>,
    /// Its CLI.
    pub cli_type: Option<CliType>,
}

/// Adds an agent to a workspace, last in its order. The store refuses it when the workspace
/// has as many agents as it may ([`Error::CapReached`]), whoever asks: a person or an agent.
pub async fn add_agent(
    metadata: &dyn Metadata,
    org: &str,
    workspace_id: &str,
    new: NewAgent,
    now_ms: i64,
) -> Result<Agent, Error> {
    let agents = metadata.agents(org, workspace_id).await?;
    let agent = Agent {
        id: new_id("ag"),
        workspace_id: workspace_id.to_owned(),
        name: crate::names::clean(&new.name),
        instruction: new.instruction,
        runtime: new.runtime,
        model: new.model,
        cli_type: new.cli_type,
        position: agents.iter().map(|a| a.position + 1).max().unwrap_or(0),
        builtin: false,
        created_ms: now_ms,
        updated_ms: now_ms,
    };
    agent.validate()?;
    metadata.create_agent(org, &agent).await?;
    Ok(agent)
}

/// Deletes an agent; its chats move to the workspace's built-in agent first (with their CLI
/// override cleared), so none is left without one. The built-in agent itself is refused
/// ([`Error::Invalid`]).
pub async fn remove_agent(metadata: &dyn Metadata, org: &str, agent: &Agent) -> Result<(), Error> {
    if agent.builtin {
        return Err(Error::Invalid {
            what: "agent",
            reason: "the built-in Spool agent cannot be deleted; change its instruction or runtime instead".to_owned(),
        });
    }
    let builtin = metadata
        .agents(org, &agent.workspace_id)
        .await?
        .into_iter()
        .find(|a| a.builtin);
    // Walked by cursor: a move changes no chat's place in the list, and a list index that is
    // a moment behind (DynamoDB's) cannot bring a moved chat back.
    let mut query = SessionQuery::in_workspace(Some(&agent.workspace_id), listing::MAX_LIMIT);
    query.agent_id = Some(agent.id.clone());
    loop {
        let page = metadata.sessions(org, &query).await?;
        for mut chat in page.items {
            chat.agent_id = builtin.as_ref().map(|a| a.id.clone());
            chat.cli_override = None;
            metadata.update_session(org, &chat).await?;
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    metadata.delete_agent(org, &agent.id).await
}

/// Puts a workspace's agents in the order of `ids` (every agent, once).
pub async fn reorder_agents(
    metadata: &dyn Metadata,
    org: &str,
    workspace_id: &str,
    ids: &[String],
) -> Result<(), Error> {
    let agents = metadata.agents(org, workspace_id).await?;
    let moves = plan_reorder(&agents, ids)?;
    metadata.set_positions(org, workspace_id, &moves).await
}
