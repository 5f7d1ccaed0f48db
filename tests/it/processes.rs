//! Several processes on one embedded data directory, as several `spool` processes would be.

use std::{process::Command, time::Duration};

use bytes::Bytes;
use spool_log::{
    notify::WaitOutcome,
    port::{StreamReader, StreamWriter},
    stream::{Append, ContentType, CreateStream, Offset, Position},
};
use spool_tests::{EmbeddedHarness, Harness, unique_path};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_sharing_a_data_dir_get_one_gapless_order() {
    // GIVEN a stream in a data directory
    let harness = EmbeddedHarness::new();
    let log = harness.instance().await;
    let path = unique_path("processes");
    log.create(
        &path,
        CreateStream::new(ContentType::parse("application/json").unwrap()),
    )
    .await
    .unwrap();
    // AND a reader in this process waiting for the first message
    let waiter = {
        let (log, path) = (log.clone(), path.clone());
        tokio::spawn(async move { log.wait(&path, Offset::START, Duration::from_secs(60)).await.unwrap() })
    };

    // WHEN four other processes append 250 messages each, at once
    const WRITERS: u64 = 4;
    const COUNT: u64 = 250;
    let dir = harness.dir();
    let children: Vec<_> = (0..WRITERS)
        .map(|w| {
            Command::new(env!("CARGO_BIN_EXE_spool-log-writer"))
                .arg(&dir)
                .arg(path.as_str())
                .arg(w.to_string())
                .arg(COUNT.to_string())
                .spawn()
                .expect("spawn a writer process")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a writer process failed");
    }

    // THEN the waiting reader woke up on another process's append
    assert!(matches!(waiter.await.unwrap(), WaitOutcome::Ready { .. }));
    // AND the stream holds 1000 messages, numbered without gaps, each writer's order kept
    let chunk = log.read(&path, Position::START, Some(usize::MAX)).await.unwrap();
    assert_eq!(chunk.next_offset, Offset::after(WRITERS * COUNT));
    assert_eq!(chunk.messages.len() as u64, WRITERS * COUNT);
    let mut next = [0u64; WRITERS as usize];
    for m in &chunk.messages {
        let v: serde_json::Value = serde_json::from_slice(m).unwrap();
        let (w, i) = (v["w"].as_u64().unwrap() as usize, v["i"].as_u64().unwrap());
        assert_eq!(i, next[w]);
        next[w] += 1;
    }
    // AND this process keeps appending after them
    let ack = log.append(&path, Append::one(Bytes::from("1"))).await.unwrap();
    assert_eq!(ack.next_offset, Offset::after(WRITERS * COUNT + 1));
}

#[tokio::test]
async fn a_restarted_process_finds_everything_it_acknowledged() {
    let harness = EmbeddedHarness::new();
    let path = unique_path("restart");
    let expected: Vec<Bytes> = (0..50).map(|i| Bytes::from(format!("{{\"i\":{i}}}"))).collect();
    {
        let log = harness.instance().await;
        log.create(
            &path,
            CreateStream::new(ContentType::parse("application/json").unwrap()),
        )
        .await
        .unwrap();
        for m in &expected {
            log.append(&path, Append::one(m.clone())).await.unwrap();
        }
    }
    let log = harness.instance().await;
    let chunk = log.read(&path, Position::START, Some(usize::MAX)).await.unwrap();
    assert_eq!(chunk.messages, expected);
}
