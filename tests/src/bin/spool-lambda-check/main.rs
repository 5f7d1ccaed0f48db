//! `make lambda-check`: Spool's functions hosted as Lambda functions, driving one chat end to end
//! against the emulator.
//!
//! Each function's own binary (`spool-api`, `spool-stream`, `spool-worker`, the ones
//! `cargo lambda build` packages) runs under cargo-lambda's Lambda runtime API emulator
//! (`cargo lambda watch --only-lambda-apis`), one emulator per function as on AWS, configured as
//! the template configures it: nothing secret in its environment, the signing secret read from
//! Secrets Manager by ARN. The organization and its API key come from `spool admin --backend
//! aws`, as the deploy guide says. Then:
//! 1. a person's handshake, a workspace, a scripted agent and a chat go through the API function's
//!    URL (function URL events, payload 2.0);
//! 2. a long-poll waits on the chat through the stream function's URL (response streaming);
//! 3. the message the API put on the FIFO turns queue is received from the emulator's queue and
//!    handed to the worker function in the shape the SQS event source mapping sends
//!    (`Records[]` with `attributes.MessageGroupId`, `ApproximateReceiveCount`, …); the worker's
//!    partial batch response decides what is deleted, as the mapping does; seal jobs from the
//!    maintenance queue go the same way, and so do the workspace's feed events and the
//!    handshake's audit record from the aggregates FIFO queue (the API and the turn hand them
//!    over; the worker appends them);
//! 4. the answer is read back through the stream function: the long-poll wakes with it, and a
//!    catch-up read holds the whole turn, in order, once;
//! 5. the stream function only reads, and the aggregates reach the feed and audit streams once;
//! 6. a CLI turn of a workspace whose CLI agents run on runners (Lambda's default) is taken by a
//!    real `spool runner` process with a runner key, through a proxy that adds the origin
//!    secret as CloudFront does ([`runner`]), and its reply and action land once;
//! 7. a malformed job is reported failed in the batch response (so SQS keeps it for its
//!    dead-letter queue), never acknowledged.
//!
//! Usage: `spool-lambda-check` (after `make emulator-up` or inside `make test`); exits non-zero on
//! any failure, printing the functions' logs.

use std::{
    collections::HashMap,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{ExitCode, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, ensure};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

mod runner;

/// How long the whole chat may take before the check gives up.
const CHAT_DEADLINE: Duration = Duration::from_secs(120);

const SCRIPT: &str = r#"{"word_delay_ms": 0, "rules": [
  {"match": ["hello"], "rounds": [{"say": "Hello from a worker hosted as a Lambda function."}]}]}"#;
const ANSWER: &str = "Hello from a worker hosted as a Lambda function.";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn say(what: &str) {
    println!("lambda-check: {what}");
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One function, hosted: cargo-lambda's runtime API emulator and the function's process.
struct Hosted {
    name: &'static str,
    port: u16,
    log: PathBuf,
    _emulator: Child,
    function: tokio::task::JoinHandle<()>,
    restarts: Arc<AtomicUsize>,
}

impl Drop for Hosted {
    fn drop(&mut self) {
        // Dropping the task drops the running child, which kills it.
        self.function.abort();
    }
}

impl Hosted {
    /// Hosts `name` with `env` (cargo-lambda gives each invocation a deadline of its own).
    async fn start(name: &'static str, env: &[(String, String)], logs: &Path) -> Result<Self> {
        let port = free_port()?;
        let emulator_log = logs.join(format!("{name}.emulator.log"));
        let emulator = Command::new(repo().join(".venv/bin/cargo-lambda"))
            .args(["lambda", "watch", "--only-lambda-apis", "-A", "127.0.0.1", "-P"])
            .arg(port.to_string())
            .arg("--manifest-path")
            .arg(repo().join("Cargo.toml"))
            .stdout(std::fs::File::create(&emulator_log)?)
            .stderr(std::fs::File::create(logs.join(format!("{name}.emulator.err")))?)
            .kill_on_drop(true)
            .spawn()
            .context("start cargo-lambda (make lambda-check installs it into .venv)")?;
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            ensure!(
                started.elapsed() < Duration::from_secs(30),
                "cargo-lambda's runtime API for {name} did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = logs.join(format!("{name}.log"));
        let (stdout, stderr) = (
            std::fs::File::create(&log)?,
            std::fs::File::create(logs.join(format!("{name}.err")))?,
        );
        let spawn = {
            let env = env.to_vec();
            move || -> Result<Child> {
                Command::new(repo().join(format!("target/debug/{name}")))
                    .env_clear()
                    .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .env("PATH", std::env::var("PATH").unwrap_or_default())
                    .env("AWS_LAMBDA_RUNTIME_API", format!("http://127.0.0.1:{port}/.rt"))
                    .env("AWS_LAMBDA_FUNCTION_NAME", "_")
                    .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
                    .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
                    .env("RUST_LOG", "info")
                    .stdout(stdout.try_clone()?)
                    .stderr(Stdio::from(stderr.try_clone()?))
                    .kill_on_drop(true)
                    .spawn()
                    .with_context(|| {
                        format!("start target/debug/{name} (cargo build --workspace --all-features --bins)")
                    })
            }
        };
        let mut first = spawn()?;
        // As Lambda does, a runtime that exits is started again (cargo-lambda's emulator now
        // and then answers a runtime's long poll for the next event without one, which
        // lambda_runtime treats as fatal); how often is reported.
        let restarts = Arc::new(AtomicUsize::new(0));
        let counted = restarts.clone();
        let function = tokio::spawn(async move {
            loop {
                let _ = first.wait().await;
                if counted.fetch_add(1, Ordering::Relaxed) >= 20 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                match spawn() {
                    Ok(child) => first = child,
                    Err(_) => return,
                }
            }
        });
        say(&format!("{name} hosted on 127.0.0.1:{port}"));
        Ok(Self {
            name,
            port,
            log,
            _emulator: emulator,
            function,
            restarts,
        })
    }

    /// The function URL's base.
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/lambda-url/_", self.port)
    }

    /// Invokes the function with `event` as the Lambda Invoke API does; its JSON answer.
    async fn invoke(&self, http: &reqwest::Client, event: &Value) -> Result<Value> {
        let response = http
            .post(format!(
                "http://127.0.0.1:{}/2015-03-31/functions/_/invocations",
                self.port
            ))
            .json(event)
            .send()
            .await?;
        ensure!(
            response.status().is_success(),
            "{} answered {}",
            self.name,
            response.status()
        );
        Ok(response.json().await?)
    }

    fn print_logs(&self) {
        for file in [self.log.clone(), self.log.with_extension("err")] {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            println!("--- {} (last lines) ---", file.display());
            for line in tail.into_iter().rev() {
                println!("{line}");
            }
        }
    }
}

/// A queue's messages, received as the event source mapping receives them.
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<Vec<aws_sdk_sqs::types::Message>> {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await?;
    Ok(out.messages.unwrap_or_default())
}

/// The SQS event the event source mapping hands a function for `messages` of `queue_arn`.
fn sqs_event(messages: &[aws_sdk_sqs::types::Message], queue_arn: &str, region: &str) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            let attributes: HashMap<String, String> = m
                .attributes()
                .map(|a| a.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
                .unwrap_or_default();
            json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": attributes,
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            })
        })
        .collect();
    json!({ "Records": records })
}

/// Hands one batch of `url`'s messages to the worker and deletes those its partial batch
/// response does not report failed; the ids it reported failed.
async fn deliver(
    worker: &Hosted,
    http: &reqwest::Client,
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    region: &str,
) -> Result<(usize, Vec<String>)> {
    let messages = receive(sqs, url).await?;
    if messages.is_empty() {
        return Ok((0, Vec::new()));
    }
    let arn = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await?
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .context("the queue's ARN")?;
    let answer = worker.invoke(http, &sqs_event(&messages, &arn, region)).await?;
    let failed: Vec<String> = answer["batchItemFailures"]
        .as_array()
        .context("a partial batch response (batchItemFailures)")?
        .iter()
        .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
        .collect();
    for message in &messages {
        let id = message.message_id().unwrap_or_default();
        if !failed.iter().any(|f| f == id) {
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await?;
        }
    }
    Ok((messages.len(), failed))
}

/// `spool admin …` against the emulator's tables; its JSON.
async fn admin(env: &[(String, String)], args: &[&str]) -> Result<Value> {
    let out = Command::new(repo().join("target/debug/spool"))
        .arg("admin")
        .args(args)
        .args(["--backend", "aws", "--env-file", "/dev/null"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .await
        .context("run target/debug/spool admin")?;
    ensure!(
        out.status.success(),
        "spool admin {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A request to the API function; its JSON, if it answered `expect`.
async fn call(
    http: &reqwest::Client,
    api: &Hosted,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value> {
    let mut request = http
        .request(method.clone(), format!("{}{path}", api.url()))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    ensure!(status.is_success(), "{method} {path}: {status} {text}");
    Ok(serde_json::from_str(&text)?)
}

async fn check(hosted: &mut Vec<Hosted>, logs: &Path) -> Result<()> {
    let env_file = std::env::var_os("SPOOL_EMULATOR_ENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".env.emulator"));
    let emulator = spool_platform::read_env_file(&env_file)
        .with_context(|| format!("read {} (make emulator-up)", env_file.display()))?;
    let config = spool_platform::Config::from_vars(emulator.clone())?;
    let region = config.aws.region.clone().unwrap_or_else(|| "us-east-1".to_owned());
    let sdk = spool_aws::load_sdk_config(&config.aws).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let secrets = aws_sdk_secretsmanager::Client::new(&sdk);
    // Every request comes "through CloudFront": it carries the origin secret.
    let origin = spool_auth::random_secret(16).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut through_cdn = reqwest::header::HeaderMap::new();
    through_cdn.insert(spool_edge::ORIGIN_HEADER, origin.parse()?);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .default_headers(through_cdn)
        .build()?;
    let direct = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;

    // Queues of its own, so nothing else's messages reach these functions.
    let suffix = spool_tests::unique_id("lc");
    let turns = sqs
        .create_queue()
        .queue_name(format!("{suffix}-turns.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::ContentBasedDeduplication, "false")
        .attributes(QueueAttributeName::VisibilityTimeout, "120")
        .send()
        .await?
        .queue_url
        .context("turns queue url")?;
    let maintenance = sqs
        .create_queue()
        .queue_name(format!("{suffix}-maintenance"))
        .send()
        .await?
        .queue_url
        .context("maintenance queue url")?;
    let aggregates = sqs
        .create_queue()
        .queue_name(format!("{suffix}-aggregates.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::ContentBasedDeduplication, "false")
        .attributes(QueueAttributeName::VisibilityTimeout, "60")
        .send()
        .await?
        .queue_url
        .context("aggregates queue url")?;
    // The signing secret, as the template makes it: the functions read it by ARN.
    let signing = spool_auth::random_secret(32).map_err(|e| anyhow::anyhow!("{e}"))?;
    let secret_arn = secrets
        .create_secret()
        .name(format!("{suffix}-jwt-secret"))
        .secret_string(json!({ "SPOOL_JWT_SECRET": signing }).to_string())
        .send()
        .await?
        .arn
        .context("the secret's ARN")?;
    let origin_arn = secrets
        .create_secret()
        .name(format!("{suffix}-origin-secret"))
        .secret_string(json!({ "SPOOL_ORIGIN_SECRET": origin }).to_string())
        .send()
        .await?
        .arn
        .context("the origin secret's ARN")?;
    // The data key that seals MCP servers' secrets, as the template makes it (hex).
    let data_key = spool_auth::random_secret(32).map_err(|e| anyhow::anyhow!("{e}"))?;
    let data_key_arn = secrets
        .create_secret()
        .name(format!("{suffix}-data-key"))
        .secret_string(json!({ "SPOOL_DATA_KEY": data_key }).to_string())
        .send()
        .await?
        .arn
        .context("the data key's ARN")?;
    let both = format!("{secret_arn},{origin_arn}");
    let api_secrets = format!("{both},{data_key_arn}");

    let mut env: Vec<(String, String)> = emulator.into_iter().filter(|(k, _)| k != "SPOOL_JWT_SECRET").collect();
    env.extend([
        ("SPOOL_BACKEND".into(), "aws".into()),
        ("SPOOL_TURNS_QUEUE_URL".into(), turns.clone()),
        ("SPOOL_MAINTENANCE_QUEUE_URL".into(), maintenance.clone()),
        ("SPOOL_AGGREGATES_QUEUE_URL".into(), aggregates.clone()),
    ]);
    let with = |extra: &[(&str, &str)]| {
        let mut env = env.clone();
        env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        env
    };
    let api_env = with(&[("SPOOL_SECRET_ARNS", &api_secrets)]);
    let stream_env = with(&[
        ("SPOOL_SECRET_ARNS", &both),
        ("SPOOL_LONG_POLL_MS", "20000"),
        ("SPOOL_SSE_MAX_MS", "60000"),
    ]);
    let worker_env = with(&[("SPOOL_TURN_LEASE_MS", "120000")]);
    hosted.push(Hosted::start("spool-api", &api_env, logs).await?);
    hosted.push(Hosted::start("spool-stream", &stream_env, logs).await?);
    hosted.push(Hosted::start("spool-worker", &worker_env, logs).await?);
    let (api, stream, worker) = (&hosted[0], &hosted[1], &hosted[2]);

    // The first organization and key, as an operator makes them on AWS.
    let org = admin(&api_env, &["create-org", "Lambda check"]).await?;
    let org = org["org_id"].as_str().context("org_id")?.to_owned();
    let key = admin(&api_env, &["create-api-key", &org]).await?;
    let key = key["api_key"].as_str().context("api_key")?.to_owned();
    say(&format!(
        "made organization {org} and a key with spool admin --backend aws"
    ));

    // 0. Around the CDN, neither function answers.
    for (function, path) in [(api, "/v1/docs"), (stream, "/v1/stream/anything")] {
        let status = direct.get(format!("{}{path}", function.url())).send().await?.status();
        ensure!(
            status == 403,
            "{} answered {status} to a request that did not come through the CDN",
            function.name
        );
    }
    say("a request without the origin secret is refused by both functions (403)");

    // 1. The person's side, through the API function's URL.
    let handshake = http
        .post(format!("{}/v1/handshake", api.url()))
        .json(&json!({ "api_key": key, "user_agent": "lambda-check" }))
        .send()
        .await?;
    ensure!(handshake.status().is_success(), "handshake: {}", handshake.status());
    let token = handshake.json::<Value>().await?["jwt"]
        .as_str()
        .context("a token")?
        .to_owned();
    use reqwest::Method;
    let ws = call(
        &http,
        api,
        &token,
        Method::POST,
        "/v1/workspaces",
        Some(json!({ "name": "Lambda" })),
    )
    .await?;
    let ws = ws["id"].as_str().context("workspace id")?.to_owned();
    let agents = call(
        &http,
        api,
        &token,
        Method::GET,
        &format!("/v1/workspaces/{ws}/agents"),
        None,
    )
    .await?;
    let agent = agents["agents"][0]["id"]
        .as_str()
        .context("the built-in agent")?
        .to_owned();
    call(
        &http,
        api,
        &token,
        Method::PATCH,
        &format!("/v1/agents/{agent}"),
        Some(json!({ "instruction": SCRIPT, "runtime": "scripted" })),
    )
    .await?;
    let chat = call(
        &http,
        api,
        &token,
        Method::POST,
        "/v1/sessions",
        Some(json!({ "workspace_id": ws })),
    )
    .await?;
    let chat = chat["id"].as_str().context("chat id")?.to_owned();

    // 2. A reader waits at the chat's tail through the stream function.
    let read = |offset: String, live: bool| {
        let (http, url, token, chat) = (http.clone(), stream.url(), token.clone(), chat.clone());
        async move {
            let live = if live { "&live=long-poll" } else { "" };
            let response = http
                .get(format!("{url}/v1/stream/sessions/{chat}?offset={offset}{live}"))
                .bearer_auth(&token)
                .send()
                .await?;
            let status = response.status();
            let next = response
                .headers()
                .get("stream-next-offset")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body = response.text().await?;
            ensure!(status.is_success(), "stream read: {status} {body}");
            let events: Vec<Value> = if body.is_empty() {
                Vec::new()
            } else {
                serde_json::from_str(&body)?
            };
            Ok::<_, anyhow::Error>((events, next))
        }
    };
    let (before, tail) = read("-1".into(), false).await?;
    let waiting = tokio::spawn(read(tail.clone(), true));

    // The message: the API appends it and puts the turn on the turns queue.
    let sent = call(
        &http,
        api,
        &token,
        Method::POST,
        &format!("/v1/sessions/{chat}/messages"),
        Some(json!({ "content": "hello" })),
    )
    .await?;
    let turn = sent["turn_id"].as_str().context("turn_id")?.to_owned();
    say(&format!("sent a message: turn {turn} is on the turns queue"));

    // 3. The event source mapping's part: deliver until the turn has ended.
    let started = Instant::now();
    let (mut turn_batches, mut seal_batches) = (0, 0);
    loop {
        ensure!(
            started.elapsed() < CHAT_DEADLINE,
            "the turn did not end in {CHAT_DEADLINE:?}"
        );
        let (n, failed) = deliver(worker, &http, &sqs, &turns, &region).await?;
        ensure!(failed.is_empty(), "the worker reported turns failed: {failed:?}");
        turn_batches += usize::from(n > 0);
        let (n, failed) = deliver(worker, &http, &sqs, &maintenance, &region).await?;
        ensure!(failed.is_empty(), "the worker reported seal jobs failed: {failed:?}");
        seal_batches += usize::from(n > 0);
        let (_, failed) = deliver(worker, &http, &sqs, &aggregates, &region).await?;
        ensure!(failed.is_empty(), "the worker reported feed events failed: {failed:?}");
        let (events, _) = read(tail.clone(), false).await?;
        if events
            .iter()
            .any(|e| e["type"] == "agent_end" && e["turn_id"] == turn.as_str())
        {
            break;
        }
    }
    // One delivery ran the whole step: nothing was carried over or retried.
    ensure!(turn_batches == 1, "the turn took {turn_batches} deliveries");
    say(&format!(
        "the worker ran the turn in one delivery ({seal_batches} seal batches delivered)"
    ));

    // The worker reported the step as a CloudWatch metric (an EMF line on its stdout).
    let emf = std::fs::read_to_string(&worker.log)?
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|doc| doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Spool" && doc["TurnStepMs"].is_number());
    let emf = emf.context("no EMF line with TurnStepMs in the worker's output")?;
    ensure!(emf["Outcome"] == "ended", "the step's metric: {emf}");
    say("the worker emitted the step's metric in CloudWatch's embedded metric format");

    // 4. The answer, read back through the stream function.
    let (woken, _) = waiting.await??;
    ensure!(!woken.is_empty(), "the long-poll woke with nothing");
    ensure!(
        woken[0]["type"] == "user_message_submitted",
        "the long-poll's first event is {}",
        woken[0]
    );
    let (all, _) = read("-1".into(), false).await?;
    let seqs: Vec<u64> = all.iter().filter_map(|e| e["seq"].as_u64()).collect();
    ensure!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1) && seqs.len() == all.len(),
        "the chat's events are not gapless and once each: {seqs:?}"
    );
    ensure!(all.len() > before.len(), "nothing was appended");
    let of_turn: Vec<&Value> = all.iter().filter(|e| e["turn_id"] == turn.as_str()).collect();
    let types: Vec<&str> = of_turn.iter().filter_map(|e| e["type"].as_str()).collect();
    ensure!(
        types.first() == Some(&"user_message_submitted") && types.last() == Some(&"agent_end"),
        "the turn's events: {types:?}"
    );
    let ends: Vec<&&Value> = of_turn.iter().filter(|e| e["type"] == "message_end").collect();
    ensure!(ends.len() == 1, "{} message_end events", ends.len());
    let text = ends[0].to_string();
    ensure!(text.contains(ANSWER), "the answer is not the script's: {text}");
    let end = of_turn.last().context("agent_end")?;
    ensure!(
        end["payload"]["reason"] == "complete" || end.to_string().contains("complete"),
        "{end}"
    );
    say(&format!(
        "read the answer back through the stream function: {} events, in order",
        all.len()
    ));

    // 5. The stream function only reads: a stream's writes go to the API function, and the
    //    stream function reads what they wrote.
    let refused = http
        .put(format!("{}/v1/stream/lambda-check/notes", stream.url()))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .send()
        .await?;
    ensure!(
        refused.status() == 405,
        "a write to the stream function answered {}",
        refused.status()
    );
    for (method, body) in [
        (reqwest::Method::PUT, None),
        (reqwest::Method::POST, Some(r#"{"note": 1}"#)),
    ] {
        let mut request = http
            .request(method.clone(), format!("{}/v1/stream/lambda-check/notes", api.url()))
            .bearer_auth(&token)
            .header("content-type", "application/json");
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await?;
        ensure!(
            response.status().is_success(),
            "{method} through the API function: {}",
            response.status()
        );
    }
    let notes = http
        .get(format!("{}/v1/stream/lambda-check/notes?offset=-1", stream.url()))
        .bearer_auth(&token)
        .send()
        .await?
        .text()
        .await?;
    ensure!(
        notes.contains(r#""note":1"#) || notes.contains(r#""note": 1"#),
        "read back {notes}"
    );
    say("the stream function refuses writes (405); the API function takes them and the stream function reads them");

    // The feed events and the audit record the functions handed over, appended by the worker:
    // each once, in order.
    for _ in 0..10 {
        let (n, failed) = deliver(worker, &http, &sqs, &aggregates, &region).await?;
        ensure!(failed.is_empty(), "the worker reported feed events failed: {failed:?}");
        if n == 0 {
            break;
        }
    }
    let body = http
        .get(format!("{}/v1/stream/workspaces/{ws}/feed?offset=-1", stream.url()))
        .bearer_auth(&token)
        .send()
        .await?
        .text()
        .await?;
    let feed: Vec<Value> = serde_json::from_str(&body).with_context(|| format!("the workspace's feed: {body}"))?;
    let kinds: Vec<&str> = feed.iter().filter_map(|e| e["type"].as_str()).collect();
    ensure!(
        kinds
            == [
                "agent.updated",
                "chat.created",
                "chat.message_added",
                "chat.processing_started",
                "chat.message_added",
                "chat.processing_finished"
            ],
        "the workspace's feed: {kinds:?}"
    );
    let ids: std::collections::HashSet<&str> = feed.iter().filter_map(|e| e["id"].as_str()).collect();
    ensure!(ids.len() == feed.len(), "feed events without ids, or twice: {feed:?}");
    let body = http
        .get(format!("{}/v1/stream/audit?offset=-1", stream.url()))
        .bearer_auth(&token)
        .send()
        .await?
        .text()
        .await?;
    let audit: Vec<Value> = serde_json::from_str(&body).with_context(|| format!("the audit stream: {body}"))?;
    ensure!(
        audit.len() == 1
            && audit[0]["type"] == "handshake"
            && audit[0]["outcome"] == "accepted"
            && audit[0]["id"].is_string(),
        "the audit stream: {audit:?}"
    );
    say(
        "the worker appended the feed events and the audit record the functions handed to the aggregates queue, once each, in order",
    );

    // 6. A CLI turn through a runner: Lambda's worker has no CLIs, so a chat with `claude` in a
    //    workspace (whose CLI agents run on runners by default here) is offered to runners; a
    //    `spool runner` process with a runner key, reaching the API only through the "CDN",
    //    takes it, runs the CLI on its machine and settles it; the worker records the reply.
    let runner_key = admin(&api_env, &["create-api-key", &org, "--capability", "runner"]).await?;
    let runner_key = runner_key["api_key"]
        .as_str()
        .context("the runner's api_key")?
        .to_owned();
    let cdn = runner::cdn(api.url(), origin.clone()).await?;
    let bin = tempfile::tempdir()?;
    runner::fake_claude(bin.path())?;
    let _runner = runner::start(&cdn, &runner_key, bin.path(), logs)?;
    let runners_ws = call(
        &http,
        api,
        &token,
        Method::POST,
        "/v1/workspaces",
        Some(json!({ "name": "Repo" })),
    )
    .await?;
    let runners_ws = runners_ws["id"].as_str().context("workspace id")?.to_owned();
    ensure!(
        call(
            &http,
            api,
            &token,
            Method::GET,
            &format!("/v1/workspaces/{runners_ws}"),
            None
        )
        .await?["cli_host"]
            == "runners",
        "a workspace on Lambda does not run its CLI agents on runners by default"
    );
    let cli_chat = call(
        &http,
        api,
        &token,
        Method::POST,
        "/v1/sessions",
        Some(json!({ "workspace_id": runners_ws })),
    )
    .await?;
    let cli_chat = cli_chat["id"].as_str().context("chat id")?.to_owned();
    call(
        &http,
        api,
        &token,
        Method::PATCH,
        &format!("/v1/sessions/{cli_chat}"),
        Some(json!({ "cli_type": "claude" })),
    )
    .await?;
    let sent = call(
        &http,
        api,
        &token,
        Method::POST,
        &format!("/v1/sessions/{cli_chat}/messages"),
        Some(json!({ "content": "hello runner" })),
    )
    .await?;
    let cli_turn = sent["turn_id"].as_str().context("turn_id")?.to_owned();
    let started = Instant::now();
    let events = loop {
        ensure!(
            started.elapsed() < CHAT_DEADLINE,
            "the runner's turn did not end in {CHAT_DEADLINE:?} (see spool-runner.log)"
        );
        for queue in [&turns, &maintenance, &aggregates] {
            let (_, failed) = deliver(worker, &http, &sqs, queue, &region).await?;
            ensure!(failed.is_empty(), "the worker reported jobs failed: {failed:?}");
        }
        let page = call(
            &http,
            api,
            &token,
            Method::GET,
            &format!("/v1/sessions/{cli_chat}/events?after=0&limit=1000"),
            None,
        )
        .await?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if events
            .iter()
            .any(|e| e["type"] == "agent_end" && e["turn_id"] == cli_turn.as_str())
        {
            break events;
        }
    };
    let of_turn: Vec<&Value> = events.iter().filter(|e| e["turn_id"] == cli_turn.as_str()).collect();
    let kind = |t: &str| of_turn.iter().filter(|e| e["type"] == t).count();
    ensure!(
        kind("message_end") == 1 && kind("agent_end") == 1,
        "the runner's turn: {of_turn:?}"
    );
    let end = of_turn.iter().find(|e| e["type"] == "agent_end").context("agent_end")?;
    ensure!(end["payload"]["reason"] == "complete", "the runner's turn ended {end}");
    let reply = of_turn
        .iter()
        .find(|e| e["type"] == "message_end")
        .context("message_end")?;
    ensure!(
        reply["payload"]["text"] == runner::ANSWER,
        "the runner's reply: {reply}"
    );
    let session = call(
        &http,
        api,
        &token,
        Method::GET,
        &format!("/v1/sessions/{cli_chat}"),
        None,
    )
    .await?;
    ensure!(
        session["title"] == "Run on a runner",
        "the CLI's action did not run: {session}"
    );
    say(
        "a spool runner took the CLI turn through the API function, and the worker recorded its reply and ran its action",
    );

    // 7. A malformed job is reported failed, never deleted as done.
    sqs.send_message()
        .queue_url(&maintenance)
        .message_body("{\"not\": \"a job\"}")
        .send()
        .await?;
    let mut reported = false;
    for _ in 0..10 {
        let (n, failed) = deliver(worker, &http, &sqs, &maintenance, &region).await?;
        if n > 0 {
            ensure!(failed.len() == n, "a malformed job was acknowledged: {failed:?} of {n}");
            reported = true;
            break;
        }
    }
    ensure!(reported, "the malformed job never came back from the queue");
    say("a malformed job is reported failed in the partial batch response");

    for queue in [&turns, &maintenance, &aggregates] {
        sqs.delete_queue().queue_url(queue).send().await?;
    }
    for arn in [&secret_arn, &origin_arn] {
        secrets
            .delete_secret()
            .secret_id(arn)
            .force_delete_without_recovery(true)
            .send()
            .await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let logs = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("lambda-check: no temporary directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut hosted = Vec::new();
    match check(&mut hosted, logs.path()).await {
        Ok(()) => {
            for function in &hosted {
                let restarts = function.restarts.load(Ordering::Relaxed);
                if restarts > 0 {
                    say(&format!(
                        "{}'s runtime was started again {restarts} times",
                        function.name
                    ));
                }
            }
            say("passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("lambda-check: FAILED: {e:#}");
            hosted.iter().for_each(Hosted::print_logs);
            if hosted.is_empty() {
                bail_hint();
            }
            ExitCode::FAILURE
        }
    }
}

fn bail_hint() {
    println!(
        "lambda-check: start the emulator (make emulator-up) and build the functions (cargo build --workspace --all-features --bins)"
    );
}
