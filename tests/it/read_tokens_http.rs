//! Read grants (`POST /v1/read-tokens`) over real HTTP on both backends: one string for every
//! reader of a chat in a window, answers a shared cache may keep, and nothing more than reading
//! that one stream of that one organization.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_tests::Harness;

use crate::support::{Api, setup};

/// A `GET` of `url` (relative to the API) with no `Authorization` header.
async fn anonymous_get(api: &Api, url: &str) -> reqwest::Response {
    api.http.get(format!("{}{url}", api.base)).send().await.unwrap()
}

fn cache_control(response: &reqwest::Response) -> String {
    response.headers()["cache-control"].to_str().unwrap().to_owned()
}

async fn grant(api: &Api, path: &str) -> Value {
    api.ok(Method::POST, "/v1/read-tokens", Some(json!({ "path": path })))
        .await
}

pub(crate) async fn a_read_grant_reads_one_stream_and_its_answers_may_be_shared<H: Harness>(harness: &H) {
    let (a, b, _) = setup(harness).await;
    let chat = a.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    a.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/messages"),
        Some(json!({ "content": "for every reader" })),
    )
    .await;
    let path = format!("sessions/{chat}");
    let granted = grant(&a, &path).await;
    let token = granted["read_token"].as_str().unwrap().to_owned();
    assert_eq!(granted["path"], path.as_str());
    assert_eq!(
        granted["url"].as_str().unwrap(),
        format!("/v1/stream/{path}?read_token={token}")
    );
    // Asked again in the same window, by the same or another client: the same string, which is
    // what lets a CDN key its cache on it (unless the window turned in between).
    let again = grant(&a, &path).await;
    assert!(
        again["read_token"] == token.as_str() || again["expires_at"] != granted["expires_at"],
        "{again} vs {granted}"
    );

    // WHEN a reader with only the grant reads the chat from its start
    let url = granted["url"].as_str().unwrap();
    let response = anonymous_get(&a, &format!("{url}&offset=-1")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        cache_control(&response),
        "public, max-age=5",
        "a shared cache may keep it"
    );
    let events: Vec<Value> = response.json().await.unwrap();
    assert!(
        events.iter().any(|e| e.to_string().contains("for every reader")),
        "{events:?}"
    );

    // A long-poll at the tail answers with what comes next, cacheable, with a cursor.
    a.ok(Method::PUT, "/v1/stream/notes/n", None).await;
    let notes = grant(&a, "notes/n").await;
    let notes_url = notes["url"].as_str().unwrap();
    // `offset=now` is the tail when the request comes: never kept for later readers.
    let now = anonymous_get(&a, &format!("{notes_url}&offset=now")).await;
    assert_eq!(now.status(), StatusCode::OK);
    assert_eq!(cache_control(&now), "no-store");
    let tail = now.headers()["stream-next-offset"].to_str().unwrap().to_owned();
    let live = format!("{notes_url}&offset={tail}&live=long-poll");
    let poll = anonymous_get(&a, &live);
    let post = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let response = a
            .http
            .post(format!("{}/v1/stream/notes/n", a.base))
            .bearer_auth(a.token.as_deref().unwrap())
            .header("content-type", "application/octet-stream")
            .body("next")
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    };
    let (response, ()) = tokio::join!(poll, post);
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(cache_control(&response), "public, max-age=5");
    assert!(response.headers().contains_key("stream-cursor"));
    assert_eq!(response.text().await.unwrap(), "next");
    // The same read with a bearer token is the caller's own: no shared cache keeps it.
    let own = a.get("/v1/stream/notes/n?offset=-1&live=long-poll").await;
    assert_eq!(own.status(), StatusCode::OK);
    assert!(!cache_control(&own).contains("public"), "{}", cache_control(&own));
    // HEAD takes the grant too.
    let head = a.http.head(format!("{}{url}", a.base)).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);

    // THEN the grant reads nothing else:
    // - another stream of the same organization;
    let other = a.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let other = other["id"].as_str().unwrap();
    let response = anonymous_get(&a, &format!("/v1/stream/sessions/{other}?offset=-1&read_token={token}")).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    // - another organization's chat, with that organization's own grant;
    let b_chat = b.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let b_grant = grant(&b, &format!("sessions/{}", b_chat["id"].as_str().unwrap())).await;
    let b_token = b_grant["read_token"].as_str().unwrap();
    let response = anonymous_get(&a, &format!("/v1/stream/{path}?offset=-1&read_token={b_token}")).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    // - and no grant at all for another organization's chat;
    let (status, body) = b
        .call(Method::POST, "/v1/read-tokens", Some(json!({ "path": path })))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // - a grant is not a bearer token, and a bearer token is not a grant;
    let response = anonymous_get(&a, &format!("/v1/stream/{path}?offset=-1&token={token}")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let bearer = a.token.as_deref().unwrap();
    let response = anonymous_get(&a, &format!("/v1/stream/{path}?offset=-1&read_token={bearer}")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = a
        .http
        .get(format!("{}/v1/sessions/{chat}", a.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // - an altered one is refused;
    let mut altered = token.clone();
    altered.pop();
    altered.push(if token.ends_with('A') { 'B' } else { 'A' });
    let response = anonymous_get(&a, &format!("/v1/stream/{path}?offset=-1&read_token={altered}")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // - it never writes.
    let response = a
        .http
        .post(format!(
            "{}/v1/stream/notes/n?read_token={}",
            a.base,
            notes["read_token"].as_str().unwrap()
        ))
        .header("content-type", "application/octet-stream")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // A path with characters a URL must escape gets a URL that reads it.
    let odd = a
        .http
        .put(format!("{}/v1/stream/notes/a%20b%23c%3Fd%25", a.base))
        .bearer_auth(a.token.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert!(odd.status().is_success(), "{}", odd.status());
    let odd = grant(&a, "notes/a b#c?d%").await;
    let url = odd["url"].as_str().unwrap();
    assert!(
        url.starts_with("/v1/stream/notes/a%20b%23c%3Fd%25?read_token="),
        "{url}"
    );
    let response = anonymous_get(&a, &format!("{url}&offset=-1")).await;
    assert_eq!(response.status(), StatusCode::OK);

    // Bad requests change nothing and say what to send.
    for body in [
        json!({}),
        json!({ "path": "" }),
        json!({ "path": "a//b" }),
        json!({ "path": "x", "extra": 1 }),
    ] {
        let (status, answer) = a.call(Method::POST, "/v1/read-tokens", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
    }
    let (status, _) = a
        .call(
            Method::POST,
            "/v1/read-tokens",
            Some(json!({ "path": "no/such/stream" })),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

on_both_backends!(read_tokens_http: a_read_grant_reads_one_stream_and_its_answers_may_be_shared);
