//! The stream function over real HTTP on loopback, on both backends: what Spool adds to the
//! Durable Streams protocol (tokens and tenant isolation, immutable caching of sealed history,
//! SSE recycling and keep-alives) and the error paths that must change nothing. The protocol
//! itself is checked by the official conformance suite (`tests/conformance`).

use std::{sync::Arc, time::Duration};

use spool_auth::{Claims, TokenKeys};
use spool_log::{
    limits::LiveSettings,
    port::{StreamLog, StreamReader, StreamSealer, StreamWriter},
    stream::{Append, ContentType, CreateStream, Position, SealMode, StreamPath},
};
use spool_stream::{Access, StreamApi};
use spool_tests::Harness;

const SECRET: &[u8] = b"a test secret that is long enough!";

fn keys() -> TokenKeys {
    TokenKeys::new(SECRET).unwrap()
}

fn token(org: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    keys().issue(&Claims::new("tester", org, now)).unwrap()
}

/// Serves the stream Router over `log` on a loopback port until the test ends.
async fn serve(log: Arc<dyn StreamLog>, access: Access, live: LiveSettings) -> String {
    let api = StreamApi::new(log, access, live);
    let app = spool_stream::router(api, 1 << 20);
    format!("{}/v1/stream", spool_tests::serve_on_loopback(app).await)
}

fn unique(name: &str) -> String {
    format!("t{}/{name}", uuid::Uuid::new_v4().simple())
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Tokens decide who may use a stream, and a token of another organization cannot even see it.
pub(crate) async fn tokens_isolate_organizations<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let base = serve(log.clone(), Access::Tokens(Box::new(keys())), LiveSettings::default()).await;
    let http = reqwest::Client::new();
    let url = format!("{base}/{}", unique("chat"));
    let (a, b) = (token("org_a"), token("org_b"));

    // No token, a tampered token and a token signed with another secret: 401, nothing created.
    let forged = TokenKeys::new(b"not the server's secret, but long enough")
        .unwrap()
        .issue(&Claims::new("x", "org_a", 2_000_000_000))
        .unwrap();
    for auth in [None, Some(format!("{a}x")), Some(forged)] {
        let mut req = http.put(&url).header("content-type", "application/json");
        if let Some(t) = auth {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(header(&r, "www-authenticate"), Some("Bearer"));
    }
    assert_eq!(http.head(&url).bearer_auth(&a).send().await.unwrap().status(), 404);

    // Organization A creates and writes its stream.
    let r = http
        .put(&url)
        .bearer_auth(&a)
        .header("content-type", "application/json")
        .body(r#"[{"n":1}]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    // Organization B gets 404 for every operation and changes nothing.
    for method in ["GET", "HEAD", "POST", "DELETE"] {
        let r = http
            .request(method.parse().unwrap(), &url)
            .bearer_auth(&b)
            .header("content-type", "application/json")
            .body(if method == "POST" { r#"{"n":666}"# } else { "" })
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method}");
    }
    // Its own stream at the same path is a different stream.
    let r = http
        .put(&url)
        .bearer_auth(&b)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    // A's stream is untouched; `?token=` works where headers cannot be set (EventSource).
    let r = http.get(format!("{url}?offset=-1&token={a}")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), Some("application/json"));
    assert_eq!(r.text().await.unwrap(), r#"[{"n":1}]"#);
}

/// Session streams are readable by their organization and written only through the chat API.
pub(crate) async fn session_streams_are_read_only<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let base = serve(log.clone(), Access::Tokens(Box::new(keys())), LiveSettings::default()).await;
    let http = reqwest::Client::new();
    let session = format!("sessions/{}", uuid::Uuid::new_v4().simple());
    let stored = StreamPath::parse(format!("o/org_a/{session}")).unwrap();
    let json = ContentType::parse("application/json").unwrap();
    log.create(&stored, CreateStream::new(json)).await.unwrap();
    log.append(&stored, Append::one(r#"{"type":"user_message_submitted"}"#))
        .await
        .unwrap();

    let url = format!("{base}/{session}");
    let r = http
        .get(format!("{url}?offset=-1"))
        .bearer_auth(token("org_a"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), r#"[{"type":"user_message_submitted"}]"#);
    for method in ["PUT", "POST", "DELETE"] {
        let r = http
            .request(method.parse().unwrap(), &url)
            .bearer_auth(token("org_a"))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{method}");
    }
    let r = http
        .get(format!("{url}?offset=-1"))
        .bearer_auth(token("org_b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(log.metadata(&stored).await.unwrap().tail.seq(), 1);
}

/// History served from sealed pages is immutable and cacheable for a year; the open tail is
/// revalidated every time, by ETag.
pub(crate) async fn sealed_history_is_immutable<H: Harness>(harness: &H) {
    let log = harness.instance().await;
    let org = "org_a";
    let name = unique("history");
    let stored = StreamPath::parse(format!("o/{org}/{name}")).unwrap();
    log.create(&stored, CreateStream::new(ContentType::parse("text/plain").unwrap()))
        .await
        .unwrap();
    for i in 0..100 {
        log.append(&stored, Append::one(format!("message {i:03} {}\n", "x".repeat(40))))
            .await
            .unwrap();
    }
    let report = log.seal(&stored, SealMode::Full).await.unwrap();
    assert!(report.sealed_through.seq() > 0, "{report:?}");
    let base = serve(
        Arc::new(log.clone()),
        Access::Open { org: org.to_owned() },
        LiveSettings::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let url = format!("{base}/{name}");

    let first = http.get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(header(&first, "stream-up-to-date"), None);
    let next = header(&first, "stream-next-offset").unwrap().to_owned();
    assert!(next.parse::<spool_log::stream::Offset>().unwrap().seq() <= report.sealed_through.seq());
    let etag = header(&first, "etag").unwrap().to_owned();
    assert!(first.text().await.unwrap().starts_with("message 000"));

    // The same request with its ETag: 304, no body.
    let again = http
        .get(format!("{url}?offset=-1"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert!(again.text().await.unwrap().is_empty());

    // Reading on reaches the hot tail, which is not immutable.
    let mut at = next;
    let mut tail_cache = None;
    for _ in 0..100 {
        let r = http.get(format!("{url}?offset={at}")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        at = header(&r, "stream-next-offset").unwrap().to_owned();
        if header(&r, "stream-up-to-date") == Some("true") {
            tail_cache = header(&r, "cache-control").map(str::to_owned);
            break;
        }
    }
    assert_eq!(tail_cache.as_deref(), Some("no-cache"));
    assert_eq!(at.parse::<spool_log::stream::Offset>().unwrap().seq(), 100);
}

/// An SSE response ends by itself after `sse_max`, sends keep-alives while idle, and a client
/// resuming from the last control event's offset misses nothing and sees nothing twice.
pub(crate) async fn sse_responses_are_recycled_without_loss<H: Harness>(harness: &H) {
    let log = harness.instance().await;
    let name = unique("sse");
    let stored = StreamPath::parse(format!("o/local/{name}")).unwrap();
    log.create(
        &stored,
        CreateStream::new(ContentType::parse("application/json").unwrap()),
    )
    .await
    .unwrap();
    let live = LiveSettings {
        long_poll: Duration::from_millis(300),
        sse_max: Duration::from_millis(700),
        sse_keepalive: Duration::from_millis(100),
    };
    let base = serve(
        Arc::new(log.clone()),
        Access::Open {
            org: "local".to_owned(),
        },
        live,
    )
    .await;
    let url = format!("{base}/{name}");

    // A writer appends 1..=30 while readers come and go.
    let writer = {
        let log = log.clone();
        let stored = stored.clone();
        tokio::spawn(async move {
            for i in 1..=30 {
                log.append(&stored, Append::one(format!("{i}"))).await.unwrap();
                // An idle spell in the middle, for keep-alives.
                let pause = if i == 15 { 350 } else { 40 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            log.close(&stored, Append::default()).await.unwrap();
        })
    };
    let http = reqwest::Client::new();
    let mut seen: Vec<u64> = Vec::new();
    let mut offset = "-1".to_owned();
    let mut responses = 0;
    let mut keepalives = 0;
    let mut closed = false;
    while !closed {
        responses += 1;
        assert!(responses < 50, "the stream never closed");
        let mut r = http
            .get(format!("{url}?offset={offset}&live=sse"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "content-type"), Some("text/event-stream"));
        let mut text = String::new();
        while let Some(bytes) = tokio::time::timeout(Duration::from_secs(10), r.chunk())
            .await
            .expect("the server ends every SSE response within sse_max")
            .unwrap()
        {
            text.push_str(std::str::from_utf8(&bytes).unwrap());
        }
        keepalives += text.matches(": keep-alive").count();
        for event in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:").map(|d| d.strip_prefix(' ').unwrap_or(d)))
                .collect::<Vec<_>>()
                .join("\n");
            if event.starts_with("event: data") {
                let batch: Vec<u64> = serde_json::from_str(&data).unwrap();
                seen.extend(batch);
            } else if event.starts_with("event: control") {
                let control: serde_json::Value = serde_json::from_str(&data).unwrap();
                offset = control["streamNextOffset"].as_str().unwrap().to_owned();
                closed = control["streamClosed"] == true;
            }
        }
    }
    writer.await.unwrap();
    assert_eq!(seen, (1..=30).collect::<Vec<_>>());
    assert!(responses >= 2, "the 1.5 s of writing spans several 0.7 s responses");
    assert!(keepalives >= 1, "an idle spell of 350 ms gets 100 ms keep-alives");
}

/// Long-polls wake on an append, time out with `204` and a cursor, and bad requests change
/// nothing.
pub(crate) async fn long_polls_and_bad_requests<H: Harness>(harness: &H) {
    let log = harness.instance().await;
    let name = unique("poll");
    let stored = StreamPath::parse(format!("o/local/{name}")).unwrap();
    let live = LiveSettings {
        long_poll: Duration::from_millis(400),
        ..LiveSettings::default()
    };
    let base = serve(
        Arc::new(log.clone()),
        Access::Open {
            org: "local".to_owned(),
        },
        live,
    )
    .await;
    let url = format!("{base}/{name}");
    let http = reqwest::Client::new();
    let r = http
        .put(&url)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let tail = header(&r, "stream-next-offset").unwrap().to_owned();

    let timed_out = http
        .get(format!("{url}?offset={tail}&live=long-poll"))
        .send()
        .await
        .unwrap();
    assert_eq!(timed_out.status(), 204);
    assert_eq!(header(&timed_out, "stream-up-to-date"), Some("true"));
    assert!(header(&timed_out, "stream-cursor").is_some());

    let poll = tokio::spawn({
        let http = http.clone();
        let url = format!("{url}?offset={tail}&live=long-poll");
        async move { http.get(url).send().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    log.append(&stored, Append::one(r#""woke""#)).await.unwrap();
    let woke = poll.await.unwrap();
    assert_eq!(woke.status(), 200);
    assert_eq!(woke.text().await.unwrap(), r#"["woke"]"#);

    for (body, content_type, headers) in [
        ("{not json", "application/json", vec![]),
        ("[]", "application/json", vec![]),
        ("", "application/json", vec![]),
        ("1", "text/plain", vec![]),
        (
            "1",
            "application/json",
            vec![("producer-id", "p"), ("producer-epoch", "x"), ("producer-seq", "0")],
        ),
        ("1", "application/json", vec![("producer-id", "p")]),
        ("1", "not a type", vec![]),
    ] {
        let mut req = http.post(&url).header("content-type", content_type).body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let r = req.send().await.unwrap();
        assert!(r.status().is_client_error(), "{body:?}: {}", r.status());
        let error: serde_json::Value = r.json().await.unwrap_or_default();
        assert!(error["error"]["code"].is_string(), "{body:?}: {error}");
    }
    for query in [
        "offset=abc",
        "offset=-1&offset=-1",
        "live=sse",
        "offset=-1&live=forever",
    ] {
        let r = http.get(format!("{url}?{query}")).send().await.unwrap();
        assert_eq!(r.status(), 400, "{query}");
    }
    // What the router refuses before a handler runs is in the contract's JSON too: a body over
    // the limit, a path that is not UTF-8, a method the route does not take.
    let refusals = [
        (
            http.post(&url)
                .header("content-type", "application/json")
                .body(vec![b' '; 2 << 20]),
            413,
        ),
        (http.get(format!("{base}/%ff%fe")), 400),
        (http.patch(&url), 405),
    ];
    for (request, status) in refusals {
        // A body over the limit is refused before it is read, and the connection closed: the
        // client may see the close before the answer; it then asks again.
        let mut answer = None;
        for _ in 0..10 {
            if let Ok(r) = request.try_clone().unwrap().send().await {
                answer = Some(r);
                break;
            }
        }
        let r = answer.expect("an answer");
        assert_eq!(r.status(), status);
        assert_eq!(header(&r, "content-type"), Some("application/json"), "{status}");
        let error: serde_json::Value = r.json().await.unwrap();
        assert!(
            error["error"]["code"].is_string() && error["error"]["message"].is_string(),
            "{error}"
        );
    }
    let chunk = log.read(&stored, Position::START, None).await.unwrap();
    assert_eq!(chunk.messages.len(), 1, "bad requests appended nothing");
}

on_both_backends!(stream_http:
    tokens_isolate_organizations,
    session_streams_are_read_only,
    sealed_history_is_immutable,
    sse_responses_are_recycled_without_loss,
    long_polls_and_bad_requests,
);
