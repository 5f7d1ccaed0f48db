//! # One job: the CLI run, its heartbeats, its settle
//!
//! A claimed job's request is rebuilt with the chat's files read through the deployment, and
//! the CLI runtime answers it on this machine. Meanwhile the claim is heartbeated: each
//! heartbeat long-polls, and one answering `cancel` (an abort, or the run was superseded)
//! drops the CLI's future at once, which kills its process group; nothing is settled then,
//! since the engine ends the turn. An answer is settled as the CLI's message and actions, a
//! failure as its reason; a settle is retried on transient failures with the same epoch (the
//! deployment accepts a claim's settle once, so a retry is never recorded twice).

use std::sync::Arc;

use serde_json::{Map, Value};
use spool_agents::{
    runner::RunnerRequest,
    runtime::{Error as RuntimeError, FileAccess, Reply, Sink, ToolCall},
    runtimes::CliRuntimes,
};
use spool_chat::runner::{
    MAX_OUTCOME_BYTES, RunnerOutcome,
    wire::{Assignment, Heartbeat, Settle},
};

use super::{
    Backoff, Fatal, Shared,
    client::{CallError, Settled},
    files::TurnFiles,
};

/// How long a heartbeat waits for an abort (under the deployment's own bound and API
/// Gateway's 29 s).
const HEARTBEAT_WAIT_MS: u64 = 15_000;
/// How many times a settle is tried before the run's outcome is given up (the lease then runs
/// out and the job is offered again).
const SETTLE_ATTEMPTS: u32 = 8;

/// Why a run ended before its CLI answered.
enum Stopped {
    /// The deployment said stop: an abort, or the run was superseded.
    Cancelled,
    /// The key was refused: the runner stops.
    Fatal(Fatal),
}

/// A sink that keeps nothing: a CLI's reply travels whole, in the settle.
struct Discard;

#[async_trait::async_trait]
impl Sink for Discard {
    async fn text(&mut self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
}

/// Runs the job `assignment` to its end; an error only when the runner must stop.
pub(crate) async fn run(shared: &Shared, assignment: Assignment) -> Result<(), Fatal> {
    let turn = assignment.turn_id.clone();
    let started = std::time::Instant::now();
    tracing::info!(
        turn = %turn,
        session = %assignment.session_id,
        cli = spool_agents::cli::program(assignment.cli),
        epoch = assignment.epoch,
        "took a turn"
    );
    let answer = tokio::select! {
        outcome = answer(shared, &assignment) => outcome,
        stopped = heartbeats(shared, &assignment) => match stopped {
            Stopped::Cancelled => {
                tracing::info!(turn = %turn, "the turn was aborted or taken elsewhere; its CLI was stopped");
                return Ok(());
            }
            Stopped::Fatal(fatal) => return Err(fatal),
        },
    };
    let outcome = bounded(answer);
    let failed = match &outcome {
        RunnerOutcome::Failed { reason } => Some(reason.clone()),
        RunnerOutcome::Reply { .. } => None,
    };
    let settle = Settle {
        epoch: assignment.epoch,
        outcome,
    };
    match settle_retrying(shared, &turn, &settle).await? {
        Some(Settled::Accepted) => tracing::info!(
            turn = %turn,
            seconds = started.elapsed().as_secs(),
            failed = failed.as_deref().unwrap_or("no"),
            "finished a turn"
        ),
        Some(Settled::Superseded) => tracing::info!(
            turn = %turn,
            "the turn's run was superseded (its lease was lost, or the turn ended); its answer was dropped"
        ),
        None => {}
    }
    Ok(())
}

/// The CLI's answer to the job, as the outcome to settle.
async fn answer(shared: &Shared, assignment: &Assignment) -> RunnerOutcome {
    let failed = |reason: String| RunnerOutcome::Failed { reason };
    let request: RunnerRequest = match serde_json::from_value(assignment.request.clone()) {
        Ok(request) => request,
        Err(e) => {
            return failed(format!(
                "the runner could not read the turn's request ({e}); is the runner's version the deployment's?"
            ));
        }
    };
    let org = request.context.org.clone();
    let files = TurnFiles::new(
        shared.client.clone(),
        org.clone(),
        assignment.session_id.clone(),
        assignment.turn_id.clone(),
        assignment.epoch,
    );
    // The workspace's MCP servers come with the claim (their secrets are never stored with
    // the request); the CLI starts the stdio ones here, confined as it is.
    let request = request.into_request(
        Some(FileAccess {
            store: Arc::new(files),
            org,
            session_id: assignment.session_id.clone(),
        }),
        assignment.mcp_servers.clone(),
    );
    let runtime = match shared.agents.runtime(assignment.cli) {
        Ok(runtime) => runtime,
        Err(reason) => return failed(format!("on runner `{}`: {reason}", shared.name)),
    };
    match runtime.respond(&request, &mut Discard).await {
        Ok(reply) => outcome_of(reply),
        Err(e) => failed(e.to_string()),
    }
}

/// A CLI's reply as a runner settles it: the message, and each action back as
/// `{"type": name, ...arguments}`.
pub(crate) fn outcome_of(reply: Reply) -> RunnerOutcome {
    let message = Some(reply.text).filter(|m| !m.is_empty());
    let actions = reply.tool_calls.into_iter().map(action_of).collect();
    RunnerOutcome::Reply { message, actions }
}

/// A tool call back as the action the CLI wrote.
fn action_of(call: ToolCall) -> Value {
    let mut action = Map::new();
    action.insert("type".to_owned(), Value::String(call.name));
    if let Value::Object(fields) = call.arguments {
        for (key, value) in fields {
            if key != "type" {
                action.insert(key, value);
            }
        }
    }
    Value::Object(action)
}

/// `outcome`, or a failure saying it is too large to settle.
fn bounded(outcome: RunnerOutcome) -> RunnerOutcome {
    let size = serde_json::to_vec(&outcome).map_or(usize::MAX, |bytes| bytes.len());
    if size <= MAX_OUTCOME_BYTES {
        return outcome;
    }
    RunnerOutcome::Failed {
        reason: format!(
            "the CLI's answer is {} KiB, more than the {} KiB a reply may be",
            size / 1024,
            MAX_OUTCOME_BYTES / 1024
        ),
    }
}

/// Heartbeats the claim until the deployment says stop (or the key is refused): each
/// heartbeat is sent as soon as the last answered; a failed one is retried with backoff,
/// without stopping the CLI (a lost lease shows in the settle).
async fn heartbeats(shared: &Shared, assignment: &Assignment) -> Stopped {
    let beat = Heartbeat {
        epoch: assignment.epoch,
        wait_ms: Some(HEARTBEAT_WAIT_MS),
    };
    let mut backoff = Backoff::default();
    loop {
        match shared.client.heartbeat(&assignment.turn_id, &beat).await {
            Ok(answer) if answer.cancel => return Stopped::Cancelled,
            Ok(_) => backoff.reset(),
            // The job is gone or claimed again: this run is no longer wanted.
            Err(e) if matches!(e.status(), Some(404 | 409)) => return Stopped::Cancelled,
            Err(e) if e.is_refused_key() => return Stopped::Fatal(Fatal::refused_key(&e)),
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    turn = %assignment.turn_id,
                    error = %e,
                    retry_in_ms = delay.as_millis(),
                    "cannot heartbeat the turn; the CLI goes on. Check the network and the deployment's URL"
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Settles, retrying transient failures; `None` when it was given up.
async fn settle_retrying(shared: &Shared, turn: &str, settle: &Settle) -> Result<Option<Settled>, Fatal> {
    let mut backoff = Backoff::default();
    for attempt in 1..=SETTLE_ATTEMPTS {
        match shared.client.settle(turn, settle).await {
            Ok(settled) => return Ok(Some(settled)),
            Err(e) if e.is_refused_key() => return Err(Fatal::refused_key(&e)),
            Err(e) if e.is_transient() && attempt < SETTLE_ATTEMPTS => {
                let delay = backoff.next_delay();
                tracing::warn!(turn, error = %e, attempt, retry_in_ms = delay.as_millis(), "cannot settle the turn; trying again");
                tokio::time::sleep(delay).await;
            }
            Err(e) => {
                give_up(turn, &e);
                return Ok(None);
            }
        }
    }
    Ok(None)
}

fn give_up(turn: &str, e: &CallError) {
    tracing::error!(
        turn,
        error = %e,
        "gave up settling the turn; once its lease runs out it is offered to a runner again"
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_replys_actions_travel_as_the_cli_wrote_them() {
        // GIVEN a CLI reply whose actions became tool calls (the type taken out)
        let written = [
            json!({"type": "rename_chat", "title": "New"}),
            json!({"type": "ask_user", "question": "Which?", "options": ["a", "b"]}),
            json!({"type": "launch_rockets"}),
        ];
        let tool_calls = written
            .iter()
            .map(|action| {
                let mut arguments = action.clone();
                let name = arguments["type"].as_str().unwrap().to_owned();
                arguments.as_object_mut().unwrap().remove("type");
                ToolCall {
                    id: "act_1".into(),
                    name,
                    arguments,
                }
            })
            .collect();
        let reply = Reply {
            text: "Done".into(),
            tool_calls,
            usage: None,
            one_shot: true,
        };
        // WHEN it is settled
        let outcome = outcome_of(reply);
        // THEN the message and the actions are as written
        assert_eq!(
            outcome,
            RunnerOutcome::Reply {
                message: Some("Done".into()),
                actions: written.to_vec()
            }
        );
    }

    #[test]
    fn an_empty_message_is_none_and_odd_arguments_keep_the_type() {
        let reply = Reply {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: "act_1".into(),
                name: "rename_chat".into(),
                arguments: json!(["not", "an", "object"]),
            }],
            usage: None,
            one_shot: true,
        };
        assert_eq!(
            outcome_of(reply),
            RunnerOutcome::Reply {
                message: None,
                actions: vec![json!({"type": "rename_chat"})]
            }
        );
    }

    #[test]
    fn an_answer_too_large_to_settle_fails_with_why() {
        let outcome = bounded(RunnerOutcome::Reply {
            message: Some("x".repeat(MAX_OUTCOME_BYTES + 1)),
            actions: Vec::new(),
        });
        let RunnerOutcome::Failed { reason } = outcome else {
            panic!("{outcome:?}")
        };
        assert!(reason.contains("more than the 256 KiB"), "{reason}");
    }
}

#[cfg(test)]
mod mcp_tests {
    use std::{collections::BTreeMap, time::Duration};

    use spool_agents::{cli::CliAgents, runtime::TurnContext};
    use spool_chat::{
        mcp::{McpEndpoint, McpLaunch, McpSecret},
        runner::RunnerMcpServer,
        workspace::CliType,
    };

    use super::*;
    use crate::runner::client::Client;

    /// A `claude` that keeps a copy of the MCP configuration it was given and its arguments.
    const CLAUDE: &str = r#"#!/bin/sh
dir="$(dirname "$0")"
echo "$@" > "$dir/args"
while [ $# -gt 0 ]; do
  if [ "$1" = "--mcp-config" ]; then cp "$2" "$dir/mcp-seen.json"; fi
  shift
done
echo '{"message": "done"}' > "$SPOOL_OUTPUT_FILE"
"#;

    #[tokio::test]
    async fn the_claims_mcp_servers_reach_the_cli_and_nothing_of_them_stays_in_the_chat() {
        use std::os::unix::fs::PermissionsExt;
        let bin = tempfile::tempdir().unwrap();
        let claude = bin.path().join("claude");
        std::fs::write(&claude, CLAUDE).unwrap();
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
        let work = tempfile::tempdir().unwrap();
        let shared = Shared {
            client: Arc::new(Client::new("http://127.0.0.1:9".to_owned(), String::new().into())),
            agents: CliAgents::new(
                vec![bin.path().to_path_buf()],
                work.path().to_path_buf(),
                Duration::from_secs(20),
            ),
            name: "box-1".to_owned(),
            workspaces: Vec::new(),
            clis: std::sync::RwLock::default(),
        };
        let secret = "Bearer runner-mcp-s3cr3t";
        let endpoint = McpEndpoint {
            id: "mcp_1".into(),
            name: "linear".into(),
            launch: McpLaunch::Http {
                url: "https://mcp.example.com/mcp".into(),
                headers: BTreeMap::from([("Authorization".to_owned(), McpSecret::new(secret))]),
            },
            tools: BTreeMap::new(),
        };
        // The request as stored names the server; the claim carries its endpoint.
        let request = RunnerRequest::of(&spool_agents::runtime::Request {
            instruction: "Answer.".into(),
            agent_instruction: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            model: None,
            context: TurnContext {
                org: "acme".into(),
                session_id: "ses_1".into(),
                turn_id: "turn_1".into(),
                ..TurnContext::default()
            },
            workspace_context: Some("The workspace.".into()),
            stamps: Vec::new(),
            files: Vec::new(),
            file_access: None,
            mcp_servers: vec![endpoint.clone()],
            // What the engine found on it: one read-only tool, so the CLI is offered the server.
            mcp_listed: BTreeMap::from([("mcp_1".to_owned(), BTreeMap::from([("list_issues".to_owned(), true)]))]),
        });
        assert_eq!(
            request.mcp_servers,
            [RunnerMcpServer {
                id: "mcp_1".into(),
                name: "linear".into()
            }]
        );
        let stored = serde_json::to_value(&request).unwrap();
        assert!(!stored.to_string().contains("s3cr3t"));
        let assignment = Assignment {
            turn_id: "turn_1".into(),
            session_id: "ses_1".into(),
            workspace_id: Some("ws_1".into()),
            cli: CliType::Claude,
            epoch: 1,
            lease_ms: 60_000,
            request: stored,
            mcp_servers: vec![endpoint],
        };
        let outcome = answer(&shared, &assignment).await;
        assert_eq!(
            outcome,
            RunnerOutcome::Reply {
                message: Some("done".into()),
                actions: Vec::new()
            }
        );
        // The CLI got the server, its secret with it, in its own configuration.
        let seen: Value =
            serde_json::from_str(&std::fs::read_to_string(bin.path().join("mcp-seen.json")).unwrap()).unwrap();
        assert_eq!(seen["mcpServers"]["linear"]["url"], "https://mcp.example.com/mcp");
        assert_eq!(seen["mcpServers"]["linear"]["headers"]["Authorization"], secret);
        let args = std::fs::read_to_string(bin.path().join("args")).unwrap();
        assert!(
            args.contains("--strict-mcp-config")
                && args.contains("--allowedTools mcp__linear__list_issues")
                && !args.contains("s3cr3t"),
            "{args}"
        );
        // Nothing of it stays where the chat's CLI works, nor anywhere under the work root.
        let mut left = Vec::new();
        let mut dirs = vec![work.path().to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if std::fs::read_to_string(&path).is_ok_and(|t| t.contains("s3cr3t")) {
                    left.push(path);
                }
            }
        }
        assert!(left.is_empty(), "the secret stayed in {left:?}");
    }
}
