//! The OpenAPI document as tests use it: which operation a request is, whether an answer is one
//! the document promises (its status, and its JSON body against the schema), and the list of
//! every operation, so that tests which must cover every route take the list from the document
//! rather than from a hand-written copy that a new route would not be in.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Mutex,
};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::Api;

/// One operation of the document: its method and path template.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Operation {
    pub(crate) method: String,
    pub(crate) template: String,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method.to_uppercase(), self.template)
    }
}

impl Operation {
    /// The template with `{…}` replaced by `fill(name)`.
    pub(crate) fn path(&self, fill: impl Fn(&str) -> String) -> String {
        self.template
            .split('/')
            .map(
                |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some(name) => fill(name),
                    None => segment.to_owned(),
                },
            )
            .collect::<Vec<_>>()
            .join("/")
    }

    /// The method as reqwest's.
    pub(crate) fn method(&self) -> Method {
        Method::from_bytes(self.method.to_uppercase().as_bytes()).unwrap()
    }
}

/// `GET /v1/openapi.json`, and what it says.
pub(crate) struct Spec {
    pub(crate) doc: Value,
    /// The statuses each operation answered, as checked.
    seen: Mutex<BTreeMap<Operation, BTreeSet<u16>>>,
}

impl Spec {
    /// The document the server serves (which must itself be a 200 with JSON).
    pub(crate) async fn fetch(api: &Api) -> Self {
        let response = api
            .http
            .get(format!("{}/v1/openapi.json", api.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let doc: Value = response.json().await.unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        Self {
            doc,
            seen: Mutex::default(),
        }
    }

    /// Every operation of the document.
    pub(crate) fn operations(&self) -> Vec<Operation> {
        let mut list = Vec::new();
        for (template, item) in self.doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                list.push(Operation {
                    method: method.clone(),
                    template: template.clone(),
                });
            }
        }
        list.sort();
        list
    }

    /// The operation a request is: the template that matches its path with the most literal
    /// segments (`/v1/stream/{path}` takes the rest of the path).
    pub(crate) fn operation_of(&self, method: &Method, path: &str) -> Option<Operation> {
        let path = path.split('?').next().unwrap();
        let method = method.as_str().to_lowercase();
        let segments: Vec<&str> = path.split('/').collect();
        let mut best: Option<(usize, Operation)> = None;
        for op in self.operations().into_iter().filter(|op| op.method == method) {
            let template: Vec<&str> = op.template.split('/').collect();
            let rest = template.last() == Some(&"{path}");
            let same = |t: &[&str], s: &[&str]| t.iter().zip(s).all(|(t, s)| t.starts_with('{') || t == s);
            let fits = if rest {
                segments.len() >= template.len()
                    && same(&template[..template.len() - 1], &segments[..template.len() - 1])
            } else {
                segments.len() == template.len() && same(&template, &segments)
            };
            let literal = template.iter().filter(|t| !t.starts_with('{')).count();
            if fits && best.as_ref().is_none_or(|(l, _)| literal > *l) {
                best = Some((literal, op));
            }
        }
        best.map(|(_, op)| op)
    }

    fn operation(&self, op: &Operation) -> &Value {
        &self.doc["paths"][&op.template][&op.method]
    }

    /// Validates `value` against `schema`, whose `$ref`s point into the document's components.
    pub(crate) fn validate(&self, schema: &Value, value: &Value) -> Result<(), String> {
        let mut root = schema.clone();
        if let Some(object) = root.as_object_mut() {
            object.insert("components".to_owned(), self.doc["components"].clone());
        }
        let validator = jsonschema::validator_for(&root).map_err(|e| format!("the schema is not valid: {e}"))?;
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Whether an answer is one the document promises for the request: its status is listed,
    /// and a JSON body matches that status's schema. A successful request's own JSON body must
    /// match the request schema too (so the document describes what clients really send).
    pub(crate) fn check(
        &self,
        method: &Method,
        path: &str,
        request: Option<&Value>,
        status: StatusCode,
        content_type: &str,
        body: &[u8],
    ) -> Result<(), String> {
        let op = self
            .operation_of(method, path)
            .ok_or_else(|| format!("{method} {path} is not in the document"))?;
        self.seen
            .lock()
            .unwrap()
            .entry(op.clone())
            .or_default()
            .insert(status.as_u16());
        let operation = self.operation(&op);
        let response = &operation["responses"][status.as_str()];
        if response.is_null() {
            return Err(format!("{op} answered {status}, which the document does not list"));
        }
        if let Some(schema) = response["content"]["application/json"].get("schema") {
            let value: Value = serde_json::from_slice(body).map_err(|e| {
                format!(
                    "{op} {status}: the body is not JSON ({e}): {}",
                    String::from_utf8_lossy(body)
                )
            })?;
            self.validate(schema, &value)
                .map_err(|e| format!("{op} {status}: the body does not match the document: {e}\n{value}"))?;
        } else if let Some(content) = response["content"].as_object() {
            let promised = content
                .keys()
                .any(|c| c == "*/*" || content_type.starts_with(c.as_str()));
            let stream_bytes = op.template == "/v1/stream/{path}";
            if !promised && !stream_bytes {
                return Err(format!(
                    "{op} {status}: `{content_type}` is not among {:?}",
                    content.keys()
                ));
            }
        } else if !body.is_empty() && !content_type.starts_with("application/json") {
            return Err(format!(
                "{op} {status}: a `{content_type}` body the document does not describe"
            ));
        }
        if status.is_success()
            && let Some(request) = request
            && let Some(schema) = operation["requestBody"]["content"]["application/json"].get("schema")
        {
            self.validate(schema, request)
                .map_err(|e| format!("{op}: the request body {request} does not match the document: {e}"))?;
        }
        Ok(())
    }

    /// The statuses every operation answered in checked calls.
    pub(crate) fn seen(&self) -> BTreeMap<Operation, BTreeSet<u16>> {
        self.seen.lock().unwrap().clone()
    }
}

/// A client whose every answer is checked against the document.
pub(crate) struct Checked<'a> {
    pub(crate) api: &'a Api,
    pub(crate) spec: &'a Spec,
}

impl Checked<'_> {
    /// A JSON call; panics when the answer is not one the document promises.
    pub(crate) async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self
            .api
            .http
            .request(method.clone(), format!("{}{path}", self.api.base));
        if let Some(token) = &self.api.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = &body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let content_type = content_type(&response);
        let bytes = response.bytes().await.unwrap();
        if let Err(e) = self
            .spec
            .check(&method, path, body.as_ref(), status, &content_type, &bytes)
        {
            panic!("{e}");
        }
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// A call that must succeed; its JSON.
    pub(crate) async fn ok(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, value) = self.call(method.clone(), path, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {value}");
        value
    }

    /// A call that must be refused with `status` and the contract's error body.
    pub(crate) async fn refused(&self, status: u16, method: Method, path: &str, body: Option<Value>) -> Value {
        let (got, value) = self.call(method.clone(), path, body).await;
        assert_eq!(got, status, "{method} {path}: {value}");
        assert!(value["error"]["code"].is_string(), "{value}");
        value
    }

    /// A request of any kind (raw bytes, headers): its status, headers and body. A live
    /// answer (server-sent events, a long-poll) is checked by its status and type, and its
    /// body left unread, for it may never end.
    pub(crate) async fn raw(
        &self,
        request: reqwest::RequestBuilder,
        method: Method,
        path: &str,
    ) -> (StatusCode, reqwest::header::HeaderMap, bytes::Bytes) {
        let request = match &self.api.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request.send().await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let content_type = content_type(&response);
        let live = content_type.starts_with("text/event-stream") || method == Method::HEAD;
        let body = if live {
            bytes::Bytes::new()
        } else {
            response.bytes().await.unwrap()
        };
        if let Err(e) = self.spec.check(&method, path, None, status, &content_type, &body) {
            panic!("{e}");
        }
        (status, headers, body)
    }
}

fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// A JSON body that is valid for `op` (so that a refusal is about who asks, not what is sent),
/// from a table that must name every operation that takes a body.
pub(crate) fn valid_body(op: &Operation, fill: &dyn Fn(&str) -> String) -> Option<Value> {
    let m = op.method.as_str();
    let body = match (m, op.template.as_str()) {
        ("post", "/v1/handshake") => json!({ "api_key": fill("api_key") }),
        ("post", "/v1/workspaces") => json!({ "title": "Docs" }),
        ("patch", "/v1/workspaces/{id}") => json!({ "title": "Renamed" }),
        ("post", "/v1/workspaces/{id}/agents") => json!({ "name": "Helper", "runtime": "scripted" }),
        ("put", "/v1/workspaces/{id}/agents/order") => json!({ "agent_ids": [fill("agent_id")] }),
        ("patch", "/v1/agents/{id}") => json!({ "name": "Renamed" }),
        ("post", "/v1/sessions") => json!({ "workspace_id": fill("workspace_id") }),
        ("patch", "/v1/sessions/{id}") => json!({ "title": "Renamed" }),
        ("post", "/v1/sessions/{id}/messages") => json!({ "content": "hello", "on_busy": "enqueue" }),
        ("post", "/v1/sessions/{id}/messages/{seq}/edit") => json!({ "content": "hello again" }),
        ("post", "/v1/sessions/{id}/regenerate") => json!({}),
        ("post", "/v1/sessions/{id}/control") => json!({ "action": "abort" }),
        ("post", "/v1/sessions/{id}/tool-output") => {
            json!({ "tool": "grep", "tool_call_id": "call-t", "output": { "lines": 1 } })
        }
        ("post", "/v1/sessions/{id}/approval") => json!({ "decision": "approve", "tool_call_id": "call-a" }),
        ("post", "/v1/sessions/{id}/question") => json!({ "question_id": "q-1", "answer": "blue" }),
        ("post", "/v1/sessions/{id}/plan") => json!({ "plan_id": "plan-1", "action": "approve" }),
        ("put", "/v1/sessions/{id}/capabilities") => {
            json!({ "library_id": "lib-1", "jwt": fill("jwt"), "capabilities": ["context_for_query"] })
        }
        ("post", "/v1/mcp") => json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }),
        ("post", "/v1/sessions/{id}/agent-messages") => json!({ "author": "bot", "text": "Ready?", "ask": true }),
        ("post", "/chat/user_message") => json!({ "text": "hello" }),
        ("post", "/v1/read-tokens") => json!({ "path": fill("stream_path") }),
        ("post", "/v1/sessions/{id}/slash-commands/resolve" | "/v1/sessions/{id}/slash-commands/preview") => {
            json!({ "input": "/help" })
        }
        ("post", "/v1/sessions/{id}/slash-commands/invoke") => json!({ "input": "/rename Renamed" }),
        ("post", "/v1/workspaces/{id}/tasks") => json!({ "title": "A task", "description": "Details" }),
        ("patch", "/v1/tasks/{id}") => json!({ "title": "Renamed" }),
        ("post", "/v1/workspaces/{id}/webhooks") => json!({ "url": "https://hooks.example/b" }),
        ("patch", "/v1/webhooks/{id}") => json!({ "enabled": false }),
        ("post", "/v1/workspaces/{id}/mcp-servers") => json!({
            "name": "docs",
            "transport": "http",
            "url": "https://mcp.example/b",
            "headers": { "Authorization": "Bearer B's" },
        }),
        ("patch", "/v1/mcp-servers/{id}") => json!({ "enabled": false, "headers": { "Authorization": null } }),
        ("put", "/v1/stream/__ds/subscriptions/{id}") => {
            json!({ "type": "pull-wake", "streams": [fill("stream_path")], "wake_stream": fill("stream_path") })
        }
        ("post", "/v1/stream/__ds/subscriptions/{id}/streams") => json!({ "streams": [fill("stream_path")] }),
        ("post", "/v1/stream/__ds/subscriptions/{id}/claim") => json!({ "worker": "w" }),
        (
            "post",
            "/v1/stream/__ds/subscriptions/{id}/callback"
            | "/v1/stream/__ds/subscriptions/{id}/ack"
            | "/v1/stream/__ds/subscriptions/{id}/release",
        ) => json!({ "wake_id": "w_1", "generation": 1, "done": true }),
        ("post", "/v1/ag-ui/chat") => json!({
            "threadId": fill("session_id"),
            "runId": "run-1",
            "messages": [{ "id": "m-1", "role": "user", "content": "hello" }],
        }),
        ("post", "/v1/ai-sdk/chat") => json!({
            "id": fill("session_id"),
            "messages": [{ "id": "m-1", "role": "user", "parts": [{ "type": "text", "text": "hello" }] }],
            "trigger": "submit-message",
        }),
        ("post", "/v1/sessions/{id}/attachments") => {
            json!({ "filename": "notes.txt", "content_type": "text/plain", "size": 5 })
        }
        ("post", "/v1/runner/claim") => json!({ "name": "box-1", "clis": [], "wait_ms": 0 }),
        ("post", "/v1/runner/turns/{turn_id}/heartbeat") => json!({ "epoch": 1, "wait_ms": 0 }),
        ("post", "/v1/runner/turns/{turn_id}/result") => {
            json!({ "epoch": 1, "outcome": { "status": "failed", "reason": "no CLI" } })
        }
        _ => return None,
    };
    Some(body)
}
