//! The engine's side of runners, on both backends: a turn of a workspace whose CLI agents run
//! on runners is offered as a job and waits; a settled reply is recorded once and its actions
//! run; a failure, an abort and a wait no runner ends each end the turn once. The runner's
//! side here is the store's own calls (the runner process and its routes have their tests).

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::{
    runner::{RunnerJob, RunnerOutcome},
    turns::TurnJob,
};
use spool_tests::Harness;

use crate::support::{Stack, abort, all_events, one, org_of, send, stack_configured, test_settings, until};

on_both_backends!(runner_turns:
    a_settled_reply_is_recorded_once_and_its_actions_run,
    a_failed_run_becomes_a_system_message,
    an_abort_ends_a_waiting_turn_and_takes_its_job_back,
    a_turn_no_runner_takes_fails_saying_how_to_start_one,
);

/// A stack whose workspaces' CLI agents run on runners, turns waiting `wait` for one; a chat in
/// a workspace, answered by `claude`.
async fn runners_chat<H: Harness>(harness: &H, wait: Duration) -> (Stack, String) {
    let settings = spool_agents::Settings {
        cli_host: spool_chat::settings::CliHost::Runners,
        runner_wait: wait,
        ..test_settings()
    };
    let stack = stack_configured(harness, spool_agents::Runtimes::scripted_only(), settings).await;
    let ws = stack
        .api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Repo" })))
        .await;
    let chat = stack
        .api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws["id"] })))
        .await;
    let chat = chat["id"].as_str().unwrap().to_owned();
    stack
        .api
        .ok(
            Method::PATCH,
            &format!("/v1/sessions/{chat}"),
            Some(json!({ "cli_type": "claude" })),
        )
        .await;
    (stack, chat)
}

/// The turn's job, once the engine offered it.
async fn offered(stack: &Stack, turn: &str) -> RunnerJob {
    let org = org_of(&stack.api);
    spool_tests::eventually(&format!("the runner job of {turn}"), || async {
        stack.metadata.runner_job(&org, turn).await.unwrap()
    })
    .await
}

/// Claims the job as a runner would, settles it with `outcome` and queues the turn again, as
/// the settle route does.
async fn settle(stack: &Stack, chat: &str, job: &RunnerJob, outcome: RunnerOutcome) {
    let org = org_of(&stack.api);
    let far = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock) + 60_000;
    assert!(
        stack
            .metadata
            .claim_job(&org, &job.turn_id, job.epoch, "box", far)
            .await
            .unwrap()
    );
    // A second claim with the same epoch loses.
    assert!(
        !stack
            .metadata
            .claim_job(&org, &job.turn_id, job.epoch, "other", far)
            .await
            .unwrap()
    );
    assert!(
        stack
            .metadata
            .settle_job(&org, &job.turn_id, job.epoch + 1, &outcome)
            .await
            .unwrap()
    );
    let tail = all_events(&stack.api, chat).await.last().unwrap()["seq"]
        .as_u64()
        .unwrap();
    stack
        .turns
        .enqueue(&TurnJob::new(&org, chat, &job.turn_id, tail))
        .await
        .unwrap();
}

fn system_texts(events: &[Value], turn: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["turn_id"] == turn && e["type"] == "system")
        .map(|e| e["payload"]["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn turn_detail(stack: &Stack, chat: &str, turn: &str) -> Option<String> {
    let turns = stack
        .api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns"), None)
        .await;
    turns["turns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["turn_id"] == turn)
        .and_then(|t| t["detail"].as_str().map(str::to_owned))
}

pub(crate) async fn a_settled_reply_is_recorded_once_and_its_actions_run<H: Harness>(harness: &H) {
    // GIVEN a chat whose CLI runs on runners, and a message
    let (stack, chat) = runners_chat(harness, Duration::from_secs(600)).await;
    let turn = send(&stack.api, &chat, "rename this chat, please").await;
    // THEN the turn is offered and waits, saying so
    let job = offered(&stack, &turn).await;
    assert_eq!(job.session_id, chat);
    assert_eq!(job.epoch, 0);
    spool_tests::eventually("the turn to say it waits for a runner", || async {
        (turn_detail(&stack, &chat, &turn).await.as_deref() == Some("waiting for a runner")).then_some(())
    })
    .await;
    let events = all_events(&stack.api, &chat).await;
    assert_eq!(one(&events, &turn, "agent_start")["payload"]["runtime"], "cli:claude");
    assert!(!events.iter().any(|e| e["turn_id"] == turn && e["type"] == "agent_end"));
    // WHEN a runner settles it with a reply and an action
    let outcome = RunnerOutcome::Reply {
        message: Some("Renamed it.".to_owned()),
        actions: vec![json!({ "type": "rename_chat", "title": "Named on a runner" })],
    };
    settle(&stack, &chat, &job, outcome).await;
    // THEN the reply lands once, the action runs, the turn completes and its job is gone
    let events = until(&stack.api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    assert_eq!(one(&events, &turn, "message_end")["payload"]["text"], "Renamed it.");
    let session = stack.api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["title"], "Named on a runner");
    let org = org_of(&stack.api);
    assert!(stack.metadata.runner_job(&org, &turn).await.unwrap().is_none());
    // AND the chat takes the next message
    let next = send(&stack.api, &chat, "again").await;
    offered(&stack, &next).await;
}

pub(crate) async fn a_failed_run_becomes_a_system_message<H: Harness>(harness: &H) {
    let (stack, chat) = runners_chat(harness, Duration::from_secs(600)).await;
    let turn = send(&stack.api, &chat, "hi").await;
    let job = offered(&stack, &turn).await;
    let reason = "`claude` exited with 1: Not logged in".to_owned();
    settle(&stack, &chat, &job, RunnerOutcome::Failed { reason }).await;
    let events = until(&stack.api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "error");
    let system = system_texts(&events, &turn);
    assert!(system.iter().any(|m| m.contains("Not logged in")), "{system:?}");
}

pub(crate) async fn an_abort_ends_a_waiting_turn_and_takes_its_job_back<H: Harness>(harness: &H) {
    let (stack, chat) = runners_chat(harness, Duration::from_secs(600)).await;
    let turn = send(&stack.api, &chat, "hi").await;
    offered(&stack, &turn).await;
    abort(&stack.api, &chat).await;
    let events = until(&stack.api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "aborted");
    let org = org_of(&stack.api);
    spool_tests::eventually("the aborted turn's job to go", || async {
        stack
            .metadata
            .runner_job(&org, &turn)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

pub(crate) async fn a_turn_no_runner_takes_fails_saying_how_to_start_one<H: Harness>(harness: &H) {
    // GIVEN turns that wait one second for a runner, and none online
    let (stack, chat) = runners_chat(harness, Duration::from_secs(1)).await;
    let turn = send(&stack.api, &chat, "hi").await;
    offered(&stack, &turn).await;
    // THEN the turn fails once the wait is up, telling the person how to start a runner
    let events = until(&stack.api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "error");
    let system = system_texts(&events, &turn);
    assert!(
        system
            .iter()
            .any(|m| m.contains("spool runner --url") && m.contains("--capability runner")),
        "{system:?}"
    );
    let org = org_of(&stack.api);
    assert!(stack.metadata.runner_job(&org, &turn).await.unwrap().is_none());
}
