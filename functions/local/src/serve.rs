//! # `spool serve`
//!
//! Spool in this process: the routes of the API, the Durable Streams protocol and the web UI
//! over the configured backend, the worker beside them, until Ctrl-C or SIGTERM.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use spool_chat::settings::CliHost;
use spool_log::clock::SystemClock;
use spool_platform::Config;
use tokio::net::TcpListener;

use crate::{
    LOCAL_ORG,
    keys::{data_key, local_api_key, token_keys},
    server,
    services::services,
    web,
    worker::{push, spawn_worker, sweep_uploads, webhook_urls},
};

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
    if !services
        .aws
        .as_ref()
        .is_some_and(spool_aws::Stores::has_aggregates_queue)
    {
        services.aggregates = Arc::new(spool_chat::webhook::service::HookedFeeds {
            feeds: services.aggregates.clone(),
            hooks: push.hooks.clone(),
        });
    }
    spawn_worker(&services, config, notifier.clone(), push)?;
    let (stopping, stop_watch) = tokio::sync::watch::channel(false);
    // One limiter for every route, so an organization's writes count once whichever they take.
    let limiter = Arc::new(spool_auth::RateLimiter::new(config.rate_limits));
    let revocations = Arc::new(spool_chat::revocation::Revocations::new(
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
        .with_default_cli_host(config.agents.cli_host.unwrap_or(CliHost::Server))
        // The worker runs in this process: the API answers for its CLIs.
        .with_clis(Arc::new(clis))
        .with_webhook_urls(webhook_urls(config))
        // This process's worker starts programs: stdio MCP servers run here.
        .with_mcp_servers(Some(Arc::new(data_key(config)?)), true)
        .with_mcp_probe(Arc::new(spool_agents::mcp::Probe::new(spool_worker::mcp_settings(
            config,
            true,
            webhook_urls(config),
        ))));
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
    // CLI agents and stdio MCP servers run as this user: its environment (signing secret, data
    // key, AWS credentials) stays out of their reach.
    crate::hide_from_children();
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
        banner.push_str(&format!(
            "CLI agents of a workspace set to run on runners: SPOOL_API_KEY=KEY spool runner --url http://{addr} \
             (KEY from `spool admin create-api-key {LOCAL_ORG} --capability runner`)\n"
        ));
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
