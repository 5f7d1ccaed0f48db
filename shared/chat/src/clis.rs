//! # Which CLI agents a deployment can run
//!
//! The worker runs CLI agents (claude, gemini, codex, opencode) it finds on its search path.
//! [`CliProbe`] says, for each, whether it is installed there, its version, and whether it
//! answers `--version` (healthy) or why not: for the UI's CLI choices and the agents' context.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::workspace::CliType;

/// One CLI as this deployment has it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CliStatus {
    /// The CLI.
    pub cli: CliType,
    /// Whether its program is on the search path.
    pub installed: bool,
    /// What `--version` printed (its first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Whether it answered `--version` (so a turn can run it).
    pub healthy: bool,
    /// Why it cannot run, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl CliStatus {
    /// A CLI this deployment cannot run, and why.
    pub fn unavailable(cli: CliType, reason: impl Into<String>) -> Self {
        Self {
            cli,
            installed: false,
            version: None,
            healthy: false,
            reason: Some(reason.into()),
        }
    }
}

/// Checks the CLIs where agents run.
#[async_trait]
pub trait CliProbe: Send + Sync {
    /// Every CLI Spool knows, in the built-in agent's order of preference.
    async fn clis(&self) -> Vec<CliStatus>;
}
