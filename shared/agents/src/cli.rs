//! # CLI agents: claude, gemini, codex and opencode as subprocesses
//!
//! The third source design: for each reply Spool writes a markdown input file (the agent's
//! instruction, the chat's metadata, its history as JSONL, system messages included, the path
//! of the workspace's context file and where to answer), runs the CLI non-interactively in the
//! workspace's working directory (or a folder of the chat's own), and reads
//! `{"message": "…", "actions": [{"type": "…", …}]}` from the output file. The message is the
//! reply; the actions run at once. A non-zero exit, a timeout, or an output that is missing,
//! empty or not that JSON fails the reply with a message saying which. The CLI runs in its own
//! process group, and the whole group is killed when the reply is dropped (an abort) or times
//! out.
//!
//! ## The sandbox
//! The CLIs run with their permissions bypassed, so what a prompt-injected run can reach is
//! decided here, not by the CLI:
//! - **A cleared environment** plus an allow-list: `PATH` (the CLI search path), the locale,
//!   `HOME` and `TMPDIR` in the chat's folder, `SPOOL_INPUT_FILE`, `SPOOL_OUTPUT_FILE`,
//!   `SPOOL_SESSION_ID`, and the provider keys an operator passes through (`SPOOL_CLI_ENV`).
//!   Never Spool's signing secret or cloud credentials.
//! - **A folder per organization and chat** (`{work_root}/{org}/{chat}`, mode 0700), so two
//!   organizations' chats (both global chats are called `global`) never share files.
//! - **A working directory under the configured roots** ([`WorkspaceRoots`]), checked again,
//!   with links resolved, each time a CLI starts.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use spool_chat::{
    clis::CliStatus,
    confine::{WorkspaceRoots, is_safe_segment},
    workspace::{CliType, new_id},
};
use tokio::io::AsyncReadExt;

use crate::{
    files::{self, Attached},
    runtime::{Error, Message, Reply, Request, Runtime, Sink, ToolCall},
    runtimes::CliRuntimes,
    tools,
};

pub use crate::cli_args::{arguments, program};

mod mcp;
mod probe;
mod reap;

/// The built-in agent's order of preference.
pub const ORDER: [CliType; 4] = CliType::ALL;

/// The CLIs found on a search path.
#[derive(Debug, Clone)]
pub struct CliAgents {
    search_path: Vec<PathBuf>,
    work_root: PathBuf,
    timeout: Duration,
    env: Vec<(String, String)>,
    roots: WorkspaceRoots,
    /// The last probe of the CLIs, and when it ran.
    probed: Arc<std::sync::Mutex<Option<probe::Probed>>>,
}

impl CliAgents {
    /// CLIs looked up in `search_path` (in order, like `PATH`), chats' own folders under
    /// `work_root` (made absolute), each run stopped after `timeout`; no variables passed
    /// through and no workspace roots until [`Self::with_env`] and [`Self::with_roots`].
    pub fn new(search_path: Vec<PathBuf>, work_root: PathBuf, timeout: Duration) -> Self {
        let work_root = std::path::absolute(&work_root).unwrap_or(work_root);
        Self {
            search_path,
            work_root,
            timeout,
            env: Vec::new(),
            roots: WorkspaceRoots::none(),
            probed: Arc::default(),
        }
    }

    /// The same, passing `env` (the locale, the provider keys an operator chose) to every CLI.
    /// A `PATH` among them is searched after the CLI search path.
    #[must_use]
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// The CLI's `PATH`: the search path, then the `PATH` passed in [`Self::with_env`], then the
    /// system's own folders, so a CLI finds its interpreter (`node`) and the tools it runs.
    fn path_var(&self) -> std::ffi::OsString {
        let inherited = self
            .env
            .iter()
            .filter(|(k, _)| k == "PATH")
            .flat_map(|(_, v)| std::env::split_paths(v).collect::<Vec<_>>());
        let system = ["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from);
        let mut dirs: Vec<PathBuf> = Vec::new();
        for dir in self.search_path.iter().cloned().chain(inherited).chain(system) {
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        std::env::join_paths(dirs).unwrap_or_default()
    }

    /// The same, running CLIs in workspaces' working directories under `roots`.
    #[must_use]
    pub fn with_roots(mut self, roots: WorkspaceRoots) -> Self {
        self.roots = roots;
        self
    }

    /// Stops the CLIs a previous run of this process left running when it died (recorded under
    /// the work root), and removes the MCP configurations it left; how many CLIs. Call it at
    /// start, before any turn runs.
    pub fn reap_orphans(&self) -> usize {
        mcp::sweep(&self.work_root.join(".mcp"), self.timeout + Duration::from_secs(60));
        reap::reap(&self.work_root)
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
    fn known_clis(&self) -> Vec<CliStatus> {
        self.known()
    }

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
            agents: self.clone(),
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
    agents: CliAgents,
}

/// Where one reply of a CLI runs.
struct Place {
    /// The chat's own folder: the input and output files, `home/` and `tmp/`.
    own: PathBuf,
    /// The working directory: the workspace's, or [`Self::own`].
    dir: PathBuf,
    /// The workspace's context file, when the chat has a working directory.
    context_file: Option<PathBuf>,
}

/// The most of a CLI's output that is kept, in bytes: the tail of a failure is what is shown.
const OUTPUT_KEPT_BYTES: usize = 64 * 1024;

/// Reads `pipe` to its end, keeping the last [`OUTPUT_KEPT_BYTES`].
async fn read_bounded(pipe: Option<impl tokio::io::AsyncRead + Unpin + Send>) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut kept: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * OUTPUT_KEPT_BYTES {
            kept.drain(..kept.len() - OUTPUT_KEPT_BYTES);
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// How long a pipe is still read after its CLI exited, for what it printed last.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// What a pipe's reader read, waiting at most [`PIPE_GRACE`] (then it is stopped).
async fn drain(mut reader: tokio::task::JoinHandle<String>) -> String {
    match tokio::time::timeout(PIPE_GRACE, &mut reader).await {
        Ok(Ok(text)) => text,
        _ => {
            reader.abort();
            String::new()
        }
    }
}

/// Makes `dir` (and its missing parents) readable by Spool's user only.
async fn private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let made = {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true).mode(0o700);
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || {
            builder.create(&dir)?;
            // It may have existed with a wider mode.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        })
        .await
    };
    match made {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Failed(format!("cannot make the folder {}: {e}", dir.display()))),
        Err(e) => Err(Error::Failed(format!("cannot make the folder {}: {e}", dir.display()))),
    }
}

/// What a CLI writes: a message, actions, or both.
#[derive(Debug, Deserialize)]
struct Output {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    actions: Vec<Value>,
}

/// The markdown input file of one reply; `files` are the chat's files where they were placed.
fn input_file(
    request: &Request,
    output: &Path,
    context_file: Option<&Path>,
    workspace_context: Option<&Path>,
    files: &[(&Attached, Option<PathBuf>)],
) -> String {
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
        match &c.workspace_name {
            Some(name) => text.push_str(&format!("- workspace: {name} ({ws})\n")),
            None => text.push_str(&format!("- workspace: {ws}\n")),
        }
    }
    text.push_str("\n# Workspace context\n\n");
    match workspace_context {
        Some(path) => text.push_str(&format!(
            "The workspace's settings, its agents in order with their ids (which actions take), and what this Spool can run are in `{}`: read it only when you need them.\n",
            path.display()
        )),
        None => text.push_str("This chat is not in a workspace.\n"),
    }
    if let Some(path) = context_file {
        text.push_str(&format!(
            "The workspace's own notes for agents are in `{}`, if that file exists.\n",
            path.display()
        ));
    }
    if !request.mcp_servers.is_empty() {
        let names: Vec<String> = request.mcp_servers.iter().map(|s| format!("`{}`", s.name)).collect();
        let names = names.join(", ");
        text.push_str(&format!("\n# MCP servers\n\nThe workspace's MCP servers {names} are connected: their tools are yours to call when the conversation needs them.\n"));
    }
    text.push_str("\n# Files\n\n");
    if files.is_empty() {
        text.push_str("No files were uploaded to this chat.\n");
    } else {
        text.push_str("The files people uploaded to this chat (the newest of each name), to read when the conversation needs them:\n\n");
        for (attached, path) in files {
            let f = &attached.file;
            let size = spool_chat::service::human_size(f.size);
            match path {
                Some(path) => text.push_str(&format!("- `{}` ({size}, {})\n", path.display(), f.content_type)),
                None => text.push_str(&format!(
                    "- {} ({size}, {}): missing from storage, not available\n",
                    f.filename, f.content_type
                )),
            }
        }
    }
    text.push_str(
        "\n# History\n\nOne JSON object per line, oldest first, `{\"role\": \"user\" | \"agent\" | \"system\", \"content\", \"created_at\"}`; answer the last `user` message.\n\n```jsonl\n",
    );
    let system = |content: String| ("system", content);
    for (i, message) in request.messages.iter().enumerate() {
        let (role, content) = match message {
            Message::User { text } => ("user", text.clone()),
            Message::Assistant { text, tool_calls } if tool_calls.is_empty() => ("agent", text.clone()),
            Message::Assistant { text, tool_calls } => {
                let names: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
                ("agent", format!("{text}\n(actions: {})", names.join(", ")))
            }
            Message::Tool { name, content, .. } => system(format!("The action `{name}` answered: {content}")),
            Message::System { text } => system(text.clone()),
            Message::File(attached) => {
                let placed = files.iter().find(|(a, _)| a.file.id == attached.file.id);
                system(match placed {
                    Some((_, Some(path))) => format!("{} It is at {}", files::note(attached), path.display()),
                    Some((_, None)) => format!("{} It is missing from storage.", files::note(attached)),
                    None => format!("{} A newer file of that name replaced it.", files::note(attached)),
                })
            }
        };
        let created_at = request.stamps.get(i).map_or("", String::as_str);
        let line = json!({ "role": role, "content": content, "created_at": created_at });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text.push_str("```\n\n# Your answer\n\n");
    text.push_str(&format!(
        "Write your answer as one JSON object to `{}`, exactly in this format:\n\n```json\n{{\"message\": \"your reply, in markdown\", \"actions\": [{{\"type\": \"rename_chat\", \"title\": \"A better title\"}}]}}\n```\n\n`message` may be left out when you only act; `actions` may be empty.\n\n",
        output.display()
    ));
    text.push_str("Actions run at once, in order; each is an object with its `type` and these fields:\n\n");
    for spec in request.tools.iter().filter(|t| {
        matches!(tools::kind(&t.name), Some(tools::Kind::Action { .. })) && t.name != tools::GET_WORKSPACE_CONTEXT
    }) {
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
            // Its children (a shell's `sleep`, a node process) are in the group too. The group
            // may be gone already (ESRCH): nothing is left to kill.
            let group = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw);
            if let Some(group) = group {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Cli {
    fn name(&self) -> &'static str {
        program(self.cli)
    }

    /// The chat's folder (made, private) and the directory the CLI runs in (confined).
    async fn place(&self, request: &Request) -> Result<Place, Error> {
        let c = &request.context;
        if !is_safe_segment(&c.org) || !is_safe_segment(&c.session_id) {
            return Err(Error::Failed(format!(
                "the chat `{}` of `{}` cannot name a folder",
                c.session_id, c.org
            )));
        }
        let root = &self.agents.work_root;
        private_dir(root).await?;
        let own = root.join(&c.org).join(&c.session_id);
        for dir in [root.join(&c.org), own.clone(), own.join("home"), own.join("tmp")] {
            private_dir(&dir).await?;
        }
        let Some(working_dir) = &c.working_dir else {
            return Ok(Place {
                dir: own.clone(),
                own,
                context_file: None,
            });
        };
        let dir = self.agents.roots.confine(&c.org, working_dir).await.map_err(|e| {
            let reason = match e {
                spool_log::error::Error::Invalid { reason, .. } => reason,
                other => other.to_string(),
            };
            Error::Failed(format!(
                "the workspace's working directory cannot be used: {reason}; change it in the workspace's settings"
            ))
        })?;
        Ok(Place {
            context_file: Some(dir.join("SPOOL.md")),
            dir,
            own,
        })
    }

    async fn run(&self, request: &Request, place: &Place, input: &Path, output: &Path) -> Result<Output, Error> {
        let prompt = format!(
            "Read the file {} and follow it. Write your answer to {} as the JSON it describes.",
            input.display(),
            output.display()
        );
        let mut args = arguments(self.cli, &prompt, request.model.as_deref()).map_err(Error::Failed)?;
        // The workspace's MCP servers, in the CLI's configuration (removed when the run ends).
        let mcp = mcp::setup_for(self.cli, request, &self.agents.work_root.join(".mcp"))?;
        args.extend(mcp.args.iter().cloned());
        let mut command = tokio::process::Command::new(&self.path);
        command
            .args(args)
            .current_dir(&place.dir)
            // Nothing of Spool's environment (its signing secret, cloud credentials) but the
            // allow-list.
            .env_clear()
            .envs(self.agents.env.iter().filter(|(k, _)| k != "PATH").map(|(k, v)| (k, v)))
            .env("PATH", self.agents.path_var())
            .env("HOME", place.own.join("home"))
            .env("TMPDIR", place.own.join("tmp"))
            .env("SPOOL_INPUT_FILE", input)
            .env("SPOOL_OUTPUT_FILE", output)
            .env("SPOOL_SESSION_ID", &request.context.session_id)
            .envs(mcp.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| Error::Failed(format!("cannot start `{}`: {e}", self.path.display())))?;
        let mut guard = GroupGuard { pid: child.id() };
        // Recorded while it runs, so that if this process dies the next start stops it.
        let _running = child
            .id()
            .map(|group| reap::Running::record(&self.agents.work_root, group, input));
        // What it prints is read as it comes (so a full pipe never stalls it), up to a bound:
        // only a failure's last words are shown. The run ends when the CLI exits, not when its
        // pipes close: a process it left running may hold them open.
        let stdout = tokio::spawn(read_bounded(child.stdout.take()));
        let stderr = tokio::spawn(read_bounded(child.stderr.take()));
        let timeout = self.agents.timeout;
        let Ok(status) = tokio::time::timeout(timeout, child.wait()).await else {
            stdout.abort();
            stderr.abort();
            return Err(Error::Failed(format!(
                "`{}` ran longer than {} s and was stopped",
                self.name(),
                timeout.as_secs()
            )));
        };
        let (stdout, stderr) = tokio::join!(drain(stdout), drain(stderr));
        // Some CLIs say why they failed on stdout (claude: "Not logged in").
        let stderr = if stderr.trim().is_empty() { stdout } else { stderr };
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
        let out: Output = serde_json::from_str(&text).map_err(|e| {
            Error::Failed(format!(
                "`{}` answered something that is not {{\"message\"?, \"actions\": [...]}} JSON ({e})",
                self.name()
            ))
        })?;
        if out.message.as_deref().is_none_or(|m| m.trim().is_empty()) && out.actions.is_empty() {
            return Err(Error::Failed(format!(
                "`{}` answered neither a message nor actions",
                self.name()
            )));
        }
        Ok(out)
    }
}

#[async_trait]
impl Runtime for Cli {
    fn works_on_disk(&self) -> bool {
        true
    }

    fn describe(&self, _: &Request) -> String {
        format!("cli:{}", self.name())
    }

    async fn respond(&self, request: &Request, sink: &mut dyn Sink) -> Result<Reply, Error> {
        let place = self.place(request).await?;
        let step = new_id("run");
        let input = place.own.join(format!("{step}.input.md"));
        let output = place.own.join(format!("{step}.output.json"));
        let placed = match &request.file_access {
            Some(access) if !request.files.is_empty() => files::place(&request.files, access, &place.own).await?,
            _ => Vec::new(),
        };
        let placed: Vec<(&Attached, Option<PathBuf>)> = request.files.iter().zip(placed).collect();
        // The workspace's context, next to the input file.
        let context = place.own.join(format!("{step}.context.md"));
        let context = match &request.workspace_context {
            Some(text) => {
                tokio::fs::write(&context, text)
                    .await
                    .map_err(|e| Error::Failed(format!("cannot write the workspace's context file: {e}")))?;
                Some(context)
            }
            None => None,
        };
        tokio::fs::write(
            &input,
            input_file(
                request,
                &output,
                place.context_file.as_deref(),
                context.as_deref(),
                &placed,
            ),
        )
        .await
        .map_err(|e| Error::Failed(format!("cannot write the CLI's input file: {e}")))?;
        let result = self.run(request, &place, &input, &output).await;
        let _ = tokio::fs::remove_file(&input).await;
        let _ = tokio::fs::remove_file(&output).await;
        if let Some(context) = &context {
            let _ = tokio::fs::remove_file(context).await;
        }
        let out = result?;
        let reply = reply_of(out.message, out.actions);
        if !reply.text.is_empty() {
            sink.text(&reply.text).await?;
        }
        Ok(reply)
    }
}

/// The reply a CLI's output makes (its `message` and `actions`, the third source design's
/// format): the message is the text, each action a call of the tool its `type` names, to run
/// at once. A runner's settled output is read the same way.
pub fn reply_of(message: Option<String>, actions: Vec<Value>) -> Reply {
    let tool_calls = actions
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
    Reply {
        text: message.unwrap_or_default(),
        tool_calls,
        usage: None,
        one_shot: true,
    }
}
