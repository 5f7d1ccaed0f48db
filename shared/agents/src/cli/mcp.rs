//! A workspace's MCP servers, given to a CLI in its own MCP configuration.
//!
//! Each CLI takes MCP servers its own way (checked against the versions `tests/clis` pins by
//! `make cli-check`):
//! - claude 2.1.197: `--mcp-config <file>` with `{"mcpServers": {…}}`, `--strict-mcp-config`
//!   so only Spool's servers load, `--allowedTools mcp__<server>` (print mode runs no tool it
//!   was not allowed) and `--disallowedTools` for the tools that may not run;
//! - gemini 0.61.0: its system settings file (`GEMINI_CLI_SYSTEM_SETTINGS_PATH`), whose
//!   `mcpServers` (with `excludeTools`) override every other settings file;
//! - codex 0.169.0: `config.toml` in its home (`CODEX_HOME`), `[mcp_servers.<name>]` with
//!   `command`/`args`/`env` or `url`/`http_headers`, and `disabled_tools`;
//! - opencode 1.18.33: its config file (`OPENCODE_CONFIG`), `mcp` with `local` and `remote`
//!   servers, and `tools: {"<server>_<tool>": false}`.
//!
//! The servers' header and environment values are secrets: they go into a file in a private
//! folder (0700) outside the chat's own folder, made for one run and removed when the run ends
//! (whatever way it ends), never on a command line (which every user of the machine can read)
//! and never in the CLI's environment (which every command the CLI runs inherits).
//!
//! A CLI runs unattended, so it cannot wait for a person's approval: a tool whose policy is
//! `ask` is not offered to it, like a `deny` one. A tool with no policy is offered.

use std::{ffi::OsString, path::Path};

use serde_json::{Map, Value, json};
use spool_chat::{
    mcp::{McpEndpoint, McpLaunch, ToolPolicy},
    workspace::CliType,
};

use crate::runtime::Error;

/// What a CLI's run gets for the workspace's MCP servers: arguments to append, variables to
/// set, and the private folder that holds the configuration (removed when this is dropped).
#[derive(Default)]
pub(super) struct McpSetup {
    /// Arguments appended to the CLI's command line.
    pub(super) args: Vec<String>,
    /// Variables set in the CLI's environment (paths, never secrets).
    pub(super) env: Vec<(String, OsString)>,
    /// The private folder, removed on drop.
    _dir: Option<tempfile::TempDir>,
}

/// Whether `name` can name a server in every CLI's configuration (a TOML key, a tool prefix).
fn usable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The servers a CLI can be given: those whose name each CLI can take.
fn usable(servers: &[McpEndpoint]) -> impl Iterator<Item = &McpEndpoint> {
    servers.iter().filter(|s| {
        let ok = usable_name(&s.name);
        if !ok {
            tracing::warn!(server = %s.id, "an MCP server's name cannot be given to a CLI; it is left out");
        }
        ok
    })
}

/// The tools of `server` a CLI may not run: those whose policy is `ask` or `deny`.
fn withheld(server: &McpEndpoint) -> impl Iterator<Item = &str> {
    server
        .tools
        .iter()
        .filter(|(_, p)| matches!(p, ToolPolicy::Ask | ToolPolicy::Deny))
        .map(|(t, _)| t.as_str())
}

/// The servers as claude's and gemini's `mcpServers` (the same shape but for the type's key).
fn mcp_servers(servers: &[McpEndpoint], cli: CliType) -> Value {
    let mut out = Map::new();
    for server in usable(servers) {
        let mut entry = match &server.launch {
            McpLaunch::Stdio { command, args, env } => {
                let env: Map<String, Value> = env.iter().map(|(k, v)| (k.clone(), json!(v.expose()))).collect();
                let mut e = json!({ "command": command, "args": args, "env": env });
                if cli == CliType::Claude {
                    e["type"] = json!("stdio");
                }
                e
            }
            McpLaunch::Http { url, headers } => {
                let headers: Map<String, Value> = headers.iter().map(|(k, v)| (k.clone(), json!(v.expose()))).collect();
                match cli {
                    // gemini's `httpUrl` is Streamable HTTP (`url` is SSE).
                    CliType::Gemini => json!({ "httpUrl": url, "headers": headers }),
                    _ => json!({ "type": "http", "url": url, "headers": headers }),
                }
            }
        };
        if cli == CliType::Gemini {
            let excluded: Vec<&str> = withheld(server).collect();
            if !excluded.is_empty() {
                entry["excludeTools"] = json!(excluded);
            }
        }
        out.insert(server.name.clone(), entry);
    }
    Value::Object(out)
}

/// claude's `--mcp-config` file.
pub(super) fn claude_config(servers: &[McpEndpoint]) -> Value {
    json!({ "mcpServers": mcp_servers(servers, CliType::Claude) })
}

/// claude's tool permissions: every tool of each server allowed, but those withheld.
pub(super) fn claude_tools(servers: &[McpEndpoint]) -> (Vec<String>, Vec<String>) {
    let allowed = usable(servers).map(|s| format!("mcp__{}", s.name)).collect();
    let denied = usable(servers)
        .flat_map(|s| withheld(s).map(move |t| format!("mcp__{}__{t}", s.name)))
        .collect();
    (allowed, denied)
}

/// gemini's system settings file.
pub(super) fn gemini_settings(servers: &[McpEndpoint]) -> Value {
    json!({ "mcpServers": mcp_servers(servers, CliType::Gemini) })
}

/// opencode's config file.
pub(super) fn opencode_config(servers: &[McpEndpoint]) -> Value {
    let sanitize = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut mcp = Map::new();
    let mut tools = Map::new();
    for server in usable(servers) {
        let entry = match &server.launch {
            McpLaunch::Stdio { command, args, env } => {
                let mut line = vec![command.clone()];
                line.extend(args.iter().cloned());
                let env: Map<String, Value> = env.iter().map(|(k, v)| (k.clone(), json!(v.expose()))).collect();
                json!({ "type": "local", "command": line, "environment": env, "enabled": true })
            }
            McpLaunch::Http { url, headers } => {
                let headers: Map<String, Value> = headers.iter().map(|(k, v)| (k.clone(), json!(v.expose()))).collect();
                json!({ "type": "remote", "url": url, "headers": headers, "oauth": false, "enabled": true })
            }
        };
        mcp.insert(server.name.clone(), entry);
        for tool in withheld(server) {
            tools.insert(format!("{}_{}", sanitize(&server.name), sanitize(tool)), json!(false));
        }
    }
    let mut config = json!({ "$schema": "https://opencode.ai/config.json", "mcp": mcp });
    if !tools.is_empty() {
        config["tools"] = Value::Object(tools);
    }
    config
}

/// A TOML string (a JSON string is one: the same escapes, and serde_json writes no `\/`).
fn toml_str(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// A TOML inline table of strings.
fn toml_table<'a>(entries: impl Iterator<Item = (&'a String, &'a str)>) -> String {
    let items: Vec<String> = entries
        .map(|(k, v)| format!("{} = {}", toml_str(k), toml_str(v)))
        .collect();
    format!("{{ {} }}", items.join(", "))
}

/// How long codex waits for a server to start, in seconds.
const CODEX_STARTUP_TIMEOUT_S: u64 = 30;

/// codex's `config.toml`.
pub(super) fn codex_config(servers: &[McpEndpoint]) -> String {
    let mut text = String::from("# Spool's MCP servers for one run.\n");
    for server in usable(servers) {
        text.push_str(&format!("\n[mcp_servers.{}]\n", toml_str(&server.name)));
        // Its default, 10 s, is shorter than a server started with `npx` may take.
        text.push_str(&format!("startup_timeout_sec = {CODEX_STARTUP_TIMEOUT_S}\n"));
        match &server.launch {
            McpLaunch::Stdio { command, args, env } => {
                text.push_str(&format!("command = {}\n", toml_str(command)));
                let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
                text.push_str(&format!("args = [{}]\n", args.join(", ")));
                if !env.is_empty() {
                    text.push_str(&format!(
                        "env = {}\n",
                        toml_table(env.iter().map(|(k, v)| (k, v.expose())))
                    ));
                }
            }
            McpLaunch::Http { url, headers } => {
                text.push_str(&format!("url = {}\n", toml_str(url)));
                if !headers.is_empty() {
                    text.push_str(&format!(
                        "http_headers = {}\n",
                        toml_table(headers.iter().map(|(k, v)| (k, v.expose())))
                    ));
                }
            }
        }
        let disabled: Vec<String> = withheld(server).map(toml_str).collect();
        if !disabled.is_empty() {
            text.push_str(&format!("disabled_tools = [{}]\n", disabled.join(", ")));
        }
    }
    text
}

/// Writes `text` to `path`, readable by Spool's user only.
fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| Error::Failed(format!("cannot write the CLI's MCP configuration: {e}")))
}

/// What `cli` gets for `servers`: nothing when there are none; else the configuration written
/// in a new private folder under `root` (`{work root}/.mcp`, beside the organizations' folders,
/// not in a chat's). Not the system's temporary folder: gemini skips a settings file with a
/// folder writable by others (`/tmp`) above it, and codex will not work from one.
pub(super) fn setup(cli: CliType, servers: &[McpEndpoint], root: &Path) -> Result<McpSetup, Error> {
    if usable(servers).next().is_none() {
        return Ok(McpSetup::default());
    }
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let private = std::fs::Permissions::from_mode(0o700);
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .and_then(|()| std::fs::set_permissions(root, private.clone()));
    if let Err(e) = made {
        return Err(Error::Failed(format!(
            "cannot make a private folder for the CLI's MCP configuration: {e}"
        )));
    }
    let dir = tempfile::Builder::new()
        .prefix("run-")
        .permissions(private)
        .tempdir_in(root)
        .map_err(|e| {
            Error::Failed(format!(
                "cannot make a private folder for the CLI's MCP configuration: {e}"
            ))
        })?;
    let mut setup = McpSetup::default();
    match cli {
        CliType::Claude => {
            let path = dir.path().join("mcp.json");
            write_private(&path, &claude_config(servers).to_string())?;
            let (allowed, denied) = claude_tools(servers);
            setup.args.extend([
                "--mcp-config".to_owned(),
                path.display().to_string(),
                "--strict-mcp-config".to_owned(),
                "--allowedTools".to_owned(),
                allowed.join(","),
            ]);
            if !denied.is_empty() {
                setup.args.extend(["--disallowedTools".to_owned(), denied.join(",")]);
            }
        }
        CliType::Gemini => {
            use std::os::unix::fs::MetadataExt;
            let shared = root
                .ancestors()
                .find(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o022 != 0));
            if let Some(shared) = shared {
                tracing::warn!(folder = %shared.display(), "gemini ignores a settings file below a folder others may write: this run gets no MCP server; move the CLIs' work root");
            }
            let path = dir.path().join("settings.json");
            write_private(&path, &gemini_settings(servers).to_string())?;
            setup
                .env
                .push(("GEMINI_CLI_SYSTEM_SETTINGS_PATH".to_owned(), path.into()));
        }
        CliType::Codex => {
            write_private(&dir.path().join("config.toml"), &codex_config(servers))?;
            setup.env.push(("CODEX_HOME".to_owned(), dir.path().into()));
        }
        CliType::Opencode => {
            let path = dir.path().join("opencode.json");
            write_private(&path, &opencode_config(servers).to_string())?;
            setup.env.push(("OPENCODE_CONFIG".to_owned(), path.into()));
        }
    }
    setup._dir = Some(dir);
    Ok(setup)
}

/// Removes the private folders under `root` last written more than `age` ago: those of runs
/// whose process died before removing them (a live run's is younger than its time limit). How
/// many.
pub(super) fn sweep(root: &Path, age: std::time::Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    let stale = |e: &std::fs::DirEntry| {
        e.metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|elapsed| elapsed > age))
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("run-") && stale(e))
        .filter(|e| std::fs::remove_dir_all(e.path()).is_ok())
        .count()
}

#[cfg(test)]
#[path = "mcp_tests.rs"]
mod tests;
