//! A person's messages and controls, an outside agent's messages, and the chat's files they
//! name.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ASK_USER, PROPOSE_CAPTURE, PROPOSE_PLAN};
use crate::global::AgentMeta;

/// A person's message.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The text.
    pub content: String,
    /// Who sent it (the token's subject).
    pub author: String,
    /// The chat's files it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "file_refs")]
    pub files: Vec<FileRef>,
    /// The client's own data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Context from the person's local companion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_context: Option<Value>,
    /// The agent's question this message answers (in the global chat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<String>,
    /// Tools the client declares and runs (the AI SDK's client tools): the agent may call
    /// them in this message's turn, which waits for each call's output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_tools: Vec<ClientTool>,
    /// The earlier message this is a new version of (an edit or a regenerate), and what the
    /// chat's active branch leaves out from here on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<super::Revision>,
}

/// A tool a client declares and runs: an agent's call of it is a `tool_start` marked
/// `client`, and the turn waits for `POST /v1/sessions/{id}/tool-output`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientTool {
    /// Its name: 1 to 64 of `A-Z a-z 0-9 _ -`.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its input's JSON schema (an object schema; none: no input).
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "inputSchema")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub input_schema: Option<Value>,
    /// The MCP server whose tool it is, when the client runs it on one (the person's
    /// companion's): its calls' `tool_start` names it (`server`). 1 to 64 of `A-Z a-z 0-9 _ -`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

impl ClientTool {
    /// The most tools a message declares.
    pub const MAX: usize = 16;
    /// The names of Spool's own tools, which a client's may not take (`spool_agents::tools`
    /// holds each to this list in a test).
    pub const RESERVED: [&'static str; 11] = [
        ASK_USER,
        PROPOSE_PLAN,
        PROPOSE_CAPTURE,
        "rename_chat",
        "create_task",
        "get_workspace_context",
        "create_agent",
        "update_agent",
        "delete_agent",
        "reorder_agents",
        "update_workspace",
    ];

    /// Checks a message's client tools: at most [`Self::MAX`], each name valid and once, a
    /// description of at most 1024 characters, a schema of at most 16 KiB.
    pub fn check(tools: &[ClientTool]) -> Result<(), spool_log::error::Error> {
        let bad = |reason: String| spool_log::error::Error::invalid("client_tools", reason);
        if tools.len() > Self::MAX {
            return Err(bad(format!("at most {} tools", Self::MAX)));
        }
        let mut seen = std::collections::HashSet::new();
        for tool in tools {
            let name_ok = (1..=64).contains(&tool.name.len())
                && tool
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !name_ok {
                return Err(bad(format!(
                    "`{}`: a tool's name is 1 to 64 of letters, digits, `_` and `-`",
                    tool.name.chars().take(80).collect::<String>()
                )));
            }
            if let Some(server) = &tool.server {
                let server_ok = (1..=64).contains(&server.len())
                    && server
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if !server_ok {
                    return Err(bad(format!(
                        "`{}`'s server is 1 to 64 of letters, digits, `_` and `-`",
                        tool.name
                    )));
                }
            }
            if !seen.insert(tool.name.as_str()) {
                return Err(bad(format!("`{}` is declared twice", tool.name)));
            }
            if Self::RESERVED.contains(&tool.name.as_str()) {
                return Err(bad(format!(
                    "`{}` is one of Spool's own tools; name yours otherwise",
                    tool.name
                )));
            }
            if tool.description.as_ref().is_some_and(|d| d.chars().count() > 1024) {
                return Err(bad(format!("`{}`'s description is over 1024 characters", tool.name)));
            }
            if let Some(schema) = &tool.input_schema {
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(bad(format!(
                        "`{}`'s input_schema is not a JSON Schema of an object (`{{\"type\": \"object\", …}}`)",
                        tool.name
                    )));
                }
                if schema.to_string().len() > 16 * 1024 {
                    return Err(bad(format!("`{}`'s input_schema is over 16 KiB", tool.name)));
                }
            }
        }
        Ok(())
    }
}

/// What a control asks.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlAction {
    /// Stop the running turn.
    Abort,
}

/// A control.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlSubmitted {
    /// What it asks.
    pub action: ControlAction,
}

/// A tool's output from the client.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutputSubmitted {
    /// The tool.
    pub tool: String,
    /// The call it answers.
    pub tool_call_id: String,
    /// Its output (or `error`).
    pub output: Option<Value>,
    /// Its error (or `output`).
    pub error: Option<String>,
}

/// A message an outside agent posted.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentMessage {
    /// The agent's name.
    pub author: String,
    /// The text.
    pub text: String,
    /// Whether it asks the people a question (answered by the next message).
    pub ask: bool,
    /// The credential that posted it.
    #[serde(default)]
    pub posted_by: String,
    /// The question's id, when it asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_id: Option<String>,
    /// What the agent says it replies to and how it tags the message (absent from events
    /// written before agents could say so).
    #[serde(default, skip_serializing_if = "AgentMeta::is_empty")]
    pub meta: AgentMeta,
}

/// A file of the chat, as events name it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// The attachment's id (`att_…`).
    pub id: String,
    /// Its safe base name.
    pub filename: String,
    /// Its media type.
    pub content_type: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A file a person uploaded into the chat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uploaded {
    /// The file.
    #[serde(flatten)]
    pub file: FileRef,
    /// Where an agent reads it, relative to the chat's folder (`attachments/{filename}`).
    pub path: String,
    /// The earlier file of the same name it replaces (the newest wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// A message's `files`, skipping entries that are not [`FileRef`]s (messages written before
/// files were typed carried any JSON there), so every stored event stays readable.
fn file_refs<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<FileRef>, D::Error> {
    let values: Vec<Value> = Vec::deserialize(deserializer)?;
    Ok(values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}
