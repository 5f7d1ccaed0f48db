//! CLI agents as real subprocesses: fake `claude`, `gemini`, `codex` and `opencode` executables
//! (shell scripts in a temporary search path) that read the markdown input file and write the
//! output file, exit non-zero, write nothing or garbage, or hang. The stack around them is the
//! real one on the embedded backend.

use std::{path::Path, sync::Arc, time::Duration};

use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::{Runtimes, cli::CliAgents};
use spool_tests::{EmbeddedHarness, Harness};

use crate::support::{Stack, abort, one, send, stack_with, until};

/// Writes an executable shell script `name` into `dir`.
fn script(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A CLI that answers well: it keeps a copy of its input and arguments, says where it ran, and
/// asks for a rename and a task.
const GOOD: &str = r#"cp "$SPOOL_INPUT_FILE" "$(dirname "$0")/last-input.md"
echo "$@" > "$(dirname "$0")/last-args"
cat > "$SPOOL_OUTPUT_FILE" <<EOF
{"message": "Hello from $(basename "$0") in $(pwd)", "actions": [
  {"type": "rename_chat", "title": "Named by the CLI"},
  {"type": "create_task", "title": "Task from the CLI"},
  {"type": "delete_agent", "agent": "nobody"},
  {"type": "launch_rockets"}]}
EOF"#;

/// A CLI that records what it could see: its environment, where it ran, its home.
const SPY: &str = r#"env > "$(dirname "$0")/env-$SPOOL_SESSION_ID"
pwd > "$(dirname "$0")/pwd-$SPOOL_SESSION_ID"
ls "$HOME/.." > "$(dirname "$0")/ls-$SPOOL_SESSION_ID"
echo '{"message": "seen", "actions": []}' > "$SPOOL_OUTPUT_FILE""#;

/// A CLI that moves the workspace (and renames the chat) without asking.
const MOVER: &str = r#"echo "{\"message\": \"moving\", \"actions\": [{\"type\": \"update_workspace\", \"working_dir\": \"$(cat "$(dirname "$0")/target")\"}]}" > "$SPOOL_OUTPUT_FILE""#;

pub(crate) struct Setup {
    _harness: EmbeddedHarness,
    pub(crate) bin: tempfile::TempDir,
    work: tempfile::TempDir,
    pub(crate) stack: Stack,
    pub(crate) ws: String,
}

pub(crate) async fn setup(clis: &[(&str, &str)], timeout: Duration) -> Setup {
    setup_with_env(clis, timeout, Vec::new()).await
}

/// [`setup`], passing `env` through to the CLIs.
async fn setup_with_env(clis: &[(&str, &str)], timeout: Duration, env: Vec<(String, String)>) -> Setup {
    let harness = EmbeddedHarness::new();
    let bin = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir_in(spool_tests::shared_root()).unwrap();
    for (name, body) in clis {
        script(bin.path(), name, body);
    }
    let agents = CliAgents::new(vec![bin.path().to_path_buf()], work.path().join("chats"), timeout)
        .with_env(env)
        .with_roots(spool_tests::workspace_roots(Arc::new(harness.metadata().await)));
    let stack = stack_with(&harness, Runtimes::scripted_only().with_cli(Arc::new(agents))).await;
    let ws = stack
        .api
        .ok(
            Method::POST,
            "/v1/workspaces",
            Some(json!({ "name": "CLI", "working_dir": work.path().to_str().unwrap() })),
        )
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    Setup {
        _harness: harness,
        bin,
        work,
        stack,
        ws,
    }
}

pub(crate) async fn chat(s: &Setup, agent: Value) -> String {
    let api = &s.stack.api;
    let agent = api
        .ok(Method::POST, &format!("/v1/workspaces/{}/agents", s.ws), Some(agent))
        .await;
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "agent_id": agent["id"] })))
        .await;
    chat["id"].as_str().unwrap().to_owned()
}

pub(crate) fn system_messages(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "system")
        .map(|e| e["payload"]["message"].as_str().unwrap().to_owned())
        .collect()
}

/// A CLI reads the input file, runs in the workspace's directory, and its message and actions
/// are the turn's; invalid actions become system events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cli_answers_from_its_output_file_and_its_actions_run() {
    let s = setup(&[("claude", GOOD)], Duration::from_secs(20)).await;
    let api = &s.stack.api;
    let chat = chat(
        &s,
        json!({ "name": "Coder", "instruction": "Write tidy code.", "runtime": "cli", "cli_type": "claude" }),
    )
    .await;
    let turn = send(api, &chat, "Fix the build").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_start")["payload"]["runtime"], "cli:claude");
    let text = one(&events, &turn, "message_end")["payload"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let workdir = s.work.path().canonicalize().unwrap();
    assert_eq!(text, format!("Hello from claude in {}", workdir.display()));
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    // The input file had the instruction, the chat, the JSONL history and where to answer.
    let input = std::fs::read_to_string(s.bin.path().join("last-input.md")).unwrap();
    assert!(input.contains("# Instruction\n\nWrite tidy code."), "{input}");
    assert!(input.contains(&chat) && input.contains("SPOOL.md"), "{input}");
    assert!(
        input.contains(&format!("- workspace: CLI ({})", s.ws)),
        "the workspace's name: {input}"
    );
    assert!(input.contains("- agent: Coder"), "the agent's name: {input}");
    // History lines as the third source design has them: {role, content, created_at}.
    let line = input
        .lines()
        .find(|l| l.contains("Fix the build") && l.starts_with('{'))
        .unwrap_or_else(|| panic!("{input}"));
    let line: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(
        (line["role"].as_str(), line["content"].as_str()),
        (Some("user"), Some("Fix the build"))
    );
    assert!(line["created_at"].as_str().unwrap().starts_with("20"), "{line}");
    assert!(input.contains(".output.json"), "{input}");
    assert!(
        input.contains("exactly in this format") && input.contains("`message` may be left out"),
        "{input}"
    );
    assert!(
        input.contains("`create_task`") && input.contains("\"summary\""),
        "{input}"
    );
    let args = std::fs::read_to_string(s.bin.path().join("last-args")).unwrap();
    assert!(args.starts_with("-p Read the file "), "{args}");
    // Its actions ran at once (no approval asked); the invalid ones are system events.
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["title"], "Named by the CLI");
    let tasks = api
        .ok(Method::GET, &format!("/v1/workspaces/{}/tasks", s.ws), None)
        .await;
    assert_eq!(tasks["tasks"][0]["title"], "Task from the CLI");
    let systems = system_messages(&events);
    assert_eq!(systems.len(), 2, "{systems:?}");
    assert!(
        systems[0].contains("only the workspace's built-in Spool agent may `delete_agent`"),
        "{systems:?}"
    );
    assert!(systems[1].contains("`launch_rockets`"), "{systems:?}");
    assert!(!events.iter().any(|e| e["type"] == "tool_approval_required"));
}

/// A CLI that reads the chat's files at the paths its input file lists, and answers with them.
const READER: &str = r#"files=$(sed -n 's/^- `\(.*\/attachments\/[^`]*\)`.*/\1/p' "$SPOOL_INPUT_FILE")
out=""
for f in $files; do out="$out[$(basename "$f")=$(cat "$f")]"; done
echo "{\"message\": \"$out\", \"actions\": []}" > "$SPOOL_OUTPUT_FILE""#;

/// A CLI agent finds the chat's files in its chat folder, at the paths its input file lists:
/// the newest of each name, and a link an earlier run left in a file's place is replaced, not
/// followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cli_reads_the_chats_files_where_its_input_file_says() {
    let s = setup(&[("claude", READER)], Duration::from_secs(20)).await;
    let api = &s.stack.api;
    let chat = chat(&s, json!({ "name": "Reader", "runtime": "cli", "cli_type": "claude" })).await;
    crate::attachments_http::upload(api, &chat, "a.txt", "text/plain", b"first").await;
    crate::attachments_http::upload(api, &chat, "b.csv", "text/csv", b"x,y").await;
    let turn = send(api, &chat, "Read them").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "message_end")["payload"]["text"],
        "[a.txt=first][b.csv=x,y]"
    );
    // A newer a.txt replaces the older; a link put where b.csv was is not followed.
    let org = crate::support::org_of(api);
    let folder = s.work.path().join("chats").join(&org).join(&chat).join("attachments");
    let outside = s.work.path().join("outside.txt");
    std::fs::write(&outside, "untouched").unwrap();
    std::fs::remove_file(folder.join("a.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, folder.join("a.txt")).unwrap();
    crate::attachments_http::upload(api, &chat, "a.txt", "text/plain", b"second").await;
    let turn = send(api, &chat, "Again").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "message_end")["payload"]["text"],
        "[b.csv=x,y][a.txt=second]",
        "in the order they were uploaded"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched");
    assert!(!folder.join("a.txt").is_symlink());
    // A link in place of the list of placed files, a folder where b.csv was, and then a link
    // in place of the whole folder: none is followed, and the files are all there.
    std::fs::remove_file(folder.join(".spool-manifest.json")).unwrap();
    std::os::unix::fs::symlink(&outside, folder.join(".spool-manifest.json")).unwrap();
    std::fs::remove_file(folder.join("b.csv")).unwrap();
    std::fs::create_dir(folder.join("b.csv")).unwrap();
    std::fs::write(folder.join("b.csv").join("inside"), "agent's").unwrap();
    let turn = send(api, &chat, "Once more").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "message_end")["payload"]["text"],
        "[b.csv=x,y][a.txt=second]"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched");
    let elsewhere = s.work.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::rename(&folder, s.work.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &folder).unwrap();
    let turn = send(api, &chat, "And again").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "message_end")["payload"]["text"],
        "[b.csv=x,y][a.txt=second]"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written through the link"
    );
    assert!(!folder.is_symlink());
}

/// The third source design's example output, exactly: the agent is created at position 3.
const DESIGN_EXAMPLE: &str = r#"cat > "$SPOOL_OUTPUT_FILE" <<'EOF'
{"message": "I added a reviewer.", "actions": [{"type": "create_agent", "name": "Reviewer", "instruction": "Review every change for bugs.", "cli_type": "claude", "order": 3}]}
EOF"#;

/// An output with actions only, in the design's field names.
const ACTIONS_ONLY: &str = r#"echo '{"actions": [{"type": "rename_chat", "title": "Only actions"}, {"type": "create_task", "summary": "Write the docs", "description": "All of them"}]}' > "$SPOOL_OUTPUT_FILE""#;

/// A CLI that writes the design's output format is understood: `create_agent` with `order`,
/// a message left out, `create_task` with `summary`; the input file says which format it wants.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_designs_output_format_is_understood() {
    let s = setup(
        &[("claude", DESIGN_EXAMPLE), ("gemini", ACTIONS_ONLY)],
        Duration::from_secs(20),
    )
    .await;
    let api = &s.stack.api;
    let agents_path = format!("/v1/workspaces/{}/agents", s.ws);
    for name in ["One", "Two", "Three"] {
        api.ok(Method::POST, &agents_path, Some(json!({ "name": name }))).await;
    }
    let agents = api.ok(Method::GET, &agents_path, None).await;
    let builtin = agents["agents"][0]["id"].as_str().unwrap().to_owned();
    api.ok(
        Method::PATCH,
        &format!("/v1/agents/{builtin}"),
        Some(json!({ "runtime": "cli", "cli_type": "claude" })),
    )
    .await;
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "agent_id": builtin })))
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    let turn = send(api, &chat, "Add a reviewer").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "agent_end")["payload"]["reason"],
        "complete",
        "{events:?}"
    );
    let agents = api.ok(Method::GET, &agents_path, None).await;
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Spool", "One", "Two", "Reviewer", "Three"]);
    assert_eq!(agents["agents"][3]["position"], 3);
    assert_eq!(agents["agents"][3]["cli_type"], "claude");
    // Only actions: no message, and the turn completes.
    api.ok(
        Method::PATCH,
        &format!("/v1/sessions/{chat}"),
        Some(json!({ "cli_type": "gemini" })),
    )
    .await;
    let turn = send(api, &chat, "Tidy up").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "agent_end")["payload"]["reason"],
        "complete",
        "{events:?}"
    );
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["title"], "Only actions");
    let tasks = api
        .ok(Method::GET, &format!("/v1/workspaces/{}/tasks", s.ws), None)
        .await;
    assert_eq!(tasks["tasks"][0]["title"], "Write the docs");
    assert_eq!(tasks["tasks"][0]["description"], "All of them");
}

/// A CLI that keeps the workspace context file its input file points to.
const CONTEXT_READER: &str = r#"ctx=$(sed -n 's/.* are in `\(.*\.context\.md\)`.*/\1/p' "${SPOOL_INPUT_FILE:-/dev/null}")
[ -n "$ctx" ] && cp "$ctx" "$(dirname "$0")/last-context.md"
echo '{"message": "read"}' > "${SPOOL_OUTPUT_FILE:-/dev/null}""#;

/// Every chat agent of a workspace (not only the built-in one) gets the workspace's context
/// file next to its input file: the workspace's settings, every agent in order with its id,
/// what this Spool can run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workspace_agent_gets_the_workspace_context_file() {
    let s = setup(&[("claude", CONTEXT_READER)], Duration::from_secs(20)).await;
    let api = &s.stack.api;
    let chat = chat(&s, json!({ "name": "Planner", "runtime": "cli", "cli_type": "claude" })).await;
    let turn = send(api, &chat, "Who is here?").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "agent_end")["payload"]["reason"],
        "complete",
        "{events:?}"
    );
    let context = std::fs::read_to_string(s.bin.path().join("last-context.md")).unwrap();
    let agents = api
        .ok(Method::GET, &format!("/v1/workspaces/{}/agents", s.ws), None)
        .await;
    for (i, agent) in agents["agents"].as_array().unwrap().iter().enumerate() {
        let line = format!(
            "{}. {} (id: {})",
            i + 1,
            agent["name"].as_str().unwrap(),
            agent["id"].as_str().unwrap()
        );
        assert!(context.contains(&line), "{line} in {context}");
    }
    assert!(context.contains("- title: CLI (id: "), "{context}");
    assert!(context.contains("- working directory: static, `"), "{context}");
    assert!(context.contains("- CLIs: claude"), "{context}");
    assert!(context.contains("- model providers: none configured"), "{context}");
    assert!(
        !context.to_lowercase().contains("task"),
        "no tasks in the context: {context}"
    );
}

/// A prompt command reaches a CLI agent: its input file holds the wrapped prompt as the
/// person's message, and the chat's mode in the instruction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prompt_command_reaches_a_cli_in_its_input_file() {
    let s = setup(&[("claude", GOOD)], Duration::from_secs(20)).await;
    let api = &s.stack.api;
    let chat = chat(&s, json!({ "name": "Coder", "runtime": "cli", "cli_type": "claude" })).await;
    let invoke = |input: &str| {
        let path = format!("/v1/sessions/{chat}/slash-commands/invoke");
        let body = json!({ "input": input });
        async move { api.ok(Method::POST, &path, Some(body)).await }
    };
    invoke("/mode plan").await;
    let sent = invoke("/summarize the build").await;
    let turn = sent["turn_id"].as_str().unwrap().to_owned();
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let input = std::fs::read_to_string(s.bin.path().join("last-input.md")).unwrap();
    assert!(
        input.contains(r#"<slash-command name=\"summarize\" invokedAs=\"/summarize the build\">"#),
        "{input}"
    );
    assert!(input.contains("what comes next. the build"), "{input}");
    assert!(input.contains("`plan` mode"), "{input}");
}

/// The chat's CLI override wins over the agent's CLI; the built-in agent takes the first
/// installed CLI in the order claude → gemini → codex → opencode.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_override_wins_and_the_builtin_agent_takes_the_first_installed_cli() {
    let s = setup(
        &[("gemini", GOOD), ("codex", GOOD), ("opencode", GOOD)],
        Duration::from_secs(20),
    )
    .await;
    let api = &s.stack.api;
    // The built-in agent: gemini, claude being absent.
    let builtin = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": s.ws })))
        .await;
    let builtin = builtin["id"].as_str().unwrap().to_owned();
    let turn = send(api, &builtin, "hi").await;
    let events = until(api, &builtin, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_start")["payload"]["runtime"], "cli:gemini");
    // An agent with codex, in a chat that overrides it with opencode.
    let chat = chat(&s, json!({ "name": "C", "runtime": "cli", "cli_type": "codex" })).await;
    api.ok(
        Method::PATCH,
        &format!("/v1/sessions/{chat}"),
        Some(json!({ "cli_type": "opencode" })),
    )
    .await;
    let turn = send(api, &chat, "hi").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_start")["payload"]["runtime"], "cli:opencode");
    let args = std::fs::read_to_string(s.bin.path().join("last-args")).unwrap();
    assert!(args.starts_with("run Read the file "), "{args}");
    // A CLI that is not installed: a system event that says so.
    api.ok(
        Method::PATCH,
        &format!("/v1/sessions/{chat}"),
        Some(json!({ "cli_type": "claude" })),
    )
    .await;
    let turn = send(api, &chat, "hi").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert!(
        system_messages(&events)
            .last()
            .unwrap()
            .contains("`claude` CLI is not installed")
    );
}

/// Non-zero exits, missing and invalid output, and a CLI that hangs past its timeout each end
/// the turn with a system event saying which.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_clis_become_system_events() {
    let s = setup(
        &[
            ("claude", "echo 'no credit left' >&2; exit 3"),
            ("gemini", "exit 0"),
            ("codex", "echo 'not json' > \"$SPOOL_OUTPUT_FILE\""),
            ("opencode", "sleep 30"),
        ],
        Duration::from_secs(1),
    )
    .await;
    let api = &s.stack.api;
    for (cli, expected) in [
        ("claude", "`claude` exited with 3: no credit left"),
        ("gemini", "`gemini` wrote no answer"),
        ("codex", "`codex` answered something that is not"),
        ("opencode", "`opencode` ran longer than 1 s and was stopped"),
    ] {
        let chat = chat(&s, json!({ "name": cli, "runtime": "cli", "cli_type": cli })).await;
        let turn = send(api, &chat, "go").await;
        let events = until(api, &chat, &turn, "agent_end").await;
        assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "error", "{cli}");
        let systems = system_messages(&events);
        assert!(systems.iter().any(|m| m.contains(expected)), "{cli}: {systems:?}");
    }
}

/// A CLI that exits with a process of its own still running (holding its output pipes open)
/// has answered when it exits: its answer is read then, not when that process ends. The same
/// CLI saying why it failed on stdout only is quoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cli_is_done_when_it_exits_and_its_reason_is_read_from_stdout_too() {
    let s = setup(
        &[
            (
                "claude",
                r#"echo '{"message": "done early", "actions": []}' > "$SPOOL_OUTPUT_FILE"; sleep 25 & exit 0"#,
            ),
            ("gemini", "echo 'Not logged in · Please run /login'; exit 1"),
        ],
        Duration::from_secs(10),
    )
    .await;
    let api = &s.stack.api;
    let chat_of = |cli: &str| chat(&s, json!({ "name": cli, "runtime": "cli", "cli_type": cli }));
    let chat = chat_of("claude").await;
    let turn = send(api, &chat, "go").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    assert_eq!(one(&events, &turn, "message_end")["payload"]["text"], "done early");
    let chat = chat_of("gemini").await;
    let turn = send(api, &chat, "go").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let systems = system_messages(&events);
    assert!(
        systems
            .iter()
            .any(|m| m.contains("`gemini` exited with 1: Not logged in · Please run /login")),
        "{systems:?}"
    );
}

/// A CLI's change to the workspace's notifications or cleanup waits for a person's approval,
/// as moving its working directory does: a prompt-injected agent cannot redirect what agents
/// ask to another address alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cli_changing_notifications_needs_approval() {
    let s = setup(
        &[(
            "claude",
            r#"echo '{"actions": [{"type": "update_workspace", "notifications": {"email": "thief@example.com"}}]}' > "$SPOOL_OUTPUT_FILE""#,
        )],
        Duration::from_secs(20),
    )
    .await;
    let api = &s.stack.api;
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": s.ws })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let turn = send(api, &chat, "send my notifications elsewhere").await;
    let events = until(api, &chat, &turn, "tool_approval_required").await;
    let call = one(&events, &turn, "tool_approval_required")["payload"]["tool_call_id"].clone();
    let email = || async {
        api.ok(Method::GET, &format!("/v1/workspaces/{}", s.ws), None).await["notifications"]["email"].clone()
    };
    assert!(email().await.is_null(), "nothing changes before the approval");
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/approval"),
        Some(json!({ "decision": "decline", "tool_call_id": call })),
    )
    .await;
    until(api, &chat, &turn, "agent_end").await;
    assert!(email().await.is_null(), "a declined change never runs");
}

/// An abort kills the CLI and everything it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abort_kills_the_cli_and_its_children() {
    let hang = r#"sleep 60 &
echo $! > "$(dirname "$0")/child.pid"
echo $$ > "$(dirname "$0")/cli.pid"
wait"#;
    let s = setup(&[("claude", hang)], Duration::from_secs(60)).await;
    let api = &s.stack.api;
    let chat = chat(&s, json!({ "name": "Slow", "runtime": "cli", "cli_type": "claude" })).await;
    let turn = send(api, &chat, "take your time").await;
    let pid_file = s.bin.path().join("child.pid");
    spool_tests::eventually("the CLI and its child started", || async {
        (pid_file.exists() && s.bin.path().join("cli.pid").exists()).then_some(())
    })
    .await;
    let pids: Vec<String> = ["cli.pid", "child.pid"]
        .iter()
        .map(|f| std::fs::read_to_string(s.bin.path().join(f)).unwrap().trim().to_owned())
        .collect();
    abort(api, &chat).await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "aborted");
    for pid in pids {
        let mut gone = false;
        for _ in 0..100 {
            let alive = std::process::Command::new("kill")
                .args(["-0", &pid])
                .status()
                .unwrap()
                .success();
            if !alive {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone, "process {pid} outlived the abort");
    }
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The names of the variables in an `env` dump.
fn names(dump: &str) -> Vec<String> {
    let mut names: Vec<String> = dump
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_owned()))
        .collect();
    names.sort();
    names
}

/// A CLI sees nothing of Spool's environment but the allow-list, runs in a private folder of
/// its organization and chat, and the two organizations' global chats (both `global`) never
/// share one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cli_sees_only_the_allow_list_in_a_private_folder_of_its_organization_and_chat() {
    // GIVEN a CLI that records what it sees, and an operator who passes one provider key
    let s = setup_with_env(
        &[("claude", SPY)],
        Duration::from_secs(20),
        vec![
            ("PROVIDER_KEY".to_owned(), "k-1".to_owned()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ],
    )
    .await;
    // WHEN both organizations talk to the built-in agent in their global chats
    for api in [&s.stack.api, &s.stack.other] {
        let turn = send(api, "global", "who are you").await;
        let events = until(api, "global", &turn, "agent_end").await;
        assert_eq!(one(&events, &turn, "message_end")["payload"]["text"], "seen");
    }
    // THEN the CLI got only the allow-list: none of this test process's variables (cargo's,
    // and whatever secrets a server would have)
    let dump = std::fs::read_to_string(s.bin.path().join("env-global")).unwrap();
    let allowed = [
        "HOME",
        "LANG",
        "OLDPWD",
        "PATH",
        "PROVIDER_KEY",
        "PWD",
        "SHLVL",
        "SPOOL_INPUT_FILE",
        "SPOOL_OUTPUT_FILE",
        "SPOOL_SESSION_ID",
        "TMPDIR",
        "_",
    ];
    let seen = names(&dump);
    assert!(seen.iter().all(|n| allowed.contains(&n.as_str())), "{seen:?}");
    assert!(seen.contains(&"PROVIDER_KEY".to_owned()) && std::env::vars().any(|(k, _)| k.starts_with("CARGO")));
    // AND it ran in a folder of its organization and chat, readable by Spool's user only,
    // with its home inside it
    let chats = s.work.path().join("chats").canonicalize().unwrap();
    let mut folders = Vec::new();
    for api in [&s.stack.api, &s.stack.other] {
        let org = crate::support::org_of(api);
        let folder = chats.join(&org).join("global");
        assert_eq!(mode(&folder), 0o700, "{}", folder.display());
        assert_eq!(mode(&chats.join(&org)), 0o700);
        assert_eq!(mode(&chats), 0o700);
        folders.push(folder);
    }
    assert_ne!(folders[0], folders[1]);
    let pwd = std::fs::read_to_string(s.bin.path().join("pwd-global")).unwrap();
    assert!(folders.iter().any(|f| pwd.trim() == f.to_str().unwrap()), "{pwd}");
    let home = dump.lines().find_map(|l| l.strip_prefix("HOME=")).unwrap();
    assert!(home.starts_with(pwd.trim()), "{home} not in {pwd}");
    // AND the folder holding its home has only the chat's own things (no other chat's files)
    let listing = std::fs::read_to_string(s.bin.path().join("ls-global")).unwrap();
    let mut entries: Vec<&str> = listing
        .lines()
        .filter(|l| !l.ends_with(".md") && !l.ends_with(".json"))
        .collect();
    entries.sort_unstable();
    assert_eq!(entries, ["home", "tmp"]);
}

/// A CLI's move of the workspace's working directory waits for a person's approval, and is
/// confined to the roots like a person's request; other actions still run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cli_moving_the_working_directory_needs_approval_and_stays_under_the_roots() {
    let s = setup(&[("claude", MOVER)], Duration::from_secs(20)).await;
    let api = &s.stack.api;
    let builtin = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": s.ws })))
        .await;
    let chat = builtin["id"].as_str().unwrap().to_owned();
    let before = api.ok(Method::GET, &format!("/v1/workspaces/{}", s.ws), None).await["working_dir"].clone();

    // WHEN the CLI asks to move the workspace to `/`
    std::fs::write(s.bin.path().join("target"), "/").unwrap();
    let turn = send(api, &chat, "move to the root").await;
    // THEN the turn waits for the person's approval, and nothing moved yet
    let events = until(api, &chat, &turn, "tool_approval_required").await;
    let call = one(&events, &turn, "tool_approval_required")["payload"]["tool_call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ws = api.ok(Method::GET, &format!("/v1/workspaces/{}", s.ws), None).await;
    assert_eq!(ws["working_dir"], before);
    // WHEN the person approves it
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/approval"),
        Some(json!({ "decision": "approve", "tool_call_id": call })),
    )
    .await;
    // THEN the action is still refused: `/` is outside the roots
    let events = until(api, &chat, &turn, "agent_end").await;
    let end = events
        .iter()
        .find(|e| e["type"] == "tool_end" && e["payload"]["tool_call_id"] == call.as_str())
        .unwrap();
    assert!(
        end["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("is not a folder this organization may use"),
        "{end}"
    );
    let ws = api.ok(Method::GET, &format!("/v1/workspaces/{}", s.ws), None).await;
    assert_eq!(ws["working_dir"], before);
}

/// Each CLI is probed as a turn would run it: installed or not, its version, healthy or why not.
#[tokio::test]
async fn the_clis_are_probed_for_their_version() {
    use spool_chat::{clis::CliProbe, workspace::CliType};
    let bin = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    script(bin.path(), "claude", "echo '1.0.35 (Claude Code)'");
    script(bin.path(), "gemini", "echo 'no API key configured' >&2; exit 2");
    script(bin.path(), "codex", "true");
    let agents = CliAgents::new(
        vec![bin.path().to_path_buf()],
        work.path().to_path_buf(),
        Duration::from_secs(20),
    );
    let clis = agents.clis().await;
    let of = |cli: CliType| clis.iter().find(|c| c.cli == cli).unwrap().clone();
    assert_eq!(clis.iter().map(|c| c.cli).collect::<Vec<_>>(), CliType::ALL);
    let claude = of(CliType::Claude);
    assert!(claude.installed && claude.healthy, "{claude:?}");
    assert_eq!(claude.version.as_deref(), Some("1.0.35 (Claude Code)"));
    let gemini = of(CliType::Gemini);
    assert!(gemini.installed && !gemini.healthy, "{gemini:?}");
    assert!(
        gemini
            .reason
            .as_deref()
            .unwrap()
            .contains("exited with 2: no API key configured"),
        "{gemini:?}"
    );
    let codex = of(CliType::Codex);
    assert!(
        !codex.healthy && codex.reason.as_deref().unwrap().contains("printed nothing"),
        "{codex:?}"
    );
    let opencode = of(CliType::Opencode);
    assert!(!opencode.installed && !opencode.healthy, "{opencode:?}");
    assert!(
        opencode.reason.as_deref().unwrap().contains("SPOOL_CLI_PATH"),
        "{opencode:?}"
    );
}
