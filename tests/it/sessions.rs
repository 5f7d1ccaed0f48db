//! Session records in the metadata store, one contract for both backends.

use spool_chat::{
    listing::{SessionQuery, TurnQuery},
    metadata::Sessions,
    session::{PendingTurn, Session},
    workspace::CliType,
};
use spool_log::error::Error;
use spool_tests::{Harness, unique_id};

fn session(id: &str, workspace: Option<&str>, at: i64) -> Session {
    Session {
        id: id.to_owned(),
        workspace_id: workspace.map(str::to_owned),
        agent_id: Some("ag_1".to_owned()),
        title: format!("Chat {id}"),
        cli_override: None,
        model: None,
        mode: None,
        global: false,
        capabilities: Vec::new(),
        created_by: "key:k1".to_owned(),
        updated_ms: 0,
        created_ms: at,
        last_active_ms: at,
        preview: String::new(),
        pending_turn: None,
        branch_seq: None,
    }
}

async fn list<M: Sessions>(store: &M, org: &str, ws: Option<&str>, limit: usize) -> Vec<Session> {
    let query = SessionQuery::in_workspace(ws, limit);
    store.sessions(org, &query).await.unwrap().items
}

fn ids(list: &[Session]) -> Vec<&str> {
    list.iter().map(|s| s.id.as_str()).collect()
}

/// Sessions are listed per workspace by last activity, and activity only moves forward.
pub(crate) async fn sessions_are_listed_by_last_activity<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, ws) = (unique_id("org"), unique_id("ws"));
    let (s1, s2, s3, loose) = (unique_id("ses"), unique_id("ses"), unique_id("ses"), unique_id("ses"));

    // GIVEN three chats of a workspace made one after the other, and one outside workspaces
    a.create_session(&org, &session(&s1, Some(&ws), 100)).await.unwrap();
    a.create_session(&org, &session(&s2, Some(&ws), 200)).await.unwrap();
    a.create_session(&org, &session(&s3, Some(&ws), 300)).await.unwrap();
    a.create_session(&org, &session(&loose, None, 400)).await.unwrap();
    assert!(matches!(
        a.create_session(&org, &session(&s1, Some(&ws), 1)).await,
        Err(Error::Exists { .. })
    ));
    // THEN the workspace lists its chats newest first, and the loose one apart
    assert_eq!(ids(&list(&b, &org, Some(&ws), 10).await), [&s3, &s2, &s1]);
    assert_eq!(ids(&list(&b, &org, None, 10).await), [&loose]);
    assert_eq!(ids(&list(&b, &org, Some(&ws), 2).await), [&s3, &s2]);

    // WHEN the oldest chat gets a message
    b.touch_session(&org, &s1, 500, "hello there").await.unwrap();
    // THEN it moves to the top with its preview
    let got = list(&a, &org, Some(&ws), 10).await;
    assert_eq!(ids(&got), [&s1, &s3, &s2]);
    assert_eq!((got[0].last_active_ms, got[0].preview.as_str()), (500, "hello there"));
    // AND an older touch (a late writer) changes nothing
    a.touch_session(&org, &s1, 450, "stale").await.unwrap();
    let got = b.session(&org, &s1).await.unwrap().unwrap();
    assert_eq!((got.last_active_ms, got.preview.as_str()), (500, "hello there"));
    // AND touching a chat that does not exist is harmless
    a.touch_session(&org, &unique_id("ses"), 600, "x").await.unwrap();

    // WHEN a client renames it and sets a CLI override
    let mut renamed = got.clone();
    renamed.title = "Renamed".to_owned();
    renamed.cli_override = Some(CliType::Gemini);
    renamed.last_active_ms = 1;
    renamed.preview = "not this".to_owned();
    b.update_session(&org, &renamed).await.unwrap();
    // THEN the fields change and the activity stays
    let got = a.session(&org, &s1).await.unwrap().unwrap();
    assert_eq!(
        (got.title.as_str(), got.cli_override),
        ("Renamed", Some(CliType::Gemini))
    );
    assert_eq!((got.last_active_ms, got.preview.as_str()), (500, "hello there"));

    // AND another organization sees and changes none of it
    let other = unique_id("org");
    assert_eq!(b.session(&other, &s1).await.unwrap(), None);
    assert!(list(&b, &other, Some(&ws), 10).await.is_empty());
    assert!(matches!(
        b.update_session(&other, &renamed).await,
        Err(Error::Missing { .. })
    ));
    assert!(matches!(
        b.delete_session(&other, &s1).await,
        Err(Error::Missing { .. })
    ));
    b.touch_session(&other, &s1, 900, "intruder").await.unwrap();
    assert_eq!(a.session(&org, &s1).await.unwrap().unwrap().preview, "hello there");

    // WHEN it is deleted
    a.delete_session(&org, &s1).await.unwrap();
    // THEN it is gone from reads and lists
    assert_eq!(b.session(&org, &s1).await.unwrap(), None);
    assert_eq!(ids(&list(&b, &org, Some(&ws), 10).await), [&s3, &s2]);
    assert!(matches!(a.delete_session(&org, &s1).await, Err(Error::Missing { .. })));
}

/// One pending turn per session: claimed once, released only by its own turn.
pub(crate) async fn a_session_has_one_pending_turn<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, id) = (unique_id("org"), unique_id("ses"));
    a.create_session(&org, &session(&id, None, 1)).await.unwrap();
    let turn = |t: &str| PendingTurn {
        turn_id: t.to_owned(),
        client_message_id: Some("c-1".to_owned()),
        since_ms: 5,
    };
    // WHEN a turn claims the session, a second cannot
    assert_eq!(a.claim_turn(&org, &id, &turn("t1")).await.unwrap(), Ok(()));
    assert_eq!(b.claim_turn(&org, &id, &turn("t2")).await.unwrap(), Err(turn("t1")));
    assert_eq!(
        b.session(&org, &id).await.unwrap().unwrap().pending_turn,
        Some(turn("t1"))
    );
    // AND a client's update does not clear it
    let mut renamed = b.session(&org, &id).await.unwrap().unwrap();
    renamed.title = "Renamed".to_owned();
    renamed.pending_turn = None;
    b.update_session(&org, &renamed).await.unwrap();
    assert_eq!(
        a.session(&org, &id).await.unwrap().unwrap().pending_turn,
        Some(turn("t1"))
    );
    // WHEN another turn releases it, nothing happens; when its own does, it is free
    assert!(!b.release_turn(&org, &id, "t2").await.unwrap());
    assert!(b.release_turn(&org, &id, "t1").await.unwrap());
    assert_eq!(a.session(&org, &id).await.unwrap().unwrap().pending_turn, None);
    assert_eq!(a.claim_turn(&org, &id, &turn("t2")).await.unwrap(), Ok(()));
    // AND a session that does not exist (or another organization's) cannot be claimed
    assert!(matches!(
        a.claim_turn(&unique_id("org"), &id, &turn("t3")).await,
        Err(Error::Missing { .. })
    ));
    assert!(!a.release_turn(&unique_id("org"), &id, "t2").await.unwrap());
}

/// Turn records move forward only, list newest first, and finished ones expire after 7 days.
pub(crate) async fn turn_records_move_forward_and_expire<H: Harness>(harness: &H) {
    use spool_chat::session::{TurnRecord, TurnStatus};
    let store = harness.metadata().await;
    let (org, id) = (unique_id("org"), unique_id("ses"));
    store.create_session(&org, &session(&id, None, 1)).await.unwrap();
    let status = |store: &H::Metadata| {
        let (org, id) = (org.clone(), id.clone());
        let store = store.clone();
        async move {
            store
                .turns(&org, &TurnQuery::all(&id, 1_000_000))
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|t| (t.turn_id, t.status, t.created_ms))
                .collect::<Vec<_>>()
        }
    };
    // GIVEN a turn queued at 100, then running, then completed at 300
    store
        .record_turn(&org, &id, &TurnRecord::at("t1", 1, TurnStatus::Queued, None, 100))
        .await
        .unwrap();
    store
        .record_turn(&org, &id, &TurnRecord::at("t1", 1, TurnStatus::InProgress, None, 200))
        .await
        .unwrap();
    store
        .record_turn(
            &org,
            &id,
            &TurnRecord::at("t1", 1, TurnStatus::Completed, Some("complete".to_owned()), 300),
        )
        .await
        .unwrap();
    // WHEN a late `queued` and `in_progress` arrive
    store
        .record_turn(&org, &id, &TurnRecord::at("t1", 1, TurnStatus::Queued, None, 400))
        .await
        .unwrap();
    store
        .record_turn(&org, &id, &TurnRecord::at("t1", 1, TurnStatus::InProgress, None, 400))
        .await
        .unwrap();
    // THEN it stays completed, created when it was queued
    assert_eq!(status(&store).await, [("t1".to_owned(), TurnStatus::Completed, 100)]);
    // AND a newer turn lists first
    store
        .record_turn(&org, &id, &TurnRecord::at("t2", 5, TurnStatus::Queued, None, 500))
        .await
        .unwrap();
    let listed = status(&store).await;
    assert_eq!(listed[0].0, "t2");
    // AND a finished record is gone 7 days after it finished; an unfinished one stays
    let week = spool_chat::session::TURN_RECORD_TTL_MS;
    let later = store
        .turns(&org, &TurnQuery::all(&id, 300 + week + 1))
        .await
        .unwrap()
        .items;
    assert_eq!(later.iter().map(|t| t.turn_id.as_str()).collect::<Vec<_>>(), ["t2"]);
    // AND deleting the session deletes its turns
    store.delete_session(&org, &id).await.unwrap();
    assert!(
        store
            .turns(&org, &TurnQuery::all(&id, 0))
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// A step's runs are counted one by one, per step, in one organization's chat only, and the
/// count survives the process (it is in the store).
pub(crate) async fn runs_of_a_step_are_counted_per_step<H: Harness>(harness: &H) {
    let store = harness.metadata().await;
    let (org, id) = (unique_id("org"), unique_id("ses"));
    store.create_session(&org, &session(&id, None, 1)).await.unwrap();
    assert_eq!(store.count_run(&org, &id, "t1.1", 100).await.unwrap(), 1);
    assert_eq!(store.count_run(&org, &id, "t1.1", 200).await.unwrap(), 2);
    // Another step, another chat, another organization: counts of their own.
    assert_eq!(store.count_run(&org, &id, "t1.7", 300).await.unwrap(), 1);
    assert_eq!(store.count_run(&org, "other", "t1.1", 300).await.unwrap(), 1);
    assert_eq!(store.count_run("other_org", &id, "t1.1", 300).await.unwrap(), 1);
    let again = harness.metadata().await;
    assert_eq!(again.count_run(&org, &id, "t1.1", 400).await.unwrap(), 3);
}

/// A chat's attachments are stored with it, listed oldest first, completed once, abandoned only
/// while uploading, and go with it; another organization sees none.
pub(crate) async fn attachments_are_kept_with_their_chat<H: Harness>(harness: &H) {
    use spool_chat::attachment::{Attachment, AttachmentStatus, Attachments};
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, other) = (unique_id("org"), unique_id("org"));
    let chat = unique_id("ses");
    a.create_session(&org, &session(&chat, None, 1)).await.unwrap();
    let file = |id: &str, at: i64| Attachment {
        id: id.to_owned(),
        session_id: chat.clone(),
        filename: format!("{id}.txt"),
        content_type: "text/plain".to_owned(),
        size: 5,
        sha256: None,
        author: "key:k".to_owned(),
        status: AttachmentStatus::Uploading,
        created_ms: at,
        upload_expires_ms: at + 900_000,
        completed_ms: None,
    };
    a.create_attachment(&org, &file("att_2", 20)).await.unwrap();
    a.create_attachment(&org, &file("att_1", 10)).await.unwrap();
    assert!(matches!(
        a.create_attachment(&org, &file("att_1", 30)).await,
        Err(Error::Exists { .. })
    ));
    let listed: Vec<String> = b
        .attachments(&org, &chat)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(listed, ["att_1", "att_2"], "oldest first, from another instance");
    // Completed once, whoever races
    let (one, two) = tokio::join!(
        a.complete_attachment(&org, &chat, "att_1", 40),
        b.complete_attachment(&org, &chat, "att_1", 41)
    );
    let done: Vec<Attachment> = [one.unwrap(), two.unwrap()].into_iter().flatten().collect();
    assert_eq!(done.len(), 1, "one completion wins");
    assert_eq!(done[0].status, AttachmentStatus::Complete);
    let stored = a.attachment(&org, &chat, "att_1").await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.completed_ms),
        (AttachmentStatus::Complete, done[0].completed_ms)
    );
    assert_eq!(a.complete_attachment(&org, &chat, "att_none", 50).await.unwrap(), None);
    // Abandoned (an upload refused) while uploading, never once completed
    assert!(!a.abandon_attachment(&org, &chat, "att_1").await.unwrap(), "completed");
    assert!(a.attachment(&org, &chat, "att_1").await.unwrap().is_some());
    a.create_attachment(&org, &file("att_3", 35)).await.unwrap();
    assert!(a.abandon_attachment(&org, &chat, "att_3").await.unwrap());
    assert_eq!(b.attachment(&org, &chat, "att_3").await.unwrap(), None);
    assert!(
        !b.abandon_attachment(&org, &chat, "att_3").await.unwrap(),
        "gone already"
    );
    assert!(!a.abandon_attachment(&other, &chat, "att_2").await.unwrap());
    // Another organization sees nothing
    assert_eq!(a.attachment(&other, &chat, "att_1").await.unwrap(), None);
    assert!(a.attachments(&other, &chat).await.unwrap().is_empty());
    assert_eq!(a.complete_attachment(&other, &chat, "att_2", 60).await.unwrap(), None);
    // They go with their chat
    a.delete_session(&org, &chat).await.unwrap();
    assert!(a.attachments(&org, &chat).await.unwrap().is_empty());
}

/// A chat's latest branch event is kept beside its record, only ever moving forward, and an
/// update of the record leaves it alone.
pub(crate) async fn a_chats_branch_only_moves_forward<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, chat) = (unique_id("org"), unique_id("ses"));
    a.create_session(&org, &session(&chat, None, 100)).await.unwrap();
    assert_eq!(b.session(&org, &chat).await.unwrap().unwrap().branch_seq, None);
    a.note_branch(&org, &chat, 12).await.unwrap();
    b.note_branch(&org, &chat, 7).await.unwrap();
    assert_eq!(a.session(&org, &chat).await.unwrap().unwrap().branch_seq, Some(12));
    let mut renamed = b.session(&org, &chat).await.unwrap().unwrap();
    renamed.title = "Renamed".to_owned();
    renamed.branch_seq = Some(1);
    b.update_session(&org, &renamed).await.unwrap();
    b.note_branch(&org, &chat, 30).await.unwrap();
    let read = a.session(&org, &chat).await.unwrap().unwrap();
    assert_eq!((read.title.as_str(), read.branch_seq), ("Renamed", Some(30)));
    // Another organization's chat of that id is not touched; a missing chat is no error
    a.note_branch(&unique_id("org"), &chat, 99).await.unwrap();
    a.note_branch(&org, &unique_id("ses"), 99).await.unwrap();
    assert_eq!(b.session(&org, &chat).await.unwrap().unwrap().branch_seq, Some(30));
}

on_both_backends!(
    sessions: sessions_are_listed_by_last_activity,
    a_chats_branch_only_moves_forward,
    a_session_has_one_pending_turn,
    turn_records_move_forward_and_expire,
    runs_of_a_step_are_counted_per_step,
    attachments_are_kept_with_their_chat,
);
