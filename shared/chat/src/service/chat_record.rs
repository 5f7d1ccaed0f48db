//! # A chat's record: chats listed, and what a chat is changed
//!
//! Listing an organization's chats and changing what a chat is (its title, its agent, its CLI,
//! what a companion enabled in it) are written here once, for the HTTP functions (a person's
//! request) and the agents' actions (`rename_chat`) alike: the same cleaning, checks and feed
//! event whoever asks. Callers find the chat and check who may change it; a new agent for the
//! chat is theirs to pick (in the chat's workspace).

use std::{collections::HashMap, sync::Arc};

use crate::{
    event::FeedEvent,
    listing::{Page, SessionQuery},
    manage,
    metadata::Metadata,
    names,
    session::Session,
    settings::Patch,
    workspace::{Agent, CliType},
};
use spool_log::{
    aggregate::{Aggregates, Direct},
    clock::{Clock, rfc3339_ms},
    error::Error,
    port::StreamLog,
};

/// Chats' records over their ports: listed, and changed.
#[derive(Clone)]
pub struct ChatRecords {
    metadata: Arc<dyn Metadata>,
    /// Where workspaces' feed events are handed over.
    feeds: Arc<dyn Aggregates>,
    clock: Arc<dyn Clock>,
}

/// A change to a chat: only what it names changes.
#[derive(Debug, Clone, Default)]
pub struct ChatChange {
    /// Its title (cleaned of format characters and trimmed).
    pub title: Option<String>,
    /// The agent it talks to from now on; another agent than its own clears its CLI override
    /// (unless `cli_type` sets one).
    pub agent: Option<Agent>,
    /// The CLI that answers in it instead of the agent's.
    pub cli_type: Patch<CliType>,
}

/// A chat in a list, with the name of the agent it talks to.
#[derive(Debug, Clone)]
pub struct ListedChat {
    /// The chat's record.
    pub session: Session,
    /// Its agent's name, when the list is a workspace's and the agent is in it.
    pub agent_name: Option<String>,
}

impl ChatRecords {
    /// The records over their ports.
    pub fn new(metadata: Arc<dyn Metadata>, log: Arc<dyn StreamLog>, clock: Arc<dyn Clock>) -> Self {
        Self {
            metadata,
            feeds: Arc::new(Direct(log)),
            clock,
        }
    }

    /// The records, handing feed events to `feeds` (appended at once otherwise).
    #[must_use]
    pub fn with_feeds(mut self, feeds: Arc<dyn Aggregates>) -> Self {
        self.feeds = feeds;
        self
    }

    /// The organization's chat `id`, if it has one (the global chat only once it was made).
    pub async fn find(&self, org: &str, id: &str) -> Result<Option<Session>, Error> {
        self.metadata.session(org, id).await
    }

    /// A page of the chats `query` selects, most recently active first, each with its agent's
    /// name when `query` names a workspace.
    pub async fn list(&self, org: &str, query: &SessionQuery) -> Result<Page<ListedChat>, Error> {
        let page = self.metadata.sessions(org, query).await?;
        let names: HashMap<String, String> = match &query.workspace_id {
            Some(ws) => self
                .metadata
                .agents(org, ws)
                .await?
                .into_iter()
                .map(|a| (a.id, a.name))
                .collect(),
            None => HashMap::new(),
        };
        let items = page
            .items
            .into_iter()
            .map(|session| {
                let agent_name = session.agent_id.as_ref().and_then(|id| names.get(id).cloned());
                ListedChat { session, agent_name }
            })
            .collect();
        Ok(Page { items, next: page.next })
    }

    /// The name of the agent `session` talks to, if it has one that exists.
    pub async fn agent_name(&self, org: &str, session: &Session) -> Result<Option<String>, Error> {
        match &session.agent_id {
            Some(id) => Ok(self.metadata.agent(org, id).await?.map(|a| a.name)),
            None => Ok(None),
        }
    }

    /// Changes `session` as `change` says and stores it; a new title of a workspace's chat is
    /// announced on the workspace's feed. Returns the changed chat.
    pub async fn change(&self, org: &str, mut session: Session, change: ChatChange) -> Result<Session, Error> {
        let before = session.title.clone();
        if let Some(title) = change.title {
            session.title = names::clean(&title);
        }
        if let Some(agent) = change.agent
            && session.agent_id.as_deref() != Some(&*agent.id)
        {
            session.agent_id = Some(agent.id);
            session.cli_override = None;
        }
        change.cli_type.apply(&mut session.cli_override);
        session.validate()?;
        let now = self.clock.now_ms();
        session.updated_ms = now;
        self.metadata.update_session(org, &session).await?;
        if let Some(ws) = &session.workspace_id
            && session.title != before
        {
            let event = FeedEvent::ChatRenamed {
                chat_id: session.id.clone(),
                chat_title: session.title.clone(),
                workspace_id: ws.clone(),
            };
            manage::announce(self.feeds.as_ref(), org, ws, &event, &rfc3339_ms(self.clock.now_ms())).await?;
        }
        Ok(session)
    }

    /// Stores `capabilities` as what a companion enabled in `session`.
    pub async fn set_capabilities(
        &self,
        org: &str,
        session: &mut Session,
        capabilities: Vec<String>,
    ) -> Result<(), Error> {
        session.capabilities = capabilities;
        self.metadata.update_session(org, session).await
    }
}
