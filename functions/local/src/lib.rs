//! # The `spool` command
//!
//! `spool serve` runs Spool in one process over the embedded store, or over AWS (or an emulator
//! of it) with `--backend aws`: the HTTP API, the stream function's Durable Streams protocol
//! at `/v1/stream/…`, the worker (agent turns, page sealing) and the web UI at `/` ([`web`]).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use spool_domain::{
    Clock, Metadata, StreamLog, SystemClock, TurnQueue,
    attachment::FileStore,
    jobs::Deferred,
    subscription::{Subscriptions, UrlPolicy},
    webhook::ChatHooks,
};
use spool_platform::{Backend, Config};
use tokio::net::TcpListener;

mod admin;
pub mod chat;
pub mod companion;
pub mod server;
pub mod web;

/// Spool: durable chat between people and AI agents.
#[derive(Debug, Parser)]
#[command(name = "spool", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Spool locally: every function in one process.
    Serve(ServeArgs),
    /// Manage organizations and API keys (on the backend `--backend` names).
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Run the companion on this machine: context from a folder of your notes for Spool's UI.
    Companion(companion::CompanionArgs),
    /// Talk in a chat from the terminal: messages, streamed answers, questions, approvals,
    /// `/` commands; Ctrl-C stops the running turn.
    Chat(chat::ChatArgs),
}

/// Where Spool's data lives; each option overrides its `SPOOL_*` variable.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// Where streams are stored [env: SPOOL_BACKEND; default: embedded].
    #[arg(long, value_parser = ["embedded", "aws"])]
    pub backend: Option<String>,
    /// The embedded store's directory [env: SPOOL_DATA_DIR; default: .spool].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Variables to read before the environment (with `--backend aws`, the file
    /// `make emulator-up` writes).
    #[arg(long, default_value = ".env.emulator")]
    pub env_file: PathBuf,
}

/// Options of `spool serve`; each overrides its `SPOOL_*` variable.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [env: SPOOL_ADDR; default: 127.0.0.1:8080].
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Where data lives.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Serve without authorization (for the conformance suite and local tools). Refused unless
    /// the address is a loopback one.
    #[arg(long)]
    pub no_auth: bool,
}

impl Cli {
    /// Runs the command.
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Serve(args) => {
                let config = args.config()?;
                if args.no_auth && !config.addr.ip().is_loopback() {
                    anyhow::bail!(
                        "--no-auth turns authorization off, so it only works on a loopback address; \
                         pass --addr 127.0.0.1:PORT or drop --no-auth"
                    );
                }
                serve(config, args.no_auth).await
            }
            Command::Admin(command) => admin::run(command).await,
            Command::Companion(args) => companion::run(args).await,
            Command::Chat(args) => chat::run(args).await,
        }
    }
}

impl ServeArgs {
    /// The configuration: the env file (for the AWS backend), then the environment, then flags.
    pub fn config(&self) -> anyhow::Result<Config> {
        let mut config = self.store.config()?;
        if let Some(addr) = self.addr {
            config.addr = addr;
        }
        Ok(config)
    }
}

impl StoreArgs {
    /// The configuration: the env file (for the AWS backend), then the environment, then flags.
    pub fn config(&self) -> anyhow::Result<Config> {
        let aws = self.backend.as_deref() == Some("aws");
        let mut config = if aws {
            Config::from_env_and_file(&self.env_file)
        } else {
            Config::from_env()
        }
        .context("invalid configuration")?;
        if let Some(backend) = &self.backend {
            config.backend = backend.parse().map_err(anyhow::Error::msg)?;
        }
        if let Some(dir) = &self.data_dir {
            config.data_dir.clone_from(dir);
        }
        Ok(config)
    }
}

/// Everything `spool serve` runs on.
pub(crate) struct Services {
    log: Arc<dyn StreamLog>,
    metadata: Arc<dyn Metadata>,
    turns: Arc<dyn TurnQueue>,
    description: String,
    /// Chats' files' bytes.
    files: Arc<dyn FileStore>,
    /// The maintenance queue (AWS backend): sealing jobs for the worker.
    maintenance: Option<(aws_sdk_sqs::Client, String)>,
    /// Where workspaces' feed events and audit records are handed over.
    aggregates: Arc<dyn spool_domain::Aggregates>,
    /// The aggregates queue (AWS backend, when configured): those events for the worker.
    aggregates_queue: Option<(aws_sdk_sqs::Client, String)>,
    /// The embedded store's records, for `spool serve`'s sweep of unfinished uploads.
    embedded: Option<Arc<spool_embedded::EmbeddedMetadata>>,
}

pub(crate) async fn services(config: &Config, counter: Option<spool_aws::RequestCounter>) -> anyhow::Result<Services> {
    match config.backend {
        Backend::Embedded => {
            let options = spool_embedded::Options {
                limits: config.limits,
                poll_interval: config.live_poll,
                ..spool_embedded::Options::default()
            };
            let log = spool_embedded::EmbeddedLog::open(&config.data_dir, options)
                .with_context(|| format!("cannot open the embedded store in {}", config.data_dir.display()))?;
            let metadata = spool_embedded::EmbeddedMetadata::open(&config.data_dir)
                .with_context(|| format!("cannot open the embedded directory in {}", config.data_dir.display()))?;
            let metadata = Arc::new(metadata);
            let log: Arc<dyn StreamLog> = Arc::new(log);
            Ok(Services {
                aggregates: Arc::new(spool_domain::aggregate::Direct(log.clone())),
                aggregates_queue: None,
                log,
                turns: metadata.clone(),
                metadata: metadata.clone(),
                files: Arc::new(spool_embedded::LocalFiles::new(&config.data_dir)),
                description: format!("embedded store in {}", config.data_dir.display()),
                maintenance: None,
                embedded: Some(metadata),
            })
        }
        Backend::Aws => {
            let log = spool_aws::log_from_config(config, counter)
                .await
                .context("cannot set up the AWS backend")?;
            let metadata = spool_aws::metadata_from_config(config, log.clients())?;
            let turns = spool_aws::turn_queue_from_config(config, log.clients())?;
            let files = spool_aws::files_from_config(config, log.clients())?;
            let maintenance = config
                .aws
                .maintenance_queue_url
                .clone()
                .map(|url| (log.clients().sqs.clone(), url));
            let aggregates_queue = config
                .aws
                .aggregates_queue_url
                .clone()
                .map(|url| (log.clients().sqs.clone(), url));
            let clients = log.clients().clone();
            let log: Arc<dyn StreamLog> = Arc::new(log);
            let endpoint = config.aws.endpoint_url.as_deref().unwrap_or("AWS");
            Ok(Services {
                aggregates: spool_aws::aggregates_from_config(config, &clients, log.clone()),
                aggregates_queue,
                log,
                metadata: Arc::new(metadata),
                turns: Arc::new(turns),
                files: Arc::new(files),
                description: format!("AWS backend at {endpoint}"),
                maintenance,
                embedded: None,
            })
        }
    }
}

/// The organization `--no-auth` requests act for, and the one `spool serve` makes on first start.
pub use spool_api::admin::LOCAL_ORG;

pub(crate) fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// What the local key's tokens carry: a companion run with it may turn on context from the
/// person's notes (`context_for_query`) and saving into them (`capture_ingest`) for their chats.
const LOCAL_KEY_CAPABILITIES: [spool_auth::Capability; 2] = [
    spool_auth::Capability::ContextForQuery,
    spool_auth::Capability::CaptureIngest,
];

/// The local organization's API key: made with the organization on first start and kept in
/// `{data_dir}/local-api-key` (readable by its owner only) so every start can print it. Only
/// this development key is kept whole; keys from `spool admin create-api-key` are not.
async fn local_api_key(services: &Services, config: &Config) -> anyhow::Result<String> {
    let directory = services.metadata.as_ref();
    spool_api::admin::ensure_local_org(directory, now_ms()).await?;
    spool_domain::service::ensure_global_session(directory, services.log.as_ref(), LOCAL_ORG, now_ms()).await?;
    let file = config.data_dir.join("local-api-key");
    if let Ok(text) = std::fs::read_to_string(&file) {
        let key = spool_auth::ApiKey::parse(&text);
        if let Ok(key) = key
            && let Some(record) = directory.api_key(key.key_id()).await?
            && record.org_id == LOCAL_ORG
            && key.matches(&record.secret_hash)
            && LOCAL_KEY_CAPABILITIES
                .iter()
                .all(|c| record.capabilities.iter().any(|have| have == c.as_str()))
        {
            return Ok(key.reveal());
        }
        tracing::warn!(file = %file.display(), "the kept local API key is not valid here (or predates the companion); making a new one");
        std::fs::remove_file(&file).with_context(|| format!("cannot replace {}", file.display()))?;
    }
    let capabilities = LOCAL_KEY_CAPABILITIES.map(|c| c.as_str().to_owned());
    let (_, key) = spool_api::admin::create_api_key(directory, LOCAL_ORG, &capabilities, now_ms()).await?;
    private_dir(&config.data_dir)?;
    write_private(&file, &key.reveal()).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(key.reveal())
}

/// The token keys: from `SPOOL_JWT_SECRET`, or from a secret `spool serve` made on its first
/// start and keeps in the data directory (readable by its owner only), so tokens survive
/// restarts.
fn token_keys(config: &Config) -> anyhow::Result<spool_auth::TokenKeys> {
    Ok(config.token_keys(jwt_secret(config)?.as_bytes())?)
}

/// The token signing secret: `SPOOL_JWT_SECRET`, or the one kept in the data directory.
fn jwt_secret(config: &Config) -> anyhow::Result<String> {
    use secrecy::ExposeSecret;
    if let Some(secret) = &config.jwt_secret {
        return Ok(secret.expose_secret().to_owned());
    }
    let file = config.data_dir.join("jwt-secret");
    let secret = match std::fs::read_to_string(&file) {
        Ok(secret) => secret.trim().to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let secret = spool_auth::random_secret(32)?;
            private_dir(&config.data_dir)?;
            write_private(&file, &secret).with_context(|| format!("cannot write {}", file.display()))?;
            secret
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    Ok(secret)
}

/// Which URLs webhooks may call: a server on a loopback address is a developer's own machine,
/// so its loopback too; one reachable from elsewhere may not (another organization could use
/// it to probe the machine's ports).
fn webhook_urls(config: &Config) -> UrlPolicy {
    UrlPolicy {
        loopback_http: config.addr.ip().is_loopback(),
    }
}

/// Push delivery: the protocol's subscriptions and chat webhooks, with their jobs run by the
/// maintenance queue's poller (AWS backend) or by a task of this process (embedded), which at
/// start schedules again what was under way. Webhooks may call the developer's own loopback:
/// this is `spool serve`.
struct Push {
    subscriptions: Arc<Subscriptions>,
    hooks: Arc<ChatHooks>,
    /// This process's jobs, when there is no maintenance queue.
    local: Option<(spool_embedded::LocalJobs, spool_embedded::LocalJobQueue)>,
}

fn push(config: &Config, services: &Services) -> anyhow::Result<Push> {
    let keys = match config.webhook_keys()? {
        Some(keys) => keys,
        None => spool_auth::WebhookKeys::derive(jwt_secret(config)?.as_bytes())?,
    };
    let urls = webhook_urls(config);
    let (jobs, local): (Arc<dyn Deferred>, _) = match &services.maintenance {
        Some((sqs, url)) => (
            Arc::new(spool_aws::SqsSealScheduler::new(sqs.clone(), url.clone())),
            None,
        ),
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
    let hooks = ChatHooks::new(services.metadata.clone(), jobs, Arc::new(SystemClock), urls).with_outbound(outbound);
    Ok(Push {
        subscriptions: Arc::new(subscriptions),
        hooks: Arc::new(hooks),
        local,
    })
}

/// Makes the data directory (and missing parents) readable by its owner only.
fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Writes a new file only its owner can read.
fn write_private(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(contents.as_bytes())
}

/// How long after its URL expired an unfinished upload is deleted.
const UNFINISHED_UPLOAD_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

/// Deletes, every hour, the files whose upload was never completed (their bytes and records), a
/// day after their URL expired: what the bucket's lifecycle rule does on AWS.
async fn sweep_uploads(records: Arc<spool_embedded::EmbeddedMetadata>, files: Arc<dyn FileStore>) {
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
fn spawn_worker(
    services: &Services,
    config: &Config,
    notifier: Arc<dyn spool_domain::notifier::Notifier>,
    push: Push,
) -> anyhow::Result<()> {
    let engine = spool_agents::Engine::new(
        services.log.clone(),
        services.metadata.clone(),
        Arc::new(spool_worker::runtimes(config, services.metadata.clone())),
        Arc::new(SystemClock),
        spool_worker::engine_settings(config, services.metadata.clone()),
    )
    .with_files(services.files.clone())
    .with_notifier(notifier)
    .with_feeds(services.aggregates.clone());
    let worker = spool_worker::Worker::new(services.log.clone())
        .with_aggregates(services.log.clone())
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
    for (sqs, url) in services.maintenance.iter().chain(&services.aggregates_queue) {
        let inbox = Arc::new(spool_aws::SqsJobInbox::new(sqs.clone(), url.clone()));
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

/// Spool running in this process, as `spool serve` runs it: its HTTP routes (the API, the
/// Durable Streams protocol, the web UI) with the worker started beside them.
pub struct App {
    /// Every route, to serve.
    pub router: axum::Router,
    /// The local organization's API key.
    pub api_key: String,
    /// What it runs on, for people.
    pub description: String,
    /// Set to `true` to end live responses (SSE, long-polls) at once, when the server stops.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

/// Starts the worker and builds the routes over the configured backend; `no_auth` turns
/// authorization off, and `counter` counts the AWS backend's requests (`spool-bench`).
pub async fn app(config: &Config, no_auth: bool, counter: Option<spool_aws::RequestCounter>) -> anyhow::Result<App> {
    let mut services = services(config, counter).await?;
    let keys = token_keys(config)?;
    let access = if no_auth {
        spool_stream::Access::Open {
            org: LOCAL_ORG.to_owned(),
        }
    } else {
        spool_stream::Access::Tokens(Box::new(keys.clone()))
    };
    let api_key = local_api_key(&services, config).await?;
    let notifier = spool_aws::notifier_from_config(config).await;
    let push = push(config, &services)?;
    let subscriptions = push.subscriptions.clone();
    // Without an aggregates queue, feeds are appended at once: their events go to the
    // workspaces' webhooks from here (the worker does it for the queue's).
    if services.aggregates_queue.is_none() {
        services.aggregates = Arc::new(spool_domain::webhook::HookedFeeds {
            feeds: services.aggregates.clone(),
            hooks: push.hooks.clone(),
        });
    }
    spawn_worker(&services, config, notifier.clone(), push)?;
    let (stopping, stop_watch) = tokio::sync::watch::channel(false);
    // One limiter for every route, so an organization's writes count once whichever they take.
    let limiter = Arc::new(spool_auth::RateLimiter::new(config.rate_limits));
    let revocations = Arc::new(spool_domain::revocation::Revocations::new(
        services.log.clone(),
        config.revocation_check,
    ));
    let streams = spool_stream::StreamApi::new(services.log.clone(), access.clone(), config.live)
        .with_shutdown(stop_watch)
        .with_rate_limiter(limiter.clone())
        .with_revocations(revocations.clone())
        .with_subscriptions(subscriptions);
    let max_body = config.limits.max_append_bytes + spool_stream::BODY_SLACK_BYTES;
    if let Some(records) = &services.embedded {
        tokio::spawn(sweep_uploads(records.clone(), services.files.clone()));
    }
    let aggregates = services.aggregates.clone();
    let roots = config.workspace_roots(services.metadata.clone());
    let clis = spool_worker::cli_agents(config, services.metadata.clone());
    let stores = spool_api::Stores {
        metadata: services.metadata,
        log: services.log,
        turns: services.turns,
        files: services.files,
    };
    let api = spool_api::ChatApi::new(stores, keys, access, Arc::new(SystemClock))
        .with_aggregates(aggregates)
        .with_workspace_roots(roots)
        .with_rate_limiter(limiter)
        .with_revocations(revocations)
        .with_attachment_limits(config.attachments.limits())
        .with_notifier(notifier)
        .with_org_turn_concurrency(config.agents.org_turn_concurrency)
        // The worker runs in this process: the API answers for its CLIs.
        .with_clis(Arc::new(clis))
        .with_webhook_urls(webhook_urls(config));
    // A request has this long from its headers to its answer; long-polls wait less.
    let limit = config
        .server
        .request_timeout
        .max(config.live.long_poll + Duration::from_secs(2));
    let upload_limit = config.attachments.limits().upload_ttl;
    // The front ends' routes write through the chat API's service, in this process.
    let (chat_api, writes) = spool_api::router_with_writes(api);
    let streams = streams.with_chat_writes(writes);
    let router = chat_api
        .merge(spool_stream::router(streams, max_body))
        .merge(web::router(&config.web_dir))
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next| {
                // An upload's body may take as long as its URL lasts.
                let limit = if request.uri().path().starts_with("/v1/uploads/") {
                    upload_limit
                } else {
                    limit
                };
                server::deadline(limit, request, next)
            },
        ));
    Ok(App {
        router,
        api_key,
        description: services.description,
        stopping,
    })
}

/// Runs `spool serve` until Ctrl-C or SIGTERM; `no_auth` turns authorization off.
pub async fn serve(config: Config, no_auth: bool) -> anyhow::Result<()> {
    let App {
        router,
        api_key,
        description,
        stopping,
    } = app(&config, no_auth, None).await?;
    let listener = TcpListener::bind(config.addr)
        .await
        .with_context(|| format!("cannot listen on {}; pass --addr with a free port", config.addr))?;
    let addr = listener.local_addr()?;
    let auth = if no_auth { ", no authorization" } else { "" };
    let mut banner = format!(
        "Spool is listening on http://{addr} ({description}{auth})\n\
         API key of the `{LOCAL_ORG}` organization: {api_key} (exchange it at POST /v1/handshake)\n"
    );
    if !no_auth {
        banner.push_str(&format!("Open the web UI, signed in: http://{addr}/#key={api_key}\n"));
    }
    // Whoever started the server may have stopped reading its output: that must not stop it.
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(banner.as_bytes()).and_then(|()| out.flush());
    }
    tracing::info!(%addr, backend = ?config.backend, "serving");
    let stop = async move {
        shutdown_signal().await;
        tracing::info!("stopping: ending live responses, finishing requests in flight");
        let _ = stopping.send(true);
    };
    server::run(listener, router, config.server, stop).await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
