//! # Configuration and telemetry for every Spool binary
//!
//! The environment is read once, at start-up, into a typed [`Config`]; nothing else in Spool
//! calls `std::env::var`. Values can also come from an env file (`.env.emulator`, written by
//! `make emulator-up`), which the process environment overrides, so no code ever needs
//! `set_var`.
//!
//! [`Config`] and how it is read from variables are in `config`, the settings it holds in
//! `settings` and `agents`, the parsing of single variables and env files in `vars`, the
//! errors in `error`, and the local process's tracing in `telemetry`.

mod agents;
mod config;
mod error;
mod settings;
mod telemetry;
#[cfg(test)]
mod tests;
mod vars;

pub use agents::{AgentSettings, LlmSettings};
pub use config::Config;
pub use error::Error;
pub use settings::{AttachmentSettings, AwsSettings, Backend, ServerSettings, StaticCredentials};
pub use telemetry::init_local_tracing;
pub use vars::read_env_file;
