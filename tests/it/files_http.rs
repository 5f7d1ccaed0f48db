//! File search over HTTP on both backends: ranked matches from the workspace's working
//! directory, `.gitignore` respected, nothing from outside it, an empty answer without one
//! (not a 409), the chat's own files (its attachments) with or without a directory, and
//! another organization's 404.

use reqwest::Method;
use serde_json::{Value, json};
use spool_tests::Harness;

use crate::{attachments_http::upload, support::setup};

/// A workspace with a directory finds its files by fuzzy name; without one it finds nothing
/// and says it searched no directory.
pub(crate) async fn files_are_found_in_the_working_directory_only<H: Harness>(harness: &H) {
    let (api, other, _) = setup(harness).await;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Files" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let search = |q: &str| format!("/v1/workspaces/{ws}/files?q={q}");
    // WITHOUT a working directory: nothing found, and no directory searched
    let none = api.ok(Method::GET, &search("lib"), None).await;
    assert_eq!(none["files"], json!([]), "{none}");
    assert_eq!(none["working_directory"], false, "{none}");
    // WITH one
    let dir = spool_tests::workspace_dir(&crate::support::org_of(&api));
    for p in ["src/lib.rs", "src/main.rs", "build/lib.rs", "README.md"] {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x").unwrap();
    }
    std::fs::write(dir.path().join(".gitignore"), "build/\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("lib-secret.rs"), "x").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("elsewhere")).unwrap();
    api.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{ws}"),
        Some(json!({ "working_dir": dir.path().to_str().unwrap() })),
    )
    .await;
    let found = api.ok(Method::GET, &search("srclib"), None).await;
    assert_eq!(found["files"][0]["path"], "src/lib.rs", "{found}");
    assert_eq!(found["files"][0]["source"], "working_directory", "{found}");
    assert_eq!(found["working_directory"], true, "{found}");
    let found = api.ok(Method::GET, &search("lib"), None).await;
    let paths: Vec<&str> = found["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(!paths.iter().any(|p| p.starts_with("build/")), "gitignored: {paths:?}");
    assert!(
        !paths.iter().any(|p| p.contains("secret")),
        "a link out is not followed: {paths:?}"
    );
    assert_eq!(found["truncated"], false);
    // Bad queries are 400s; another organization gets 404 whatever it asks
    assert_eq!(
        api.call(Method::GET, &format!("/v1/workspaces/{ws}/files"), None)
            .await
            .0,
        400
    );
    assert_eq!(
        api.call(Method::GET, &format!("{}&limit=500", search("lib")), None)
            .await
            .0,
        400
    );
    assert_eq!(other.call(Method::GET, &search("lib"), None).await.0, 404);
    assert_eq!(
        other
            .call(Method::GET, &format!("/v1/workspaces/{ws}/files"), None)
            .await
            .0,
        404
    );
}

/// With a chat, its current files are found by name too, each saying it is the chat's file
/// (its id, name and size): with no working directory (as on AWS) and beside one. A file never
/// uploaded, one a newer file of its name replaced, and another chat's are not; a chat of
/// another workspace or organization is not found.
pub(crate) async fn the_chats_files_are_found_where_its_agents_find_them<H: Harness>(harness: &H) {
    let (api, other, _) = setup(harness).await;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Files" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let new_chat = |ws: String| {
        let api = &api;
        async move {
            let chat = api
                .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
                .await;
            chat["id"].as_str().unwrap().to_owned()
        }
    };
    let chat = new_chat(ws.clone()).await;
    let elsewhere = new_chat(ws.clone()).await;
    let report = upload(&api, &chat, "report-q3.csv", "text/csv", b"a,b\n1,2\n").await;
    upload(&api, &chat, "notes.md", "text/markdown", b"old").await;
    let notes = upload(&api, &chat, "notes.md", "text/markdown", b"newer notes").await;
    upload(&api, &elsewhere, "report-secret.csv", "text/csv", b"x").await;
    // Declared, never uploaded: not a file of the chat yet.
    let (status, _) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{chat}/attachments"),
            Some(json!({ "filename": "report-draft.csv", "content_type": "text/csv", "size": 3 })),
        )
        .await;
    assert_eq!(status, 201);
    let search = |q: &str| format!("/v1/workspaces/{ws}/files?q={q}&session_id={chat}");
    // No working directory: the chat's files alone
    let found = api.ok(Method::GET, &search("report"), None).await;
    assert_eq!(found["working_directory"], false, "{found}");
    let files = found["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{found}");
    assert_eq!(files[0]["source"], "attachment");
    assert_eq!(files[0]["path"], "report-q3.csv");
    assert_eq!(files[0]["attachment"]["id"], report["attachment"]["id"]);
    assert_eq!(files[0]["attachment"]["filename"], "report-q3.csv");
    assert_eq!(files[0]["attachment"]["size"], 8);
    let found = api.ok(Method::GET, &search("notes"), None).await;
    let ids: Vec<&Value> = found["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| &f["attachment"]["id"])
        .collect();
    assert_eq!(ids, [&notes["attachment"]["id"]], "the newest of its name: {found}");
    let nothing = api.ok(Method::GET, &search("zzzz"), None).await;
    assert_eq!(nothing["files"], json!([]));
    // Beside a working directory
    let dir = spool_tests::workspace_dir(&crate::support::org_of(&api));
    std::fs::write(dir.path().join("report.md"), "x").unwrap();
    api.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{ws}"),
        Some(json!({ "working_dir": dir.path().to_str().unwrap() })),
    )
    .await;
    let found = api.ok(Method::GET, &search("report"), None).await;
    let mut sources: Vec<(&str, &str)> = found["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["source"].as_str().unwrap(), f["path"].as_str().unwrap()))
        .collect();
    sources.sort_unstable();
    assert_eq!(
        sources,
        [("attachment", "report-q3.csv"), ("working_directory", "report.md")],
        "{found}"
    );
    // Without the chat, the directory alone, as before
    let found = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/files?q=report"), None)
        .await;
    assert_eq!(found["files"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["files"][0]["source"], "working_directory");
    // A chat of another workspace, or of another organization, is not found
    let ws2 = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Other" })))
        .await;
    let ws2 = ws2["id"].as_str().unwrap().to_owned();
    let (status, body) = api
        .call(
            Method::GET,
            &format!("/v1/workspaces/{ws2}/files?q=report&session_id={chat}"),
            None,
        )
        .await;
    assert_eq!(status, 404, "{body}");
    let theirs = other
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Theirs" })))
        .await;
    let theirs = theirs["id"].as_str().unwrap();
    let (status, body) = other
        .call(
            Method::GET,
            &format!("/v1/workspaces/{theirs}/files?q=report&session_id={chat}"),
            None,
        )
        .await;
    assert_eq!(status, 404, "{body}");
}

on_both_backends!(files_http:
    files_are_found_in_the_working_directory_only,
    the_chats_files_are_found_where_its_agents_find_them,
);
