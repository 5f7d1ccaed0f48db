//! File search over HTTP on both backends: ranked matches from the workspace's working
//! directory, `.gitignore` respected, nothing from outside it, a clear 409 without one, and
//! another organization's 404.

use reqwest::Method;
use serde_json::json;
use spool_tests::Harness;

use crate::support::setup;

/// A workspace with a directory finds its files by fuzzy name; without one it says so.
pub(crate) async fn files_are_found_in_the_working_directory_only<H: Harness>(harness: &H) {
    let (api, other, _) = setup(harness).await;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Files" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let search = |q: &str| format!("/v1/workspaces/{ws}/files?q={q}");
    // WITHOUT a working directory: 409, saying what to do
    let (status, body) = api.call(Method::GET, &search("lib"), None).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "no_working_directory");
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

on_both_backends!(files_http: files_are_found_in_the_working_directory_only);
