//! # The scripted runtime: deterministic answers, for `make run` with no API key and for tests
//!
//! A script is a list of rules. The first rule whose `match` words appear in the person's last
//! message answers it, in rounds: round *k* is the agent's *k*-th reply since that message, and
//! may call tools (ask a question, propose a plan, run an action), whose results the next round
//! can quote. A round streams its text word by word, so a script shows streaming, reloads
//! mid-answer and aborts the way a model does. An agent whose instruction is a script (JSON)
//! runs it; others get the built-in demo script.
//!
//! ```json
//! {"word_delay_ms": 30, "rules": [
//!   {"match": ["color"], "rounds": [
//!     {"say": "One question first.", "tools": [{"name": "ask_user", "arguments": {"question": "Which color?"}}]},
//!     {"say": "You chose {result}."}]}],
//!  "default": [{"say": "You said: {input}"}]}
//! ```
//!
//! In `say` and in string arguments, `{input}` is the person's message and `{result}` the last
//! tool result (an answer, a plan's verdict, an action's result). A round may `fail` (the
//! runtime errors with that message) or `sleep_ms` before it speaks. A script's `files` is said
//! first when files were uploaded since the agent last answered, `{files}` naming them.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use crate::runtime::{Error, Message, Reply, Request, Runtime, Sink, ToolCall};

/// A script.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Pause between streamed words.
    #[serde(default = "default_delay")]
    pub word_delay_ms: u64,
    /// The rules, tried in order.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// The rounds for a message no rule matches.
    #[serde(default)]
    pub default: Vec<Round>,
    /// Said before the first round's text when files were uploaded since the agent last
    /// answered; `{files}` names them (`notes.txt (1.2 KB, text/plain)`).
    #[serde(default)]
    pub files: Option<String>,
    /// Said before the first round's text when the message carried what the person's notes say
    /// (a companion's `client_context`); `{ids}` names the notes, `{summary}` quotes it.
    #[serde(default)]
    pub notes: Option<String>,
}

fn default_delay() -> u64 {
    25
}

/// Rounds that answer messages containing any of the `match` words.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Words (case-insensitive) any of which selects the rule.
    #[serde(rename = "match")]
    pub words: Vec<String>,
    /// The replies, one per round.
    pub rounds: Vec<Round>,
}

/// One reply.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Round {
    /// What it says.
    #[serde(default)]
    pub say: String,
    /// Tools it calls after speaking.
    #[serde(default)]
    pub tools: Vec<ScriptedCall>,
    /// Fail with this message instead of answering.
    #[serde(default)]
    pub fail: Option<String>,
    /// Wait before speaking.
    #[serde(default)]
    pub sleep_ms: u64,
}

/// A tool call in a script.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The tool.
    pub name: String,
    /// Its arguments.
    #[serde(default)]
    pub arguments: Value,
}

impl Script {
    /// The built-in demo script: it streams a short answer, and shows questions, plans, tasks,
    /// renames and an action that needs approval when asked.
    pub fn demo() -> Self {
        serde_json::from_str(include_str!("demo_script.json")).unwrap_or_else(|_| Self {
            word_delay_ms: default_delay(),
            rules: Vec::new(),
            files: None,
            notes: None,
            default: vec![Round {
                say: "You said: {input}".to_owned(),
                ..Round::default()
            }],
        })
    }

    /// The demo script of a chat outside any workspace (the global chat): it offers only what
    /// such a chat can do (a question, a plan), and says where agents, tasks and renames are.
    pub fn demo_global() -> Self {
        serde_json::from_str(include_str!("demo_global_script.json")).unwrap_or_else(|_| Self::demo())
    }

    /// The script in an agent's instruction, if it is one.
    pub fn from_instruction(instruction: &str) -> Option<Self> {
        let trimmed = instruction.trim();
        if !trimmed.starts_with('{') {
            return None;
        }
        serde_json::from_str(trimmed).ok()
    }

    fn rounds_for(&self, input: &str) -> &[Round] {
        let lower = input.to_lowercase();
        self.rules
            .iter()
            .find(|rule| rule.words.iter().any(|w| lower.contains(&w.to_lowercase())))
            .map_or(&self.default, |rule| &rule.rounds)
    }
}

/// The scripted runtime.
#[derive(Debug, Clone, Default)]
pub struct Scripted;

fn fill(template: &str, input: &str, result: &str) -> String {
    template.replace("{input}", input).replace("{result}", result)
}

fn fill_value(value: &Value, input: &str, result: &str) -> Value {
    match value {
        Value::String(s) => Value::String(fill(s, input, result)),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_value(v, input, result)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_value(v, input, result)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[async_trait]
impl Runtime for Scripted {
    fn describe(&self, _: &Request) -> String {
        "scripted".to_owned()
    }

    async fn respond(&self, request: &Request, sink: &mut dyn Sink) -> Result<Reply, Error> {
        let script = Script::from_instruction(&request.agent_instruction).unwrap_or_else(|| {
            if request.context.workspace_id.is_some() {
                Script::demo()
            } else {
                Script::demo_global()
            }
        });
        let last_user = request.messages.iter().rposition(|m| matches!(m, Message::User { .. }));
        let Some(last_user) = last_user else {
            return Err(Error::Failed("there is no message to answer".to_owned()));
        };
        let Message::User { text: input } = &request.messages[last_user] else {
            unreachable!("found as a user message")
        };
        // The files and the notes' context are acknowledged apart (`files`, `notes`), not
        // echoed as words.
        let context = crate::state::client_context_of(input);
        let input = crate::state::as_written(input);
        let since = &request.messages[last_user + 1..];
        let round_index = since.iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
        let result = since
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Tool { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("");
        let Some(round) = script.rounds_for(input).get(round_index) else {
            return Ok(Reply::default());
        };
        if round.sleep_ms > 0 {
            tokio::time::sleep(Duration::from_millis(round.sleep_ms)).await;
        }
        if let Some(message) = &round.fail {
            return Err(Error::Failed(fill(message, input, result)));
        }
        let mut text = fill(&round.say, input, result);
        if round_index == 0
            && let Some(template) = &script.files
        {
            // The files uploaded since the agent's last answer, before this message.
            let previous_answer = request.messages[..last_user]
                .iter()
                .rposition(|m| matches!(m, Message::Assistant { .. }))
                .map_or(0, |i| i + 1);
            let names: Vec<String> = request.messages[previous_answer..last_user]
                .iter()
                .filter_map(|m| match m {
                    Message::File(a) => Some(format!(
                        "{} ({}, {})",
                        a.file.filename,
                        spool_chat::service::human_size(a.file.size),
                        a.file.content_type
                    )),
                    _ => None,
                })
                .collect();
            if !names.is_empty() {
                text = format!("{}{text}", template.replace("{files}", &names.join(", ")));
            }
        }
        if round_index == 0
            && let (Some(template), Some(context)) = (&script.notes, &context)
        {
            let ids: Vec<&str> = ["relevant_k_ids", "relevant_d_ids"]
                .iter()
                .filter_map(|k| context[*k].as_array())
                .flatten()
                .filter_map(serde_json::Value::as_str)
                .collect();
            if !ids.is_empty() {
                let summary = context["summary"].as_str().unwrap_or_default();
                let said = template.replace("{ids}", &ids.join(", ")).replace("{summary}", summary);
                text = format!("{said}{text}");
            }
        }
        let delay = Duration::from_millis(script.word_delay_ms);
        let mut words = text.split_inclusive(' ').peekable();
        while let Some(word) = words.next() {
            sink.text(word).await?;
            if words.peek().is_some() && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        let tool_calls = round
            .tools
            .iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                id: format!("{}-{round_index}-{i}", request.context.turn_id),
                name: call.name.clone(),
                arguments: fill_value(&call.arguments, input, result),
            })
            .collect();
        Ok(Reply {
            text,
            tool_calls,
            ..Reply::default()
        })
    }
}
