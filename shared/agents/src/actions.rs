//! # Running workspace actions
//!
//! `rename_chat`, `create_task`, `create_agent`, `update_agent`, `delete_agent`,
//! `reorder_agents` and `update_workspace`, from a model's tool call or a CLI agent's `actions`.
//! An action runs at once; one that cannot (bad arguments, a name that matches no agent, an
//! agent that may not manage the workspace) fails with a message that names what was wrong,
//! which the engine records (`tool_end` with `error`, and a `system` event) for the person and
//! the agent to read. An approved `propose_capture` runs here too: the person's app saved the
//! note as they approved it, and the call ends with what was captured ([`crate::tools`]).

use serde_json::{Value, json};
use spool_chat::{
    service::{AgentEdit, ChatChange, ChatRecords, NewAgent, NewTask, TaskAuthor, WorkspaceService},
    settings::{Patch, WorkspaceChange},
};

use crate::tools::{self, Kind};

/// Where an action runs.
pub struct ActionContext<'a> {
    /// Chats' records (the chat's title, for `rename_chat`).
    pub chats: &'a ChatRecords,
    /// Workspaces' write side: every other action goes through it, as a person's request does.
    pub workspaces: &'a WorkspaceService,
    /// The organization.
    pub org: &'a str,
    /// The chat the action comes from.
    pub session_id: &'a str,
    /// Its workspace, if any.
    pub workspace_id: Option<&'a str>,
    /// Whether the acting agent is the built-in one.
    pub builtin: bool,
    /// The acting agent's name.
    pub actor: &'a str,
    /// The person whose message led to this turn (their token subject), if a person's did:
    /// the `actor` of what the action causes, the agent beside it.
    pub person: Option<&'a str>,
    /// The workspace's context, in a workspace's chat.
    pub workspace_context: Option<&'a str>,
}

/// Why an action failed, for the person and the agent.
pub type Refusal = String;

/// A field by its documented name, or by an older name Spool took before (`fields` is
/// `"name|older"`): the third source design's names are the ones documented, older ones work.
fn field<'v>(args: &'v Value, fields: &str) -> Option<&'v Value> {
    fields.split('|').find_map(|n| args.get(n).filter(|v| !v.is_null()))
}

fn text<'v>(args: &'v Value, fields: &str) -> Result<&'v str, Refusal> {
    let shown = fields.split('|').next().unwrap_or(fields);
    match field(args, fields) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        Some(_) => Err(format!("`{shown}` must be a non-empty string")),
        None => Err(format!("`{shown}` is missing")),
    }
}

fn optional_text(args: &Value, fields: &str) -> Result<Option<String>, Refusal> {
    let shown = fields.split('|').next().unwrap_or(fields);
    match field(args, fields) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{shown}` must be a string")),
    }
}

fn parse<T: serde::de::DeserializeOwned>(args: &Value, fields: &str) -> Result<Option<T>, Refusal> {
    let shown = fields.split('|').next().unwrap_or(fields);
    match field(args, fields) {
        None => Ok(None),
        Some(value) => serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|_| format!("`{shown}` is not one of the values it takes")),
    }
}

impl ActionContext<'_> {
    fn workspace(&self) -> Result<&str, Refusal> {
        self.workspace_id
            .ok_or_else(|| "this chat is not in a workspace".to_owned())
    }

    /// The workspace's agent named by id or by name (case-insensitive).
    async fn find_agent(&self, name: &str) -> Result<spool_chat::workspace::Agent, Refusal> {
        let agents = self
            .workspaces
            .agents(self.org, self.workspace()?)
            .await
            .map_err(store)?;
        agents
            .into_iter()
            .find(|a| a.id == name || a.name.eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| format!("there is no agent `{name}` in this workspace"))
    }

    /// Runs the action `name` with `args`; its result, or why it failed.
    pub async fn run(&self, name: &str, args: &Value) -> Result<Value, Refusal> {
        match tools::kind(name) {
            Some(Kind::Action { builtin_only, .. }) => {
                if builtin_only && !self.builtin {
                    return Err(format!("only the workspace's built-in Spool agent may `{name}`"));
                }
            }
            Some(_) => return Err(format!("`{name}` is not an action")),
            None => return Err(format!("there is no action `{name}`")),
        }
        if !args.is_object() {
            return Err("an action's arguments must be a JSON object".to_owned());
        }
        match name {
            "rename_chat" => self.rename_chat(args).await,
            "create_task" => self.create_task(args).await,
            "create_agent" => self.create_agent(args).await,
            "update_agent" => self.update_agent(args).await,
            "delete_agent" => {
                let agent = self.find_agent(text(args, "agent_id|agent")?).await?;
                let agent = self.workspaces.remove_agent(self.org, &agent.id).await.map_err(store)?;
                Ok(json!({ "deleted": agent.id, "name": agent.name }))
            }
            "reorder_agents" => self.reorder_agents(args).await,
            // Approved: the person's app saved the note into their companion library as they
            // approved it (only their browser reaches the companion).
            tools::PROPOSE_CAPTURE => {
                let title = text(args, "title")?;
                text(args, "text")?;
                Ok(json!({ "captured": true, "title": title, "into": "the person's notes" }))
            }
            tools::GET_WORKSPACE_CONTEXT => match self.workspace_context {
                Some(context) => Ok(json!({ "context": context })),
                None => Err("this chat is not in a workspace".to_owned()),
            },
            _ => self.update_workspace(args).await,
        }
    }

    async fn rename_chat(&self, args: &Value) -> Result<Value, Refusal> {
        let change = ChatChange {
            title: Some(text(args, "title")?.to_owned()),
            ..ChatChange::default()
        };
        let session = self
            .chats
            .find(self.org, self.session_id)
            .await
            .map_err(store)?
            .ok_or_else(|| "the chat no longer exists".to_owned())?;
        let session = self.chats.change(self.org, session, change).await.map_err(store)?;
        Ok(json!({ "title": session.title }))
    }

    async fn create_task(&self, args: &Value) -> Result<Value, Refusal> {
        let new = NewTask {
            title: text(args, "summary|title")?.to_owned(),
            description: optional_text(args, "description")?.unwrap_or_default(),
            session_id: Some(self.session_id.to_owned()),
        };
        let by = TaskAuthor {
            person: self.person,
            agent: Some(self.actor),
        };
        let task = self
            .workspaces
            .create_task(self.org, self.workspace()?, new, by)
            .await
            .map_err(store)?;
        Ok(json!({ "task_id": task.id, "summary": task.title, "title": task.title }))
    }

    async fn create_agent(&self, args: &Value) -> Result<Value, Refusal> {
        let new = NewAgent {
            name: text(args, "name")?.to_owned(),
            instruction: optional_text(args, "instruction")?.unwrap_or_default(),
            runtime: parse(args, "runtime")?,
            model: optional_text(args, "model")?,
            cli_type: parse(args, "cli_type")?,
            context_tokens: None,
            // Its place in the list, from 0 (the list's end when beyond it).
            order: parse(args, "order")?,
        };
        let agent = self
            .workspaces
            .add_agent(self.org, self.workspace()?, new)
            .await
            .map_err(store)?;
        Ok(json!({ "agent_id": agent.id, "name": agent.name }))
    }

    async fn update_agent(&self, args: &Value) -> Result<Value, Refusal> {
        let agent = self.find_agent(text(args, "agent_id|agent")?).await?;
        // An agent sets what it names; it clears nothing.
        let edit = AgentEdit {
            name: optional_text(args, "name")?,
            instruction: optional_text(args, "instruction")?,
            runtime: set(parse(args, "runtime")?),
            model: set(optional_text(args, "model")?),
            cli_type: set(parse(args, "cli_type")?),
            context_tokens: spool_chat::settings::Patch::Keep,
        };
        let agent = self
            .workspaces
            .update_agent(self.org, &agent.id, edit)
            .await
            .map_err(store)?;
        Ok(json!({ "agent_id": agent.id, "name": agent.name }))
    }

    async fn reorder_agents(&self, args: &Value) -> Result<Value, Refusal> {
        let names: Vec<String> = parse(args, "agent_ids|agents")?.ok_or("`agent_ids` is missing")?;
        let mut ids = Vec::with_capacity(names.len());
        for name in &names {
            ids.push(self.find_agent(name).await?.id);
        }
        self.workspaces
            .reorder_agents(self.org, self.workspace()?, ids.clone())
            .await
            .map_err(store)?;
        Ok(json!({ "order": ids }))
    }

    async fn update_workspace(&self, args: &Value) -> Result<Value, Refusal> {
        // The budget holds agents to what people allow them: only a person sets it.
        if args.get("monthly_token_budget").is_some_and(|v| !v.is_null()) {
            return Err(
                "the monthly token budget is a person's to set, in the workspace's settings; \
                        agents cannot change it"
                    .to_owned(),
            );
        }
        // Models fill the fields they do not mean with `null`: those are left alone here (an
        // agent clears the notification address with `""` and makes the directory `temp` by
        // its mode).
        let change: WorkspaceChange =
            serde_json::from_value(without_nulls(args)).map_err(|e| format!("the settings are not valid: {e}"))?;
        let workspace = self
            .workspaces
            .update(self.org, self.workspace()?, change)
            .await
            .map_err(store)?;
        Ok(json!({ "workspace_id": workspace.id, "title": workspace.name, "name": workspace.name }))
    }
}

/// A value an agent names, set; one it does not, kept.
fn set<T>(value: Option<T>) -> Patch<T> {
    value.map_or(Patch::Keep, Patch::Set)
}

/// `value` without the object fields that are `null`, at any depth.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn store(e: spool_log::error::Error) -> Refusal {
    e.to_string()
}
