//! `make cli-check`: Spool against the real claude, gemini, codex and opencode CLIs, installed
//! from npm into `tests/clis` (versions pinned by its lock file).
//!
//! For each CLI it checks what a turn depends on:
//! 1. Spool's own probe (`GET /v1/clis`) finds it, runs `--version` and reads the version;
//! 2. the CLI runtime runs it exactly as a turn does (the command line of
//!    `spool_agents::cli::arguments`, with a model as `/model` sets one, a cleared environment,
//!    a private `HOME`, the chat's own folder), and the CLI accepts that command line: it may fail here only for want of
//!    credentials or a network, never with a usage error;
//! 3. its help (`codex exec --help`, `opencode run --help`) lists `--model`, the flag a chat's
//!    model goes in;
//! 4. as a control, the same command line with a flag the CLI does not have *is* seen as a usage
//!    error, so step 2 could have failed.
//!
//! Then each CLI is given the reference MCP server in its own MCP configuration and talks to a
//! fake model provider ([`mcp`]): its model request must list the server's tools, a denied
//! tool must not be offered, and the server's secret must stay out of the chat's folder.
//!
//! Then the same CLIs run through a runner ([`runner`]): a real `spool serve` with no CLI of its
//! own hands each chat's turn to a real `spool runner` whose search path holds them, and no turn
//! may end with a usage error there either.
//!
//! Usage: `spool-cli-check <folder of the CLIs' executables> [--only-mcp]`; exits non-zero on
//! any failure.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use async_trait::async_trait;
use spool_agents::{
    cli::{CliAgents, arguments, program},
    runtime::{Error, Message, Request, Sink, TurnContext},
    runtimes::CliRuntimes,
};
use spool_chat::{clis::CliProbe, workspace::CliType};

mod mcp;
mod runner;

/// How long one run may take: a CLI that got past its arguments and waits on a network it
/// cannot reach here is accepted.
const RUN_TIMEOUT: Duration = Duration::from_secs(20);

/// How long `--help`, or a command line with a flag the CLI lacks, may take: both end by
/// themselves, so only a hang stops them (a dozen Node programs starting at once on a busy
/// machine take far longer than one alone).
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// Whether a CLI's output is a complaint about its command line.
fn usage_error(output: &str) -> bool {
    let lower = output.to_lowercase();
    [
        "unknown option",
        "unknown argument",
        "unexpected argument",
        "unrecognized option",
        "unrecognized argument",
        "usage:",
        "positionals:",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

struct Discard;

#[async_trait]
impl Sink for Discard {
    async fn text(&mut self, _: &str) -> Result<(), Error> {
        Ok(())
    }
}

fn request(cli: CliType) -> Request {
    Request {
        instruction: "Answer in one word.".to_owned(),
        agent_instruction: String::new(),
        messages: vec![Message::User {
            text: "Say hello.".to_owned(),
        }],
        tools: Vec::new(),
        model: Some(model(cli).to_owned()),
        context: TurnContext {
            org: "org_cli_check".to_owned(),
            session_id: format!("ses_{}", program(cli)),
            title: "CLI check".to_owned(),
            turn_id: "turn_1".to_owned(),
            agent_name: "Checker".to_owned(),
            ..TurnContext::default()
        },
        workspace_context: None,
        stamps: Vec::new(),
        files: Vec::new(),
        file_access: None,
        mcp_servers: Vec::new(),
        mcp_listed: std::collections::BTreeMap::new(),
    }
}

/// A model each CLI knows, so the check runs the command line a chat with `/model` gets (its
/// `--model` flag too).
fn model(cli: CliType) -> &'static str {
    match cli {
        CliType::Claude => "sonnet",
        CliType::Gemini => "gemini-2.5-flash",
        CliType::Codex => "gpt-5",
        CliType::Opencode => "anthropic/claude-sonnet-4-5",
    }
}

/// Runs `cli` as a turn does; what it said, if it failed.
async fn run_as_a_turn(agents: &CliAgents, cli: CliType) -> Result<String, String> {
    let runtime = agents.runtime(cli)?;
    match runtime.respond(&request(cli), &mut Discard).await {
        Ok(reply) => Ok(format!("answered: {}", reply.text)),
        Err(e) => Ok(e.to_string()),
    }
}

/// Runs `cli` with Spool's command line and a flag it does not have; its output.
async fn run_with_a_bogus_flag(bin: &std::path::Path, cli: CliType, home: &std::path::Path) -> String {
    let mut args = arguments(cli, "Say hello.", Some(model(cli))).expect("a model name");
    args.push("--spool-no-such-flag".to_owned());
    let run = tokio::process::Command::new(bin.join(program(cli)))
        .args(&args)
        .current_dir(home)
        .env("HOME", home)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(PROBE_TIMEOUT, run).await {
        Ok(Ok(out)) => format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Ok(Err(e)) => format!("cannot start: {e}"),
        Err(_) => "ran until stopped".to_owned(),
    }
}

/// Whether the help of the command Spool runs (`codex exec`, `opencode run`, or the CLI
/// itself) lists `--model`; its output if not.
async fn help_lists_model(bin: &std::path::Path, cli: CliType, home: &std::path::Path) -> Result<(), String> {
    let sub: &[&str] = match cli {
        CliType::Codex => &["exec"],
        CliType::Opencode => &["run"],
        CliType::Claude | CliType::Gemini => &[],
    };
    let run = tokio::process::Command::new(bin.join(program(cli)))
        .args(sub)
        .arg("--help")
        .current_dir(home)
        .env("HOME", home)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let said = match tokio::time::timeout(PROBE_TIMEOUT, run).await {
        Ok(Ok(out)) => format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Ok(Err(e)) => format!("cannot start: {e}"),
        Err(_) => "ran until stopped".to_owned(),
    };
    if said.contains("--model") {
        Ok(())
    } else {
        Err(gist(&said))
    }
}

/// What a person reads of `text`: the usage complaint if there is one, else its start, on one
/// line.
fn gist(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| usage_error(l))
        .map_or_else(|| text.split_whitespace().collect::<Vec<_>>().join(" "), str::to_owned);
    line.trim().chars().take(160).collect()
}

/// Checks one CLI; what failed.
async fn check(
    agents: &CliAgents,
    bin: &std::path::Path,
    home: &std::path::Path,
    cli: CliType,
) -> (String, Vec<String>) {
    let name = program(cli);
    let argv = arguments(cli, "<prompt>", Some(model(cli))).expect("a model name");
    let mut report = format!("cli-check: {name}: `{name} {}`\n", argv.join(" "));
    let mut failures = Vec::new();
    let (turn, control, help) = tokio::join!(
        run_as_a_turn(agents, cli),
        run_with_a_bogus_flag(bin, cli, home),
        help_lists_model(bin, cli, home)
    );
    match help {
        Ok(()) => report.push_str("  its help lists `--model`, where Spool puts a chat's model\n"),
        Err(said) => failures.push(format!("{name}: its help does not list `--model`: {said}")),
    }
    match turn {
        Ok(said) if usage_error(&said) => failures.push(format!("{name}: refused Spool's command line: {said}")),
        Ok(said) => report.push_str(&format!(
            "  Spool's command line accepted (here it ends: {})\n",
            gist(&said)
        )),
        Err(e) => failures.push(format!("{name}: {e}")),
    }
    if usage_error(&control) {
        report.push_str(&format!(
            "  control: an unknown flag is a usage error ({})\n",
            gist(&control)
        ));
    } else {
        failures.push(format!(
            "{name}: an unknown flag was not seen as a usage error, so this check cannot tell: {}",
            gist(&control)
        ));
    }
    (report, failures)
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(bin) = std::env::args().nth(1).map(PathBuf::from) else {
        eprintln!("usage: spool-cli-check <folder of the CLIs' executables> (make cli-check installs them)");
        return ExitCode::from(2);
    };
    let bin = std::path::absolute(&bin).unwrap_or(bin);
    if std::env::args().nth(2).as_deref() == Some("--only-mcp") {
        return finish(mcp_phase(&bin).await, "accept Spool's MCP configuration");
    }
    let work = tempfile::tempdir().expect("a temporary folder");
    let agents = CliAgents::new(vec![bin.clone()], work.path().join("chats"), RUN_TIMEOUT);
    let mut failures = Vec::new();
    let statuses = agents.clis().await;
    for cli in CliType::ALL {
        match statuses.iter().find(|s| s.cli == cli) {
            Some(s) if s.installed && s.healthy && s.version.is_some() => {
                println!(
                    "cli-check: {} {} detected",
                    program(cli),
                    s.version.as_deref().unwrap_or_default()
                );
            }
            other => failures.push(format!(
                "{}: not detected as installed and healthy: {other:?}",
                program(cli)
            )),
        }
    }
    println!(
        "cli-check: running each as a turn does (up to {} s each, all at once)…",
        RUN_TIMEOUT.as_secs()
    );
    let checks = CliType::ALL.map(|cli| check(&agents, &bin, work.path(), cli));
    let [a, b, c, d] = checks;
    let (a, b, c, d) = tokio::join!(a, b, c, d);
    for (report, failed) in [a, b, c, d] {
        print!("{report}");
        failures.extend(failed);
    }
    failures.extend(mcp_phase(&bin).await);
    println!(
        "cli-check: through a runner: spool serve with no CLI of its own, spool runner with these (up to {} s a turn, all at once)…",
        RUN_TIMEOUT.as_secs()
    );
    let (report, failed) = runner::check(&bin).await;
    print!("{report}");
    failures.extend(failed);
    finish(
        failures,
        "accept Spool's command lines and MCP configuration, run by the worker and through a runner",
    )
}

/// The MCP phase ([`mcp`]): its report printed, what failed.
async fn mcp_phase(bin: &std::path::Path) -> Vec<String> {
    println!(
        "cli-check: with the reference MCP server and a fake model provider (up to {} s each, one after another; SPOOL_CLI_CHECK_ONLY=<cli> for one)…",
        (RUN_TIMEOUT * 3).as_secs()
    );
    let (report, failed) = mcp::check(bin).await;
    print!("{report}");
    failed
}

/// The end of a check: what it shows, and how it exits.
fn finish(failures: Vec<String>, what: &str) -> ExitCode {
    if failures.is_empty() {
        println!("cli-check: all {} CLIs {what}", CliType::ALL.len());
        ExitCode::SUCCESS
    } else {
        for f in &failures {
            eprintln!("cli-check: FAILED: {f}");
        }
        ExitCode::FAILURE
    }
}
