//! The runner service's rules, over small in-memory ports.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::json;
use spool_log::{
    clock::ManualClock,
    notify::WaitOutcome,
    stream::{Chunk, ContentType, Expiry, Position, StreamMeta, StreamPath},
};
use tokio::io::AsyncReadExt;

use super::*;
use crate::{
    attachment::Transfer,
    clis::CliStatus,
    listing::{Page, SessionQuery, TurnQuery},
    session::{OpenRequest, PendingTurn, RequestKind},
    workspace::CliType,
};

const ORG: &str = "acme";

/// Runner jobs and runners, in memory, with the store's conditional writes.
#[derive(Default)]
struct Jobs {
    jobs: Mutex<HashMap<(String, String), RunnerJob>>,
    runners: Mutex<HashMap<(String, String), RunnerRecord>>,
}

#[async_trait]
impl RunnerStore for Jobs {
    async fn offer_job(&self, org: &str, job: &RunnerJob) -> Result<bool, Error> {
        let mut jobs = self.jobs.lock().unwrap();
        let key = (org.to_owned(), job.turn_id.clone());
        if jobs.contains_key(&key) {
            return Ok(false);
        }
        jobs.insert(key, job.clone());
        Ok(true)
    }

    async fn runner_job(&self, org: &str, turn_id: &str) -> Result<Option<RunnerJob>, Error> {
        Ok(self
            .jobs
            .lock()
            .unwrap()
            .get(&(org.to_owned(), turn_id.to_owned()))
            .cloned())
    }

    async fn runner_jobs(&self, org: &str, limit: usize) -> Result<Vec<RunnerJob>, Error> {
        let mut jobs: Vec<_> = self
            .jobs
            .lock()
            .unwrap()
            .iter()
            .filter(|((o, _), _)| o == org)
            .map(|(_, j)| j.clone())
            .collect();
        jobs.sort_by(|a, b| (a.offered_ms, &a.turn_id).cmp(&(b.offered_ms, &b.turn_id)));
        jobs.truncate(limit);
        Ok(jobs)
    }

    async fn claim_job(&self, org: &str, turn_id: &str, epoch: u64, runner: &str, lease: i64) -> Result<bool, Error> {
        let mut jobs = self.jobs.lock().unwrap();
        match jobs.get_mut(&(org.to_owned(), turn_id.to_owned())) {
            Some(j) if j.epoch == epoch && j.outcome.is_none() => {
                j.epoch += 1;
                j.runner = Some(runner.to_owned());
                j.lease_until_ms = lease;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn renew_job(&self, org: &str, turn_id: &str, epoch: u64, lease: i64) -> Result<bool, Error> {
        let mut jobs = self.jobs.lock().unwrap();
        match jobs.get_mut(&(org.to_owned(), turn_id.to_owned())) {
            Some(j) if j.epoch == epoch && j.outcome.is_none() => {
                j.lease_until_ms = lease;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn settle_job(&self, org: &str, turn_id: &str, epoch: u64, outcome: &RunnerOutcome) -> Result<bool, Error> {
        let mut jobs = self.jobs.lock().unwrap();
        match jobs.get_mut(&(org.to_owned(), turn_id.to_owned())) {
            Some(j) if j.epoch == epoch && j.outcome.is_none() => {
                j.outcome = Some(outcome.clone());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn remove_job(&self, org: &str, turn_id: &str) -> Result<(), Error> {
        self.jobs.lock().unwrap().remove(&(org.to_owned(), turn_id.to_owned()));
        Ok(())
    }

    async fn runner_seen(&self, org: &str, runner: &RunnerRecord) -> Result<(), Error> {
        self.runners
            .lock()
            .unwrap()
            .insert((org.to_owned(), runner.name.clone()), runner.clone());
        Ok(())
    }

    async fn runners(&self, org: &str) -> Result<Vec<RunnerRecord>, Error> {
        Ok(self
            .runners
            .lock()
            .unwrap()
            .iter()
            .filter(|((o, _), _)| o == org)
            .map(|(_, r)| r.clone())
            .collect())
    }
}

/// Turn records and files' records: only what the service asks of them.
#[derive(Default)]
struct Records {
    turns: Mutex<Vec<(String, TurnRecord)>>,
    attachments: Mutex<Vec<Attachment>>,
}

#[async_trait]
impl Sessions for Records {
    async fn create_session(&self, _: &str, _: &Session) -> Result<(), Error> {
        unimplemented!()
    }
    async fn session(&self, _: &str, _: &str) -> Result<Option<Session>, Error> {
        unimplemented!()
    }
    async fn update_session(&self, _: &str, _: &Session) -> Result<(), Error> {
        unimplemented!()
    }
    async fn touch_session(&self, _: &str, _: &str, _: i64, _: &str) -> Result<(), Error> {
        unimplemented!()
    }
    async fn note_branch(&self, _: &str, _: &str, _: u64) -> Result<(), Error> {
        unimplemented!()
    }
    async fn delete_session(&self, _: &str, _: &str) -> Result<(), Error> {
        unimplemented!()
    }
    async fn sessions(&self, _: &str, _: &SessionQuery) -> Result<Page<Session>, Error> {
        unimplemented!()
    }
    async fn claim_turn(&self, _: &str, _: &str, _: &PendingTurn) -> Result<Result<(), PendingTurn>, Error> {
        unimplemented!()
    }
    async fn release_turn(&self, _: &str, _: &str, _: &str) -> Result<bool, Error> {
        unimplemented!()
    }
    async fn record_turn(&self, _: &str, session_id: &str, turn: &TurnRecord) -> Result<(), Error> {
        self.turns.lock().unwrap().push((session_id.to_owned(), turn.clone()));
        Ok(())
    }
    async fn count_run(&self, _: &str, _: &str, _: &str, _: i64) -> Result<u32, Error> {
        unimplemented!()
    }
    async fn turns(&self, _: &str, _: &TurnQuery) -> Result<Page<TurnRecord>, Error> {
        unimplemented!()
    }
    async fn open_request(&self, _: &str, _: &str, _: &OpenRequest) -> Result<(), Error> {
        unimplemented!()
    }
    async fn take_request(
        &self,
        _: &str,
        _: &str,
        _: &str,
        _: Option<RequestKind>,
    ) -> Result<Option<OpenRequest>, Error> {
        unimplemented!()
    }
    async fn open_requests(&self, _: &str, _: &str) -> Result<Vec<OpenRequest>, Error> {
        unimplemented!()
    }
}

#[async_trait]
impl Attachments for Records {
    async fn create_attachment(&self, _: &str, _: &Attachment) -> Result<(), Error> {
        unimplemented!()
    }
    async fn attachment(&self, _: &str, session_id: &str, id: &str) -> Result<Option<Attachment>, Error> {
        let found = self
            .attachments
            .lock()
            .unwrap()
            .iter()
            .find(|a| a.session_id == session_id && a.id == id)
            .cloned();
        Ok(found)
    }
    async fn attachments(&self, _: &str, _: &str) -> Result<Vec<Attachment>, Error> {
        unimplemented!()
    }
    async fn complete_attachment(&self, _: &str, _: &str, _: &str, _: i64) -> Result<Option<Attachment>, Error> {
        unimplemented!()
    }
    async fn abandon_attachment(&self, _: &str, _: &str, _: &str) -> Result<bool, Error> {
        unimplemented!()
    }
}

/// Chats' streams, in memory, with waits.
#[derive(Default)]
struct Streams {
    streams: Mutex<HashMap<String, Vec<Bytes>>>,
    changed: tokio::sync::Notify,
}

impl Streams {
    fn push(&self, session: &str, event: serde_json::Value) {
        let path = Session::stream(ORG, session).unwrap().as_str().to_owned();
        let mut streams = self.streams.lock().unwrap();
        let stream = streams.entry(path).or_default();
        let mut event = event;
        event["v"] = json!(1);
        event["seq"] = json!(stream.len() + 1);
        event["ts"] = json!("2026-12-07T00:00:00Z");
        event["session_id"] = json!(session);
        stream.push(Bytes::from(event.to_string()));
        drop(streams);
        self.changed.notify_waiters();
    }

    fn tail(&self, path: &StreamPath) -> Option<u64> {
        self.streams.lock().unwrap().get(path.as_str()).map(|s| s.len() as u64)
    }
}

#[async_trait]
impl StreamReader for Streams {
    async fn metadata(&self, path: &StreamPath) -> Result<StreamMeta, Error> {
        let tail = self.tail(path).ok_or_else(|| Error::NotFound { path: path.clone() })?;
        Ok(StreamMeta {
            path: path.clone(),
            content_type: ContentType::parse("application/json")?,
            tail: Offset::after(tail),
            closed: false,
            expiry: Expiry::Never,
            expires_at_ms: None,
            created_ms: 0,
            sealed: Offset::START,
        })
    }

    async fn read(&self, path: &StreamPath, from: Position, _: Option<usize>) -> Result<Chunk, Error> {
        let Position::At(from) = from else { unimplemented!() };
        let streams = self.streams.lock().unwrap();
        let stream = streams
            .get(path.as_str())
            .ok_or_else(|| Error::NotFound { path: path.clone() })?;
        let messages: Vec<Bytes> = stream.iter().skip(from.seq() as usize).cloned().collect();
        Ok(Chunk {
            stream_id: "s".to_owned(),
            content_type: ContentType::parse("application/json")?,
            start: from,
            next_offset: Offset::after(stream.len() as u64),
            messages,
            up_to_date: true,
            closed: false,
            immutable: false,
        })
    }

    async fn wait(&self, path: &StreamPath, after: Offset, timeout: Duration) -> Result<WaitOutcome, Error> {
        let changed = self.changed.notified();
        let tail = self.tail(path).ok_or_else(|| Error::NotFound { path: path.clone() })?;
        if tail <= after.seq() {
            let _ = tokio::time::timeout(timeout, changed).await;
        }
        Ok(WaitOutcome::TimedOut {
            tail: Offset::after(self.tail(path).unwrap_or(0)),
        })
    }
}

/// Files' bytes, in memory.
#[derive(Default)]
struct Files(Mutex<HashMap<String, Vec<u8>>>);

#[async_trait]
impl FileStore for Files {
    async fn upload(&self, _: &str, _: &str, _: u64, _: Option<&str>, _: Duration) -> Result<Transfer, Error> {
        unimplemented!()
    }
    async fn download(&self, _: &str, _: &str, _: &str, _: Duration) -> Result<Transfer, Error> {
        Ok(Transfer::ThroughSpool)
    }
    async fn size(&self, _: &str) -> Result<Option<u64>, Error> {
        unimplemented!()
    }
    async fn write(&self, _: &str, _: u64, _: FileReader) -> Result<(), Error> {
        unimplemented!()
    }
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), Error> {
        self.0.lock().unwrap().insert(key.to_owned(), bytes);
        Ok(())
    }
    async fn read(&self, key: &str) -> Result<Option<FileReader>, Error> {
        let bytes = self.0.lock().unwrap().get(key).cloned();
        Ok(bytes.map(|b| Box::pin(std::io::Cursor::new(b)) as FileReader))
    }
    async fn keep(&self, _: &str) -> Result<(), Error> {
        unimplemented!()
    }
    async fn delete(&self, _: &str) -> Result<(), Error> {
        unimplemented!()
    }
    async fn copy(&self, _: &str, _: &str) -> Result<(), Error> {
        unimplemented!()
    }
}

/// The turn queue: what was queued.
#[derive(Default)]
struct Queue(Mutex<Vec<TurnJob>>);

#[async_trait]
impl TurnQueue for Queue {
    async fn enqueue(&self, job: &TurnJob) -> Result<(), Error> {
        self.0.lock().unwrap().push(job.clone());
        Ok(())
    }
    async fn receive(&self, _: &crate::turns::Receive) -> Result<Vec<crate::turns::Delivery>, Error> {
        unimplemented!()
    }
    async fn extend(&self, _: &str, _: Duration) -> Result<(), Error> {
        unimplemented!()
    }
    async fn ack(&self, _: &str) -> Result<(), Error> {
        unimplemented!()
    }
    async fn retry(&self, _: &str, _: Duration) -> Result<(), Error> {
        unimplemented!()
    }
}

struct World {
    jobs: Arc<Jobs>,
    records: Arc<Records>,
    streams: Arc<Streams>,
    files: Arc<Files>,
    queue: Arc<Queue>,
    clock: ManualClock,
    service: RunnerService,
}

fn world() -> World {
    let jobs = Arc::new(Jobs::default());
    let records = Arc::new(Records::default());
    let streams = Arc::new(Streams::default());
    let files = Arc::new(Files::default());
    let queue = Arc::new(Queue::default());
    let clock = ManualClock::new();
    let service = RunnerService::over(RunnerPorts {
        jobs: jobs.clone(),
        sessions: records.clone(),
        attachments: records.clone(),
        log: streams.clone(),
        files: Some(files.clone()),
        turns: queue.clone(),
        clock: Arc::new(clock.clone()),
    })
    .with_poll(Duration::from_millis(5));
    World {
        jobs,
        records,
        streams,
        files,
        queue,
        clock,
        service,
    }
}

impl World {
    /// Offers a job for `turn` of chat `session` (with its request, and one event in the chat).
    async fn offer(&self, turn: &str, session: &str, workspace: Option<&str>, cli: CliType, offered_ms: i64) {
        self.streams.push(
            session,
            json!({"kind": "system", "type": "system_note", "payload": {"level": "info", "message": "hi"}}),
        );
        let job = RunnerJob {
            turn_id: turn.to_owned(),
            session_id: session.to_owned(),
            workspace_id: workspace.map(str::to_owned),
            cli,
            offered_seq: self.streams.tail(&Session::stream(ORG, session).unwrap()).unwrap(),
            offered_ms,
            wait_ms: 600_000,
            epoch: 0,
            runner: None,
            lease_until_ms: 0,
            outcome: None,
        };
        assert!(self.jobs.offer_job(ORG, &job).await.unwrap());
        let request = json!({"instruction": format!("answer {turn}")})
            .to_string()
            .into_bytes();
        self.files.0.lock().unwrap().insert(request_key(ORG, turn), request);
    }

    fn job(&self, turn: &str) -> RunnerJob {
        self.jobs.jobs.lock().unwrap()[&(ORG.to_owned(), turn.to_owned())].clone()
    }
}

fn claim(name: &str, clis: &[CliType], workspaces: &[&str]) -> Claim {
    Claim {
        name: name.to_owned(),
        version: Some("0.1.0".to_owned()),
        clis: clis
            .iter()
            .map(|&cli| CliStatus {
                cli,
                installed: true,
                version: Some("1.0".to_owned()),
                healthy: true,
                reason: None,
            })
            .collect(),
        workspaces: workspaces.iter().map(|w| (*w).to_owned()).collect(),
        wait_ms: Some(0),
    }
}

#[tokio::test]
async fn a_claim_takes_the_oldest_job_it_serves_and_runs_and_records_the_runner() {
    // GIVEN jobs: a codex one (the runner does not run codex), one of another workspace, and two it may take
    let w = world();
    let now = w.clock.now_ms();
    w.offer("t_codex", "s1", Some("ws_a"), CliType::Codex, now - 50).await;
    w.offer("t_other", "s2", Some("ws_b"), CliType::Claude, now - 40).await;
    w.offer("t_new", "s3", Some("ws_a"), CliType::Claude, now - 10).await;
    w.offer("t_old", "s4", Some("ws_a"), CliType::Claude, now - 20).await;
    // WHEN a claude runner of ws_a claims
    let got = w
        .service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &["ws_a"]))
        .await
        .unwrap()
        .unwrap();
    // THEN it gets the oldest it may take, with its request, under a lease of epoch 1
    assert_eq!(got.turn_id, "t_old");
    assert_eq!((got.epoch, got.lease_ms), (1, LEASE_MS as u64));
    assert_eq!(got.request["instruction"], "answer t_old");
    let job = w.job("t_old");
    assert_eq!(
        (job.epoch, job.runner.as_deref(), job.lease_until_ms),
        (1, Some("box-1"), now + LEASE_MS)
    );
    // AND the runner is recorded, online
    let runners = w.service.runners(ORG, None).await.unwrap();
    assert_eq!(runners.len(), 1);
    assert!(runners[0].online && runners[0].name == "box-1" && runners[0].workspaces == ["ws_a"]);
    // AND the next claim takes the next one, then none is left for it
    let next = w
        .service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &["ws_a"]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.turn_id, "t_new");
    assert!(
        w.service
            .claim(ORG, &claim("box-1", &[CliType::Claude], &["ws_a"]))
            .await
            .unwrap()
            .is_none()
    );
    // AND another organization's runner never sees them
    assert!(
        w.service
            .claim("other", &claim("box-2", &CliType::ALL, &[]))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn an_unhealthy_cli_or_a_chat_outside_workspaces_is_not_taken_by_the_wrong_runner() {
    let w = world();
    let now = w.clock.now_ms();
    w.offer("t_global", "s1", None, CliType::Claude, now).await;
    let mut sick = claim("box-1", &[CliType::Claude], &[]);
    sick.clis[0].healthy = false;
    assert!(w.service.claim(ORG, &sick).await.unwrap().is_none());
    // A runner of named workspaces does not take a chat outside workspaces; one for all does.
    assert!(
        w.service
            .claim(ORG, &claim("box-1", &[CliType::Claude], &["ws_a"]))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        w.service
            .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_waiting_claim_takes_a_job_offered_meanwhile() {
    let w = world();
    let mut waiting = claim("box-1", &[CliType::Claude], &[]);
    waiting.wait_ms = Some(2_000);
    let service = w.service.clone();
    let task = tokio::spawn(async move { service.claim(ORG, &waiting).await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    w.offer("t1", "s1", None, CliType::Claude, w.clock.now_ms()).await;
    let got = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.unwrap().turn_id, "t1");
}

#[tokio::test]
async fn a_lost_lease_is_claimable_again_with_the_next_epoch_and_the_old_claim_is_cancelled() {
    let w = world();
    w.offer("t1", "s1", None, CliType::Claude, w.clock.now_ms()).await;
    let first = w
        .service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    // While the lease holds, no one else takes it.
    assert!(
        w.service
            .claim(ORG, &claim("box-2", &[CliType::Claude], &[]))
            .await
            .unwrap()
            .is_none()
    );
    w.clock.advance_ms(LEASE_MS + 1);
    let second = w
        .service
        .claim(ORG, &claim("box-2", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((first.epoch, second.epoch), (1, 2));
    // The first runner's heartbeat is told to stop, its files and its settle are refused.
    let beat = w
        .service
        .heartbeat(
            ORG,
            "t1",
            &Heartbeat {
                epoch: 1,
                wait_ms: Some(0),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        beat,
        Beat {
            cancel: true,
            lease_ms: 0
        }
    );
    let stale = w
        .service
        .settle(
            ORG,
            "t1",
            &Settle {
                epoch: 1,
                outcome: reply("late"),
            },
        )
        .await;
    assert!(matches!(stale, Err(Error::Refused(r)) if r.status == 409 && r.code == "superseded"));
    assert!(matches!(w.service.file(ORG, "t1", 1, "att_1").await, Err(Error::Refused(r)) if r.status == 409));
    assert!(w.queue.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_job_whose_request_is_lost_fails_and_queues_its_turn_and_the_claim_looks_further() {
    let w = world();
    let now = w.clock.now_ms();
    w.offer("t_lost", "s1", None, CliType::Claude, now - 10).await;
    w.offer("t_ok", "s2", None, CliType::Claude, now).await;
    w.files.0.lock().unwrap().remove(&request_key(ORG, "t_lost"));
    let got = w
        .service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.turn_id, "t_ok");
    let lost = w.job("t_lost");
    assert_eq!(
        lost.outcome,
        Some(RunnerOutcome::Failed {
            reason: LOST_REQUEST.to_owned()
        })
    );
    let queued = w.queue.0.lock().unwrap().clone();
    assert_eq!(queued, vec![TurnJob::new(ORG, "s1", "t_lost", 1).settled(1)]);
}

#[tokio::test]
async fn bad_claims_are_refused_and_write_nothing() {
    let w = world();
    let long = "x".repeat(65);
    let mut bad = vec![
        claim("", &[], &[]),
        claim(&long, &[], &[]),
        claim("a b", &[], &[]),
        claim("a/b", &[], &[]),
    ];
    let mut many = claim("ok", &[], &[]);
    many.clis = (0..9).map(|_| CliStatus::unavailable(CliType::Claude, "no")).collect();
    bad.push(many);
    let ws: Vec<String> = (0..101).map(|i| format!("ws_{i}")).collect();
    bad.push(claim("ok", &[], &ws.iter().map(String::as_str).collect::<Vec<_>>()));
    bad.push(claim("ok", &[], &["a/b"]));
    let mut loud = claim("ok", &[CliType::Claude], &[]);
    loud.clis[0].version = Some("v\u{7}".to_owned());
    bad.push(loud);
    for claim in bad {
        assert!(
            matches!(w.service.claim(ORG, &claim).await, Err(Error::Invalid { .. })),
            "{claim:?}"
        );
    }
    assert!(w.service.runners(ORG, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_claim_waits_at_most_its_cap() {
    let w = world();
    let mut long = claim("box-1", &[CliType::Claude], &[]);
    long.wait_ms = Some(u64::MAX);
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    assert!(w.service.claim(ORG, &long).await.unwrap().is_none());
    let waited = started.elapsed();
    assert!(
        (CLAIM_WAIT_MS..CLAIM_WAIT_MS + 100).contains(&(waited.as_millis() as u64)),
        "{waited:?}"
    );
}

#[tokio::test]
async fn a_heartbeat_renews_the_lease_and_answers_at_once_on_an_abort() {
    let w = world();
    w.offer("t1", "s1", None, CliType::Claude, w.clock.now_ms()).await;
    // An abort before the offer is another turn's.
    let before = w.job("t1").offered_seq;
    assert_eq!(before, 1);
    w.service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    w.clock.advance_ms(10_000);
    let beat = w
        .service
        .heartbeat(
            ORG,
            "t1",
            &Heartbeat {
                epoch: 1,
                wait_ms: Some(0),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        beat,
        Beat {
            cancel: false,
            lease_ms: LEASE_MS as u64
        }
    );
    assert_eq!(w.job("t1").lease_until_ms, w.clock.now_ms() + LEASE_MS);
    // A waiting heartbeat answers as soon as the chat's abort comes, long before its wait.
    let service = w.service.clone();
    let waiting = tokio::spawn(async move {
        service
            .heartbeat(
                ORG,
                "t1",
                &Heartbeat {
                    epoch: 1,
                    wait_ms: Some(15_000),
                },
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    w.streams.push(
        "s1",
        json!({"kind": "submit", "type": "control_submitted", "payload": {"action": "abort"}}),
    );
    let beat = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(beat.cancel);
}

#[tokio::test]
async fn a_heartbeat_stops_when_the_job_ends_meanwhile_and_for_a_wrong_epoch() {
    let w = world();
    w.offer("t1", "s1", None, CliType::Claude, w.clock.now_ms()).await;
    w.service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    assert!(
        w.service
            .heartbeat(
                ORG,
                "t1",
                &Heartbeat {
                    epoch: 2,
                    wait_ms: Some(0)
                }
            )
            .await
            .unwrap()
            .cancel
    );
    assert!(
        w.service
            .heartbeat(
                ORG,
                "nope",
                &Heartbeat {
                    epoch: 1,
                    wait_ms: Some(0)
                }
            )
            .await
            .unwrap()
            .cancel
    );
    let service = w.service.clone();
    let waiting = tokio::spawn(async move {
        service
            .heartbeat(
                ORG,
                "t1",
                &Heartbeat {
                    epoch: 1,
                    wait_ms: Some(15_000),
                },
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The engine ends the turn (its wait ran out) and removes the job; the chat says nothing.
    w.jobs.remove_job(ORG, "t1").await.unwrap();
    let beat = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(beat.cancel);
}

fn reply(text: &str) -> RunnerOutcome {
    RunnerOutcome::Reply {
        message: Some(text.to_owned()),
        actions: vec![json!({"type": "create_task", "title": "t"})],
    }
}

#[tokio::test]
async fn a_settle_is_recorded_once_and_queues_the_turn_at_the_chats_tail() {
    let w = world();
    w.offer("t1", "s1", None, CliType::Claude, w.clock.now_ms()).await;
    w.service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    w.streams.push(
        "s1",
        json!({"kind": "system", "type": "system_note", "payload": {"level": "info", "message": "more"}}),
    );
    let settle = Settle {
        epoch: 1,
        outcome: reply("done"),
    };
    w.service.settle(ORG, "t1", &settle).await.unwrap();
    assert_eq!(w.job("t1").outcome, Some(reply("done")));
    let queued = w.queue.0.lock().unwrap().clone();
    assert_eq!(queued, vec![TurnJob::new(ORG, "s1", "t1", 2).settled(1)]);
    // Its key is its own: a check of the job queued at the same tail does not hide it.
    assert_ne!(queued[0].key(), TurnJob::new(ORG, "s1", "t1", 2).key());
    let recorded = w.records.turns.lock().unwrap().clone();
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        (recorded[0].1.status, recorded[0].1.trigger_seq),
        (TurnStatus::Queued, 2)
    );
    // The same settle again (its answer was lost) is accepted again; another one is refused.
    w.service.settle(ORG, "t1", &settle).await.unwrap();
    let other = Settle {
        epoch: 1,
        outcome: reply("changed my mind"),
    };
    assert!(matches!(w.service.settle(ORG, "t1", &other).await, Err(Error::Refused(r)) if r.status == 409));
    // A settled job's heartbeat stops.
    assert!(
        w.service
            .heartbeat(
                ORG,
                "t1",
                &Heartbeat {
                    epoch: 1,
                    wait_ms: Some(0)
                }
            )
            .await
            .unwrap()
            .cancel
    );
}

#[tokio::test]
async fn bad_outcomes_are_refused_before_anything_is_written() {
    let w = world();
    w.offer("t1", "s1", None, CliType::Claude, w.clock.now_ms()).await;
    w.service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    let big = RunnerOutcome::Reply {
        message: Some("x".repeat(MAX_OUTCOME_BYTES)),
        actions: vec![],
    };
    let untyped = RunnerOutcome::Reply {
        message: None,
        actions: vec![json!({"title": "t"})],
    };
    let not_object = RunnerOutcome::Reply {
        message: None,
        actions: vec![json!("create_task")],
    };
    let numbered = RunnerOutcome::Reply {
        message: None,
        actions: vec![json!({"type": 3})],
    };
    let long_reason = RunnerOutcome::Failed {
        reason: "x".repeat(MAX_REASON_BYTES + 1),
    };
    for outcome in [big, untyped, not_object, numbered, long_reason] {
        let settle = Settle { epoch: 1, outcome };
        assert!(matches!(
            w.service.settle(ORG, "t1", &settle).await,
            Err(Error::Invalid { .. })
        ));
    }
    assert_eq!(w.job("t1").outcome, None);
    assert!(w.queue.0.lock().unwrap().is_empty());
}

fn attachment(id: &str, session: &str, status: AttachmentStatus) -> Attachment {
    Attachment {
        id: id.to_owned(),
        session_id: session.to_owned(),
        filename: "notes.md".to_owned(),
        content_type: "text/markdown".to_owned(),
        size: 5,
        sha256: None,
        author: "u".to_owned(),
        status,
        created_ms: 0,
        upload_expires_ms: 0,
        completed_ms: None,
    }
}

#[tokio::test]
async fn a_runner_fetches_only_its_chats_completed_files_with_its_live_epoch() {
    let w = world();
    w.offer("t1", "s1", None, CliType::Claude, w.clock.now_ms()).await;
    w.service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    {
        let mut attachments = w.records.attachments.lock().unwrap();
        attachments.push(attachment("att_1", "s1", AttachmentStatus::Complete));
        attachments.push(attachment("att_up", "s1", AttachmentStatus::Uploading));
        attachments.push(attachment("att_2", "s2", AttachmentStatus::Complete));
        let mut files = w.files.0.lock().unwrap();
        for (s, a) in [("s1", "att_1"), ("s1", "att_up"), ("s2", "att_2")] {
            files.insert(object_key(ORG, s, a), b"hello".to_vec());
        }
    }
    let file = w.service.file(ORG, "t1", 1, "att_1").await.unwrap();
    assert_eq!(file.attachment.content_type, "text/markdown");
    let mut bytes = Vec::new();
    let crate::service::RunnerFileBody::Bytes(mut reader) = file.body else {
        panic!("a store that signs no URLs gives the bytes");
    };
    reader.read_to_end(&mut bytes).await.unwrap();
    assert_eq!(bytes, b"hello");
    for other in ["att_up", "att_2", "att_none"] {
        assert!(
            matches!(w.service.file(ORG, "t1", 1, other).await, Err(Error::Missing { .. })),
            "{other}"
        );
    }
    assert!(matches!(w.service.file(ORG, "t1", 2, "att_1").await, Err(Error::Refused(r)) if r.status == 409));
    assert!(matches!(
        w.service.file("other", "t1", 1, "att_1").await,
        Err(Error::Refused(_))
    ));
}

#[tokio::test]
async fn runners_are_listed_by_name_with_whether_they_are_online_and_by_workspace() {
    let w = world();
    w.service
        .claim(ORG, &claim("b", &[CliType::Claude], &["ws_a"]))
        .await
        .unwrap();
    w.clock.advance_ms(crate::runner::ONLINE_MS);
    w.service
        .claim(ORG, &claim("a", &[CliType::Claude], &[]))
        .await
        .unwrap();
    let all = w.service.runners(ORG, None).await.unwrap();
    let names: Vec<_> = all.iter().map(|r| (r.name.as_str(), r.online)).collect();
    assert_eq!(names, [("a", true), ("b", false)]);
    let of_b: Vec<_> = w
        .service
        .runners(ORG, Some("ws_b"))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(of_b, ["a"]);
    assert_eq!(w.service.runners(ORG, Some("ws_a")).await.unwrap().len(), 2);
}

/// A workspace's MCP servers, in memory; it fails when told to.
#[derive(Default)]
struct Catalog {
    servers: Mutex<HashMap<(String, String), Vec<crate::mcp::McpEndpoint>>>,
    asked: Mutex<Vec<(String, String)>>,
    down: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl crate::mcp::McpCatalog for Catalog {
    async fn endpoints(&self, org: &str, workspace_id: &str) -> Result<Vec<crate::mcp::McpEndpoint>, Error> {
        self.asked
            .lock()
            .unwrap()
            .push((org.to_owned(), workspace_id.to_owned()));
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::unavailable("read the MCP servers", "the store is down"));
        }
        let key = (org.to_owned(), workspace_id.to_owned());
        Ok(self.servers.lock().unwrap().get(&key).cloned().unwrap_or_default())
    }
}

const MCP_SECRET: &str = "Bearer mcp-s3cr3t-for-runners";

fn endpoint(id: &str, name: &str) -> crate::mcp::McpEndpoint {
    use crate::mcp::{McpLaunch, McpSecret};
    crate::mcp::McpEndpoint {
        id: id.to_owned(),
        name: name.to_owned(),
        launch: McpLaunch::Http {
            url: format!("https://{name}.example.com/mcp"),
            headers: std::collections::BTreeMap::from([("Authorization".to_owned(), McpSecret::new(MCP_SECRET))]),
        },
        tools: std::collections::BTreeMap::new(),
    }
}

impl World {
    /// The request of `turn` as stored, naming MCP servers `(id, name)` by id and name only.
    fn name_servers(&self, turn: &str, servers: &[(&str, &str)]) {
        let named: Vec<Value> = servers
            .iter()
            .map(|(id, name)| json!({"id": id, "name": name}))
            .collect();
        let request = json!({"instruction": format!("answer {turn}"), "mcp_servers": named});
        self.files
            .0
            .lock()
            .unwrap()
            .insert(request_key(ORG, turn), request.to_string().into_bytes());
    }
}

#[tokio::test]
async fn a_claim_sends_the_mcp_servers_the_request_names_resolved_with_their_secrets() {
    // GIVEN a workspace with two enabled servers, and a job whose stored request names one of
    // them and one deleted since
    let catalog = Arc::new(Catalog::default());
    catalog.servers.lock().unwrap().insert(
        (ORG.to_owned(), "ws_a".to_owned()),
        vec![endpoint("mcp_1", "github"), endpoint("mcp_2", "linear")],
    );
    let mut w = world();
    w.service = w.service.with_mcp(catalog.clone());
    let now = w.clock.now_ms();
    w.offer("t_1", "s1", Some("ws_a"), CliType::Claude, now).await;
    w.name_servers("t_1", &[("mcp_gone", "old"), ("mcp_2", "linear")]);
    // WHEN a runner claims it
    let got = w
        .service
        .claim(ORG, &claim("box-1", &[CliType::Claude], &[]))
        .await
        .unwrap()
        .unwrap();
    // THEN the assignment carries the named server that still exists, its secret opened
    assert_eq!(got.mcp_servers, [endpoint("mcp_2", "linear")]);
    assert!(serde_json::to_string(&got).unwrap().contains(MCP_SECRET));
    // AND the catalog was asked for the job's own workspace, in the runner's organization
    assert_eq!(*catalog.asked.lock().unwrap(), [(ORG.to_owned(), "ws_a".to_owned())]);
    // AND the stored request carries no secret
    let stored = w.files.0.lock().unwrap()[&request_key(ORG, "t_1")].clone();
    assert!(!String::from_utf8_lossy(&stored).contains("s3cr3t"));
}

#[tokio::test]
async fn a_claim_sends_no_server_without_a_catalog_a_workspace_or_a_name() {
    let catalog = Arc::new(Catalog::default());
    catalog
        .servers
        .lock()
        .unwrap()
        .insert((ORG.to_owned(), "ws_a".to_owned()), vec![endpoint("mcp_1", "github")]);
    // A request that names none gets none, though the workspace has one.
    let mut w = world();
    w.service = w.service.with_mcp(catalog.clone());
    let now = w.clock.now_ms();
    w.offer("t_none", "s1", Some("ws_a"), CliType::Claude, now).await;
    let got = w
        .service
        .claim(ORG, &claim("box-1", &CliType::ALL, &[]))
        .await
        .unwrap()
        .unwrap();
    assert!(got.mcp_servers.is_empty());
    // A global chat's (no workspace) names none and asks nothing.
    w.offer("t_global", "s2", None, CliType::Claude, now).await;
    w.name_servers("t_global", &[("mcp_1", "github")]);
    let got = w
        .service
        .claim(ORG, &claim("box-1", &CliType::ALL, &[]))
        .await
        .unwrap()
        .unwrap();
    assert!(got.mcp_servers.is_empty());
    assert_eq!(catalog.asked.lock().unwrap().len(), 1);
    // Without a catalog a named server is not sent.
    let w = world();
    w.offer("t_named", "s1", Some("ws_a"), CliType::Claude, now).await;
    w.name_servers("t_named", &[("mcp_1", "github")]);
    let got = w
        .service
        .claim(ORG, &claim("box-1", &CliType::ALL, &[]))
        .await
        .unwrap()
        .unwrap();
    assert!(got.mcp_servers.is_empty());
}

#[tokio::test]
async fn a_catalog_that_fails_leaves_the_job_unclaimed() {
    let catalog = Arc::new(Catalog::default());
    catalog.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut w = world();
    w.service = w.service.with_mcp(catalog.clone());
    let now = w.clock.now_ms();
    w.offer("t_1", "s1", Some("ws_a"), CliType::Claude, now).await;
    w.name_servers("t_1", &[("mcp_1", "github")]);
    assert!(w.service.claim(ORG, &claim("box-1", &CliType::ALL, &[])).await.is_err());
    assert_eq!(
        w.job("t_1").epoch,
        0,
        "the job was claimed though its servers were not read"
    );
    // Once the catalog answers, the job is claimed at the first epoch.
    catalog.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let got = w
        .service
        .claim(ORG, &claim("box-1", &CliType::ALL, &[]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.epoch, 1);
}
