//! A chat's model reaches CLI agents: fake `claude`, `gemini`, `codex` and `opencode` that keep
//! their command line, one argument a line, run in a chat whose model `/model` set (or whose
//! agent names one); the model arrives in each CLI's `--model`, and a model opencode cannot
//! take ends the turn with a system event saying what to do.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::{
    cli_agents::{chat, setup, system_messages},
    support::{one, send, until},
};

/// A CLI that keeps its arguments, one a line, in `argv-{its name}` beside itself, and answers.
const ARGV: &str = r#"printf '%s\n' "$@" > "$(dirname "$0")/argv-$(basename "$0")"
echo '{"message": "done", "actions": []}' > "$SPOOL_OUTPUT_FILE""#;

/// `/model` reaches each CLI as its `--model`; an agent's model does when the chat has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_chats_model_reaches_each_cli_as_its_model_flag() {
    let clis = [
        ("claude", "claude-sonnet-4-5"),
        ("gemini", "gemini-2.5-pro"),
        ("codex", "gpt-5-codex"),
        ("opencode", "anthropic/claude-sonnet-4-5"),
    ];
    let s = setup(&clis.map(|(name, _)| (name, ARGV)), Duration::from_secs(20)).await;
    let api = &s.stack.api;
    let argv = |name: &str| -> Vec<String> {
        std::fs::read_to_string(s.bin.path().join(format!("argv-{name}")))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let model_of = |argv: &[String]| {
        argv.iter()
            .position(|a| a == "--model")
            .and_then(|i| argv.get(i + 1).cloned())
    };
    for (name, model) in clis {
        let chat = chat(&s, json!({ "name": name, "runtime": "cli", "cli_type": name })).await;
        // No model: no flag.
        let turn = send(api, &chat, "hi").await;
        let events = until(api, &chat, &turn, "agent_end").await;
        assert_eq!(
            one(&events, &turn, "agent_end")["payload"]["reason"],
            "complete",
            "{name}"
        );
        assert_eq!(model_of(&argv(name)), None, "{name}: {:?}", argv(name));
        // `/model`: the flag, with the name as one argument.
        api.ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/slash-commands/invoke"),
            Some(json!({ "input": format!("/model {model}") })),
        )
        .await;
        let turn = send(api, &chat, "hi").await;
        let events = until(api, &chat, &turn, "agent_end").await;
        assert_eq!(
            one(&events, &turn, "agent_end")["payload"]["reason"],
            "complete",
            "{name}"
        );
        assert_eq!(
            model_of(&argv(name)).as_deref(),
            Some(model),
            "{name}: {:?}",
            argv(name)
        );
    }
    // An agent's own model, when the chat sets none.
    let chat_of_agent = chat(
        &s,
        json!({ "name": "Modelled", "runtime": "cli", "cli_type": "gemini", "model": "gemini-2.5-flash" }),
    )
    .await;
    let turn = send(api, &chat_of_agent, "hi").await;
    until(api, &chat_of_agent, &turn, "agent_end").await;
    assert_eq!(model_of(&argv("gemini")).as_deref(), Some("gemini-2.5-flash"));
    // opencode needs the provider in the name: the turn says so, and the CLI never runs.
    let chat = chat(&s, json!({ "name": "Open", "runtime": "cli", "cli_type": "opencode" })).await;
    std::fs::remove_file(s.bin.path().join("argv-opencode")).unwrap();
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/slash-commands/invoke"),
        Some(json!({ "input": "/model gpt-5" })),
    )
    .await;
    let turn = send(api, &chat, "hi").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let said = system_messages(&events).join("\n");
    assert!(said.contains("provider") && said.contains("/model"), "{said}");
    assert!(!s.bin.path().join("argv-opencode").exists(), "opencode did not run");
}
