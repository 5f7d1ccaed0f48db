//! Live readers behind a request-collapsing cache: what the origin and DynamoDB see per appended
//! event when thousands of readers follow a few hundred chats.
//!
//! Spool runs in this process as `spool serve --backend aws` runs it, on the emulator, its SDK
//! clients counting requests. In front of it, nginx (Debian's) is set up as the template's
//! CloudFront behaviour for `/v1/stream/*`: a cache keyed on the path, the whole query string
//! and the `Authorization` header, honouring the origin's
//! `Cache-Control`, with request collapsing (`proxy_cache_lock`: one request per key goes to the
//! origin, the others wait for its answer). Every reader takes a read grant
//! (`POST /v1/read-tokens`) and long-polls its chat through nginx from the start to the end,
//! checking that it saw every event once, in order. One chat has most of the readers (a quarter
//! of whom join halfway, catching up from the start); the others a few each. Meanwhile other callers try the busy chat through the same cache at the
//! same offsets: another organization's grant and token, another chat's grant, and none.
//!
//! What it reports: long-polls that reached the origin per appended event, for the busy chat
//! and the others (the design's claim is about one per chat per event, whatever the number of
//! readers), and DynamoDB reads per appended event. What it checks, always (so a run fails on
//! a violation): no reader missed or repeated an event, and every outsider was refused.

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool_aws::RequestCounter;
use spool_platform::{Backend, Config};

use crate::chat::Client;

/// How big a simulation to run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Shape {
    /// Readers of the busy chat.
    pub(crate) hot_readers: usize,
    /// Other chats, each with `readers_per_chat` readers.
    pub(crate) chats: usize,
    pub(crate) readers_per_chat: usize,
    /// Events appended to every chat.
    pub(crate) events: u64,
}

/// What the simulation measured.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Collapse {
    pub(crate) shape: Option<Shape>,
    /// Readers in all.
    pub(crate) readers: usize,
    /// Events appended, all chats.
    pub(crate) events: u64,
    /// Events the readers received, each checked in order.
    pub(crate) delivered: u64,
    /// Long-polls that reached the origin while the events were appended.
    pub(crate) origin_long_polls: u64,
    /// Per event appended to the busy chat, and to the others.
    pub(crate) hot_origin_per_event: f64,
    pub(crate) other_origin_per_event: f64,
    /// Long-polls the readers sent (what the origin would have served without the cache).
    pub(crate) reader_long_polls: u64,
    /// DynamoDB read requests and read units per appended event, all readers and the writer.
    pub(crate) dynamodb_reads_per_event: f64,
    pub(crate) dynamodb_read_units_per_event: f64,
    /// Outsiders' requests for the busy chat through the cache, and their answers.
    pub(crate) refusals: Vec<(String, u16)>,
    pub(crate) seconds: f64,
}

/// The nginx configuration: the template's stream behaviour (`StreamCachePolicy`, collapsing).
fn nginx_conf(dir: &Path, port: u16, origin: &str) -> String {
    let d = dir.display();
    format!(
        r#"daemon off;
master_process off;
error_log {d}/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 16384; }}
http {{
  log_format collapse '$upstream_cache_status $status $uri $arg_offset $arg_cursor $request_time';
  access_log {d}/access.log collapse;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  proxy_cache_path {d}/cache levels=1:2 keys_zone=streams:16m max_size=256m inactive=2m use_temp_path=off;
  upstream origin {{ server {origin}; keepalive 256; }}
  server {{
    listen 127.0.0.1:{port};
    location /v1/stream/ {{
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout 90s;
      proxy_cache streams;
      proxy_cache_methods GET HEAD;
      proxy_cache_key "$request_uri|$http_authorization";
      proxy_cache_lock on;
      proxy_cache_lock_timeout 60s;
      proxy_cache_lock_age 60s;
    }}
  }}
}}
"#
    )
}

/// nginx, stopped (and its directory removed) when dropped.
struct Nginx {
    _child: tokio::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Nginx {
    async fn start(binary: &Path, origin: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, nginx_conf(dir.path(), port, origin))?;
        let child = tokio::process::Command::new(binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .kill_on_drop(true)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "cannot run {} (install Debian's nginx-light, or pass --nginx)",
                    binary.display()
                )
            })?;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok(Self {
                    _child: child,
                    base: format!("http://127.0.0.1:{port}"),
                    _dir: dir,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
        anyhow::bail!("nginx did not start within 5 s: {log}")
    }
}

/// Long-polls that reached the origin, by stream.
#[derive(Clone, Default)]
struct OriginPolls(Arc<Mutex<HashMap<String, u64>>>);

impl OriginPolls {
    fn total(&self) -> HashMap<String, u64> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// One reader: follows `path` through the cache with `grant` until the stream closes, and
/// returns the events' numbers in the order received and its long-polls.
async fn follow(http: reqwest::Client, cache: String, path: String, grant: String) -> anyhow::Result<(Vec<u64>, u64)> {
    let (mut offset, mut cursor, mut live) = ("-1".to_owned(), None::<String>, false);
    let (mut seen, mut polls) = (Vec::new(), 0);
    for _ in 0..100_000 {
        let mut url = format!("{cache}/v1/stream/{path}?offset={offset}&read_token={grant}");
        if live {
            url.push_str("&live=long-poll");
            polls += 1;
            if let Some(cursor) = &cursor {
                url.push_str(&format!("&cursor={cursor}"));
            }
        }
        let response = http.get(&url).send().await?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        anyhow::ensure!(status == 200 || status == 204, "{path}: {status}");
        let next = header("stream-next-offset").context("no Stream-Next-Offset")?;
        let closed = header("stream-closed").is_some_and(|v| v == "true");
        let up_to_date = header("stream-up-to-date").is_some_and(|v| v == "true");
        cursor = header("stream-cursor").or(cursor);
        if status == 200 {
            let events: Vec<Value> = response.json().await?;
            seen.extend(events.iter().filter_map(|e| e["n"].as_u64()));
        }
        offset = next;
        if closed {
            return Ok((seen, polls));
        }
        live |= up_to_date;
    }
    anyhow::bail!("{path}: did not close within 100,000 reads")
}

/// Runs the simulation on the emulator `config` points at, with nginx at `nginx`.
pub(crate) async fn run(config: &Config, nginx: &Path, shape: Shape) -> anyhow::Result<Collapse> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let mut config = config.clone();
    config.backend = Backend::Aws;
    config.data_dir = dir.path().join("data");
    config.rate_limits = spool_auth::RateLimits::OFF;
    let counter = RequestCounter::default();
    let app = spool_local::app(&config, false, Some(counter.clone()))
        .await
        .context("cannot start Spool on the emulator")?;
    let polls = OriginPolls::default();
    let counted = polls.clone();
    let router = app.router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let counted = counted.clone();
            async move {
                let uri = request.uri();
                if let Some(path) = uri.path().strip_prefix("/v1/stream/")
                    && uri.query().is_some_and(|q| q.contains("live=long-poll"))
                {
                    let mut polls = counted.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    *polls.entry(path.to_owned()).or_default() += 1;
                }
                next.run(request).await
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = listener.local_addr()?.to_string();
    let base = format!("http://{origin}");
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let cache = Nginx::start(nginx, &origin).await?;
    let client = Client::sign_in(&base, &app.api_key).await?;
    let outsider = outsider(&config, &base).await?;

    // The chats: `sim/0` is the busy one.
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let paths: Vec<String> = (0..=shape.chats).map(|i| format!("sim-{tag}/{i}")).collect();
    let mut grants = Vec::new();
    for path in &paths {
        let created = client
            .http
            .put(format!("{base}/v1/stream/{path}"))
            .header("content-type", "application/json")
            .send()
            .await?;
        anyhow::ensure!(created.status().is_success(), "PUT {path}: {}", created.status());
        let grant = client.post("/v1/read-tokens", &json!({ "path": path })).await?;
        grants.push(grant["read_token"].as_str().context("no read_token")?.to_owned());
    }

    // The readers, through the cache.
    crate::progress(
        "collapsing",
        &format!(
            "{} readers of one chat, {} of {} others, through nginx",
            shape.hot_readers,
            shape.chats * shape.readers_per_chat,
            shape.chats
        ),
    );
    let http = reqwest::Client::builder().pool_max_idle_per_host(usize::MAX).build()?;
    let mut readers = tokio::task::JoinSet::new();
    let mut count = 0;
    // Starts a reader of chat `i` through the cache.
    let mut start = |readers: &mut tokio::task::JoinSet<_>, i: usize| {
        let (http, cache, path, grant) = (http.clone(), cache.base.clone(), paths[i].clone(), grants[i].clone());
        readers.spawn(async move { (i, follow(http, cache, path, grant).await) });
        count += 1;
    };
    // A quarter of the busy chat's readers join halfway (they catch up from the start): readers
    // who came at other times must end up sharing the cache's keys too.
    let late = shape.hot_readers / 4;
    for i in 0..paths.len() {
        let n = if i == 0 {
            shape.hot_readers - late
        } else {
            shape.readers_per_chat
        };
        for _ in 0..n {
            start(&mut readers, i);
        }
    }
    // Every reader is live when each chat has had its first long-poll and a moment has passed.
    for _ in 0..600 {
        if polls.total().len() == paths.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = polls.total();
    counter.reset();

    // The writer: `events` rounds of one event to every chat, then each closes.
    let mut refusals = Vec::new();
    for n in 1..=shape.events {
        crate::progress("collapsing", &format!("event {n} of {} to each chat", shape.events));
        for path in &paths {
            let response = client
                .http
                .post(format!("{base}/v1/stream/{path}"))
                .header("content-type", "application/json")
                .body(json!({ "n": n }).to_string())
                .send()
                .await?;
            anyhow::ensure!(
                response.status().is_success(),
                "append to {path}: {}",
                response.status()
            );
        }
        if n == shape.events.div_ceil(2) {
            refusals = outsiders_try(&http, &cache.base, &paths, &grants, &outsider).await?;
            for _ in 0..late {
                start(&mut readers, 0);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for path in &paths {
        let response = client
            .http
            .post(format!("{base}/v1/stream/{path}"))
            .header("stream-closed", "true")
            .send()
            .await?;
        anyhow::ensure!(response.status().is_success(), "close {path}: {}", response.status());
    }

    // Every reader saw every event once, in order.
    let expected: Vec<u64> = (1..=shape.events).collect();
    let (mut delivered, mut reader_long_polls) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while let Some(done) = tokio::time::timeout_at(deadline, readers.join_next())
        .await
        .context("the readers did not finish within 5 minutes of the last event")?
    {
        let (i, result) = done?;
        let (seen, polls) = result.with_context(|| format!("a reader of {}", paths[i]))?;
        anyhow::ensure!(
            seen == expected,
            "a reader of {} saw {seen:?}, not 1..={} once each in order",
            paths[i],
            shape.events
        );
        delivered += seen.len() as u64;
        reader_long_polls += polls;
    }
    let after = polls.total();
    let during = |path: &str| after.get(path).copied().unwrap_or(0) - before.get(path).copied().unwrap_or(0);
    let hot = during(&paths[0]);
    let others: u64 = paths[1..].iter().map(|p| during(p)).sum();
    let events = shape.events * paths.len() as u64;
    let reads = counter
        .snapshot()
        .into_iter()
        .filter(|((service, op), _)| {
            service.eq_ignore_ascii_case("dynamodb") && matches!(op.as_str(), "GetItem" | "Query" | "BatchGetItem")
        })
        .map(|(_, n)| n)
        .sum::<u64>();
    let (read_units, _) = counter.capacity_units();
    drop(cache);
    server.abort();
    Ok(Collapse {
        shape: Some(shape),
        readers: count,
        events,
        delivered,
        origin_long_polls: hot + others,
        hot_origin_per_event: hot as f64 / shape.events as f64,
        other_origin_per_event: others as f64 / (shape.events * shape.chats as u64).max(1) as f64,
        reader_long_polls,
        dynamodb_reads_per_event: reads as f64 / events as f64,
        dynamodb_read_units_per_event: read_units / events as f64,
        refusals,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Another organization: its token and a read grant for a stream of its own.
struct Outsider {
    token: String,
    grant: String,
}

async fn outsider(config: &Config, base: &str) -> anyhow::Result<Outsider> {
    let directory = spool_aws::Stores::connect(config, None).await?.metadata()?;
    let now = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock);
    let org = spool_api::admin::create_org(&*directory, None, "Outsider", now).await?;
    let (_, key) = spool_api::admin::create_api_key(&*directory, &org.id, &[], now).await?;
    let http = reqwest::Client::new();
    let handshake: Value = http
        .post(format!("{base}/v1/handshake"))
        .json(&json!({ "api_key": key.reveal() }))
        .send()
        .await?
        .json()
        .await?;
    let token = handshake["jwt"].as_str().context("no token")?.to_owned();
    let created = http
        .put(format!("{base}/v1/stream/mine"))
        .bearer_auth(&token)
        .send()
        .await?;
    anyhow::ensure!(
        created.status().is_success(),
        "the outsider's PUT: {}",
        created.status()
    );
    let grant: Value = http
        .post(format!("{base}/v1/read-tokens"))
        .bearer_auth(&token)
        .json(&json!({ "path": "mine" }))
        .send()
        .await?
        .json()
        .await?;
    Ok(Outsider {
        token,
        grant: grant["read_token"].as_str().context("no read_token")?.to_owned(),
    })
}

/// Outsiders ask for the busy chat through the cache, at the offset its readers are at: each
/// must be refused, whatever the cache holds for that offset.
async fn outsiders_try(
    http: &reqwest::Client,
    cache: &str,
    paths: &[String],
    grants: &[String],
    outsider: &Outsider,
) -> anyhow::Result<Vec<(String, u16)>> {
    let hot = &paths[0];
    // Where the busy chat's readers are: its tail, read through the cache as they read it.
    let head = http
        .head(format!("{cache}/v1/stream/{hot}?read_token={}", grants[0]))
        .send()
        .await?;
    let offset = head
        .headers()
        .get("stream-next-offset")
        .and_then(|v| v.to_str().ok())
        .context("no offset")?
        .to_owned();
    let url = |query: &str| format!("{cache}/v1/stream/{hot}?offset={offset}&{query}");
    let tries = [
        (
            "another organization's read grant",
            http.get(url(&format!("read_token={}", outsider.grant))),
        ),
        (
            "another organization's token",
            http.get(url("")).bearer_auth(&outsider.token),
        ),
        (
            "another chat's read grant",
            http.get(url(&format!("read_token={}", grants[1]))),
        ),
        ("no credentials", http.get(url(""))),
        (
            "another organization's read grant, long-polling",
            http.get(url(&format!("live=long-poll&read_token={}", outsider.grant))),
        ),
    ];
    let mut refusals = Vec::new();
    for (who, request) in tries {
        let status = request.send().await?.status().as_u16();
        anyhow::ensure!(
            matches!(status, 401 | 403 | 404),
            "{who} read the busy chat through the cache: {status}"
        );
        refusals.push((who.to_owned(), status));
    }
    Ok(refusals)
}

/// The simulation's table.
pub(crate) fn table(c: &Collapse) -> String {
    let Some(shape) = c.shape else {
        return String::new();
    };
    let mut out = format!(
        "Live readers through a request-collapsing cache (nginx `proxy_cache_lock`, keyed as the template's CloudFront \
         behaviour) in front of `spool serve --backend aws` on the emulator: {} readers with read grants, {} of one chat \
         (a quarter of them joining halfway) and {} of each of {} others, long-polling while {} events went to every \
         chat ({} in all); every reader saw every event once, in order ({} deliveries), in {:.0} s.\n\n",
        c.readers,
        shape.hot_readers,
        shape.readers_per_chat,
        shape.chats,
        shape.events,
        c.events,
        c.delivered,
        c.seconds
    );
    out.push_str("| live readers, collapsed | per appended event |\n| --- | ---: |\n");
    let without = c.reader_long_polls as f64 / c.events as f64;
    let with = c.origin_long_polls as f64 / c.events as f64;
    for (what, value) in [
        (
            format!(
                "long-polls the origin served, the chat with {} readers",
                shape.hot_readers
            ),
            c.hot_origin_per_event,
        ),
        (
            format!(
                "long-polls the origin served, a chat with {} readers",
                shape.readers_per_chat
            ),
            c.other_origin_per_event,
        ),
        ("long-polls the origin served, all chats".to_owned(), with),
        (
            "long-polls the readers sent (the origin's load without the cache)".to_owned(),
            without,
        ),
        (
            "DynamoDB read requests (readers and writer)".to_owned(),
            c.dynamodb_reads_per_event,
        ),
        (
            "DynamoDB read units (readers and writer)".to_owned(),
            c.dynamodb_read_units_per_event,
        ),
    ] {
        out.push_str(&format!("| {what} | {value:.2} |\n"));
    }
    out.push_str("\nRefused through the cache, at the busy chat's current offset: ");
    let refusals: Vec<String> = c
        .refusals
        .iter()
        .map(|(who, status)| format!("{who} ({status})"))
        .collect();
    out.push_str(&refusals.join(", "));
    out.push_str(".\n");
    out
}
