//! `spool serve`'s log never holds a credential: every kind Spool issues is used on the routes
//! that carry it, mistakes included, and none is then found in what the server logged.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::mpsc,
};

/// The built-in agent's script: it answers at once.
const SCRIPT: &str = r#"{"word_delay_ms": 0, "rules": [], "default": [{"say": "Hello."}]}"#;

/// A webhook receiver on loopback: answers `200 {}` to every request, and hands over each
/// request's body.
async fn receiver() -> (String, mpsc::UnboundedReceiver<Value>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (sender, bodies) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let sender = sender.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0_u8; 8192];
                let body = loop {
                    let n = socket.read(&mut buffer).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let Some((head, body)) = text.split_once("\r\n\r\n") else {
                        continue;
                    };
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if body.len() >= length {
                        break body.to_owned();
                    }
                };
                let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = sender.send(serde_json::from_str(&body).unwrap_or(Value::Null));
            });
        }
    });
    (url, bodies)
}

/// A client of the server at `base` with `token`.
struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn ok(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = self.call(method.clone(), path, body).await;
        assert!((200..300).contains(&status), "{method} {path}: {status} {answer}");
        answer
    }

    /// A `PUT` of `bytes` as `kind` to a URL relative to the server, without the token.
    async fn put(&self, url: &str, kind: &str, bytes: &'static [u8]) -> u16 {
        self.http
            .put(format!("{}{url}", self.base))
            .header("content-type", kind)
            .body(bytes)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// A `GET` of a URL relative to the server, without the token.
    async fn get(&self, url: &str) -> u16 {
        self.http
            .get(format!("{}{url}", self.base))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}

/// What may not appear in a log of `credential`: itself, and its secret part (a JWT's
/// signature, an API key's secret) in case only that were logged.
fn needles(credential: &str) -> Vec<String> {
    let mut found = vec![credential.to_owned()];
    if let Some(last) = credential.rsplit(['.', '_']).next()
        && last.len() >= 16
    {
        found.push(last.to_owned());
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_spool_issues_is_ever_logged() {
    // GIVEN `spool serve` logging as `make test` runs it, and more (Spool's own debug lines)
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir", "data"])
        .current_dir(dir.path())
        .env_remove("SPOOL_ADDR")
        .env_remove("SPOOL_WEB_DIR")
        .env("RUST_LOG", "info,spool=debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("spawn spool");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    for _ in 0..3 {
        stdout.read_line(&mut banner).unwrap();
    }
    let word = |prefix: &str| {
        banner
            .split_whitespace()
            .find(|w| w.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {banner:?}"))
            .to_owned()
    };
    let base = word("http://");
    let api_key = word("spool_");
    let http = reqwest::Client::new();
    let mut credentials = vec![api_key.clone()];

    // WHEN a person signs in (and someone tries a wrong key)
    let handshake = |key: String| {
        http.post(format!("{base}/v1/handshake"))
            .json(&json!({ "api_key": key }))
            .send()
    };
    let signed_in: Value = handshake(api_key.clone()).await.unwrap().json().await.unwrap();
    let token = signed_in["jwt"].as_str().unwrap().to_owned();
    credentials.push(token.clone());
    let wrong_key = format!("{}{}", &api_key[..api_key.len() - 8], "00000000");
    assert_eq!(handshake(wrong_key.clone()).await.unwrap().status(), 401);
    credentials.push(wrong_key);
    let client = Client {
        http: http.clone(),
        base: base.clone(),
        token: token.clone(),
    };
    let (hook_url, mut hook_bodies) = receiver().await;

    // AND has a workspace with a webhook, and a chat with a turn of the built-in agent
    let ws = client
        .ok(reqwest::Method::POST, "/v1/workspaces", Some(json!({"name": "Logs"})))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let hook = client
        .ok(
            reqwest::Method::POST,
            &format!("/v1/workspaces/{ws}/webhooks"),
            Some(json!({ "url": hook_url })),
        )
        .await;
    credentials.push(hook["secret"].as_str().unwrap().to_owned());
    let agents = client
        .ok(reqwest::Method::GET, &format!("/v1/workspaces/{ws}/agents"), None)
        .await;
    let builtin = agents["agents"][0]["id"].as_str().unwrap().to_owned();
    client
        .ok(
            reqwest::Method::PATCH,
            &format!("/v1/agents/{builtin}"),
            Some(json!({ "instruction": SCRIPT, "runtime": "scripted" })),
        )
        .await;
    let chat = client
        .ok(
            reqwest::Method::POST,
            "/v1/sessions",
            Some(json!({ "workspace_id": ws })),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    client
        .ok(
            reqwest::Method::POST,
            &format!("/v1/sessions/{chat}/messages"),
            Some(json!({ "content": "hello" })),
        )
        .await;
    let delivered = tokio::time::timeout(Duration::from_secs(30), hook_bodies.recv())
        .await
        .expect("the chat webhook is delivered")
        .unwrap();
    assert_eq!(delivered["type"], "turn.completed", "{delivered}");

    // AND uploads a file, sends another of the wrong type, and mistypes an upload URL
    for (kind, status) in [("text/plain", 204), ("text/html", 400)] {
        let declared = client
            .ok(
                reqwest::Method::POST,
                &format!("/v1/sessions/{chat}/attachments"),
                Some(json!({ "filename": "a.txt", "content_type": "text/plain", "size": 5 })),
            )
            .await;
        let url = declared["upload"]["url"].as_str().unwrap().to_owned();
        credentials.push(url.trim_start_matches("/v1/uploads/").to_owned());
        assert_eq!(client.put(&url, kind, b"hello").await, status, "{kind}");
        assert_eq!(client.get(&url).await, 405);
        assert_eq!(client.put(&format!("{url}/x"), kind, b"hello").await, 404);
    }

    // AND reads the chat's stream with a read grant, with `?token=`, and with a token put in
    // the path by mistake
    let grant = client
        .ok(
            reqwest::Method::POST,
            "/v1/read-tokens",
            Some(json!({ "path": format!("sessions/{chat}") })),
        )
        .await;
    let read_token = grant["read_token"].as_str().unwrap().to_owned();
    credentials.push(read_token.clone());
    let stream = format!("/v1/stream/sessions/{chat}?offset=-1");
    assert_eq!(client.get(&format!("{stream}&read_token={read_token}")).await, 200);
    assert_eq!(client.get(&format!("{stream}&token={token}")).await, 200);
    assert_eq!(client.get(&format!("/v1/stream/{token}?token={token}")).await, 404);

    // AND is woken by a webhook subscription and finishes the wake with its callback token
    client
        .ok(reqwest::Method::PUT, "/v1/stream/jobs/1", Some(json!({"n": 1})))
        .await;
    let sub = "/v1/stream/__ds/subscriptions/logs";
    client
        .ok(
            reqwest::Method::PUT,
            sub,
            Some(json!({"type": "webhook", "streams": ["jobs/1"], "webhook": {"url": hook_url}})),
        )
        .await;
    client
        .ok(reqwest::Method::POST, "/v1/stream/jobs/1", Some(json!({"n": 2})))
        .await;
    let woken = loop {
        let body = tokio::time::timeout(Duration::from_secs(30), hook_bodies.recv())
            .await
            .expect("the subscription's wake is delivered")
            .unwrap();
        if body.get("callback_token").is_some() {
            break body;
        }
    };
    let callback_token = woken["callback_token"].as_str().unwrap().to_owned();
    credentials.push(callback_token.clone());
    let receiver = Client {
        http: http.clone(),
        base: base.clone(),
        token: callback_token,
    };
    receiver
        .ok(
            reqwest::Method::POST,
            &format!("{sub}/callback"),
            Some(json!({"wake_id": woken["wake_id"], "generation": woken["generation"], "done": true})),
        )
        .await;

    // AND the server stops
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let mut stopped = false;
    for _ in 0..150 {
        if child.try_wait().unwrap().is_some() {
            stopped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !stopped {
        let _ = child.kill();
        let _ = child.wait();
    }

    // THEN the log shows the requests, and no credential
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("/v1/uploads/[redacted]"), "{log}");
    assert!(log.contains("/v1/read-tokens") && log.contains("callback"), "{log}");
    for credential in &credentials {
        for needle in needles(credential) {
            assert!(!log.contains(&needle), "the log holds `{needle}`:\n{log}");
        }
    }
}
