//! # CLI agents: claude, gemini, codex and opencode as subprocesses
//!
//! The third source design: for each reply Spool writes a markdown input file (the agent's
//! instruction, the chat's metadata, its history as JSONL, system messages included, the path
//! of the workspace's context file and where to answer), runs the CLI non-interactively in the
//! workspace's working directory (or a directory of the chat's own), and reads
//! `{"message": "…", "actions": [{"type": "…", …}]}` from the output file. The message is the
//! reply; the actions run at once. A non-zero exit, a timeout, or an output that is missing,
//! empty or not that JSON fails the reply with a message saying which. The CLI runs in its own
//! process group, and the whole group is killed when the reply is dropped (an abort) or times
//! out.
//!
//! Every CLI also gets `SPOOL_INPUT_FILE` and `SPOOL_OUTPUT_FILE` in its environment.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use spool_domain::{CliType, workspace::new_id};
use tokio::io::AsyncReadExt;

use crate::{
    runtime::{Error, Message, Reply, Request, Runtime, Sink, ToolCall},
    runtimes::CliRuntimes,
    tools,
};

/// The built-in agent's order of preference.
pub const ORDER: [CliType; 4] = [CliType::Claude, CliType::Gemini, CliType::Codex, CliType::Opencode];

/// The CLI's program name.
pub fn program(cli: CliType) -> &'static str {
    match cli {
        CliType::Claude => "claude",
        CliType::Gemini => "gemini",
        CliType::Codex => "codex",
        CliType::Opencode => "opencode",
    }
}

/// The arguments that run `cli` once, non-interactively, on `prompt`.
fn arguments(cli: CliType, prompt: &str) -> Vec<String> {
    let prompt = prompt.to_owned();
    match cli {
        CliType::Claude => vec!["-p".into(), prompt, "--permission-mode".into(), "acceptEdits".into()],
        CliType::Gemini => vec!["-p".into(), prompt, "--yolo".into()],
        CliType::Codex => vec!["exec".into(), "--full-auto".into(), prompt],
        CliType::Opencode => vec!["run".into(), prompt],
    }
}

/// The CLIs found on a search path.
#[derive(Debug, Clone)]
pub struct CliAgents {
    search_path: Vec<PathBuf>,
    work_root: PathBuf,
    timeout: Duration,
}

impl CliAgents {
    /// CLIs looked up in `search_path` (in order, like `PATH`), chats' own directories under
    /// `work_root`, each run stopped after `timeout`.
    pub fn new(search_path: Vec<PathBuf>, work_root: PathBuf, timeout: Duration) -> Self {
        Self {
            search_path,
            work_root,
            timeout,
        }
    }

    fn find(&self, cli: CliType) -> Option<PathBuf> {
        let name = program(cli);
        self.search_path
            .iter()
            .map(|dir| dir.join(name))
            .find(|path| is_executable(path))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl CliRuntimes for CliAgents {
    fn runtime(&self, cli: CliType) -> Result<Arc<dyn Runtime>, String> {
        let path = self.find(cli).ok_or_else(|| {
            format!(
                "the `{}` CLI is not installed here (not found on the search path); install it or pick another CLI",
                program(cli)
            )
        })?;
        Ok(Arc::new(Cli {
            cli,
            path,
            work_root: self.work_root.clone(),
            timeout: self.timeout,
        }))
    }

    fn first_installed(&self) -> Option<CliType> {
        ORDER.into_iter().find(|cli| self.find(*cli).is_some())
    }
}

/// One CLI.
#[derive(Debug)]
struct Cli {
    cli: CliType,
    path: PathBuf,
    work_root: PathBuf,
    timeout: Duration,
}

/// What a CLI writes.
#[derive(Debug, Deserialize)]
struct Output {
    message: String,
    #[serde(default)]
    actions: Vec<Value>,
}

/// The markdown input file of one reply.
fn input_file(request: &Request, output: &Path, context_file: Option<&Path>) -> String {
    let c = &request.context;
    let mut text = String::new();
    text.push_str("# Instruction\n\n");
    text.push_str(if request.instruction.trim().is_empty() {
        "You are a helpful agent in a team chat. Answer the last message."
    } else {
        &request.instruction
    });
    text.push_str("\n\n# Chat\n\n");
    text.push_str(&format!(
        "- chat: {} ({})\n- agent: {}\n- turn: {}\n",
        c.title, c.session_id, c.agent_name, c.turn_id
    ));
    if let Some(ws) = &c.workspace_id {
        text.push_str(&format!("- workspace: {ws}\n"));
    }
    text.push_str("\n# Workspace context\n\n");
    match context_file {
        Some(path) => text.push_str(&format!(
            "The workspace's context file is `{}`: read it first if it exists.\n",
            path.display()
        )),
        None => text.push_str("This chat has no workspace context file.\n"),
    }
    text.push_str(
        "\n# History\n\nOne JSON object per line, oldest first; answer the last `user` message.\n\n```jsonl\n",
    );
    for message in &request.messages {
        let line = match message {
            Message::User { text } => json!({ "role": "user", "text": text }),
            Message::Assistant { text, tool_calls } => {
                json!({ "role": "assistant", "text": text, "actions": tool_calls.iter().map(|c| &c.name).collect::<Vec<_>>() })
            }
            Message::Tool { name, content, .. } => {
                json!({ "role": "action_result", "action": name, "result": content })
            }
            Message::System { text } => json!({ "role": "system", "text": text }),
        };
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text.push_str("```\n\n# Your answer\n\n");
    text.push_str(&format!(
        "Write your answer as JSON to `{}`:\n\n```json\n{{\"message\": \"your reply, in markdown\", \"actions\": []}}\n```\n\n",
        output.display()
    ));
    text.push_str("Actions run at once; each is an object with a `type` and its fields:\n\n");
    for spec in request
        .tools
        .iter()
        .filter(|t| matches!(tools::kind(t.name), Some(tools::Kind::Action { .. })))
    {
        text.push_str(&format!(
            "- `{}`: {} Fields: `{}`\n",
            spec.name, spec.description, spec.parameters["properties"]
        ));
    }
    text
}

/// Kills the CLI's whole process group unless it has exited.
struct GroupGuard {
    pid: Option<u32>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            // Its children (a shell's `sleep`, a node process) are in the group too.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Cli {
    fn name(&self) -> &'static str {
        program(self.cli)
    }

    async fn run(&self, request: &Request, dir: &Path, input: &Path, output: &Path) -> Result<Output, Error> {
        let prompt = format!(
            "Read the file {} and follow it. Write your answer to {} as the JSON it describes.",
            input.display(),
            output.display()
        );
        let mut command = tokio::process::Command::new(&self.path);
        command
            .args(arguments(self.cli, &prompt))
            .current_dir(dir)
            .env("SPOOL_INPUT_FILE", input)
            .env("SPOOL_OUTPUT_FILE", output)
            .env("SPOOL_SESSION_ID", &request.context.session_id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| Error::Failed(format!("cannot start `{}`: {e}", self.path.display())))?;
        let mut guard = GroupGuard { pid: child.id() };
        let mut stderr = child.stderr.take();
        let read_stderr = async {
            let mut text = String::new();
            if let Some(stderr) = stderr.as_mut() {
                let _ = stderr.read_to_string(&mut text).await;
            }
            text
        };
        let waited = tokio::time::timeout(self.timeout, async { tokio::join!(child.wait(), read_stderr) }).await;
        let (status, stderr) = match waited {
            Err(_) => {
                return Err(Error::Failed(format!(
                    "`{}` ran longer than {} s and was stopped",
                    self.name(),
                    self.timeout.as_secs()
                )));
            }
            Ok((status, stderr)) => (status, stderr),
        };
        // It exited: its group needs no killing (what it left running is its own).
        guard.pid = None;
        let status = status.map_err(|e| Error::Failed(format!("cannot wait for `{}`: {e}", self.name())))?;
        if !status.success() {
            let tail: String = stderr
                .trim()
                .chars()
                .rev()
                .take(500)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let code = status.code().map_or_else(|| "a signal".to_owned(), |c| c.to_string());
            return Err(Error::Failed(format!("`{}` exited with {code}: {tail}", self.name())));
        }
        let text = tokio::fs::read_to_string(output).await.unwrap_or_default();
        if text.trim().is_empty() {
            return Err(Error::Failed(format!(
                "`{}` wrote no answer to {}",
                self.name(),
                output.display()
            )));
        }
        serde_json::from_str(&text).map_err(|e| {
            Error::Failed(format!(
                "`{}` answered something that is not {{\"message\", \"actions\"}} JSON ({e})",
                self.name()
            ))
        })
    }
}

#[async_trait]
impl Runtime for Cli {
    fn describe(&self, _: &Request) -> String {
        format!("cli:{}", self.name())
    }

    async fn respond(&self, request: &Request, sink: &mut dyn Sink) -> Result<Reply, Error> {
        let own = self.work_root.join(&request.context.session_id);
        tokio::fs::create_dir_all(&own)
            .await
            .map_err(|e| Error::Failed(format!("cannot make the chat's directory {}: {e}", own.display())))?;
        let dir = request
            .context
            .working_dir
            .as_ref()
            .map_or_else(|| own.clone(), PathBuf::from);
        let context_file = request
            .context
            .working_dir
            .as_ref()
            .map(|d| PathBuf::from(d).join("SPOOL.md"));
        let step = new_id("run");
        let input = own.join(format!("{step}.input.md"));
        let output = own.join(format!("{step}.output.json"));
        tokio::fs::write(&input, input_file(request, &output, context_file.as_deref()))
            .await
            .map_err(|e| Error::Failed(format!("cannot write the CLI's input file: {e}")))?;
        let result = self.run(request, &dir, &input, &output).await;
        let _ = tokio::fs::remove_file(&input).await;
        let _ = tokio::fs::remove_file(&output).await;
        let out = result?;
        sink.text(&out.message).await?;
        let tool_calls = out
            .actions
            .into_iter()
            .map(|action| {
                let name = action["type"].as_str().unwrap_or("(no type)").to_owned();
                let mut arguments = action;
                if let Some(fields) = arguments.as_object_mut() {
                    fields.remove("type");
                }
                ToolCall {
                    id: new_id("act"),
                    name,
                    arguments,
                }
            })
            .collect();
        Ok(Reply {
            text: out.message,
            tool_calls,
            usage: None,
            one_shot: true,
        })
    }
}
