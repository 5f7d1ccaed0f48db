//! # The companion's routes
//!
//! - `POST /handshake {version, user_agent}` → `{library_id, jwt, capabilities, version,
//!   timestamp}`: Spool's token for the library, for the UI to present to Spool;
//! - `GET /context-for-query?q=` → `{query, relevant_k_ids, relevant_d_ids, summary, confidence,
//!   timestamp}`;
//! - `GET /open-loops` → `{open_loops: [{id, title, created_at, last_mentioned}], timestamp}`;
//! - `GET /proactive-suggestions` → `{suggestions: [{title, action, confidence, source}],
//!   timestamp}`;
//! - `POST /capture {title?, text, source?}` → `201 {id, path, title, captured_at}`: a new
//!   markdown note in the library, indexed before the answer ([`crate::capture`]); a bad request
//!   is a `400` that writes nothing;
//! - `GET /mcp/tools` → `{servers: [{name, tools: [{name, server, tool, description?,
//!   input_schema, read_only}], skipped?, error?}], timestamp}`: the tools of the person's own MCP
//!   servers ([`crate::mcp`]), started on first use;
//! - `POST /mcp/call {server, tool, arguments?}` → `{content, structured_content?, is_error}`: a
//!   call run on the server; a server not configured is a `404`, one that fails or does not
//!   answer in time a `502` that says why.
//!
//! Browsers may call it only from `localhost` or `127.0.0.1` pages and from the hosted UI
//! origins it is given: a request from any other origin is refused (`403`), so a web page the
//! person happens to visit cannot read their notes. It listens on loopback only
//! ([`check_loopback`]) and answers only requests addressed to loopback's names, so a page that
//! re-points its own name at 127.0.0.1 (DNS rebinding) is refused too.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Json, Router,
    extract::{Query, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    Library,
    capture::{Capture, CaptureError},
    library::rfc3339,
    mcp::{CallError, McpHub},
    spool::SpoolLink,
};

/// The longest question answered, in characters.
const MAX_QUERY_CHARS: usize = 1000;

/// What the routes share.
#[derive(Debug)]
pub struct CompanionState {
    /// The library.
    pub library: Arc<Library>,
    /// The link to Spool.
    pub spool: SpoolLink,
    /// Hosted UI origins allowed besides loopback pages (`https://chat.example.com`).
    pub origins: Vec<String>,
    /// The person's MCP servers.
    pub mcp: Arc<McpHub>,
}

/// The companion's routes over `state`.
pub fn router(state: Arc<CompanionState>) -> Router {
    Router::new()
        .route("/handshake", post(handshake))
        .route("/context-for-query", get(context_for_query))
        .route("/open-loops", get(open_loops))
        .route("/proactive-suggestions", get(suggestions))
        .route("/capture", post(capture))
        .route("/mcp/tools", get(mcp_tools))
        .route("/mcp/call", post(mcp_call))
        .route("/healthz", get(|| async { Json(json!({ "ok": true })) }))
        .layer(middleware::from_fn_with_state(state.clone(), cors))
        .with_state(state)
}

/// Refuses an address other than loopback: the companion serves one person's notes to their
/// own browser.
pub fn check_loopback(addr: SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "the companion listens on loopback only (127.0.0.1 or ::1), not {addr}: it serves your notes to your own browser"
        ))
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({ "error": { "code": code, "message": message.into() } })),
    )
        .into_response()
}

/// Whether a page at `origin` may call the companion.
fn allowed(origin: &str, configured: &[String]) -> bool {
    if configured.iter().any(|o| o.trim_end_matches('/') == origin) {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let host = rest.rsplit_once(':').map_or(rest, |(host, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            host
        } else {
            rest
        }
    });
    matches!(scheme, "http" | "https") && matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// Whether a request's `Host` names loopback: a page whose own name was re-pointed at
/// 127.0.0.1 (DNS rebinding) sends its name here, and its same-origin reads carry no `Origin`.
fn loopback_host(host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

/// CORS for the allowed origins only; a request from another origin, or addressed to another
/// name than loopback's, is refused before it runs.
async fn cors(State(state): State<Arc<CompanionState>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    if !loopback_host(host) {
        tracing::warn!(
            host = host.unwrap_or("none"),
            "refused a request addressed to another name than loopback"
        );
        return error(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            "address the companion as 127.0.0.1 or localhost",
        );
    }
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_owned);
    let Some(origin) = origin else {
        // Not a browser's cross-origin request (curl, the companion's own checks).
        return next.run(request).await;
    };
    if !allowed(&origin, &state.origins) {
        tracing::warn!(%origin, "refused a request from an origin that is not allowed");
        return error(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            format!("pages at {origin} may not use this companion; start it with --origin {origin} to allow them"),
        );
    }
    let private_network = request.headers().contains_key("access-control-request-private-network");
    let mut response = if request.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    }
    headers.insert(header::VARY, HeaderValue::from_static("origin"));
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("content-type"),
    );
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    if private_network {
        // A hosted (public) page calling a loopback address: Chrome's private network access.
        headers.insert("access-control-allow-private-network", HeaderValue::from_static("true"));
    }
    response
}

#[derive(Debug, Deserialize)]
struct HandshakeBody {
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    user_agent: Option<String>,
}

async fn handshake(State(state): State<Arc<CompanionState>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let request: HandshakeBody = if body.is_empty() {
        HandshakeBody {
            version: None,
            user_agent: None,
        }
    } else {
        match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("the body is not valid here: {e}"),
                );
            }
        }
    };
    let now = now_ms();
    tracing::info!(
        library_id = state.spool.library_id(),
        at = %rfc3339(now),
        client = request.user_agent.as_deref().unwrap_or("unknown"),
        origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()).unwrap_or("none"),
        "handshake"
    );
    match state.spool.token(now).await {
        Ok(token) => Json(json!({
            "library_id": state.spool.library_id(),
            "jwt": token.jwt,
            "capabilities": token.capabilities,
            "version": request.version.unwrap_or_else(|| "1".to_owned()),
            "timestamp": rfc3339(now),
        }))
        .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "no token from Spool");
            error(StatusCode::BAD_GATEWAY, "spool_unavailable", e.to_string())
        }
    }
}

#[derive(Debug, Deserialize)]
struct QueryParams {
    #[serde(default)]
    q: Option<String>,
}

async fn context_for_query(State(state): State<Arc<CompanionState>>, Query(params): Query<QueryParams>) -> Response {
    let q = params.q.unwrap_or_default();
    if q.trim().is_empty() || q.chars().count() > MAX_QUERY_CHARS {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("give the question as ?q=, 1 to {MAX_QUERY_CHARS} characters"),
        );
    }
    let library = state.library.clone();
    match tokio::task::spawn_blocking(move || library.context(&q)).await {
        Ok(Ok(context)) => {
            let mut body = serde_json::to_value(context).unwrap_or_default();
            body["timestamp"] = Value::String(rfc3339(now_ms()));
            Json(body).into_response()
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, "index_failed", e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "index_failed", e.to_string()),
    }
}

async fn open_loops(State(state): State<Arc<CompanionState>>) -> Response {
    let library = state.library.clone();
    match tokio::task::spawn_blocking(move || library.open_loops()).await {
        Ok(Ok(loops)) => Json(json!({ "open_loops": loops, "timestamp": rfc3339(now_ms()) })).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, "index_failed", e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "index_failed", e.to_string()),
    }
}

async fn suggestions(State(state): State<Arc<CompanionState>>) -> Response {
    let library = state.library.clone();
    let now = now_ms();
    match tokio::task::spawn_blocking(move || library.suggestions(now)).await {
        Ok(Ok(list)) => Json(json!({ "suggestions": list, "timestamp": rfc3339(now) })).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, "index_failed", e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "index_failed", e.to_string()),
    }
}

/// Whether a request says its body is JSON: a browser sends that across origins only after
/// asking first (CORS), which a page of another origin is refused.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        })
}

async fn mcp_tools(State(state): State<Arc<CompanionState>>) -> Response {
    let servers = state.mcp.tools().await;
    Json(json!({ "servers": servers, "timestamp": rfc3339(now_ms()) })).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpCall {
    server: String,
    tool: String,
    #[serde(default)]
    arguments: Option<serde_json::Map<String, Value>>,
}

async fn mcp_call(State(state): State<Arc<CompanionState>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if !is_json(&headers) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the call as JSON (`content-type: application/json`): {server, tool, arguments?}",
        );
    }
    let call: McpCall = match serde_json::from_slice(&body) {
        Ok(call) => call,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("send {{server, tool, arguments?}}: {e}"),
            );
        }
    };
    match state.mcp.call(&call.server, &call.tool, call.arguments).await {
        Ok(result) => Json(result).into_response(),
        Err(e @ CallError::UnknownServer(_)) => error(StatusCode::NOT_FOUND, "not_found", e.to_string()),
        Err(e @ CallError::Failed(_)) => error(StatusCode::BAD_GATEWAY, "mcp_failed", e.to_string()),
    }
}

async fn capture(State(state): State<Arc<CompanionState>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if !is_json(&headers) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the note as JSON (`content-type: application/json`): {title?, text, source?}",
        );
    }
    let request: Capture = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("send {{title?, text, source?}}: {e}"),
            );
        }
    };
    let library = state.library.clone();
    match tokio::task::spawn_blocking(move || library.capture(&request, now_ms())).await {
        Ok(Ok(note)) => (StatusCode::CREATED, Json(note)).into_response(),
        Ok(Err(CaptureError::Invalid(message))) => error(StatusCode::BAD_REQUEST, "bad_request", message),
        Ok(Err(CaptureError::Library(e))) => {
            tracing::error!(error = %e, "cannot capture a note");
            error(StatusCode::INTERNAL_SERVER_ERROR, "capture_failed", e.to_string())
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "capture_failed", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The companion's routes over a library at `root`, listening on loopback: its URL.
    async fn serve(root: &std::path::Path) -> String {
        let state = Arc::new(CompanionState {
            library: Arc::new(Library::open(root).unwrap()),
            spool: SpoolLink::new("http://127.0.0.1:9", "spool_k_s".to_owned(), "lib_1".to_owned()),
            origins: Vec::new(),
            mcp: Arc::new(McpHub::default()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router(state)).await });
        url
    }

    #[tokio::test]
    async fn a_capture_is_a_new_note_in_the_library_found_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("notes");
        std::fs::create_dir_all(&root).unwrap();
        let url = serve(&root).await;
        let http = reqwest::Client::new();
        let post = |body: Value| {
            http.post(format!("{url}/capture"))
                .header("origin", "http://127.0.0.1:8080")
                .json(&body)
                .send()
        };
        // GIVEN a capture from a loopback page, twice under one title, once with a path for one
        let first =
            post(json!({ "title": "Ferry times", "text": "The ferry leaves at 7:40.", "source": "chat ses_1" }))
                .await
                .unwrap();
        assert_eq!(first.status(), 201);
        let first: Value = first.json().await.unwrap();
        let second: Value = post(json!({ "title": "Ferry times", "text": "And returns at 18:10." }))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let sneaky: Value = post(json!({ "title": "../../etc/x", "text": "not there" }))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // THEN each is a new file in the library, none replaced, none outside
        assert_eq!(first["path"], "ferry-times.md");
        assert_eq!(second["path"], "ferry-times-2.md");
        assert_eq!(sneaky["path"], "etc-x.md");
        assert!(!dir.path().join("etc").exists());
        let text = std::fs::read_to_string(root.join("ferry-times.md")).unwrap();
        assert!(
            text.contains("title: \"Ferry times\"\nsource: \"chat ses_1\"\ncaptured_at: "),
            "{text}"
        );
        assert!(text.ends_with("# Ferry times\n\nThe ferry leaves at 7:40.\n"), "{text}");
        // AND the next question finds it with no rescan in between
        let context: Value = http
            .get(format!("{url}/context-for-query?q=ferry%20leaves"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(context["relevant_k_ids"][0], first["id"], "{context}");
        // AND bad requests are 4xx with a message, and write nothing
        for (body, status) in [
            (json!({ "text": "  " }), 400),
            (json!({ "title": "x" }), 400),
            (json!({ "text": "x", "path": "/etc/passwd" }), 400),
            (
                json!({ "text": "x".repeat(crate::capture::MAX_CAPTURE_TEXT_BYTES + 1) }),
                400,
            ),
            (json!({ "title": "a\nb", "text": "x" }), 400),
        ] {
            let refused = post(body).await.unwrap();
            assert_eq!(refused.status(), status);
            let answer: Value = refused.json().await.unwrap();
            assert!(
                answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{answer}"
            );
        }
        let plain = http
            .post(format!("{url}/capture"))
            .header("content-type", "text/plain")
            .body(r#"{"text":"x"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(plain.status(), 415);
        let evil = http
            .post(format!("{url}/capture"))
            .header("origin", "https://evil.example")
            .json(&json!({ "text": "planted" }))
            .send()
            .await
            .unwrap();
        assert_eq!(evil.status(), 403);
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 3);
    }

    #[test]
    fn only_loopback_pages_and_configured_origins_are_allowed() {
        let configured = vec!["https://chat.example.com".to_owned()];
        for ok in [
            "http://localhost:8080",
            "http://127.0.0.1:5173",
            "http://localhost",
            "https://chat.example.com",
            "http://[::1]:8080",
        ] {
            assert!(allowed(ok, &configured), "{ok}");
        }
        for refused in [
            "https://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io:8080",
            "https://chat.example.com.evil.example",
            "null",
            "file://",
        ] {
            assert!(!allowed(refused, &configured), "{refused}");
        }
        for host in ["127.0.0.1:8826", "localhost:8826", "[::1]:8826", "localhost"] {
            assert!(loopback_host(Some(host)), "{host}");
        }
        for host in [
            "evil.example:8826",
            "127.0.0.1.nip.io:8826",
            "localhost.evil.example",
            "",
        ] {
            assert!(!loopback_host(Some(host)), "{host}");
        }
        assert!(!loopback_host(None));
        assert!(check_loopback("127.0.0.1:8826".parse().unwrap()).is_ok());
        assert!(check_loopback("0.0.0.0:8826".parse().unwrap()).is_err());
    }
}
