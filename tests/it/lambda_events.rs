//! The chat API's Router as Lambda runs it: API Gateway HTTP API and function URL events (the
//! fixtures in `functions/api/events/`, which `cargo lambda invoke` also takes) go through
//! `lambda_http`'s own adapter, the one `lambda_http::run` uses, and come back as the
//! responses API Gateway and function URLs expect. Both backends' stores sit behind it.

use std::sync::Arc;

use lambda_http::{Adapter, Context, LambdaEvent, Service, request::LambdaRequest};
use serde_json::Value;
use spool_chat::metadata::Metadata;
use spool_log::{clock::SystemClock, port::StreamLog};
use spool_tests::Harness;

use crate::support::{SECRET, provision};

/// Runs one event through the Router as the Lambda runtime would; the serialized response.
async fn invoke(router: &axum::Router, fixture: &str, replace: &[(&str, &str)]) -> Value {
    let mut event = std::fs::read_to_string(format!(
        "{}/../functions/api/events/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    for (from, to) in replace {
        event = event.replace(from, to);
    }
    let request: LambdaRequest = serde_json::from_str(&event).unwrap();
    let mut adapter = Adapter::from(router.clone());
    let response = adapter
        .call(LambdaEvent::new(request, Context::default()))
        .await
        .unwrap();
    serde_json::to_value(&response).unwrap()
}

fn body(response: &Value) -> Value {
    assert_eq!(response["isBase64Encoded"], false, "{response}");
    serde_json::from_str(response["body"].as_str().unwrap()).unwrap()
}

/// A handshake from API Gateway, a message from a function URL (base64 body), history with a
/// query string: each answers as over HTTP.
pub(crate) async fn the_router_answers_api_gateway_and_function_url_events<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let (_, key) = provision(metadata.as_ref(), &[]).await;
    let keys = spool_auth::TokenKeys::new(SECRET).unwrap();
    let stores = spool_api::Stores {
        metadata,
        log,
        turns: harness.turns().await,
        files: harness.files().await,
    };
    let access = spool_auth::Access::Tokens(Box::new(keys.clone()));
    let router = spool_api::router(spool_api::ChatApi::new(stores, keys, access, Arc::new(SystemClock)));

    // WHEN API Gateway hands in a handshake
    let response = invoke(&router, "http-api-handshake.json", &[("API_KEY", &key)]).await;
    // THEN it gets a token, with the API's headers
    assert_eq!(response["statusCode"], 200, "{response}");
    assert_eq!(response["headers"]["cache-control"], "no-store", "{response}");
    let token = body(&response)["jwt"].as_str().unwrap().to_owned();

    // WHEN a function URL hands in a message with a base64 body
    let response = invoke(&router, "function-url-message.json", &[("TOKEN", &token)]).await;
    assert_eq!(response["statusCode"], 202, "{response}");
    assert_eq!(body(&response)["seq"], 1);

    // THEN the history, read with a query string, has it
    let response = invoke(&router, "http-api-events.json", &[("TOKEN", &token)]).await;
    assert_eq!(response["statusCode"], 200, "{response}");
    let events = body(&response);
    assert_eq!(events["events"][0]["payload"]["content"], "hello from a function URL");
    assert_eq!(events["events"][0]["client_message_id"], "fn-url-1");

    // AND an event without a valid token is refused with the contract's JSON
    let response = invoke(&router, "http-api-events.json", &[("TOKEN", "tampered")]).await;
    assert_eq!(response["statusCode"], 401, "{response}");
    assert_eq!(body(&response)["error"]["code"], "unauthorized");
}

on_both_backends!(lambda_events: the_router_answers_api_gateway_and_function_url_events);
