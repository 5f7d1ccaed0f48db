//! Runners end to end, on both backends: a served Spool whose workspaces' CLI agents run on
//! runners and which has no CLI itself, and `spool runner` (in this process, over HTTP on
//! loopback) with a fake `claude` on its own search path only. The fake CLI follows the seed's
//! file protocol and acts on the chat's last message: it answers, renames the chat, asks a
//! question, or sleeps until it is killed; it records each run and its environment.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use reqwest::Method;
use serde_json::{Value, json};
use spool_agents::{Runtimes, cli::CliAgents};
use spool_tests::Harness;

use crate::support::{Stack, abort, all_events, one, org_of, send, stack_configured, test_settings, until};

on_both_backends!(runner_process:
    a_runner_answers_once_in_order_and_its_actions_run,
    a_question_from_a_cli_on_a_runner_waits_for_its_answer,
    a_runner_places_the_chats_files_fetched_from_the_deployment,
    an_abort_reaches_the_runner_and_kills_its_cli_within_a_second,
    two_runners_answer_fifty_turns_each_exactly_once,
);

/// The fake `claude`: `--version` answers; otherwise it records the run (`runs`: the turn and
/// the message) and its environment (`env-{chat}`), then acts on the last person's message.
const FAKE_CLAUDE: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "2.0.1 (Claude Code)"; exit 0; fi
dir="$(dirname "$0")"
env > "$dir/env-$SPOOL_SESSION_ID"
turn=$(sed -n 's/^- turn: //p' "$SPOOL_INPUT_FILE")
last=$(grep '"role":"user"' "$SPOOL_INPUT_FILE" | tail -n 1 | sed 's/.*"content":"\([^"]*\)".*/\1/')
echo "$turn $last" >> "$dir/runs"
case "$last" in
  sleep*)
    sleep 30 &
    echo "$!" > "$dir/sleep-$SPOOL_SESSION_ID"
    echo "$$" > "$dir/pid-$SPOOL_SESSION_ID"
    wait
    echo '{"message": "woke up"}' > "$SPOOL_OUTPUT_FILE" ;;
  ask*)
    echo '{"message": "One question.", "actions": [{"type": "ask_user", "question": "Which color?"}]}' > "$SPOOL_OUTPUT_FILE" ;;
  read*)
    files=$(sed -n 's/^- `\(.*\/attachments\/[^`]*\)`.*/\1/p' "$SPOOL_INPUT_FILE")
    out=""
    for f in $files; do out="$out[$(basename "$f")=$(cat "$f")]"; done
    echo "{\"message\": \"$out\"}" > "$SPOOL_OUTPUT_FILE" ;;
  rename*)
    echo '{"message": "Renamed.", "actions": [{"type": "rename_chat", "title": "Named on the runner"}]}' > "$SPOOL_OUTPUT_FILE" ;;
  *)
    echo "{\"message\": \"echo: $last\", \"actions\": []}" > "$SPOOL_OUTPUT_FILE" ;;
esac
"#;

/// A runner running in this process, stopped (with its CLIs) when dropped.
struct Runner(tokio::task::JoinHandle<anyhow::Result<()>>);

impl Drop for Runner {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A served Spool whose workspaces' CLI agents run on runners, with no CLI of its own; the
/// runners' CLI folder (the fake `claude`) and a runner key of the first organization.
struct Setup {
    stack: Stack,
    bin: tempfile::TempDir,
    work: tempfile::TempDir,
    key: String,
}

async fn setup<H: Harness>(harness: &H) -> Setup {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    // The server's CLI search path: an empty folder.
    let none = work.path().join("server-bin");
    std::fs::create_dir_all(&none).unwrap();
    let server_clis = CliAgents::new(vec![none], work.path().join("server-chats"), Duration::from_secs(20));
    let settings = spool_agents::Settings {
        cli_host: spool_chat::settings::CliHost::Runners,
        runner_wait: Duration::from_secs(600),
        ..test_settings()
    };
    let stack = stack_configured(
        harness,
        Runtimes::scripted_only().with_cli(Arc::new(server_clis)),
        settings,
    )
    .await;
    let bin = tempfile::tempdir().unwrap();
    let claude = bin.path().join("claude");
    std::fs::write(&claude, FAKE_CLAUDE).unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    let org = org_of(&stack.api);
    let now = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock);
    let (_, key) = spool_api::admin::create_api_key(stack.metadata.as_ref(), &org, &["runner".to_owned()], now)
        .await
        .unwrap();
    Setup {
        stack,
        bin,
        work,
        key: key.reveal(),
    }
}

impl Setup {
    /// Starts runner `name`, running `concurrency` turns at once. Its configuration holds
    /// Spool's secrets, which its CLIs must never see.
    fn runner(&self, name: &str, concurrency: u16) -> Runner {
        let path = |p: &Path| p.display().to_string();
        let vars = [
            ("SPOOL_CLI_PATH", path(self.bin.path())),
            ("SPOOL_CLI_WORK_DIR", path(&self.work.path().join(name))),
            ("SPOOL_CLI_TIMEOUT_MS", "60000".to_owned()),
            ("SPOOL_JWT_SECRET", "a secret the CLI must not see".to_owned()),
            ("SPOOL_API_KEY", self.key.clone()),
            ("AWS_SECRET_ACCESS_KEY", "nor this".to_owned()),
        ];
        let config = spool_platform::Config::from_vars(vars.map(|(k, v)| (k.to_owned(), v))).unwrap();
        let args = spool_local::runner::RunnerArgs {
            url: self.stack.api.base.clone(),
            api_key: self.key.clone().into(),
            workspaces: Vec::new(),
            name: Some(name.to_owned()),
            concurrency,
        };
        Runner(tokio::spawn(async move {
            spool_local::runner::run_with(args, &config).await
        }))
    }

    /// A chat of a new workspace (whose CLI agents run on runners), answered by `claude`.
    async fn chat(&self) -> String {
        let api = &self.stack.api;
        let ws = api
            .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Repo" })))
            .await;
        let chat = api
            .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws["id"] })))
            .await;
        let chat = chat["id"].as_str().unwrap().to_owned();
        api.ok(
            Method::PATCH,
            &format!("/v1/sessions/{chat}"),
            Some(json!({ "cli_type": "claude" })),
        )
        .await;
        chat
    }

    /// The fake CLI's runs: (turn, message), in order.
    fn runs(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(self.bin.path().join("runs"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (turn, message) = l.split_once(' ').unwrap_or((l, ""));
                (turn.to_owned(), message.to_owned())
            })
            .collect()
    }

    fn file(&self, name: &str) -> PathBuf {
        self.bin.path().join(name)
    }
}

/// The events of `turn`, by type, in the chat's order.
fn turn_types(events: &[Value], turn: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["turn_id"] == turn)
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

pub(crate) async fn a_runner_answers_once_in_order_and_its_actions_run<H: Harness>(harness: &H) {
    // GIVEN a runner with `claude`, and a chat whose CLI runs on runners
    let s = setup(harness).await;
    let _runner = s.runner("box", 2);
    let chat = s.chat().await;
    let api = &s.stack.api;
    // WHEN a person asks for a rename
    let turn = send(api, &chat, "rename this chat").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    // THEN the answer lands once, in order, and the turn completes
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    assert_eq!(one(&events, &turn, "message_end")["payload"]["text"], "Renamed.");
    let types = turn_types(&events, &turn);
    let at = |t: &str| {
        types
            .iter()
            .position(|x| x == t)
            .unwrap_or_else(|| panic!("{t}: {types:?}"))
    };
    assert!(
        at("agent_start") < at("message_end") && at("message_end") < at("agent_end"),
        "{types:?}"
    );
    // AND its action ran on the server
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["title"], "Named on the runner");
    // AND the CLI ran once, on the runner
    assert_eq!(s.runs(), [(turn.clone(), "rename this chat".to_owned())]);
    // AND its environment held none of Spool's secrets
    let env = std::fs::read_to_string(s.file(&format!("env-{chat}"))).unwrap();
    assert!(env.contains(&format!("SPOOL_SESSION_ID={chat}")), "{env}");
    for secret in ["SPOOL_JWT_SECRET", "SPOOL_API_KEY", "AWS_"] {
        assert!(!env.contains(secret), "{secret} in the CLI's environment: {env}");
    }
    assert!(!env.contains(&s.key), "the runner key in the CLI's environment");
    // AND the chat takes the next message
    let next = send(api, &chat, "hello again").await;
    let events = until(api, &chat, &next, "agent_end").await;
    assert_eq!(
        one(&events, &next, "message_end")["payload"]["text"],
        "echo: hello again"
    );
}

pub(crate) async fn a_question_from_a_cli_on_a_runner_waits_for_its_answer<H: Harness>(harness: &H) {
    let s = setup(harness).await;
    let _runner = s.runner("box", 2);
    let chat = s.chat().await;
    let api = &s.stack.api;
    // WHEN the CLI asks a question
    let turn = send(api, &chat, "ask me something").await;
    let events = until(api, &chat, &turn, "ask_question").await;
    let asked = one(&events, &turn, "ask_question")["payload"].clone();
    assert_eq!(asked["question"], "Which color?");
    // THEN the turn waits for the answer
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = all_events(api, &chat).await;
    assert!(!turn_types(&events, &turn).contains(&"agent_end".to_owned()));
    // AND the answer resumes it to its end
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/question"),
        Some(json!({ "question_id": asked["question_id"], "answer": "teal" })),
    )
    .await;
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    assert_eq!(one(&events, &turn, "message_end")["payload"]["text"], "One question.");
    assert_eq!(s.runs().len(), 1, "{:?}", s.runs());
}

pub(crate) async fn a_runner_places_the_chats_files_fetched_from_the_deployment<H: Harness>(harness: &H) {
    let s = setup(harness).await;
    let _runner = s.runner("box", 2);
    let chat = s.chat().await;
    let api = &s.stack.api;
    // GIVEN two files in the chat, the server's only
    crate::attachments_http::upload(api, &chat, "a.txt", "text/plain", b"first").await;
    crate::attachments_http::upload(api, &chat, "b.csv", "text/csv", b"x,y").await;
    // WHEN the CLI on the runner reads them where its input file says
    let turn = send(api, &chat, "read them").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    // THEN they were there, fetched from the deployment
    assert_eq!(
        one(&events, &turn, "message_end")["payload"]["text"],
        "[a.txt=first][b.csv=x,y]"
    );
    let placed = s
        .work
        .path()
        .join("box")
        .join(org_of(api))
        .join(&chat)
        .join("attachments/a.txt");
    assert_eq!(std::fs::read_to_string(placed).unwrap(), "first");
}

pub(crate) async fn an_abort_reaches_the_runner_and_kills_its_cli_within_a_second<H: Harness>(harness: &H) {
    let s = setup(harness).await;
    let _runner = s.runner("box", 2);
    let chat = s.chat().await;
    let api = &s.stack.api;
    // GIVEN the CLI sleeping on the runner
    let turn = send(api, &chat, "sleep a while").await;
    let (pid, sleeper) = spool_tests::eventually("the CLI's pids", || async {
        let pid = std::fs::read_to_string(s.file(&format!("pid-{chat}"))).ok()?;
        let sleeper = std::fs::read_to_string(s.file(&format!("sleep-{chat}"))).ok()?;
        Some((pid.trim().to_owned(), sleeper.trim().to_owned()))
    })
    .await;
    assert!(!gone(&pid) && !gone(&sleeper));
    // WHEN the person aborts
    abort(api, &chat).await;
    let aborted = Instant::now();
    // THEN the CLI and what it started are killed within a second
    while !(gone(&pid) && gone(&sleeper)) {
        assert!(
            aborted.elapsed() < Duration::from_secs(1),
            "the CLI still runs {:?} after the abort",
            aborted.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // AND the turn ends aborted, with no reply
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "aborted");
    assert!(!turn_types(&events, &turn).contains(&"message_end".to_owned()));
    // AND the chat takes the next message
    let next = send(api, &chat, "are you there").await;
    let events = until(api, &chat, &next, "agent_end").await;
    assert_eq!(
        one(&events, &next, "message_end")["payload"]["text"],
        "echo: are you there"
    );
}

pub(crate) async fn two_runners_answer_fifty_turns_each_exactly_once<H: Harness>(harness: &H) {
    // GIVEN two runners, two turns at once each
    let s = Arc::new(setup(harness).await);
    let _a = s.runner("box-a", 2);
    let _b = s.runner("box-b", 2);
    // WHEN five chats each take ten messages, one after another
    let mut chats = tokio::task::JoinSet::new();
    for c in 0..5 {
        let s = s.clone();
        chats.spawn(async move {
            let chat = s.chat().await;
            let mut turns = Vec::new();
            for m in 0..10 {
                let text = format!("m{c}-{m}");
                let turn = send(&s.stack.api, &chat, &text).await;
                until(&s.stack.api, &chat, &turn, "agent_end").await;
                turns.push((turn, text));
            }
            (chat, turns)
        });
    }
    let mut all = Vec::new();
    while let Some(done) = chats.join_next().await {
        let (chat, turns) = done.unwrap();
        // THEN each turn has exactly one answer, its own, and ended complete
        let events = all_events(&s.stack.api, &chat).await;
        for (turn, text) in &turns {
            assert_eq!(
                one(&events, turn, "message_end")["payload"]["text"],
                format!("echo: {text}")
            );
            assert_eq!(one(&events, turn, "agent_end")["payload"]["reason"], "complete");
        }
        all.extend(turns);
    }
    assert_eq!(all.len(), 50);
    // AND the CLI ran exactly once per turn
    let mut runs = s.runs();
    runs.sort();
    all.sort();
    assert_eq!(runs, all);
}
