//! # The worker and what it is built with
//!
//! One [`Worker`] runs every kind of job; what it holds says which it takes (a worker without
//! an engine runs no turns, one without aggregates appends no feed events). The concerns'
//! modules each add their part of its methods.

use std::{sync::Arc, time::Duration};

use spool_agents::Engine;
use spool_chat::turns::TurnQueue;
use spool_log::port::{StreamLog, StreamSealer};

/// How many times a turn step is tried before it is given up (the template's
/// `maxReceiveCount` of the turns queue says the same).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Runs jobs.
pub struct Worker {
    pub(crate) sealer: Arc<dyn StreamSealer>,
    /// Where aggregate streams' events from the aggregates queue are appended (remembering
    /// each stream's tail, so a batch on a tail this worker wrote reads nothing).
    pub(crate) aggregates: Option<Arc<spool_log::aggregate::Appender>>,
    pub(crate) engine: Option<Arc<Engine>>,
    pub(crate) max_attempts: u32,
    /// The deliveries of a job the queue makes before its dead-letter queue (the template's
    /// `maxReceiveCount`): the last one ends the turn if its step fails, however few of the
    /// deliveries ran (throttled ones do not).
    pub(crate) max_deliveries: u32,
    /// The turns queue and the lease to keep its messages for, while a batch's steps run
    /// (on Lambda: the event source's messages, by their receipt handles).
    pub(crate) heartbeats: Option<(Arc<dyn TurnQueue>, Duration)>,
    /// The daily sweep of chats' folders on this worker's disk.
    pub(crate) sweep: Option<Arc<spool_agents::sweep::FolderSweep>>,
    /// Where turn steps' times and seal requests' waits are recorded.
    pub(crate) metrics: Arc<dyn spool_log::metrics::Metrics>,
    /// Runs subscription jobs (webhook deliveries, wake events, lease expiries).
    pub(crate) subscriptions: Option<Arc<spool_log::subscription::service::Subscriptions>>,
    /// Hears feed events once appended and runs chat webhooks' deliveries.
    pub(crate) hooks: Option<Arc<spool_chat::webhook::service::ChatHooks>>,
    /// Queues again the turns that wait for a runner, when their check is due.
    pub(crate) runner_checks: Option<RunnerChecks>,
}

/// What a check of a turn that waits for a runner reads and where it queues the turn.
#[derive(Clone)]
pub(crate) struct RunnerChecks {
    pub(crate) metadata: Arc<dyn spool_chat::metadata::Metadata>,
    pub(crate) log: Arc<dyn StreamLog>,
    pub(crate) turns: Arc<dyn TurnQueue>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("turns", &self.engine.is_some())
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker that seals with `sealer` and runs no turns.
    pub fn new(sealer: Arc<dyn StreamSealer>) -> Self {
        Self {
            sealer,
            aggregates: None,
            engine: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_deliveries: DEFAULT_MAX_ATTEMPTS + 2,
            heartbeats: None,
            sweep: None,
            metrics: Arc::new(spool_log::metrics::LogMetrics),
            subscriptions: None,
            hooks: None,
            runner_checks: None,
        }
    }

    /// The same worker, running the checks of turns that wait for a runner: such a turn, still
    /// waiting, is queued again on `turns`, for the engine to fail it if no runner took it.
    #[must_use]
    pub fn with_runner_checks(
        mut self,
        metadata: Arc<dyn spool_chat::metadata::Metadata>,
        log: Arc<dyn StreamLog>,
        turns: Arc<dyn TurnQueue>,
    ) -> Self {
        self.runner_checks = Some(RunnerChecks { metadata, log, turns });
        self
    }

    /// The same worker, recording turn steps' times and seal requests' waits in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn spool_log::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The same worker, appending aggregate streams' events (workspaces' feeds, audit
    /// records, from the aggregates queue) to `log`.
    #[must_use]
    pub fn with_aggregates(mut self, log: Arc<dyn StreamLog>) -> Self {
        self.aggregates = Some(Arc::new(spool_log::aggregate::Appender::new(log)));
        self
    }

    /// The same worker, running subscription jobs from the maintenance queue with
    /// `subscriptions` (which makes webhook requests).
    #[must_use]
    pub fn with_subscriptions(mut self, subscriptions: Arc<spool_log::subscription::service::Subscriptions>) -> Self {
        self.subscriptions = Some(subscriptions);
        self
    }

    /// The same worker, delivering chat webhooks with `hooks`, for the feed events it appends
    /// and from the maintenance queue's jobs.
    #[must_use]
    pub fn with_hooks(mut self, hooks: Arc<spool_chat::webhook::service::ChatHooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// The same worker, sweeping chats' folders with `sweep` once a day as it takes work.
    #[must_use]
    pub fn with_sweep(mut self, sweep: Arc<spool_agents::sweep::FolderSweep>) -> Self {
        self.sweep = Some(sweep);
        self
    }

    /// The same worker, keeping the turns of a batch leased for `ttl` in `queue` while their
    /// steps run (Lambda's event source leases them for the queue's visibility timeout, which
    /// is short so that a crashed invocation's turns come back soon).
    #[must_use]
    pub fn with_heartbeats(mut self, queue: Arc<dyn TurnQueue>, ttl: Duration) -> Self {
        self.heartbeats = Some((queue, ttl));
        self
    }

    /// The same worker, running turns with `engine`, each step tried `max_attempts` times
    /// (runs, not deliveries), in at most `max_attempts + 2` deliveries unless
    /// [`Self::with_max_deliveries`] says otherwise.
    #[must_use]
    pub fn with_turns(mut self, engine: Arc<Engine>, max_attempts: u32) -> Self {
        self.engine = Some(engine);
        self.max_attempts = max_attempts.max(1);
        self.max_deliveries = self.max_attempts + 2;
        self
    }

    /// The same worker, knowing that the queue delivers a job `max_deliveries` times before
    /// its dead-letter queue (at least one more than the attempts).
    #[must_use]
    pub fn with_max_deliveries(mut self, max_deliveries: u32) -> Self {
        self.max_deliveries = max_deliveries.max(self.max_attempts + 1);
        self
    }
}
