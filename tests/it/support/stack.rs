//! A whole Spool on loopback: the API and the stream function with a worker draining the turn
//! queue, as `spool serve` runs them, over one harness's stores.

use std::{sync::Arc, time::Duration};

use spool_agents::{Engine, Runtimes, Settings};
use spool_chat::{
    metadata::Metadata,
    notifier::{LogNotifier, Notifier},
};
use spool_log::{clock::SystemClock, port::StreamLog};
use spool_tests::Harness;

use super::{Api, setup_on};

/// The engine settings of the tests: quick flushes, a short wait for a message whose job went
/// first (and working directories under the tests' root, which [`engine_configured`] adds with
/// the stores' claims).
pub(crate) fn test_settings() -> Settings {
    Settings {
        flush_every: Duration::from_millis(50),
        abort_wait: Duration::from_secs(2),
        message_wait: Duration::from_secs(3),
        ..Settings::default()
    }
}

/// The engine the tests' worker runs: `runtimes`, [`test_settings`].
pub(crate) fn engine_with(log: Arc<dyn StreamLog>, metadata: Arc<dyn Metadata>, runtimes: Runtimes) -> Arc<Engine> {
    engine_configured(log, metadata, runtimes, test_settings())
}

/// `settings`, confining working directories to the tests' roots unless they name others.
fn rooted(mut settings: Settings, metadata: &Arc<dyn Metadata>) -> Settings {
    if settings.workspace_roots.is_empty() {
        settings.workspace_roots = spool_tests::workspace_roots(metadata.clone());
    }
    settings
}

pub(crate) fn engine_configured(
    log: Arc<dyn StreamLog>,
    metadata: Arc<dyn Metadata>,
    runtimes: Runtimes,
    settings: Settings,
) -> Arc<Engine> {
    let settings = rooted(settings, &metadata);
    Arc::new(Engine::new(
        log,
        metadata,
        Arc::new(runtimes),
        Arc::new(SystemClock),
        settings,
    ))
}

pub(crate) fn engine(log: Arc<dyn StreamLog>, metadata: Arc<dyn Metadata>) -> Arc<Engine> {
    engine_with(log, metadata, Runtimes::scripted_only())
}

/// The API and the stream function on a loopback port, with a worker draining the turn queue.
pub(crate) struct Stack {
    /// A client of one organization.
    pub(crate) api: Api,
    /// A client of another.
    pub(crate) other: Api,
    pub(crate) metadata: Arc<dyn Metadata>,
    pub(crate) log: Arc<dyn StreamLog>,
    /// The turn queue the worker drains.
    pub(crate) turns: Arc<dyn spool_chat::turns::TurnQueue>,
}

pub(crate) async fn stack<H: Harness>(harness: &H) -> Stack {
    stack_with(harness, Runtimes::scripted_only()).await
}

/// [`stack`] with other runtimes.
pub(crate) async fn stack_with<H: Harness>(harness: &H, runtimes: Runtimes) -> Stack {
    stack_configured(harness, runtimes, test_settings()).await
}

/// How the tests' worker polls: 30-second leases, 1-second receives, 4 turns at once.
pub(crate) fn test_poll() -> spool_worker::PollSettings {
    spool_worker::PollSettings {
        lease: Duration::from_secs(30),
        wait: Duration::from_secs(1),
        concurrency: 4,
        ..spool_worker::PollSettings::default()
    }
}

/// [`stack`] with other runtimes and engine settings.
pub(crate) async fn stack_configured<H: Harness>(harness: &H, runtimes: Runtimes, settings: Settings) -> Stack {
    stack_polling(harness, runtimes, settings, test_poll()).await
}

/// [`stack`] with other runtimes, engine settings and worker settings.
pub(crate) async fn stack_polling<H: Harness>(
    harness: &H,
    runtimes: Runtimes,
    settings: Settings,
    poll: spool_worker::PollSettings,
) -> Stack {
    stack_notifying(harness, runtimes, settings, poll, Arc::new(LogNotifier)).await
}

/// [`stack_polling`], the worker telling people through `notifier`.
pub(crate) async fn stack_notifying<H: Harness>(
    harness: &H,
    runtimes: Runtimes,
    settings: Settings,
    poll: spool_worker::PollSettings,
    notifier: Arc<dyn Notifier>,
) -> Stack {
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    stack_over(harness, metadata, runtimes, settings, poll, notifier, None, None).await
}

/// [`stack_configured`], the engine finding workspaces' MCP servers in `catalog`.
pub(crate) async fn stack_with_mcp<H: Harness>(
    harness: &H,
    runtimes: Runtimes,
    settings: Settings,
    catalog: Arc<dyn spool_chat::mcp::McpCatalog>,
) -> Stack {
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let notifier = Arc::new(LogNotifier);
    stack_over(
        harness,
        metadata,
        runtimes,
        settings,
        test_poll(),
        notifier,
        Some(catalog),
        None,
    )
    .await
}

/// [`stack`] over a store that holds records to `caps`.
pub(crate) async fn stack_capped<H: Harness>(harness: &H, caps: spool_chat::caps::Caps) -> Stack {
    let metadata: Arc<dyn Metadata> = Arc::new(harness.capped_metadata(caps).await);
    let runtimes = spool_agents::Runtimes::scripted_only();
    stack_over(
        harness,
        metadata,
        runtimes,
        test_settings(),
        test_poll(),
        Arc::new(LogNotifier),
        None,
        None,
    )
    .await
}

/// [`stack_with`], its worker reading the log through `wrap` (a test that counts a step's
/// reads).
pub(crate) async fn stack_watching<H: Harness>(harness: &H, runtimes: Runtimes, wrap: &WrapLog) -> Stack {
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    stack_over(
        harness,
        metadata,
        runtimes,
        test_settings(),
        test_poll(),
        Arc::new(LogNotifier),
        None,
        Some(wrap),
    )
    .await
}

/// How a test puts something between the worker and the log.
pub(crate) type WrapLog = dyn Fn(Arc<dyn StreamLog>) -> Arc<dyn StreamLog>;

/// [`stack_notifying`] over `metadata`.
#[allow(clippy::too_many_arguments)]
async fn stack_over<H: Harness>(
    harness: &H,
    metadata: Arc<dyn Metadata>,
    runtimes: Runtimes,
    settings: Settings,
    poll: spool_worker::PollSettings,
    notifier: Arc<dyn Notifier>,
    mcp: Option<Arc<dyn spool_chat::mcp::McpCatalog>>,
    engine_log: Option<&WrapLog>,
) -> Stack {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    // The worker's own view of the log, when a test watches what steps read.
    let worker_log = engine_log.map_or_else(|| log.clone(), |wrap| wrap(log.clone()));
    let turns = harness.turns().await;
    let files = harness.files().await;
    let push = super::push(metadata.clone(), log.clone());
    let engine = Engine::new(
        worker_log,
        metadata.clone(),
        Arc::new(runtimes),
        Arc::new(SystemClock),
        rooted(settings, &metadata),
    )
    .with_files(files.clone())
    .with_notifier(notifier)
    .with_feeds(push.feeds(log.clone()))
    .with_jobs(push.jobs.clone());
    let engine = match mcp {
        Some(catalog) => engine.with_mcp(catalog),
        None => engine,
    };
    let _ = push.runner_turns.set(turns.clone());
    let worker = spool_worker::Worker::new(log.clone()).with_turns(Arc::new(engine), 3);
    let org_turns = poll.per_org;
    tokio::spawn(spool_worker::poll_turns(Arc::new(worker), turns.clone(), poll));
    let base = super::serve_with(
        log.clone(),
        metadata.clone(),
        turns.clone(),
        files,
        spool_chat::service::AttachmentLimits::default(),
        &push,
        harness.fail_points().clone(),
        org_turns,
    )
    .await;
    let (api, other, _) = setup_on(metadata.as_ref(), &base).await;
    Stack {
        api,
        other,
        metadata,
        log,
        turns,
    }
}
