//! # The workspace service: a workspace's write side, over ports only
//!
//! Making a workspace (its record, its feed and its built-in agent), deleting it with
//! everything it holds, its settings, its agents (added, changed, removed, reordered) and its
//! tasks ([`super::task`]) are written here once, for the HTTP functions (a person's request)
//! and the agents' actions (an agent's tool call) alike: the same limits, cascades, feed events
//! and notifications whoever asks. Callers parse, call one method and shape its answer; who may
//! ask (a token's organization, the built-in agent's actions) is theirs to check.

use std::sync::Arc;

use crate::{
    confine::WorkspaceRoots,
    event::FeedEvent,
    listing::{self, SessionQuery},
    manage::{self, AgentChange},
    metadata::Metadata,
    notifier::{LogNotifier, NotificationStatus, Notifier},
    settings::CliHost,
    settings::{Patch, WorkspaceChange},
    workspace::{Agent, CliType, Runtime, Workspace, new_id, plan_reorder},
};
use spool_log::{
    aggregate::{Aggregates, Direct},
    clock::{Clock, rfc3339_ms},
    error::Error,
    port::StreamLog,
    stream::{ContentType, CreateStream},
    subscription::refusal::Refusal,
};

use super::ChatService;

/// A workspace's write side over its ports.
#[derive(Clone)]
pub struct WorkspaceService {
    pub(super) metadata: Arc<dyn Metadata>,
    log: Arc<dyn StreamLog>,
    /// Where workspaces' feed events are handed over.
    feeds: Arc<dyn Aggregates>,
    clock: Arc<dyn Clock>,
    /// Where workspaces' working directories may be.
    roots: WorkspaceRoots,
    /// How people are told what happened (a task made).
    pub(super) notifier: Arc<dyn Notifier>,
    /// Where a workspace's CLI agents run unless it says otherwise.
    default_cli_host: CliHost,
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
    /// Its context budget in tokens (its runtime's own when absent).
    pub context_tokens: Option<u64>,
    /// Its place in the list, from 0 (the list's end when absent or beyond it).
    pub order: Option<usize>,
}

/// A change to an agent: only what it names changes.
#[derive(Debug, Clone, Default)]
pub struct AgentEdit {
    /// Its name.
    pub name: Option<String>,
    /// Its instruction.
    pub instruction: Option<String>,
    /// How it answers.
    pub runtime: Patch<Runtime>,
    /// Its model.
    pub model: Patch<String>,
    /// Its CLI.
    pub cli_type: Patch<CliType>,
    /// Its context budget in tokens.
    pub context_tokens: Patch<u64>,
}

impl WorkspaceService {
    /// The service over its ports.
    pub fn new(metadata: Arc<dyn Metadata>, log: Arc<dyn StreamLog>, clock: Arc<dyn Clock>) -> Self {
        Self {
            metadata,
            feeds: Arc::new(Direct(log.clone())),
            log,
            clock,
            roots: WorkspaceRoots::none(),
            notifier: Arc::new(LogNotifier),
            default_cli_host: CliHost::Server,
        }
    }

    /// The service, where workspaces' CLI agents run on `host` unless they say otherwise (the
    /// deployment's `SPOOL_CLI_HOST`; the worker by default).
    #[must_use]
    pub fn with_default_cli_host(mut self, host: CliHost) -> Self {
        self.default_cli_host = host;
        self
    }

    /// Where `workspace`'s CLI agents run: its own setting, or the deployment's default.
    pub fn cli_host(&self, workspace: &Workspace) -> CliHost {
        workspace.cli_host.unwrap_or(self.default_cli_host)
    }

    /// The service, handing feed events to `feeds` (appended at once otherwise).
    #[must_use]
    pub fn with_feeds(mut self, feeds: Arc<dyn Aggregates>) -> Self {
        self.feeds = feeds;
        self
    }

    /// The service, accepting working directories only under `roots` (none by default).
    #[must_use]
    pub fn with_workspace_roots(mut self, roots: WorkspaceRoots) -> Self {
        self.roots = roots;
        self
    }

    /// The service, telling people through `notifier` (a line in the log by default).
    #[must_use]
    pub fn with_notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.notifier = notifier;
        self
    }

    /// What `workspace`'s notification settings do on this deployment.
    pub fn notification_status(&self, workspace: &Workspace) -> NotificationStatus {
        crate::notifier::status(&workspace.notifications, self.notifier.as_ref())
    }

    /// The organization's workspace `id` ([`Error::Missing`] if it has none).
    pub async fn workspace(&self, org: &str, id: &str) -> Result<Workspace, Error> {
        self.metadata
            .workspace(org, id)
            .await?
            .ok_or_else(|| missing("workspace", id))
    }

    /// The organization's workspaces, oldest first.
    pub async fn workspaces(&self, org: &str) -> Result<Vec<Workspace>, Error> {
        self.metadata.workspaces(org).await
    }

    /// Makes a workspace with the settings of `change` over the defaults: its feed, then its
    /// record together with its built-in Spool agent.
    pub async fn create(&self, org: &str, change: WorkspaceChange) -> Result<Workspace, Error> {
        let now = self.clock.now_ms();
        let mut workspace = Workspace::new(new_id("ws"), String::new(), now);
        change
            .apply(org, &mut workspace, &self.roots, self.default_cli_host)
            .await?;
        let builtin = Agent::builtin(new_id("ag"), workspace.id.clone(), now);
        let json = ContentType::parse("application/json")?;
        self.log
            .create(&manage::feed_path(org, &workspace.id)?, CreateStream::new(json))
            .await?;
        self.metadata.create_workspace(org, &workspace, &builtin).await?;
        tracing::info!(org, workspace = %workspace.id, "workspace created");
        Ok(workspace)
    }

    /// Changes a workspace's settings by `change`; a bad one changes nothing.
    pub async fn update(&self, org: &str, id: &str, change: WorkspaceChange) -> Result<Workspace, Error> {
        let mut workspace = self.workspace(org, id).await?;
        change
            .apply(org, &mut workspace, &self.roots, self.default_cli_host)
            .await?;
        workspace.updated_ms = self.clock.now_ms();
        self.metadata.update_workspace(org, &workspace).await?;
        Ok(workspace)
    }

    /// Deletes a workspace: its chats first (through `chats`: files, streams and records), its
    /// webhooks, its feed, then its record with its agents and tasks. A delete interrupted
    /// half-way is finished by repeating it.
    pub async fn delete(&self, org: &str, id: &str, chats: &ChatService) -> Result<(), Error> {
        self.workspace(org, id).await?;
        loop {
            let first = SessionQuery::in_workspace(Some(id), listing::DEFAULT_LIMIT);
            let page = self.metadata.sessions(org, &first).await?.items;
            if page.is_empty() {
                break;
            }
            for chat in page {
                chats.remove(org, &chat.id).await?;
            }
        }
        // Its webhooks, before its feed: nothing more is delivered for it.
        for hook in self.metadata.hooks(org, id).await? {
            match self.metadata.delete_hook(org, &hook.id).await {
                Ok(()) | Err(Error::Missing { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match self.log.delete(&manage::feed_path(org, id)?).await {
            Ok(()) | Err(Error::NotFound { .. } | Error::Gone { .. }) => {}
            Err(e) => return Err(e),
        }
        self.metadata.delete_workspace(org, id).await?;
        tracing::info!(org, workspace = %id, "workspace deleted");
        Ok(())
    }

    /// The organization's agent `id` ([`Error::Missing`] if it has none).
    pub async fn agent(&self, org: &str, id: &str) -> Result<Agent, Error> {
        self.metadata.agent(org, id).await?.ok_or_else(|| missing("agent", id))
    }

    /// A workspace's agents by position ([`Error::Missing`] without the workspace).
    pub async fn agents(&self, org: &str, workspace_id: &str) -> Result<Vec<Agent>, Error> {
        self.workspace(org, workspace_id).await?;
        self.metadata.agents(org, workspace_id).await
    }

    /// Adds an agent to a workspace, last in its order unless `new.order` places it; announced
    /// on the feed. The store refuses it when the workspace has as many agents as it may
    /// ([`Error::CapReached`]), whoever asks.
    pub async fn add_agent(&self, org: &str, workspace_id: &str, new: NewAgent) -> Result<Agent, Error> {
        let agents = self.agents(org, workspace_id).await?;
        let now = self.clock.now_ms();
        let agent = Agent {
            id: new_id("ag"),
            workspace_id: workspace_id.to_owned(),
            name: crate::names::clean(&new.name),
            instruction: new.instruction,
            runtime: new.runtime,
            model: new.model,
            cli_type: new.cli_type,
            context_tokens: new.context_tokens,
            position: agents.iter().map(|a| a.position + 1).max().unwrap_or(0),
            builtin: false,
            created_ms: now,
            updated_ms: now,
        };
        agent.validate()?;
        self.metadata.create_agent(org, &agent).await?;
        if let Some(order) = new.order {
            let mut ids: Vec<String> = agents.into_iter().map(|a| a.id).collect();
            ids.insert(order.min(ids.len()), agent.id.clone());
            let agents = self.metadata.agents(org, workspace_id).await?;
            let moves = plan_reorder(&agents, &ids)?;
            self.metadata.set_positions(org, workspace_id, &moves).await?;
        }
        self.announce(org, workspace_id, &manage::agent_event(&agent, AgentChange::Created))
            .await?;
        Ok(agent)
    }

    /// Changes agent `id` by `edit`; announced on the feed.
    pub async fn update_agent(&self, org: &str, id: &str, edit: AgentEdit) -> Result<Agent, Error> {
        let mut agent = self.agent(org, id).await?;
        if let Some(name) = edit.name {
            agent.name = crate::names::clean(&name);
        }
        if let Some(instruction) = edit.instruction {
            agent.instruction = instruction;
        }
        edit.runtime.apply(&mut agent.runtime);
        edit.model.apply(&mut agent.model);
        edit.cli_type.apply(&mut agent.cli_type);
        edit.context_tokens.apply(&mut agent.context_tokens);
        agent.validate()?;
        agent.updated_ms = self.clock.now_ms();
        self.metadata.update_agent(org, &agent).await?;
        self.announce(
            org,
            &agent.workspace_id,
            &manage::agent_event(&agent, AgentChange::Updated),
        )
        .await?;
        Ok(agent)
    }

    /// Deletes agent `id`; its chats move to the workspace's built-in agent first (with their
    /// CLI override cleared), so none is left without one; announced on the feed. The built-in
    /// agent itself is refused (`409 conflict`). Returns the agent deleted.
    pub async fn remove_agent(&self, org: &str, id: &str) -> Result<Agent, Error> {
        let agent = self.agent(org, id).await?;
        if agent.builtin {
            return Err(Refusal::new(
                409,
                "conflict",
                "the built-in Spool agent cannot be deleted; change its instruction or runtime instead",
            )
            .into());
        }
        let builtin = self
            .metadata
            .agents(org, &agent.workspace_id)
            .await?
            .into_iter()
            .find(|a| a.builtin);
        // Walked by cursor: a move changes no chat's place in the list, and a list index that is
        // a moment behind (DynamoDB's) cannot bring a moved chat back.
        let mut query = SessionQuery::in_workspace(Some(&agent.workspace_id), listing::MAX_LIMIT);
        query.agent_id = Some(agent.id.clone());
        loop {
            let page = self.metadata.sessions(org, &query).await?;
            for mut chat in page.items {
                chat.agent_id = builtin.as_ref().map(|a| a.id.clone());
                chat.cli_override = None;
                self.metadata.update_session(org, &chat).await?;
            }
            match page.next {
                Some(next) => query.after = Some(next),
                None => break,
            }
        }
        self.metadata.delete_agent(org, &agent.id).await?;
        self.announce(
            org,
            &agent.workspace_id,
            &manage::agent_event(&agent, AgentChange::Deleted),
        )
        .await?;
        Ok(agent)
    }

    /// Puts a workspace's agents in the order of `ids` (every agent, once); announced on the
    /// feed. Returns them in their new order.
    pub async fn reorder_agents(&self, org: &str, workspace_id: &str, ids: Vec<String>) -> Result<Vec<Agent>, Error> {
        let agents = self.agents(org, workspace_id).await?;
        let moves = plan_reorder(&agents, &ids)?;
        self.metadata.set_positions(org, workspace_id, &moves).await?;
        let event = FeedEvent::AgentsReordered {
            agent_ids: ids,
            workspace_id: workspace_id.to_owned(),
        };
        self.announce(org, workspace_id, &event).await?;
        self.metadata.agents(org, workspace_id).await
    }

    /// Announces a list-level event on a workspace's feed.
    pub(super) async fn announce(&self, org: &str, workspace_id: &str, event: &FeedEvent) -> Result<(), Error> {
        let now = rfc3339_ms(self.clock.now_ms());
        manage::announce(self.feeds.as_ref(), org, workspace_id, event, &now).await
    }

    /// Now, as RFC 3339.
    pub(super) fn now_rfc3339(&self) -> String {
        rfc3339_ms(self.clock.now_ms())
    }

    /// The service's clock, read.
    pub(super) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Where feed events are handed over.
    pub(super) fn feeds(&self) -> &dyn Aggregates {
        self.feeds.as_ref()
    }
}

/// [`Error::Missing`] for `what` `id`.
pub(super) fn missing(what: &str, id: &str) -> Error {
    Error::Missing {
        what: format!("{what} `{id}`"),
    }
}
