//! Lists in pages over real HTTP, on both backends: every chat, task and turn is reachable
//! through `next_cursor`, in order and once; the filters page as well; a cursor that is not
//! this list's is a `400`, and never shows another organization anything.

use std::collections::HashSet;

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::{
    listing::{After, SessionQuery, encode_cursor},
    metadata::Sessions,
    session::{TurnRecord, TurnStatus},
};
use spool_tests::Harness;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

use crate::support::{Api, agent_client, org_of, setup};

/// Walks `path` (with its query) by `next_cursor`, `limit` at a time: the ids of `field`, in
/// the order listed, and the number of pages.
async fn walk(api: &Api, path: &str, field: &str, id: &str) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}&cursor={c}"),
            None => path.to_owned(),
        };
        let page = api.ok(Method::GET, &url, None).await;
        pages += 1;
        ids.extend(
            page[field]
                .as_array()
                .unwrap()
                .iter()
                .map(|item| item[id].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (ids, pages),
        }
        assert!(pages < 1000, "{path} never ends");
    }
}

fn ms(v: &Value, field: &str) -> i128 {
    OffsetDateTime::parse(v[field].as_str().unwrap(), &Rfc3339)
        .unwrap()
        .unix_timestamp_nanos()
        / 1_000_000
}

/// The ids of `items`, newest first by `field` and then by id, descending.
fn newest_first(items: &[Value], field: &str) -> Vec<String> {
    let mut keyed: Vec<(i128, String)> = items
        .iter()
        .map(|c| (ms(c, field), c["id"].as_str().unwrap().to_owned()))
        .collect();
    keyed.sort_by(|a, b| b.cmp(a));
    keyed.into_iter().map(|(_, id)| id).collect()
}

fn once(ids: &[String]) -> bool {
    ids.iter().collect::<HashSet<_>>().len() == ids.len()
}

/// The status and error message of a refused GET.
async fn refused(api: &Api, path: &str) -> (u16, String) {
    let (status, body) = api.call(Method::GET, path, None).await;
    (
        status.as_u16(),
        body["error"]["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// 250 chats: every one reachable through the cursor, in order, none twice; the filters
/// (maker, agent, title, workspace) page too; a cursor that is not the list's is refused.
pub(crate) async fn every_chat_is_reachable_through_the_cursor<H: Harness>(harness: &H) {
    let (api, other, _) = setup(harness).await;
    let agent = agent_client(harness, &api).await;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Many" })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let helper = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(json!({ "name": "Helper" })),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // GIVEN 250 chats in a workspace: every 7th made by an agent's key, every 5th answered by
    // Helper, every 10th titled with "Zebra", one with `%_` in its title
    let mut chats = Vec::new();
    for i in 0..250 {
        let maker = if i % 7 == 0 { &agent } else { &api };
        let title = match i {
            13 => "100%_done".to_owned(),
            i if i % 10 == 0 => format!("Chat {i:03} Zebra"),
            i => format!("Chat {i:03}"),
        };
        let mut body = json!({ "workspace_id": ws, "title": title });
        if i % 5 == 0 {
            body["agent_id"] = json!(helper);
        }
        chats.push(maker.ok(Method::POST, "/v1/sessions", Some(body)).await);
    }
    // AND three chats outside workspaces
    let mut loose = Vec::new();
    for _ in 0..3 {
        let chat = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
        loose.push(chat["id"].as_str().unwrap().to_owned());
    }
    let expected = newest_first(&chats, "last_active_at");

    // WHEN the workspace's chats are walked 37 at a time
    let (ids, pages) = walk(
        &api,
        &format!("/v1/sessions?workspace_id={ws}&limit=37"),
        "sessions",
        "id",
    )
    .await;
    // THEN every chat comes once, newest activity first, in 7 pages
    assert!(once(&ids), "a chat came twice");
    assert_eq!(ids.len(), 250);
    assert_eq!(ids, expected);
    assert_eq!(pages, 250usize.div_ceil(37));
    // AND the first page without a limit is the 100 newest, as before paging
    let first = api
        .ok(Method::GET, &format!("/v1/sessions?workspace_id={ws}"), None)
        .await;
    assert_eq!(first["sessions"].as_array().unwrap().len(), 100);
    assert!(first["next_cursor"].is_string());

    // AND each filter pages too, in the same order
    let only = |keep: &dyn Fn(usize) -> bool| -> Vec<String> {
        let kept: HashSet<&str> = (0..250)
            .filter(|i| keep(*i))
            .map(|i| chats[i]["id"].as_str().unwrap())
            .collect();
        expected
            .iter()
            .filter(|id| kept.contains(id.as_str()))
            .cloned()
            .collect()
    };
    let maker = agent.ok(Method::POST, "/v1/sessions", Some(json!({}))).await["created_by"]
        .as_str()
        .unwrap()
        .to_owned();
    let by_agent_key = walk(
        &api,
        &format!("/v1/sessions?workspace_id={ws}&created_by={maker}&limit=5"),
        "sessions",
        "id",
    )
    .await
    .0;
    assert_eq!(by_agent_key, only(&|i| i % 7 == 0));
    let helped = walk(
        &api,
        &format!("/v1/sessions?workspace_id={ws}&agent_id={helper}&limit=8"),
        "sessions",
        "id",
    )
    .await
    .0;
    assert_eq!(helped, only(&|i| i % 5 == 0));
    let zebras = walk(
        &api,
        &format!("/v1/sessions?workspace_id={ws}&q=zEbRa&limit=4"),
        "sessions",
        "id",
    )
    .await;
    assert_eq!(zebras.0, only(&|i| i % 10 == 0));
    assert_eq!(zebras.1, 7, "25 chats, 4 a page");
    let both = walk(
        &api,
        &format!("/v1/sessions?workspace_id={ws}&q=zebra&agent_id={helper}&created_by={maker}&limit=1"),
        "sessions",
        "id",
    )
    .await
    .0;
    assert_eq!(both, only(&|i| i % 70 == 0));
    // AND a title search takes `%` and `_` as themselves
    let odd = walk(
        &api,
        &format!("/v1/sessions?workspace_id={ws}&q=%25_"),
        "sessions",
        "id",
    )
    .await
    .0;
    assert_eq!(odd, only(&|i| i == 13));
    // AND the chats outside workspaces list apart (with the global chat, if made)
    let (outside, _) = walk(&api, "/v1/sessions?limit=2", "sessions", "id").await;
    assert!(loose.iter().all(|id| outside.contains(id)), "{outside:?}");
    assert!(outside.iter().all(|id| !expected.contains(id)));

    // WHEN a cursor is malformed, or sent with other filters, or the limit is out of range
    let cursor = first["next_cursor"].as_str().unwrap();
    for path in [
        format!("/v1/sessions?workspace_id={ws}&cursor=not-a-cursor"),
        format!("/v1/sessions?workspace_id={ws}&cursor=%00%01"),
        format!("/v1/sessions?workspace_id={ws}&q=zebra&cursor={cursor}"),
        format!("/v1/sessions?cursor={cursor}"),
        format!("/v1/sessions?workspace_id={ws}&limit=0"),
        format!("/v1/sessions?workspace_id={ws}&limit=1001"),
        format!("/v1/sessions?workspace_id={ws}&q={}", "x".repeat(201)),
    ] {
        // THEN it is a 400 that says what to do
        let (status, message) = refused(&api, &path).await;
        assert_eq!(status, 400, "{path}: {message}");
        assert!(!message.is_empty());
    }
    let (_, message) = refused(&api, &format!("/v1/sessions?workspace_id={ws}&q=zebra&cursor={cursor}")).await;
    assert!(message.contains("another list"), "{message}");
    // AND a cursor made by hand for this list (the fingerprint is no secret) only positions the
    // walk in the caller's own chats, whatever it names
    let org = org_of(&api);
    let scope = SessionQuery::in_workspace(Some(&ws), 100);
    for (after, count) in [
        (After::of(i64::MIN, &"z".repeat(256)), 0),
        (After::of(i64::MAX, "\u{0}"), 100),
        (After::of(-1, "ses_"), 0),
    ] {
        let forged = encode_cursor(&scope.scope(&org), &after);
        let page = api
            .ok(
                Method::GET,
                &format!("/v1/sessions?workspace_id={ws}&cursor={forged}"),
                None,
            )
            .await;
        assert_eq!(page["sessions"].as_array().unwrap().len(), count, "{after:?}");
    }
    // AND another organization's request with the cursor is refused and shows nothing
    let (status, message) = refused(&other, &format!("/v1/sessions?workspace_id={ws}&cursor={cursor}")).await;
    assert_eq!(status, 400, "{message}");
    let theirs = other
        .ok(Method::GET, &format!("/v1/sessions?workspace_id={ws}"), None)
        .await;
    assert_eq!(theirs["sessions"], json!([]));
    assert_eq!(theirs["next_cursor"], Value::Null);
}

/// A workspace's tasks and a chat's turns page the same way.
pub(crate) async fn tasks_and_turns_page_by_cursor<H: Harness>(harness: &H) {
    let (api, other, _) = setup(harness).await;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Tasks" })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // GIVEN 30 tasks, every third from the chat
    let mut tasks = Vec::new();
    for i in 0..30 {
        let mut body = json!({ "title": format!("Task {i}") });
        if i % 3 == 0 {
            body["session_id"] = json!(chat);
        }
        tasks.push(
            api.ok(Method::POST, &format!("/v1/workspaces/{ws}/tasks"), Some(body))
                .await,
        );
    }
    let expected = newest_first(&tasks, "created_at");
    // WHEN they are walked 7 at a time
    let (ids, pages) = walk(&api, &format!("/v1/workspaces/{ws}/tasks?limit=7"), "tasks", "id").await;
    // THEN each comes once, newest first
    assert!(once(&ids));
    assert_eq!((ids.clone(), pages), (expected.clone(), 5));
    // AND the chat's tasks page too
    let from_chat: HashSet<&str> = tasks
        .iter()
        .filter(|t| t["session_id"] == json!(chat))
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    let (of_chat, _) = walk(
        &api,
        &format!("/v1/workspaces/{ws}/tasks?session_id={chat}&limit=3"),
        "tasks",
        "id",
    )
    .await;
    let want: Vec<String> = expected
        .iter()
        .filter(|id| from_chat.contains(id.as_str()))
        .cloned()
        .collect();
    assert_eq!(of_chat, want);
    // AND a cursor of the chats list, or a bad limit, is refused
    let page = api
        .ok(Method::GET, &format!("/v1/workspaces/{ws}/tasks?limit=2"), None)
        .await;
    let cursor = page["next_cursor"].as_str().unwrap();
    assert_eq!(
        refused(&api, &format!("/v1/workspaces/{ws}/tasks?limit=0")).await.0,
        400
    );
    assert_eq!(
        refused(&api, &format!("/v1/sessions?workspace_id={ws}&cursor={cursor}"))
            .await
            .0,
        400
    );
    assert_eq!(
        refused(
            &api,
            &format!("/v1/workspaces/{ws}/tasks?session_id={chat}&cursor={cursor}")
        )
        .await
        .0,
        400
    );
    // AND another organization's request for the workspace is a 404
    assert_eq!(
        refused(&other, &format!("/v1/workspaces/{ws}/tasks?cursor={cursor}"))
            .await
            .0,
        404
    );

    // GIVEN 23 turn records of the chat, some at the same time, every fourth failed
    let store = harness.metadata().await;
    let org = org_of(&api);
    // (Now, so the failed ones are not past their expiry.)
    let base = i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap();
    for i in 0..23i64 {
        let status = if i % 4 == 0 {
            TurnStatus::Failed
        } else {
            TurnStatus::Queued
        };
        let turn = TurnRecord::at(&format!("turn_{i:02}"), 1, status, None, base + i / 2);
        store.record_turn(&org, &chat, &turn).await.unwrap();
    }
    let mut expected: Vec<(i64, String)> = (0..23i64).map(|i| (base + i / 2, format!("turn_{i:02}"))).collect();
    expected.sort_by(|a, b| b.cmp(a));
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
    // WHEN they are walked 5 at a time
    let (ids, pages) = walk(&api, &format!("/v1/sessions/{chat}/turns?limit=5"), "turns", "turn_id").await;
    // THEN each comes once, newest first, ties by id
    assert_eq!((ids, pages), (expected.clone(), 5));
    // AND the failed ones page apart
    let (failed, _) = walk(
        &api,
        &format!("/v1/sessions/{chat}/turns?status=failed&limit=2"),
        "turns",
        "turn_id",
    )
    .await;
    let want: Vec<String> = expected
        .iter()
        .filter(|id| id[5..].parse::<u32>().unwrap() % 4 == 0)
        .cloned()
        .collect();
    assert_eq!(failed, want);
    // AND a bad cursor is a 400, another organization's request a 404
    assert_eq!(
        refused(&api, &format!("/v1/sessions/{chat}/turns?cursor=AAAA")).await.0,
        400
    );
    assert_eq!(refused(&other, &format!("/v1/sessions/{chat}/turns")).await.0, 404);
}

on_both_backends!(paging:
    every_chat_is_reachable_through_the_cursor,
    tasks_and_turns_page_by_cursor,
);
