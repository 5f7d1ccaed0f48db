//! # OpenAI-compatible chat completions
//!
//! `POST {base_url}/chat/completions` with `stream: true` and the agent's tools, as OpenAI,
//! Ollama, vLLM, OpenRouter and others speak it. Text deltas stream into the sink; tool calls
//! arrive in pieces (by index) and are put together; the last chunk reports usage (asked for
//! with `stream_options.include_usage`): `prompt_tokens` (the cached ones included),
//! `prompt_tokens_details.cached_tokens` and `completion_tokens`, for the model asked.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::{
    files::{self, Attached, Inline},
    http::{Endpoint, SseReader, failed},
    runtime::{Error, Message, Reply, Request, Runtime, Sink, ToolCall, Usage},
};

/// An OpenAI-compatible provider.
#[derive(Debug, Clone)]
pub struct OpenAi(Endpoint);

impl OpenAi {
    /// The provider at `base_url`, with `model` for agents that name none.
    pub fn new(base_url: &str, api_key: Option<String>, model: &str) -> Self {
        Self(Endpoint::new(base_url, api_key, model))
    }

    fn body(&self, request: &Request) -> Value {
        let mut messages = Vec::new();
        if !request.instruction.trim().is_empty() {
            messages.push(json!({ "role": "system", "content": request.instruction }));
        }
        for message in &request.messages {
            messages.push(match message {
                Message::User { text } => json!({ "role": "user", "content": text }),
                Message::System { text } => json!({ "role": "system", "content": text }),
                Message::File(attached) => json!({ "role": "user", "content": file_parts(attached) }),
                Message::Tool { call_id, content, .. } => {
                    json!({ "role": "tool", "tool_call_id": call_id, "content": content })
                }
                Message::Assistant { text, tool_calls } => {
                    let mut m = json!({ "role": "assistant", "content": text });
                    if !tool_calls.is_empty() {
                        m["tool_calls"] = tool_calls
                            .iter()
                            .map(|c| {
                                json!({
                                    "id": c.id, "type": "function",
                                    "function": { "name": c.name, "arguments": c.arguments.to_string() },
                                })
                            })
                            .collect();
                    }
                    m
                }
            });
        }
        let mut body = json!({
            "model": self.0.model(request),
            "messages": messages,
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({ "type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
        }
        body
    }
}

/// A file as the parts of a user message: an image part, its text, or a note.
fn file_parts(attached: &Attached) -> Value {
    match &attached.content {
        Some(Inline::Image { media_type, data }) => json!([
            { "type": "text", "text": files::heading(attached) },
            { "type": "image_url", "image_url": { "url": format!("data:{media_type};base64,{data}") } },
        ]),
        Some(Inline::Text { text }) => json!([{ "type": "text", "text": format!(
            "{}\n<file name=\"{}\">\n{text}\n</file>", files::heading(attached), attached.file.filename
        ) }]),
        None => json!([{ "type": "text", "text": files::note(attached) }]),
    }
}

/// A tool call being put together from its pieces.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[async_trait]
impl Runtime for OpenAi {
    fn inline_files(&self) -> bool {
        true
    }

    fn describe(&self, request: &Request) -> String {
        format!("openai:{}", self.0.model(request))
    }

    fn context_budget(&self, request: &Request) -> u64 {
        crate::history::model_budget(self.0.model(request))
    }

    fn summarizes(&self) -> bool {
        true
    }

    async fn respond(&self, request: &Request, sink: &mut dyn Sink) -> Result<Reply, Error> {
        let mut post = self
            .0
            .http
            .post(format!("{}/chat/completions", self.0.base_url))
            .json(&self.body(request));
        if let Some(key) = &self.0.api_key {
            post = post.bearer_auth(key);
        }
        let response = failed("the OpenAI-compatible server", post.send().await).await?;
        let mut events = SseReader::new(response, "the OpenAI-compatible server");
        let mut reply = Reply::default();
        let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
        let mut done = false;
        while let Some(event) = events.next().await? {
            if event.data.trim() == "[DONE]" {
                done = true;
                break;
            }
            let chunk: Value = serde_json::from_str(&event.data).map_err(|e| {
                Error::Failed(format!(
                    "the OpenAI-compatible server sent a chunk that is not JSON: {e}"
                ))
            })?;
            if let Some(error) = chunk.get("error") {
                let message = error["message"].as_str().unwrap_or("an error");
                return Err(Error::Failed(format!("the OpenAI-compatible server failed: {message}")));
            }
            if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
                reply.usage = Some(Usage {
                    input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
                    cached_input_tokens: usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0),
                    output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
                    model: Some(self.0.model(request).to_owned()),
                });
            }
            let Some(choice) = chunk["choices"].get(0) else {
                continue;
            };
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                reply.text.push_str(text);
                sink.text(text).await?;
            }
            for piece in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = piece["index"].as_u64().unwrap_or(0);
                let call = calls.entry(index).or_default();
                if let Some(id) = piece["id"].as_str() {
                    call.id = id.to_owned();
                }
                if let Some(name) = piece["function"]["name"].as_str() {
                    call.name.push_str(name);
                }
                if let Some(arguments) = piece["function"]["arguments"].as_str() {
                    call.arguments.push_str(arguments);
                }
            }
        }
        if !done {
            return Err(Error::Failed(
                "the OpenAI-compatible server's stream ended before the answer was complete".to_owned(),
            ));
        }
        for (index, call) in calls {
            let arguments = if call.arguments.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({ "_unparsed": call.arguments }))
            };
            reply.tool_calls.push(ToolCall {
                id: if call.id.is_empty() {
                    format!("{}_{index}", spool_chat::workspace::new_id("call"))
                } else {
                    call.id
                },
                name: call.name,
                arguments,
            });
        }
        Ok(reply)
    }
}
