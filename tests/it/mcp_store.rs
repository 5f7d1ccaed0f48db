//! Workspaces' MCP servers in the metadata store, one contract for both backends: kept per
//! organization and workspace, names unique in a workspace (a rename moves the name), the cap
//! held, and a workspace's deletion takes its servers.

use std::collections::BTreeMap;

use spool_chat::{
    caps::{Capped, Caps},
    mcp::{McpServer, McpServerStore, McpTransport, SealedSecret, ToolPolicy},
    metadata::Workspaces,
    workspace::{Agent, Workspace},
};
use spool_log::error::Error;
use spool_tests::{Harness, unique_id};

fn server(id: &str, ws: &str, name: &str, created_ms: i64) -> McpServer {
    McpServer {
        id: id.to_owned(),
        workspace_id: ws.to_owned(),
        name: name.to_owned(),
        transport: McpTransport::Http,
        url: Some("https://mcp.example/mcp".to_owned()),
        headers: BTreeMap::from([("Authorization".to_owned(), SealedSecret("v1.sealed".to_owned()))]),
        command: None,
        args: Vec::new(),
        env: BTreeMap::new(),
        tools: BTreeMap::from([("echo".to_owned(), ToolPolicy::Deny)]),
        enabled: true,
        created_ms,
        updated_ms: created_ms,
    }
}

async fn workspace<S: Workspaces>(store: &S, org: &str) -> String {
    let ws = unique_id("ws");
    let builtin = Agent::builtin(unique_id("ag"), ws.clone(), 1);
    store
        .create_workspace(org, &Workspace::new(ws.clone(), "Tools".to_owned(), 1), &builtin)
        .await
        .unwrap();
    ws
}

/// Made, read, listed, renamed and deleted; a name is one server's in its workspace; another
/// organization sees nothing; a workspace's deletion takes its servers.
pub(crate) async fn servers_are_kept_per_workspace_with_unique_names<H: Harness>(harness: &H) {
    let store = harness.metadata().await;
    let (org, other) = (unique_id("org"), unique_id("org"));
    let (ws, ws2) = (workspace(&store, &org).await, workspace(&store, &org).await);
    let (a, b) = (unique_id("mcp"), unique_id("mcp"));

    // WHEN two servers are made, and a third of a taken name, and one in no workspace
    store
        .create_mcp_server(&org, &server(&a, &ws, "docs", 10))
        .await
        .unwrap();
    store
        .create_mcp_server(&org, &server(&b, &ws, "code", 20))
        .await
        .unwrap();
    let taken = store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, "docs", 30))
        .await;
    let nowhere = store
        .create_mcp_server(&org, &server(&unique_id("mcp"), "ws_none", "x", 30))
        .await;

    // THEN the taken name and the missing workspace are refused, and the two are kept
    assert!(matches!(taken, Err(Error::Exists { .. })), "{taken:?}");
    assert!(matches!(nowhere, Err(Error::Missing { .. })), "{nowhere:?}");
    assert_eq!(
        store.mcp_server(&org, &a).await.unwrap(),
        Some(server(&a, &ws, "docs", 10))
    );
    let listed = store.mcp_servers(&org, &ws).await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["docs", "code"]
    );
    // AND the same name is free in another workspace
    store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws2, "docs", 40))
        .await
        .unwrap();
    // AND another organization sees none of them
    assert_eq!(store.mcp_server(&other, &a).await.unwrap(), None);
    assert!(store.mcp_servers(&other, &ws).await.unwrap().is_empty());
    assert!(matches!(
        store.delete_mcp_server(&other, &a).await,
        Err(Error::Missing { .. })
    ));

    // WHEN one is renamed to the other's name, THEN it is refused; to a new one, the old is free
    let clash = store.update_mcp_server(&org, &server(&a, &ws, "code", 10), 10).await;
    assert!(matches!(clash, Err(Error::Exists { .. })), "{clash:?}");
    let mut renamed = server(&a, &ws, "docs2", 10);
    renamed.enabled = false;
    renamed.updated_ms = 11;
    store.update_mcp_server(&org, &renamed, 10).await.unwrap();
    assert_eq!(store.mcp_server(&org, &a).await.unwrap(), Some(renamed));
    store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, "docs", 50))
        .await
        .unwrap();
    let missing = store
        .update_mcp_server(&org, &server("mcp_none", &ws, "none", 1), 1)
        .await;
    assert!(matches!(missing, Err(Error::Missing { .. })), "{missing:?}");

    // WHEN one is deleted, THEN it is gone and its name free
    store.delete_mcp_server(&org, &b).await.unwrap();
    assert_eq!(store.mcp_server(&org, &b).await.unwrap(), None);
    assert!(matches!(
        store.delete_mcp_server(&org, &b).await,
        Err(Error::Missing { .. })
    ));
    store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, "code", 60))
        .await
        .unwrap();

    // WHEN the workspace is deleted, THEN its servers go with it, and the other's stay
    store.delete_workspace(&org, &ws).await.unwrap();
    assert!(store.mcp_servers(&org, &ws).await.unwrap().is_empty());
    assert_eq!(store.mcp_server(&org, &a).await.unwrap(), None);
    assert_eq!(store.mcp_servers(&org, &ws2).await.unwrap().len(), 1);
}

/// The cap counts a workspace's servers, and a delete gives a place back.
pub(crate) async fn the_cap_holds_and_a_delete_frees_a_place<H: Harness>(harness: &H) {
    let caps = Caps {
        mcp_servers_per_workspace: 2,
        ..Caps::default()
    };
    let store = harness.capped_metadata(caps).await;
    let org = unique_id("org");
    let ws = workspace(&store, &org).await;
    let (a, b) = (unique_id("mcp"), unique_id("mcp"));
    store.create_mcp_server(&org, &server(&a, &ws, "a", 1)).await.unwrap();
    store.create_mcp_server(&org, &server(&b, &ws, "b", 2)).await.unwrap();
    let full = store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, "c", 3))
        .await;
    assert_eq!(full.map_err(|e| Capped::reached(&e)), Err(Some(Capped::McpServers)));
    store.delete_mcp_server(&org, &a).await.unwrap();
    store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, "c", 3))
        .await
        .unwrap();
    assert_eq!(store.mcp_servers(&org, &ws).await.unwrap().len(), 2);
}

on_both_backends!(mcp_store:
    servers_are_kept_per_workspace_with_unique_names,
    the_cap_holds_and_a_delete_frees_a_place,
);
