//! The stream-log contract: one suite, run against the embedded adapter and against the AWS
//! adapter on the emulator. Each test is a generic function over a [`Harness`]; the macro at the
//! bottom instantiates the suite once per backend.

use std::time::Duration;

use bytes::Bytes;
use spool_log::{
    error::Error,
    failpoint::{SEAL_AFTER_COMMIT, SEAL_AFTER_PAGE_WRITE},
    notify::WaitOutcome,
    port::{StreamLog, StreamReader, StreamSealer, StreamWriter},
    stream::{
        Append, ContentType, CreateStream, Created, Expiry, Offset, Position, ProducerClaim, SealMode, StreamPath,
    },
};
use spool_tests::{Harness, test_limits, unique_path};

fn json() -> CreateStream {
    CreateStream::new(ContentType::parse("application/json").unwrap())
}

fn msg(value: serde_json::Value) -> Bytes {
    Bytes::from(value.to_string())
}

/// Messages of varied sizes, some larger than a test page.
fn varied(n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| msg(serde_json::json!({ "i": i, "pad": "x".repeat((i * 37) % 150) })))
        .collect()
}

/// Appends `messages` in batches of 1, 2, …, 7 messages.
async fn append_in_batches(log: &impl StreamLog, path: &StreamPath, messages: &[Bytes]) {
    let mut rest = messages;
    let mut size = 1;
    while !rest.is_empty() {
        let (batch, tail) = rest.split_at(size.min(rest.len()));
        log.append(path, Append::messages(batch.iter().cloned())).await.unwrap();
        rest = tail;
        size = size % 7 + 1;
    }
}

/// Every message after `from`, following `next_offset` until up to date.
async fn read_all(log: &impl StreamLog, path: &StreamPath, from: Offset, max_bytes: Option<usize>) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut at = from;
    for _ in 0..100_000 {
        let chunk = log.read(path, Position::At(at), max_bytes).await.unwrap();
        assert_eq!(chunk.start, at);
        assert_eq!(chunk.next_offset.seq(), at.seq() + chunk.messages.len() as u64);
        out.extend(chunk.messages);
        at = chunk.next_offset;
        if chunk.up_to_date {
            return out;
        }
        assert!(
            at.seq() > chunk.start.seq(),
            "a read that is not up to date must make progress"
        );
    }
    panic!("read did not reach the tail");
}

pub(crate) async fn concurrent_writers_get_one_gapless_order<H: Harness>(h: &H) {
    // GIVEN a stream and 8 writers, each its own instance (as 8 processes or Lambdas would be)
    let path = unique_path("concurrent");
    h.instance().await.create(&path, json()).await.unwrap();
    const WRITERS: u64 = 8;
    const APPENDS: u64 = 500;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let log = h.instance().await;
        let path = path.clone();
        tasks.spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..APPENDS {
                let ack = log
                    .append(&path, Append::one(msg(serde_json::json!({ "w": w, "i": i }))))
                    .await
                    .unwrap();
                seqs.push(ack.appended.unwrap().first);
            }
            seqs
        });
    }
    // WHEN each appends 500 messages at once
    let mut taken: Vec<u64> = Vec::new();
    while let Some(seqs) = tasks.join_next().await {
        let seqs = seqs.unwrap();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "a writer's acks must be in its order"
        );
        taken.extend(seqs);
    }
    // THEN the acks took exactly the numbers 1..=4000
    taken.sort_unstable();
    assert_eq!(taken, (1..=WRITERS * APPENDS).collect::<Vec<_>>());
    // AND the stream holds 4000 messages in which every writer's own order is kept
    let log = h.instance().await;
    assert_eq!(
        log.metadata(&path).await.unwrap().tail,
        Offset::after(WRITERS * APPENDS)
    );
    let messages = read_all(&log, &path, Offset::START, None).await;
    assert_eq!(messages.len() as u64, WRITERS * APPENDS);
    let mut next = vec![0u64; WRITERS as usize];
    for m in &messages {
        let v: serde_json::Value = serde_json::from_slice(m).unwrap();
        let (w, i) = (v["w"].as_u64().unwrap() as usize, v["i"].as_u64().unwrap());
        assert_eq!(i, next[w], "writer {w} out of order");
        next[w] += 1;
    }
    assert!(next.iter().all(|n| *n == APPENDS));
}

fn claim(epoch: u64, seq: u64) -> Option<ProducerClaim> {
    Some(ProducerClaim {
        id: "producer-1".to_owned(),
        epoch,
        seq,
    })
}

fn produced(epoch: u64, seq: u64, value: &str) -> Append {
    Append {
        producer: claim(epoch, seq),
        ..Append::one(msg(serde_json::json!(value)))
    }
}

pub(crate) async fn a_retried_producer_batch_is_never_appended_twice<H: Harness>(h: &H) {
    let path = unique_path("producer");
    let a = h.instance().await;
    a.create(&path, json()).await.unwrap();

    // GIVEN a producer's first batch, acknowledged
    let first = a.append(&path, produced(0, 0, "a")).await.unwrap();
    assert!(!first.duplicate);
    assert_eq!(first.appended.map(|r| r.first), Some(1));

    // WHEN it is retried through another instance
    let b = h.instance().await;
    let retry = b.append(&path, produced(0, 0, "a")).await.unwrap();
    // THEN it is acknowledged as a duplicate and nothing is appended
    assert!(retry.duplicate);
    assert_eq!(retry.appended, None);
    assert_eq!(retry.producer.map(|p| (p.epoch, p.seq)), Some((0, 0)));

    // WHEN four instances send the next batch at the same time
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let log = h.instance().await;
        let path = path.clone();
        tasks.spawn(async move { log.append(&path, produced(0, 1, "b")).await.unwrap() });
    }
    let mut appended = 0;
    while let Some(ack) = tasks.join_next().await {
        let ack = ack.unwrap();
        appended += usize::from(ack.appended.is_some());
        assert_eq!(ack.next_offset, Offset::after(2));
    }
    // THEN exactly one appended it
    assert_eq!(appended, 1);
    let all = read_all(&a, &path, Offset::START, None).await;
    assert_eq!(all, vec![msg(serde_json::json!("a")), msg(serde_json::json!("b"))]);

    // AND a zombie's stale epoch is fenced and a gap is refused, appending nothing
    b.append(&path, produced(1, 0, "c")).await.unwrap();
    assert!(matches!(
        a.append(&path, produced(0, 2, "zombie")).await,
        Err(Error::StaleProducerEpoch { current: 1, got: 0 })
    ));
    assert!(matches!(
        a.append(&path, produced(1, 5, "gap")).await,
        Err(Error::ProducerSeqGap {
            expected: 1,
            received: 5
        })
    ));
    assert!(matches!(
        a.append(&path, produced(2, 3, "bad epoch start")).await,
        Err(Error::InvalidProducerEpochSeq { epoch: 2, seq: 3 })
    ));
    assert_eq!(a.metadata(&path).await.unwrap().tail, Offset::after(3));

    // AND the batch that closed the stream is acknowledged when retried
    let mut closing = produced(1, 1, "last");
    closing.close = true;
    a.append(&path, closing.clone()).await.unwrap();
    let again = b.append(&path, closing).await.unwrap();
    assert!(again.duplicate && again.closed);
    assert!(matches!(
        b.append(&path, produced(1, 2, "late")).await,
        Err(Error::Closed { .. })
    ));
    assert_eq!(a.metadata(&path).await.unwrap().tail, Offset::after(4));
}

pub(crate) async fn a_crash_between_the_write_and_sealing_loses_nothing<H: Harness>(h: &H) {
    let path = unique_path("crash");
    let expected = varied(150);
    {
        // GIVEN acknowledged appends, and a process that dies before any sealing
        let log = h.instance().await;
        log.create(&path, json()).await.unwrap();
        append_in_batches(&log, &path, &expected).await;
    }
    // THEN another process reads every message
    let log = h.instance().await;
    assert_eq!(read_all(&log, &path, Offset::START, None).await, expected);

    // WHEN sealing crashes after writing its first page but before recording it
    h.fail_points().arm(SEAL_AFTER_PAGE_WRITE);
    let crashed = log.seal(&path, SealMode::Final).await;
    h.fail_points().disarm(SEAL_AFTER_PAGE_WRITE);
    assert!(matches!(crashed, Err(Error::Injected { .. })), "{crashed:?}");
    let orphaned = h.page_files(&log, &path).await.unwrap();
    assert_eq!(orphaned.len(), 1, "one page was written before the crash");
    assert_eq!(log.metadata(&path).await.unwrap().sealed, Offset::START);
    // THEN nothing is lost
    assert_eq!(read_all(&log, &path, Offset::START, None).await, expected);

    // WHEN sealing runs again, in another process
    let report = h.instance().await.seal(&path, SealMode::Final).await.unwrap();
    // THEN it adopts the orphaned page and writes the rest
    assert_eq!(report.adopted.len(), 1);
    assert!(!report.written.is_empty());
    assert_eq!(report.sealed_through, Offset::after(expected.len() as u64));
    let pages = h.page_files(&log, &path).await.unwrap();
    assert_eq!(pages[0], orphaned[0], "the orphaned page is kept byte for byte");
    // AND the pages are byte-identical to what sealing the same messages from scratch writes
    let twin = unique_path("crash-twin");
    let fresh = h.instance().await;
    fresh.create(&twin, json()).await.unwrap();
    append_in_batches(&fresh, &twin, &expected).await;
    fresh.seal(&twin, SealMode::Final).await.unwrap();
    assert_eq!(h.page_files(&fresh, &twin).await.unwrap(), pages);
    // AND every message still reads back, now from pages
    let chunk = log.read(&path, Position::START, None).await.unwrap();
    assert!(chunk.immutable, "a read of sealed history is served from a page");
    assert_eq!(read_all(&log, &path, Offset::START, None).await, expected);

    // WHEN sealing crashes after recording a page but before releasing the hot tail
    let more = varied(40);
    append_in_batches(&log, &path, &more).await;
    h.fail_points().arm(SEAL_AFTER_COMMIT);
    assert!(log.seal(&path, SealMode::Final).await.is_err());
    h.fail_points().disarm(SEAL_AFTER_COMMIT);
    // THEN reads are whole, and the next run finishes the job
    let all: Vec<Bytes> = expected.iter().chain(&more).cloned().collect();
    assert_eq!(read_all(&log, &path, Offset::START, None).await, all);
    let report = log.seal(&path, SealMode::Final).await.unwrap();
    assert_eq!(report.sealed_through, Offset::after(all.len() as u64));
    assert_eq!(read_all(&log, &path, Offset::START, None).await, all);
}

pub(crate) async fn a_read_from_any_offset_returns_exactly_the_suffix<H: Harness>(h: &H) {
    // GIVEN a stream whose beginning is sealed into pages and whose end is a hot tail
    let path = unique_path("suffix");
    let log = h.instance().await;
    log.create(&path, json()).await.unwrap();
    let expected = varied(120);
    append_in_batches(&log, &path, &expected).await;
    let report = log.seal(&path, SealMode::Full).await.unwrap();
    assert!(
        report.sealed_through.seq() > 0 && report.sealed_through.seq() < 120,
        "{report:?}"
    );
    // WHEN reading from every offset, in whole chunks and in small ones
    for from in 0..=expected.len() {
        let offset = Offset::after(from as u64);
        // THEN each read returns exactly the suffix
        assert_eq!(
            read_all(&log, &path, offset, None).await,
            expected[from..],
            "from {from}"
        );
        if from % 17 == 0 {
            assert_eq!(
                read_all(&log, &path, offset, Some(200)).await,
                expected[from..],
                "from {from}, small"
            );
        }
    }
    // AND a read from `now` sees nothing that exists, and everything that comes after
    let now = log.read(&path, Position::Now, None).await.unwrap();
    assert!(now.messages.is_empty() && now.up_to_date);
    assert_eq!(now.start, Offset::after(120));
    log.append(&path, Append::one(msg(serde_json::json!("later"))))
        .await
        .unwrap();
    assert_eq!(
        read_all(&log, &path, now.next_offset, None).await,
        vec![msg(serde_json::json!("later"))]
    );
}

pub(crate) async fn a_closed_stream_rejects_appends<H: Harness>(h: &H) {
    let path = unique_path("closed");
    let log = h.instance().await;
    log.create(&path, json()).await.unwrap();
    log.append(&path, Append::one(msg(serde_json::json!(1)))).await.unwrap();

    // WHEN the stream is closed with a final message, atomically
    let ack = log.close(&path, Append::one(msg(serde_json::json!(2)))).await.unwrap();
    assert!(ack.closed);
    assert_eq!(ack.next_offset, Offset::after(2));

    // THEN appends are refused with its final offset, from any instance
    let other = h.instance().await;
    match other.append(&path, Append::one(msg(serde_json::json!(3)))).await {
        Err(Error::Closed { tail, .. }) => assert_eq!(tail, Offset::after(2)),
        other => panic!("expected Closed, got {other:?}"),
    }
    // AND closing again is idempotent
    assert!(other.close(&path, Append::default()).await.unwrap().closed);
    // AND readers see the end of the stream, and waiters do not wait
    let chunk = other.read(&path, Position::START, None).await.unwrap();
    assert_eq!(chunk.messages.len(), 2);
    assert!(chunk.closed && chunk.up_to_date);
    let outcome = other
        .wait(&path, Offset::after(2), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        WaitOutcome::Ready {
            tail: Offset::after(2),
            closed: true,
            delivered: None,
        }
    );

    // AND a stream can be created closed, with its whole content
    let done = unique_path("created-closed");
    let req = CreateStream {
        closed: true,
        initial: vec![msg(serde_json::json!("only"))],
        ..json()
    };
    assert!(matches!(log.create(&done, req.clone()).await.unwrap(), Created::New(_)));
    assert!(matches!(log.create(&done, req).await.unwrap(), Created::Existing(_)));
    let chunk = log.read(&done, Position::START, None).await.unwrap();
    assert_eq!(chunk.messages, vec![msg(serde_json::json!("only"))]);
    assert!(chunk.closed);
    assert!(matches!(
        log.append(&done, Append::one(msg(serde_json::json!(0)))).await,
        Err(Error::Closed { .. })
    ));
}

pub(crate) async fn an_expired_stream_is_gone<H: Harness>(h: &H) {
    let log = h.instance().await;
    let clock = h.clock();

    // GIVEN a stream with a 10 s sliding TTL
    let path = unique_path("ttl");
    let req = CreateStream {
        expiry: Expiry::Ttl { seconds: 10 },
        ..json()
    };
    log.create(&path, req.clone()).await.unwrap();
    log.append(&path, Append::one(msg(serde_json::json!(1)))).await.unwrap();
    // WHEN it is read after 6 s, then left alone for 8 s more
    clock.advance_ms(6_000);
    assert_eq!(log.read(&path, Position::START, None).await.unwrap().messages.len(), 1);
    clock.advance_ms(8_000);
    // THEN it still exists: the read restarted its window
    assert!(log.metadata(&path).await.is_ok());
    // WHEN 10 s pass with no read or write
    clock.advance_ms(10_001);
    // THEN it is gone for every operation, from every instance
    let other = h.instance().await;
    assert!(matches!(other.metadata(&path).await, Err(Error::NotFound { .. })));
    assert!(matches!(
        other.read(&path, Position::START, None).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        log.append(&path, Append::one(msg(serde_json::json!(2)))).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(other.delete(&path).await, Err(Error::NotFound { .. })));
    // AND the path can be used again, starting empty
    assert!(matches!(other.create(&path, req).await.unwrap(), Created::New(_)));
    assert!(
        other
            .read(&path, Position::START, None)
            .await
            .unwrap()
            .messages
            .is_empty()
    );

    // GIVEN a stream with an absolute expiry
    let path = unique_path("expires-at");
    let at = CreateStream {
        expiry: Expiry::At {
            unix_ms: clock_now(clock) + 1_000,
        },
        ..json()
    };
    log.create(&path, at).await.unwrap();
    // WHEN it is read and then the instant passes
    log.read(&path, Position::START, None).await.unwrap();
    clock.advance_ms(1_001);
    // THEN it is gone: reads do not extend an absolute expiry
    assert!(matches!(log.metadata(&path).await, Err(Error::NotFound { .. })));
}

fn clock_now(clock: &spool_log::clock::ManualClock) -> i64 {
    use spool_log::clock::Clock;
    clock.now_ms()
}

pub(crate) async fn bad_requests_get_typed_errors<H: Harness>(h: &H) {
    let log = h.instance().await;
    let missing = unique_path("missing");
    assert!(matches!(log.metadata(&missing).await, Err(Error::NotFound { .. })));
    assert!(matches!(
        log.read(&missing, Position::START, None).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        log.append(&missing, Append::one(Bytes::from("1"))).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(log.delete(&missing).await, Err(Error::NotFound { .. })));
    assert!(matches!(
        log.wait(&missing, Offset::START, Duration::from_millis(10)).await,
        Err(Error::NotFound { .. })
    ));

    let path = unique_path("typed");
    log.create(&path, json()).await.unwrap();
    log.append(&path, Append::one(Bytes::from("1"))).await.unwrap();
    // An offset past the tail, and offsets that were never issued.
    assert!(matches!(
        log.read(&path, Position::At(Offset::after(2)), None).await,
        Err(Error::OffsetBeyondTail { .. })
    ));
    for bad in ["abc", "-2", "0000000000000001_0000000000000000", "1"] {
        assert!(
            matches!(bad.parse::<Position>(), Err(Error::InvalidOffset { .. })),
            "{bad}"
        );
    }
    // A content type that is not the stream's.
    let text = Append {
        content_type: Some(ContentType::parse("text/plain").unwrap()),
        ..Append::one(Bytes::from("x"))
    };
    assert!(matches!(
        log.append(&path, text).await,
        Err(Error::ContentTypeMismatch { .. })
    ));
    // The same content type, spelt differently, is the same.
    let spelt = Append {
        content_type: Some(ContentType::parse("Application/JSON; charset=utf-8").unwrap()),
        ..Append::one(Bytes::from("2"))
    };
    log.append(&path, spelt).await.unwrap();
    // Creating it again: the same configuration is fine, another is a conflict.
    assert!(matches!(log.create(&path, json()).await.unwrap(), Created::Existing(_)));
    let other = CreateStream::new(ContentType::parse("text/plain").unwrap());
    assert!(matches!(
        log.create(&path, other).await,
        Err(Error::ConfigMismatch { .. })
    ));
    let ttl = CreateStream {
        expiry: Expiry::Ttl { seconds: 5 },
        ..json()
    };
    assert!(matches!(
        log.create(&path, ttl).await,
        Err(Error::ConfigMismatch { .. })
    ));
    // An empty append.
    assert!(matches!(
        log.append(&path, Append::default()).await,
        Err(Error::EmptyAppend)
    ));
    // None of it changed the stream.
    assert_eq!(log.metadata(&path).await.unwrap().tail, Offset::after(2));
}

pub(crate) async fn appends_larger_than_an_item_work<H: Harness>(h: &H) {
    let path = unique_path("large");
    let log = h.instance().await;
    let octets = CreateStream::new(ContentType::octet_stream());
    log.create(&path, octets).await.unwrap();
    // GIVEN a 1 MiB message and a batch of three 300 KiB messages (DynamoDB items hold 400 KB)
    let big = Bytes::from((0..1024 * 1024).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let batch: Vec<Bytes> = (0..3u8).map(|k| Bytes::from(vec![k; 300 * 1024])).collect();
    log.append(&path, Append::one(big.clone())).await.unwrap();
    log.append(&path, Append::one(Bytes::from_static(b"small")))
        .await
        .unwrap();
    log.append(&path, Append::messages(batch.clone())).await.unwrap();
    let mut expected = vec![big, Bytes::from_static(b"small")];
    expected.extend(batch);
    // THEN they read back exactly, from the hot tail and, once sealed, from pages
    assert_eq!(read_all(&log, &path, Offset::START, None).await, expected);
    log.seal(&path, SealMode::Final).await.unwrap();
    assert_eq!(
        read_all(&h.instance().await, &path, Offset::START, None).await,
        expected
    );
    // AND an append over the configured maximum is refused, changing nothing
    let max = test_limits().max_append_bytes;
    match log.append(&path, Append::one(Bytes::from(vec![0u8; max + 1]))).await {
        Err(Error::PayloadTooLarge { size, max: m }) => assert_eq!((size, m), (max + 1, max)),
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    assert_eq!(log.metadata(&path).await.unwrap().tail, Offset::after(5));
}

pub(crate) async fn waiting_wakes_on_new_data_from_any_writer<H: Harness>(h: &H) {
    let path = unique_path("wait");
    let reader = h.instance().await;
    reader.create(&path, json()).await.unwrap();
    // Nothing happens: the wait times out.
    let outcome = reader
        .wait(&path, Offset::START, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(outcome, WaitOutcome::TimedOut { tail: Offset::START });
    // Another instance appends while we wait: we wake with the new tail.
    for writer in [h.instance().await, reader.clone()] {
        let tail = reader.metadata(&path).await.unwrap().tail;
        let (w, p) = (writer.clone(), path.clone());
        let append = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            w.append(&p, Append::one(Bytes::from("1"))).await.unwrap()
        });
        let outcome = reader.wait(&path, tail, Duration::from_secs(20)).await.unwrap();
        let ack = append.await.unwrap();
        let WaitOutcome::Ready {
            tail: woke,
            closed,
            delivered,
        } = outcome
        else {
            panic!("expected Ready, got {outcome:?}");
        };
        assert_eq!((woke, closed), (ack.next_offset, false));
        // Messages handed over with the wake-up are exactly what a read returns.
        if let Some(delivered) = delivered {
            let read = reader.read(&path, Position::At(tail), None).await.unwrap();
            let chunk = delivered
                .chunk_after(tail, &read.stream_id)
                .expect("they start after the offset, in this incarnation");
            assert_eq!(
                (chunk.messages, chunk.next_offset, chunk.stream_id, chunk.up_to_date),
                (read.messages, read.next_offset, read.stream_id, read.up_to_date)
            );
        }
    }
    // Waiting from an offset already behind the tail returns at once.
    let outcome = reader
        .wait(&path, Offset::START, Duration::from_secs(20))
        .await
        .unwrap();
    assert!(matches!(outcome, WaitOutcome::Ready { .. }));
}

fn fork_of(source: &StreamPath, offset: Option<u64>, sub_offset: u64) -> CreateStream {
    CreateStream {
        fork: Some(spool_log::stream::ForkRequest {
            source: source.clone(),
            offset: offset.map(Offset::after),
            sub_offset,
            content_type: None,
            expiry: None,
        }),
        ..json()
    }
}

pub(crate) async fn forks_inherit_and_outlive_their_source<H: Harness>(h: &H) {
    // GIVEN a source partly sealed into pages, partly in the hot tail
    let log = h.instance().await;
    let source = unique_path("fork-src");
    log.create(&source, json()).await.unwrap();
    let messages = varied(70);
    append_in_batches(&log, &source, &messages).await;
    let report = log.seal(&source, SealMode::Full).await.unwrap();
    assert!(
        report.sealed_through.seq() > 0 && report.sealed_through.seq() < 70,
        "{report:?}"
    );

    // WHEN a fork is made at 60, and a fork of the fork at 61 (one message into it)
    let fork = unique_path("fork");
    log.create(&fork, fork_of(&source, Some(60), 0)).await.unwrap();
    log.append(&fork, Append::one(msg(serde_json::json!("fork-own"))))
        .await
        .unwrap();
    let grandchild = unique_path("fork-2");
    log.create(&grandchild, fork_of(&fork, Some(60), 1)).await.unwrap();
    log.append(&source, Append::one(msg(serde_json::json!("source-later"))))
        .await
        .unwrap();

    // THEN each reads its inherited messages, then its own, in one offset space
    let other = h.instance().await;
    let mut expected: Vec<Bytes> = messages[..60].to_vec();
    expected.push(msg(serde_json::json!("fork-own")));
    assert_eq!(read_all(&other, &fork, Offset::START, None).await, expected);
    assert_eq!(read_all(&other, &grandchild, Offset::START, Some(300)).await, expected);
    assert_eq!(read_all(&other, &fork, Offset::after(59), None).await, expected[59..]);
    assert_eq!(other.metadata(&grandchild).await.unwrap().tail.seq(), 61);

    // AND a fork past the tail, a deleted source or another content type is refused
    let bad = unique_path("fork-bad");
    assert!(matches!(
        other.create(&bad, fork_of(&source, Some(500), 0)).await,
        Err(Error::Invalid { .. })
    ));

    // WHEN the source and the middle fork are deleted, they are gone for clients ...
    other.delete(&source).await.unwrap();
    other.delete(&fork).await.unwrap();
    assert!(matches!(other.metadata(&source).await, Err(Error::Gone { .. })));
    assert!(matches!(
        other.read(&fork, Position::START, None).await,
        Err(Error::Gone { .. })
    ));
    assert!(matches!(
        other.create(&source, json()).await,
        Err(Error::ConfigMismatch { .. })
    ));
    assert!(matches!(
        other.create(&bad, fork_of(&source, None, 0)).await,
        Err(Error::ConfigMismatch { .. })
    ));
    // ... but kept for the grandchild, which still reads everything
    assert_eq!(read_all(&other, &grandchild, Offset::START, None).await, expected);

    // WHEN the last fork is deleted, the chain goes with it and the paths can be reused
    other.delete(&grandchild).await.unwrap();
    for path in [&source, &fork, &grandchild] {
        assert!(
            matches!(other.metadata(path).await, Err(Error::NotFound { .. })),
            "{path}"
        );
    }
    other.create(&source, json()).await.unwrap();
    assert!(read_all(&other, &source, Offset::START, None).await.is_empty());
}

pub(crate) async fn deleting_a_stream_removes_its_data<H: Harness>(h: &H) {
    let path = unique_path("delete");
    let log = h.instance().await;
    log.create(&path, json()).await.unwrap();
    append_in_batches(&log, &path, &varied(80)).await;
    log.seal(&path, SealMode::Full).await.unwrap();
    assert!(!h.page_files(&log, &path).await.unwrap().is_empty());
    // GIVEN another instance that has written to the stream (and so remembers its head)
    let stale = h.instance().await;
    stale.append(&path, Append::one(Bytes::from("1"))).await.unwrap();
    // WHEN it is deleted
    log.delete(&path).await.unwrap();
    // THEN it is gone everywhere
    let other = h.instance().await;
    assert!(matches!(
        other.read(&path, Position::START, None).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        other.append(&path, Append::one(Bytes::from("1"))).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        stale.append(&path, Append::one(Bytes::from("1"))).await,
        Err(Error::NotFound { .. })
    ));
    // AND a stream created at the same path starts empty, sharing nothing with the old one
    other.create(&path, json()).await.unwrap();
    assert!(read_all(&other, &path, Offset::START, None).await.is_empty());
    assert!(h.page_files(&other, &path).await.unwrap().is_empty());
    // AND the instance that remembered the old stream appends to the new one, at its start
    let ack = stale.append(&path, Append::one(Bytes::from("new"))).await.unwrap();
    assert_eq!(ack.next_offset, Offset::after(1));
    assert_eq!(
        read_all(&other, &path, Offset::START, None).await,
        vec![Bytes::from("new")]
    );
}

pub(crate) async fn stream_seq_must_increase<H: Harness>(h: &H) {
    let path = unique_path("stream-seq");
    let a = h.instance().await;
    let b = h.instance().await;
    a.create(&path, json()).await.unwrap();
    let seq = |s: &str| Append {
        stream_seq: Some(s.to_owned()),
        ..Append::one(Bytes::from("1"))
    };
    a.append(&path, seq("0001")).await.unwrap();
    assert!(matches!(
        b.append(&path, seq("0001")).await,
        Err(Error::StreamSeqConflict { .. })
    ));
    assert!(matches!(
        b.append(&path, seq("0000")).await,
        Err(Error::StreamSeqConflict { .. })
    ));
    b.append(&path, seq("0002")).await.unwrap();
    assert!(matches!(
        a.append(&path, seq("0002")).await,
        Err(Error::StreamSeqConflict { .. })
    ));
    assert_eq!(a.metadata(&path).await.unwrap().tail, Offset::after(2));
}

pub(crate) async fn concurrent_sealers_agree<H: Harness>(h: &H) {
    let path = unique_path("sealers");
    let log = h.instance().await;
    log.create(&path, json()).await.unwrap();
    let expected = varied(200);
    append_in_batches(&log, &path, &expected).await;
    // WHEN three instances seal at once
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let sealer = h.instance().await;
        let path = path.clone();
        tasks.spawn(async move { sealer.seal(&path, SealMode::Full).await.unwrap() });
    }
    while tasks.join_next().await.is_some() {}
    // THEN the stream is sealed once, the pages do not overlap, and reads are whole
    let sealed = log.metadata(&path).await.unwrap().sealed.seq();
    assert!(sealed > 0);
    let pages = h.page_files(&log, &path).await.unwrap();
    let ranges: Vec<(u64, u64)> = pages
        .iter()
        .map(|(name, _)| {
            let r = spool_log::page::parse_page_name(name).unwrap();
            (r.first, r.last)
        })
        .collect();
    assert_eq!(ranges.first().map(|r| r.0), Some(1));
    assert!(ranges.windows(2).all(|w| w[1].0 == w[0].1 + 1), "{ranges:?}");
    assert_eq!(ranges.last().map(|r| r.1), Some(sealed));
    assert_eq!(read_all(&log, &path, Offset::START, None).await, expected);
}

/// Writers that number their own messages (the chat events' `seq`) append only at the tail they
/// expect, so every message holds its own sequence number; a producer's retry is still
/// recognised as one.
pub(crate) async fn an_expected_tail_lets_writers_number_their_messages<H: Harness>(harness: &H) {
    let path = unique_path("expected-tail");
    let first = harness.instance().await;
    first.create(&path, json()).await.unwrap();

    // WHEN three instances each write 20 messages that carry the number they expect to get
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let path = path.clone();
            async move {
                let log = harness.instance().await;
                let mut conflicts = 0;
                for _ in 0..20 {
                    loop {
                        let tail = log.metadata(&path).await.unwrap().tail.seq();
                        let mut append = Append::one(msg(serde_json::json!({ "seq": tail + 1, "w": w })));
                        append.expected_tail = Some(tail);
                        match log.append(&path, append).await {
                            Ok(ack) => {
                                assert_eq!(ack.appended.unwrap().first, tail + 1);
                                break;
                            }
                            Err(Error::TailMismatch {
                                expected, tail: now, ..
                            }) => {
                                assert_eq!(expected, tail);
                                assert!(now > tail);
                                conflicts += 1;
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                conflicts
            }
        })
        .collect();
    futures_util::future::join_all(writers).await;

    // THEN the stream holds 60 messages, each carrying its own sequence number
    let chunk = first.read(&path, Position::START, Some(usize::MAX)).await.unwrap();
    assert_eq!(chunk.messages.len(), 60);
    for (i, m) in chunk.messages.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_slice(m).unwrap();
        assert_eq!(v["seq"], i as u64 + 1);
    }

    // AND a stale expectation appends nothing
    let mut stale = Append::one(msg(serde_json::json!({ "seq": 1 })));
    stale.expected_tail = Some(0);
    assert!(matches!(
        first.append(&path, stale).await,
        Err(Error::TailMismatch { tail: 60, .. })
    ));

    // AND a producer's retry with a now-stale expectation is acknowledged as a duplicate
    let claim = ProducerClaim {
        id: "client-message-1".to_owned(),
        epoch: 0,
        seq: 0,
    };
    let mut once = Append::one(msg(serde_json::json!({ "seq": 61 })));
    once.expected_tail = Some(60);
    once.producer = Some(claim.clone());
    let ack = first.append(&path, once.clone()).await.unwrap();
    assert_eq!(ack.appended.unwrap().first, 61);
    let retry = harness.instance().await.append(&path, once).await.unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.next_offset, Offset::after(61));
    assert_eq!(first.metadata(&path).await.unwrap().tail.seq(), 61);
}

on_both_backends!(contract:
    concurrent_writers_get_one_gapless_order,
    a_retried_producer_batch_is_never_appended_twice,
    a_crash_between_the_write_and_sealing_loses_nothing,
    a_read_from_any_offset_returns_exactly_the_suffix,
    a_closed_stream_rejects_appends,
    an_expired_stream_is_gone,
    bad_requests_get_typed_errors,
    appends_larger_than_an_item_work,
    waiting_wakes_on_new_data_from_any_writer,
    deleting_a_stream_removes_its_data,
    stream_seq_must_increase,
    concurrent_sealers_agree,
    forks_inherit_and_outlive_their_source,
    an_expected_tail_lets_writers_number_their_messages,
);

/// On one machine a live reader gets an append from memory the moment it is durable: the wait
/// that the append ends carries its messages, which is what the read would return; an append
/// that closes the stream, or another process's, is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_in_process_reaches_waiters_without_a_read() {
    let h = spool_tests::EmbeddedHarness::new();
    let log = h.instance().await;
    let other = h.instance().await;
    let path = unique_path("delivered");
    log.create(&path, json()).await.unwrap();
    log.append(&path, Append::one(msg(serde_json::json!(1)))).await.unwrap();
    let wait_while = |writer: spool_embedded::EmbeddedLog, append: Append| {
        let (log, path) = (log.clone(), path.clone());
        async move {
            let tail = log.metadata(&path).await.unwrap().tail;
            let p = path.clone();
            // The append comes once the reader waits (not after a pause a loaded machine may
            // outlast: an append before the wait begins is one it must read).
            let watched = log.clone();
            let writing = tokio::spawn(async move {
                for _ in 0..2000 {
                    if watched.waiters(&p) > 0 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                writer.append(&p, append).await.unwrap()
            });
            let outcome = log.wait(&path, tail, Duration::from_secs(20)).await.unwrap();
            writing.await.unwrap();
            (tail, outcome)
        }
    };
    // WHEN this process appends two messages while a reader waits at the tail
    // (the waiter counts from when it subscribes, before its one look at the store: an append
    // that lands in between is found by that look and read, which is right but not this
    // test's path, so it tries again, a bounded number of times)
    let mut handed_over = None;
    for attempt in 0..20 {
        let two = Append::messages([
            msg(serde_json::json!(attempt * 2)),
            msg(serde_json::json!(attempt * 2 + 1)),
        ]);
        let (tail, outcome) = wait_while(log.clone(), two).await;
        match outcome {
            WaitOutcome::Ready {
                delivered: Some(delivered),
                ..
            } => {
                handed_over = Some((tail, delivered));
                break;
            }
            WaitOutcome::Ready { tail: woke_at, .. } => {
                let read = log.read(&path, Position::At(tail), None).await.unwrap();
                assert_eq!((read.messages.len(), read.next_offset), (2, woke_at));
            }
            other => panic!("not woken by the append: {other:?}"),
        }
    }
    // THEN the wait hands them over, as a read from the tail returns them
    let (tail, delivered) = handed_over.expect("never woken with the messages in 20 tries");
    let read = log.read(&path, Position::At(tail), None).await.unwrap();
    let chunk = delivered.chunk_after(tail, &read.stream_id).unwrap();
    assert!(delivered.chunk_after(tail, "another incarnation").is_none());
    assert_eq!(chunk.messages, read.messages);
    assert_eq!(chunk.messages.len(), 2);
    assert_eq!(
        (chunk.next_offset, chunk.up_to_date),
        (read.next_offset, read.up_to_date)
    );
    // WHEN another process appends, or this one closes the stream: THEN the waiter reads
    let (_, outcome) = wait_while(other, Append::one(msg(serde_json::json!(4)))).await;
    assert!(
        matches!(outcome, WaitOutcome::Ready { delivered: None, .. }),
        "{outcome:?}"
    );
    let close = Append {
        close: true,
        ..Append::one(msg(serde_json::json!(5)))
    };
    let (_, outcome) = wait_while(log.clone(), close).await;
    assert!(
        matches!(outcome, WaitOutcome::Ready { delivered: None, .. }),
        "{outcome:?}"
    );
}

/// On one machine a process reads the hot tails it wrote from memory; several processes on one
/// data directory, and a stream deleted and made again, still read exactly what is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_memory_never_mix_processes_or_incarnations() {
    let h = spool_tests::EmbeddedHarness::new();
    let (a, b) = (h.instance().await, h.instance().await);
    let path = unique_path("recent");
    let all = |log: spool_embedded::EmbeddedLog, from: u64| {
        let path = path.clone();
        async move {
            let chunk = log.read(&path, Position::At(Offset::after(from)), None).await.unwrap();
            chunk.messages
        }
    };
    let m = |v: serde_json::Value| msg(v);
    a.create(&path, json()).await.unwrap();
    // GIVEN appends by this process and by another, interleaved
    a.append(&path, Append::messages([m(1.into()), m(2.into()), m(3.into())]))
        .await
        .unwrap();
    b.append(&path, Append::one(m(4.into()))).await.unwrap();
    a.append(&path, Append::one(m(5.into()))).await.unwrap();
    // THEN every read, from every offset, in either process, is what is stored
    let stored: Vec<Bytes> = (1..=5).map(|i| m(i.into())).collect();
    for from in 0..5 {
        assert_eq!(all(a.clone(), from).await, stored[from as usize..], "a from {from}");
        assert_eq!(all(b.clone(), from).await, stored[from as usize..], "b from {from}");
    }
    // WHEN the other process deletes the stream and makes it again, with other messages
    b.delete(&path).await.unwrap();
    b.create(&path, json()).await.unwrap();
    b.append(&path, Append::messages([m("x".into()), m("y".into())]))
        .await
        .unwrap();
    // THEN this process reads the new incarnation's, never what it kept of the old one
    assert_eq!(all(a.clone(), 0).await, vec![m("x".into()), m("y".into())]);
    assert_eq!(all(a.clone(), 1).await, vec![m("y".into())]);
}
