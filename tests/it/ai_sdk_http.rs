//! The AI SDK's routes on AWS's shape: the stream function, read-only, posts what
//! `POST /v1/ai-sdk/chat` sends through the API function over HTTP ([`Remote`]), with the
//! caller's token and CloudFront's origin header. (tests/frontends drives the routes with the
//! `ai` package itself under `spool serve`.)

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_auth::TokenKeys;
use spool_chat::metadata::Metadata;
use spool_log::{clock::SystemClock, limits::LiveSettings, port::StreamLog};
use spool_stream::writes::Remote;
use spool_tests::Harness;

use crate::support::{Api, SECRET, setup_on};

const ORIGIN_SECRET: &str = "the CDN's origin secret";

pub(crate) async fn the_stream_function_posts_through_the_api_function<H: Harness>(harness: &H) {
    // GIVEN the API function, answering only requests with the origin secret
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let keys = TokenKeys::new(SECRET).unwrap();
    let stores = spool_api::Stores {
        metadata: metadata.clone(),
        log: log.clone(),
        turns: harness.turns().await,
        files: harness.files().await,
    };
    let access = spool_auth::Access::Tokens(Box::new(keys.clone()));
    let chat_api = spool_api::router(spool_api::ChatApi::new(
        stores,
        keys.clone(),
        access,
        Arc::new(SystemClock),
    ));
    let check = spool_edge::OriginCheck::new(ORIGIN_SECRET);
    let api_url = spool_tests::serve_on_loopback(spool_edge::only_through_cdn(chat_api.clone(), Some(check))).await;
    // (The same API without the check, for the test's own setup calls.)
    let open_url = spool_tests::serve_on_loopback(chat_api).await;
    let (a, _, _) = setup_on(metadata.as_ref(), &open_url).await;
    let ws = a
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "title": "AI SDK" })))
        .await;
    let chat = a
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws["id"] })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // AND the read-only stream function, posting with the secret (and one without it)
    let reader = |secret: Option<&str>| {
        let api = spool_stream::StreamApi::new(
            log.clone(),
            spool_stream::Access::Tokens(Box::new(keys.clone())),
            LiveSettings::default(),
        )
        .with_chat_writes(Arc::new(Remote::new(&api_url, secret)));
        spool_stream::reader(api)
    };
    let with_secret = spool_tests::serve_on_loopback(reader(Some(ORIGIN_SECRET))).await;
    let without = spool_tests::serve_on_loopback(reader(None)).await;
    let body = |id: &str| {
        json!({ "id": chat, "trigger": "submit-message",
                "messages": [{ "id": id, "role": "user", "parts": [{ "type": "text", "text": "hello" }] }] })
    };
    let post = |base: &str, id: &str| {
        a.http
            .post(format!("{base}/v1/ai-sdk/chat"))
            .bearer_auth(a.token.as_deref().unwrap())
            .json(&body(id))
            .send()
    };

    // WHEN the stream function without the secret posts: the API's refusal is passed on
    let refused = post(&without, "m0").await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(events(&a, &chat).await, Vec::<Value>::new());

    // WHEN it posts with the secret: the message is the chat's, and its turn streams
    let answer = post(&with_secret, "m1").await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()["x-vercel-ai-ui-message-stream"], "v1");
    let mut answer = answer;
    let first = answer.chunk().await.unwrap().unwrap();
    let first = String::from_utf8_lossy(&first);
    let start: Value = serde_json::from_str(first.lines().next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(start["type"], "start");
    let stored = events(&a, &chat).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["type"], "user_message_submitted");
    // The UI message's id, as a digest: the same id is the same message.
    assert!(stored[0]["client_message_id"].as_str().unwrap().starts_with("ai-sdk:"));
    assert_eq!(start["messageId"], stored[0]["turn_id"]);
    drop(answer);

    // AND the transport's retry of the same message is the same message
    let again = post(&with_secret, "m1").await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    drop(again);
    assert_eq!(events(&a, &chat).await.len(), 1);

    // AND an edit (the message's id sent again with new text) goes to the API's edit route: once
    // the turn no longer holds the chat, it is a new version of the message
    let edit = |text: &str| {
        let body = json!({ "id": chat, "trigger": "submit-message", "messageId": "m1",
            "messages": [{ "id": "m1", "role": "user", "parts": [{ "type": "text", "text": text }] }] });
        a.http
            .post(format!("{with_secret}/v1/ai-sdk/chat"))
            .bearer_auth(a.token.as_deref().unwrap())
            .json(&body)
            .send()
    };
    let busy = edit("hello again").await.unwrap();
    assert_eq!(
        busy.status(),
        StatusCode::CONFLICT,
        "no worker runs here: the first turn holds the chat"
    );
    let org = crate::support::org_of(&a);
    let turn = stored[0]["turn_id"].as_str().unwrap();
    assert!(metadata.release_turn(&org, &chat, turn).await.unwrap());
    let edited = edit("hello again").await.unwrap();
    assert_eq!(edited.status(), StatusCode::OK);
    drop(edited);
    let now = events(&a, &chat).await;
    assert_eq!(now.len(), 1, "the active branch is the new version: {now:?}");
    assert_eq!(now[0]["payload"]["content"], "hello again");
    assert_eq!(now[0]["payload"]["revision"]["of"], stored[0]["seq"]);
}

async fn events(a: &Api, chat: &str) -> Vec<Value> {
    let page = a
        .ok(Method::GET, &format!("/v1/sessions/{chat}/events?after=0"), None)
        .await;
    page["events"].as_array().unwrap().clone()
}

on_both_backends!(ai_sdk_http: the_stream_function_posts_through_the_api_function);
