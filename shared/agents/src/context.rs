//! # The agents' context: what a chat's agent may need to know of its workspace
//!
//! Before each reply in a workspace's chat, the engine writes the workspace's context: its
//! settings, every agent in order with its id beside its name (so an agent can name another in
//! an action), and what this deployment can run (the CLIs and whether they are healthy, the
//! model providers configured). CLI agents get it as a file next to their input file, to read
//! when they need it; model runtimes as the `get_workspace_context` tool, not in every prompt.
//! Tasks are not in it.

use spool_domain::{
    Error, Metadata,
    clis::CliStatus,
    notifier::{DeliveryState, Notifier},
};

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
            let delivery = match spool_domain::notifier::status(n, notifier).state {
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
    for (i, agent) in metadata.agents(org, workspace_id).await?.iter().enumerate() {
        let mut how = Vec::new();
        if agent.builtin {
            how.push("built-in".to_owned());
        }
        if let Some(runtime) = agent.runtime {
            how.push(format!(
                "runtime {}",
                serde_json::to_value(runtime).unwrap_or_default().as_str().unwrap_or("")
            ));
        }
        if let Some(cli) = agent.cli_type {
            how.push(format!("CLI {}", crate::cli::program(cli)));
        }
        if let Some(model) = &agent.model {
            how.push(format!("model {model}"));
        }
        let how = if how.is_empty() {
            String::new()
        } else {
            format!(": {}", how.join(", "))
        };
        text.push_str(&format!("{}. {} (id: {}){how}\n", i + 1, agent.name, agent.id));
    }
    text.push_str("\n# What this Spool can run\n\n");
    let clis: Vec<String> = capabilities
        .clis
        .iter()
        .map(|c| {
            let name = crate::cli::program(c.cli);
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
