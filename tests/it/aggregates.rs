//! Aggregate streams (workspaces' feeds, audit streams) appended off the request path: a batch
//! delivered again or twice at once is appended once, in order; on AWS, events handed to the
//! FIFO queue reach their streams through the worker, each once, each stream's in order.

use std::sync::Arc;

use serde_json::{Value, json};
use spool_log::{
    aggregate::{Appender, IfMissing, apply, stamp},
    port::{StreamReader, StreamWriter},
    stream::{ContentType, CreateStream, Position, StreamPath},
};
use spool_tests::{Harness, unique_path};

/// `n` feed-like events, each with its id.
fn events(tag: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let mut event = json!({"type": "chat.message_added", "chat_id": format!("{tag}-{i}")});
            stamp(&mut event).unwrap();
            event
        })
        .collect()
}

/// The `chat_id`s of the stream's events, in order.
async fn chat_ids(log: &impl StreamReader, path: &StreamPath) -> Vec<String> {
    let chunk = log.read(path, Position::START, None).await.unwrap();
    chunk
        .messages
        .iter()
        .map(|m| {
            serde_json::from_slice::<Value>(m).unwrap()["chat_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn tags(tag: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{tag}-{i}")).collect()
}

async fn feed<H: Harness>(harness: &H) -> (H::Log, StreamPath) {
    let log = harness.instance().await;
    let path = unique_path("feed");
    log.create(
        &path,
        CreateStream::new(ContentType::parse("application/json").unwrap()),
    )
    .await
    .unwrap();
    (log, path)
}

pub(crate) async fn a_batch_delivered_again_is_appended_once<H: Harness>(harness: &H) {
    // GIVEN a feed and a batch of four events, whose first three were appended by a delivery
    // that crashed before the queue heard of it
    let (log, path) = feed(harness).await;
    let batch = events("a", 4);
    assert_eq!(apply(&log, &path, &batch[..3], IfMissing::Drop).await.unwrap(), 3);
    // WHEN the queue delivers them again with the fourth, and then a stale second again
    let again = apply(&log, &path, &batch, IfMissing::Drop).await.unwrap();
    let stale = apply(&log, &path, &batch[1..2], IfMissing::Drop).await.unwrap();
    // THEN only the fourth is new, and the stream holds each event once, in order
    assert_eq!((again, stale), (1, 0));
    assert_eq!(chat_ids(&log, &path).await, tags("a", 0..4));
}

pub(crate) async fn two_deliveries_at_once_append_a_batch_once<H: Harness>(harness: &H) {
    // GIVEN a feed, and for each round a batch delivered to two workers at once (the first
    // delivery's lease ran out while it still ran)
    let (log, path) = feed(harness).await;
    let other = harness.instance().await;
    let mut expected = Vec::new();
    for round in 0..6 {
        let tag = format!("r{round}");
        let batch = events(&tag, 3);
        // WHEN both append it
        let (a, b) = tokio::join!(
            apply(&log, &path, &batch, IfMissing::Drop),
            apply(&other, &path, &batch, IfMissing::Drop)
        );
        // THEN one of them appended it, and the other nothing
        let mut counts = [a.unwrap(), b.unwrap()];
        counts.sort_unstable();
        assert_eq!(counts, [0, 3], "round {round}");
        expected.extend(tags(&tag, 0..3));
    }
    assert_eq!(chat_ids(&log, &path).await, expected);
}

pub(crate) async fn a_missing_stream_drops_its_events_or_is_made<H: Harness>(harness: &H) {
    let log = harness.instance().await;
    // GIVEN no stream: a deleted workspace's feed, an organization's first audit record
    let feed = unique_path("deleted-feed");
    let audit = unique_path("audit");
    // WHEN events come for each
    let dropped = apply(&log, &feed, &events("f", 2), IfMissing::Drop).await.unwrap();
    let made = apply(&log, &audit, &events("h", 2), IfMissing::Create).await.unwrap();
    // THEN the feed's are dropped (it is not made again) and the audit stream is made
    assert_eq!((dropped, made), (0, 2));
    assert!(matches!(
        log.metadata(&feed).await,
        Err(spool_log::error::Error::NotFound { .. })
    ));
    assert_eq!(chat_ids(&log, &audit).await, tags("h", 0..2));
    // AND direct handing-over follows the same rules
    let direct = spool_log::aggregate::Direct(Arc::new(log.clone()));
    let mut event = events("d", 1).remove(0);
    spool_log::aggregate::Aggregates::add(&direct, &feed, event.clone(), IfMissing::Drop)
        .await
        .unwrap();
    assert!(log.metadata(&feed).await.is_err());
    event["chat_id"] = json!("h-2");
    spool_log::aggregate::Aggregates::add(&direct, &audit, event, IfMissing::Create)
        .await
        .unwrap();
    assert_eq!(chat_ids(&log, &audit).await, tags("h", 0..3));
}

pub(crate) async fn an_appender_remembers_its_tail_and_reads_when_another_moved_it<H: Harness>(harness: &H) {
    // GIVEN a feed, a worker's appender, and another worker appending the careful way
    let (log, path) = feed(harness).await;
    let other = harness.instance().await;
    let appender = Appender::new(Arc::new(log.clone()));
    let batch = events("m", 8);
    // WHEN the appender appends a batch, and the queue hands it over again with the next
    assert_eq!(appender.apply(&path, &batch[..3], IfMissing::Drop).await.unwrap(), 3);
    assert_eq!(appender.apply(&path, &batch[..4], IfMissing::Drop).await.unwrap(), 1);
    // AND another worker appends the next (the tail the appender remembers is stale)
    assert_eq!(apply(&other, &path, &batch[4..5], IfMissing::Drop).await.unwrap(), 1);
    // AND the appender is handed that event again, with two new ones
    let again = appender.apply(&path, &batch[3..7], IfMissing::Drop).await.unwrap();
    // AND, on the tail it wrote, a stale batch and the last event
    let stale = appender.apply(&path, &batch[5..7], IfMissing::Drop).await.unwrap();
    let last = appender.apply(&path, &batch[6..8], IfMissing::Drop).await.unwrap();
    // THEN each event is in the stream once, in the order handed over
    assert_eq!((again, stale, last), (2, 0, 1));
    assert_eq!(chat_ids(&log, &path).await, tags("m", 0..8));
}

on_both_backends!(aggregates:
    an_appender_remembers_its_tail_and_reads_when_another_moved_it,
    a_batch_delivered_again_is_appended_once,
    two_deliveries_at_once_append_a_batch_once,
    a_missing_stream_drops_its_events_or_is_made,
);

#[cfg(feature = "emulator")]
mod queue {
    use std::time::Duration;

    use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
    use spool_log::aggregate::Aggregates;
    use spool_tests::AwsHarness;

    use super::*;

    /// A FIFO queue of this test's own, set up as the template's aggregates queue.
    async fn fifo_queue(sqs: &aws_sdk_sqs::Client) -> String {
        sqs.create_queue()
            .queue_name(format!("test-aggregates-{}.fifo", uuid::Uuid::new_v4().simple()))
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(QueueAttributeName::DeduplicationScope, "messageGroup")
            .attributes(QueueAttributeName::FifoThroughputLimit, "perMessageGroupId")
            .send()
            .await
            .expect("create a FIFO queue in the emulator")
            .queue_url
            .expect("a queue URL")
    }

    /// Receives what the queue hands out now, as Lambda's event source would (leased for
    /// `lease`), as an SQS event of the worker function.
    async fn receive(sqs: &aws_sdk_sqs::Client, url: &str, lease: i32) -> aws_lambda_events::event::sqs::SqsEvent {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(lease)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
        for message in out.messages.unwrap_or_default() {
            let mut record = aws_lambda_events::event::sqs::SqsMessage::default();
            record.message_id = message.message_id().map(str::to_owned);
            record.receipt_handle = message.receipt_handle().map(str::to_owned);
            record.body = message.body().map(str::to_owned);
            for (name, value) in message.attributes().cloned().unwrap_or_default() {
                record.attributes.insert(name.as_str().to_owned(), value);
            }
            event.records.push(record);
        }
        event
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_on_the_tail_the_worker_wrote_is_one_put_and_no_read() {
        // GIVEN a feed a worker's appender appended to once (reading its tail to do so)
        let harness = AwsHarness::new();
        let (log, path) = feed(&harness).await;
        let appender = Appender::new(Arc::new(log));
        let batch = events("c", 5);
        assert_eq!(appender.apply(&path, &batch[..2], IfMissing::Drop).await.unwrap(), 2);
        // WHEN the next batches come (one starting with an event it appended before)
        harness.requests.reset();
        assert_eq!(appender.apply(&path, &batch[1..4], IfMissing::Drop).await.unwrap(), 2);
        assert_eq!(appender.apply(&path, &batch[4..], IfMissing::Drop).await.unwrap(), 1);
        // THEN each was one conditional PutItem, and nothing was read
        let requests = harness.requests.snapshot();
        let dynamodb: Vec<_> = requests
            .iter()
            .filter(|((service, _), _)| service == "DynamoDB")
            .collect();
        assert_eq!(
            dynamodb,
            vec![(&("DynamoDB".to_owned(), "PutItem".to_owned()), &2)],
            "{requests:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn feed_events_cross_the_fifo_queue_once_and_in_order() {
        // GIVEN two feeds and the aggregates queue
        let harness = AwsHarness::new();
        let sqs = harness.clients().await.sqs;
        let url = fifo_queue(&sqs).await;
        let (log, a) = feed(&harness).await;
        let (_, b) = feed(&harness).await;
        let log = Arc::new(log);
        let requests = spool_aws::SqsAggregates::new(sqs.clone(), url.clone());
        // WHEN requests hand over twelve events for each, interleaved
        let (for_a, for_b) = (events("a", 12), events("b", 12));
        for (ea, eb) in for_a.iter().zip(&for_b) {
            requests.add(&a, ea.clone(), IfMissing::Drop).await.unwrap();
            requests.add(&b, eb.clone(), IfMissing::Drop).await.unwrap();
        }
        // THEN nothing was appended on their path: the feeds are untouched
        for path in [&a, &b] {
            assert_eq!(log.metadata(path).await.unwrap().tail.seq(), 0);
        }
        // WHEN the worker function's first batch is appended but never acknowledged (it
        // crashed), and the queue hands the messages out again once their lease ends
        let worker = Arc::new(spool_worker::Worker::new(log.clone()).with_aggregates(log.clone()));
        let first = receive(&sqs, &url, 1).await;
        assert!(!first.records.is_empty(), "the queue hands out the events");
        let response = worker.handle_batch(first).await;
        assert!(response.batch_item_failures.is_empty());
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        // AND then batches are appended and acknowledged until the queue is empty
        let mut batches = 0;
        loop {
            let event = receive(&sqs, &url, 30).await;
            if event.records.is_empty() {
                break;
            }
            batches += 1;
            assert!(batches < 20, "the queue keeps handing out events");
            let receipts: Vec<String> = event.records.iter().filter_map(|r| r.receipt_handle.clone()).collect();
            let response = worker.handle_batch(event).await;
            assert!(response.batch_item_failures.is_empty());
            for receipt in receipts {
                sqs.delete_message()
                    .queue_url(&url)
                    .receipt_handle(receipt)
                    .send()
                    .await
                    .unwrap();
            }
        }
        // THEN each feed holds its events once, in the order they were handed over
        assert_eq!(chat_ids(log.as_ref(), &a).await, tags("a", 0..12));
        assert_eq!(chat_ids(log.as_ref(), &b).await, tags("b", 0..12));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spool_serves_worker_polls_the_aggregates_queue() {
        // GIVEN a feed, the aggregates queue, and the worker polling it as `spool serve` does
        let harness = AwsHarness::new();
        let sqs = harness.clients().await.sqs;
        let url = fifo_queue(&sqs).await;
        let (log, path) = feed(&harness).await;
        let log = Arc::new(log);
        let worker = Arc::new(spool_worker::Worker::new(log.clone()).with_aggregates(log.clone()));
        let inbox = Arc::new(spool_aws::SqsJobInbox::new(sqs.clone(), url.clone()));
        let polling = tokio::spawn(spool_worker::poll_queue(worker, inbox, Duration::from_secs(1)));
        // WHEN requests hand over events, and the same event twice (a retried request)
        let requests = spool_aws::SqsAggregates::new(sqs, url);
        let handed = events("p", 15);
        for event in &handed {
            requests.add(&path, event.clone(), IfMissing::Drop).await.unwrap();
        }
        requests.add(&path, handed[3].clone(), IfMissing::Drop).await.unwrap();
        // THEN the feed gets each once, in order
        let ids = spool_tests::eventually("the feed has every event", || async {
            let ids = chat_ids(log.as_ref(), &path).await;
            (ids.len() >= 15).then_some(ids)
        })
        .await;
        // (and nothing more comes once the queue is drained)
        tokio::time::sleep(Duration::from_secs(3)).await;
        polling.abort();
        assert_eq!(ids, tags("p", 0..15));
        assert_eq!(chat_ids(log.as_ref(), &path).await, ids);
    }
}
