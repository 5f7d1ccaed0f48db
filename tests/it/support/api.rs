//! A client of the chat API with one organization's token, and a served Spool to point it at:
//! the API and the stream function on a loopback port, organizations and their keys, the
//! handshake and server-sent events.

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_auth::TokenKeys;
use spool_chat::{
    attachment::FileStore, directory::Directory, metadata::Metadata, service::AttachmentLimits, turns::TurnQueue,
};
use spool_log::{
    clock::{Clock, SystemClock},
    failpoint::FailPoints,
    limits::LiveSettings,
    port::StreamLog,
};
use spool_tests::{Harness, unique_id};

pub(crate) const SECRET: &[u8] = b"the handshake test's signing secret";

/// Serves the chat API and the stream function, as `spool serve` does, until the test ends.
pub(crate) async fn serve(
    log: Arc<dyn StreamLog>,
    metadata: Arc<dyn Metadata>,
    turns: Arc<dyn TurnQueue>,
    files: Arc<dyn FileStore>,
) -> String {
    serve_limited(log, metadata, turns, files, AttachmentLimits::default()).await
}

/// [`serve`], holding files to `limits`.
pub(crate) async fn serve_limited(
    log: Arc<dyn StreamLog>,
    metadata: Arc<dyn Metadata>,
    turns: Arc<dyn TurnQueue>,
    files: Arc<dyn FileStore>,
    limits: AttachmentLimits,
) -> String {
    let push = push(metadata.clone(), log.clone());
    let fail = Arc::new(FailPoints::default());
    let org_turns = spool_chat::turns::DEFAULT_ORG_TURN_CONCURRENCY;
    serve_with(log, metadata, turns, files, limits, &push, fail, org_turns).await
}

/// [`serve_limited`], with push delivery (the protocol's subscriptions, chat webhooks) by
/// `push`, its chat service stopping where a test arms one of `fail`, counting queued turns'
/// places against a worker that runs `org_turns` of an organization at once.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve_with(
    log: Arc<dyn StreamLog>,
    metadata: Arc<dyn Metadata>,
    turns: Arc<dyn TurnQueue>,
    files: Arc<dyn FileStore>,
    limits: AttachmentLimits,
    push: &Push,
    fail: Arc<FailPoints>,
    org_turns: usize,
) -> String {
    let keys = TokenKeys::new(SECRET).unwrap();
    let aggregates = push.feeds(log.clone());
    let streams = spool_stream::StreamApi::new(
        log.clone(),
        spool_stream::Access::Tokens(Box::new(keys.clone())),
        LiveSettings::default(),
    )
    .with_subscriptions(push.subscriptions.clone());
    let access = spool_auth::Access::Tokens(Box::new(keys.clone()));
    let roots = spool_tests::workspace_roots(metadata.clone());
    let stores = spool_api::Stores {
        metadata,
        log,
        turns,
        files,
    };
    let api = spool_api::ChatApi::new(stores, keys, access, Arc::new(SystemClock))
        .with_workspace_roots(roots)
        .with_attachment_limits(limits)
        .with_aggregates(aggregates)
        .with_webhook_urls(DEV_URLS)
        .with_mcp_servers(Some(Arc::new(spool_chat::mcp::SecretBox::new(&DATA_KEY))), true)
        .with_fail_points(fail)
        .with_org_turn_concurrency(org_turns)
        // A person's answer is waited for 3 s per MCP call here, so the resumable "waiting"
        // answer is seen quickly (25 s in deployments).
        .with_mcp(spool_api::mcp::McpSettings {
            wait: std::time::Duration::from_secs(3),
            hosts: None,
        });
    let (chat_api, writes) = spool_api::router_with_writes(api);
    let streams = streams.with_chat_writes(writes);
    let app = chat_api.merge(spool_stream::router(streams, 1 << 20));
    spool_tests::serve_on_loopback(app).await
}

/// The data key the tests' API seals MCP servers' secrets with.
pub(crate) const DATA_KEY: [u8; 32] = [42; 32];

/// Webhooks in the tests call receivers on loopback, as under `spool serve`.
pub(crate) const DEV_URLS: spool_log::subscription::spec::UrlPolicy =
    spool_log::subscription::spec::UrlPolicy { loopback_http: true };

/// Push delivery over the stores, as `spool serve` has it.
pub(crate) struct Push {
    pub(crate) subscriptions: Arc<spool_log::subscription::service::Subscriptions>,
    pub(crate) hooks: Arc<spool_chat::webhook::service::ChatHooks>,
    /// Where jobs run later go (this process's task).
    pub(crate) jobs: Arc<dyn spool_log::jobs::Deferred>,
    /// The turn queue the checks of turns that wait for a runner queue them on, once a worker
    /// runs them.
    pub(crate) runner_turns: Arc<std::sync::OnceLock<Arc<dyn spool_chat::turns::TurnQueue>>>,
}

impl Push {
    /// Feeds appended at once, their events heard by the webhooks.
    pub(crate) fn feeds(&self, log: Arc<dyn StreamLog>) -> Arc<dyn spool_log::aggregate::Aggregates> {
        Arc::new(spool_chat::webhook::service::HookedFeeds {
            feeds: Arc::new(spool_log::aggregate::Direct(log)),
            hooks: self.hooks.clone(),
        })
    }
}

/// Push delivery over `metadata` and `log`, its jobs run by a task of this process.
pub(crate) fn push(metadata: Arc<dyn Metadata>, log: Arc<dyn StreamLog>) -> Push {
    use spool_log::jobs::MaintenanceJob;
    let (jobs, queue) = spool_embedded::LocalJobs::new();
    let outbound = Arc::new(spool_worker::Webhooks::new(DEV_URLS).unwrap());
    let subscriptions = spool_log::subscription::service::Subscriptions::new(
        metadata.clone(),
        log.clone(),
        Arc::new(jobs.clone()),
        Arc::new(spool_auth::WebhookKeys::derive(SECRET).unwrap()),
        Arc::new(SystemClock),
        DEV_URLS,
    )
    .with_outbound(outbound.clone());
    let hooks = spool_chat::webhook::service::ChatHooks::new(
        metadata.clone(),
        Arc::new(jobs.clone()),
        Arc::new(SystemClock),
        DEV_URLS,
    )
    .with_outbound(outbound);
    let push = Push {
        subscriptions: Arc::new(subscriptions),
        hooks: Arc::new(hooks),
        jobs: Arc::new(jobs),
        runner_turns: Arc::default(),
    };
    let (subscriptions, hooks) = (push.subscriptions.clone(), push.hooks.clone());
    let runner_turns = push.runner_turns.clone();
    tokio::spawn(spool_embedded::LocalJobs::run(queue, move |job| {
        let (subscriptions, hooks) = (subscriptions.clone(), hooks.clone());
        let (metadata, log, runner_turns) = (metadata.clone(), log.clone(), runner_turns.clone());
        async move {
            match job {
                MaintenanceJob::RunnerCheck {
                    org,
                    session_id,
                    turn_id,
                } => match runner_turns.get() {
                    Some(turns) => {
                        match spool_agents::runner_check(
                            metadata.as_ref(),
                            log.as_ref(),
                            SystemClock.now_ms(),
                            &org,
                            &session_id,
                            &turn_id,
                        )
                        .await
                        {
                            Ok(Some(job)) => turns.enqueue(&job).await,
                            Ok(None) => Ok(()),
                            Err(e) => Err(e),
                        }
                    }
                    None => Ok(()),
                },
                MaintenanceJob::Subscription(job) => subscriptions.run(&job).await,
                MaintenanceJob::Webhook {
                    org,
                    hook_id,
                    delivery_id,
                    attempt,
                } => hooks.deliver(&org, &hook_id, &delivery_id, attempt).await,
                _ => Ok(()),
            }
            .map_err(|e| e.to_string())
        }
    }));
    push
}

/// A fresh organization with one key granting `capabilities`: (org id, whole key).
pub(crate) async fn provision(directory: &dyn Directory, capabilities: &[&str]) -> (String, String) {
    let now = SystemClock.now_ms();
    let org = spool_api::admin::create_org(directory, Some(&unique_id("org")), "Handshake test", now)
        .await
        .unwrap();
    let capabilities: Vec<String> = capabilities.iter().map(|c| (*c).to_owned()).collect();
    let (_, key) = spool_api::admin::create_api_key(directory, &org.id, &capabilities, now)
        .await
        .unwrap();
    (org.id, key.reveal())
}

pub(crate) async fn handshake(http: &reqwest::Client, base: &str, body: Value) -> reqwest::Response {
    http.post(format!("{base}/v1/handshake"))
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// A client of the API with one organization's token.
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) token: Option<String>,
}

impl Api {
    pub(crate) async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub(crate) async fn raw(&self, method: Method, path: &str, body: &'static [u8]) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A `GET` with this client's token, answered as is (for streams and SSE).
    pub(crate) async fn get(&self, path: &str) -> reqwest::Response {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request.send().await.unwrap()
    }

    pub(crate) async fn ok(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, value) = self.call(method.clone(), path, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {value}");
        value
    }
}

/// The API on a loopback port and clients of two organizations.
pub(crate) async fn setup<H: Harness>(harness: &H) -> (Api, Api, Api) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let base = serve(log, metadata.clone(), harness.turns().await, harness.files().await).await;
    setup_on(metadata.as_ref(), &base).await
}

/// Clients of two new organizations (and one without a token) of the API at `base`.
pub(crate) async fn setup_on(metadata: &dyn Metadata, base: &str) -> (Api, Api, Api) {
    let (_, key_a) = provision(metadata, &[]).await;
    let (_, key_b) = provision(metadata, &[]).await;
    let http = reqwest::Client::new();
    let mut clients = Vec::new();
    for key in [Some(key_a), Some(key_b), None] {
        let token = match key {
            Some(key) => {
                let body: Value = handshake(&http, base, json!({ "api_key": key }))
                    .await
                    .json()
                    .await
                    .unwrap();
                Some(body["jwt"].as_str().unwrap().to_owned())
            }
            None => None,
        };
        clients.push(Api {
            http: http.clone(),
            base: base.to_owned(),
            token,
        });
    }
    let anonymous = clients.pop().unwrap();
    let b = clients.pop().unwrap();
    let a = clients.pop().unwrap();
    (a, b, anonymous)
}

pub(crate) fn org_of(api: &Api) -> String {
    let keys = spool_auth::TokenKeys::new(SECRET).unwrap();
    keys.verify(api.token.as_deref().unwrap()).unwrap().org
}

/// Reads SSE events from `response` until `count` events with ids arrived: (id, data) pairs.
pub(crate) async fn sse_events(mut response: reqwest::Response, count: usize) -> Vec<(u64, Value)> {
    let mut buffer = String::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while events.len() < count {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .expect("events in time")
            .unwrap()
            .expect("the stream stays open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut id = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().parse::<u64>().unwrap());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            if let Some(id) = id {
                events.push((id, serde_json::from_str(&data).unwrap()));
            }
        }
    }
    events
}

/// A client for an agent of `person`'s organization: a key with the `agent` capability.
pub(crate) async fn agent_client<H: Harness>(harness: &H, person: &Api) -> Api {
    let org = org_of(person);
    let metadata = harness.metadata().await;
    let (_, key) = spool_api::admin::create_api_key(&metadata, &org, &["agent".to_owned()], SystemClock.now_ms())
        .await
        .unwrap();
    let body: Value = handshake(&person.http, &person.base, json!({ "api_key": key.reveal() }))
        .await
        .json()
        .await
        .unwrap();
    Api {
        http: person.http.clone(),
        base: person.base.clone(),
        token: Some(body["jwt"].as_str().unwrap().to_owned()),
    }
}

/// What organization A has, as its API shows it, plus what only the stores show.
pub(crate) async fn snapshot(api: &Api, ws: &str, session: &str) -> Value {
    let mut state = json!({});
    for (key, path) in [
        ("workspaces", "/v1/workspaces".to_owned()),
        ("workspace", format!("/v1/workspaces/{ws}")),
        ("agents", format!("/v1/workspaces/{ws}/agents")),
        ("tasks", format!("/v1/workspaces/{ws}/tasks")),
        ("mcp_servers", format!("/v1/workspaces/{ws}/mcp-servers")),
        ("sessions", format!("/v1/sessions?workspace_id={ws}")),
        ("loose", "/v1/sessions".to_owned()),
        ("session", format!("/v1/sessions/{session}")),
        ("events", format!("/v1/sessions/{session}/events?after=0")),
        ("attachments", format!("/v1/sessions/{session}/attachments")),
        ("global", "/chat/history?after=0".to_owned()),
        ("commands", "/v1/slash-commands".to_owned()),
        ("workspace_commands", format!("/v1/workspaces/{ws}/slash-commands")),
    ] {
        state[key] = api.ok(Method::GET, &path, None).await;
    }
    let audit = api.get("/v1/stream/audit?offset=-1").await;
    state["audit"] = audit.json().await.unwrap_or(Value::Null);
    state
}
