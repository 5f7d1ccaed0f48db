//! # The companion's MCP servers (`mcp_tools`)
//!
//! The companion runs Model Context Protocol servers on the person's machine, over stdio, and
//! offers their tools to the chats it gave `mcp_tools` to: the person's browser lists them
//! (`GET /mcp/tools`), declares them as a message's client tools named
//! `companion__{server}__{tool}` ([`offered_name`]), and runs an agent's call of one here
//! (`POST /mcp/call`), posting the result to Spool as the tool's output. Spool never reaches the
//! companion; without it, the tools are simply not declared.
//!
//! The servers are configured in a file of Claude Desktop's shape ([`McpConfig`]):
//!
//! ```json
//! {"mcpServers": {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/ada/notes"],
//!                           "env": {"LOG_LEVEL": "warn"}}}}
//! ```
//!
//! A server is started on first use with a scrubbed environment (only [`KEPT_ENV`] of the
//! companion's, so not its API key) plus its own `env`, in its own process group, and stays up
//! for the next calls; one that dies, or does not answer in time, is stopped (its whole group)
//! and started again on next use. All of them stop with the companion ([`McpHub`]). The `env`
//! values are secrets to the companion: no `Debug`, log line or answer shows them.

use std::{collections::BTreeMap, fmt, path::Path, path::PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod hub;

pub use hub::{CALL_TIMEOUT, CallError, McpHub, ServerTools};

/// The first part of every offered tool's name: the browser knows the companion's tools by it.
pub const TOOL_PREFIX: &str = "companion";
/// What separates the parts of an offered tool's name.
pub const SEPARATOR: &str = "__";
/// The longest tool name a client may declare (Spool's `ClientTool` rule).
pub const MAX_TOOL_NAME: usize = 64;
/// The longest server name.
pub const MAX_SERVER_NAME: usize = 24;
/// The variables of the companion's own environment a server gets (besides its own `env`).
pub const KEPT_ENV: [&str; 8] = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "TZ"];
/// The largest result handed back, as JSON: Spool takes a tool output of up to 64 KiB, and the
/// model reads it in its prompt.
pub const MAX_RESULT_BYTES: usize = 48 * 1024;

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the MCP configuration {path}: {reason}")]
    Read {
        /// Where.
        path: String,
        /// Why.
        reason: String,
    },
    /// The file is not the expected JSON.
    #[error("the MCP configuration is not valid: {0}")]
    Invalid(String),
}

/// A stdio server as configured.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdioServer {
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment beyond [`KEPT_ENV`]: secrets (tokens), never shown.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The directory it runs in (the companion's own otherwise).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Left out when `true`.
    #[serde(default)]
    pub disabled: bool,
    /// Its transport, as Claude Desktop's newer files say it: only `stdio` is run here.
    #[serde(default, rename = "type")]
    pub transport: Option<String>,
}

impl fmt::Debug for StdioServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The env values are secrets: their names only.
        f.debug_struct("StdioServer")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("disabled", &self.disabled)
            .finish()
    }
}

/// The companion's MCP servers, by name.
#[derive(Debug, Clone, Default)]
pub struct McpConfig {
    /// The enabled servers.
    pub servers: BTreeMap<String, StdioServer>,
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(rename = "mcpServers", alias = "mcp_servers", default)]
    servers: BTreeMap<String, Value>,
}

impl McpConfig {
    /// The configuration in `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text)
    }

    /// The configuration in `text`: `{"mcpServers": {"<name>": {command, args?, env?, cwd?,
    /// disabled?}}}`. A name is 1 to [`MAX_SERVER_NAME`] of letters, digits, `-` and single
    /// `_`; only stdio servers (with a `command`) are run.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let file: ConfigFile = serde_json::from_str(text).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let mut servers = BTreeMap::new();
        for (name, value) in file.servers {
            check_server_name(&name).map_err(ConfigError::Invalid)?;
            if value.get("command").is_none() && value.get("url").is_some() {
                return Err(ConfigError::Invalid(format!(
                    "`{name}` is a remote server (`url`): the companion runs stdio servers (`command`); add remote ones to the workspace's MCP servers in Spool"
                )));
            }
            let server: StdioServer =
                serde_json::from_value(value).map_err(|e| ConfigError::Invalid(format!("`{name}`: {e}")))?;
            if server.transport.as_deref().is_some_and(|t| t != "stdio") {
                return Err(ConfigError::Invalid(format!(
                    "`{name}`: the companion runs `stdio` servers only"
                )));
            }
            if server.command.trim().is_empty() {
                return Err(ConfigError::Invalid(format!("`{name}`: give its `command`")));
            }
            if !server.disabled {
                servers.insert(name, server);
            }
        }
        Ok(Self { servers })
    }
}

/// Checks a server's name: it is part of its tools' names, which the browser splits again.
fn check_server_name(name: &str) -> Result<(), String> {
    let ok = (1..=MAX_SERVER_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains(SEPARATOR)
        && !name.starts_with('_')
        && !name.ends_with('_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}`: a server's name is 1 to {MAX_SERVER_NAME} of letters, digits, `-` and single `_` (it is part of its tools' names)",
            name.chars().take(40).collect::<String>()
        ))
    }
}

/// The name a chat sees for `tool` of `server`, when it is one a client may declare (at most
/// [`MAX_TOOL_NAME`] of letters, digits, `_` and `-`).
pub fn offered_name(server: &str, tool: &str) -> Option<String> {
    let name = format!("{TOOL_PREFIX}{SEPARATOR}{server}{SEPARATOR}{tool}");
    let ok = name.len() <= MAX_TOOL_NAME
        && !tool.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    ok.then_some(name)
}

/// A tool offered to chats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OfferedTool {
    /// The name a chat declares ([`offered_name`]).
    pub name: String,
    /// Its server.
    pub server: String,
    /// Its own name on the server.
    pub tool: String,
    /// What it does, for the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its input's JSON schema.
    pub input_schema: Value,
    /// Whether its server marks it read-only.
    pub read_only: bool,
}

/// A call's result as handed to the chat: `{content, structured_content?, is_error}`, where
/// text stays, an image's or audio's data is left out (said by its type and size: a tool's
/// output is text in the model's prompt), and the whole is cut to [`MAX_RESULT_BYTES`], the cut
/// said in the result.
pub fn shape_result(result: &Value) -> Value {
    let mut content = Vec::new();
    for block in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("unknown");
        content.push(match kind {
            "text" => json!({ "type": "text", "text": block.get("text").cloned().unwrap_or_default() }),
            "image" | "audio" => {
                let bytes = block.get("data").and_then(Value::as_str).map_or(0, |d| d.len() / 4 * 3);
                let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("unknown");
                json!({ "type": kind, "mime_type": mime, "note": format!("{kind} of {bytes} bytes ({mime}), not shown") })
            }
            "resource" => {
                let resource = block.get("resource").cloned().unwrap_or_default();
                let mut kept = json!({ "type": "resource", "uri": resource.get("uri").cloned().unwrap_or_default() });
                if let Some(text) = resource.get("text") {
                    kept["text"] = text.clone();
                } else if resource.get("blob").is_some() {
                    kept["note"] = json!("binary contents, not shown");
                }
                kept
            }
            _ => block.clone(),
        });
    }
    let mut shaped = json!({
        "content": content,
        "is_error": result.get("isError").and_then(Value::as_bool).unwrap_or(false),
    });
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        shaped["structured_content"] = structured.clone();
    }
    cap(shaped)
}

/// `shaped`, or when its JSON is over [`MAX_RESULT_BYTES`], its text cut to fit with a note.
fn cap(shaped: Value) -> Value {
    let size = shaped.to_string().len();
    if size <= MAX_RESULT_BYTES {
        return shaped;
    }
    // Room for the note and the JSON around the text.
    let room = MAX_RESULT_BYTES - 512;
    let mut text = String::new();
    for block in shaped["content"].as_array().into_iter().flatten() {
        match block.get("text").and_then(Value::as_str) {
            Some(t) => text.push_str(t),
            None => text.push_str(&block.to_string()),
        }
        text.push('\n');
    }
    if let Some(structured) = shaped.get("structured_content") {
        text.push_str(&structured.to_string());
    }
    // Escaping can grow the text in JSON: cut by what it takes there.
    let mut cut = String::new();
    let mut used = 0;
    for c in text.chars() {
        let width = serde_json::to_string(&c.to_string()).map_or(6, |s| s.len() - 2);
        if used + width > room {
            break;
        }
        used += width;
        cut.push(c);
    }
    json!({
        "content": [{ "type": "text", "text": cut }],
        "is_error": shaped["is_error"],
        "truncated": format!("the result was {size} bytes; results are cut at {MAX_RESULT_BYTES} bytes"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_of_claude_desktops_shape_is_read_and_checked() {
        // GIVEN a file with a server, a disabled one, and bad ones
        let config = McpConfig::parse(
            r#"{"mcpServers": {"everything": {"command": "node", "args": ["x.js", "stdio"], "env": {"TOKEN": "s3cr3t"}},
                               "off": {"command": "x", "disabled": true}}}"#,
        )
        .unwrap();
        // THEN the enabled one is there, and its Debug names its env without the value
        assert_eq!(config.servers.keys().collect::<Vec<_>>(), ["everything"]);
        let debug = format!("{config:?}");
        assert!(debug.contains("TOKEN") && !debug.contains("s3cr3t"), "{debug}");
        for (bad, says) in [
            (r#"{"mcpServers": {"a__b": {"command": "x"}}}"#, "name"),
            (r#"{"mcpServers": {"a b": {"command": "x"}}}"#, "name"),
            (r#"{"mcpServers": {"remote": {"url": "https://x"}}}"#, "stdio"),
            (r#"{"mcpServers": {"x": {"command": "x", "type": "sse"}}}"#, "stdio"),
            (r#"{"mcpServers": {"x": {"command": " "}}}"#, "command"),
            (r#"{"mcpServers": {"x": {"command": "x", "nope": 1}}}"#, "nope"),
            ("not json", "valid"),
        ] {
            let e = McpConfig::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn an_offered_name_is_one_a_client_may_declare() {
        assert_eq!(
            offered_name("everything", "get-sum").as_deref(),
            Some("companion__everything__get-sum")
        );
        assert_eq!(offered_name("x", "a.b"), None);
        assert_eq!(offered_name("x", &"t".repeat(60)), None);
        assert_eq!(offered_name("x", ""), None);
    }

    #[test]
    fn a_result_keeps_text_says_what_images_were_and_is_capped() {
        let shaped = shape_result(&json!({
            "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "structuredContent": {"sum": 3},
        }));
        assert_eq!(shaped["content"][0]["text"], "hi");
        assert!(shaped["content"][1].get("data").is_none(), "{shaped}");
        assert_eq!(shaped["content"][1]["mime_type"], "image/png");
        assert_eq!(shaped["structured_content"]["sum"], 3);
        assert_eq!(shaped["is_error"], false);
        let big = shape_result(&json!({ "content": [{"type": "text", "text": "\"x".repeat(MAX_RESULT_BYTES)}] }));
        assert!(big.to_string().len() <= MAX_RESULT_BYTES, "{}", big.to_string().len());
        assert!(
            big["truncated"].as_str().unwrap().contains("cut at"),
            "{}",
            big["truncated"]
        );
    }
}
