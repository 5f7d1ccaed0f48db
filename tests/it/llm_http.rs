//! The OpenAI-compatible and Anthropic runtimes against fake providers that speak real HTTP and
//! SSE on loopback: streamed text, tool calls in pieces, errors, dropped streams, and a slow
//! stream aborted mid-answer (the provider sees its connection closed). The stack around them is
//! the real one (API, stream function, worker) on the embedded backend: the runtimes do not
//! depend on the backend, whose turns the scripted tests cover on both.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::{Runtimes, anthropic::Anthropic, openai::OpenAi};
use spool_tests::EmbeddedHarness;

use crate::support::{Stack, abort, all_events, one, send, stack_with, types_of, until};

/// What the fake provider answers to one request.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// SSE events (`data:` payloads, with an optional `event:` name), `gap` apart; `end` is the
    /// closing event, left out to drop the stream early.
    Stream {
        events: Vec<(Option<&'static str>, Value)>,
        gap: Duration,
        end: Option<(Option<&'static str>, String)>,
    },
    /// A refusal.
    Status(u16, Value),
}

#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) answers: Mutex<VecDeque<Answer>>,
    pub(crate) requests: Mutex<Vec<(HeaderMap, Value)>>,
    disconnected: Mutex<bool>,
}

async fn answer(State(fake): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    fake.requests.lock().unwrap().push((headers, request));
    let next = fake.answers.lock().unwrap().pop_front();
    match next {
        None => (StatusCode::INTERNAL_SERVER_ERROR, "the test scripted no more answers").into_response(),
        Some(Answer::Status(status, body)) => (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response(),
        Some(Answer::Stream { events, gap, end }) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
            tokio::spawn(async move {
                let frames = events
                    .into_iter()
                    .map(|(name, data)| (name, data.to_string()))
                    .chain(end);
                for (name, data) in frames {
                    let mut frame = String::new();
                    if let Some(name) = name {
                        frame.push_str(&format!("event: {name}\n"));
                    }
                    frame.push_str(&format!("data: {data}\n\n"));
                    if tx.send(Ok(Bytes::from(frame))).await.is_err() {
                        *fake.disconnected.lock().unwrap() = true;
                        return;
                    }
                    tokio::time::sleep(gap).await;
                }
            });
            let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            }));
            ([("content-type", "text/event-stream")], body).into_response()
        }
    }
}

/// A fake provider on a loopback port: its base URL.
pub(crate) async fn fake(fake: Arc<Fake>) -> String {
    let app = Router::new()
        .route("/v1/chat/completions", post(answer))
        .route("/v1/messages", post(answer))
        .with_state(fake);
    spool_tests::serve_on_loopback(app).await
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Provider {
    OpenAi,
    Anthropic,
}

impl Provider {
    pub(crate) fn runtime(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    pub(crate) fn runtimes(self, base: &str) -> Runtimes {
        match self {
            Self::OpenAi => Runtimes::scripted_only().with_openai(Arc::new(OpenAi::new(
                &format!("{base}/v1"),
                Some("sk-test".to_owned()),
                "fake-model",
            ))),
            Self::Anthropic => Runtimes::scripted_only().with_anthropic(Arc::new(Anthropic::new(
                base,
                Some("ak-test".to_owned()),
                "fake-claude",
            ))),
        }
    }

    /// A streamed reply: text in `pieces`, then the tool calls (name, arguments as JSON text
    /// split in two), then the end (left out when `complete` is false).
    pub(crate) fn stream(self, pieces: &[&str], calls: &[(&str, &str)], gap: Duration, complete: bool) -> Answer {
        let mut events = Vec::new();
        match self {
            Self::OpenAi => {
                for piece in pieces {
                    events.push((
                        None,
                        json!({ "choices": [{ "index": 0, "delta": { "content": piece } }] }),
                    ));
                }
                for (i, (name, arguments)) in calls.iter().enumerate() {
                    let (a, b) = arguments.split_at(arguments.len() / 2);
                    events.push((None, json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
                        { "index": i, "id": format!("call_{i}_{}", pieces.len()), "type": "function", "function": { "name": name, "arguments": a } }
                    ] } }] })));
                    events.push((
                        None,
                        json!({ "choices": [{ "index": 0, "delta": { "tool_calls": [
                        { "index": i, "function": { "arguments": b } }
                    ] } }] }),
                    ));
                }
                events.push((
                    None,
                    json!({ "choices": [], "usage": { "prompt_tokens": 11, "completion_tokens": 7 } }),
                ));
                Answer::Stream {
                    events,
                    gap,
                    end: complete.then(|| (None, "[DONE]".to_owned())),
                }
            }
            Self::Anthropic => {
                events.push((
                    Some("message_start"),
                    json!({ "type": "message_start", "message": { "usage": { "input_tokens": 11 } } }),
                ));
                events.push((Some("content_block_start"), json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } })));
                for piece in pieces {
                    events.push((Some("content_block_delta"), json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": piece } })));
                }
                for (i, (name, arguments)) in calls.iter().enumerate() {
                    let index = i + 1;
                    let (a, b) = arguments.split_at(arguments.len() / 2);
                    events.push((Some("content_block_start"), json!({ "type": "content_block_start", "index": index,
                        "content_block": { "type": "tool_use", "id": format!("toolu_{i}_{}", pieces.len()), "name": name, "input": {} } })));
                    for part in [a, b] {
                        events.push((
                            Some("content_block_delta"),
                            json!({ "type": "content_block_delta", "index": index,
                            "delta": { "type": "input_json_delta", "partial_json": part } }),
                        ));
                    }
                }
                events.push((Some("message_delta"), json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": 7 } })));
                Answer::Stream {
                    events,
                    gap,
                    end: complete.then(|| (Some("message_stop"), json!({ "type": "message_stop" }).to_string())),
                }
            }
        }
    }
}

struct Setup {
    /// Its temporary directory lives as long as the test.
    _harness: EmbeddedHarness,
    stack: Stack,
    fake: Arc<Fake>,
    chat: String,
    ws: String,
}

async fn setup(provider: Provider, answers: Vec<Answer>) -> Setup {
    let harness = EmbeddedHarness::new();
    let state = Arc::new(Fake::default());
    state.answers.lock().unwrap().extend(answers);
    let base = fake(state.clone()).await;
    let stack = stack_with(&harness, provider.runtimes(&base)).await;
    let api = &stack.api;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "LLM" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let agent = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(
                json!({ "name": "Writer", "instruction": "Be brief.", "runtime": provider.runtime(), "model": "m-1" }),
            ),
        )
        .await;
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "agent_id": agent["id"] })))
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    Setup {
        _harness: harness,
        stack,
        fake: state,
        chat,
        ws,
    }
}

pub(crate) const QUICK: Duration = Duration::from_millis(5);

async fn streams_text_and_usage(provider: Provider) {
    let s = setup(
        provider,
        vec![provider.stream(&["Hel", "lo", " world"], &[], QUICK, true)],
    )
    .await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "Say hello").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    assert_eq!(one(&events, &turn, "message_end")["payload"]["text"], "Hello world");
    assert_eq!(
        one(&events, &turn, "agent_start")["payload"]["runtime"],
        format!("{}:m-1", provider.runtime())
    );
    let usage = &one(&events, &turn, "usage")["payload"];
    assert_eq!(
        (usage["input_tokens"].as_u64(), usage["output_tokens"].as_u64()),
        (Some(11), Some(7))
    );
    // The provider got the model, the instruction, the message, the tools and the key.
    let requests = s.fake.requests.lock().unwrap().clone();
    let (headers, body) = &requests[0];
    assert_eq!(body["model"], "m-1");
    assert_eq!(body["stream"], true);
    match provider {
        Provider::OpenAi => {
            assert_eq!(headers["authorization"], "Bearer sk-test");
            assert_eq!(body["messages"][0], json!({ "role": "system", "content": "Be brief." }));
            assert_eq!(body["messages"][1], json!({ "role": "user", "content": "Say hello" }));
            let tools: Vec<&str> = body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap())
                .collect();
            assert!(
                tools.contains(&"ask_user") && tools.contains(&"create_task"),
                "{tools:?}"
            );
            assert!(
                !tools.contains(&"delete_agent"),
                "only the built-in agent manages the workspace"
            );
        }
        Provider::Anthropic => {
            assert_eq!(headers["x-api-key"], "ak-test");
            assert_eq!(headers["anthropic-version"], "2023-06-01");
            assert_eq!(body["system"], "Be brief.");
            assert_eq!(body["messages"][0]["content"][0]["text"], "Say hello");
            assert!(
                body["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t["name"] == "create_task")
            );
        }
    }
}

async fn tool_calls_run_and_their_results_go_back(provider: Provider) {
    let answers = vec![
        provider.stream(
            &["On it."],
            &[("create_task", r#"{"title": "Write the docs"}"#)],
            QUICK,
            true,
        ),
        provider.stream(&["Done."], &[], QUICK, true),
    ];
    let s = setup(provider, answers).await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "Make a task").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(
        types_of(&events, &turn),
        [
            "user_message_submitted",
            "agent_start",
            "message_start",
            "message_update",
            "message_end",
            "usage",
            "tool_start",
            "tool_end",
            "message_start",
            "message_update",
            "message_end",
            "usage",
            "agent_end"
        ]
    );
    let tasks = api
        .ok(Method::GET, &format!("/v1/workspaces/{}/tasks", s.ws), None)
        .await;
    assert_eq!(tasks["tasks"][0]["title"], "Write the docs");
    // The second request carried the call and its result.
    let requests = s.fake.requests.lock().unwrap().clone();
    let second = &requests[1].1;
    let text = second["messages"].to_string();
    assert!(text.contains("Write the docs") && text.contains("task_id"), "{text}");
    match provider {
        Provider::OpenAi => {
            let messages = second["messages"].as_array().unwrap();
            let call_id = messages[2]["tool_calls"][0]["id"].clone();
            assert_eq!(messages[3]["role"], "tool");
            assert_eq!(messages[3]["tool_call_id"], call_id);
        }
        Provider::Anthropic => {
            let messages = second["messages"].as_array().unwrap();
            assert_eq!(messages[1]["role"], "assistant");
            assert_eq!(messages[1]["content"][1]["type"], "tool_use");
            assert_eq!(messages[2]["content"][0]["type"], "tool_result");
        }
    }
}

async fn errors_and_dropped_streams_end_the_turn(provider: Provider) {
    let answers = vec![
        Answer::Status(401, json!({ "error": { "message": "invalid key" } })),
        provider.stream(&["Half an ans"], &[], QUICK, false),
    ];
    let s = setup(provider, answers).await;
    let api = &s.stack.api;
    // A refusal: a system event that says what to do.
    let turn = send(api, &s.chat, "one").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "error");
    let system = one(&events, &turn, "system")["payload"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("401") && system.contains("invalid key") && system.contains("check the API key"),
        "{system}"
    );
    // A stream that ends early: the partial message is ended, the turn fails.
    let turn = send(api, &s.chat, "two").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "error");
    let end = &one(&events, &turn, "message_end")["payload"];
    assert_eq!(
        (end["text"].as_str(), end["interrupted"].as_bool()),
        (Some("Half an ans"), Some(true))
    );
    let system = one(&events, &turn, "system")["payload"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("ended before the answer was complete"), "{system}");
}

async fn an_abort_closes_the_providers_stream(provider: Provider) {
    let words: Vec<String> = (0..100).map(|i| format!("w{i} ")).collect();
    let pieces: Vec<&str> = words.iter().map(String::as_str).collect();
    let s = setup(
        provider,
        vec![provider.stream(&pieces, &[], Duration::from_millis(50), true)],
    )
    .await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "talk slowly").await;
    until(api, &s.chat, &turn, "message_update").await;
    abort(api, &s.chat).await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "aborted");
    let text = one(&events, &turn, "message_end")["payload"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.starts_with("w0 ") && !text.contains("w99"), "{text}");
    // The provider sees its stream closed within a few of its writes.
    spool_tests::eventually("the provider's stream closed", || async {
        (*s.fake.disconnected.lock().unwrap()).then_some(())
    })
    .await;
}

/// A client's context reaches the prompt only in a chat with the `context_for_query`
/// capability, which a companion's token enables.
async fn client_context_needs_the_capability(provider: Provider) {
    let answers = (0..2).map(|_| provider.stream(&["ok"], &[], QUICK, true)).collect();
    let s = setup(provider, answers).await;
    let api = &s.stack.api;
    let messages = format!("/v1/sessions/{}/messages", s.chat);
    let post = |text: &'static str| {
        let body = json!({ "content": text, "client_context": { "file": "main.rs", "selection": "fn main" } });
        api.ok(Method::POST, &messages, Some(body))
    };
    // WHEN the chat has no capability: the context is kept, not sent
    let sent = post("without").await;
    until(api, &s.chat, sent["turn_id"].as_str().unwrap(), "agent_end").await;
    // WHEN a companion enables it
    let org = crate::support::org_of(api);
    let now = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock);
    let capabilities = ["context_for_query".to_owned()];
    let (_, key) = spool_api::admin::create_api_key(s.stack.metadata.as_ref(), &org, &capabilities, now)
        .await
        .unwrap();
    let token = crate::support::handshake(
        &api.http,
        &api.base,
        json!({ "api_key": key.reveal(), "library_id": "companion-1" }),
    )
    .await
    .json::<Value>()
    .await
    .unwrap();
    let enabled = api
        .ok(
            Method::PUT,
            &format!("/v1/sessions/{}/capabilities", s.chat),
            Some(json!({ "library_id": "companion-1", "jwt": token["jwt"], "capabilities": ["context_for_query"] })),
        )
        .await;
    assert_eq!(enabled["status"], "authenticated");
    let sent = post("with").await;
    until(api, &s.chat, sent["turn_id"].as_str().unwrap(), "agent_end").await;
    // THEN only the second prompt carries it
    let requests = s.fake.requests.lock().unwrap().clone();
    let prompts: Vec<String> = requests.iter().map(|(_, body)| body["messages"].to_string()).collect();
    assert!(!prompts[0].contains("fn main"), "{}", prompts[0]);
    assert!(
        prompts[1].contains("<client_context>") && prompts[1].contains("fn main"),
        "{}",
        prompts[1]
    );
    let events = all_events(api, &s.chat).await;
    assert_eq!(events[0]["payload"]["client_context"]["file"], "main.rs");
}

/// A prompt command's wrapped prompt is the provider's last user message, with the command's
/// model; the chat's `/mode` is in the instruction, and `/model` picks the model otherwise.
async fn prompt_commands_reach_the_model(provider: Provider) {
    let answer = || provider.stream(&["ok"], &[], QUICK, true);
    let s = setup(provider, vec![answer(), answer()]).await;
    let api = &s.stack.api;
    let invoke = |input: &str| {
        let path = format!("/v1/sessions/{}/slash-commands/invoke", s.chat);
        let body = json!({ "input": input });
        async move { api.ok(Method::POST, &path, Some(body)).await }
    };
    let response = api
        .http
        .put(format!("{}/v1/workspaces/{}/slash-commands/explain", api.base, s.ws))
        .bearer_auth(api.token.as_deref().unwrap())
        .header("content-type", "text/markdown")
        .body("---\nmodel: m-explain\n---\nExplain $1 briefly.")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    invoke("/mode plan").await;
    let sent = invoke("/explain \"the cache\"").await;
    until(api, &s.chat, sent["turn_id"].as_str().unwrap(), "agent_end").await;
    invoke("/model m-chat").await;
    let sent = invoke("/summarize").await;
    until(api, &s.chat, sent["turn_id"].as_str().unwrap(), "agent_end").await;
    let requests = s.fake.requests.lock().unwrap().clone();
    let (models, systems, lasts): (Vec<Value>, Vec<String>, Vec<String>) = requests
        .iter()
        .map(|(_, body)| {
            let (system, messages) = match provider {
                Provider::OpenAi => (
                    body["messages"][0]["content"].as_str().unwrap_or_default().to_owned(),
                    body["messages"].as_array().unwrap().clone(),
                ),
                Provider::Anthropic => (
                    body["system"].as_str().unwrap_or_default().to_owned(),
                    body["messages"].as_array().unwrap().clone(),
                ),
            };
            let last = messages.last().unwrap()["content"].to_string();
            (body["model"].clone(), system, last)
        })
        .fold((vec![], vec![], vec![]), |(mut m, mut sy, mut l), (a, b, c)| {
            m.push(a);
            sy.push(b);
            l.push(c);
            (m, sy, l)
        });
    assert_eq!(models, [json!("m-explain"), json!("m-chat")]);
    assert!(systems.iter().all(|s| s.contains("`plan` mode")), "{systems:?}");
    assert!(
        lasts[0].contains("<slash-command name=\\\"explain\\\"") && lasts[0].contains("Explain the cache briefly."),
        "{}",
        lasts[0]
    );
    assert!(lasts[1].contains("Summarize this chat so far"), "{}", lasts[1]);
}

/// A chat's files reach the model in the form it takes: an image as an image part, a text file
/// as its text with its name, anything else as a note naming it.
async fn files_reach_the_model_as_parts(provider: Provider) {
    let s = setup(provider, vec![provider.stream(&["Seen."], &[], QUICK, true)]).await;
    let api = &s.stack.api;
    let png: &[u8] = b"\x89PNG\r\n\x1a\nnot really an image";
    let image = crate::attachments_http::upload(api, &s.chat, "chart.png", "image/png", png).await;
    crate::attachments_http::upload(api, &s.chat, "notes.md", "text/markdown", b"# Plan\nship it").await;
    crate::attachments_http::upload(api, &s.chat, "report.pdf", "application/pdf", b"%PDF-1.4").await;
    let posted = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{}/messages", s.chat),
            Some(json!({ "content": "What do you see?", "files": [image["attachment"]["id"]] })),
        )
        .await;
    let turn = posted["turn_id"].as_str().unwrap();
    let events = until(api, &s.chat, turn, "agent_end").await;
    assert_eq!(one(&events, turn, "agent_end")["payload"]["reason"], "complete");
    let requests = s.fake.requests.lock().unwrap().clone();
    let body = &requests[0].1;
    let parts: Vec<Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::Array(parts) => parts.clone(),
            text => vec![json!({ "type": "text", "text": text })],
        })
        .collect();
    let data = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(png)
    };
    let image_part = match provider {
        Provider::OpenAi => {
            json!({ "type": "image_url", "image_url": { "url": format!("data:image/png;base64,{data}") } })
        }
        Provider::Anthropic => {
            json!({ "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": data } })
        }
    };
    assert!(parts.contains(&image_part), "an image part: {parts:?}");
    let texts: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("<file name=\"notes.md\">\n# Plan\nship it\n</file>")),
        "a text part: {texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("report.pdf") && t.contains("application/pdf") && t.contains("not shown")),
        "a note: {texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("What do you see?") && t.contains("(Attached: chart.png)")),
        "the message names its file: {texts:?}"
    );
}

/// A model reads the workspace's context through `get_workspace_context`, not in every prompt.
async fn the_workspace_context_is_a_tool(provider: Provider) {
    let answers = vec![
        provider.stream(&["Let me look."], &[("get_workspace_context", "{}")], QUICK, true),
        provider.stream(&["Done."], &[], QUICK, true),
    ];
    let s = setup(provider, answers).await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "Which agents are there?").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "agent_end")["payload"]["reason"],
        "complete",
        "{events:?}"
    );
    let requests = s.fake.requests.lock().unwrap().clone();
    let tool_names = |body: &Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                t["function"]["name"]
                    .as_str()
                    .or(t["name"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert!(tool_names(&requests[0].1).contains(&"get_workspace_context".to_owned()));
    let first = requests[0].1.to_string();
    assert!(!first.contains("Writer (id:"), "not in every prompt");
    let second = requests[1].1.to_string();
    assert!(
        second.contains("Writer (id: ") && second.contains("# Agents, in order"),
        "{second}"
    );
}

/// The built-in agent's instruction is Spool's, pointing to the knowledge base, and a
/// workspace's instruction for it extends it rather than replacing it.
async fn the_builtin_agents_instruction_is_spools(provider: Provider) {
    let s = setup(provider, vec![provider.stream(&["Bonjour."], &[], QUICK, true)]).await;
    let api = &s.stack.api;
    let agents = api
        .ok(Method::GET, &format!("/v1/workspaces/{}/agents", s.ws), None)
        .await;
    let builtin = agents["agents"][0]["id"].as_str().unwrap().to_owned();
    api.ok(
        Method::PATCH,
        &format!("/v1/agents/{builtin}"),
        Some(json!({ "instruction": "Always answer in French.", "runtime": provider.runtime() })),
    )
    .await;
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "agent_id": builtin })))
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    let turn = send(api, &chat, "Hello").await;
    until(api, &chat, &turn, "agent_end").await;
    let requests = s.fake.requests.lock().unwrap().clone();
    let body = &requests[0].1;
    let system = match provider {
        Provider::OpenAi => body["messages"][0]["content"].as_str().unwrap().to_owned(),
        Provider::Anthropic => body["system"].as_str().unwrap().to_owned(),
    };
    assert!(
        system.starts_with("You are Spool, the assistant built into this workspace."),
        "{system}"
    );
    assert!(system.contains("troubleshooting) are at /v1/docs."), "{system}");
    assert!(
        system.contains("# This workspace's instruction for you\n\nAlways answer in French."),
        "{system}"
    );
}

macro_rules! for_both_providers {
    ($($test:ident),+ $(,)?) => {
        mod openai {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    super::$test(super::Provider::OpenAi).await;
                }
            )+
        }
        mod anthropic {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    super::$test(super::Provider::Anthropic).await;
                }
            )+
        }
    };
}

for_both_providers!(
    streams_text_and_usage,
    tool_calls_run_and_their_results_go_back,
    errors_and_dropped_streams_end_the_turn,
    an_abort_closes_the_providers_stream,
    client_context_needs_the_capability,
    prompt_commands_reach_the_model,
    files_reach_the_model_as_parts,
    the_workspace_context_is_a_tool,
    the_builtin_agents_instruction_is_spools,
);
