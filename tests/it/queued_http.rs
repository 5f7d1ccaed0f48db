//! A turn that waits for its organization's bound on turns running at once says how many turns
//! are ahead of it (`queued_behind` on its turn record, which the UI shows as "Queued behind N
//! turns"), fewer as they finish, and nothing once it runs: the third source design puts no
//! limit on chats processed at once, and what the bound holds back is shown, not hidden.

use std::{sync::Arc, time::Duration};

use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::Runtimes;
use spool_tests::Harness;

use crate::{
    agents_http::Slow,
    support::{Api, serve, setup_on, stack_polling, test_poll, test_settings, until},
};

async fn turn(api: &Api, chat: &str, turn: &str) -> Value {
    api.ok(Method::GET, &format!("/v1/sessions/{chat}/turns/{turn}"), None)
        .await
}

async fn post(api: &Api, chat: &str) -> String {
    let sent = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": "think it over" })),
        )
        .await;
    sent["turn_id"].as_str().unwrap().to_owned()
}

/// With one turn of an organization at a time, a second chat's turn reports one turn ahead and
/// a third's two; as the first ends, the second runs (and reports nothing) and the third moves
/// up to one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_held_by_its_organizations_bound_says_how_many_are_ahead_and_then_runs() {
    let harness = spool_tests::EmbeddedHarness::new();
    let poll = spool_worker::PollSettings {
        concurrency: 4,
        per_org: 1,
        ..test_poll()
    };
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runtimes = Runtimes::scripted_only().with_openai(Arc::new(Slow(asked, Some(Duration::from_millis(1500)))));
    let stack = stack_polling(&harness, runtimes, test_settings(), poll).await;
    let api = &stack.api;
    let mut chats = Vec::new();
    for _ in 0..3 {
        let chat = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
        chats.push(chat["id"].as_str().unwrap().to_owned());
    }
    // GIVEN the organization's one slot taken by the first chat's turn
    let first = post(api, &chats[0]).await;
    until(api, &chats[0], &first, "agent_start").await;
    // WHEN two more chats of the organization ask
    let second = post(api, &chats[1]).await;
    let third = post(api, &chats[2]).await;
    // THEN each is queued, behind one turn and behind two
    let view = turn(api, &chats[1], &second).await;
    assert_eq!(
        (view["status"].clone(), view["queued_behind"].clone()),
        (json!("queued"), json!(1)),
        "{view}"
    );
    let view = turn(api, &chats[2], &third).await;
    assert_eq!(
        (view["status"].clone(), view["queued_behind"].clone()),
        (json!("queued"), json!(2)),
        "{view}"
    );
    let listed = api
        .ok(Method::GET, &format!("/v1/sessions/{}/turns", chats[2]), None)
        .await;
    assert_eq!(listed["turns"][0]["queued_behind"], 2, "{listed}");
    // AND another organization's turn is held by nothing of the first's
    let theirs = stack.other.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let theirs = theirs["id"].as_str().unwrap().to_owned();
    let their_turn = post(&stack.other, &theirs).await;
    until(&stack.other, &theirs, &their_turn, "agent_start").await;
    // WHEN the first turn ends
    let events = until(api, &chats[1], &second, "agent_start").await;
    // THEN the second runs, with nothing ahead of it, and the third is next
    assert!(events.iter().any(|e| e["type"] == "agent_start"));
    let view = turn(api, &chats[1], &second).await;
    assert_eq!(view["status"], "in_progress", "{view}");
    assert!(view.get("queued_behind").is_none(), "{view}");
    let view = turn(api, &chats[2], &third).await;
    assert_eq!(
        (view["status"].clone(), view["queued_behind"].clone()),
        (json!("queued"), json!(1)),
        "{view}"
    );
    until(api, &chats[2], &third, "agent_end").await;
}

/// A queued turn that nothing holds back: next on the embedded queue (`0` ahead); on AWS, where
/// the turns queue has no per-organization bound, the record carries no `queued_behind`.
async fn a_queued_turn_with_nothing_ahead<H: Harness>(harness: &H, expected: Option<u64>) {
    let log: Arc<dyn spool_log::port::StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn spool_chat::metadata::Metadata> = Arc::new(harness.metadata().await);
    let base = serve(log, metadata.clone(), harness.turns().await, harness.files().await).await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let chat = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    // GIVEN a message and no worker running
    let id = post(&api, &chat).await;
    // THEN its turn is queued, with what holds it as the backend's queue counts it
    let view = turn(&api, &chat, &id).await;
    assert_eq!(view["status"], "queued", "{view}");
    assert_eq!(view.get("queued_behind").and_then(Value::as_u64), expected, "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_a_queued_turn_with_nothing_ahead_is_next() {
    a_queued_turn_with_nothing_ahead(&spool_tests::EmbeddedHarness::new(), Some(0)).await;
}

#[cfg(feature = "emulator")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn aws_a_queued_turn_carries_no_place_where_no_bound_holds_it() {
    a_queued_turn_with_nothing_ahead(&spool_tests::AwsHarness::new(), None).await;
}
