//! Files in chats over real HTTP on both backends: declared, uploaded (to `spool serve`'s own
//! route, or to S3 with a pre-signed URL and a plain HTTP client), completed into one `system`
//! event each, downloaded as attachments; same-name replacement; hostile names; sizes over the
//! limit; completions of files never uploaded; URLs that work once and expire; and another
//! organization that can reach none of it.

use std::{sync::Arc, time::Duration};

use reqwest::{Method, StatusCode, header::HeaderMap};
use serde_json::{Value, json};
use spool_chat::{metadata::Metadata, service::AttachmentLimits};
use spool_log::port::StreamLog;
use spool_tests::Harness;

use crate::support::{Api, all_events, one, serve_limited, setup_on, stack, until};

/// A chat of `api`'s organization, outside workspaces.
async fn new_chat(api: &Api) -> String {
    let chat = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    chat["id"].as_str().unwrap().to_owned()
}

async fn declare(api: &Api, chat: &str, body: Value) -> (StatusCode, Value) {
    api.call(Method::POST, &format!("/v1/sessions/{chat}/attachments"), Some(body))
        .await
}

/// Sends `bytes` as the declaration's `upload` says, with a plain HTTP client.
async fn send_bytes(api: &Api, declared: &Value, bytes: Vec<u8>) -> reqwest::Response {
    let upload = &declared["upload"];
    let url = upload["url"].as_str().unwrap();
    let url = if url.starts_with('/') {
        format!("{}{url}", api.base)
    } else {
        url.to_owned()
    };
    let method = Method::from_bytes(upload["method"].as_str().unwrap().as_bytes()).unwrap();
    let mut request = reqwest::Client::new().request(method, url).body(bytes);
    for (name, value) in upload["headers"].as_object().unwrap() {
        request = request.header(name.as_str(), value.as_str().unwrap());
    }
    request.send().await.unwrap()
}

async fn complete(api: &Api, chat: &str, id: &str) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        &format!("/v1/sessions/{chat}/attachments/{id}/complete"),
        None,
    )
    .await
}

/// Declares, uploads and completes a file; its completion.
pub(crate) async fn upload(api: &Api, chat: &str, filename: &str, content_type: &str, bytes: &[u8]) -> Value {
    let (status, declared) = declare(
        api,
        chat,
        json!({ "filename": filename, "content_type": content_type, "size": bytes.len() }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{declared}");
    let sent = send_bytes(api, &declared, bytes.to_vec()).await;
    assert!(sent.status().is_success(), "upload: {}", sent.status());
    let id = declared["attachment_id"].as_str().unwrap();
    let (status, completed) = complete(api, chat, id).await;
    assert_eq!(status, StatusCode::OK, "{completed}");
    completed
}

/// Fetches a file as a browser would: the route's answer (a redirect is followed by hand, to
/// see it), its headers and bytes.
pub(crate) async fn download(api: &Api, chat: &str, id: &str) -> (StatusCode, HeaderMap, Vec<u8>) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = http
        .get(format!("{}/v1/sessions/{chat}/attachments/{id}", api.base))
        .bearer_auth(api.token.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    let status = response.status();
    if status == StatusCode::FOUND {
        let location = response.headers()["location"].to_str().unwrap().to_owned();
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        let stored = http.get(location).send().await.unwrap();
        let headers = stored.headers().clone();
        return (status, headers, stored.bytes().await.unwrap().to_vec());
    }
    let headers = response.headers().clone();
    (status, headers, response.bytes().await.unwrap().to_vec())
}

fn uploads(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "system" && e["payload"]["upload"].is_object())
        .collect()
}

/// A file goes up and comes back, and the chat records it once, with where agents read it.
pub(crate) async fn a_file_is_uploaded_recorded_once_and_downloaded<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let chat = new_chat(api).await;
    let bytes = b"name,score\nada,3\n".to_vec();
    let completed = upload(api, &chat, "scores.csv", "text/csv", &bytes).await;
    let id = completed["attachment"]["id"].as_str().unwrap().to_owned();
    assert_eq!(completed["attachment"]["status"], "complete");
    assert!(completed.get("replaces").is_none());
    // Completing again (a retry) answers the same, and records nothing more.
    let (status, again) = complete(api, &chat, &id).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["seq"], completed["seq"]);
    let events = all_events(api, &chat).await;
    let recorded = uploads(&events);
    assert_eq!(recorded.len(), 1, "one event per file: {events:?}");
    let upload = &recorded[0]["payload"]["upload"];
    assert_eq!(recorded[0]["seq"], completed["seq"]);
    assert_eq!(upload["id"], id.as_str());
    assert_eq!(upload["filename"], "scores.csv");
    assert_eq!(upload["size"], bytes.len());
    assert_eq!(upload["content_type"], "text/csv");
    assert_eq!(upload["path"], "attachments/scores.csv");
    let message = recorded[0]["payload"]["message"].as_str().unwrap();
    assert!(message.starts_with("User has uploaded scores.csv"), "{message}");
    // WHEN the file is fetched
    let (_, headers, body) = download(api, &chat, &id).await;
    // THEN it is the same bytes, as a download a browser does not render
    assert_eq!(body, bytes);
    let disposition = headers["content-disposition"].to_str().unwrap();
    assert!(
        disposition.starts_with("attachment;") && disposition.contains("scores.csv"),
        "{disposition}"
    );
    assert_eq!(headers["content-type"], "text/csv");
    // The list shows it.
    let list = api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/attachments"), None)
        .await;
    assert_eq!(list["attachments"][0]["id"], id.as_str());
    // A message refers to it by id, and its event names it.
    let (status, posted) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": "look", "files": [id] })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{posted}");
    let events = all_events(api, &chat).await;
    let message = events.iter().find(|e| e["type"] == "user_message_submitted").unwrap();
    assert_eq!(message["payload"]["files"][0]["filename"], "scores.csv");
    // The demo agent acknowledges the file.
    let turn = posted["turn_id"].as_str().unwrap();
    let events = until(api, &chat, turn, "agent_end").await;
    let answer = one(&events, turn, "message_end")["payload"]["text"].as_str().unwrap();
    assert!(
        answer.starts_with("I see you shared scores.csv (17 B, text/csv)."),
        "{answer}"
    );
    // A message naming no file of this chat is refused, and records nothing.
    let messages = |events: Vec<Value>| events.iter().filter(|e| e["type"] == "user_message_submitted").count();
    let before = messages(all_events(api, &chat).await);
    let (status, refused) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": "look", "files": ["att_nope"], "on_busy": "enqueue" })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(messages(all_events(api, &chat).await), before);
}

/// A file with the name of an earlier one replaces it, and its event says so.
pub(crate) async fn a_file_of_the_same_name_replaces_the_earlier_one<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let chat = new_chat(api).await;
    let first = upload(api, &chat, "notes.txt", "text/plain", b"one").await;
    let second = upload(api, &chat, "notes.txt", "text/plain", b"two!").await;
    let first_id = first["attachment"]["id"].as_str().unwrap();
    assert_eq!(second["replaces"], first_id);
    let events = all_events(api, &chat).await;
    let recorded = uploads(&events);
    assert_eq!(recorded.len(), 2);
    assert!(recorded[0]["payload"]["upload"].get("replaces").is_none());
    assert_eq!(recorded[1]["payload"]["upload"]["replaces"], first_id);
    let message = recorded[1]["payload"]["message"].as_str().unwrap();
    assert!(message.contains("replaces the earlier file"), "{message}");
    // Both stay downloadable by id.
    let (_, _, body) = download(api, &chat, first_id).await;
    assert_eq!(body, b"one");
}

/// Hostile names become safe base names or are refused; nothing can name a place outside the
/// chat's folder.
pub(crate) async fn hostile_filenames_are_made_safe_or_refused<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let chat = new_chat(api).await;
    let long = "x".repeat(10_000) + ".txt";
    for (raw, kept) in [
        ("../../etc/passwd", "passwd"),
        ("a/b", "b"),
        ("bad\u{0}name.txt", "badname.txt"),
        ("..\\..\\win.ini", "win.ini"),
    ] {
        let (status, declared) = declare(
            api,
            &chat,
            json!({ "filename": raw, "content_type": "text/plain", "size": 1 }),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{raw:?}: {declared}");
        assert_eq!(declared["attachment"]["filename"], kept, "{raw:?}");
    }
    let (status, declared) = declare(api, &chat, json!({ "filename": long, "size": 1 })).await;
    assert_eq!(status, StatusCode::CREATED);
    let kept = declared["attachment"]["filename"].as_str().unwrap();
    assert_eq!(kept.chars().count(), 200);
    assert!(kept.ends_with(".txt"));
    for refused in ["....", "..", "", "dir/", "\u{0}"] {
        let (status, body) = declare(api, &chat, json!({ "filename": refused, "size": 1 })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused:?}: {body}");
    }
    for bad in [
        json!({ "filename": "a", "size": -1 }),
        json!({ "filename": "a", "size": 1, "content_type": "not a type" }),
        json!({ "filename": "a", "size": 1, "sha256": "abc" }),
        json!({ "filename": "a", "size": 1, "extra": true }),
    ] {
        let (status, body) = declare(api, &chat, bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
}

/// Over the limit is refused before any upload; a completion of bytes never sent, or of the
/// wrong bytes, records nothing; an upload URL works once.
pub(crate) async fn uploads_are_held_to_their_declaration<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let chat = new_chat(api).await;
    // Over the limit (100 MiB by default): 413, nothing recorded.
    let (status, body) = declare(api, &chat, json!({ "filename": "big.bin", "size": 200u64 << 20 })).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let list = api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/attachments"), None)
        .await;
    assert_eq!(list["attachments"], json!([]));
    // Completed with nothing uploaded: 409, no event.
    let (_, declared) = declare(
        api,
        &chat,
        json!({ "filename": "a.txt", "content_type": "text/plain", "size": 5 }),
    )
    .await;
    let id = declared["attachment_id"].as_str().unwrap();
    let (status, body) = complete(api, &chat, id).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "upload_incomplete");
    assert!(uploads(&all_events(api, &chat).await).is_empty());
    // Not downloadable before it is completed.
    let (status, _, _) = download(api, &chat, id).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The wrong size is refused by whoever takes the bytes: Spool's route checks it; S3
    // refuses a length other than the signed one (`attachment_files.rs` checks the signature
    // covers it; the emulator does not check signatures).
    let (declared, id) = if declared["upload"]["url"].as_str().unwrap().starts_with('/') {
        let sent = send_bytes(api, &declared, b"toolong".to_vec()).await;
        assert!(sent.status().is_client_error(), "{}", sent.status());
        // A grant that is not one: refused, nothing kept.
        for target in [
            format!("{}/v1/uploads/%FF%00..", api.base),
            format!("{}/v1/uploads/{}", api.base, "x".repeat(10_000)),
        ] {
            let sent = reqwest::Client::new()
                .put(&target)
                .header("content-type", "text/plain")
                .body("hello")
                .send()
                .await
                .unwrap();
            assert!(sent.status().is_client_error(), "{}", sent.status());
        }
        // The refused upload used its URL up (`a_refused_upload_uses_its_url_up`): declare again.
        let (_, again) = declare(
            api,
            &chat,
            json!({ "filename": "a.txt", "content_type": "text/plain", "size": 5 }),
        )
        .await;
        let id = again["attachment_id"].as_str().unwrap().to_owned();
        (again, id)
    } else {
        (declared.clone(), id.to_owned())
    };
    let id = id.as_str();
    // The right bytes go; the URL then works no more.
    let sent = send_bytes(api, &declared, b"hello".to_vec()).await;
    assert!(sent.status().is_success(), "{}", sent.status());
    let again = send_bytes(api, &declared, b"HELLO".to_vec()).await;
    assert!(again.status().is_client_error(), "a second upload: {}", again.status());
    let (status, _) = complete(api, &chat, id).await;
    assert_eq!(status, StatusCode::OK);
    let (_, _, body) = download(api, &chat, id).await;
    assert_eq!(body, b"hello", "the first upload is the file");
    let again = send_bytes(api, &declared, b"HELLO".to_vec()).await;
    assert!(again.status().is_client_error(), "after completion: {}", again.status());
    // A declared checksum that the bytes do not have: 409, no event.
    let (_, declared) = declare(
        api,
        &chat,
        json!({ "filename": "b.txt", "content_type": "text/plain", "size": 5, "sha256": "00".repeat(32) }),
    )
    .await;
    let id = declared["attachment_id"].as_str().unwrap();
    let sent = send_bytes(api, &declared, b"hello".to_vec()).await;
    // S3 refuses bytes whose checksum is not the signed one; the emulator and Spool's own
    // route take them, and completing them is refused.
    if sent.status().is_success() {
        let (status, body) = complete(api, &chat, id).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(body["error"]["code"], "checksum_mismatch");
    } else {
        assert!(sent.status().is_client_error(), "{}", sent.status());
    }
    // The right checksum passes.
    let (_, declared) = declare(
        api,
        &chat,
        json!({ "filename": "c.txt", "content_type": "text/plain", "size": 5,
            "sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" }),
    )
    .await;
    let id = declared["attachment_id"].as_str().unwrap();
    assert!(
        send_bytes(api, &declared, b"hello".to_vec())
            .await
            .status()
            .is_success()
    );
    assert_eq!(complete(api, &chat, id).await.0, StatusCode::OK);
    assert_eq!(uploads(&all_events(api, &chat).await).len(), 2);
}

/// A completion that a crash cut off after the record was marked complete (before its event)
/// is finished by the client's retry, which records the file once (the sweep leaves complete
/// records alone: `attachment_files.rs`).
pub(crate) async fn an_interrupted_completion_is_finished_by_a_retry<H: Harness>(harness: &H) {
    use spool_chat::attachment::object_key;
    let stack = stack(harness).await;
    let api = &stack.api;
    let chat = new_chat(api).await;
    let (_, declared) = declare(
        api,
        &chat,
        json!({ "filename": "a.txt", "content_type": "text/plain", "size": 2 }),
    )
    .await;
    let id = declared["attachment_id"].as_str().unwrap();
    assert!(send_bytes(api, &declared, b"hi".to_vec()).await.status().is_success());
    // WHEN the first completion stopped right after marking the record complete
    let org = crate::support::org_of(api);
    let files = harness.files().await;
    files.keep(&object_key(&org, &chat, id)).await.unwrap();
    let marked = stack.metadata.complete_attachment(&org, &chat, id, 1).await.unwrap();
    assert!(marked.is_some());
    assert!(uploads(&all_events(api, &chat).await).is_empty());
    // THEN the retry records it, once
    let (status, first) = complete(api, &chat, id).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (_, again) = complete(api, &chat, id).await;
    assert_eq!(again["seq"], first["seq"]);
    assert_eq!(uploads(&all_events(api, &chat).await).len(), 1);
}

/// Under `spool serve`, an upload cut off part-way leaves nothing behind: no file, no
/// temporary file, and the URL still works for the whole file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upload_cut_off_leaves_nothing() {
    let harness = spool_tests::EmbeddedHarness::new();
    let stack = stack(&harness).await;
    let api = &stack.api;
    let chat = new_chat(api).await;
    let (_, declared) = declare(api, &chat, json!({ "filename": "a.bin", "size": 1_000_000 })).await;
    let url = format!("{}{}", api.base, declared["upload"]["url"].as_str().unwrap());
    // A client that sends half the file, then goes away.
    {
        use tokio::io::AsyncWriteExt;
        let address = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
        let path = &url[url.find(&address).unwrap() + address.len()..];
        let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
        let head = format!(
            "PUT {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000000\r\n\r\n"
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(&[7_u8; 500_000]).await.unwrap();
        socket.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let folder = harness
        .dir()
        .join("attachments")
        .join(crate::support::org_of(api))
        .join(&chat);
    let leftovers = || std::fs::read_dir(&folder).map(|d| d.count()).unwrap_or(0);
    spool_tests::eventually("no temporary file left", || async { (leftovers() == 0).then_some(()) }).await;
    let sent = send_bytes(api, &declared, vec![7_u8; 1_000_000]).await;
    assert!(sent.status().is_success(), "{}", sent.status());
    assert_eq!(
        complete(api, &chat, declared["attachment_id"].as_str().unwrap())
            .await
            .0,
        StatusCode::OK
    );
}

/// Another organization's chat and files are a 404, whatever the route.
pub(crate) async fn another_organizations_files_are_not_found<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (api, other) = (&stack.api, &stack.other);
    let chat = new_chat(api).await;
    let completed = upload(api, &chat, "secret.txt", "text/plain", b"mine").await;
    let id = completed["attachment"]["id"].as_str().unwrap();
    let (_, declared) = declare(api, &chat, json!({ "filename": "b.txt", "size": 1 })).await;
    let pending = declared["attachment_id"].as_str().unwrap();
    let (status, _) = declare(other, &chat, json!({ "filename": "x.txt", "size": 1 })).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(complete(other, &chat, pending).await.0, StatusCode::NOT_FOUND);
    let (status, _, body) = download(other, &chat, id).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!String::from_utf8_lossy(&body).contains("mine"));
    let (status, _) = other
        .call(Method::GET, &format!("/v1/sessions/{chat}/attachments"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Their own chat does not reach this one's files either.
    let theirs = new_chat(other).await;
    assert_eq!(download(other, &theirs, id).await.0, StatusCode::NOT_FOUND);
    assert_eq!(complete(other, &theirs, pending).await.0, StatusCode::NOT_FOUND);
    let (status, _) = other
        .call(
            Method::POST,
            &format!("/v1/sessions/{theirs}/messages"),
            Some(json!({ "content": "x", "files": [id] })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// An upload URL stops working when it expires: under `spool serve`, Spool refuses it; on AWS
/// the URL is signed to expire then (S3 refuses it; the emulator does not check expiry, so the
/// signature's lifetime is what is checked there).
pub(crate) async fn an_upload_url_expires<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let metadata: Arc<dyn Metadata> = Arc::new(harness.metadata().await);
    let limits = AttachmentLimits {
        upload_ttl: Duration::from_secs(1),
        max_bytes: 1000,
        complete_grace: Duration::ZERO,
        ..AttachmentLimits::default()
    };
    let base = serve_limited(
        log,
        metadata.clone(),
        harness.turns().await,
        harness.files().await,
        limits,
    )
    .await;
    let (api, _, _) = setup_on(metadata.as_ref(), &base).await;
    let chat = new_chat(&api).await;
    let (status, _) = declare(&api, &chat, json!({ "filename": "a.txt", "size": 1001 })).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "the configured limit");
    let (_, declared) = declare(
        &api,
        &chat,
        json!({ "filename": "a.txt", "content_type": "text/plain", "size": 2 }),
    )
    .await;
    let url = declared["upload"]["url"].as_str().unwrap();
    // One sent in time but completed too long after its URL expired is left to the clean-up.
    let (_, in_time) = declare(
        &api,
        &chat,
        json!({ "filename": "b.txt", "content_type": "text/plain", "size": 2 }),
    )
    .await;
    assert!(send_bytes(&api, &in_time, b"hi".to_vec()).await.status().is_success());
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let late = in_time["attachment_id"].as_str().unwrap();
    let (status, body) = complete(&api, &chat, late).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("expired"), "{body}");
    if url.starts_with('/') {
        let sent = send_bytes(&api, &declared, b"hi".to_vec()).await;
        assert_eq!(sent.status(), StatusCode::FORBIDDEN);
        let body: Value = sent.json().await.unwrap();
        assert!(body["error"]["message"].as_str().unwrap().contains("expired"), "{body}");
        // A forged or mangled grant is refused the same way.
        let forged = json!({ "upload": { "method": "PUT", "url": format!("{url}x"), "headers": declared["upload"]["headers"] } });
        assert_eq!(
            send_bytes(&api, &forged, b"hi".to_vec()).await.status(),
            StatusCode::FORBIDDEN
        );
    } else {
        assert!(
            url.contains("X-Amz-Expires=1&") || url.ends_with("X-Amz-Expires=1"),
            "{url}"
        );
    }
    assert!(uploads(&all_events(&api, &chat).await).is_empty());
}

/// Under `spool serve`, bytes refused for their type or their size use the upload URL up: the
/// right bytes are refused after them, and the file is gone, to be declared again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_upload_uses_its_url_up() {
    let harness = spool_tests::EmbeddedHarness::new();
    let stack = stack(&harness).await;
    let api = &stack.api;
    let chat = new_chat(api).await;
    for (kind, bytes) in [("text/html", &b"hello"[..]), ("text/plain", &b"toolong"[..])] {
        // GIVEN a declared file
        let (_, declared) = declare(
            api,
            &chat,
            json!({ "filename": "a.txt", "content_type": "text/plain", "size": 5 }),
        )
        .await;
        let id = declared["attachment_id"].as_str().unwrap();
        let url = format!("{}{}", api.base, declared["upload"]["url"].as_str().unwrap());

        // WHEN bytes of another type or size are sent to its URL
        let put = |kind: &'static str, bytes: &'static [u8]| {
            reqwest::Client::new()
                .put(&url)
                .header("content-type", kind)
                .body(bytes)
                .send()
        };
        let refused = put(kind, bytes).await.unwrap();

        // THEN they are refused, and so are the right bytes after them; the file is gone
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{kind}");
        let body: Value = refused.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("declare the file again"),
            "{body}"
        );
        let again = put("text/plain", b"hello").await.unwrap();
        assert_eq!(
            again.status(),
            StatusCode::FORBIDDEN,
            "{kind}: the right bytes after a refusal"
        );
        assert_eq!(complete(api, &chat, id).await.0, StatusCode::NOT_FOUND);
    }
    let list = api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/attachments"), None)
        .await;
    assert_eq!(list["attachments"], json!([]));
}

on_both_backends!(attachments_http:
    a_file_is_uploaded_recorded_once_and_downloaded,
    a_file_of_the_same_name_replaces_the_earlier_one,
    hostile_filenames_are_made_safe_or_refused,
    uploads_are_held_to_their_declaration,
    another_organizations_files_are_not_found,
    an_upload_url_expires,
    an_interrupted_completion_is_finished_by_a_retry,
);
