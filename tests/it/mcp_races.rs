//! MCP servers under concurrent changes and with secrets that do not open, on both backends:
//! an update applies only to the version it read (no name held by two servers, no change
//! lost), and the catalog leaves out a server it cannot open rather than failing the others.

use std::{collections::BTreeMap, sync::Arc};

use spool_chat::{
    mcp::{
        McpCatalog, McpServer, McpServerStore, McpTransport, SealedSecret, SecretBox, ToolPolicy, is_mcp_server_changed,
    },
    metadata::{Metadata, Workspaces},
    service::{McpServerEdit, McpServerService, NewMcpServer},
    workspace::{Agent, Workspace},
};
use spool_log::{clock::SystemClock, error::Error};
use spool_tests::{Harness, unique_id};

use crate::support::DATA_KEY;

async fn workspace<S: Workspaces>(store: &S, org: &str) -> String {
    let ws = unique_id("ws");
    let builtin = Agent::builtin(unique_id("ag"), ws.clone(), 1);
    store
        .create_workspace(org, &Workspace::new(ws.clone(), "Tools".to_owned(), 1), &builtin)
        .await
        .unwrap();
    ws
}

fn server(id: &str, ws: &str, name: &str, updated_ms: i64) -> McpServer {
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
        tools: BTreeMap::new(),
        enabled: true,
        created_ms: 10,
        updated_ms,
    }
}

fn service<M: Metadata + 'static>(metadata: M, key: Option<[u8; 32]>) -> McpServerService {
    McpServerService::new(
        Arc::new(metadata),
        Arc::new(SystemClock),
        key.map(|k| Arc::new(SecretBox::new(&k))),
        true,
    )
}

/// Two renames of one version race: one applies, the other is refused as changed meanwhile,
/// and the names held are exactly the winner's (the old one and the loser's are free).
pub(crate) async fn an_update_applies_only_to_the_version_it_read<H: Harness>(harness: &H) {
    let store = harness.metadata().await;
    let org = unique_id("org");
    let ws = workspace(&store, &org).await;
    let id = unique_id("mcp");
    store
        .create_mcp_server(&org, &server(&id, &ws, "docs", 10))
        .await
        .unwrap();

    // WHEN two changes of the version read (updated_ms 10) race, each a rename
    let (alpha, beta) = (server(&id, &ws, "alpha", 11), server(&id, &ws, "beta", 12));
    let (a, b) = tokio::join!(
        store.update_mcp_server(&org, &alpha, 10),
        store.update_mcp_server(&org, &beta, 10)
    );

    // THEN exactly one applied, the other was refused as changed meanwhile
    let (won, lost) = match (a, b) {
        (Ok(()), Err(e)) => (alpha, (beta, e)),
        (Err(e), Ok(())) => (beta, (alpha, e)),
        other => panic!("one of two racing updates must apply: {other:?}"),
    };
    assert!(is_mcp_server_changed(&lost.1), "{:?}", lost.1);
    assert_eq!(store.mcp_server(&org, &id).await.unwrap(), Some(won.clone()));
    // AND the old name and the loser's are free, the winner's is held
    for free in ["docs", lost.0.name.as_str()] {
        store
            .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, free, 1))
            .await
            .unwrap();
    }
    let taken = store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, &won.name, 1))
        .await;
    assert!(matches!(taken, Err(Error::Exists { .. })), "{taken:?}");

    // WHEN a change of a version that is no longer the stored one comes, THEN it is refused
    let stale = store.update_mcp_server(&org, &server(&id, &ws, "gamma", 13), 10).await;
    assert!(matches!(&stale, Err(e) if is_mcp_server_changed(e)), "{stale:?}");
    assert_eq!(store.mcp_server(&org, &id).await.unwrap(), Some(won));
    // AND one of a server that is not there is missing
    let missing = store.update_mcp_server(&org, &server("mcp_none", &ws, "x", 2), 1).await;
    assert!(matches!(missing, Err(Error::Missing { .. })), "{missing:?}");
}

/// Concurrent edits through the service each set one tool's policy and one renames: none is
/// lost (each that answered success is in the stored server) and the name is held once.
pub(crate) async fn concurrent_edits_lose_nothing<H: Harness>(harness: &H)
where
    H::Metadata: Metadata + 'static,
{
    let store = harness.metadata().await;
    let org = unique_id("org");
    let ws = workspace(&store, &org).await;
    let registry = Arc::new(service(harness.metadata().await, Some(DATA_KEY)));
    let made = registry
        .create(
            &org,
            &ws,
            NewMcpServer {
                name: "docs".to_owned(),
                transport: Some(McpTransport::Http),
                url: Some("https://mcp.example/mcp".to_owned()),
                ..NewMcpServer::default()
            },
        )
        .await
        .unwrap();
    let id = made.server.id.clone();

    // WHEN two edits race, one setting a tool's policy and one renaming
    let policy = McpServerEdit {
        tools: BTreeMap::from([("echo".to_owned(), Some(ToolPolicy::Deny))]),
        ..McpServerEdit::default()
    };
    let rename = McpServerEdit {
        name: Some("renamed".to_owned()),
        ..McpServerEdit::default()
    };
    let (p, r) = tokio::join!(registry.update(&org, &id, policy), registry.update(&org, &id, rename));

    // THEN both applied (the service reads again once when the other came first)
    p.unwrap();
    r.unwrap();
    let stored = store.mcp_server(&org, &id).await.unwrap().unwrap();
    assert_eq!(stored.name, "renamed");
    assert_eq!(stored.tools.get("echo"), Some(&ToolPolicy::Deny));
    // AND the old name is free, the new one held once
    let listed = registry.servers(&org, &ws).await.unwrap();
    assert_eq!(listed.len(), 1);
    let again = store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, "renamed", 1))
        .await;
    assert!(matches!(again, Err(Error::Exists { .. })), "{again:?}");
    store
        .create_mcp_server(&org, &server(&unique_id("mcp"), &ws, "docs", 1))
        .await
        .unwrap();
}

/// A server whose secrets the deployment cannot open (no data key, or another key) is left out
/// of the catalog; the workspace's other servers are still there.
pub(crate) async fn the_catalog_leaves_out_a_server_it_cannot_open<H: Harness>(harness: &H)
where
    H::Metadata: Metadata + 'static,
{
    let store = harness.metadata().await;
    let org = unique_id("org");
    let ws = workspace(&store, &org).await;
    let registry = service(harness.metadata().await, Some(DATA_KEY));
    let sealed = NewMcpServer {
        name: "sealed".to_owned(),
        transport: Some(McpTransport::Http),
        url: Some("https://mcp.example/mcp".to_owned()),
        headers: BTreeMap::from([("Authorization".to_owned(), "Bearer s3cr3t".to_owned())]),
        ..NewMcpServer::default()
    };
    let plain = NewMcpServer {
        name: "plain".to_owned(),
        transport: Some(McpTransport::Http),
        url: Some("https://mcp.example/mcp".to_owned()),
        ..NewMcpServer::default()
    };
    registry.create(&org, &ws, sealed).await.unwrap();
    registry.create(&org, &ws, plain).await.unwrap();
    let names =
        |endpoints: Vec<spool_chat::mcp::McpEndpoint>| endpoints.into_iter().map(|e| e.name).collect::<Vec<_>>();
    assert_eq!(names(registry.endpoints(&org, &ws).await.unwrap()), ["sealed", "plain"]);

    // WHEN the catalog has no data key, or another one
    for key in [None, Some([7; 32])] {
        let catalog = service(harness.metadata().await, key);
        // THEN the server it cannot open is left out and the other is there
        assert_eq!(names(catalog.endpoints(&org, &ws).await.unwrap()), ["plain"], "{key:?}");
    }
}

on_both_backends!(mcp_races:
    an_update_applies_only_to_the_version_it_read,
    concurrent_edits_lose_nothing,
    the_catalog_leaves_out_a_server_it_cannot_open,
);
