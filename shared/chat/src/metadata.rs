//! # The metadata store's ports
//!
//! Everything Spool keeps besides streams, as the traits an adapter implements: the
//! organizations' [`Workspaces`] (with agents and tasks) and [`Sessions`] (chats, their turns
//! and open requests), and [`Metadata`], all of them and the directory, slash commands, files,
//! subscriptions and webhooks from one adapter (`spool_embedded`, `spool_aws`).

use async_trait::async_trait;
use spool_log::error::Error;

use crate::{
    listing::{Page, SessionQuery, TaskQuery, TurnQuery},
    session::{OpenRequest, PendingTurn, RequestKind, Session, TurnRecord},
    workspace::{Agent, Task, Workspace},
};

/// Sessions, per organization.
#[async_trait]
pub trait Sessions: Send + Sync {
    /// Stores a new session ([`Error::Exists`] if its id is taken).
    async fn create_session(&self, org: &str, session: &Session) -> Result<(), Error>;

    /// The session, if the organization has it.
    async fn session(&self, org: &str, id: &str) -> Result<Option<Session>, Error>;

    /// Replaces the fields a client sets (title, agent, CLI override, capabilities), leaving the
    /// activity fields alone ([`Error::Missing`] if it does not exist).
    async fn update_session(&self, org: &str, session: &Session) -> Result<(), Error>;

    /// Records activity: `last_active_ms` and `preview`, unless newer activity is recorded.
    async fn touch_session(&self, org: &str, id: &str, at_ms: i64, preview: &str) -> Result<(), Error>;

    /// Records that the chat's latest branch event is at `seq`, unless a later one is recorded
    /// (nothing if the session is gone).
    async fn note_branch(&self, org: &str, id: &str, seq: u64) -> Result<(), Error>;

    /// Deletes the session's record and open requests ([`Error::Missing`] if it does not exist).
    async fn delete_session(&self, org: &str, id: &str) -> Result<(), Error>;

    /// A page of the chats `query` selects, most recently active first (ties by id, descending),
    /// starting after its position ([`crate::listing`]).
    async fn sessions(&self, org: &str, query: &SessionQuery) -> Result<Page<Session>, Error>;

    /// Makes `turn` the session's pending turn unless another is: `Ok(Err(holder))` then
    /// ([`Error::Missing`] if there is no such session). Claiming the turn that holds it already
    /// succeeds, so a retried claim is harmless.
    async fn claim_turn(&self, org: &str, id: &str, turn: &PendingTurn) -> Result<Result<(), PendingTurn>, Error>;

    /// Clears the session's pending turn if it is `turn_id`; true if it was.
    async fn release_turn(&self, org: &str, id: &str, turn_id: &str) -> Result<bool, Error>;

    /// Records where a turn is, unless its record is already further along
    /// ([`TurnStatus::rank`]): a late `queued` never hides `completed`.
    async fn record_turn(&self, org: &str, session_id: &str, turn: &TurnRecord) -> Result<(), Error>;

    /// Counts a real run of one step of a turn (`step`: the job's key, [`crate::turns::TurnJob::key`])
    /// at `now_ms` and returns how many there have been, this one included. A delivery that
    /// never ran (a throttled invocation) is not counted, so only runs use up a step's
    /// attempts. A count is kept [`RUN_COUNT_TTL_MS`] after its last run.
    async fn count_run(&self, org: &str, session_id: &str, step: &str, now_ms: i64) -> Result<u32, Error>;

    /// A page of a session's turns, newest first (ties by id, descending); finished ones past
    /// their [`TurnRecord::expires_ms`] are gone.
    async fn turns(&self, org: &str, query: &TurnQuery) -> Result<Page<TurnRecord>, Error>;

    /// Records a request the session waits on ([`Error::Exists`] if its id is open already).
    async fn open_request(&self, org: &str, session_id: &str, request: &OpenRequest) -> Result<(), Error>;

    /// Takes an open request (of `kind`, when given), atomically: of two answers to one request,
    /// one gets it and the other `None`; a request of another kind stays open.
    async fn take_request(
        &self,
        org: &str,
        session_id: &str,
        request_id: &str,
        kind: Option<RequestKind>,
    ) -> Result<Option<OpenRequest>, Error>;

    /// The session's open requests.
    async fn open_requests(&self, org: &str, session_id: &str) -> Result<Vec<OpenRequest>, Error>;
}

/// Workspaces and their agents, per organization.
#[async_trait]
pub trait Workspaces: Send + Sync {
    /// Stores a new workspace together with its built-in agent, atomically.
    async fn create_workspace(&self, org: &str, workspace: &Workspace, builtin: &Agent) -> Result<(), Error>;

    /// The workspace, if the organization has it.
    async fn workspace(&self, org: &str, id: &str) -> Result<Option<Workspace>, Error>;

    /// The organization's workspaces, oldest first.
    async fn workspaces(&self, org: &str) -> Result<Vec<Workspace>, Error>;

    /// Replaces a workspace's fields ([`Error::Missing`] if it does not exist).
    async fn update_workspace(&self, org: &str, workspace: &Workspace) -> Result<(), Error>;

    /// Deletes a workspace, its agents, its tasks and its slash commands ([`Error::Missing`] if
    /// it does not exist); the organization's command count loses the workspace's.
    async fn delete_workspace(&self, org: &str, id: &str) -> Result<(), Error>;

    /// Stores a new agent in an existing workspace ([`Error::Missing`] otherwise);
    /// [`Error::CapReached`] (and nothing stored) when the workspace has
    /// [`crate::caps::Caps::agents_per_workspace`] agents already.
    async fn create_agent(&self, org: &str, agent: &Agent) -> Result<(), Error>;

    /// The agent, if the organization has it.
    async fn agent(&self, org: &str, id: &str) -> Result<Option<Agent>, Error>;

    /// The workspace's agents by position.
    async fn agents(&self, org: &str, workspace_id: &str) -> Result<Vec<Agent>, Error>;

    /// Replaces an agent's fields ([`Error::Missing`] if it does not exist).
    async fn update_agent(&self, org: &str, agent: &Agent) -> Result<(), Error>;

    /// Deletes an agent ([`Error::Missing`] if it does not exist). The caller refuses the
    /// built-in agent.
    async fn delete_agent(&self, org: &str, id: &str) -> Result<(), Error>;

    /// Sets the positions of agents of a workspace, atomically.
    async fn set_positions(&self, org: &str, workspace_id: &str, positions: &[(String, u32)]) -> Result<(), Error>;

    /// Stores a new task in an existing workspace ([`Error::Missing`] otherwise);
    /// [`Error::CapReached`] (and nothing stored) when the workspace has
    /// [`crate::caps::Caps::tasks_per_workspace`] tasks already.
    async fn create_task(&self, org: &str, task: &Task) -> Result<(), Error>;

    /// The task, if the organization has it.
    async fn task(&self, org: &str, id: &str) -> Result<Option<Task>, Error>;

    /// A page of a workspace's tasks, newest first (ties by id, descending).
    async fn tasks(&self, org: &str, query: &TaskQuery) -> Result<Page<Task>, Error>;

    /// Replaces an existing task's record ([`Error::Missing`] if it does not exist).
    async fn update_task(&self, org: &str, task: &Task) -> Result<(), Error>;

    /// Deletes a task ([`Error::Missing`] if it does not exist).
    async fn delete_task(&self, org: &str, id: &str) -> Result<(), Error>;
}

/// Everything Spool keeps besides streams: [`Directory`](crate::directory::Directory), [`Workspaces`],
/// [`Sessions`], slash commands, files, the protocol's subscriptions and chat
/// webhooks, runners' jobs, MCP servers and the usage ledger, from one adapter.
pub trait Metadata:
    crate::directory::Directory
    + Workspaces
    + Sessions
    + spool_commands::Commands
    + crate::attachment::Attachments
    + spool_log::subscription::SubscriptionStore
    + crate::webhook::HookStore
    + crate::runner::RunnerStore
    + crate::mcp::McpServerStore
    + crate::usage::UsageLedger
{
}

impl<T> Metadata for T where
    T: crate::directory::Directory
        + Workspaces
        + Sessions
        + spool_commands::Commands
        + crate::attachment::Attachments
        + spool_log::subscription::SubscriptionStore
        + crate::webhook::HookStore
        + crate::runner::RunnerStore
        + crate::mcp::McpServerStore
        + crate::usage::UsageLedger
{
}
