//! The AWS store's chat lists, on the emulator, over chats written before the filter attributes
//! (`by`, `ag`, `tl`) existed: the filters still find them, and page with the new ones.

use aws_sdk_dynamodb::types::AttributeValue;
use spool_chat::{listing::SessionQuery, metadata::Sessions, session::Session};
use spool_tests::{AwsHarness, Harness, unique_id};

fn chat(id: &str, ws: &str, at: i64, title: &str, by: &str, agent: &str) -> Session {
    Session {
        id: id.to_owned(),
        workspace_id: Some(ws.to_owned()),
        agent_id: Some(agent.to_owned()),
        title: title.to_owned(),
        cli_override: None,
        model: None,
        mode: None,
        global: false,
        capabilities: Vec::new(),
        created_by: by.to_owned(),
        updated_ms: 0,
        created_ms: at,
        last_active_ms: at,
        preview: String::new(),
        pending_turn: None,
        branch_seq: None,
    }
}

/// Removes a chat's filter attributes, as an item written by an older build has none.
async fn make_old(harness: &AwsHarness, org: &str, id: &str) {
    let table = harness.config().aws.metadata_table.clone().unwrap();
    harness
        .clients()
        .await
        .dynamodb
        .update_item()
        .table_name(table)
        .key("pk", AttributeValue::S(format!("o#{org}#ses#{id}")))
        .key("sk", AttributeValue::S("session".to_owned()))
        .update_expression("REMOVE #by, ag, tl")
        .expression_attribute_names("#by", "by")
        .send()
        .await
        .unwrap();
}

async fn walk(store: &impl Sessions, org: &str, mut query: SessionQuery) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let page = store.sessions(org, &query).await.unwrap();
        ids.extend(page.items.into_iter().map(|s| s.id));
        match page.next {
            Some(next) => query.after = Some(next),
            None => return ids,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn old_chats_are_filtered_and_paged_with_new_ones() {
    let harness = AwsHarness::new();
    let store = harness.metadata().await;
    let (org, ws) = (unique_id("org"), unique_id("ws"));
    // GIVEN six chats, newest last; the even ones written before the filter attributes
    let ids: Vec<String> = (0..6).map(|_| unique_id("ses")).collect();
    for (i, id) in ids.iter().enumerate() {
        let (by, agent) = if i % 3 == 0 {
            ("key:a", "ag_a")
        } else {
            ("key:b", "ag_b")
        };
        let title = if i < 3 {
            format!("Old Report {i}")
        } else {
            format!("chat {i}")
        };
        let at = 1_000 + i64::try_from(i).unwrap();
        store
            .create_session(&org, &chat(id, &ws, at, &title, by, agent))
            .await
            .unwrap();
        if i % 2 == 0 {
            make_old(&harness, &org, id).await;
        }
    }
    let query = |f: &dyn Fn(&mut SessionQuery)| {
        let mut q = SessionQuery::in_workspace(Some(&ws), 1);
        f(&mut q);
        q
    };
    let newest = |picked: &[usize]| -> Vec<String> { picked.iter().rev().map(|i| ids[*i].clone()).collect() };
    // WHEN they are walked one at a time, by each filter
    // THEN old and new chats alike are found, newest first, once
    assert_eq!(walk(&store, &org, query(&|_| {})).await, newest(&[0, 1, 2, 3, 4, 5]));
    assert_eq!(
        walk(&store, &org, query(&|q| q.created_by = Some("key:a".to_owned()))).await,
        newest(&[0, 3])
    );
    assert_eq!(
        walk(&store, &org, query(&|q| q.agent_id = Some("ag_b".to_owned()))).await,
        newest(&[1, 2, 4, 5])
    );
    assert_eq!(
        walk(&store, &org, query(&|q| q.title_contains = Some("REPORT".to_owned()))).await,
        newest(&[0, 1, 2])
    );
    // AND a renamed old chat gets its attributes back
    let mut renamed = store.session(&org, &ids[4]).await.unwrap().unwrap();
    renamed.title = "A late report".to_owned();
    store.update_session(&org, &renamed).await.unwrap();
    assert_eq!(
        walk(&store, &org, query(&|q| q.title_contains = Some("report".to_owned()))).await,
        newest(&[0, 1, 2, 4])
    );
}
