//! # The `spool` command
//!
//! `spool serve` runs Spool in one process over the embedded store, or over AWS (or an emulator
//! of it) with `--backend aws`: the HTTP API, the stream function's Durable Streams protocol
//! at `/v1/stream/…`, the worker (agent turns, page sealing) and the web UI at `/` ([`web`]).

use std::{net::SocketAddr, path::PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use spool_log::clock::{Clock, SystemClock};
use spool_platform::Config;

mod admin;
pub mod chat;
pub mod companion;
mod keys;
pub mod mcp;
pub mod runner;
mod serve;
pub mod server;
mod services;
pub mod web;
mod worker;

pub use serve::{App, app, serve};

/// Makes this process not dumpable, so the programs it starts as the same user (CLI agents,
/// stdio MCP servers) cannot read its secrets from `/proc/{pid}/environ` or its memory: a
/// process that is not dumpable has its `/proc` files owned by root. The programs, which
/// `exec`, are dumpable again (it is not inherited).
pub(crate) fn hide_from_children() {
    if let Err(e) = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable) {
        tracing::warn!(error = %e, "cannot hide this process's environment from the programs it starts");
    }
}

/// Spool: durable chat between people and AI agents.
#[derive(Debug, Parser)]
#[command(name = "spool", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Spool locally: every function in one process.
    Serve(ServeArgs),
    /// Manage organizations and API keys (on the backend `--backend` names).
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Run the companion on this machine: context from a folder of your notes for Spool's UI.
    Companion(companion::CompanionArgs),
    /// Talk in a chat from the terminal: messages, streamed answers, questions, approvals,
    /// `/` commands; Ctrl-C stops the running turn.
    Chat(chat::ChatArgs),
    /// Run a deployment's CLI turns on this machine: claude, gemini, codex or opencode where
    /// the code is, for the workspaces whose CLI agents run on runners.
    Runner(runner::RunnerArgs),
    /// Serve Spool's MCP tools on stdio for Claude Code, Cursor and other MCP clients: list,
    /// read and post in a deployment's chats, ask a person and wait for the answer.
    Mcp(mcp::McpArgs),
}

/// Where Spool's data lives; each option overrides its `SPOOL_*` variable.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// Where streams are stored [env: SPOOL_BACKEND; default: embedded].
    #[arg(long, value_parser = ["embedded", "aws"])]
    pub backend: Option<String>,
    /// The embedded store's directory [env: SPOOL_DATA_DIR; default: .spool].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Variables to read before the environment (with `--backend aws`, the file
    /// `make emulator-up` writes).
    #[arg(long, default_value = ".env.emulator")]
    pub env_file: PathBuf,
}

/// Options of `spool serve`; each overrides its `SPOOL_*` variable.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [env: SPOOL_ADDR; default: 127.0.0.1:8080].
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Where data lives.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Serve without authorization (for the conformance suite and local tools). Refused unless
    /// the address is a loopback one.
    #[arg(long)]
    pub no_auth: bool,
}

impl Cli {
    /// Runs the command.
    pub async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Serve(args) => {
                let config = args.config()?;
                if args.no_auth && !config.addr.ip().is_loopback() {
                    anyhow::bail!(
                        "--no-auth turns authorization off, so it only works on a loopback address; \
                         pass --addr 127.0.0.1:PORT or drop --no-auth"
                    );
                }
                serve(config, args.no_auth).await
            }
            Command::Admin(command) => admin::run(command).await,
            Command::Companion(args) => companion::run(args).await,
            Command::Chat(args) => chat::run(args).await,
            Command::Runner(args) => runner::run(args).await,
            Command::Mcp(args) => mcp::run(args).await,
        }
    }
}

impl ServeArgs {
    /// The configuration: the env file (for the AWS backend), then the environment, then flags.
    pub fn config(&self) -> anyhow::Result<Config> {
        let mut config = self.store.config()?;
        if let Some(addr) = self.addr {
            config.addr = addr;
        }
        Ok(config)
    }
}

impl StoreArgs {
    /// The configuration: the env file (for the AWS backend), then the environment, then flags.
    pub fn config(&self) -> anyhow::Result<Config> {
        let aws = self.backend.as_deref() == Some("aws");
        let mut config = if aws {
            Config::from_env_and_file(&self.env_file)
        } else {
            Config::from_env()
        }
        .context("invalid configuration")?;
        if let Some(backend) = &self.backend {
            config.backend = backend.parse().map_err(anyhow::Error::msg)?;
        }
        if let Some(dir) = &self.data_dir {
            config.data_dir.clone_from(dir);
        }
        Ok(config)
    }
}

/// The organization `--no-auth` requests act for, and the one `spool serve` makes on first start.
pub use spool_api::admin::LOCAL_ORG;

pub(crate) fn now_ms() -> i64 {
    SystemClock.now_ms()
}
