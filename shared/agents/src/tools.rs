//! # The tools an agent may call
//!
//! Two ask a person and wait for the answer across invocations: `ask_user` (a question) and
//! `propose_plan` (a plan to approve or reject). The others are the workspace actions of the
//! third source design; `rename_chat` and `create_task` run at once, and the five that change
//! the workspace or its agents belong to the built-in agent only. An agent that calls one of
//! those five through a model asks the person's approval first (`tool_approval_required`); a
//! CLI agent's actions (its output's `actions`) run at once, as that design has them.
//!
//! In a chat whose companion enabled `capture_ingest`, an agent may also `propose_capture` a
//! note (the fourth source design's capture): always with the person's approval, from a model
//! or a CLI alike. Only the person's browser reaches their companion (on loopback), so Spool
//! cannot write the note itself: the UI's approval card saves the note into the companion first
//! and approves only once it is saved; the approved call then ends with what was proposed.

use serde_json::{Value, json};

use crate::runtime::ToolSpec;

/// How the engine treats a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A question for the person (`ask_question`; answered by `question_answered`).
    Question,
    /// A plan for the person to approve or reject (`plan_approval_required`).
    Plan,
    /// A workspace action Spool runs.
    Action {
        /// Whether a model's call of it waits for the person's approval.
        needs_approval: bool,
        /// Whether only the built-in agent may call it.
        builtin_only: bool,
    },
}

pub use spool_chat::event::{ASK_USER, PROPOSE_CAPTURE, PROPOSE_PLAN};
/// The capability a chat needs for [`PROPOSE_CAPTURE`].
pub const CAPTURE_CAPABILITY: &str = "capture_ingest";
/// The error of a call a person declined, as its `tool_end` says (it never ran).
pub const DECLINED: &str = "declined by the person; not run";
/// The name of the tool that reads the workspace's context ([`crate::context`]).
pub const GET_WORKSPACE_CONTEXT: &str = "get_workspace_context";

/// How the engine treats the tool `name`; `None` for a tool Spool does not have.
pub fn kind(name: &str) -> Option<Kind> {
    let action = |needs_approval, builtin_only| Kind::Action {
        needs_approval,
        builtin_only,
    };
    Some(match name {
        ASK_USER => Kind::Question,
        PROPOSE_PLAN => Kind::Plan,
        "rename_chat" | "create_task" | GET_WORKSPACE_CONTEXT => action(false, false),
        PROPOSE_CAPTURE => action(true, false),
        "create_agent" | "update_agent" | "delete_agent" | "reorder_agents" | "update_workspace" => action(true, true),
        _ => return None,
    })
}

/// Whether the action `name` acts on the chat's workspace, so a chat outside any workspace (the
/// global chat) is never offered it, and a call of it there fails at once, with no approval
/// asked for what could not run.
pub fn needs_workspace(name: &str) -> bool {
    matches!(
        name,
        "create_task"
            | GET_WORKSPACE_CONTEXT
            | "create_agent"
            | "update_agent"
            | "delete_agent"
            | "reorder_agents"
            | "update_workspace"
    )
}

/// Whether a call waits for a person's approval even from a CLI agent, whose actions otherwise
/// run at once: moving the workspace's working directory decides what every later CLI run can
/// reach, the notification address receives what agents ask and how turns fail, and the
/// cleanup settings decide when chats' files are deleted, so a prompt-injected agent must not
/// change any of them alone.
pub fn always_needs_approval(call: &crate::runtime::ToolCall) -> bool {
    let set = |f: &str| call.arguments.get(f).is_some_and(|v| !v.is_null());
    // A capture is saved by the person's app as they approve it: without approval, nothing would.
    call.name == PROPOSE_CAPTURE
        || call.name == "update_workspace"
            && (["working_directory_path", "working_dir", "notifications", "cleanup"]
                .iter()
                .any(|f| set(f)))
}

/// The spec of [`PROPOSE_CAPTURE`], offered in chats with [`CAPTURE_CAPABILITY`].
pub fn capture_spec() -> ToolSpec {
    spec(
        PROPOSE_CAPTURE,
        "Propose saving a note into the person's own notes (their companion library); it is saved only if they approve. Use it for something they will want to find again: a decision, a summary, a fact they asked you to remember.",
        json!({
            "title": { "type": "string", "description": "A short title" },
            "text": { "type": "string", "description": "The note, in markdown" }
        }),
        &["title", "text"],
    )
}

/// The tools an agent may call: all of them for the built-in agent, the rest for others.
pub fn specs(builtin: bool) -> Vec<ToolSpec> {
    let agent_fields = json!({
        "name": { "type": "string" },
        "instruction": { "type": "string" },
        "cli_type": { "type": "string", "enum": ["claude", "gemini", "codex", "opencode"] },
        "runtime": { "type": "string", "enum": ["scripted", "openai", "anthropic", "cli"] },
        "model": { "type": "string" }
    });
    let agent_id = json!({ "agent_id": { "type": "string", "description": "The agent's id (or its name)" } });
    let mut specs = vec![
        spec(
            ASK_USER,
            "Ask the person a question and wait for the answer.",
            json!({ "question": { "type": "string" } }),
            &["question"],
        ),
        spec(
            PROPOSE_PLAN,
            "Propose a plan; the person approves it or rejects it with feedback.",
            json!({ "plan": { "type": "string", "description": "The plan, in markdown" } }),
            &["plan"],
        ),
        spec(
            "rename_chat",
            "Give this chat a better title.",
            json!({ "title": { "type": "string" } }),
            &["title"],
        ),
        spec(
            "create_task",
            "Create a task in the workspace.",
            json!({ "summary": { "type": "string" }, "description": { "type": "string" } }),
            &["summary"],
        ),
        spec(
            GET_WORKSPACE_CONTEXT,
            "Read the workspace's settings, its agents in order with their ids, and which CLIs and model providers this Spool can run. Call it only when you need them.",
            json!({}),
            &[],
        ),
    ];
    if builtin {
        specs.extend([
            spec(
                "create_agent",
                "Add an agent to the workspace, at `order` (its place in the list, from 0; the end by default).",
                merge(json!({ "order": { "type": "integer", "minimum": 0 } }), &agent_fields),
                &["name"],
            ),
            spec(
                "update_agent",
                "Change an agent.",
                merge(agent_id.clone(), &agent_fields),
                &["agent_id"],
            ),
            spec(
                "delete_agent",
                "Delete an agent; its chats move to Spool.",
                agent_id,
                &["agent_id"],
            ),
            spec(
                "reorder_agents",
                "Put the workspace's agents in a new order (every agent's id).",
                json!({ "agent_ids": { "type": "array", "items": { "type": "string" } } }),
                &["agent_ids"],
            ),
            spec(
                "update_workspace",
                "Change the workspace's settings: title, description, working directory (`static`: the folder at `working_directory_path`; `temp`: a folder of each chat's own), cleanup (days kept) and notifications (an email address and when to write). Only what you name changes.",
                json!({
                    "title": { "type": "string" },
                    "description": { "type": "string" },
                    "working_directory_mode": { "type": "string", "enum": ["static", "temp"] },
                    "working_directory_path": { "type": "string" },
                    "cleanup": {
                        "type": "object",
                        "properties": {
                            "turn_record_days": { "type": "integer", "minimum": 1, "maximum": 3650 },
                            "chat_folder_days": { "type": "integer", "minimum": 1, "maximum": 3650 }
                        }
                    },
                    "notifications": {
                        "type": "object",
                        "properties": {
                            "email": { "type": ["string", "null"] },
                            "on_question": { "type": "boolean" },
                            "on_failure": { "type": "boolean" },
                            "on_task": { "type": "boolean" }
                        }
                    }
                }),
                &[],
            ),
        ]);
    }
    specs
}

fn spec(name: &'static str, description: &'static str, properties: Value, required: &[&str]) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        }),
    }
}

/// The specs of tools a client declared ([`spool_chat::event::ClientTool`]); a name
/// of Spool's own tools stays Spool's.
pub fn client_specs(tools: &[spool_chat::event::ClientTool]) -> Vec<ToolSpec> {
    tools
        .iter()
        .filter(|t| kind(&t.name).is_none())
        .map(|t| ToolSpec {
            name: t.name.clone(),
            description: t
                .description
                .clone()
                .unwrap_or_else(|| format!("`{}`, a tool the person's app runs", t.name)),
            parameters: t
                .input_schema
                .clone()
                .unwrap_or_else(|| json!({ "type": "object", "properties": {} })),
        })
        .collect()
}

fn merge(mut a: Value, b: &Value) -> Value {
    if let (Some(a), Some(b)) = (a.as_object_mut(), b.as_object()) {
        a.extend(b.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_may_not_take_spools_tool_names() {
        for spec in specs(true).into_iter().chain([capture_spec()]) {
            assert!(
                spool_chat::event::ClientTool::RESERVED.contains(&spec.name.as_str()),
                "{} is missing from ClientTool::RESERVED",
                spec.name
            );
        }
        for name in spool_chat::event::ClientTool::RESERVED {
            assert!(kind(name).is_some(), "{name}");
        }
    }

    #[test]
    fn management_tools_are_the_builtin_agents_and_need_approval() {
        let names = |builtin| specs(builtin).into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert!(!names(false).iter().any(|n| n == "delete_agent"));
        assert!(names(true).iter().any(|n| n == "delete_agent"));
        for name in names(true) {
            let kind = kind(&name).unwrap();
            if let Kind::Action {
                needs_approval,
                builtin_only,
            } = kind
            {
                assert_eq!(needs_approval, builtin_only, "{name}");
            }
        }
        assert_eq!(kind("rm_rf"), None);
    }

    #[test]
    fn changing_where_agents_run_whom_spool_tells_or_what_it_keeps_always_needs_approval() {
        let call = |arguments: serde_json::Value| crate::runtime::ToolCall {
            id: "c".into(),
            name: "update_workspace".into(),
            arguments,
        };
        for risky in [
            json!({ "working_directory_path": "/srv" }),
            json!({ "working_dir": "/srv" }),
            json!({ "notifications": { "email": "a@b.io" } }),
            json!({ "cleanup": { "chat_folder_days": 1 } }),
        ] {
            assert!(always_needs_approval(&call(risky.clone())), "{risky}");
        }
        for harmless in [
            json!({ "title": "Docs" }),
            json!({ "description": "x", "working_directory_path": null }),
        ] {
            assert!(!always_needs_approval(&call(harmless.clone())), "{harmless}");
        }
        // A capture is saved by the person's app as they approve it, from a CLI agent too.
        let capture = crate::runtime::ToolCall {
            id: "c".into(),
            name: PROPOSE_CAPTURE.into(),
            arguments: json!({ "title": "t", "text": "x" }),
        };
        assert!(always_needs_approval(&capture));
        assert_eq!(
            kind(PROPOSE_CAPTURE),
            Some(Kind::Action {
                needs_approval: true,
                builtin_only: false
            })
        );
    }
}
