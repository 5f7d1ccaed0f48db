//! # Which runtime answers a chat
//!
//! An agent names its runtime (`scripted`, `openai`, `anthropic`, `cli`); a chat's CLI override
//! wins over it. The workspace's built-in Spool agent (and a chat with no agent) takes, in
//! order: the chat's CLI override; the configured LLM provider; the first installed CLI
//! (claude → gemini → codex → opencode); the scripted demo. So `make run` answers with nothing
//! configured, and `agent_start` records which runtime answered.

use std::sync::Arc;

use spool_chat::{
    session::Session,
    workspace::{Agent, CliType, Runtime as RuntimeKind},
};

use crate::{runtime::Runtime, scripted::Scripted};

/// The runtimes this process can run.
#[derive(Clone)]
pub struct Runtimes {
    scripted: Arc<dyn Runtime>,
    openai: Option<Arc<dyn Runtime>>,
    anthropic: Option<Arc<dyn Runtime>>,
    /// The CLI runtime for a given CLI, if that CLI is installed.
    cli: Option<Arc<dyn CliRuntimes>>,
    /// The LLM provider the built-in agent prefers, when one is configured.
    preferred: Option<RuntimeKind>,
}

/// CLI runtimes, by CLI (and how healthy each is).
pub trait CliRuntimes: spool_chat::clis::CliProbe {
    /// What is known of the CLIs without running them (for a turn, which must not wait on
    /// a probe).
    fn known_clis(&self) -> Vec<spool_chat::clis::CliStatus>;
    /// The runtime for `cli`, or why it cannot run.
    fn runtime(&self, cli: CliType) -> Result<Arc<dyn Runtime>, String>;
    /// The first installed CLI, in the built-in agent's order.
    fn first_installed(&self) -> Option<CliType>;
}

impl Default for Runtimes {
    fn default() -> Self {
        Self::scripted_only()
    }
}

impl std::fmt::Debug for Runtimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtimes")
            .field("openai", &self.openai.is_some())
            .field("anthropic", &self.anthropic.is_some())
            .field("cli", &self.cli.is_some())
            .finish_non_exhaustive()
    }
}

impl Runtimes {
    /// Only the scripted runtime.
    pub fn scripted_only() -> Self {
        Self {
            scripted: Arc::new(Scripted),
            openai: None,
            anthropic: None,
            cli: None,
            preferred: None,
        }
    }

    /// With an OpenAI-compatible runtime.
    #[must_use]
    pub fn with_openai(mut self, runtime: Arc<dyn Runtime>) -> Self {
        self.openai = Some(runtime);
        self.preferred.get_or_insert(RuntimeKind::Openai);
        self
    }

    /// With an Anthropic runtime.
    #[must_use]
    pub fn with_anthropic(mut self, runtime: Arc<dyn Runtime>) -> Self {
        self.anthropic = Some(runtime);
        self.preferred.get_or_insert(RuntimeKind::Anthropic);
        self
    }

    /// What this process can run, for the agents' context.
    pub fn capabilities(&self) -> crate::context::Capabilities {
        let mut providers = Vec::new();
        if self.openai.is_some() {
            providers.push("OpenAI-compatible");
        }
        if self.anthropic.is_some() {
            providers.push("Anthropic");
        }
        let clis = self.cli.as_ref().map(|cli| cli.known_clis()).unwrap_or_default();
        crate::context::Capabilities { clis, providers }
    }

    /// The same runtimes, with the CLIs runners offer in place of this process's own: for a
    /// chat of a workspace whose CLI agents run on runners.
    #[must_use]
    pub fn on_runners(&self, offered: Arc<dyn CliRuntimes>) -> Self {
        let mut runtimes = self.clone();
        runtimes.cli = Some(offered);
        runtimes
    }

    /// With CLI runtimes.
    #[must_use]
    pub fn with_cli(mut self, cli: Arc<dyn CliRuntimes>) -> Self {
        self.cli = Some(cli);
        self
    }

    fn cli(&self, cli: CliType) -> Result<Arc<dyn Runtime>, String> {
        self.cli
            .as_ref()
            .ok_or_else(|| "CLI agents are not enabled here".to_owned())?
            .runtime(cli)
    }

    fn kind(&self, kind: RuntimeKind, cli: Option<CliType>) -> Result<Arc<dyn Runtime>, String> {
        match kind {
            RuntimeKind::Scripted => Ok(self.scripted.clone()),
            RuntimeKind::Openai => self.openai.clone().ok_or_else(|| {
                "this agent uses an OpenAI-compatible model, and none is configured: set SPOOL_OPENAI_API_KEY \
                 (and SPOOL_OPENAI_BASE_URL for Ollama, vLLM or OpenRouter)"
                    .to_owned()
            }),
            RuntimeKind::Anthropic => self.anthropic.clone().ok_or_else(|| {
                "this agent uses Anthropic, and no key is configured: set SPOOL_ANTHROPIC_API_KEY".to_owned()
            }),
            RuntimeKind::Cli => match cli.or_else(|| self.cli.as_ref().and_then(|c| c.first_installed())) {
                Some(cli) => self.cli(cli),
                None => {
                    Err("this agent runs a CLI, and none is installed (claude, gemini, codex or opencode)".to_owned())
                }
            },
        }
    }

    /// The runtime for a chat with `agent`, or why there is none.
    pub fn pick(&self, agent: Option<&Agent>, session: &Session) -> Result<Arc<dyn Runtime>, String> {
        if let Some(cli) = session.cli_override {
            return self.cli(cli);
        }
        match agent {
            Some(agent) if !agent.builtin => match agent.runtime {
                Some(kind) => self.kind(kind, agent.cli_type),
                None => match agent.cli_type {
                    Some(cli) => self.cli(cli),
                    None => self.builtin(agent.cli_type),
                },
            },
            Some(agent) => match agent.runtime {
                Some(kind) => self.kind(kind, agent.cli_type),
                None => self.builtin(agent.cli_type),
            },
            None => self.builtin(None),
        }
    }

    /// The built-in agent's order: a configured LLM, its CLI or the first installed one, the
    /// scripted demo.
    fn builtin(&self, cli: Option<CliType>) -> Result<Arc<dyn Runtime>, String> {
        if let Some(kind) = self.preferred {
            return self.kind(kind, None);
        }
        if let Some(cli) = cli.or_else(|| self.cli.as_ref().and_then(|c| c.first_installed()))
            && let Ok(runtime) = self.cli(cli)
        {
            return Ok(runtime);
        }
        Ok(self.scripted.clone())
    }
}
