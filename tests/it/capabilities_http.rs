//! A companion's capabilities on a session, over real HTTP on both backends: verified tokens
//! enable what they grant; anything else is rejected, changes nothing, and is audited.

use reqwest::Method;
use serde_json::{Value, json};
use spool_log::clock::{Clock, SystemClock};
use spool_tests::Harness;

use crate::support::{handshake, org_of, setup};

/// Enabled when the token is the organization's and the library's; rejected otherwise.
pub(crate) async fn companion_tokens_enable_what_they_grant<H: Harness>(harness: &H) {
    let (api, other, _) = setup(harness).await;
    let org = org_of(&api);
    let metadata = harness.metadata().await;
    let now = SystemClock.now_ms();
    let (_, key) = spool_api::admin::create_api_key(&metadata, &org, &["context_for_query".to_owned()], now)
        .await
        .unwrap();
    let companion = |library: &'static str| {
        let (http, base, key) = (api.http.clone(), api.base.clone(), key.reveal());
        async move {
            let body: Value = handshake(&http, &base, json!({ "api_key": key, "library_id": library }))
                .await
                .json()
                .await
                .unwrap();
            body["jwt"].as_str().unwrap().to_owned()
        }
    };
    let jwt = companion("lib-1").await;
    let session = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/sessions/{id}/capabilities");

    // WHEN the companion's token asks for a capability it has and one it has not
    let answer = api
        .ok(
            Method::PUT,
            &path,
            Some(json!({ "library_id": "lib-1", "jwt": jwt, "capabilities": ["context_for_query", "agent"] })),
        )
        .await;
    // THEN only the granted one is enabled
    assert_eq!(answer["status"], "authenticated");
    assert_eq!(answer["session_id"], id.as_str());
    assert_eq!(answer["library_id"], "lib-1");
    assert_eq!(answer["capabilities_enabled"], json!(["context_for_query"]));
    assert!(answer.get("reason").is_none(), "{answer}");
    let got = api.ok(Method::GET, &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(got["capabilities"], json!(["context_for_query"]));

    // WHEN the token is for another library, tampered with, or another organization's
    let mut tampered = jwt.clone();
    tampered.push('x');
    let foreign: Value = other.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let other_jwt = other.token.clone().unwrap();
    // An expired one, signed with the right key for the right library.
    let keys = spool_auth::TokenKeys::new(crate::support::SECRET).unwrap();
    let mut old = spool_auth::Claims::new("key:k", org_of(&api), 1_000);
    old.library_id = Some("lib-1".to_owned());
    old.capabilities = vec!["context_for_query".to_owned()];
    let expired = keys.issue(&old).unwrap();
    let enable = json!({ "library_id": "lib-1", "jwt": jwt, "capabilities": ["context_for_query"] });
    for (library, token) in [
        ("lib-2", jwt.clone()),
        ("lib-1", tampered),
        ("lib-1", other_jwt),
        ("lib-1", expired),
    ] {
        assert_eq!(
            api.ok(Method::PUT, &path, Some(enable.clone())).await["status"],
            "authenticated"
        );
        let answer = api
            .ok(
                Method::PUT,
                &path,
                Some(json!({ "library_id": library, "jwt": token, "capabilities": ["context_for_query"] })),
            )
            .await;
        // THEN it is rejected with a reason, and the chat is back in anonymous mode: working,
        // without what a companion enables
        assert_eq!(answer["status"], "rejected", "{answer}");
        assert_eq!(answer["session_id"], id.as_str());
        assert!(answer["reason"].is_string());
        assert_eq!(answer["capabilities_enabled"], json!([]));
        let got = api.ok(Method::GET, &format!("/v1/sessions/{id}"), None).await;
        assert_eq!(got["capabilities"], json!([]), "{library}");
    }
    // Malformed requests are 400; another organization's session is 404.
    for bad in [
        json!({}),
        json!({ "library_id": "l", "jwt": "x", "capabilities": "all" }),
    ] {
        assert_eq!(api.call(Method::PUT, &path, Some(bad)).await.0, 400);
    }
    let foreign_path = format!("/v1/sessions/{}/capabilities", foreign["id"].as_str().unwrap());
    let request = json!({ "library_id": "lib-1", "jwt": jwt, "capabilities": ["context_for_query"] });
    assert_eq!(api.call(Method::PUT, &foreign_path, Some(request)).await.0, 404);

    // AND every attempt is in the organization's audit stream
    let audit: Value = api.get("/v1/stream/audit?offset=-1").await.json().await.unwrap();
    let outcomes: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "capabilities")
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            "enabled", "enabled", "rejected", "enabled", "rejected", "enabled", "rejected", "enabled", "rejected"
        ]
    );
}

/// A valid token whose key carries nothing asked for is authenticated, enables nothing, and says
/// why, naming the command that makes a key that does.
pub(crate) async fn an_answer_that_enables_nothing_says_why<H: Harness>(harness: &H) {
    // GIVEN a companion's token from a key that carries only `agent`
    let (api, _, _) = setup(harness).await;
    let org = org_of(&api);
    let metadata = harness.metadata().await;
    let (_, key) = spool_api::admin::create_api_key(&metadata, &org, &["agent".to_owned()], SystemClock.now_ms())
        .await
        .unwrap();
    let body: Value = handshake(
        &api.http,
        &api.base,
        json!({ "api_key": key.reveal(), "library_id": "lib-1" }),
    )
    .await
    .json()
    .await
    .unwrap();
    let session = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let id = session["id"].as_str().unwrap();
    // WHEN it asks for `context_for_query`
    let answer = api
        .ok(
            Method::PUT,
            &format!("/v1/sessions/{id}/capabilities"),
            Some(json!({ "library_id": "lib-1", "jwt": body["jwt"], "capabilities": ["context_for_query"] })),
        )
        .await;
    // THEN it is authenticated, enables nothing, and the reason names the key and the command
    assert_eq!(answer["status"], "authenticated", "{answer}");
    assert_eq!(answer["library_id"], "lib-1");
    assert_eq!(answer["capabilities_enabled"], json!([]));
    let reason = answer["reason"].as_str().unwrap();
    assert!(
        reason.contains("does not carry context_for_query")
            && reason.contains(&format!(
                "spool admin create-api-key {org} --capability context_for_query"
            )),
        "{reason}"
    );
}

on_both_backends!(capabilities_http: companion_tokens_enable_what_they_grant, an_answer_that_enables_nothing_says_why);
