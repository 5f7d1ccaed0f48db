//! The AWS store's cap counters, on the emulator, against records no transaction of theirs
//! saw: records stored before the counters existed (a counter is made from a strongly
//! consistent count of them), and files whose upload expired (DynamoDB's TTL deletes them
//! without a transaction, so a full counter is counted again).

use aws_sdk_dynamodb::types::AttributeValue;
use spool_chat::{
    attachment::{Attachment, AttachmentStatus, Attachments},
    caps::{Capped, Caps},
    webhook::{Hook, HookEvent, HookStore},
};
use spool_commands::{CommandScope, Commands, StoredCommand};
use spool_log::error::Error;
use spool_tests::{AwsHarness, Harness, unique_id};

/// Deletes an item of the metadata table as something outside Spool's transactions would.
async fn remove(harness: &AwsHarness, pk: String, sk: &str) {
    let table = harness.config().aws.metadata_table.clone().unwrap();
    harness
        .clients()
        .await
        .dynamodb
        .delete_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk))
        .key("sk", AttributeValue::S(sk.to_owned()))
        .send()
        .await
        .unwrap();
}

fn hook(ws: &str) -> Hook {
    Hook {
        id: unique_id("wh"),
        workspace_id: ws.to_owned(),
        url: "https://example.com/hook".to_owned(),
        events: HookEvent::ALL.to_vec(),
        enabled: true,
        description: None,
        secret: "whsec_c2VjcmV0".to_owned(),
        created_ms: 1,
    }
}

fn command(name: &str, bytes: usize) -> StoredCommand {
    StoredCommand {
        name: name.to_owned(),
        markdown: "m".repeat(bytes),
        updated_ms: 1,
    }
}

fn capped(result: Result<(), Error>) -> Capped {
    match result {
        Err(e) => Capped::reached(&e).unwrap_or_else(|| panic!("expected a reached cap, got {e:?}")),
        other => panic!("expected a reached cap, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_counter_is_made_from_the_records_before_it() {
    let harness = AwsHarness::new();
    let caps = Caps {
        hooks_per_workspace: 5,
        command_bytes_per_scope: 1_000,
        ..Caps::default()
    };
    let store = harness.capped_metadata(caps).await;
    let (org, ws) = (unique_id("org"), unique_id("ws"));
    // GIVEN three endpoints and three global commands (600 bytes) stored before their
    // counters existed
    for _ in 0..3 {
        store.create_hook(&org, &hook(&ws)).await.unwrap();
    }
    for (name, bytes) in [("a", 100), ("b", 200), ("c", 300)] {
        store
            .put_command(&org, &CommandScope::Global, &command(name, bytes))
            .await
            .unwrap();
    }
    remove(&harness, format!("o#{org}#ws#{ws}"), "cap#hooks").await;
    remove(&harness, format!("o#{org}#cmds"), "cap#cmds").await;
    remove(&harness, format!("o#{org}"), "cap#cmds").await;

    // WHEN ten endpoints are made at once
    let hooks: Vec<Hook> = (0..10).map(|_| hook(&ws)).collect();
    let results = futures_util::future::join_all(hooks.iter().map(|h| store.create_hook(&org, h))).await;

    // THEN the three from before count: two are made, eight refused
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
    for refused in results.into_iter().filter(Result::is_err) {
        assert_eq!(capped(refused), Capped::Hooks);
    }
    assert_eq!(store.hooks(&org, &ws).await.unwrap().len(), 5);

    // AND the commands' bytes from before count: 400 more fill the scope, a byte more is
    // refused, and a replaced command counts with its new size
    let put = |name: &'static str, bytes: usize| {
        let (store, org) = (&store, &org);
        async move {
            store
                .put_command(org, &CommandScope::Global, &command(name, bytes))
                .await
        }
    };
    put("d", 400).await.unwrap();
    assert_eq!(capped(put("e", 1).await), Capped::CommandBytes);
    put("a", 50).await.unwrap();
    put("e", 50).await.unwrap();
    assert_eq!(capped(put("f", 1).await), Capped::CommandBytes);
    assert!(store.delete_command(&org, &CommandScope::Global, "e").await.unwrap());
    put("f", 50).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_whose_upload_expired_give_their_places_back() {
    let harness = AwsHarness::new();
    let store = harness
        .capped_metadata(Caps {
            attachments_per_chat: 3,
            ..Caps::default()
        })
        .await;
    let (org, chat) = (unique_id("org"), unique_id("ses"));
    let file = || Attachment {
        id: unique_id("att"),
        session_id: chat.clone(),
        filename: "a.txt".to_owned(),
        content_type: "text/plain".to_owned(),
        size: 5,
        sha256: None,
        author: "key:k".to_owned(),
        status: AttachmentStatus::Uploading,
        created_ms: 1,
        upload_expires_ms: 2,
        completed_ms: None,
    };
    // GIVEN a chat with its three files, one of whose upload expired and was removed by
    // DynamoDB's TTL (which no counter sees)
    let files = [file(), file(), file()];
    for f in &files {
        store.create_attachment(&org, f).await.unwrap();
    }
    assert_eq!(
        capped(store.create_attachment(&org, &file()).await),
        Capped::Attachments
    );
    remove(&harness, format!("o#{org}#ses#{chat}"), &format!("att#{}", files[0].id)).await;

    // WHEN two more are declared
    let first = store.create_attachment(&org, &file()).await;
    let second = store.create_attachment(&org, &file()).await;

    // THEN the expired one's place is taken once
    first.unwrap();
    assert_eq!(capped(second), Capped::Attachments);
    assert_eq!(store.attachments(&org, &chat).await.unwrap().len(), 3);
}
