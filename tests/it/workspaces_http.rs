//! Workspaces and agents through the chat API over real HTTP on loopback, on both backends:
//! the routes, their errors (4xx, nothing changed) and tenant isolation (another
//! organization's token gets 404 on every route and changes nothing).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_tests::Harness;

use crate::support::{Api, setup};

fn names(list: &Value) -> Vec<String> {
    list["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A workspace with its built-in agent, agents added, changed, reordered and deleted.
pub(crate) async fn workspaces_and_agents_over_http<H: Harness>(harness: &H) {
    use spool_chat::metadata::Workspaces;
    let (api, _, _) = setup(harness).await;

    // WHEN a workspace is made
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": " Docs " })))
        .await;
    let id = ws["id"].as_str().unwrap().to_owned();
    // THEN it has an id, a trimmed name, times, and the built-in Spool agent
    assert!(id.starts_with("ws_"), "{ws}");
    assert_eq!(ws["name"], "Docs");
    assert!(ws["created_at"].as_str().unwrap().ends_with('Z'));
    let listed = api.ok(Method::GET, "/v1/workspaces", None).await;
    assert!(
        listed["workspaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["id"] == id.as_str())
    );
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{id}/agents"), None).await;
    assert_eq!(names(&agents), ["Spool"]);
    let builtin = agents["agents"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(agents["agents"][0]["builtin"], true);

    // WHEN agents are added, they go last
    let reviewer = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{id}/agents"),
            Some(json!({ "name": "Reviewer", "instruction": "review", "runtime": "openai", "model": "gpt-4.1-mini" })),
        )
        .await;
    let coder = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{id}/agents"),
            Some(json!({ "name": "Coder", "runtime": "cli", "cli_type": "codex" })),
        )
        .await;
    assert_eq!(
        (reviewer["position"].as_u64(), coder["position"].as_u64()),
        (Some(1), Some(2))
    );
    let (reviewer, coder) = (reviewer["id"].as_str().unwrap(), coder["id"].as_str().unwrap());

    // WHEN one is changed: renamed, and its model cleared with null
    let changed = api
        .ok(
            Method::PATCH,
            &format!("/v1/agents/{reviewer}"),
            Some(json!({ "name": "Critic", "model": null })),
        )
        .await;
    assert_eq!(
        (changed["name"].as_str(), changed["model"].is_null()),
        (Some("Critic"), true)
    );
    assert_eq!(changed["instruction"], "review", "fields not named are kept");

    // WHEN they are reordered
    let reordered = api
        .ok(
            Method::PUT,
            &format!("/v1/workspaces/{id}/agents/order"),
            Some(json!({ "agent_ids": [coder, builtin, reviewer] })),
        )
        .await;
    assert_eq!(names(&reordered), ["Coder", "Spool", "Critic"]);
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{id}/agents"), None).await;
    assert_eq!(names(&agents), ["Coder", "Spool", "Critic"]);

    // WHEN the built-in agent is deleted: refused; another agent: gone
    let (status, error) = api.call(Method::DELETE, &format!("/v1/agents/{builtin}"), None).await;
    assert_eq!(status, 409, "{error}");
    assert_eq!(error["error"]["code"], "conflict");
    assert_eq!(
        api.call(Method::DELETE, &format!("/v1/agents/{reviewer}"), None)
            .await
            .0,
        204
    );
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{id}/agents"), None).await;
    assert_eq!(names(&agents), ["Coder", "Spool"]);

    // WHEN the workspace's working directory is set outside the roots, or through a link
    // that leads out of them, or to a folder that does not exist
    let project = spool_tests::workspace_dir(&crate::support::org_of(&api));
    std::os::unix::fs::symlink("/", project.path().join("escape")).unwrap();
    let outside = "is not a folder this organization may use";
    for (dir, why) in [
        ("/srv/docs".to_owned(), outside),
        ("/".to_owned(), outside),
        (format!("{}/escape", project.path().display()), outside),
        (format!("{}/missing", project.path().display()), "does not exist"),
        ("relative".to_owned(), "not an absolute path"),
    ] {
        let (status, error) = api
            .call(
                Method::PATCH,
                &format!("/v1/workspaces/{id}"),
                Some(json!({ "name": "Moved", "working_dir": dir })),
            )
            .await;
        // THEN it is refused, saying why, and nothing changes
        assert_eq!(status, StatusCode::BAD_REQUEST, "{dir}: {error}");
        assert!(
            error["error"]["message"].as_str().unwrap().contains(why),
            "{dir}: {error}"
        );
    }
    let ws = api.ok(Method::GET, &format!("/v1/workspaces/{id}"), None).await;
    assert_eq!((ws["name"].as_str(), ws["working_dir"].as_str()), (Some("Docs"), None));
    // WHEN it is set to a folder under a root, then cleared
    let ws = api
        .ok(
            Method::PATCH,
            &format!("/v1/workspaces/{id}"),
            Some(json!({ "name": "Docs 2", "working_dir": project.path() })),
        )
        .await;
    let resolved = project.path().canonicalize().unwrap();
    assert_eq!(
        (ws["name"].as_str(), ws["working_dir"].as_str()),
        (Some("Docs 2"), resolved.to_str())
    );
    let ws = api
        .ok(
            Method::PATCH,
            &format!("/v1/workspaces/{id}"),
            Some(json!({ "working_dir": null })),
        )
        .await;
    assert!(ws["working_dir"].is_null());
    assert_eq!(
        api.ok(Method::GET, &format!("/v1/workspaces/{id}"), None).await["name"],
        "Docs 2"
    );

    // WHEN agents make tasks, they list newest first and read by id
    let metadata = harness.metadata().await;
    let org = crate::support::org_of(&api);
    for (n, at) in [(1, 1_000), (2, 2_000)] {
        let task = spool_chat::workspace::Task {
            id: format!("task_{n}_{id}"),
            workspace_id: id.clone(),
            session_id: None,
            title: format!("Task {n}"),
            description: "do it".to_owned(),
            created_ms: at,
        };
        metadata.create_task(&org, &task).await.unwrap();
    }
    let tasks = api.ok(Method::GET, &format!("/v1/workspaces/{id}/tasks"), None).await;
    let titles: Vec<&str> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["Task 2", "Task 1"]);
    let task = api.ok(Method::GET, &format!("/v1/tasks/task_1_{id}"), None).await;
    assert_eq!(
        (task["title"].as_str(), task["workspace_id"].as_str()),
        (Some("Task 1"), Some(id.as_str()))
    );

    // WHEN it is deleted, it, its agents and its tasks are gone
    assert_eq!(
        api.call(Method::DELETE, &format!("/v1/workspaces/{id}"), None).await.0,
        204
    );
    for (method, path) in [
        (Method::GET, format!("/v1/workspaces/{id}")),
        (Method::GET, format!("/v1/workspaces/{id}/agents")),
        (Method::DELETE, format!("/v1/workspaces/{id}")),
        (Method::PATCH, format!("/v1/agents/{coder}")),
        (Method::GET, format!("/v1/workspaces/{id}/tasks")),
        (Method::GET, format!("/v1/tasks/task_1_{id}")),
    ] {
        let body = (method == Method::PATCH).then(|| json!({ "name": "x" }));
        let (status, error) = api.call(method.clone(), &path, body).await;
        assert_eq!(status, 404, "{method} {path}");
        assert_eq!(error["error"]["code"], "not_found");
    }
}

/// What organization A sees of workspace `id`.
async fn snapshot(api: &Api, id: &str) -> (Value, Value) {
    (
        api.ok(Method::GET, &format!("/v1/workspaces/{id}"), None).await,
        api.ok(Method::GET, &format!("/v1/workspaces/{id}/agents"), None).await,
    )
}

/// Every route: no token → 401, another organization's token → 404, bad bodies → 400; and
/// none of them changes anything.
pub(crate) async fn errors_and_tenant_isolation<H: Harness>(harness: &H) {
    let (a, b, anonymous) = setup(harness).await;
    let ws = a
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "A's" })))
        .await;
    let id = ws["id"].as_str().unwrap().to_owned();
    let agent = a
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{id}/agents"),
            Some(json!({ "name": "Mine" })),
        )
        .await;
    let agent_id = agent["id"].as_str().unwrap().to_owned();
    let before = snapshot(&a, &id).await;

    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/workspaces/{id}"), None),
        (
            Method::PATCH,
            format!("/v1/workspaces/{id}"),
            Some(json!({ "name": "stolen" })),
        ),
        (Method::DELETE, format!("/v1/workspaces/{id}"), None),
        (Method::GET, format!("/v1/workspaces/{id}/agents"), None),
        (
            Method::POST,
            format!("/v1/workspaces/{id}/agents"),
            Some(json!({ "name": "intruder" })),
        ),
        (
            Method::PUT,
            format!("/v1/workspaces/{id}/agents/order"),
            Some(json!({ "agent_ids": [agent_id] })),
        ),
        (
            Method::PATCH,
            format!("/v1/agents/{agent_id}"),
            Some(json!({ "name": "stolen" })),
        ),
        (Method::DELETE, format!("/v1/agents/{agent_id}"), None),
        (Method::GET, format!("/v1/workspaces/{id}/tasks"), None),
    ];
    for (method, path, body) in &routes {
        // Another organization: 404, as if nothing were there.
        let (status, error) = b.call(method.clone(), path, body.clone()).await;
        assert_eq!(status, 404, "org B: {method} {path}: {error}");
        // No token: 401.
        let (status, _) = anonymous.call(method.clone(), path, body.clone()).await;
        assert_eq!(status, 401, "anonymous: {method} {path}");
    }
    for (method, path) in [(Method::GET, "/v1/workspaces"), (Method::POST, "/v1/workspaces")] {
        assert_eq!(
            anonymous
                .call(method.clone(), path, Some(json!({ "name": "x" })))
                .await
                .0,
            401,
            "{path}"
        );
    }
    assert!(
        b.ok(Method::GET, "/v1/workspaces", None).await["workspaces"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Bad bodies: 400 with the contract's error.
    let long = "x".repeat(101);
    let bad: Vec<(Method, String, Value)> = vec![
        (Method::POST, "/v1/workspaces".to_owned(), json!({})),
        (Method::POST, "/v1/workspaces".to_owned(), json!({ "name": "   " })),
        (Method::POST, "/v1/workspaces".to_owned(), json!({ "name": long })),
        (Method::POST, "/v1/workspaces".to_owned(), json!({ "name": 5 })),
        (
            Method::POST,
            "/v1/workspaces".to_owned(),
            json!({ "name": "ok", "nmae": "typo" }),
        ),
        (Method::PATCH, format!("/v1/workspaces/{id}"), json!({ "name": "" })),
        (
            Method::PATCH,
            format!("/v1/workspaces/{id}"),
            json!({ "working_dir": "a\u{0}b" }),
        ),
        (
            Method::POST,
            format!("/v1/workspaces/{id}/agents"),
            json!({ "name": "c", "runtime": "cli" }),
        ),
        (
            Method::POST,
            format!("/v1/workspaces/{id}/agents"),
            json!({ "name": "c", "runtime": "gpt" }),
        ),
        (
            Method::POST,
            format!("/v1/workspaces/{id}/agents"),
            json!({ "name": "c", "cli_type": "vim" }),
        ),
        (
            Method::PATCH,
            format!("/v1/agents/{agent_id}"),
            json!({ "instruction": "x".repeat(20_001) }),
        ),
        (
            Method::PUT,
            format!("/v1/workspaces/{id}/agents/order"),
            json!({ "agent_ids": [agent_id] }),
        ),
        (
            Method::PUT,
            format!("/v1/workspaces/{id}/agents/order"),
            json!({ "agent_ids": [agent_id, agent_id] }),
        ),
        (
            Method::PUT,
            format!("/v1/workspaces/{id}/agents/order"),
            json!({ "agent_ids": "all" }),
        ),
    ];
    for (method, path, body) in bad {
        let (status, error) = a.call(method.clone(), &path, Some(body.clone())).await;
        assert_eq!(status, 400, "{method} {path} {body}: {error}");
        assert!(error["error"]["message"].is_string(), "{error}");
    }
    for body in [&b"not json"[..], b"", b"[1,2]", b"{\"name\": \"\xff\"}"] {
        let (status, _) = a.raw(Method::POST, "/v1/workspaces", body).await;
        assert_eq!(status, 400, "{:?}", String::from_utf8_lossy(body));
    }
    let (status, _) = a.raw(Method::PATCH, &format!("/v1/workspaces/{id}"), b"{").await;
    assert_eq!(status, 400);

    // Unknown routes and methods, and paths that are not UTF-8: JSON errors too.
    let (status, error) = a.call(Method::GET, "/v1/workspaces/%FF%FE", None).await;
    assert_eq!(
        (status.as_u16(), error["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    let (status, error) = a.call(Method::GET, "/v1/nowhere", None).await;
    assert_eq!(
        (status.as_u16(), error["error"]["code"].as_str()),
        (404, Some("no_route"))
    );
    let (status, error) = a
        .call(Method::POST, &format!("/v1/workspaces/{id}"), Some(json!({})))
        .await;
    assert_eq!(
        (status.as_u16(), error["error"]["code"].as_str()),
        (405, Some("method_not_allowed"))
    );

    // Nothing changed, and A still has exactly the one workspace it made.
    assert_eq!(snapshot(&a, &id).await, before);
    assert_eq!(
        a.ok(Method::GET, "/v1/workspaces", None).await["workspaces"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// Tasks are made, changed and deleted by hand; a hand-made task is announced on the feed as an
/// agent's is, and may belong to a chat of its workspace only.
pub(crate) async fn tasks_are_made_changed_and_deleted_by_hand<H: Harness>(harness: &H) {
    let (api, other, _) = setup(harness).await;
    // A workspace speaks the design's `title` (and still takes `name`).
    let titled = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "title": "Titled" })))
        .await;
    assert_eq!(
        (titled["title"].as_str(), titled["name"].as_str()),
        (Some("Titled"), Some("Titled"))
    );
    let titled_id = titled["id"].as_str().unwrap();
    let renamed = api
        .ok(
            Method::PATCH,
            &format!("/v1/workspaces/{titled_id}"),
            Some(json!({ "title": "Retitled" })),
        )
        .await;
    assert_eq!(renamed["title"], "Retitled");
    let (status, _) = api
        .call(
            Method::POST,
            "/v1/workspaces",
            Some(json!({ "title": "A", "name": "B" })),
        )
        .await;
    assert_eq!(status, 400, "one title");
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Tasks" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let elsewhere = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Else" })))
        .await;
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await;
    let foreign = api
        .ok(
            Method::POST,
            "/v1/sessions",
            Some(json!({ "workspace_id": elsewhere["id"] })),
        )
        .await;
    let tasks = format!("/v1/workspaces/{ws}/tasks");
    let made = api
        .ok(
            Method::POST,
            &tasks,
            Some(json!({ "summary": "Ship it", "description": "Friday", "session_id": chat["id"] })),
        )
        .await;
    assert_eq!(
        (made["title"].as_str(), made["session_id"].as_str()),
        (Some("Ship it"), chat["id"].as_str())
    );
    let id = made["id"].as_str().unwrap().to_owned();
    for bad in [
        json!({ "title": "" }),
        json!({ "title": "x", "session_id": foreign["id"] }),
        json!({ "title": "x", "owner": "me" }),
        json!({ "title": "x", "description": "y".repeat(20_001) }),
    ] {
        let (status, _) = api.call(Method::POST, &tasks, Some(bad.clone())).await;
        assert!(status == 400 || status == 404, "{bad}: {status}");
    }
    let changed = api
        .ok(
            Method::PATCH,
            &format!("/v1/tasks/{id}"),
            Some(json!({ "title": "Ship it now" })),
        )
        .await;
    assert_eq!(
        (changed["title"].as_str(), changed["description"].as_str()),
        (Some("Ship it now"), Some("Friday"))
    );
    let listed = api.ok(Method::GET, &tasks, None).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1);
    // Another organization reaches none of it.
    assert_eq!(
        other
            .call(Method::PATCH, &format!("/v1/tasks/{id}"), Some(json!({ "title": "x" })))
            .await
            .0,
        404
    );
    assert_eq!(
        other.call(Method::DELETE, &format!("/v1/tasks/{id}"), None).await.0,
        404
    );
    // The feed announced it.
    let feed: Vec<Value> = api
        .get(&format!("/v1/stream/workspaces/{ws}/feed?offset=-1"))
        .await
        .json()
        .await
        .unwrap();
    let created = feed
        .iter()
        .find(|e| e["type"] == "task.created" && e["task_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{feed:?}"));
    assert_eq!(created["summary"], "Ship it");
    assert_eq!(created["chat_id"], chat["id"]);
    assert_eq!(created["workspace_id"], ws.as_str());
    assert!(created["actor"].as_str().unwrap().starts_with("key:"), "{created}");
    assert_eq!(created["agent"], Value::Null, "{created}");
    // Chats and agents changing are on the feed too, so lists update without reading again.
    let chat_id = chat["id"].as_str().unwrap();
    api.ok(
        Method::PATCH,
        &format!("/v1/sessions/{chat_id}"),
        Some(json!({ "title": "Plans" })),
    )
    .await;
    let helper = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(json!({ "name": "Helper" })),
        )
        .await;
    let helper_id = helper["id"].as_str().unwrap();
    api.ok(
        Method::PATCH,
        &format!("/v1/agents/{helper_id}"),
        Some(json!({ "name": "Aide" })),
    )
    .await;
    api.ok(Method::DELETE, &format!("/v1/agents/{helper_id}"), None).await;
    api.ok(Method::DELETE, &format!("/v1/sessions/{chat_id}"), None).await;
    let feed: Vec<Value> = api
        .get(&format!("/v1/stream/workspaces/{ws}/feed?offset=-1"))
        .await
        .json()
        .await
        .unwrap();
    let seen: Vec<(String, String)> = feed
        .iter()
        .map(|e| {
            let name = e["chat_title"].as_str().or(e["agent_name"].as_str()).unwrap_or("");
            (e["type"].as_str().unwrap().to_owned(), name.to_owned())
        })
        .collect();
    for (kind, name) in [
        ("chat.created", "Untitled chat"),
        ("chat.renamed", "Plans"),
        ("agent.created", "Helper"),
        ("agent.updated", "Aide"),
        ("agent.deleted", "Aide"),
        ("chat.deleted", ""),
    ] {
        assert!(
            seen.contains(&(kind.to_owned(), name.to_owned())),
            "{kind} {name} in {seen:?}"
        );
    }
    api.ok(Method::DELETE, &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(api.call(Method::GET, &format!("/v1/tasks/{id}"), None).await.0, 404);
    assert_eq!(api.call(Method::DELETE, &format!("/v1/tasks/{id}"), None).await.0, 404);
    assert!(
        api.ok(Method::GET, &tasks, None).await["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

on_both_backends!(workspaces_http:
    tasks_are_made_changed_and_deleted_by_hand,
    workspaces_and_agents_over_http,
    errors_and_tenant_isolation,
);
