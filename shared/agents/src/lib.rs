//! # Agent turns
//!
//! Where agents run: the [`engine`] carries a turn forward as events in its chat's stream,
//! asking the [`runtime`] the chat's agent uses ([`runtimes`]) for replies, running or gating
//! its [`tools`] and workspace [`actions`], and replaying its [`state`] from the stream when it
//! resumes. The runtimes: [`scripted`] (no key needed; demos and tests), [`openai`]
//! (OpenAI-compatible chat completions), [`anthropic`] (Messages) and [`cli`] (claude, gemini,
//! codex and opencode as subprocesses).

pub mod actions;
pub mod anthropic;
pub mod cli;
mod cli_args;
pub mod context;
pub mod engine;
pub mod files;
pub mod history;
pub mod http;
pub mod mcp;
pub mod openai;
pub mod outbound;
pub mod runner;
pub mod runtime;
pub mod runtimes;
pub mod scripted;
pub mod state;
pub mod sweep;
pub mod tools;

pub use engine::{EndReason, Engine, Outcome, Settings, runner_check};
pub use runtimes::Runtimes;
