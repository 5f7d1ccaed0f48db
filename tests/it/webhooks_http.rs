//! Chat webhooks over HTTP on both backends, with the worker running turns: an endpoint hears
//! `turn.completed`, `turn.failed`, `input.required` and `task.created`, each signed with its
//! secret as Standard Webhooks has it (`tests/frontends` verifies them with the reference
//! library); a failed attempt is retried with the same `webhook-id`; a turned-off endpoint gets
//! nothing; an event handed over twice is one delivery; every attempt is in the API.

use std::{sync::Arc, time::Duration};

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::webhook::{HookStore, service::ChatHooks};
use spool_log::{aggregate::stamp, clock::SystemClock};
use spool_tests::Harness;

use crate::{
    subscriptions_http::Receiver,
    support::{Api, chat_with, send, stack, until},
};

const SCRIPT: &str = r#"{"word_delay_ms": 0, "rules": [
  {"match": ["color"], "rounds": [
    {"say": "One question.", "tools": [{"name": "ask_user", "arguments": {"question": "Which color?"}}]},
    {"say": "You chose {result}."}]},
  {"match": ["break"], "rounds": [{"fail": "the model is down"}]}],
  "default": [{"say": "Hello."}]}"#;

/// The receiver's request `n` (from 1): its body, and its `webhook-id`, `-timestamp` and
/// `-signature`.
async fn request(receiver: &Receiver, n: usize) -> (Value, [String; 3]) {
    let (body, _, _) = receiver.nth(n).await;
    let headers = receiver.headers(n - 1);
    let header = |name: &str| headers[name].to_str().unwrap().to_owned();
    (
        body,
        [
            header("webhook-id"),
            header("webhook-timestamp"),
            header("webhook-signature"),
        ],
    )
}

async fn hook(api: &Api, ws: &str, url: &str, extra: Value) -> Value {
    let mut body = json!({ "url": url });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (status, hook) = api
        .call(Method::POST, &format!("/v1/workspaces/{ws}/webhooks"), Some(body))
        .await;
    assert_eq!(status, 201, "{hook}");
    hook
}

pub(crate) async fn webhooks_tell_of_turns_questions_and_tasks<H: Harness>(harness: &H) {
    // GIVEN a workspace with an endpoint for everything, a turned-off one, and one for tasks
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = chat_with(api, serde_json::from_str(SCRIPT).unwrap()).await;
    let (receiver, url) = Receiver::start(&[]).await;
    let (off_receiver, off_url) = Receiver::start(&[]).await;
    let (task_receiver, task_url) = Receiver::start(&[]).await;
    let everything = hook(api, &ws, &url, json!({})).await;
    assert!(everything["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_eq!(
        everything["events"],
        json!(["turn.completed", "turn.failed", "input.required", "task.created"])
    );
    let off = hook(api, &ws, &off_url, json!({ "enabled": false })).await;
    hook(api, &ws, &task_url, json!({ "events": ["task.created"] })).await;
    let listed = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/webhooks"), None)
        .await;
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 3);
    assert!(listed["webhooks"][0].get("secret").is_none(), "a secret is shown once");

    // WHEN a turn completes, one waits on a question, one fails, and a task is made
    let turn = send(api, &chat, "hi").await;
    until(api, &chat, &turn, "agent_end").await;
    let (completed, [id, timestamp, signature]) = request(&receiver, 1).await;
    let turn = send(api, &chat, "pick a color").await;
    until(api, &chat, &turn, "ask_question").await;
    let (asked, _) = request(&receiver, 2).await;
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/question"),
        Some(json!({ "question_id": asked["data"]["request_id"], "answer": "blue" })),
    )
    .await;
    let (answered, _) = request(&receiver, 3).await;
    let turn = send(api, &chat, "break it").await;
    until(api, &chat, &turn, "agent_end").await;
    let (failed, _) = request(&receiver, 4).await;
    api.ok(
        Method::POST,
        &format!("/v1/workspaces/{ws}/tasks"),
        Some(json!({ "title": "Paint the shed" })),
    )
    .await;
    let (task, _) = request(&receiver, 5).await;

    // THEN each is one signed delivery, in order
    assert_eq!(completed["type"], "turn.completed");
    assert_eq!(completed["data"]["chat_id"], chat.as_str());
    assert_eq!(completed["data"]["workspace_id"], ws.as_str());
    assert_eq!(completed["data"]["reason"], "complete");
    assert!(id.starts_with("msg_"));
    let raw = receiver.raw(0);
    let expected = spool_chat::webhook::service::sign(
        everything["secret"].as_str().unwrap(),
        &id,
        timestamp.parse().unwrap(),
        &raw,
    )
    .unwrap();
    assert_eq!(signature, expected);
    assert_eq!(asked["type"], "input.required");
    assert_eq!(asked["data"]["kind"], "question");
    assert_eq!(asked["data"]["summary"], "Which color?");
    assert_eq!(answered["type"], "turn.completed");
    assert_eq!(failed["type"], "turn.failed");
    assert_eq!(failed["data"]["reason"], "error");
    assert_eq!(task["type"], "task.created");
    assert_eq!(task["data"]["summary"], "Paint the shed");
    let (only_task, _) = request(&task_receiver, 1).await;
    assert_eq!(only_task["type"], "task.created");

    // AND every attempt is shown; the turned-off endpoint got nothing
    let deliveries = api
        .ok(
            Method::GET,
            &format!("/v1/webhooks/{}/deliveries", everything["id"].as_str().unwrap()),
            None,
        )
        .await;
    let deliveries = deliveries["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 5);
    assert_eq!(deliveries[0]["event"], "task.created", "newest first");
    for delivery in deliveries {
        assert_eq!(delivery["state"], "delivered", "{delivery}");
        assert_eq!(delivery["attempts"][0]["status"], 200);
    }
    let ids: std::collections::BTreeSet<&str> = deliveries.iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 5, "one id per event");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(off_receiver.count(), 0);
    assert_eq!(receiver.count(), 5);
    let off_deliveries = api
        .ok(
            Method::GET,
            &format!("/v1/webhooks/{}/deliveries", off["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(off_deliveries["deliveries"], json!([]));

    // AND another organization sees none of it
    let (status, _) = stack
        .other
        .call(
            Method::GET,
            &format!("/v1/webhooks/{}", everything["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, 404);

    // AND deleting the workspace deletes its endpoints
    api.ok(Method::DELETE, &format!("/v1/workspaces/{ws}"), None).await;
    let (status, _) = api
        .call(
            Method::GET,
            &format!("/v1/webhooks/{}", everything["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, 404);
}

pub(crate) async fn a_failed_attempt_is_retried_with_the_same_id<H: Harness>(harness: &H) {
    // GIVEN an endpoint that answers its first request with a 500
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, _) = chat_with(api, serde_json::from_str(SCRIPT).unwrap()).await;
    let (receiver, url) = Receiver::start(&[500]).await;
    let made = hook(api, &ws, &url, json!({ "events": ["task.created"] })).await;

    // WHEN a task is made
    api.ok(
        Method::POST,
        &format!("/v1/workspaces/{ws}/tasks"),
        Some(json!({ "title": "Retry me" })),
    )
    .await;

    // THEN the delivery is tried again (5 s later), with the same id and body
    let (first, [first_id, ..]) = request(&receiver, 1).await;
    let (again, [again_id, ..]) = request(&receiver, 2).await;
    assert_eq!(first_id, again_id);
    assert_eq!(first, again);
    let deliveries = api
        .ok(
            Method::GET,
            &format!("/v1/webhooks/{}/deliveries", made["id"].as_str().unwrap()),
            None,
        )
        .await;
    let delivery = &deliveries["deliveries"][0];
    assert_eq!(delivery["state"], "delivered");
    let statuses: Vec<&Value> = delivery["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["status"])
        .collect();
    assert_eq!(statuses, [&json!(500), &json!(200)]);
}

pub(crate) async fn an_event_handed_over_twice_is_one_delivery<H: Harness>(harness: &H) {
    // GIVEN an endpoint of a workspace
    let metadata = harness.metadata().await;
    let store: Arc<dyn HookStore> = Arc::new(metadata.clone());
    let (jobs, queue) = spool_embedded::LocalJobs::new();
    let urls = crate::support::DEV_URLS;
    let hooks = Arc::new(
        ChatHooks::new(store.clone(), Arc::new(jobs.clone()), Arc::new(SystemClock), urls)
            .with_outbound(Arc::new(spool_worker::Webhooks::new(urls).unwrap())),
    );
    let runner = hooks.clone();
    tokio::spawn(spool_embedded::LocalJobs::run(queue, move |job| {
        let hooks = runner.clone();
        async move {
            match job {
                spool_log::jobs::MaintenanceJob::Webhook {
                    org,
                    hook_id,
                    delivery_id,
                    attempt,
                } => hooks
                    .deliver(&org, &hook_id, &delivery_id, attempt)
                    .await
                    .map_err(|e| e.to_string()),
                other => Err(format!("{other:?}")),
            }
        }
    }));
    let (receiver, url) = Receiver::start(&[]).await;
    let org = spool_tests::unique_id("org");
    let hook = spool_chat::webhook::Hook {
        id: spool_tests::unique_id("wh"),
        workspace_id: "ws_1".to_owned(),
        url,
        events: spool_chat::webhook::HookEvent::ALL.to_vec(),
        enabled: true,
        description: None,
        secret: spool_auth::standard_webhook_secret().unwrap(),
        created_ms: 1,
    };
    store.create_hook(&org, &hook).await.unwrap();

    // WHEN one feed event is handed over twice (a feed batch delivered again), with another
    // the hook does not hear of
    let path = spool_chat::manage::feed_path(&org, "ws_1").unwrap();
    let mut event = json!({
        "type": "task.created", "task_id": "task_1", "summary": "Once", "chat_id": null,
        "workspace_id": "ws_1", "actor": "p", "ts": "2026-11-25T10:00:00Z",
    });
    stamp(&mut event).unwrap();
    let created =
        json!({"type": "chat.created", "id": "ev_x", "chat_id": "c", "chat_title": "t", "workspace_id": "ws_1"});
    hooks.appended(&path, &[event.clone(), created]).await.unwrap();
    hooks.appended(&path, &[event]).await.unwrap();

    // THEN the endpoint gets it once
    receiver.nth(1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.count(), 1);
    assert_eq!(store.deliveries(&org, &hook.id, 10).await.unwrap().len(), 1);
}

on_both_backends!(webhooks_http:
    webhooks_tell_of_turns_questions_and_tasks,
    a_failed_attempt_is_retried_with_the_same_id,
    an_event_handed_over_twice_is_one_delivery,
);

/// The IPv6 forms of loopback and of the metadata service's address in the trust review: an
/// IPv4-translated loopback, an IPv4-translated `169.254.169.254`, and a Teredo address whose
/// server is `0.0.0.0` and whose client is `127.0.0.1`.
const EMBEDDED_PRIVATE_URLS: [&str; 3] = [
    "https://[::ffff:0:127.0.0.1]/",
    "https://[::ffff:0:a9fe:a9fe]/",
    "https://[2001::8000:ffff:80ff:fffe]/",
];

/// Neither a chat webhook nor a subscription can be aimed at a private address written as an
/// IPv6 literal, and a webhook's request never goes to one.
#[tokio::test]
async fn webhooks_to_ipv6_forms_of_private_addresses_are_refused() {
    // GIVEN a served Spool and a workspace
    let harness = spool_tests::EmbeddedHarness::new();
    let (api, _, _) = crate::support::setup(&harness).await;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({"name": "Hooks"})))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for (n, url) in EMBEDDED_PRIVATE_URLS.into_iter().enumerate() {
        // WHEN a chat webhook and a subscription are made with the URL
        let (hook, hook_body) = api
            .call(
                Method::POST,
                &format!("/v1/workspaces/{ws}/webhooks"),
                Some(json!({ "url": url })),
            )
            .await;
        let (sub, sub_body) = api
            .call(
                Method::PUT,
                &format!("/v1/stream/__ds/subscriptions/ipv6-{n}"),
                Some(json!({"type": "webhook", "pattern": "x/*", "webhook": {"url": url}})),
            )
            .await;

        // THEN both are refused as a URL off the public internet
        assert_eq!(hook, 400, "{url}: {hook_body}");
        assert_eq!(hook_body["error"]["code"], "WEBHOOK_URL_REJECTED", "{url}");
        assert_eq!(sub, 400, "{url}: {sub_body}");
        assert_eq!(sub_body["error"]["code"], "WEBHOOK_URL_REJECTED", "{url}");
    }
    // AND the client that makes webhooks' requests refuses them, on a developer's machine too
    for loopback_http in [false, true] {
        let outbound = spool_worker::Webhooks::new(spool_log::subscription::spec::UrlPolicy { loopback_http }).unwrap();
        for url in EMBEDDED_PRIVATE_URLS {
            let refused = spool_log::subscription::Outbound::post(&outbound, url, &[], b"{}".to_vec())
                .await
                .unwrap_err();
            assert!(refused.contains("public internet"), "{url}: {refused}");
        }
    }
}
