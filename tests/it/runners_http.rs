//! Runners over real HTTP on both backends: a runner's key reaches the runner routes and
//! nothing else, a person's token does not reach them; a runner claims a job, heartbeats,
//! fetches the chat's files and settles it once, the turn then queued again; an abort reaches
//! a waiting heartbeat at once; workspaces say where their CLI agents run.

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_chat::{
    runner::{RunnerJob, RunnerStore, request_key},
    workspace::CliType,
};
use spool_log::clock::{Clock, SystemClock};
use spool_tests::Harness;

use crate::support::{Api, handshake, org_of, setup};

/// A client of `person`'s organization with a runner's key.
pub(crate) async fn runner_client<H: Harness>(harness: &H, person: &Api) -> Api {
    let metadata = harness.metadata().await;
    let runner = ["runner".to_owned()];
    let (_, key) = spool_api::admin::create_api_key(&metadata, &org_of(person), &runner, SystemClock.now_ms())
        .await
        .unwrap();
    let body: Value = handshake(&person.http, &person.base, json!({ "api_key": key.reveal() }))
        .await
        .json()
        .await
        .unwrap();
    Api {
        http: person.http.clone(),
        base: person.base.clone(),
        token: Some(body["jwt"].as_str().unwrap().to_owned()),
    }
}

/// Offers a claude job for `turn` of `person`'s chat `chat` (as the engine does: its request
/// beside the chat's files, then the job).
pub(crate) async fn offer<H: Harness>(harness: &H, person: &Api, chat: &str, turn: &str) {
    let org = org_of(person);
    let tail = person
        .ok(Method::GET, &format!("/v1/sessions/{chat}/events?after=0"), None)
        .await["events"]
        .as_array()
        .map_or(0, Vec::len) as u64;
    let request = json!({ "instruction": "be brief", "messages": [], "context": {} }).to_string();
    let files = harness.files().await;
    files.put(&request_key(&org, turn), request.into_bytes()).await.unwrap();
    let job = RunnerJob {
        turn_id: turn.to_owned(),
        session_id: chat.to_owned(),
        workspace_id: None,
        cli: CliType::Claude,
        offered_seq: tail,
        offered_ms: SystemClock.now_ms(),
        wait_ms: 600_000,
        epoch: 0,
        runner: None,
        lease_until_ms: 0,
        outcome: None,
    };
    assert!(harness.metadata().await.offer_job(&org, &job).await.unwrap());
}

/// A claim of a runner named `name` that runs claude, for every workspace.
pub(crate) fn claim(name: &str, wait_ms: u64) -> Value {
    json!({
        "name": name,
        "version": "0.1.0",
        "clis": [{ "cli": "claude", "installed": true, "version": "2.0.1", "healthy": true }],
        "wait_ms": wait_ms,
    })
}

pub(crate) async fn a_runners_key_reaches_only_the_runner_routes<H: Harness>(harness: &H) {
    let (a, _, _) = setup(harness).await;
    let runner = runner_client(harness, &a).await;
    let ws = a.ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "W" }))).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let chat = a
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // WHEN the runner's token calls a route of every other family
    let hello = json!({ "content": "hello" });
    let ai_sdk = json!({ "id": chat, "messages": [{ "id": "m-1", "role": "user", "parts": [{ "type": "text", "text": "hi" }] }], "trigger": "submit-message" });
    let ag_ui =
        json!({ "threadId": chat, "runId": "r-1", "messages": [{ "id": "m-1", "role": "user", "content": "hi" }] });
    let calls = [
        (Method::GET, "/v1/workspaces".to_owned(), None),
        (
            Method::PATCH,
            format!("/v1/workspaces/{ws}"),
            Some(json!({ "title": "X" })),
        ),
        (Method::GET, "/v1/sessions".to_owned(), None),
        (Method::POST, "/v1/sessions".to_owned(), Some(json!({}))),
        (Method::POST, format!("/v1/sessions/{chat}/messages"), Some(hello)),
        (Method::GET, format!("/v1/sessions/{chat}/events?after=0"), None),
        (Method::GET, "/v1/clis".to_owned(), None),
        (Method::GET, "/v1/runners".to_owned(), None),
        (
            Method::POST,
            "/v1/read-tokens".to_owned(),
            Some(json!({ "path": format!("sessions/{chat}") })),
        ),
        (Method::GET, format!("/v1/stream/sessions/{chat}?offset=-1"), None),
        (Method::GET, "/chat/history".to_owned(), None),
        (Method::POST, "/v1/ai-sdk/chat".to_owned(), Some(ai_sdk)),
        (Method::POST, "/v1/ag-ui/chat".to_owned(), Some(ag_ui)),
        (Method::GET, "/v1/stream/__ds/subscriptions/sub-x".to_owned(), None),
    ];
    for (method, path, body) in calls {
        let (status, error) = runner.call(method.clone(), &path, body).await;
        // THEN every one refuses it, saying what the token is for
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {error}");
        assert_eq!(error["error"]["message"], spool_auth::RUNNER_ONLY, "{method} {path}");
    }
    // AND its own route takes it: no job, so 204 at once
    let response = runner
        .http
        .post(format!("{}/v1/runner/claim", runner.base))
        .bearer_auth(runner.token.as_deref().unwrap())
        .json(&claim("box-1", 0))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    // AND a person's token is refused there, as on every runner route
    for (method, path, body) in [
        (Method::POST, "/v1/runner/claim".to_owned(), Some(claim("box-1", 0))),
        (
            Method::POST,
            "/v1/runner/turns/t1/heartbeat".to_owned(),
            Some(json!({ "epoch": 1 })),
        ),
        (Method::GET, "/v1/runner/turns/t1/files/att_1?epoch=1".to_owned(), None),
        (
            Method::POST,
            "/v1/runner/turns/t1/result".to_owned(),
            Some(json!({ "epoch": 1, "outcome": { "status": "failed", "reason": "x" } })),
        ),
    ] {
        let (status, error) = a.call(method.clone(), &path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--capability runner"),
            "{error}"
        );
    }
    // AND a runner's key carries nothing else
    let metadata = harness.metadata().await;
    let mixed = ["runner".to_owned(), "agent".to_owned()];
    let refused = spool_api::admin::create_api_key(&metadata, &org_of(&a), &mixed, SystemClock.now_ms()).await;
    assert!(matches!(refused, Err(spool_log::error::Error::Invalid { .. })));
}

pub(crate) async fn a_runner_claims_heartbeats_fetches_and_settles_a_turn_once<H: Harness>(harness: &H) {
    let (a, _, _) = setup(harness).await;
    let runner = runner_client(harness, &a).await;
    let chat = a.ok(Method::POST, "/v1/sessions", Some(json!({}))).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = crate::attachments_http::upload(&a, &chat, "notes.md", "text/markdown", b"# notes").await;
    let file = file["attachment"]["id"].as_str().unwrap().to_owned();
    offer(harness, &a, &chat, "turn_r1").await;
    // WHEN a runner claims
    let got = runner
        .ok(Method::POST, "/v1/runner/claim", Some(claim("box-1", 5_000)))
        .await;
    // THEN it has the job, its request and the claim's epoch
    assert_eq!(
        (got["turn_id"].as_str(), got["session_id"].as_str()),
        (Some("turn_r1"), Some(chat.as_str()))
    );
    assert_eq!(
        (got["epoch"].as_u64(), got["lease_ms"].as_u64()),
        (Some(1), Some(60_000))
    );
    assert_eq!(got["request"]["instruction"], "be brief");
    // AND people see it, online, with what it runs
    let runners = a.ok(Method::GET, "/v1/runners", None).await;
    assert_eq!(runners["runners"][0]["name"], "box-1", "{runners}");
    assert_eq!(runners["runners"][0]["online"], true);
    let clis = a.ok(Method::GET, "/v1/clis", None).await;
    assert_eq!(clis["runners"][0]["clis"][0]["version"], "2.0.1", "{clis}");
    assert_eq!(clis["clis"].as_array().unwrap().len(), 4, "{clis}");
    // WHEN it heartbeats, and fetches the chat's file
    let beat = runner
        .ok(
            Method::POST,
            "/v1/runner/turns/turn_r1/heartbeat",
            Some(json!({ "epoch": 1, "wait_ms": 0 })),
        )
        .await;
    assert_eq!(beat, json!({ "cancel": false, "lease_ms": 60_000 }));
    let fetched = runner
        .get(&format!("/v1/runner/turns/turn_r1/files/{file}?epoch=1"))
        .await;
    assert_eq!(fetched.status(), StatusCode::OK);
    assert_eq!(fetched.headers()["content-type"], "text/markdown");
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), b"# notes");
    let stale = runner
        .get(&format!("/v1/runner/turns/turn_r1/files/{file}?epoch=2"))
        .await;
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    // WHEN it settles (twice: the answer to the first was lost)
    let reply = json!({ "epoch": 1, "outcome": { "status": "reply", "message": "Done.", "actions": [{ "type": "rename_chat", "title": "T" }] } });
    for _ in 0..2 {
        let settled = runner
            .ok(Method::POST, "/v1/runner/turns/turn_r1/result", Some(reply.clone()))
            .await;
        assert_eq!(settled, json!({ "accepted": true }));
    }
    // THEN the job holds the reply and the turn is queued again for the engine
    let org = org_of(&a);
    let job = harness
        .metadata()
        .await
        .runner_job(&org, "turn_r1")
        .await
        .unwrap()
        .unwrap();
    assert!(job.outcome.is_some(), "{job:?}");
    let turn = a
        .ok(Method::GET, &format!("/v1/sessions/{chat}/turns/turn_r1"), None)
        .await;
    assert_eq!(turn["status"], "queued", "{turn}");
    // AND another settle, a stale heartbeat and bad input are refused
    let other = json!({ "epoch": 1, "outcome": { "status": "failed", "reason": "changed" } });
    let (status, error) = runner
        .call(Method::POST, "/v1/runner/turns/turn_r1/result", Some(other))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["code"], "superseded");
    let beat = runner
        .ok(
            Method::POST,
            "/v1/runner/turns/turn_r1/heartbeat",
            Some(json!({ "epoch": 1, "wait_ms": 0 })),
        )
        .await;
    assert_eq!(beat["cancel"], true);
    for (path, body) in [
        ("/v1/runner/claim", json!({ "name": "no spaces", "clis": [] })),
        ("/v1/runner/claim", json!({ "name": "ok", "clis": [], "extra": 1 })),
        (
            "/v1/runner/turns/turn_r1/result",
            json!({ "epoch": 1, "outcome": { "status": "reply", "actions": [1] } }),
        ),
        ("/v1/runner/turns/turn_r1/heartbeat", json!({ "epoch": -1 })),
    ] {
        let (status, error) = runner.call(Method::POST, path, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {error}");
    }
}

pub(crate) async fn an_abort_answers_a_waiting_heartbeat_at_once<H: Harness>(harness: &H) {
    let (a, _, _) = setup(harness).await;
    let runner = Arc::new(runner_client(harness, &a).await);
    let chat = a.ok(Method::POST, "/v1/sessions", Some(json!({}))).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    offer(harness, &a, &chat, "turn_r2").await;
    runner
        .ok(Method::POST, "/v1/runner/claim", Some(claim("box-1", 0)))
        .await;
    let waiting = {
        let runner = runner.clone();
        tokio::spawn(async move {
            let body = json!({ "epoch": 1, "wait_ms": 15_000 });
            runner
                .ok(Method::POST, "/v1/runner/turns/turn_r2/heartbeat", Some(body))
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    a.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/control"),
        Some(json!({ "action": "abort" })),
    )
    .await;
    let beat = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(beat["cancel"], true, "{beat}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

pub(crate) async fn a_workspace_says_where_its_cli_agents_run<H: Harness>(harness: &H) {
    let (a, _, _) = setup(harness).await;
    // The default here is the worker's (`spool serve`'s).
    let plain = a
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Here" })))
        .await;
    assert_eq!(plain["cli_host"], "server", "{plain}");
    // On runners, a folder the server does not have is theirs to find.
    let remote = a
        .ok(
            Method::POST,
            "/v1/workspaces",
            Some(json!({ "name": "There", "cli_host": "runners", "working_directory_path": "/home/dev/absent-repo" })),
        )
        .await;
    assert_eq!(remote["cli_host"], "runners", "{remote}");
    assert_eq!(remote["working_directory_path"], "/home/dev/absent-repo");
    let ws = remote["id"].as_str().unwrap();
    for bad in [
        json!({ "working_directory_path": "relative/repo" }),
        json!({ "working_directory_path": "/home/dev/../etc" }),
        json!({ "cli_host": "laptop" }),
        // Back on the server, the folder must be one of the server's.
        json!({ "cli_host": null }),
    ] {
        let (status, error) = a
            .call(Method::PATCH, &format!("/v1/workspaces/{ws}"), Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {error}");
    }
    let back = a
        .ok(
            Method::PATCH,
            &format!("/v1/workspaces/{ws}"),
            Some(json!({ "cli_host": null, "working_directory_mode": "temp" })),
        )
        .await;
    assert_eq!(
        (back["cli_host"].as_str(), back["working_directory_path"].as_str()),
        (Some("server"), None)
    );
    let (status, _) = a
        .call(Method::GET, &format!("/v1/runners?workspace_id={ws}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = a.call(Method::GET, "/v1/runners?workspace_id=ws_nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

on_both_backends!(runners_http:
    a_runners_key_reaches_only_the_runner_routes,
    a_runner_claims_heartbeats_fetches_and_settles_a_turn_once,
    an_abort_answers_a_waiting_heartbeat_at_once,
    a_workspace_says_where_its_cli_agents_run,
);
