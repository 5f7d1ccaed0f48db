//! The runner's part of the lambda check: a CLI turn of a workspace whose CLI agents run on
//! runners (Lambda's default), taken by a real `spool runner` process that reaches the API
//! function only as a runner on a developer's machine would: through "CloudFront" (a proxy that
//! adds the origin secret), with a runner key and nothing else.

use std::{net::SocketAddr, path::Path, process::Stdio};

use anyhow::{Context, Result};
use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, StatusCode},
    response::Response,
};
use tokio::process::{Child, Command};

use super::repo;

/// What the fake CLI answers: a reply and an action, in the third source design's format.
pub(crate) const ANSWER: &str = "Hello from a CLI on a runner.";

/// A CLI that answers [`ANSWER`] and renames the chat, as `claude` on the runner's machine.
pub(crate) fn fake_claude(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("claude");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ \"$1\" = \"--version\" ]; then echo '9.9.9 (lambda-check)'; exit 0; fi\n\
             echo '{{\"message\": \"{ANSWER}\", \"actions\": [{{\"type\": \"rename_chat\", \"title\": \"Run on a runner\"}}]}}' \
             > \"$SPOOL_OUTPUT_FILE\"\n"
        ),
    )?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[derive(Clone)]
struct Cdn {
    http: reqwest::Client,
    target: String,
    origin: String,
}

/// Stands in for CloudFront before the API function: every request forwarded to `target` with
/// the origin secret added. Its URL.
pub(crate) async fn cdn(target: String, origin: String) -> Result<String> {
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()?;
    let state = Cdn { http, target, origin };
    let app = axum::Router::new().fallback(forward).with_state(state);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}"))
}

async fn forward(State(cdn): State<Cdn>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let body: Bytes = axum::body::to_bytes(body, 16 << 20).await.unwrap_or_default();
    let mut headers = HeaderMap::new();
    for (name, value) in &parts.headers {
        if name != "host" && name != "content-length" {
            headers.insert(name.clone(), value.clone());
        }
    }
    let sent = cdn
        .http
        .request(parts.method, format!("{}{path}", cdn.target))
        .headers(headers)
        .header(spool_edge::ORIGIN_HEADER, &cdn.origin)
        .body(body)
        .send()
        .await;
    let Ok(answer) = sent else {
        return Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::empty())
            .unwrap_or_default();
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != "transfer-encoding" && name != "content-length" {
            response = response.header(name, value);
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    response.body(Body::from(bytes)).unwrap_or_default()
}

/// `spool runner` against `url` with `key`, the fake CLI in `bin` its only CLI; its output in
/// `logs/spool-runner.log`.
pub(crate) fn start(url: &str, key: &str, bin: &Path, logs: &Path) -> Result<Child> {
    let log = std::fs::File::create(logs.join("spool-runner.log"))?;
    Command::new(repo().join("target/debug/spool"))
        .args(["runner", "--url", url, "--name", "lambda-check"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SPOOL_API_KEY", key)
        .env("SPOOL_CLI_PATH", bin)
        .env("SPOOL_CLI_WORK_DIR", logs.join("runner-work"))
        .env("RUST_LOG", "info")
        .stdout(log.try_clone()?)
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .context("start target/debug/spool runner")
}
