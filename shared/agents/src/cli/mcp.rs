//! A workspace's MCP servers, given to a CLI in its own MCP configuration.
//!
//! Each CLI takes MCP servers its own way (checked against the versions `tests/clis` pins by
//! `make cli-check`):
//! - claude 2.1.197: `--mcp-config <file>` with `{"mcpServers": {…}}`, `--strict-mcp-config`
//!   so only Spool's servers load, `--allowedTools mcp__<server>__<tool>` for each tool it is
//!   offered (print mode runs no tool it was not allowed) and `--disallowedTools` for the
//!   server's other tools that are known;
//! - gemini 0.61.0: its system settings file (`GEMINI_CLI_SYSTEM_SETTINGS_PATH`), whose
//!   `mcpServers` (with `includeTools`) override every other settings file;
//! - codex 0.169.0: `config.toml` in its home (`CODEX_HOME`), `[mcp_servers.<name>]` with
//!   `command`/`args`/`env` or `url`/`http_headers`, and `enabled_tools`;
//! - opencode 1.18.33: its config file (`OPENCODE_CONFIG`), `mcp` with `local` and `remote`
//!   servers, and `tools: {"<server>_*": false, "<server>_<tool>": true}`.
//!
//! The servers' header and environment values are secrets: they go into a file in a private
//! folder (0700) outside the chat's own folder, made for one run and removed when the run ends
//! (whatever way it ends), never on a command line (which every user of the machine can read)
//! and never in the CLI's environment (which every command the CLI runs inherits).
//!
//! A CLI runs unattended, so it cannot wait for a person's approval: it gets an allowlist, the
//! tools whose policy is `allow` and those with no policy that the server marks read-only (whose
//! default policy is `allow`), when the engine could list them ([`Listed`]). No other tool is
//! offered (their default, or set, policy is `ask` or `deny`), and a server with no tool
//! offered is not given at all.

use std::{collections::BTreeMap, ffi::OsString, path::Path};

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

/// For each server (by id) whose tools the engine listed, its tools and whether the server
/// marks each read-only ([`crate::runtime::Request::mcp_listed`]).
pub(super) type Listed = BTreeMap<String, BTreeMap<String, bool>>;

/// A server as a CLI is given it.
struct Offer<'a> {
    server: &'a McpEndpoint,
    /// The tools the CLI may run: its allowlist, never empty.
    allowed: Vec<&'a str>,
    /// The server's other tools that are known (set a policy, or listed).
    withheld: Vec<&'a str>,
}

/// The tools of `server` a CLI may run: those whose policy is `allow`, and those with no
/// policy that the server marks read-only (in `listed`, what the engine found on it); and the
/// others that are known.
fn allowlist<'a>(server: &'a McpEndpoint, listed: Option<&'a BTreeMap<String, bool>>) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut names: Vec<&str> = server.tools.keys().map(String::as_str).collect();
    names.extend(listed.into_iter().flat_map(|l| l.keys().map(String::as_str)));
    names.sort_unstable();
    names.dedup();
    names.into_iter().partition(|tool| match server.tools.get(*tool) {
        Some(policy) => *policy == ToolPolicy::Allow,
        None => listed.and_then(|l| l.get(*tool)).copied().unwrap_or(false),
    })
}

/// The servers a CLI is given: those whose name each CLI can take and that have a tool it may
/// run, with their allowlists.
fn offers<'a>(servers: &'a [McpEndpoint], listed: &'a Listed) -> Vec<Offer<'a>> {
    servers
        .iter()
        .filter_map(|server| {
            if !usable_name(&server.name) {
                tracing::warn!(server = %server.id, "an MCP server's name cannot be given to a CLI; it is left out");
                return None;
            }
            let (allowed, withheld) = allowlist(server, listed.get(&server.id));
            if allowed.is_empty() {
                tracing::info!(server = %server.name, "no tool of an MCP server may run unattended; a CLI is not given it");
                return None;
            }
            Some(Offer {
                server,
                allowed,
                withheld,
            })
        })
        .collect()
}

/// The servers as claude's and gemini's `mcpServers` (the same shape but for the type's key).
fn mcp_servers(offers: &[Offer<'_>], cli: CliType) -> Value {
    let mut out = Map::new();
    for offer in offers {
        let server = offer.server;
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
            entry["includeTools"] = json!(offer.allowed);
        }
        out.insert(server.name.clone(), entry);
    }
    Value::Object(out)
}

/// claude's `--mcp-config` file.
fn claude_config(offers: &[Offer<'_>]) -> Value {
    json!({ "mcpServers": mcp_servers(offers, CliType::Claude) })
}

/// claude's tool permissions: each tool of the allowlists, and the servers' other known tools
/// denied.
fn claude_tools(offers: &[Offer<'_>]) -> (Vec<String>, Vec<String>) {
    let named = |o: &Offer<'_>, tools: &[&str]| -> Vec<String> {
        tools.iter().map(|t| format!("mcp__{}__{t}", o.server.name)).collect()
    };
    let allowed = offers.iter().flat_map(|o| named(o, &o.allowed)).collect();
    let denied = offers.iter().flat_map(|o| named(o, &o.withheld)).collect();
    (allowed, denied)
}

/// gemini's system settings file.
fn gemini_settings(offers: &[Offer<'_>]) -> Value {
    json!({ "mcpServers": mcp_servers(offers, CliType::Gemini) })
}

/// opencode's config file.
fn opencode_config(offers: &[Offer<'_>]) -> Value {
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
    for offer in offers {
        let server = offer.server;
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
        // Every tool of the server off, then those of its allowlist on (the more specific
        // pattern wins).
        tools.insert(format!("{}_*", sanitize(&server.name)), json!(false));
        for tool in &offer.allowed {
            tools.insert(format!("{}_{}", sanitize(&server.name), sanitize(tool)), json!(true));
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
fn codex_config(offers: &[Offer<'_>]) -> String {
    let mut text = String::from("# Spool's MCP servers for one run.\n");
    for offer in offers {
        let server = offer.server;
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
        let enabled: Vec<String> = offer.allowed.iter().map(|t| toml_str(t)).collect();
        text.push_str(&format!("enabled_tools = [{}]\n", enabled.join(", ")));
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

/// What `cli` gets for `request`'s MCP servers ([`setup`]).
pub(super) fn setup_for(cli: CliType, request: &crate::runtime::Request, root: &Path) -> Result<McpSetup, Error> {
    setup(cli, &request.mcp_servers, &request.mcp_listed, root)
}

/// What `cli` gets for `servers` (with what the engine `listed` of their tools): nothing when
/// no server has a tool the CLI may run; else the configuration written
/// in a new private folder under `root` (`{work root}/.mcp`, beside the organizations' folders,
/// not in a chat's). Not the system's temporary folder: gemini skips a settings file with a
/// folder writable by others (`/tmp`) above it, and codex will not work from one.
pub(super) fn setup(cli: CliType, servers: &[McpEndpoint], listed: &Listed, root: &Path) -> Result<McpSetup, Error> {
    let offers = offers(servers, listed);
    if offers.is_empty() {
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
            write_private(&path, &claude_config(&offers).to_string())?;
            let (allowed, denied) = claude_tools(&offers);
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
            write_private(&path, &gemini_settings(&offers).to_string())?;
            setup
                .env
                .push(("GEMINI_CLI_SYSTEM_SETTINGS_PATH".to_owned(), path.into()));
        }
        CliType::Codex => {
            write_private(&dir.path().join("config.toml"), &codex_config(&offers))?;
            setup.env.push(("CODEX_HOME".to_owned(), dir.path().into()));
        }
        CliType::Opencode => {
            let path = dir.path().join("opencode.json");
            write_private(&path, &opencode_config(&offers).to_string())?;
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
