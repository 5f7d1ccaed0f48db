//! Sealing off the request path: the embedded store's background sealer, and on AWS the seal
//! requests an append sends to the maintenance queue, run by the worker.

use std::sync::Arc;

use bytes::Bytes;
use spool_log::{
    port::{StreamReader, StreamWriter},
    stream::{Append, ContentType, CreateStream, StreamPath},
};
use spool_tests::{embedded_options, test_limits, unique_path};
use spool_worker::Worker;

fn json() -> CreateStream {
    CreateStream::new(ContentType::parse("application/json").unwrap())
}

const MESSAGE_BYTES: usize = 102;

/// Messages per full page, for messages of [`MESSAGE_BYTES`].
fn per_page() -> u64 {
    let limits = test_limits();
    (limits.page_bytes / MESSAGE_BYTES).min(limits.page_max_messages) as u64
}

/// Appends about three pages' worth of messages.
async fn fill(log: &impl StreamWriter, path: &StreamPath) {
    log.create(path, json()).await.unwrap();
    let message = Bytes::from(format!("\"{}\"", "x".repeat(MESSAGE_BYTES - 2)));
    for _ in 0..3 * per_page() + per_page() / 2 {
        log.append(path, Append::one(message.clone())).await.unwrap();
    }
}

/// Waits until some of the stream is sealed.
async fn sealed_soon(log: &impl StreamReader, path: &StreamPath) -> u64 {
    spool_tests::eventually("some of the stream sealed", || async {
        let sealed = log.metadata(path).await.unwrap().sealed.seq();
        (sealed > 0).then_some(sealed)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_seals_full_pages_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let log = spool_embedded::EmbeddedLog::open(dir.path(), embedded_options(true)).unwrap();
    let path = unique_path("background");
    fill(&log, &path).await;
    let sealed = sealed_soon(&log, &path).await;
    assert!(!log.page_files(&path).await.unwrap().is_empty());
    assert_eq!(sealed % per_page(), 0, "only full pages are sealed");
}

/// The sample seal event's first record, as each of `records` (`(message id, body)`).
fn batch(records: &[(&str, String)]) -> aws_lambda_events::event::sqs::SqsEvent {
    let mut event: aws_lambda_events::event::sqs::SqsEvent =
        serde_json::from_str(include_str!("../../functions/worker/events/seal.json")).unwrap();
    let template = event.records[0].clone();
    event.records = records
        .iter()
        .map(|(id, body)| {
            let mut r = template.clone();
            r.message_id = Some((*id).to_owned());
            r.body = Some(body.clone());
            r
        })
        .collect();
    event
}

#[tokio::test]
async fn the_worker_reports_only_failed_messages_of_a_batch() {
    // GIVEN a batch with a seal job for a stream, one for a stream that no longer exists, and
    // a message that is no job at all
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(spool_embedded::EmbeddedLog::open(dir.path(), embedded_options(false)).unwrap());
    let path = unique_path("worker");
    fill(log.as_ref(), &path).await;
    let event = batch(&[
        ("good", format!(r#"{{"job":"seal","path":"{path}","final_seal":true}}"#)),
        ("gone", r#"{"job":"seal","path":"no/such/stream"}"#.to_owned()),
        ("junk", "not a job".to_owned()),
    ]);
    // WHEN the worker handles it
    let worker = Arc::new(Worker::new(log.clone()));
    let response = worker.handle_batch(event).await;
    // THEN only the junk is reported failed, and the stream is sealed to its end
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, vec!["junk"]);
    let meta = log.metadata(&path).await.unwrap();
    assert_eq!(meta.sealed, meta.tail);
}

/// A sealer that panics on one stream, as a bug in a job would.
struct PanicsOn(String, Arc<dyn spool_log::port::StreamSealer>);

#[async_trait::async_trait]
impl spool_log::port::StreamSealer for PanicsOn {
    async fn seal(
        &self,
        path: &spool_log::stream::StreamPath,
        mode: spool_log::stream::SealMode,
    ) -> Result<spool_log::stream::SealReport, spool_log::error::Error> {
        assert_ne!(path.as_str(), self.0, "a bug in a job");
        self.1.seal(path, mode).await
    }

    async fn seal_when_idle(
        &self,
        path: &spool_log::stream::StreamPath,
        tail: spool_log::stream::Offset,
    ) -> Result<(), spool_log::error::Error> {
        assert_ne!(path.as_str(), self.0, "a bug in a job");
        self.1.seal_when_idle(path, tail).await
    }
}

#[tokio::test]
async fn a_job_that_panics_is_reported_failed_never_acknowledged() {
    // GIVEN a batch whose second job panics
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(spool_embedded::EmbeddedLog::open(dir.path(), embedded_options(false)).unwrap());
    let path = unique_path("worker");
    fill(log.as_ref(), &path).await;
    let event = batch(&[
        ("good", format!(r#"{{"job":"seal","path":"{path}","final_seal":true}}"#)),
        ("bug", r#"{"job":"seal","path":"buggy/stream"}"#.to_owned()),
    ]);
    // WHEN the worker handles it
    let sealer = Arc::new(PanicsOn("buggy/stream".to_owned(), log.clone()));
    let worker = Arc::new(Worker::new(sealer));
    let response = worker.handle_batch(event).await;
    // THEN the panicking job is reported failed, so SQS delivers it again (a record a partial
    // batch response does not list is deleted as done), and the good one is done
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, vec!["bug"]);
}

/// The AWS log on the emulator, its seal requests going to a maintenance queue of its own, and
/// the worker polling that queue (abort the handle to stop it).
#[cfg(feature = "emulator")]
async fn aws_log_sealed_by_a_worker() -> (Arc<spool_aws::AwsLog>, tokio::task::JoinHandle<()>) {
    let harness = spool_tests::AwsHarness::new();
    let clients = harness.clients().await;
    // A queue of this test's own, as the maintenance queue is to one deployment: another
    // test's poller, stopped between receiving a job and finishing it, would otherwise hide
    // this test's job until its lease ran out.
    let queue = clients
        .sqs
        .create_queue()
        .queue_name(format!("test-maintenance-{}", uuid::Uuid::new_v4().simple()))
        .send()
        .await
        .expect("create a queue in the emulator")
        .queue_url
        .expect("a queue URL");
    let mut options = harness.options();
    options.scheduler = Some(Arc::new(spool_aws::SqsSealScheduler::new(
        clients.sqs.clone(),
        queue.clone(),
    )));
    let sqs = clients.sqs.clone();
    let log = Arc::new(spool_aws::AwsLog::new(clients, options));
    let worker = Arc::new(Worker::new(log.clone()));
    let inbox = Arc::new(spool_aws::SqsJobInbox::new(sqs, queue));
    let polling = tokio::spawn(spool_worker::poll_queue(
        worker,
        inbox,
        std::time::Duration::from_secs(1),
    ));
    (log, polling)
}

#[cfg(feature = "emulator")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_past_a_page_ask_the_worker_to_seal_through_sqs() {
    // GIVEN the AWS log with seal requests going to the emulator's maintenance queue, and the
    // worker polling that queue
    let (log, polling) = aws_log_sealed_by_a_worker().await;
    // WHEN a writer appends three pages' worth
    let path = unique_path("sqs-seal");
    fill(log.as_ref(), &path).await;
    // THEN the worker seals full pages, off the request path
    let sealed = sealed_soon(log.as_ref(), &path).await;
    assert_eq!(sealed % per_page(), 0, "only full pages are sealed");
    polling.abort();
}

/// A chat's last page waits for the chat to be idle: full pages are sealed when its turn ends,
/// the short last page only if nothing was appended for `idle_seal` (300 ms in tests), so a busy
/// chat writes a page per page of events, not one per turn.
async fn the_last_page_is_sealed_only_once_the_stream_is_idle(
    log: &(impl StreamWriter + StreamReader + spool_log::port::StreamSealer),
) {
    let path = unique_path("idle");
    fill(log, &path).await;
    let tail = log.metadata(&path).await.unwrap().tail;
    // WHEN a turn ends (full pages now, the rest once idle) and the chat goes on at once
    log.seal_when_idle(&path, tail).await.unwrap();
    let sealed = spool_tests::eventually("the full pages sealed", || async {
        let sealed = log.metadata(&path).await.unwrap().sealed.seq();
        (sealed == 3 * per_page()).then_some(sealed)
    })
    .await;
    log.append(&path, Append::one(Bytes::from("\"more\""))).await.unwrap();
    tokio::time::sleep(test_limits().idle_seal * 3).await;
    // THEN the busy chat's last page was not sealed on its own
    let meta = log.metadata(&path).await.unwrap();
    assert_eq!(meta.sealed.seq(), sealed, "the tail moved: no short page");
    // WHEN the next turn ends and the chat stays quiet
    log.seal_when_idle(&path, meta.tail).await.unwrap();
    // THEN its last page is sealed once it has been idle
    spool_tests::eventually("the idle chat sealed to its end", || async {
        let meta = log.metadata(&path).await.unwrap();
        (meta.sealed == meta.tail).then_some(())
    })
    .await;
    // AND a stale idle check seals nothing more and fails nothing
    let report = log
        .seal(&path, spool_log::stream::SealMode::Idle { tail, chain: None })
        .await
        .unwrap();
    assert_eq!(report.sealed_through, log.metadata(&path).await.unwrap().tail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_seals_a_chats_last_page_once_idle() {
    let dir = tempfile::tempdir().unwrap();
    let log = spool_embedded::EmbeddedLog::open(dir.path(), embedded_options(false)).unwrap();
    the_last_page_is_sealed_only_once_the_stream_is_idle(&log).await;
}

#[cfg(feature = "emulator")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_an_idle_seal_is_a_delayed_job_the_worker_runs_if_nothing_came() {
    // GIVEN the AWS log whose seal requests go to the emulator's maintenance queue, and the
    // worker polling it
    let (log, polling) = aws_log_sealed_by_a_worker().await;
    the_last_page_is_sealed_only_once_the_stream_is_idle(log.as_ref()).await;
    polling.abort();
}

#[tokio::test]
async fn an_idle_seal_job_seals_to_the_end_only_if_the_tail_has_not_moved() {
    // GIVEN a stream of three and a half pages, and idle-seal jobs: one sent at an older tail,
    // one at the current tail
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(spool_embedded::EmbeddedLog::open(dir.path(), embedded_options(false)).unwrap());
    let path = unique_path("idle-job");
    fill(log.as_ref(), &path).await;
    let tail = log.metadata(&path).await.unwrap().tail.seq();
    let worker = Arc::new(Worker::new(log.clone()));
    let job = |at: u64| format!(r#"{{"job":"seal","path":"{path}","final_seal":true,"if_tail":{at}}}"#);
    // WHEN the stale one runs
    let response = worker.handle_batch(batch(&[("stale", job(tail - 1))])).await;
    assert!(response.batch_item_failures.is_empty());
    // THEN only full pages are sealed
    assert_eq!(log.metadata(&path).await.unwrap().sealed.seq(), 3 * per_page());
    // WHEN the current one runs, THEN the stream is sealed to its end
    let response = worker.handle_batch(batch(&[("idle", job(tail))])).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(log.metadata(&path).await.unwrap().sealed.seq(), tail);
}
