//! # The agents' context: what a chat's agent may need to know of its workspace
//!
//! Before each reply in a workspace's chat, the engine writes the workspace's context: its
//! settings, every agent in order with its id beside its name (so an agent can name another in
//! an action) and its full instruction and runtime (so the built-in Spool agent can tune an
//! agent without asking the person to paste it), and what this deployment can run (the CLIs and whether they are healthy, the
//! model providers configured). CLI agents get it as a file next to their input file, to read
//! when they need it; model runtimes as the `get_workspace_context` tool, not in every prompt.
//! Tasks are not in it.

use spool_chat::{
    clis::CliStatus,
    metadata::Metadata,
    notifier::{DeliveryState, Notifier},
    workspace::Agent,
};
use spool_log::error::Error;

/// What the deployment can run, for the context.
#[derive(Debug, Clone, Default)]
pub struct Capabilities {
    /// The CLIs where agents run.
    pub clis: Vec<CliStatus>,
    /// The model providers configured (`OpenAI-compatible`, `Anthropic`).
    pub providers: Vec<&'static str>,
}

/// The context of the workspace `workspace_id`, as markdown; `notifier` says what its
/// notification settings do here.
pub async fn workspace_context(
    metadata: &dyn Metadata,
    notifier: &dyn Notifier,
    org: &str,
    workspace_id: &str,
    capabilities: &Capabilities,
) -> Result<String, Error> {
    let mut text = String::from("# Workspace\n\n");
    match metadata.workspace(org, workspace_id).await? {
        Some(ws) => {
            text.push_str(&format!("- title: {} (id: {})\n", ws.name, ws.id));
            if !ws.description.trim().is_empty() {
                text.push_str(&format!("- description: {}\n", ws.description.trim()));
            }
            match &ws.working_dir {
                Some(dir) => text.push_str(&format!("- working directory: static, `{dir}`\n")),
                None => text.push_str("- working directory: temp (a folder of each chat's own)\n"),
            }
            text.push_str(&format!(
                "- cleanup: finished turn records kept {} days; a chat's own folder kept {} days after it was last active\n",
                ws.cleanup.turn_record_days, ws.cleanup.chat_folder_days
            ));
            let n = &ws.notifications;
            let on: Vec<&str> = [
                (n.on_question, "questions"),
                (n.on_failure, "failed turns"),
                (n.on_task, "new tasks"),
            ]
            .into_iter()
            .filter_map(|(on, what)| on.then_some(what))
            .collect();
            // The address itself stays out: this text goes to model providers and into files.
            let told = if on.is_empty() {
                "nothing".to_owned()
            } else {
                on.join(", ")
            };
            match &n.email {
                Some(_) => text.push_str(&format!(
                    "- notifications: an email address is set, told about: {told}\n"
                )),
                None => text.push_str("- notifications: no email address set\n"),
            }
            let delivery = match spool_chat::notifier::status(n, notifier).state {
                DeliveryState::Off => "nothing is sent",
                DeliveryState::LogOnly => {
                    "this server sends no email; notifications go to its log and the workspace's activity"
                }
                DeliveryState::Email => "sent by email",
            };
            text.push_str(&format!("- notifications status: {delivery}\n"));
        }
        None => text.push_str("- (the workspace no longer exists)\n"),
    }
    text.push_str("\n# Agents, in order\n\n");
    text.push_str(&agents_section(&metadata.agents(org, workspace_id).await?));
    text.push_str("\n# What this Spool can run\n\n");
    let clis: Vec<String> = capabilities
        .clis
        .iter()
        .map(|c| {
            let name = crate::cli_args::program(c.cli);
            match (&c.version, c.healthy, &c.reason) {
                (Some(version), true, _) => format!("{name} {version} (healthy)"),
                (_, _, Some(reason)) => format!("{name} (cannot run: {reason})"),
                _ => format!("{name} (installed, not checked yet)"),
            }
        })
        .collect();
    if clis.is_empty() {
        text.push_str("- CLIs: none\n");
    } else {
        text.push_str(&format!("- CLIs: {}\n", clis.join("; ")));
    }
    if capabilities.providers.is_empty() {
        text.push_str("- model providers: none configured\n");
    } else {
        text.push_str(&format!("- model providers: {}\n", capabilities.providers.join(", ")));
    }
    Ok(text)
}

/// How many characters of instructions the context holds in all: a workspace's agents may
/// have 100 instructions of 20,000 characters each, more than a prompt should carry. Past
/// this, an agent is listed with its id and settings, and the context says its instruction
/// was left out.
pub const INSTRUCTIONS_BUDGET_CHARS: usize = 200_000;

/// Every agent in order, each under a heading `N. Name (id: ag_…)`, with its runtime and
/// its instruction in a fence no line of it can close.
fn agents_section(agents: &[Agent]) -> String {
    let mut text = String::new();
    let mut left = INSTRUCTIONS_BUDGET_CHARS;
    for (i, agent) in agents.iter().enumerate() {
        text.push_str(&format!("## {}. {} (id: {})\n\n", i + 1, agent.name, agent.id));
        text.push_str(&format!("- settings: {}\n", settings(agent)));
        let instruction = agent.instruction.trim();
        if instruction.is_empty() {
            text.push_str(if agent.builtin {
                "- instruction: Spool's own, with nothing of this workspace added\n\n"
            } else {
                "- instruction: none\n\n"
            });
            continue;
        }
        let chars = instruction.chars().count();
        let kept: String = instruction
            .chars()
            .take(left.min(spool_chat::workspace::MAX_TEXT_CHARS))
            .collect();
        left -= kept.chars().count();
        let label = if agent.builtin {
            "- instruction (added to Spool's own)"
        } else {
            "- instruction"
        };
        if kept.is_empty() {
            text.push_str(&format!(
                "{label}: left out ({chars} characters): this context holds at most {INSTRUCTIONS_BUDGET_CHARS} characters of instructions; read it with `GET /v1/workspaces/{}/agents`\n\n",
                agent.workspace_id
            ));
            continue;
        }
        let fence = "`".repeat(longest_backtick_run(&kept).max(2) + 1);
        text.push_str(&format!("{label}:\n\n{fence}\n{kept}\n{fence}\n\n"));
        if kept.chars().count() < chars {
            text.push_str(&format!(
                "(truncated: {} of its {chars} characters are shown; this context holds at most {INSTRUCTIONS_BUDGET_CHARS} characters of instructions)\n\n",
                kept.chars().count()
            ));
        }
    }
    text
}

/// An agent's runtime, CLI and model, as a line.
fn settings(agent: &Agent) -> String {
    let mut how = Vec::new();
    if agent.builtin {
        how.push("built-in".to_owned());
    }
    match agent.runtime {
        Some(runtime) => how.push(format!(
            "runtime {}",
            serde_json::to_value(runtime).unwrap_or_default().as_str().unwrap_or("")
        )),
        None => how.push("runtime chosen by Spool".to_owned()),
    }
    if let Some(cli) = agent.cli_type {
        how.push(format!("CLI {}", crate::cli_args::program(cli)));
    }
    if let Some(model) = &agent.model {
        how.push(format!("model {model}"));
    }
    how.join(", ")
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}
