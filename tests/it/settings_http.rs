//! A workspace's settings on both backends: set and checked through the API (a bad one is a 400
//! that changes nothing), honoured by the worker (notifications to the log and the feed, turn
//! records kept as long as the workspace says) and by the daily sweep of chats' folders.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_agents::sweep::FolderSweep;
use spool_log::clock::Clock;
use spool_tests::Harness;

use crate::support::{Api, abort, chat_with, one, org_of, send, setup, stack, until};

const SCRIPT: &str = r#"{"word_delay_ms": 0, "rules": [
  {"match": ["color"], "rounds": [
    {"say": "One question.", "tools": [{"name": "ask_user", "arguments": {"question": "Which color?"}}]},
    {"say": "You chose {result}."}]},
  {"match": ["task"], "rounds": [
    {"say": "Noted.", "tools": [{"name": "create_task", "arguments": {"summary": "Ship the release"}}]},
    {"say": "Done."}]},
  {"match": ["settings"], "rounds": [
    {"say": "Changing.", "tools": [{"name": "update_workspace", "arguments": {"title": null, "working_directory_path": null, "cleanup": {"chat_folder_days": 30, "turn_record_days": null}, "notifications": {"on_task": false}}}]},
    {"say": "Changed."}]},
  {"match": ["fail"], "rounds": [{"fail": "the model is down"}]}],
 "default": [{"say": "Hello."}]}"#;

async fn feed(api: &Api, ws: &str) -> Vec<Value> {
    api.get(&format!("/v1/stream/workspaces/{ws}/feed?offset=-1"))
        .await
        .json()
        .await
        .unwrap()
}

fn notifications(feed: &[Value]) -> Vec<(String, String)> {
    feed.iter()
        .filter(|e| e["type"] == "notification.sent")
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["via"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Settings are made, changed and read back; every bad one is refused, changing nothing.
pub(crate) async fn workspace_settings_over_http<H: Harness>(harness: &H) {
    let (api, other, _) = setup(harness).await;
    // WHEN a workspace is made with settings
    let ws = api
        .ok(
            Method::POST,
            "/v1/workspaces",
            Some(json!({
                "title": "Research",
                "description": "Papers",
                "cleanup": { "turn_record_days": 3 },
                "notifications": { "email": "ops@example.com", "on_task": false }
            })),
        )
        .await;
    let id = ws["id"].as_str().unwrap().to_owned();
    // THEN they read back, with the defaults for the rest and where notifications go here
    assert_eq!(ws["title"], "Research");
    assert_eq!(ws["working_directory_mode"], "temp");
    assert!(ws["working_directory_path"].is_null());
    assert_eq!(ws["cleanup"], json!({ "turn_record_days": 3, "chat_folder_days": 7 }));
    let n = &ws["notifications"];
    assert_eq!(
        (&n["email"], &n["on_question"], &n["on_failure"], &n["on_task"]),
        (&json!("ops@example.com"), &json!(true), &json!(true), &json!(false))
    );
    assert_eq!(n["status"]["state"], "log_only");
    assert!(
        n["status"]["message"].as_str().unwrap().contains("SPOOL_NOTIFY_FROM"),
        "{n}"
    );

    // GIVEN the folders this organization may use, as settings show them before a choice:
    // its own root (`{org}` filled in) and the shared one, never another organization's
    let org = crate::support::org_of(&api);
    let allowed = |list: &Value| -> Vec<String> {
        list["workspace_roots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect()
    };
    let roots = allowed(&api.ok(Method::GET, "/v1/clis", None).await);
    let own = spool_tests::workspace_root().join("orgs").join(&org);
    assert!(roots.contains(&own.to_string_lossy().into_owned()), "{roots:?}");
    assert!(roots.iter().all(|r| !r.contains("{org}")), "{roots:?}");
    let others = allowed(&other.ok(Method::GET, "/v1/clis", None).await);
    assert!(!others.contains(&own.to_string_lossy().into_owned()), "{others:?}");
    // WHEN the working directory is made static (under one of them), then temp again
    let project = spool_tests::workspace_dir(&org);
    assert!(roots.iter().any(|r| project.path().starts_with(r)), "{roots:?}");
    let path = format!("/v1/workspaces/{id}");
    let ws = api
        .ok(
            Method::PATCH,
            &path,
            Some(json!({ "working_directory_mode": "static", "working_directory_path": project.path() })),
        )
        .await;
    let resolved = project.path().canonicalize().unwrap();
    assert_eq!(ws["working_directory_mode"], "static");
    assert_eq!(ws["working_directory_path"].as_str(), resolved.to_str());
    assert_eq!(ws["working_dir"], ws["working_directory_path"], "the older name agrees");
    let ws = api
        .ok(Method::PATCH, &path, Some(json!({ "working_directory_mode": "temp" })))
        .await;
    assert_eq!(ws["working_directory_mode"], "temp");
    assert!(ws["working_directory_path"].is_null());

    // WHEN settings are bad, each is a 400 and nothing changes
    let before = api.ok(Method::GET, &path, None).await;
    for bad in [
        json!({ "cleanup": { "turn_record_days": 0 } }),
        json!({ "cleanup": { "chat_folder_days": 100000 } }),
        json!({ "cleanup": { "chat_folder_days": "soon" } }),
        json!({ "cleanup": { "forever": true } }),
        json!({ "notifications": { "email": "nobody" } }),
        json!({ "notifications": { "email": "a b@example.com" } }),
        json!({ "notifications": { "on_task": "yes" } }),
        json!({ "working_directory_mode": "static" }),
        json!({ "working_directory_mode": "shared" }),
        json!({ "working_directory_mode": "temp", "working_directory_path": project.path() }),
        json!({ "working_directory_mode": "static", "working_directory_path": "/etc" }),
        json!({ "title": "Renamed", "notifications": { "email": "@example.com" } }),
    ] {
        let (status, error) = api.call(Method::PATCH, &path, Some(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {error}");
        assert!(error["error"]["message"].is_string(), "{error}");
    }
    let after = api.ok(Method::GET, &path, None).await;
    assert_eq!(after, before, "refused changes leave the workspace as it was");

    // WHEN the address is cleared, notifications are off
    let ws = api
        .ok(
            Method::PATCH,
            &path,
            Some(json!({ "notifications": { "email": null }, "cleanup": { "chat_folder_days": 30 } })),
        )
        .await;
    assert!(ws["notifications"]["email"].is_null());
    assert_eq!(ws["notifications"]["status"]["state"], "off");
    assert_eq!(ws["cleanup"]["chat_folder_days"], 30);
    assert_eq!(ws["cleanup"]["turn_record_days"], 3, "what was not named is kept");

    // AND another organization can neither read nor change them
    assert_eq!(other.call(Method::GET, &path, None).await.0, 404);
    let (status, _) = other
        .call(
            Method::PATCH,
            &path,
            Some(json!({ "cleanup": { "turn_record_days": 9 } })),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(api.ok(Method::GET, &path, None).await["cleanup"]["turn_record_days"], 3);
}

/// The worker tells the workspace's address (here: the log and the feed) when an agent asks, a
/// turn fails or an agent makes a task, as the settings say; turn records are kept as long as
/// the workspace says; an agent changes the settings through `update_workspace`.
pub(crate) async fn the_worker_honours_the_settings<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = chat_with(api, serde_json::from_str(SCRIPT).unwrap()).await;
    // Nothing is sent without an address.
    let turn = send(api, &chat, "fail now").await;
    until(api, &chat, &turn, "agent_end").await;
    assert_eq!(notifications(&feed(api, &ws).await), []);
    api.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{ws}"),
        Some(json!({ "notifications": { "email": "ops@example.com" }, "cleanup": { "turn_record_days": 2 } })),
    )
    .await;

    // WHEN an agent asks, a turn fails and an agent makes a task
    let turn = send(api, &chat, "pick a color").await;
    until(api, &chat, &turn, "ask_question").await;
    abort(api, &chat).await;
    until(api, &chat, &turn, "agent_end").await;
    let failed = send(api, &chat, "fail again").await;
    until(api, &chat, &failed, "agent_end").await;
    let turn = send(api, &chat, "make a task").await;
    until(api, &chat, &turn, "agent_end").await;
    // THEN each is told once, through the log, and recorded on the feed with its subject
    let events = feed(api, &ws).await;
    let sent = notifications(&events);
    let kinds: Vec<&str> = sent.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["question", "failure", "task"], "{events:?}");
    assert!(sent.iter().all(|(_, via)| via == "log"));
    let question = events
        .iter()
        .find(|e| e["type"] == "notification.sent" && e["kind"] == "question")
        .unwrap();
    assert_eq!(question["to"], "ops@example.com");
    assert_eq!(question["chat_id"], chat.as_str());
    assert!(
        question["subject"].as_str().unwrap().contains("needs your answer"),
        "{question}"
    );
    // AND a finished turn's record is kept two days, as the workspace says
    let record = api
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns/{failed}"), None)
        .await;
    let at = |field: &str| {
        time::OffsetDateTime::parse(
            record[field].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    assert_eq!(at("expires_at") - at("updated_at"), time::Duration::days(2), "{record}");

    // WHEN the built-in agent turns task notifications off (its action waits for approval)
    let turn = send(api, &chat, "change the settings").await;
    let asked = until(api, &chat, &turn, "tool_approval_required").await;
    let call = asked.iter().find(|e| e["type"] == "tool_approval_required").unwrap()["payload"]["tool_call_id"].clone();
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/approval"),
        Some(json!({ "tool_call_id": call, "decision": "approve" })),
    )
    .await;
    until(api, &chat, &turn, "agent_end").await;
    let settings = api.ok(Method::GET, &format!("/v1/workspaces/{ws}"), None).await;
    assert_eq!(settings["cleanup"]["chat_folder_days"], 30);
    assert_eq!(settings["notifications"]["on_task"], false);
    assert_eq!(settings["notifications"]["email"], "ops@example.com", "kept");
    // The fields the model filled with `null` were left alone.
    assert_eq!(settings["title"], "Agents");
    assert_eq!(settings["cleanup"]["turn_record_days"], 2);
    // THEN a new task is not told
    let turn = send(api, &chat, "another task").await;
    until(api, &chat, &turn, "agent_end").await;
    let kinds: Vec<String> = notifications(&feed(api, &ws).await)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(kinds, ["question", "failure", "task", "question"].map(str::to_owned));
}

/// The daily sweep removes the folders of chats that are gone or idle past their workspace's
/// setting, keeps the rest, and never follows a link out.
pub(crate) async fn the_sweep_removes_idle_chats_folders<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let org = org_of(api);
    let quick = api
        .ok(
            Method::POST,
            "/v1/workspaces",
            Some(json!({ "title": "Quick", "cleanup": { "chat_folder_days": 1 } })),
        )
        .await["id"]
        .clone();
    let slow = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "title": "Slow" })))
        .await["id"]
        .clone();
    let chat_in = |ws: Value| async move {
        api.ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
            .await["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (quick_chat, slow_chat) = (chat_in(quick).await, chat_in(slow).await);
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), "mine").unwrap();
    for chat in [&quick_chat, &slow_chat, &"ses_gone".to_owned()] {
        let dir = root.path().join(&org).join(chat);
        std::fs::create_dir_all(dir.join("home")).unwrap();
        std::fs::write(dir.join("home/notes.txt"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.join("link")).unwrap();
    }
    // A folder Spool did not make (no `home/`) is not Spool's to remove.
    std::fs::create_dir_all(root.path().join(&org).join("not a chat")).unwrap();
    let sweep = FolderSweep::new(root.path().to_path_buf(), stack.metadata.clone());
    let now = spool_log::clock::SystemClock.now_ms();
    let day = 24 * 3600 * 1000;
    let exists = |chat: &str| root.path().join(&org).join(chat).exists();

    // WHEN it runs now: only the deleted chat's folder goes
    let swept = sweep.sweep(now).await.unwrap();
    assert_eq!((swept.seen, swept.removed), (3, 1), "{swept:?}");
    assert!(!exists("ses_gone") && exists(&quick_chat) && exists(&slow_chat));
    // WHEN two days have passed: the chat of the one-day workspace goes
    assert_eq!(sweep.sweep(now + 2 * day).await.unwrap().removed, 1);
    assert!(!exists(&quick_chat) && exists(&slow_chat));
    // WHEN eight days have passed: the other (kept seven days by default) goes too
    assert_eq!(sweep.sweep(now + 8 * day).await.unwrap().removed, 1);
    assert!(!exists(&slow_chat));
    // THEN what links pointed at, and the folder Spool did not make, are still there
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep.txt")).unwrap(),
        "mine"
    );
    assert!(root.path().join(&org).join("not a chat").exists());
}

/// A chat with a turn in flight keeps its folder, however old.
pub(crate) async fn the_sweep_keeps_a_busy_chats_folder<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (_, chat) = chat_with(api, serde_json::from_str(SCRIPT).unwrap()).await;
    let turn = send(api, &chat, "pick a color").await;
    until(api, &chat, &turn, "ask_question").await;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(org_of(api)).join(&chat);
    std::fs::create_dir_all(dir.join("home")).unwrap();
    let sweep = FolderSweep::new(root.path().to_path_buf(), stack.metadata.clone());
    let later = spool_log::clock::SystemClock.now_ms() + 365 * 24 * 3600 * 1000;
    assert_eq!(sweep.sweep(later).await.unwrap().removed, 0);
    assert!(dir.exists());
    abort(api, &chat).await;
    until(api, &chat, &turn, "agent_end").await;
    assert_eq!(sweep.sweep(later).await.unwrap().removed, 1);
    assert!(!dir.exists());
}

/// A task is one rule whoever makes it: an agent's `create_task` is held to the description's
/// limit as a person's request is, and a person's task by hand is told as an agent's is.
pub(crate) async fn a_task_is_told_and_limited_whoever_makes_it<H: Harness>(harness: &H) {
    // GIVEN a workspace that tells its address about tasks, and an agent that makes one with
    // the person's message as its description
    let stack = stack(harness).await;
    let api = &stack.api;
    let script = json!({ "word_delay_ms": 0, "rules": [{ "match": ["task"], "rounds": [
        { "say": "Noted.", "tools": [{ "name": "create_task", "arguments": { "summary": "Write the notes", "description": "{input}" } }] },
        { "say": "Done." }] }], "default": [{ "say": "Hello." }] });
    let (ws, chat) = chat_with(api, script).await;
    api.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{ws}"),
        Some(json!({ "notifications": { "email": "ops@example.com" } })),
    )
    .await;
    let tasks = format!("/v1/workspaces/{ws}/tasks");
    let made = |feed: &[Value]| {
        feed.iter()
            .filter(|e| e["type"] == "task.created")
            .cloned()
            .collect::<Vec<_>>()
    };

    // WHEN the agent's description is longer than a person's may be
    let long = format!("task {}", "y".repeat(20_001));
    let turn = send(api, &chat, &long).await;
    let events = until(api, &chat, &turn, "agent_end").await;
    // THEN the action fails saying why, and nothing is made, announced or told
    let end = one(&events, &turn, "tool_end")["payload"].clone();
    assert!(end["error"].as_str().unwrap().contains("task description"), "{end}");
    assert_eq!(api.ok(Method::GET, &tasks, None).await["tasks"], json!([]));
    let events = feed(api, &ws).await;
    assert_eq!(made(&events), Vec::<Value>::new());
    assert_eq!(notifications(&events), []);

    // WHEN it is within the limit
    let turn = send(api, &chat, "a task for the notes").await;
    until(api, &chat, &turn, "agent_end").await;
    // THEN it is made, announced with its agent, and told
    let listed = api.ok(Method::GET, &tasks, None).await;
    assert_eq!(listed["tasks"][0]["description"], "a task for the notes");
    let events = feed(api, &ws).await;
    assert!(made(&events)[0]["agent"].is_string(), "{events:?}");
    assert_eq!(notifications(&events), [("task".to_owned(), "log".to_owned())]);

    // WHEN a person makes one by hand: too long is refused, within the limit it is told too
    let (status, error) = api
        .call(
            Method::POST,
            &tasks,
            Some(json!({ "title": "Review", "description": "y".repeat(20_001) })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    api.ok(
        Method::POST,
        &tasks,
        Some(json!({ "title": "Review", "session_id": chat })),
    )
    .await;
    let events = feed(api, &ws).await;
    assert_eq!(made(&events).len(), 2, "{events:?}");
    assert!(made(&events)[1]["agent"].is_null(), "{events:?}");
    let sent: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "notification.sent" && e["kind"] == "task")
        .collect();
    assert_eq!(sent.len(), 2, "{events:?}");
    assert_eq!(sent[1]["chat_id"], chat.as_str());
    assert!(
        sent[1]["subject"].as_str().unwrap().contains("key:"),
        "the person is named: {}",
        sent[1]
    );
}

on_both_backends!(settings_http:
    workspace_settings_over_http,
    the_worker_honours_the_settings,
    a_task_is_told_and_limited_whoever_makes_it,
    the_sweep_removes_idle_chats_folders,
    the_sweep_keeps_a_busy_chats_folder,
);

/// On AWS, notifications go through SES v2 from `SPOOL_NOTIFY_FROM`: refused (and recorded as
/// failed on the feed) while the sender is not verified, sent once it is.
#[cfg(feature = "emulator")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ses_sends_from_a_verified_address_only() {
    use spool_chat::{
        notifier::{About, notify},
        settings::NotificationKind,
        workspace::Workspace,
    };
    use spool_log::port::StreamReader;
    let harness = spool_tests::AwsHarness::new();
    let from = format!("spool-{}@example.com", spool_tests::unique_id("ses"));
    let mut config = harness.config().clone();
    config.aws.notify_from = Some(from.clone());
    let notifier = spool_aws::notifier_from_config(&config).await;
    assert_eq!((notifier.via(), notifier.sender()), ("email", Some(from.as_str())));
    let log = std::sync::Arc::new(harness.instance().await);
    let org = spool_tests::unique_id("org");
    let mut ws = Workspace::new(spool_tests::unique_id("ws"), "Docs".into(), 0);
    ws.notifications.email = Some("ops@example.com".into());
    // (the feed is made with its workspace)
    let path = spool_chat::manage::feed_path(&org, &ws.id).unwrap();
    let json = spool_log::stream::ContentType::parse("application/json").unwrap();
    spool_log::port::StreamWriter::create(log.as_ref(), &path, spool_log::stream::CreateStream::new(json))
        .await
        .unwrap();
    let feeds = spool_log::aggregate::Direct(log.clone());
    let about = About {
        chat: Some(("ses_1", "Release")),
        actor: "Planner",
        detail: "Which branch?",
    };
    // WHEN the sender is not verified: SES refuses, and the feed says why
    notify(
        &feeds,
        notifier.as_ref(),
        &org,
        &ws,
        NotificationKind::Question,
        about,
        "2026-11-24T00:00:00Z",
    )
    .await;
    // WHEN it is verified: the next one is sent
    let sdk = spool_aws::load_sdk_config(&config.aws).await;
    aws_sdk_sesv2::Client::new(&sdk)
        .create_email_identity()
        .email_identity(&from)
        .send()
        .await
        .unwrap();
    notify(
        &feeds,
        notifier.as_ref(),
        &org,
        &ws,
        NotificationKind::Question,
        about,
        "2026-11-24T00:00:01Z",
    )
    .await;
    let chunk = log.read(&path, spool_log::stream::Position::START, None).await.unwrap();
    let events: Vec<Value> = chunk
        .messages
        .iter()
        .map(|m| serde_json::from_slice(m).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["notification.failed", "notification.sent"], "{events:?}");
    assert!(
        events[0]["error"].as_str().unwrap().contains("MessageRejected"),
        "{}",
        events[0]
    );
    assert_eq!(events[1]["via"], "email");
}
