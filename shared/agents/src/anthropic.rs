//! # Anthropic Messages
//!
//! `POST {base_url}/v1/messages` with `stream: true` and the agent's tools. Anthropic wants
//! turns that alternate between the user and the assistant, so consecutive messages of one
//! side are merged, and tool results travel as `tool_result` blocks of a user turn. Text
//! streams as `text_delta`s; a `tool_use` block's input arrives as JSON in pieces.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::{
    files::{self, Attached, Inline},
    http::{Endpoint, SseReader, failed},
    runtime::{Error, Message, Reply, Request, Runtime, Sink, ToolCall, Usage},
};

/// The API version Spool speaks.
const VERSION: &str = "2023-06-01";
/// The most tokens one reply may write.
const MAX_TOKENS: u32 = 4096;

/// A file as content blocks of a user turn: an image block, its text, or a note.
fn file_blocks(attached: &Attached) -> Vec<Value> {
    match &attached.content {
        Some(Inline::Image { media_type, data }) => vec![
            json!({ "type": "text", "text": files::heading(attached) }),
            json!({ "type": "image", "source": { "type": "base64", "media_type": media_type, "data": data } }),
        ],
        Some(Inline::Text { text }) => vec![json!({ "type": "text", "text": format!(
            "{}\n<file name=\"{}\">\n{text}\n</file>", files::heading(attached), attached.file.filename
        ) })],
        None => vec![json!({ "type": "text", "text": files::note(attached) })],
    }
}

/// Anthropic's Messages API.
#[derive(Debug, Clone)]
pub struct Anthropic(Endpoint);

impl Anthropic {
    /// The provider at `base_url`, with `model` for agents that name none.
    pub fn new(base_url: &str, api_key: Option<String>, model: &str) -> Self {
        Self(Endpoint::new(base_url, api_key, model))
    }

    fn body(&self, request: &Request) -> Value {
        let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
        let mut push = |role: &'static str, block: Value| match turns.last_mut() {
            Some((last, blocks)) if *last == role => blocks.push(block),
            _ => turns.push((role, vec![block])),
        };
        for message in &request.messages {
            match message {
                Message::User { text } => push("user", json!({ "type": "text", "text": text })),
                Message::System { text } => push("user", json!({ "type": "text", "text": format!("[Spool] {text}") })),
                Message::File(attached) => {
                    for block in file_blocks(attached) {
                        push("user", block);
                    }
                }
                Message::Tool { call_id, content, .. } => push(
                    "user",
                    json!({ "type": "tool_result", "tool_use_id": call_id, "content": content }),
                ),
                Message::Assistant { text, tool_calls } => {
                    if !text.is_empty() {
                        push("assistant", json!({ "type": "text", "text": text }));
                    }
                    for call in tool_calls {
                        push(
                            "assistant",
                            json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments }),
                        );
                    }
                }
            }
        }
        let messages: Vec<Value> = turns
            .into_iter()
            .map(|(role, content)| json!({ "role": role, "content": content }))
            .collect();
        let mut body = json!({
            "model": self.0.model(request),
            "max_tokens": MAX_TOKENS,
            "messages": messages,
            "stream": true,
        });
        if !request.instruction.trim().is_empty() {
            body["system"] = Value::String(request.instruction.clone());
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
                .collect();
        }
        body
    }
}

#[async_trait]
impl Runtime for Anthropic {
    fn inline_files(&self) -> bool {
        true
    }

    fn describe(&self, request: &Request) -> String {
        format!("anthropic:{}", self.0.model(request))
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
            .post(format!("{}/v1/messages", self.0.base_url))
            .header("anthropic-version", VERSION)
            .json(&self.body(request));
        if let Some(key) = &self.0.api_key {
            post = post.header("x-api-key", key);
        }
        let response = failed("Anthropic", post.send().await).await?;
        let mut events = SseReader::new(response, "Anthropic");
        let mut reply = Reply::default();
        let mut usage = Usage {
            model: Some(self.0.model(request).to_owned()),
            ..Usage::default()
        };
        let mut tools: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
        let mut stopped = false;
        while let Some(event) = events.next().await? {
            let data: Value = match serde_json::from_str(&event.data) {
                Ok(data) => data,
                Err(_) if event.data.trim().is_empty() => continue,
                Err(e) => return Err(Error::Failed(format!("Anthropic sent an event that is not JSON: {e}"))),
            };
            let index = data["index"].as_u64().unwrap_or(0);
            match data["type"].as_str().unwrap_or_default() {
                "message_start" => {
                    // Anthropic counts cache reads and cache writes apart from `input_tokens`:
                    // Spool's input is all three, its cached input the reads.
                    let counts = &data["message"]["usage"];
                    let count = |name: &str| counts[name].as_u64().unwrap_or(0);
                    usage.cached_input_tokens = count("cache_read_input_tokens");
                    usage.input_tokens = count("input_tokens")
                        .saturating_add(usage.cached_input_tokens)
                        .saturating_add(count("cache_creation_input_tokens"));
                }
                "content_block_start" => {
                    let block = &data["content_block"];
                    if block["type"] == "tool_use" {
                        let id = block["id"].as_str().unwrap_or_default().to_owned();
                        let name = block["name"].as_str().unwrap_or_default().to_owned();
                        tools.insert(index, (id, name, String::new()));
                    }
                }
                "content_block_delta" => {
                    let delta = &data["delta"];
                    match delta["type"].as_str().unwrap_or_default() {
                        "text_delta" => {
                            let text = delta["text"].as_str().unwrap_or_default();
                            reply.text.push_str(text);
                            sink.text(text).await?;
                        }
                        "input_json_delta" => {
                            if let Some((_, _, json)) = tools.get_mut(&index) {
                                json.push_str(delta["partial_json"].as_str().unwrap_or_default());
                            }
                        }
                        _ => {}
                    }
                }
                "message_delta" => {
                    usage.output_tokens = data["usage"]["output_tokens"].as_u64().unwrap_or(usage.output_tokens);
                }
                "message_stop" => {
                    stopped = true;
                    break;
                }
                "error" => {
                    let message = data["error"]["message"].as_str().unwrap_or("an error");
                    return Err(Error::Failed(format!("Anthropic failed: {message}")));
                }
                _ => {}
            }
        }
        if !stopped {
            return Err(Error::Failed(
                "Anthropic's stream ended before the answer was complete".to_owned(),
            ));
        }
        for (_, (id, name, input)) in tools {
            let arguments = if input.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&input).unwrap_or_else(|_| json!({ "_unparsed": input }))
            };
            reply.tool_calls.push(ToolCall { id, name, arguments });
        }
        reply.usage = Some(usage);
        Ok(reply)
    }
}
