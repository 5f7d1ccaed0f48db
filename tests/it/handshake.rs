//! The handshake over real HTTP on loopback, on both backends: an API key becomes a token that
//! the stream function accepts for its organization only; every handshake with a known key is
//! audited; bad input gets a 4xx and changes nothing.

use std::sync::Arc;

use serde_json::{Value, json};
use spool_auth::{Claims, TokenKeys};
use spool_log::{
    clock::{Clock, SystemClock},
    port::StreamLog,
    stream::{Position, StreamPath},
};
use spool_tests::Harness;

use crate::support::{SECRET, handshake, provision, serve};

async fn audit_events(log: &dyn StreamLog, org: &str) -> Vec<Value> {
    let path = StreamPath::parse(format!("o/{org}/audit")).unwrap();
    match log.read(&path, Position::START, None).await {
        Ok(chunk) => chunk
            .messages
            .iter()
            .map(|m| serde_json::from_slice(m).unwrap())
            .collect(),
        Err(spool_log::error::Error::NotFound { .. }) => Vec::new(),
        Err(e) => panic!("reading the audit stream: {e}"),
    }
}

/// A valid key gets a day's token for its organization, which the stream function accepts.
pub(crate) async fn an_api_key_becomes_a_token_for_its_organization<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let directory = harness.metadata().await;
    let (org, key) = provision(&directory, &["agent"]).await;
    let base = serve(
        log.clone(),
        Arc::new(directory),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let http = reqwest::Client::new();

    // WHEN a client hands its key in
    let response = handshake(
        &http,
        &base,
        json!({"api_key": key, "version": "1", "user_agent": "spool-test/1", "library_id": "lib-7"}),
    )
    .await;
    // THEN it gets a bearer token for the key's organization, with the key's capabilities
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["org_id"], org.as_str());
    assert_eq!(body["capabilities"], json!(["agent"]));
    assert_eq!(body["library_id"], "lib-7");
    let claims = TokenKeys::new(SECRET)
        .unwrap()
        .verify(body["jwt"].as_str().unwrap())
        .unwrap();
    assert_eq!(claims.org, org);
    assert_eq!(claims.library_id.as_deref(), Some("lib-7"));
    assert!(claims.can("agent"));
    assert_eq!(claims.exp - claims.iat, 24 * 3600);
    let expires = time::OffsetDateTime::parse(
        body["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(expires.unix_timestamp(), claims.exp);
    assert_eq!((claims.iss.as_str(), claims.version.as_deref()), ("spool", Some("1")));

    // AND a token issued for a companion's library is no bearer's: it only enables capabilities
    let refused = http
        .put(format!("{base}/v1/stream/notes"))
        .bearer_auth(body["jwt"].as_str().unwrap())
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    // AND a person's token (no library) works on the stream function, inside its
    // organization's namespace
    let response = handshake(
        &http,
        &base,
        json!({"api_key": key, "version": "1", "user_agent": "spool-test/1"}),
    )
    .await;
    let body: Value = response.json().await.unwrap();
    let jwt = body["jwt"].as_str().unwrap();
    let created = http
        .put(format!("{base}/v1/stream/notes"))
        .bearer_auth(jwt)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let stored = StreamPath::parse(format!("o/{org}/notes")).unwrap();
    assert!(log.metadata(&stored).await.is_ok());

    // AND the handshake is in the organization's audit stream, which the token can read but
    // not write
    let events = audit_events(log.as_ref(), &org).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["type"], "handshake");
    assert_eq!(events[0]["outcome"], "accepted");
    assert_eq!(events[0]["user_agent"], "spool-test/1");
    assert!(!events[0].to_string().contains(&key), "the audit never holds the key");
    let read = http
        .get(format!("{base}/v1/stream/audit?offset=-1"))
        .bearer_auth(jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    for request in [
        http.post(format!("{base}/v1/stream/audit"))
            .header("content-type", "application/json")
            .body("{}"),
        http.delete(format!("{base}/v1/stream/audit")),
    ] {
        assert_eq!(request.bearer_auth(jwt).send().await.unwrap().status(), 403);
    }
    assert_eq!(audit_events(log.as_ref(), &org).await.len(), 2);
}

/// Wrong, unknown and malformed keys, bad bodies and bad tokens get a 4xx and no token.
pub(crate) async fn bad_keys_and_bodies_get_4xx_and_no_token<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let directory = harness.metadata().await;
    let (org, key) = provision(&directory, &[]).await;
    let base = serve(
        log.clone(),
        Arc::new(directory),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let http = reqwest::Client::new();

    // A wrong secret for a real key id: 401, and the attempt is audited as refused.
    let wrong_secret = format!(
        "{}{}",
        &key[..key.len() - 1],
        if key.ends_with('0') { '1' } else { '0' }
    );
    let response = handshake(&http, &base, json!({ "api_key": wrong_secret })).await;
    assert_eq!(response.status(), 401);
    let wrong_body: Value = response.json().await.unwrap();
    let events = audit_events(log.as_ref(), &org).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["outcome"], "refused");

    // An unknown key id gets the very same answer: nothing tells which key ids exist.
    let unknown = spool_auth::ApiKey::generate().unwrap().reveal();
    let response = handshake(&http, &base, json!({ "api_key": unknown })).await;
    assert_eq!(response.status(), 401);
    assert_eq!(response.json::<Value>().await.unwrap(), wrong_body);

    // Malformed keys and bodies: 4xx with the contract's JSON error.
    let long = "x".repeat(300);
    let bad_bodies: Vec<(&str, Vec<u8>, u16)> = vec![
        ("not JSON", b"api_key=abc".to_vec(), 400),
        ("empty", Vec::new(), 400),
        ("an array", b"[]".to_vec(), 400),
        ("no key", br#"{"version":"1"}"#.to_vec(), 400),
        ("a number key", br#"{"api_key":5}"#.to_vec(), 400),
        ("a malformed key", br#"{"api_key":"spool_nope"}"#.to_vec(), 401),
        ("invalid UTF-8", b"{\"api_key\":\"\xff\xfe\"}".to_vec(), 400),
        (
            "a long user agent",
            format!(r#"{{"api_key":"{key}","user_agent":"{long}"}}"#).into_bytes(),
            400,
        ),
        (
            "a bad library id",
            format!(r#"{{"api_key":"{key}","library_id":"a b"}}"#).into_bytes(),
            400,
        ),
        (
            "deep nesting",
            format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes(),
            400,
        ),
        ("a huge body", vec![b' '; 64 * 1024], 413),
    ];
    for (what, body, status) in bad_bodies {
        let response = http
            .post(format!("{base}/v1/handshake"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{what}");
        if status != 413 {
            let error: Value = response.json().await.unwrap();
            assert!(error["error"]["code"].is_string(), "{what}: {error}");
        }
    }
    // None of them reached the audit stream (the key was valid in two, but the body was not).
    assert_eq!(audit_events(log.as_ref(), &org).await.len(), 1);

    // Tokens: expired, tampered and signed with another secret all get 401 on the streams.
    let keys = TokenKeys::new(SECRET).unwrap();
    let now = SystemClock.now_ms() / 1000;
    let expired = keys.issue(&Claims::new("t", &org, now - 2 * 24 * 3600)).unwrap();
    let good = keys.issue(&Claims::new("t", &org, now)).unwrap();
    let tampered = {
        let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        let other = keys.issue(&Claims::new("t", "someone-else", now)).unwrap();
        parts[1] = other.split('.').nth(1).unwrap().to_owned();
        parts.join(".")
    };
    let foreign = TokenKeys::new(b"another secret, also long enough!!")
        .unwrap()
        .issue(&Claims::new("t", &org, now))
        .unwrap();
    for (what, token) in [("expired", expired), ("tampered", tampered), ("foreign", foreign)] {
        let response = http
            .put(format!("{base}/v1/stream/x"))
            .bearer_auth(token)
            .header("content-type", "text/plain")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{what}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer", "{what}");
    }
    let stored = StreamPath::parse(format!("o/{org}/x")).unwrap();
    assert!(
        log.metadata(&stored).await.is_err(),
        "no refused request created the stream"
    );
}

/// A token in the URL (`?token=`, for EventSource) reads streams and nothing else: writes and
/// the chat API's routes take it from the header only, and a request with a bad header is
/// refused whatever its URL carries. Refusals say nothing of the verifier's internals.
pub(crate) async fn url_tokens_only_read_streams<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let directory = harness.metadata().await;
    let (_, key) = provision(&directory, &[]).await;
    let base = serve(
        log.clone(),
        Arc::new(directory),
        harness.turns().await,
        harness.files().await,
    )
    .await;
    let http = reqwest::Client::new();
    let body: Value = handshake(&http, &base, json!({ "api_key": key }))
        .await
        .json()
        .await
        .unwrap();
    let jwt = body["jwt"].as_str().unwrap();
    let created = http
        .put(format!("{base}/v1/stream/notes"))
        .bearer_auth(jwt)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let status = |request: reqwest::RequestBuilder| async move { request.send().await.unwrap().status().as_u16() };
    // Reads of streams take it
    assert_eq!(
        status(http.get(format!("{base}/v1/stream/notes?offset=-1&token={jwt}"))).await,
        200
    );
    assert_eq!(
        status(http.get(format!("{base}/v1/sessions/global")).bearer_auth(jwt)).await,
        200
    );
    let chat_events = http
        .get(format!("{base}/v1/sessions/global/stream?token={jwt}"))
        .header("last-event-id", "999999");
    // (past its end: a 400 once the token is taken, so the test need not hold an SSE response)
    assert_eq!(status(chat_events).await, 400);
    // Writes and the chat API do not
    let refused = [
        http.post(format!("{base}/v1/stream/notes?token={jwt}"))
            .header("content-type", "text/plain")
            .body("x"),
        http.put(format!("{base}/v1/stream/other?token={jwt}"))
            .header("content-type", "text/plain"),
        http.delete(format!("{base}/v1/stream/notes?token={jwt}")),
        http.get(format!("{base}/v1/sessions?token={jwt}")),
        http.post(format!("{base}/v1/sessions?token={jwt}")).json(&json!({})),
        http.post(format!("{base}/v1/sessions/global/messages?token={jwt}"))
            .json(&json!({ "content": "hi" })),
    ];
    for request in refused {
        assert_eq!(status(request).await, 401);
    }
    // A bad header is not saved by a good URL token
    for header in ["Basic abc", "Bearer nope", "Bearer"] {
        let response = http
            .get(format!("{base}/v1/stream/notes?offset=-1&token={jwt}"))
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{header}");
        let text = response.text().await.unwrap();
        assert!(!text.contains("InvalidToken") && !text.contains("Base64"), "{text}");
    }
    // AND nothing was written
    let read = http
        .get(format!("{base}/v1/stream/notes?offset=-1"))
        .bearer_auth(jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(read.text().await.unwrap(), "");
}

on_both_backends!(handshake:
    an_api_key_becomes_a_token_for_its_organization,
    bad_keys_and_bodies_get_4xx_and_no_token,
    url_tokens_only_read_streams,
);
