//! # How agents run: the model providers, CLI agents and workspace roots
//!
//! The agents' settings, and how their variables are read: a provider's endpoint, what a CLI
//! agent gets of Spool's environment, the roots workspaces' folders may be under.

use std::{collections::HashMap, path::PathBuf, time::Duration};

use secrecy::SecretString;

use crate::Error;

/// An LLM provider's endpoint.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// The API's base URL (for OpenAI-compatible servers, up to and including `/v1`).
    pub base_url: String,
    /// The API key, if the server needs one (Ollama and vLLM may not).
    pub api_key: Option<SecretString>,
    /// The model used when an agent names none.
    pub model: String,
}

/// How agents run.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// `SPOOL_TURN_MAX_ATTEMPTS`: how many times a turn step is tried before the turn is ended
    /// with an error (default 3; the template's dead-letter redrive says the same).
    pub turn_max_attempts: u32,
    /// `SPOOL_TURN_MAX_DELIVERIES`: how many times the turns queue delivers a job before its
    /// dead-letter queue (the template's `maxReceiveCount`; default the attempts and two more).
    /// Attempts count runs, not deliveries; the last delivery ends a turn whose step fails.
    pub turn_max_deliveries: u32,
    /// `SPOOL_TURN_LEASE_MS`: how long a worker holds a turn without a heartbeat (default
    /// 120000; the turns queue's visibility timeout in the template): a worker that dies loses
    /// its turns after at most this long, while a running step extends its lease every third
    /// of it.
    pub turn_lease: Duration,
    /// `SPOOL_WORKER_CONCURRENCY`: how many turns `spool serve`'s worker runs at once (default
    /// [`spool_chat::turns::DEFAULT_WORKER_CONCURRENCY`]).
    pub worker_concurrency: usize,
    /// `SPOOL_ORG_TURN_CONCURRENCY`: how many of them one organization may run at once (default
    /// [`spool_chat::turns::DEFAULT_ORG_TURN_CONCURRENCY`]); the queue hands turns out round-robin
    /// across organizations, and a turn waiting for this bound shows how many are ahead of it.
    pub org_turn_concurrency: usize,
    /// `SPOOL_OPENAI_API_KEY`, `SPOOL_OPENAI_BASE_URL` (default `https://api.openai.com/v1`),
    /// `SPOOL_OPENAI_MODEL` (default `gpt-4o-mini`): an OpenAI-compatible provider, configured
    /// when a key or a base URL is set.
    pub openai: Option<LlmSettings>,
    /// `SPOOL_ANTHROPIC_API_KEY`, `SPOOL_ANTHROPIC_BASE_URL` (default
    /// `https://api.anthropic.com`), `SPOOL_ANTHROPIC_MODEL` (default `claude-sonnet-4-5`).
    pub anthropic: Option<LlmSettings>,
    /// `SPOOL_CLI_TIMEOUT_MS`: how long a CLI agent may run (default 600000).
    pub cli_timeout: Duration,
    /// `SPOOL_CLI_PATH` (default: `PATH`): where CLI agents are looked for, `:`-separated.
    pub cli_path: Vec<PathBuf>,
    /// `SPOOL_CLI_WORK_DIR`: where chats' own folders for CLI agents are made (with their input
    /// and output files); unset, `{data_dir}/cli` ([`crate::Config::cli_work_dir`]), so `--data-dir`
    /// moves it too.
    pub cli_work_dir: Option<PathBuf>,
    /// `SPOOL_CLI_ENV`: the names of variables (provider keys, e.g.
    /// `ANTHROPIC_API_KEY,OPENAI_API_KEY`) passed through to CLI agents, with their values. A
    /// CLI gets nothing else of Spool's environment but `PATH` and the locale, so Spool's own
    /// variables (`SPOOL_*`) and cloud credentials (`AWS_*`) cannot be listed.
    pub cli_env: Vec<(String, SecretString)>,
    /// What a CLI keeps of Spool's environment: `PATH` (after the CLI search path, so the
    /// CLI finds its interpreter) and the locale (`LANG`, `LANGUAGE`, `LC_*`, `TZ`).
    pub cli_inherited: Vec<(String, String)>,
    /// `SPOOL_WORKSPACE_ROOTS`: the folders (`:`-separated) under which a workspace's working
    /// directory may be; none by default, so agents run only in folders of each chat's own. A
    /// root with `{org}` as a folder name (`/srv/repos/{org}`) is each organization's own; a
    /// plain one belongs to the first organization that uses it. Roots may not nest.
    pub workspace_roots: Vec<PathBuf>,
    /// `SPOOL_KNOWLEDGE_BASE_URL`: where the built-in agent points for documents about using
    /// Spool (default: Spool's own `/v1/docs`).
    pub knowledge_base_url: String,
    /// `SPOOL_TURN_TIMEOUT_MS`: the longest one step of a turn may spend in its runtime (model
    /// calls, a CLI, a script's pauses) before it is stopped and the turn fails (default
    /// 600000; the CLI's own limit cannot exceed it).
    pub turn_timeout: Duration,
    /// `SPOOL_CLI_HOST` (`server` or `runners`): where the CLI agents of a workspace that does
    /// not say run; unset, the composition's default (the worker under `spool serve`, runners
    /// on Lambda).
    pub cli_host: Option<spool_chat::settings::CliHost>,
    /// `SPOOL_RUNNER_WAIT_MS`: how long a turn of a `runners` workspace waits for a runner to
    /// take it (again, after one was lost) before it fails (default 600000).
    pub runner_wait: Duration,
    /// `SPOOL_PUBLIC_URL`: where people and runners reach this deployment (the CDN's address on
    /// AWS), for the `spool runner` command line Spool tells people to run; unset under `spool
    /// serve`, its own address.
    pub public_url: Option<String>,
    /// `SPOOL_MCP_CALL_TIMEOUT_MS`: the longest one call of an MCP server's tool may take
    /// before it ends with an error the model sees (default 60000).
    pub mcp_call_timeout: Duration,
}

impl AgentSettings {
    /// What a CLI agent's environment holds of this configuration: the locale and `PATH` it
    /// keeps ([`Self::cli_inherited`]), then the variables `SPOOL_CLI_ENV` passes through.
    pub fn cli_environment(&self) -> Vec<(String, String)> {
        use secrecy::ExposeSecret;
        self.cli_inherited
            .iter()
            .cloned()
            .chain(
                self.cli_env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose_secret().to_owned())),
            )
            .collect()
    }
}

/// Variables a CLI agent keeps from Spool's environment: `PATH`, and the locale, so its output
/// is in the right language and encoding.
pub(crate) const CLI_INHERITED_VARS: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_COLLATE",
    "LC_NUMERIC",
    "LC_TIME",
    "TZ",
];

/// The variables `SPOOL_CLI_ENV` names, with their values; Spool's own and cloud credentials
/// are refused.
pub(crate) fn cli_env(vars: &HashMap<String, String>) -> Result<Vec<(String, SecretString)>, Error> {
    let Some(list) = vars.get("SPOOL_CLI_ENV") else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let valid = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        let upper = name.to_ascii_uppercase();
        let reason = if !valid {
            Some(format!("`{name}` is not a variable name"))
        } else if upper.starts_with("SPOOL_") || upper.starts_with("AWS_") {
            Some(format!(
                "`{name}` is Spool's own configuration or a cloud credential, which agents must never see"
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::Invalid {
                var: "SPOOL_CLI_ENV",
                value: list.clone(),
                reason,
            });
        }
        if let Some(value) = vars.get(name) {
            out.push((name.to_owned(), SecretString::from(value.clone())));
        }
    }
    Ok(out)
}

/// `SPOOL_WORKSPACE_ROOTS`, `:`-separated, checked ([`spool_chat::confine::check_roots`]).
pub(crate) fn workspace_roots(vars: &HashMap<String, String>) -> Result<Vec<PathBuf>, Error> {
    let Some(value) = vars.get("SPOOL_WORKSPACE_ROOTS") else {
        return Ok(Vec::new());
    };
    let roots: Vec<PathBuf> = std::env::split_paths(value)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    spool_chat::confine::check_roots(&roots).map_err(|reason| Error::Invalid {
        var: "SPOOL_WORKSPACE_ROOTS",
        value: value.clone(),
        reason,
    })?;
    Ok(roots)
}

/// A provider's settings (`SPOOL_{name}_API_KEY`, `_BASE_URL`, `_MODEL`), when its key or base
/// URL is set.
pub(crate) fn llm(vars: &HashMap<String, String>, name: &str, base_url: &str, model: &str) -> Option<LlmSettings> {
    let get = |suffix: &str| vars.get(&format!("SPOOL_{name}_{suffix}")).cloned();
    let api_key = get("API_KEY");
    let url = get("BASE_URL");
    if api_key.is_none() && url.is_none() {
        return None;
    }
    Some(LlmSettings {
        base_url: url
            .unwrap_or_else(|| base_url.to_owned())
            .trim_end_matches('/')
            .to_owned(),
        api_key: api_key.map(SecretString::from),
        model: get("MODEL").unwrap_or_else(|| model.to_owned()),
    })
}
