//! # The worker in `spool serve`
//!
//! The worker function's work, in this process: agent turns from the turn queue, push delivery
//! (subscriptions' wakes, chat webhooks), the folders' sweep and, on the embedded store, the
//! sweep of unfinished uploads.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use spool_chat::{attachment::FileStore, settings::CliHost, webhook::service::ChatHooks};
use spool_log::{
    clock::SystemClock,
    jobs::Deferred,
    subscription::{service::Subscriptions, spec::UrlPolicy},
};
use spool_platform::{Backend, Config};

use crate::{keys::jwt_secret, now_ms, services::Services};

/// Which URLs webhooks may call: a server on a loopback address is a developer's own machine,
/// so its loopback too; one reachable from elsewhere may not (another organization could use
/// it to probe the machine's ports).
pub(crate) fn webhook_urls(config: &Config) -> UrlPolicy {
    UrlPolicy {
        loopback_http: config.addr.ip().is_loopback(),
    }
}

/// Push delivery: the protocol's subscriptions and chat webhooks, with their jobs run by the
/// maintenance queue's poller (AWS backend) or by a task of this process (embedded), which at
/// start schedules again what was under way. Webhooks may call the developer's own loopback:
/// this is `spool serve`.
pub(crate) struct Push {
    pub(crate) subscriptions: Arc<Subscriptions>,
    pub(crate) hooks: Arc<ChatHooks>,
    /// Where jobs to run later go: the maintenance queue, or this process's own.
    pub(crate) jobs: Arc<dyn Deferred>,
    /// This process's jobs, when there is no maintenance queue.
    local: Option<(spool_embedded::LocalJobs, spool_embedded::LocalJobQueue)>,
}

pub(crate) fn push(config: &Config, services: &Services) -> anyhow::Result<Push> {
    let keys = match config.webhook_keys()? {
        Some(keys) => keys,
        None => spool_auth::WebhookKeys::derive(jwt_secret(config)?.as_bytes())?,
    };
    let urls = webhook_urls(config);
    let (jobs, local): (Arc<dyn Deferred>, _) =
        match services.aws.as_ref().and_then(spool_aws::Stores::maintenance_jobs) {
            Some(queue) => (queue, None),
            None => {
                let (jobs, queue) = spool_embedded::LocalJobs::new();
                (Arc::new(jobs.clone()), Some((jobs, queue)))
            }
        };
    let outbound = Arc::new(spool_worker::Webhooks::new(urls)?);
    let subscriptions = Subscriptions::new(
        services.metadata.clone(),
        services.log.clone(),
        jobs.clone(),
        Arc::new(keys),
        Arc::new(SystemClock),
        urls,
    )
    .with_outbound(outbound.clone());
    let hooks =
        ChatHooks::new(services.metadata.clone(), jobs.clone(), Arc::new(SystemClock), urls).with_outbound(outbound);
    Ok(Push {
        subscriptions: Arc::new(subscriptions),
        hooks: Arc::new(hooks),
        jobs,
        local,
    })
}

/// How long after its URL expired an unfinished upload is deleted.
const UNFINISHED_UPLOAD_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

/// Deletes, every hour, the files whose upload was never completed (their bytes and records), a
/// day after their URL expired: what the bucket's lifecycle rule does on AWS.
pub(crate) async fn sweep_uploads(records: Arc<spool_embedded::EmbeddedMetadata>, files: Arc<dyn FileStore>) {
    let mut every = tokio::time::interval(Duration::from_secs(60 * 60));
    loop {
        every.tick().await;
        let grace = i64::try_from(UNFINISHED_UPLOAD_GRACE.as_millis()).unwrap_or(i64::MAX);
        match spool_embedded::sweep_uploads(&records, files.as_ref(), now_ms() - grace).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(uploads = n, "deleted unfinished uploads"),
            Err(e) => tracing::warn!(error = %e, "cannot sweep unfinished uploads; trying again in an hour"),
        }
    }
}

/// Starts the worker: agent turns from the turn queue and, on AWS, sealing jobs from the
/// maintenance queue and aggregate streams' events from the aggregates queue, as the worker
/// function does on Lambda.
pub(crate) fn spawn_worker(
    services: &Services,
    config: &Config,
    notifier: Arc<dyn spool_chat::notifier::Notifier>,
    push: Push,
) -> anyhow::Result<()> {
    // CLIs a killed predecessor of this process left running stop before turns start again.
    let reaped = spool_worker::cli_agents(config, services.metadata.clone()).reap_orphans();
    if reaped > 0 {
        tracing::warn!(clis = reaped, "stopped the CLIs a stopped server left running");
    }
    let mut settings = spool_agents::Settings {
        public_url: Some(
            config
                .agents
                .public_url
                .clone()
                .unwrap_or_else(|| format!("http://{}", config.addr)),
        ),
        ..spool_worker::engine_settings(config, services.metadata.clone(), CliHost::Server)
    };
    // `spool serve` may start programs: its worker runs workspaces' stdio MCP servers.
    settings.mcp = spool_worker::mcp_settings(config, true, webhook_urls(config));
    let engine = spool_agents::Engine::new(
        services.log.clone(),
        services.metadata.clone(),
        Arc::new(spool_worker::runtimes(config, services.metadata.clone())),
        Arc::new(SystemClock),
        settings,
    )
    .with_files(services.files.clone())
    .with_notifier(notifier)
    .with_feeds(services.aggregates.clone())
    .with_jobs(push.jobs.clone())
    .with_mcp(Arc::new(spool_chat::service::McpServerService::new(
        services.metadata.clone(),
        Arc::new(SystemClock),
        Some(Arc::new(crate::keys::data_key(config)?)),
        true,
    )));
    let worker = spool_worker::Worker::new(services.log.clone())
        .with_aggregates(services.log.clone())
        .with_runner_checks(services.metadata.clone(), services.log.clone(), services.turns.clone())
        .with_turns(Arc::new(engine), config.agents.turn_max_attempts)
        .with_subscriptions(push.subscriptions)
        .with_hooks(push.hooks);
    let worker = Arc::new(worker);
    let sweep = spool_worker::folder_sweep(config, services.metadata.clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(60 * 60));
        loop {
            every.tick().await;
            sweep.run_if_due(now_ms()).await;
        }
    });
    // On the embedded store, leases are named after this process's slot in the data directory,
    // held as long as the worker runs: a restart takes back its interrupted turns at once.
    let slot = match config.backend {
        Backend::Embedded => Some(
            spool_embedded::WorkerSlot::acquire(&config.data_dir)
                .with_context(|| format!("cannot take a worker slot in {}", config.data_dir.display()))?,
        ),
        Backend::Aws => None,
    };
    let mut settings = spool_worker::PollSettings {
        lease: config.agents.turn_lease,
        concurrency: config.agents.worker_concurrency,
        per_org: config.agents.org_turn_concurrency,
        ..spool_worker::PollSettings::default()
    };
    if let Some(slot) = &slot {
        slot.name().clone_into(&mut settings.holder);
    }
    let turns = services.turns.clone();
    let poller = worker.clone();
    tokio::spawn(async move {
        let _slot = slot;
        spool_worker::poll_turns(poller, turns, settings).await;
    });
    for inbox in services
        .aws
        .as_ref()
        .map(spool_aws::Stores::job_inboxes)
        .unwrap_or_default()
    {
        tokio::spawn(spool_worker::poll_queue(worker.clone(), inbox, Duration::from_secs(20)));
    }
    // No maintenance queue: this process runs the jobs, first those a stop interrupted.
    if let Some((jobs, queue)) = push.local {
        let records = services.embedded.clone();
        tokio::spawn(async move {
            if let Some(records) = records {
                match jobs.recover(&records).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        jobs = n,
                        "scheduled again the subscription wakes and webhook deliveries under way"
                    ),
                    Err(e) => tracing::warn!(error = %e, "cannot find the jobs under way when the server stopped"),
                }
            }
            spool_embedded::LocalJobs::run(queue, move |job| {
                let worker = worker.clone();
                async move { worker.run(job).await.map_err(|e| e.to_string()) }
            })
            .await;
        });
    }
    Ok(())
}
