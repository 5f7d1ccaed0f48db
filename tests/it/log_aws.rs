//! The stream log's DynamoDB layout, on the emulator: what an append costs, and the promises
//! that rest on batches being put at free keys (not on a transaction with the head): a writer
//! that remembers a deleted stream acknowledges nothing, a remembered tail is only trusted for a
//! while, and a stream whose batches DynamoDB's TTL removed after sealing keeps its tail,
//! closure and producers.

use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;
use spool_log::{
    error::Error,
    port::{StreamReader, StreamSealer, StreamWriter},
    stream::{Append, CreateStream, Offset, ProducerClaim, SealMode, StreamPath},
};
use spool_tests::{AwsHarness, Harness, unique_path};

fn json() -> CreateStream {
    CreateStream::new(spool_log::stream::ContentType::parse("application/json").unwrap())
}

fn msg(i: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"type":"text_delta","seq":{i},"delta":"a few words of an answer"}}"#
    ))
}

fn produced(id: &str, epoch: u64, seq: u64) -> Append {
    Append {
        producer: Some(ProducerClaim {
            id: id.to_owned(),
            epoch,
            seq,
        }),
        ..Append::one(msg(seq))
    }
}

/// Requests counted since the last reset, as `operation → count`.
fn requests(h: &AwsHarness, op: &str) -> u64 {
    h.requests
        .snapshot()
        .into_iter()
        .filter(|((_, o), _)| o == op)
        .map(|(_, n)| n)
        .sum()
}

/// Removes every batch item of the stream at `path`, as DynamoDB's TTL does once they are old.
async fn expire_batches(h: &AwsHarness, path: &StreamPath) {
    let dynamodb = h.clients().await.dynamodb;
    let table = h.options().table;
    let head = dynamodb
        .get_item()
        .table_name(&table)
        .key("pk", AttributeValue::S(format!("s#{path}")))
        .key("sk", AttributeValue::S("head".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let sid = head.item.unwrap()["sid"].as_s().unwrap().clone();
    let items = dynamodb
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :pk AND begins_with(sk, :m)")
        .expression_attribute_values(":pk", AttributeValue::S(format!("l#{sid}")))
        .expression_attribute_values(":m", AttributeValue::S("m#".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert!(!items.items().is_empty(), "the stream has batch items to expire");
    for item in items.items() {
        dynamodb
            .delete_item()
            .table_name(&table)
            .key("pk", item["pk"].clone())
            .key("sk", item["sk"].clone())
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_small_append_is_one_write_unit() {
    let h = AwsHarness::new();
    let log = h.instance().await;
    let path = unique_path("units");
    log.create(&path, json()).await.unwrap();
    // GIVEN a producer that has claimed its epoch (its first claim also writes its own item)
    log.append(&path, produced("turn:1", 0, 0)).await.unwrap();
    h.requests.reset();

    // WHEN it appends 20 small events, and 20 more come without a producer
    for seq in 1..=20 {
        log.append(&path, produced("turn:1", 0, seq)).await.unwrap();
    }
    for i in 0..20 {
        log.append(&path, Append::one(msg(i))).await.unwrap();
    }

    // THEN each was one conditional PutItem of one write unit, and nothing was read
    let (read, write) = h.requests.capacity_units();
    assert_eq!(write, 40.0, "write units for 40 small appends");
    assert_eq!(read, 0.0, "read units for 40 uncontended appends");
    assert_eq!(requests(&h, "PutItem"), 40);
    assert_eq!(requests(&h, "TransactWriteItems"), 0);
    assert_eq!(log.metadata(&path).await.unwrap().tail, Offset::after(41));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_remembers_a_deleted_stream_acknowledges_nothing() {
    let h = AwsHarness::new();
    let (a, b) = (h.instance().await, h.instance().await);

    // GIVEN a writer that remembers a stream's tail, and the stream deleted by another
    let path = unique_path("deleted");
    a.create(&path, json()).await.unwrap();
    a.append(&path, Append::one(msg(1))).await.unwrap();
    b.delete(&path).await.unwrap();
    // THEN its next append is refused, not acknowledged into the removed stream
    assert!(matches!(
        a.append(&path, Append::one(msg(2))).await,
        Err(Error::NotFound { .. })
    ));
    // AND once the path is created again, it appends to the new stream from its start
    b.create(&path, json()).await.unwrap();
    let ack = a.append(&path, Append::one(msg(3))).await.unwrap();
    assert_eq!(ack.appended.map(|r| r.first), Some(1));

    // GIVEN a writer that remembers a stream it closed (with a close of no messages), deleted
    // and created again by another
    let closed = unique_path("closed-deleted");
    a.create(&closed, json()).await.unwrap();
    a.append(&closed, Append::one(msg(1))).await.unwrap();
    a.append(
        &closed,
        Append {
            close: true,
            ..Append::default()
        },
    )
    .await
    .unwrap();
    b.delete(&closed).await.unwrap();
    b.create(&closed, json()).await.unwrap();
    // THEN it appends to the new stream instead of calling it closed
    let ack = a.append(&closed, Append::one(msg(2))).await.unwrap();
    assert_eq!(ack.appended.map(|r| r.first), Some(1));

    // GIVEN a stream kept for a fork when deleted
    let source = unique_path("kept");
    a.create(&source, json()).await.unwrap();
    a.append(&source, Append::one(msg(1))).await.unwrap();
    let fork = CreateStream {
        fork: Some(spool_log::stream::ForkRequest {
            source: source.clone(),
            offset: None,
            sub_offset: 0,
            content_type: None,
            expiry: None,
        }),
        ..json()
    };
    b.create(&unique_path("fork"), fork).await.unwrap();
    b.delete(&source).await.unwrap();
    // THEN the writer that remembers it is told it is gone
    assert!(matches!(
        a.append(&source, Append::one(msg(2))).await,
        Err(Error::Gone { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_tail_is_trusted_only_for_a_while() {
    let h = AwsHarness::new();
    let (a, b) = (h.instance().await, h.instance().await);
    let path = unique_path("remembered");
    a.create(&path, json()).await.unwrap();
    a.append(&path, Append::one(msg(1))).await.unwrap();

    // GIVEN a writer whose remembered tail another writer moved on
    b.append(&path, Append::one(msg(2))).await.unwrap();
    // WHEN it appends eleven minutes later
    h.clock().advance_ms(11 * 60 * 1000);
    h.requests.reset();
    let ack = a.append(&path, Append::one(msg(3))).await.unwrap();
    // THEN it read the stream first instead of building on what it remembered
    assert_eq!(ack.appended.map(|r| r.first), Some(3));
    assert_eq!(requests(&h, "PutItem"), 1, "no put on a stale tail");
    assert!(requests(&h, "GetItem") >= 1, "the head was read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_stream_outlives_its_expired_batches() {
    let h = AwsHarness::new();
    let path = unique_path("expired-batches");
    let writer = h.instance().await;
    writer.create(&path, json()).await.unwrap();

    // GIVEN a producer's 40 appends (more than a page), a Stream-Seq, and a restarted epoch
    for seq in 0..40 {
        writer.append(&path, produced("p", 0, seq)).await.unwrap();
    }
    writer
        .append(
            &path,
            Append {
                stream_seq: Some("0005".into()),
                ..Append::one(msg(41))
            },
        )
        .await
        .unwrap();
    writer.append(&path, produced("q", 3, 0)).await.unwrap();
    // WHEN it is sealed to its end and DynamoDB's TTL removes every batch item
    writer.seal(&path, SealMode::Final).await.unwrap();
    expire_batches(&h, &path).await;

    // THEN a fresh instance knows the tail and reads every message from the pages
    let fresh = h.instance().await;
    assert_eq!(fresh.metadata(&path).await.unwrap().tail, Offset::after(42));
    let chunk = fresh
        .read(&path, spool_log::stream::Position::At(Offset::START), None)
        .await
        .unwrap();
    assert_eq!(chunk.messages.first(), Some(&msg(0)));
    // AND the producers' retries are recognised and their next batches accepted
    let retry = fresh.append(&path, produced("p", 0, 39)).await.unwrap();
    assert!(retry.duplicate && retry.appended.is_none());
    assert_eq!(retry.producer.map(|p| p.last_seq), Some(40));
    assert!(matches!(
        fresh.append(&path, produced("q", 2, 0)).await,
        Err(Error::StaleProducerEpoch { current: 3, got: 2 })
    ));
    let next = h.instance().await.append(&path, produced("p", 0, 40)).await.unwrap();
    assert_eq!(next.appended.map(|r| r.first), Some(43));
    // AND the Stream-Seq still orders writers
    assert!(matches!(
        h.instance()
            .await
            .append(
                &path,
                Append {
                    stream_seq: Some("0004".into()),
                    ..Append::one(msg(44))
                },
            )
            .await,
        Err(Error::StreamSeqConflict { .. })
    ));

    // GIVEN a closed stream, sealed, whose batches expired
    let closed = unique_path("closed-expired");
    writer.create(&closed, json()).await.unwrap();
    writer
        .append(
            &closed,
            Append {
                close: true,
                ..Append::one(msg(1))
            },
        )
        .await
        .unwrap();
    writer.seal(&closed, SealMode::Final).await.unwrap();
    expire_batches(&h, &closed).await;
    // THEN it is still closed
    let meta = h.instance().await.metadata(&closed).await.unwrap();
    assert!(meta.closed);
    assert!(matches!(
        h.instance().await.append(&closed, Append::one(msg(2))).await,
        Err(Error::Closed { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_catch_ups_span_more_than_one_query_page() {
    let h = AwsHarness::new();
    let (a, b) = (h.instance().await, h.instance().await);
    let path = unique_path("query-pages");
    a.create(&path, json()).await.unwrap();
    a.append(&path, Append::one(msg(0))).await.unwrap();

    // GIVEN a writer that remembers the tail, and another that appends 1.5 MB after it, more
    // than one DynamoDB query page (1 MB)
    let big = |i: u64| Bytes::from(format!(r#"{{"i":{i},"pad":"{}"}}"#, "x".repeat(300 * 1024)));
    for i in 1..=5 {
        b.append(&path, Append::one(big(i))).await.unwrap();
    }
    // WHEN the first appends again
    let ack = a.append(&path, Append::one(msg(6))).await.unwrap();
    // THEN it caught up across the pages and took the next number
    assert_eq!(ack.appended.map(|r| r.first), Some(7));
    // AND a read of all of it from the start crosses the pages too
    let chunk = h
        .instance()
        .await
        .read(
            &path,
            spool_log::stream::Position::At(Offset::START),
            Some(8 * 1024 * 1024),
        )
        .await
        .unwrap();
    assert_eq!(chunk.messages.len(), 7);
    assert_eq!(chunk.messages[6], msg(6));
}

/// A seal scheduler that records what it was asked: idle checks' tails, and the chain of the
/// last one.
#[derive(Default)]
struct Recorder {
    idle: std::sync::Mutex<Vec<u64>>,
    chain: std::sync::Mutex<Option<u64>>,
}

#[async_trait::async_trait]
impl spool_log::port::SealScheduler for Recorder {
    async fn schedule(&self, _path: &StreamPath) -> Result<(), Error> {
        Ok(())
    }

    async fn schedule_idle(
        &self,
        _path: &StreamPath,
        tail: u64,
        _delay: std::time::Duration,
        chain: u64,
    ) -> Result<(), Error> {
        self.idle.lock().unwrap().push(tail);
        *self.chain.lock().unwrap() = Some(chain);
        Ok(())
    }
}

impl Recorder {
    fn take(&self) -> Vec<u64> {
        std::mem::take(&mut *self.idle.lock().unwrap())
    }

    /// The check armed last, to run: its mode.
    fn check(&self, tail: u64) -> SealMode {
        SealMode::Idle {
            tail: Offset::after(tail),
            chain: *self.chain.lock().unwrap(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_checks_watch_every_unsealed_batch_until_a_page_holds_it() {
    let h = AwsHarness::new();
    let recorder = std::sync::Arc::new(Recorder::default());
    let mut options = h.options();
    options.scheduler = Some(recorder.clone());
    let log = spool_aws::AwsLog::new(h.clients().await, options);
    let path = unique_path("idle-checks");
    log.create(&path, json()).await.unwrap();

    // WHEN the first batch lands after the (empty) sealed point
    log.append(&path, Append::one(msg(1))).await.unwrap();
    log.append(&path, Append::one(msg(2))).await.unwrap();
    // THEN it armed one idle check, for its tail; the next append armed none
    assert_eq!(recorder.take(), vec![1]);

    // (A check runs an idle period after it was armed; the test's clock moves only by hand.)
    let idle_period = || h.clock().advance_ms(1000);
    // WHEN that check runs after more came: only full pages are sealed, and the next check is
    // armed for the new tail
    idle_period();
    h.requests.reset();
    let report = log.seal(&path, recorder.check(1)).await.unwrap();
    assert!(report.sealed_through < report.tail);
    assert_eq!(recorder.take(), vec![2]);
    // (without reading the unsealed batches, when they are less than a page: two looks at the
    // newest ones, the tail's and the oldest unsealed one's)
    assert_eq!(requests(&h, "Query"), 2, "{:?}", h.requests.snapshot());
    // WHEN the stream stayed idle: it is sealed to its end, and one more check follows (a
    // writer may have read the stream before the seal committed), which ends the chain
    idle_period();
    let report = log.seal(&path, recorder.check(2)).await.unwrap();
    assert_eq!(report.sealed_through, Offset::after(2));
    assert_eq!(recorder.take(), vec![2]);
    idle_period();
    log.seal(&path, recorder.check(2)).await.unwrap();
    assert_eq!(recorder.take(), Vec::<u64>::new());

    // GIVEN a new run of batches (its first write knows the stream was sealed: what it
    // remembered is older than an idle period), written for more than a day without a pause
    log.append(&path, Append::one(msg(3))).await.unwrap();
    assert_eq!(recorder.take(), vec![3]);
    h.clock().advance_ms(25 * 3600 * 1000);
    log.append(&path, Append::one(msg(4))).await.unwrap();
    // WHEN a check runs: the oldest batch is a day old, so it seals to the end anyway, and
    // arms one more check (a writer may still remember the tail it sealed)
    let report = log.seal(&path, recorder.check(3)).await.unwrap();
    assert_eq!(report.sealed_through, Offset::after(4));
    assert_eq!(recorder.take(), vec![4]);
    let continued = recorder.check(4);

    // GIVEN a write that knows the stream was sealed to its end, so it arms a check too
    idle_period();
    log.append(&path, Append::one(msg(5))).await.unwrap();
    assert_eq!(recorder.take(), vec![5]);
    let newest = recorder.check(5);
    // WHEN the chain's next check runs after it: THEN it arms none, since the stream's one
    // chain is the write's (with both, each would arm the next for as long as the stream is
    // busy, one more chain every half day)
    log.seal(&path, continued).await.unwrap();
    assert_eq!(
        recorder.take(),
        Vec::<u64>::new(),
        "a superseded check arms no next one"
    );
    // AND the write's check seals the stream, and its chain ends as any does
    let report = log.seal(&path, newest).await.unwrap();
    assert_eq!(report.sealed_through, Offset::after(5));
    assert_eq!(recorder.take(), vec![5]);
    idle_period();
    log.seal(&path, recorder.check(5)).await.unwrap();
    assert_eq!(recorder.take(), Vec::<u64>::new());

    // GIVEN a close that adds no message, after the stream is sealed to its end
    log.append(
        &path,
        Append {
            close: true,
            ..Append::default()
        },
    )
    .await
    .unwrap();
    // (the close armed a check, which seals it)
    assert_eq!(recorder.take(), vec![5]);
    log.seal(&path, recorder.check(5)).await.unwrap();
    assert_eq!(recorder.take(), Vec::<u64>::new());
    // WHEN its batches expire, THEN it is still closed
    expire_batches(&h, &path).await;
    let meta = h.instance().await.metadata(&path).await.unwrap();
    assert!(meta.closed, "the closure outlives the close marker");
    assert_eq!(meta.tail, Offset::after(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_created_with_messages_arms_a_check_and_lost_batches_are_an_error() {
    let h = AwsHarness::new();
    let recorder = std::sync::Arc::new(Recorder::default());
    let mut options = h.options();
    options.scheduler = Some(recorder.clone());
    let log = spool_aws::AwsLog::new(h.clients().await, options);

    // WHEN a stream is created with messages of its own
    let path = unique_path("created-with-messages");
    let mut create = json();
    create.initial = vec![msg(1), msg(2)];
    log.create(&path, create).await.unwrap();
    // THEN a check is armed for them
    assert_eq!(recorder.take(), vec![2]);

    // WHEN its batches are gone before any page took them (a check that never ran for 14 days)
    expire_batches(&h, &path).await;
    h.clock().advance_ms(1000);
    // THEN the check fails loudly (its job dead-letters, the alarm fires), not quietly
    assert!(matches!(
        log.seal(&path, recorder.check(2)).await,
        Err(Error::Corrupt { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_check_that_seals_still_arms_the_next() {
    let h = AwsHarness::new();
    let recorder = std::sync::Arc::new(Recorder::default());
    let mut options = h.options();
    options.scheduler = Some(recorder.clone());
    let log = spool_aws::AwsLog::new(h.clients().await, options);
    let path = unique_path("superseded-seals");
    log.create(&path, json()).await.unwrap();
    let idle_period = || h.clock().advance_ms(1000);
    // GIVEN a chain whose check sealed the stream to its end and armed its next
    log.append(&path, Append::one(msg(1))).await.unwrap();
    idle_period();
    log.seal(&path, recorder.check(1)).await.unwrap();
    assert_eq!(recorder.take(), vec![1, 1]);
    let older = recorder.check(1);
    // AND a write that knew it, whose check now names the stream's chain
    idle_period();
    log.append(&path, Append::one(msg(2))).await.unwrap();
    assert_eq!(recorder.take(), vec![2]);
    // WHEN the older chain's check runs and seals (the batch is half a day old): THEN it arms
    // the next check all the same, since a writer that read the stream before its seal
    // committed may put after it, unseen by the other chain's check if that ran first
    h.clock().advance_ms(13 * 3600 * 1000);
    let report = log.seal(&path, older).await.unwrap();
    assert_eq!(report.sealed_through, Offset::after(2));
    assert_eq!(recorder.take(), vec![2], "a check that sealed arms the next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealing_lists_the_bucket_only_after_a_sealer_stopped_mid_page() {
    let h = AwsHarness::new();
    let path = unique_path("no-list");
    let log = h.instance().await;
    log.create(&path, json()).await.unwrap();
    for i in 0..60 {
        log.append(&path, Append::one(msg(i))).await.unwrap();
    }
    // WHEN the stream is sealed into full pages, and then to its end
    h.requests.reset();
    let full = log.seal(&path, SealMode::Full).await.unwrap();
    log.append(&path, Append::one(msg(60))).await.unwrap();
    let last = log.seal(&path, SealMode::Final).await.unwrap();
    // THEN pages were written without a single LIST of the bucket
    assert!(!full.written.is_empty() && !last.written.is_empty());
    assert_eq!(requests(&h, "ListObjectsV2"), 0, "{:?}", h.requests.snapshot());
    assert_eq!(
        requests(&h, "PutObject"),
        full.written.len() as u64 + last.written.len() as u64
    );

    // WHEN a sealer stops after writing a page but before recording it
    for i in 61..100 {
        log.append(&path, Append::one(msg(i))).await.unwrap();
    }
    h.fail_points().arm(spool_log::failpoint::SEAL_AFTER_PAGE_WRITE);
    assert!(log.seal(&path, SealMode::Final).await.is_err());
    h.fail_points().disarm(spool_log::failpoint::SEAL_AFTER_PAGE_WRITE);
    // THEN the next pass looks, finds the page and records it; and the one after looks no more
    let again = h.instance().await.seal(&path, SealMode::Final).await.unwrap();
    assert_eq!(again.adopted.len(), 1);
    assert_eq!(again.sealed_through, Offset::after(100));
    h.requests.reset();
    log.append(&path, Append::one(msg(100))).await.unwrap();
    log.seal(&path, SealMode::Final).await.unwrap();
    assert_eq!(requests(&h, "ListObjectsV2"), 0);
}
