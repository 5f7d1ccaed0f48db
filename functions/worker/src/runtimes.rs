//! # Runtime choice from configuration
//!
//! What a turn runs on: the runtimes configuration enables (the scripted one, LLM providers,
//! sandboxed CLIs) and the engine's settings. The worker function and `spool serve` build their
//! [`spool_agents::Engine`] from these.

use std::sync::Arc;

/// The runtimes configuration enables: the scripted one always, an OpenAI-compatible and an
/// Anthropic provider when their keys or base URLs are set, and the CLIs found on the CLI
/// search path, sandboxed (a cleared environment with the operator's pass-through keys, chats'
/// own folders under the CLI work directory, working directories under the workspace roots).
pub fn runtimes(
    config: &spool_platform::Config,
    claims: Arc<dyn spool_chat::directory::Directory>,
) -> spool_agents::Runtimes {
    use secrecy::ExposeSecret;
    let settings = &config.agents;
    let key = |llm: &spool_platform::LlmSettings| llm.api_key.as_ref().map(|k| k.expose_secret().to_owned());
    let mut runtimes = spool_agents::Runtimes::scripted_only();
    if let Some(llm) = &settings.openai {
        let runtime = spool_agents::openai::OpenAi::new(&llm.base_url, key(llm), &llm.model);
        runtimes = runtimes.with_openai(Arc::new(runtime));
    }
    if let Some(llm) = &settings.anthropic {
        let runtime = spool_agents::anthropic::Anthropic::new(&llm.base_url, key(llm), &llm.model);
        runtimes = runtimes.with_anthropic(Arc::new(runtime));
    }
    runtimes.with_cli(Arc::new(cli_agents(config, claims)))
}

/// The CLI agents as configured: the search path, chats' folders, the time limit, and what
/// of the environment a CLI keeps.
pub fn cli_agents(
    config: &spool_platform::Config,
    claims: Arc<dyn spool_chat::directory::Directory>,
) -> spool_agents::cli::CliAgents {
    let settings = &config.agents;
    let env = settings.cli_environment();
    spool_agents::cli::CliAgents::new(
        settings.cli_path.clone(),
        config.cli_work_dir(),
        settings.cli_timeout.min(settings.turn_timeout),
    )
    .with_env(env)
    .with_roots(config.workspace_roots(claims))
}

/// The engine's settings from configuration: the turn's time limit, where CLI agents run
/// (`default_host` unless `SPOOL_CLI_HOST` says) and how long a turn waits for a runner.
pub fn engine_settings(
    config: &spool_platform::Config,
    claims: Arc<dyn spool_chat::directory::Directory>,
    default_host: spool_chat::settings::CliHost,
) -> spool_agents::Settings {
    spool_agents::Settings {
        cli_host: config.agents.cli_host.unwrap_or(default_host),
        runner_wait: config.agents.runner_wait,
        public_url: config.agents.public_url.clone(),
        step_timeout: config.agents.turn_timeout,
        workspace_roots: config.workspace_roots(claims),
        knowledge_base_url: config.agents.knowledge_base_url.clone(),
        inline: spool_agents::files::InlineLimits {
            text_bytes: config.attachments.inline_text_bytes,
            image_bytes: config.attachments.inline_image_bytes,
            ..spool_agents::files::InlineLimits::default()
        },
        // Stdio servers are started only where the composition says (`spool serve`).
        mcp: mcp_settings(
            config,
            false,
            spool_log::subscription::spec::UrlPolicy { loopback_http: false },
        ),
        ..spool_agents::Settings::default()
    }
}

/// How MCP servers are reached, from configuration: each call's time limit
/// (`SPOOL_MCP_CALL_TIMEOUT_MS`), what a stdio server keeps of the environment (`PATH` and the
/// locale, as CLI agents), its folders under the CLI work directory; stdio servers are started
/// only when `spawn_stdio` (`spool serve`, never a Lambda); http servers are reached at the URLs
/// `urls` allows (the deployment's webhook policy). The engine's and the probe's.
pub fn mcp_settings(
    config: &spool_platform::Config,
    spawn_stdio: bool,
    urls: spool_log::subscription::spec::UrlPolicy,
) -> spool_agents::mcp::McpSettings {
    spool_agents::mcp::McpSettings {
        urls,
        call_timeout: config.agents.mcp_call_timeout,
        spawn_stdio,
        env: config.agents.cli_inherited.clone(),
        work_root: config.cli_work_dir().join(".mcp"),
        ..spool_agents::mcp::McpSettings::default()
    }
}
