//! # The chat API function
//!
//! The write side people and agents use: the handshake, which exchanges an organization's API
//! key for the token every other route verifies ([`extract::Caller`]); workspaces, agents and
//! tasks; sessions, their messages and events; controls and answers; capabilities; the global
//! agent-first chat; provisioning of organizations and keys ([`admin`]) and the audit stream
//! ([`audit`]). Errors are the contract's JSON ([`spool_edge::ApiError`]). One axum [`Router`] runs on
//! Lambda through `lambda_http`, under `cargo lambda watch`, and inside `spool serve`; every
//! route is declared once, with its OpenAPI operation ([`openapi`], `GET /v1/openapi.json`).

pub mod admin;
mod answers;
mod attachments;
pub mod audit;
mod branches;
mod capabilities;
mod clis;
mod commands;
mod docs;
mod events;
pub mod extract;
mod files;
mod forks;
pub mod global;
mod handshake;
pub mod mcp;
mod mcp_servers;
mod messages;
mod reads;
mod runner;
mod sessions;
mod tasks;
mod turns;
mod usage;
mod webhooks;
mod workspaces;
mod writes;

use std::sync::Arc;

use axum::{Json, Router, extract::DefaultBodyLimit, http::header, response::IntoResponse};
use serde::Serialize;
use spool_auth::{Access, RateLimiter, RateLimits, TokenKeys};
use spool_chat::{
    attachment::FileStore,
    confine::WorkspaceRoots,
    metadata::Metadata,
    revocation::Revocations,
    service::{
        AttachmentLimits, ChatRecords, ChatService, KeyDirectory, McpServerService, RunnerService, UsageService,
        WorkspaceService,
    },
    turns::TurnQueue,
    webhook::endpoints::HookEndpoints,
};
use spool_edge::ApiError;
use spool_log::{clock::Clock, port::StreamLog};
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::{
    router::{OpenApiRouter, UtoipaMethodRouter},
    routes,
};

/// The largest JSON body the API's routes accept (messages bring their own limit).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Where the API keeps things.
pub struct Stores {
    /// Organizations, keys, workspaces, agents, session records.
    pub metadata: Arc<dyn Metadata>,
    /// Streams: sessions' events, audit streams.
    pub log: Arc<dyn StreamLog>,
    /// Agent turns for the worker.
    pub turns: Arc<dyn TurnQueue>,
    /// Chats' files' bytes.
    pub files: Arc<dyn FileStore>,
}

/// Everything the API's handlers share.
pub struct ChatApi {
    /// The chat's write side.
    chats: ChatService,
    /// Chats' records: listed, and changed.
    records: ChatRecords,
    /// Workspaces' write side: their settings, agents and tasks.
    workspaces: WorkspaceService,
    /// Runners' claims, heartbeats, files and settles.
    runners: RunnerService,
    /// Workspaces' chat webhook endpoints.
    hooks: HookEndpoints,
    /// Workspaces' MCP servers.
    mcp_servers: McpServerService,
    /// Usage reports and budgets.
    usage: UsageService,
    /// The directory's API keys, for the handshake.
    api_keys: KeyDirectory,
    /// Where workspaces' working directories may be (files are searched there).
    workspace_roots: WorkspaceRoots,
    metadata: Arc<dyn Metadata>,
    /// Where workspaces' feed events and audit records are handed over.
    aggregates: Arc<dyn spool_log::aggregate::Aggregates>,
    keys: TokenKeys,
    access: Access,
    clock: Arc<dyn Clock>,
    /// Rate limits on handshakes, writes and creations.
    limiter: Arc<RateLimiter>,
    /// Refused handshakes, counted per key so the audit stream records them boundedly.
    refusals: audit::Refusals,
    /// Revoked API keys, whose tokens are refused.
    revocations: Option<Arc<Revocations>>,
    /// The CLIs where agents run, when they run in this process's reach (`spool serve`).
    clis: Option<Arc<dyn spool_chat::clis::CliProbe>>,
    /// The turn queue, asked where a queued turn stands.
    turns: Arc<dyn TurnQueue>,
    /// How many turns of one organization the worker runs at once.
    org_turn_concurrency: usize,
    /// How `POST /v1/mcp` is served.
    mcp_settings: mcp::McpSettings,
    /// The MCP service, made on the route's first request.
    mcp_server: std::sync::OnceLock<mcp::McpService>,
}

impl ChatApi {
    /// The API over `stores`. It signs tokens with `keys` and lets callers in by `access` (tokens
    /// verified with the same keys, or `--no-auth`'s open organization).
    pub fn new(stores: Stores, keys: TokenKeys, access: Access, clock: Arc<dyn Clock>) -> Self {
        let runners = RunnerService::new(
            stores.metadata.clone(),
            stores.log.clone(),
            Some(stores.files.clone()),
            stores.turns.clone(),
            clock.clone(),
        );
        Self {
            runners,
            chats: ChatService::new(
                stores.metadata.clone(),
                stores.log.clone(),
                stores.turns.clone(),
                stores.files,
                clock.clone(),
            ),
            workspaces: WorkspaceService::new(stores.metadata.clone(), stores.log.clone(), clock.clone()),
            records: ChatRecords::new(stores.metadata.clone(), stores.log.clone(), clock.clone()),
            hooks: HookEndpoints::new(stores.metadata.clone(), clock.clone()),
            mcp_servers: McpServerService::new(stores.metadata.clone(), clock.clone(), None, false),
            usage: UsageService::new(stores.metadata.clone(), clock.clone()),
            api_keys: KeyDirectory::new(stores.metadata.clone()),
            metadata: stores.metadata,
            aggregates: Arc::new(spool_log::aggregate::Direct(stores.log)),
            keys,
            access,
            clock,
            workspace_roots: WorkspaceRoots::none(),
            limiter: Arc::new(RateLimiter::new(RateLimits::OFF)),
            refusals: audit::Refusals::default(),
            revocations: None,
            clis: None,
            turns: stores.turns,
            org_turn_concurrency: spool_chat::turns::DEFAULT_ORG_TURN_CONCURRENCY,
            mcp_settings: mcp::McpSettings::default(),
            mcp_server: std::sync::OnceLock::new(),
        }
    }

    /// The same API, serving `POST /v1/mcp` with `settings` (how long a call waits for a
    /// person; the hosts it answers).
    #[must_use]
    pub fn with_mcp(mut self, settings: mcp::McpSettings) -> Self {
        self.mcp_settings = settings;
        self
    }

    /// The same API, saying that the worker runs at most `n` turns of one organization at once
    /// (`SPOOL_ORG_TURN_CONCURRENCY`), so a queued turn's place is counted against it.
    #[must_use]
    pub fn with_org_turn_concurrency(mut self, n: usize) -> Self {
        self.org_turn_concurrency = n.max(1);
        self
    }

    /// The same API, accepting chat webhooks' URLs under `urls` (only `https` to public
    /// addresses by default; `spool serve` allows the developer's loopback).
    #[must_use]
    pub fn with_webhook_urls(mut self, urls: spool_log::subscription::spec::UrlPolicy) -> Self {
        self.hooks = self.hooks.with_urls(urls);
        self.mcp_servers = self.mcp_servers.with_urls(urls);
        self
    }

    /// The same API, sealing MCP servers' header and env values with `data_key` (the
    /// deployment's `SPOOL_DATA_KEY`; without one, servers with such values are refused), and
    /// saying whether the deployment's worker can start programs (`spawns`: `spool serve` can,
    /// Lambda cannot, so a `stdio` server there needs a workspace on runners). Runners' claims
    /// read the servers through it too.
    #[must_use]
    pub fn with_mcp_servers(mut self, data_key: Option<Arc<spool_chat::mcp::SecretBox>>, spawns: bool) -> Self {
        self.mcp_servers = self.mcp_servers.with_secrets(data_key).with_spawning(spawns);
        // Runners get a claimed turn's servers, secrets opened, in its assignment.
        self.runners = self.runners.with_mcp(Arc::new(self.mcp_servers.clone()));
        self
    }

    /// The same API, testing MCP servers (`POST /v1/mcp-servers/{id}/test`) with `probe`.
    #[must_use]
    pub fn with_mcp_probe(mut self, probe: Arc<dyn spool_chat::mcp::McpProbe>) -> Self {
        self.mcp_servers = self.mcp_servers.with_probe(probe);
        self
    }

    /// The same API, saying that workspaces' notifications go through `notifier` (the
    /// worker's).
    #[must_use]
    pub fn with_notifier(mut self, notifier: Arc<dyn spool_chat::notifier::Notifier>) -> Self {
        self.workspaces = self.workspaces.with_notifier(notifier);
        self
    }

    /// The same API, handing workspaces' feed events and audit records to `aggregates` (the
    /// aggregates queue on AWS) instead of appending them itself.
    #[must_use]
    pub fn with_aggregates(mut self, aggregates: Arc<dyn spool_log::aggregate::Aggregates>) -> Self {
        self.chats = self.chats.with_feeds(aggregates.clone());
        self.workspaces = self.workspaces.with_feeds(aggregates.clone());
        self.records = self.records.with_feeds(aggregates.clone());
        self.aggregates = aggregates;
        self
    }

    /// The same API, serving runners with `runners` (by default one over the API's own stores).
    #[must_use]
    pub fn with_runners(mut self, runners: RunnerService) -> Self {
        self.runners = runners;
        self
    }

    /// The same API, making workspaces whose CLI agents run on `host` unless they say
    /// otherwise (`SPOOL_CLI_HOST`; the worker's by default).
    #[must_use]
    pub fn with_default_cli_host(mut self, host: spool_chat::settings::CliHost) -> Self {
        self.workspaces = self.workspaces.with_default_cli_host(host);
        self.mcp_servers = self.mcp_servers.with_default_cli_host(host);
        self
    }

    /// The same API, answering `GET /v1/clis` with `probe` (the worker's CLIs).
    #[must_use]
    pub fn with_clis(mut self, probe: Arc<dyn spool_chat::clis::CliProbe>) -> Self {
        self.clis = Some(probe);
        self
    }

    /// The same API, refusing the tokens of the keys in `revocations` (shared with the stream
    /// routes).
    #[must_use]
    pub fn with_revocations(mut self, revocations: Arc<Revocations>) -> Self {
        self.revocations = Some(revocations);
        self
    }

    /// The same API, limiting handshakes, writes and creations with `limiter` (none by
    /// default; `spool serve` and the functions pass the configured limits).
    #[must_use]
    pub fn with_rate_limiter(mut self, limiter: Arc<RateLimiter>) -> Self {
        self.limiter = limiter;
        self
    }

    /// The same API, holding chats' files to `limits` (100 MiB each by default).
    #[must_use]
    pub fn with_attachment_limits(mut self, limits: AttachmentLimits) -> Self {
        self.chats = self.chats.with_attachment_limits(limits);
        self
    }

    /// The same API, its chat service stopping where a test armed one of `fail`
    /// ([`spool_log::failpoint`]).
    #[must_use]
    pub fn with_fail_points(mut self, fail: Arc<spool_log::failpoint::FailPoints>) -> Self {
        self.chats = self.chats.with_fail_points(fail);
        self
    }

    /// Takes one creation of the caller's organization (a chat, a workspace, an agent).
    pub(crate) fn limit_create(&self, caller: &extract::Caller) -> Result<(), ApiError> {
        Ok(self.limiter.check(spool_auth::Limit::CreateByOrg, caller.org())?)
    }

    /// The same API, accepting workspaces' working directories under `roots` (none by
    /// default: agents then run only in folders of each chat's own).
    #[must_use]
    pub fn with_workspace_roots(mut self, roots: WorkspaceRoots) -> Self {
        self.chats = self.chats.with_workspace_roots(roots.clone());
        self.workspaces = self.workspaces.with_workspace_roots(roots.clone());
        self.workspace_roots = roots;
        self
    }
}

/// The API's routes.
pub fn router(api: ChatApi) -> Router {
    routes_over(Arc::new(api))
}

/// The API's routes, and its writes for the front ends' routes of a stream function that runs
/// beside it in this process (`spool serve`): the same chat service, checks and limits.
pub fn router_with_writes(api: ChatApi) -> (Router, Arc<dyn spool_edge::writes::ChatWrites>) {
    let api = Arc::new(api);
    (routes_over(api.clone()), Arc::new(writes::InProcess(api)))
}

fn routes_over(api: Arc<ChatApi>) -> Router {
    let (router, _) = routes().split_for_parts();
    router
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(spool_edge::json_errors))
        .layer(axum::middleware::from_fn(spool_edge::browser_headers))
        .layer(axum::middleware::from_fn(spool_edge::trace_requests))
        .with_state(api)
}

/// The OpenAPI document of the chat API's routes, generated from the handlers that serve them.
/// `GET /v1/openapi.json` serves `docs/openapi.json`: this document merged with the stream
/// function's, checked in and held to both by a test (`tests/it/openapi_http.rs`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().into_openapi()
}

/// The document of every route Spool serves, as checked in.
pub const OPENAPI_JSON: &str = include_str!("../../../docs/openapi.json");

/// The routes with their OpenAPI operations: a route is served and documented by the same
/// `routes!` entry, so the two cannot disagree.
fn routes() -> OpenApiRouter<Arc<ChatApi>> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health))
        .routes(routes!(openapi_json))
        .routes(routes!(docs::list_docs))
        .routes(routes!(docs::get_doc))
        .routes(limited(routes!(handshake::handshake), handshake::MAX_BODY_BYTES))
        .routes(routes!(workspaces::create_workspace, workspaces::list_workspaces))
        .routes(routes!(
            workspaces::get_workspace,
            workspaces::update_workspace,
            workspaces::delete_workspace
        ))
        .routes(routes!(workspaces::create_agent, workspaces::list_agents))
        .routes(routes!(workspaces::reorder_agents))
        .routes(routes!(workspaces::update_agent, workspaces::delete_agent))
        .routes(routes!(tasks::list_tasks, tasks::create_task))
        .routes(routes!(webhooks::create_hook, webhooks::list_hooks))
        .routes(routes!(
            webhooks::get_hook,
            webhooks::update_hook,
            webhooks::delete_hook
        ))
        .routes(routes!(webhooks::list_deliveries))
        .routes(routes!(mcp_servers::create_server, mcp_servers::list_servers))
        .routes(routes!(
            mcp_servers::get_server,
            mcp_servers::update_server,
            mcp_servers::delete_server
        ))
        .routes(routes!(mcp_servers::test_server))
        .routes(routes!(files::search_files))
        .routes(routes!(clis::list_clis))
        .routes(routes!(runner::list_runners))
        .routes(routes!(runner::claim))
        .routes(routes!(runner::heartbeat))
        .routes(routes!(runner::file))
        .routes(limited(routes!(runner::settle), runner::MAX_RESULT_BODY_BYTES))
        .routes(routes!(tasks::get_task, tasks::update_task, tasks::delete_task))
        .routes(routes!(sessions::create_session, sessions::list_sessions))
        .routes(routes!(
            sessions::get_session,
            sessions::update_session,
            sessions::delete_session
        ))
        .routes(limited(
            routes!(messages::post_message),
            messages::MAX_MESSAGE_BODY_BYTES,
        ))
        .routes(routes!(events::list_events))
        .routes(routes!(forks::fork_session))
        .routes(limited(routes!(branches::edit), messages::MAX_MESSAGE_BODY_BYTES))
        .routes(routes!(branches::regenerate))
        .routes(routes!(branches::select))
        .routes(routes!(turns::list_turns))
        .routes(routes!(turns::get_turn))
        .routes(routes!(usage::session_usage))
        .routes(routes!(usage::workspace_usage))
        .routes(routes!(answers::control))
        .routes(routes!(answers::tool_output))
        .routes(routes!(answers::approval))
        .routes(routes!(answers::question))
        .routes(routes!(answers::plan))
        .routes(routes!(attachments::declare, attachments::list))
        .routes(routes!(attachments::download))
        .routes(routes!(attachments::complete))
        // Its body is read as a stream, exactly as long as the grant says: no limit applies.
        .routes(routes!(attachments::upload))
        .routes(routes!(capabilities::put_capabilities))
        .routes(routes!(reads::read_token))
        .routes(routes!(commands::list_global))
        .routes(limited(
            routes!(commands::get_global, commands::put_global, commands::delete_global),
            commands::MAX_BODY_BYTES,
        ))
        .routes(routes!(commands::list_workspace))
        .routes(limited(
            routes!(
                commands::get_workspace,
                commands::put_workspace,
                commands::delete_workspace
            ),
            commands::MAX_BODY_BYTES,
        ))
        .routes(routes!(commands::run::resolve))
        .routes(routes!(commands::run::preview))
        .routes(routes!(commands::run::invoke))
        .routes(routes!(global::agent_message))
        .routes(routes!(global::history))
        .routes(routes!(global::user_message))
        .routes(routes!(mcp::mcp))
}

/// A route whose bodies may be larger (or must be smaller) than [`MAX_BODY_BYTES`].
fn limited(
    (schemas, paths, router): UtoipaMethodRouter<Arc<ChatApi>>,
    max_bytes: usize,
) -> UtoipaMethodRouter<Arc<ChatApi>> {
    (schemas, paths, router.layer(DefaultBodyLimit::max(max_bytes)))
}

/// The document's frame: what the API is, how callers authenticate, its tags.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Spool",
        description = "Durable chat between people and AI agents. Every chat is an ordered, replayable \
                       stream of events: writes go through this API, reads through the stream routes \
                       (catch-up, long-poll and SSE, the Durable Streams protocol). Errors are \
                       `{\"error\": {\"code\", \"message\"}}`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "handshake", description = "API keys for tokens"),
        (name = "workspaces", description = "Workspaces, their agents and tasks"),
        (name = "webhooks", description = "Workspaces' chat webhooks (Standard Webhooks) and their deliveries"),
        (name = "mcp", description = "Workspaces' MCP servers: the tools their agents may call"),
        (name = "sessions", description = "Chats, their messages and events"),
        (name = "answers", description = "Controls and answers to what a turn waits on"),
        (name = "global", description = "The organization's global, agent-first chat"),
        (name = "mcp-server", description = "Spool as an MCP server (Streamable HTTP): list, read and post in chats, ask a person and wait"),
        (name = "runners", description = "Runners: the machines that run a deployment's CLI turns (`spool runner`)"),
        (name = "commands", description = "Slash commands: stored, listed, resolved, previewed and invoked"),
        (name = "streams", description = "Reads (and, outside sessions, writes) of streams"),
        (name = "meta", description = "Health and this document"),
    )
)]
struct ApiDoc;

/// Every route but the handshake, health and this document takes a bearer token from
/// `POST /v1/handshake` (SSE routes also `?token=`).
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("JWT")
            .description(Some("The `jwt` of `POST /v1/handshake`, valid for 24 hours"))
            .build();
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// Any other path: the contract's JSON `404`.
async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::NoRoute(format!("there is no route at {}; see GET /v1/openapi.json", uri.path()))
}

/// A known path with another method: the contract's JSON `405`.
async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NoMethod(format!("{} does not take {method}", uri.path()))
}

/// The health check's answer.
#[derive(Debug, Serialize, ToSchema)]
struct Health {
    /// Always `ok`.
    status: &'static str,
    /// Spool's version.
    version: &'static str,
}

/// `GET /healthz`: the process is up and serving.
#[utoipa::path(get, path = "/healthz", tag = "meta", security(()),
    responses((status = 200, description = "The process is up", body = Health)))]
async fn health() -> Json<Health> {
    Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// `GET /v1/openapi.json`: the OpenAPI 3.1 document of every route (`docs/openapi.json`).
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document of every route", content_type = "application/json")))]
async fn openapi_json() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        OPENAPI_JSON,
    )
}
