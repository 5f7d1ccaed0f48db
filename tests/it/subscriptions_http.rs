//! The protocol's subscriptions over HTTP, beyond what the conformance suite checks: webhooks
//! signed with the key the JWKS publishes, retried after a failure with the same wake, fenced
//! once done, woken again by the next append; organizations that cannot see or wake each
//! other's subscriptions; a wake opened by a process that crashed before delivering it is
//! delivered after a restart; a pull-wake lease that runs out fences its holder; and webhook
//! names that resolve to private addresses are never called.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use reqwest::Method;
use serde_json::{Value, json};
use spool_auth::{Claims, TokenKeys, WebhookKeys};
use spool_embedded::LocalJobs;
use spool_log::{
    clock::SystemClock,
    error::Error,
    jobs::{Deferred, MaintenanceJob},
    limits::LiveSettings,
    subscription::{Outbound, SubscriptionJob, SubscriptionStore, service::Subscriptions, spec::UrlPolicy},
};
use spool_tests::{Harness, unique_id};

const SECRET: &[u8] = b"the subscription test's signing secret";
const DEV: UrlPolicy = UrlPolicy { loopback_http: true };

/// A webhook receiver on loopback: it records each request (headers, body) and answers with
/// the next scripted status (200 once the script runs out) and `{}`.
#[derive(Clone, Default)]
pub(crate) struct Receiver {
    seen: Arc<Mutex<Vec<(HeaderMap, Value, String)>>>,
    script: Arc<Mutex<Vec<u16>>>,
}

impl Receiver {
    pub(crate) async fn start(script: &[u16]) -> (Self, String) {
        async fn hook(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
            let raw = String::from_utf8(body.to_vec()).unwrap();
            let json: Value = serde_json::from_str(&raw).unwrap();
            receiver.seen.lock().unwrap().push((headers, json, raw));
            let mut script = receiver.script.lock().unwrap();
            let status = if script.is_empty() { 200 } else { script.remove(0) };
            (StatusCode::from_u16(status).unwrap(), "{}")
        }
        let receiver = Self {
            seen: Arc::default(),
            script: Arc::new(Mutex::new(script.to_vec())),
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(receiver.clone());
        let base = spool_tests::serve_on_loopback(app).await;
        (receiver, format!("{base}/hook"))
    }

    pub(crate) fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The headers of request `i` (from 0).
    pub(crate) fn headers(&self, i: usize) -> HeaderMap {
        self.seen.lock().unwrap()[i].0.clone()
    }

    /// The raw body of request `i` (from 0).
    pub(crate) fn raw(&self, i: usize) -> String {
        self.seen.lock().unwrap()[i].2.clone()
    }

    /// Waits (at most 10 s) for request number `n` (from 1) and returns its body, raw body and
    /// signature header.
    pub(crate) async fn nth(&self, n: usize) -> (Value, String, String) {
        for _ in 0..200 {
            if let Some((headers, json, raw)) = self.seen.lock().unwrap().get(n - 1) {
                let signature = headers["webhook-signature"].to_str().unwrap().to_owned();
                return (json.clone(), raw.clone(), signature);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the webhook never got request {n}");
    }
}

/// Checks a `Webhook-Signature` (`t=…,kid=…,ed25519=…`) over `t.raw` with the JWKS's key.
fn verifies(jwks: &Value, raw: &str, signature: &str) -> bool {
    let parts: Vec<(&str, &str)> = signature.split(',').filter_map(|p| p.split_once('=')).collect();
    let get = |name: &str| parts.iter().find(|(k, _)| *k == name).map(|(_, v)| *v).unwrap();
    let key = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == get("kid"))
        .expect("the signature names a key of the JWKS");
    let public = B64.decode(key["x"].as_str().unwrap()).unwrap();
    let signed = format!("{}.{raw}", get("t"));
    aws_lc_rs::signature::UnparsedPublicKey::new(&aws_lc_rs::signature::ED25519, public)
        .verify(signed.as_bytes(), &B64.decode(get("ed25519")).unwrap())
        .is_ok()
}

/// Jobs go nowhere: a process that crashed right after opening a wake.
struct Crashed;

#[async_trait]
impl Deferred for Crashed {
    async fn defer(&self, _: MaintenanceJob, _: Duration) -> Result<(), Error> {
        Ok(())
    }
}

/// The subscription service over the harness's stores, with jobs run in this process.
fn service<H: Harness>(log: &H::Log, store: Arc<dyn SubscriptionStore>, scheduler: Arc<dyn Deferred>) -> Subscriptions {
    Subscriptions::new(
        store,
        Arc::new(log.clone()),
        scheduler,
        Arc::new(WebhookKeys::derive(SECRET).unwrap()),
        Arc::new(SystemClock),
        DEV,
    )
    .with_outbound(Arc::new(spool_worker::Webhooks::new(DEV).unwrap()))
}

fn local_wakes(service_of: impl FnOnce(Arc<dyn Deferred>) -> Subscriptions) -> (Arc<Subscriptions>, LocalJobs) {
    let (jobs, queue) = LocalJobs::new();
    let service = Arc::new(service_of(Arc::new(jobs.clone())));
    let runner = service.clone();
    tokio::spawn(LocalJobs::run(queue, move |job| {
        let service = runner.clone();
        async move {
            match job {
                MaintenanceJob::Subscription(job) => service.run(&job).await.map_err(|e| e.to_string()),
                other => Err(format!("not a subscription job: {other:?}")),
            }
        }
    }));
    (service, jobs)
}

/// Serves the stream routes with `service`: (base URL, a token for each of two organizations).
async fn serve<H: Harness>(log: &H::Log, service: Arc<Subscriptions>) -> (String, [(String, String); 2]) {
    let keys = TokenKeys::new(SECRET).unwrap();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let token = |org: &str| keys.issue(&Claims::new("tester", org, now)).unwrap();
    let orgs = [unique_id("org"), unique_id("org")];
    let tokens = [(orgs[0].clone(), token(&orgs[0])), (orgs[1].clone(), token(&orgs[1]))];
    let api = spool_stream::StreamApi::new(
        Arc::new(log.clone()),
        spool_stream::Access::Tokens(Box::new(keys.clone())),
        LiveSettings::default(),
    )
    .with_subscriptions(service);
    let base = spool_tests::serve_on_loopback(spool_stream::router(api, 1 << 20)).await;
    (base, tokens)
}

async fn call(http: &reqwest::Client, method: Method, url: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = http.request(method, url).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn append(http: &reqwest::Client, base: &str, token: &str, path: &str, create: bool) {
    let method = if create { Method::PUT } else { Method::POST };
    let response = http
        .request(method, format!("{base}/v1/stream/{path}"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{path}: {}", response.status());
}

/// A served Spool with subscriptions whose jobs run in this process, and a subscription URL
/// (`{prefix}-…`) to use.
struct Served {
    base: String,
    /// A token of the organization the tests act for, and one of another.
    token: String,
    other: String,
    http: reqwest::Client,
    id: String,
    sub: String,
}

async fn served<H: Harness>(harness: &H, prefix: &str) -> Served {
    let log = harness.instance().await;
    let store: Arc<dyn SubscriptionStore> = Arc::new(harness.metadata().await);
    let (service, _jobs) = local_wakes(|scheduler| service::<H>(&log, store.clone(), scheduler));
    let (base, [(_, token), (_, other)]) = serve::<H>(&log, service).await;
    let id = unique_id(prefix);
    let sub = format!("{base}/v1/stream/__ds/subscriptions/{id}");
    Served {
        base,
        token,
        other,
        http: reqwest::Client::new(),
        id,
        sub,
    }
}

pub(crate) async fn webhooks_are_signed_retried_fenced_and_woken_again<H: Harness>(harness: &H) {
    // GIVEN a webhook subscription whose receiver fails its first request
    let Served {
        base,
        token,
        other,
        http,
        id,
        sub,
    } = served(harness, "sub").await;
    let (receiver, hook) = Receiver::start(&[500]).await;
    let config = json!({"type": "webhook", "pattern": "events/*", "webhook": {"url": hook}, "lease_ttl_ms": 60_000});
    let (status, created) = call(&http, Method::PUT, &sub, &token, Some(config.clone())).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["webhook"]["signing"]["jwks_url"],
        format!("{base}/v1/stream/__ds/jwks.json")
    );
    let jwks: Value = http
        .get(format!("{base}/v1/stream/__ds/jwks.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut other_config = config.clone();
    other_config["description"] = json!("another");
    assert_eq!(call(&http, Method::PUT, &sub, &token, Some(other_config)).await.0, 409);

    // WHEN a matching stream is created with a message
    append(&http, &base, &token, "events/a", true).await;

    // THEN the wake is posted, signed; the 500 is retried with the same wake
    let (first, raw, signature) = receiver.nth(1).await;
    let (again, raw_again, signature_again) = receiver.nth(2).await;
    assert!(verifies(&jwks, &raw, &signature));
    assert!(verifies(&jwks, &raw_again, &signature_again));
    assert!(!verifies(&jwks, &raw.replace("events/a", "events/b"), &signature));
    assert_eq!(first["generation"], 1);
    assert_eq!(again["wake_id"], first["wake_id"]);
    assert_eq!(again["subscription_id"], id.as_str());
    let stream = &again["streams"][0];
    assert_eq!(
        (stream["path"].as_str(), stream["has_pending"].as_bool()),
        (Some("events/a"), Some(true))
    );
    assert_eq!(stream["acked_offset"], "0000000000000000_0000000000000000");

    // AND another organization can neither see the subscription nor wake it
    let (status, body) = call(&http, Method::GET, &sub, &other, None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("SUBSCRIPTION_NOT_FOUND"))
    );
    append(&http, &base, &other, "events/a", true).await;

    // AND the callback acks the tail and ends the wake; the same callback again is fenced
    let callback = again["callback_url"].as_str().unwrap().to_owned();
    let callback_token = again["callback_token"].as_str().unwrap().to_owned();
    let done = json!({
        "wake_id": again["wake_id"], "generation": 1, "done": true,
        "acks": [{"stream": "events/a", "offset": stream["tail_offset"]}],
    });
    let (status, body) = call(&http, Method::POST, &callback, &callback_token, Some(done.clone())).await;
    assert_eq!((status, body), (200, json!({"ok": true, "next_wake": false})));
    let (status, body) = call(&http, Method::POST, &callback, &callback_token, Some(done.clone())).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("FENCED")));
    let forged = callback_token.replace(".1.", ".2.");
    let (status, body) = call(&http, Method::POST, &callback, &forged, Some(done)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (401, Some("TOKEN_INVALID")));
    let (_, view) = call(&http, Method::GET, &sub, &token, None).await;
    assert_eq!(view["streams"][0]["acked_offset"], stream["tail_offset"]);
    assert_eq!(receiver.count(), 2, "the other organization's append woke nobody");

    // WHEN the stream moves again THEN the next generation wakes, from the acked offset
    append(&http, &base, &token, "events/a", false).await;
    let (third, _, _) = receiver.nth(3).await;
    assert_eq!(third["generation"], 2);
    assert_ne!(third["wake_id"], first["wake_id"]);
    assert_eq!(third["streams"][0]["acked_offset"], stream["tail_offset"]);

    // AND a deleted subscription's wake cannot be acked
    assert_eq!(call(&http, Method::DELETE, &sub, &token, None).await.0, 204);
    let late = json!({"wake_id": third["wake_id"], "generation": 2, "done": true});
    let late_token = third["callback_token"].as_str().unwrap();
    let (status, _) = call(&http, Method::POST, &callback, late_token, Some(late)).await;
    assert_eq!(status, 404);
}

pub(crate) async fn a_wake_a_crash_left_undelivered_is_delivered_after_a_restart<H: Harness>(harness: &H) {
    // GIVEN a process that opened a wake and crashed before delivering it
    let log = harness.instance().await;
    let store: Arc<dyn SubscriptionStore> = Arc::new(harness.metadata().await);
    let crashed = Arc::new(service::<H>(&log, store.clone(), Arc::new(Crashed)));
    let (base, [(org, token), _]) = serve::<H>(&log, crashed).await;
    let (receiver, hook) = Receiver::start(&[]).await;
    let http = reqwest::Client::new();
    let id = unique_id("sub");
    let sub = format!("{base}/v1/stream/__ds/subscriptions/{id}");
    let config = json!({"type": "webhook", "streams": ["jobs/1"], "webhook": {"url": hook}});
    assert_eq!(call(&http, Method::PUT, &sub, &token, Some(config)).await.0, 201);
    append(&http, &base, &token, "jobs/1", true).await;
    let stored = store.get(&org, &id).await.unwrap().unwrap().record;
    assert!(stored.wake.is_some(), "the wake is open");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.count(), 0);

    // WHEN a new process starts over the same store and schedules its open wakes again
    let (_, wakes) = local_wakes(|scheduler| service::<H>(&log, store.clone(), scheduler));
    let job = |kind| {
        MaintenanceJob::Subscription(SubscriptionJob {
            org: org.clone(),
            id: id.clone(),
            generation: stored.generation,
            kind,
            attempt: stored.failures,
        })
    };
    use spool_log::subscription::JobKind;
    // (What `LocalJobs::recover` does for every open wake it finds in the embedded store.)
    wakes.defer(job(JobKind::Deliver), Duration::ZERO).await.unwrap();
    wakes.defer(job(JobKind::Expire), Duration::ZERO).await.unwrap();

    // THEN the wake is delivered, once
    let (body, _, _) = receiver.nth(1).await;
    assert_eq!(body["generation"], 1);
    assert_eq!(body["streams"][0]["path"], "jobs/1");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.count(), 1);
}

pub(crate) async fn a_pull_wake_lease_that_runs_out_fences_its_holder<H: Harness>(harness: &H) {
    // GIVEN a pull-wake subscription with a one-second lease, and a worker that claimed its work
    let Served {
        base,
        token,
        http,
        id,
        sub,
        ..
    } = served(harness, "pull").await;
    append(&http, &base, &token, "wake/pool", true).await;
    let config = json!({"type": "pull-wake", "pattern": "tasks/*", "wake_stream": "wake/pool", "lease_ttl_ms": 1000});
    assert_eq!(call(&http, Method::PUT, &sub, &token, Some(config)).await.0, 201);
    let (status, body) = call(
        &http,
        Method::POST,
        &format!("{sub}/claim"),
        &token,
        Some(json!({"worker": "w1"})),
    )
    .await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("NO_PENDING_WORK")));
    append(&http, &base, &token, "tasks/1", true).await;
    let (status, first) = call(
        &http,
        Method::POST,
        &format!("{sub}/claim"),
        &token,
        Some(json!({"worker": "w1"})),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let (status, busy) = call(
        &http,
        Method::POST,
        &format!("{sub}/claim"),
        &token,
        Some(json!({"worker": "w2"})),
    )
    .await;
    assert_eq!((status, busy["error"]["current_holder"].as_str()), (409, Some("w1")));

    // WHEN w1 goes quiet past its lease THEN w2 claims the next generation
    let mut second = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (status, body) = call(
            &http,
            Method::POST,
            &format!("{sub}/claim"),
            &token,
            Some(json!({"worker": "w2"})),
        )
        .await;
        if status == 200 {
            second = body;
            break;
        }
    }
    assert!(second["generation"].as_u64() > first["generation"].as_u64(), "{second}");

    // AND w1's ack is fenced, w2's is taken
    let ack = |claimed: &Value| {
        json!({
            "wake_id": claimed["wake_id"], "generation": claimed["generation"], "done": true,
            "acks": [{"stream": "tasks/1", "offset": claimed["streams"][0]["tail_offset"]}],
        })
    };
    let url = format!("{sub}/ack");
    let (status, body) = call(
        &http,
        Method::POST,
        &url,
        first["token"].as_str().unwrap(),
        Some(ack(&first)),
    )
    .await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("FENCED")));
    let (status, body) = call(
        &http,
        Method::POST,
        &url,
        second["token"].as_str().unwrap(),
        Some(ack(&second)),
    )
    .await;
    assert_eq!((status, body), (200, json!({"ok": true, "next_wake": false})));

    // AND the wake stream told workers of each wake
    let events: Value = http
        .get(format!("{base}/v1/stream/wake/pool"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let events = events.as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["subscription_id"] == id.as_str() && e["stream"] == "tasks/1"),
        "{events:?}"
    );
}

pub(crate) async fn a_wake_stream_made_late_still_hears_of_the_wake<H: Harness>(harness: &H) {
    // GIVEN a pull-wake subscription whose wake stream does not exist yet, and work pending
    let Served {
        base,
        token,
        http,
        id,
        sub,
        ..
    } = served(harness, "late").await;
    let config = json!({"type": "pull-wake", "streams": ["jobs/late"], "wake_stream": "wake/late"});
    assert_eq!(call(&http, Method::PUT, &sub, &token, Some(config)).await.0, 201);
    append(&http, &base, &token, "jobs/late", true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // WHEN the application makes the wake stream after the wake
    append(&http, &base, &token, "wake/late", true).await;

    // THEN the wake event is written to it (the delivery is tried again, not given up)
    let mut found = false;
    for _ in 0..100 {
        let events: Value = http
            .get(format!("{base}/v1/stream/wake/late"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["subscription_id"] == id.as_str())
        {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "no wake event reached the late wake stream");
    let (_, view) = call(&http, Method::GET, &sub, &token, None).await;
    assert_eq!(view["status"], "active", "{view}");
}

on_both_backends!(subscriptions_http:
    webhooks_are_signed_retried_fenced_and_woken_again,
    a_wake_a_crash_left_undelivered_is_delivered_after_a_restart,
    a_pull_wake_lease_that_runs_out_fences_its_holder,
    a_wake_stream_made_late_still_hears_of_the_wake,
);

/// The embedded store finds the open wakes a restart must schedule again.
#[tokio::test]
async fn the_embedded_store_lists_open_wakes() {
    let harness = spool_tests::EmbeddedHarness::new();
    let metadata = harness.metadata().await;
    let spec =
        spool_log::subscription::spec::Spec::parse(br#"{"type":"pull-wake","streams":["a"],"wake_stream":"w"}"#, DEV)
            .unwrap();
    let mut open = spool_log::subscription::record::Subscription::new("open".into(), spec.clone(), "/".into(), 0);
    open.open_wake(0);
    let idle = spool_log::subscription::record::Subscription::new("idle".into(), spec, "/".into(), 0);
    for record in [&open, &idle] {
        assert!(metadata.save("o", record, None).await.unwrap());
    }
    assert!(!metadata.save("o", &idle, None).await.unwrap(), "it exists");
    assert!(
        !metadata.save("o", &idle, Some(7)).await.unwrap(),
        "not at that version"
    );
    let found = metadata.interrupted_jobs().await.unwrap();
    use spool_log::subscription::JobKind;
    let ids: Vec<(String, JobKind)> = found
        .iter()
        .map(|job| match job {
            MaintenanceJob::Subscription(job) => (job.id.clone(), job.kind),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        ids,
        [
            ("open".to_owned(), JobKind::Deliver),
            ("open".to_owned(), JobKind::Expire)
        ]
    );
    let (jobs, _queue) = LocalJobs::new();
    assert_eq!(jobs.recover(&metadata).await.unwrap(), 2);
}

/// Webhooks reach the public internet only, and plain http only a developer's own machine.
/// (That a name resolving to a private address is not connected to is the resolver's unit
/// test, in spool-worker: no name here resolves to one without a DNS server.)
#[tokio::test]
async fn webhooks_never_reach_private_addresses() {
    let prod = spool_worker::Webhooks::new(UrlPolicy { loopback_http: false }).unwrap();
    let (receiver, hook) = Receiver::start(&[]).await;
    let body = || b"{}".to_vec();
    let refused = prod.post("https://localhost/hook", &[], body()).await.unwrap_err();
    assert!(refused.contains("this machine"), "{refused}");
    assert!(prod.post(&hook, &[], body()).await.is_err(), "http to loopback on AWS");
    assert!(prod.post("https://169.254.169.254/latest", &[], body()).await.is_err());
    let dev = spool_worker::Webhooks::new(DEV).unwrap();
    assert_eq!(dev.post(&hook, &[], body()).await.unwrap().status, 200);
    let localhost = hook.replace("127.0.0.1", "localhost");
    assert_eq!(dev.post(&localhost, &[], body()).await.unwrap().status, 200);
    assert_eq!(receiver.count(), 2);
}
