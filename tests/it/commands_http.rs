//! Slash commands over real HTTP on both backends: stored commands and their precedence
//! (workspace files over stored, workspace over global over built-in), arguments rendered into
//! the prompt that reaches the agent, each built-in action, failures recorded as
//! `slash_command_failed`, retries that run nothing twice, and another organization that sees
//! and touches none of it.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_tests::Harness;

use crate::support::{Api, Stack, all_events, chat_with, one, stack, until};

/// `PUT` of a command's markdown file.
async fn put(api: &Api, path: &str, markdown: &str) -> (StatusCode, Value) {
    let response = api
        .http
        .put(format!("{}{path}", api.base))
        .bearer_auth(api.token.as_deref().unwrap())
        .header("content-type", "text/markdown")
        .body(markdown.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn invoke(api: &Api, chat: &str, body: Value) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        &format!("/v1/sessions/{chat}/slash-commands/invoke"),
        Some(body),
    )
    .await
}

fn of_type<'a>(events: &'a [Value], kind_type: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind_type).collect()
}

/// A workspace of the stack's organization with a working directory under the tests' root.
async fn workspace_with_dir(stack: &Stack) -> (String, String, tempfile::TempDir) {
    let dir = spool_tests::workspace_dir(&crate::support::org_of(&stack.api));
    let (ws, chat) = chat_with(
        &stack.api,
        json!({ "word_delay_ms": 0, "default": [{ "say": "Got: {input}" }] }),
    )
    .await;
    stack
        .api
        .ok(
            Method::PATCH,
            &format!("/v1/workspaces/{ws}"),
            Some(json!({ "working_dir": dir.path().to_str().unwrap() })),
        )
        .await;
    (ws, chat, dir)
}

/// Workspace files win over stored workspace commands, which win over global ones, which win
/// over built-ins; a broken file is listed with its error; bad files are refused with 400.
pub(crate) async fn commands_override_by_source<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat, dir) = workspace_with_dir(&stack).await;
    // GIVEN a global /help and /review, a workspace /review and /deploy, and files
    assert_eq!(put(api, "/v1/slash-commands/help", "Global help").await.0, 200);
    assert_eq!(put(api, "/v1/slash-commands/review", "Global review").await.0, 200);
    let ws_path = |name: &str| format!("/v1/workspaces/{ws}/slash-commands/{name}");
    assert_eq!(put(api, &ws_path("review"), "Workspace review of $1").await.0, 200);
    assert_eq!(put(api, &ws_path("deploy"), "Stored deploy").await.0, 200);
    let commands = dir.path().join(".claude/commands/git");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(
        commands.join("commit.md"),
        "---\ndescription: Commit\n---\nCommit: $ARGUMENTS",
    )
    .unwrap();
    std::fs::write(dir.path().join(".claude/commands/deploy.md"), "Deploy from the file").unwrap();
    std::fs::write(
        dir.path().join(".claude/commands/broken.md"),
        "---\naction: explode\n---\n",
    )
    .unwrap();
    // THEN the list says where each comes from and what it hides
    let listed = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/slash-commands"), None)
        .await;
    let entry = |name: &str| {
        listed["commands"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {listed}"))
    };
    assert_eq!(
        (entry("new")["source"].clone(), entry("new")["kind"].clone()),
        (json!("builtin"), json!("action"))
    );
    assert_eq!(
        (entry("help")["source"].clone(), entry("help")["overrides"].clone()),
        (json!("global"), json!("builtin"))
    );
    assert_eq!(
        (entry("review")["source"].clone(), entry("review")["overrides"].clone()),
        (json!("workspace"), json!("global"))
    );
    assert_eq!(entry("deploy")["file"], ".claude/commands/deploy.md");
    assert_eq!(entry("git:commit")["description"], "Commit");
    assert!(
        entry("broken")["error"].as_str().unwrap().contains("new_session"),
        "{listed}"
    );
    // AND a chat resolves and previews the winner
    let preview = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/slash-commands/preview"),
            Some(json!({ "input": "/deploy now" })),
        )
        .await;
    assert_eq!(
        preview["prompt"],
        "<slash-command name=\"deploy\" invokedAs=\"/deploy now\">\nDeploy from the file\n\nARGUMENTS: now\n</slash-command>"
    );
    let preview = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/slash-commands/preview"),
            Some(json!({ "input": "/review \"src/a b.rs\" extra" })),
        )
        .await;
    assert!(
        preview["prompt"]
            .as_str()
            .unwrap()
            .contains("\nWorkspace review of src/a b.rs\n"),
        "{preview}"
    );
    let resolved = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/slash-commands/resolve"),
            Some(json!({ "input": "/git:commit  fix: \"the bug\"" })),
        )
        .await;
    assert_eq!(resolved["words"], json!(["fix:", "the bug"]));
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/slash-commands/resolve"),
            Some(json!({ "input": "/reveiw" })),
        )
        .await;
    assert_eq!(status, 404);
    assert!(body["error"]["message"].as_str().unwrap().contains("/review"), "{body}");
    // AND bad files are refused, saying why, and store nothing
    for (markdown, says) in [
        ("---\ndescription: x\n", "never closed"),
        ("---\naction: launch\n---\n", "new_session"),
        ("---\nnot a pair\n---\nbody", "line 2"),
    ] {
        let (status, body) = put(api, &ws_path("bad"), markdown).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(says), "{body}");
    }
    // A template that would render a huge prompt is refused when invoked, saying why
    assert_eq!(put(api, &ws_path("big"), &"$1".repeat(30_000)).await.0, 200);
    let (status, body) = invoke(api, &chat, json!({ "input": format!("/big {}", "x".repeat(19_000)) })).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over 100000 characters"),
        "{body}"
    );
    let (status, _) = put(api, &ws_path("bad:name:too:deep"), "x").await;
    assert_eq!(status, 400);
    let (status, _) = api.call(Method::PUT, &ws_path("json"), Some(json!({ "x": 1 }))).await;
    assert_eq!(status, 415);
    assert_eq!(api.call(Method::GET, &ws_path("bad"), None).await.0, 404);
}

/// A prompt command's rendered template is the turn's input, in the stream after its
/// `slash_command_invoked`; the agent answers it; a retry runs nothing twice.
pub(crate) async fn a_prompt_command_starts_a_turn_once<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = chat_with(
        api,
        json!({ "word_delay_ms": 0, "default": [{ "say": "Got: {input}" }] }),
    )
    .await;
    put(
        api,
        &format!("/v1/workspaces/{ws}/slash-commands/fix"),
        "Fix $1, then $2.",
    )
    .await;
    let body = json!({ "input": "/fix \"the bug\"", "client_message_id": "cmd-1" });
    let (status, first) = invoke(api, &chat, body.clone()).await;
    assert_eq!(status, 202, "{first}");
    let turn = first["turn_id"].as_str().unwrap().to_owned();
    let events = until(api, &chat, &turn, "agent_end").await;
    let invoked = one(&events, &turn, "slash_command_invoked");
    assert_eq!(invoked["seq"], first["seq"]);
    assert_eq!(invoked["payload"]["invoked_as"], "/fix \"the bug\"");
    assert_eq!(
        (invoked["payload"]["kind"].clone(), invoked["payload"]["source"].clone()),
        (json!("prompt"), json!("workspace"))
    );
    let message = one(&events, &turn, "user_message_submitted");
    let wrapped =
        "<slash-command name=\"fix\" invokedAs=\"/fix &quot;the bug&quot;\">\nFix the bug, then .\n</slash-command>";
    assert_eq!(message["payload"]["content"], wrapped);
    assert_eq!(message["seq"].as_u64(), first["seq"].as_u64().map(|s| s + 1));
    let end = one(&events, &turn, "message_end");
    assert!(
        end["payload"]["text"].as_str().unwrap().contains("Fix the bug, then ."),
        "the agent got the prompt: {end}"
    );
    // WHEN the client retries
    let (status, again) = invoke(api, &chat, body).await;
    assert_eq!(status, 202);
    assert_eq!(
        (
            again["seq"].clone(),
            again["turn_id"].clone(),
            again["duplicate"].clone()
        ),
        (first["seq"].clone(), first["turn_id"].clone(), json!(true))
    );
    assert_eq!(
        of_type(&all_events(api, &chat).await, "slash_command_invoked").len(),
        1,
        "nothing twice"
    );
}

/// Each built-in action does what it says, and a failing one is recorded and refused.
pub(crate) async fn built_in_actions_act<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    // Twenty seconds of answer, so that a /stop sent after its first words reaches it however
    // loaded the machine is (it ends at once when the stop lands).
    let words = vec!["word"; 100].join(" ");
    let slow = json!({ "word_delay_ms": 200, "default": [{ "say": words }] });
    let (_, chat) = chat_with(api, slow).await;
    let session = |id: &str| {
        let path = format!("/v1/sessions/{id}");
        async move { api.ok(Method::GET, &path, None).await }
    };
    // /model, /mode, /rename change the chat
    let (status, done) = invoke(api, &chat, json!({ "input": "/model tiny-1" })).await;
    assert_eq!(
        (status.as_u16(), done["session"]["model"].clone()),
        (202, json!("tiny-1")),
        "{done}"
    );
    let (_, done) = invoke(api, &chat, json!({ "input": "/mode plan" })).await;
    assert_eq!(done["session"]["mode"], "plan");
    let (_, done) = invoke(api, &chat, json!({ "input": "/rename  Q3 plan " })).await;
    assert_eq!(done["session"]["title"], "Q3 plan");
    let now = session(&chat).await;
    assert_eq!(
        (now["model"].clone(), now["mode"].clone(), now["title"].clone()),
        (json!("tiny-1"), json!("plan"), json!("Q3 plan"))
    );
    let (_, done) = invoke(api, &chat, json!({ "input": "/model" })).await;
    assert_eq!(done["session"]["model"], Value::Null, "back to the agent's");
    // /help lists the commands
    let (_, help) = invoke(api, &chat, json!({ "input": "/help" })).await;
    assert!(
        help["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "summarize"),
        "{help}"
    );
    // /new makes one chat with the same agent, even when retried
    let body = json!({ "input": "/new", "client_message_id": "new-1" });
    let (status, made) = invoke(api, &chat, body.clone()).await;
    assert_eq!(status, 202, "{made}");
    let (_, again) = invoke(api, &chat, body).await;
    assert_eq!(again["new_session"]["id"], made["new_session"]["id"]);
    assert_eq!(made["new_session"]["agent_id"], now["agent_id"]);
    assert_eq!(
        session(made["new_session"]["id"].as_str().unwrap()).await["workspace_id"],
        now["workspace_id"]
    );
    // /stop with nothing running fails, recorded; then it aborts a running answer
    let (status, body) = invoke(api, &chat, json!({ "input": "/stop" })).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing is running")
    );
    let turn = crate::support::send(api, &chat, "go").await;
    until(api, &chat, &turn, "message_update").await;
    let stop = json!({ "input": "/stop", "client_message_id": "stop-1" });
    let (status, stopped) = invoke(api, &chat, stop.clone()).await;
    assert_eq!(
        (status.as_u16(), stopped["turn_id"].clone()),
        (202, json!(turn)),
        "{stopped}"
    );
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "aborted");
    // A retry of that /stop, after the turn ended, answers as the first did and appends nothing
    let (status, again) = invoke(api, &chat, stop).await;
    assert_eq!(
        (status.as_u16(), again["duplicate"].clone(), again["seq"].clone()),
        (202, json!(true), stopped["seq"].clone()),
        "{again}"
    );
    let aborts = of_type(&all_events(api, &chat).await, "control_submitted").len();
    assert_eq!(aborts, 1, "one abort");
    // A title a chat cannot have is refused before the command is recorded
    let (status, body) = invoke(api, &chat, json!({ "input": format!("/rename {}", "t".repeat(300)) })).await;
    assert_eq!(status, 400, "{body}");
    // An unknown command and bad arguments are recorded as failures, with what to do
    let (status, body) = invoke(api, &chat, json!({ "input": "/summarise" })).await;
    assert_eq!(status, 404);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("/summarize"),
        "{body}"
    );
    let (status, _) = invoke(api, &chat, json!({ "input": "/mode" })).await;
    assert_eq!(status, 400);
    let events = all_events(api, &chat).await;
    let failed: Vec<&str> = of_type(&events, "slash_command_failed")
        .iter()
        .map(|e| e["payload"]["invoked_as"].as_str().unwrap())
        .collect();
    assert!(
        failed.len() == 4 && failed[0] == "/stop" && failed[1].starts_with("/rename "),
        "{failed:?}"
    );
    assert_eq!(&failed[2..], ["/summarise", "/mode"]);
    let renames = of_type(&events, "slash_command_invoked")
        .iter()
        .filter(|e| e["payload"]["name"] == "rename")
        .count();
    assert_eq!(renames, 1, "only the valid rename was recorded");
    // /clear is a marker in the chat; the agent starts afresh after it
    let (status, cleared) = invoke(api, &chat, json!({ "input": "/clear" })).await;
    assert_eq!(
        (status.as_u16(), cleared["action"].clone()),
        (202, json!("clear_context"))
    );
}

/// Another organization can neither see nor change a workspace's or the organization's
/// commands, nor invoke in its chats.
pub(crate) async fn commands_are_isolated<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let (api, other) = (&stack.api, &stack.other);
    let (ws, chat) = chat_with(api, json!({ "default": [{ "say": "hi" }] })).await;
    put(api, "/v1/slash-commands/secret", "Global secret").await;
    put(api, &format!("/v1/workspaces/{ws}/slash-commands/mine"), "Mine").await;
    let theirs = other.ok(Method::GET, "/v1/slash-commands", None).await;
    assert_eq!(theirs["commands"], json!([]));
    assert_eq!(other.call(Method::GET, "/v1/slash-commands/secret", None).await.0, 404);
    assert_eq!(
        other.call(Method::DELETE, "/v1/slash-commands/secret", None).await.0,
        404
    );
    for method in [Method::GET, Method::DELETE] {
        let (status, _) = other
            .call(method, &format!("/v1/workspaces/{ws}/slash-commands/mine"), None)
            .await;
        assert_eq!(status, 404);
    }
    assert_eq!(
        put(other, &format!("/v1/workspaces/{ws}/slash-commands/mine"), "Theirs")
            .await
            .0,
        404
    );
    assert_eq!(
        other
            .call(Method::GET, &format!("/v1/workspaces/{ws}/slash-commands"), None)
            .await
            .0,
        404
    );
    let (status, _) = invoke(other, &chat, json!({ "input": "/mine" })).await;
    assert_eq!(status, 404);
    // AND the owner's are intact
    let mine = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/slash-commands/preview"),
            Some(json!({ "input": "/mine" })),
        )
        .await;
    assert!(mine["prompt"].as_str().unwrap().contains("\nMine\n"));
    let global = api.ok(Method::GET, "/v1/slash-commands", None).await;
    assert_eq!(global["commands"][0]["name"], "secret");
}

on_both_backends!(commands_http:
    commands_override_by_source,
    a_prompt_command_starts_a_turn_once,
    built_in_actions_act,
    commands_are_isolated,
);
