//! The turn queue, one contract for both backends (the embedded table, SQS FIFO on the
//! emulator): a session's turns in order and one at a time, deduplicated by turn id, handed out
//! again when a lease runs out.

use std::time::Duration;

use spool_chat::turns::{Delivery, Lease, Receive, TurnJob, TurnQueue};
use spool_tests::{Harness, unique_id};

fn job(org: &str, session: &str, turn: &str, seq: u64) -> TurnJob {
    TurnJob::new(org, session, turn, seq)
}

fn turns(deliveries: &[Delivery]) -> Vec<&str> {
    deliveries.iter().map(|d| d.job.turn_id.as_str()).collect()
}

const WAIT: Duration = Duration::from_secs(1);

/// A lease that outlasts the test, held by `holder`.
fn long(holder: &str) -> Lease {
    Lease::new(Duration::from_secs(60), holder)
}

/// A one-second lease.
fn short() -> Lease {
    Lease::new(Duration::from_secs(1), "test")
}

async fn receive(queue: &dyn TurnQueue, max: usize, lease: &Lease) -> Vec<Delivery> {
    queue.receive(&Receive::new(max, lease.clone(), WAIT)).await.unwrap()
}

/// A session's turns come in order, never two at once; sessions do not wait for each other.
pub(crate) async fn a_sessions_turns_come_one_at_a_time_in_order<H: Harness>(harness: &H) {
    let queue = harness.turns().await;
    let org = unique_id("org");
    let (a1, a2, b1) = (unique_id("turn"), unique_id("turn"), unique_id("turn"));
    // GIVEN two turns of session A and one of session B, A's second enqueued twice
    queue.enqueue(&job(&org, "a", &a1, 1)).await.unwrap();
    queue.enqueue(&job(&org, "a", &a2, 2)).await.unwrap();
    queue.enqueue(&job(&org, "a", &a2, 2)).await.unwrap();
    queue.enqueue(&job(&org, "b", &b1, 1)).await.unwrap();

    // WHEN a worker takes what it can
    let first = receive(queue.as_ref(), 10, &long("test")).await;
    let got = turns(&first);
    // THEN it gets A's first turn and B's; A's second only behind A's first, if at all
    assert!(got.contains(&a1.as_str()) && got.contains(&b1.as_str()), "{got:?}");
    if let Some(i) = got.iter().position(|t| *t == a2) {
        assert!(got.iter().position(|t| *t == a1).unwrap() < i, "{got:?}");
    }
    assert!(first.iter().all(|d| d.attempts == 1));
    assert_eq!(
        first.iter().find(|d| d.job.turn_id == a1).unwrap().job,
        job(&org, "a", &a1, 1)
    );
    // AND while A's first is in flight, A's second is not handed out (unless it already was)
    if !got.contains(&a2.as_str()) {
        assert!(turns(&receive(queue.as_ref(), 10, &long("test")).await).is_empty());
    }

    // WHEN the turns are done
    let mut seen: Vec<String> = got.iter().map(|t| (*t).to_owned()).collect();
    for delivery in &first {
        queue.ack(&delivery.receipt).await.unwrap();
    }
    // THEN what is left comes next, A's second turn exactly once
    for _ in 0..5 {
        let next = receive(queue.as_ref(), 10, &long("test")).await;
        if next.is_empty() {
            break;
        }
        for delivery in &next {
            seen.push(delivery.job.turn_id.clone());
            queue.ack(&delivery.receipt).await.unwrap();
        }
    }
    seen.sort();
    let mut expected = vec![a1, a2, b1];
    expected.sort();
    assert_eq!(seen, expected, "each turn once, the duplicate dropped");
}

/// A turn whose lease runs out without an acknowledgement is handed out again.
pub(crate) async fn an_unacknowledged_turn_comes_back<H: Harness>(harness: &H) {
    let queue = harness.turns().await;
    let (org, turn) = (unique_id("org"), unique_id("turn"));
    queue.enqueue(&job(&org, "s", &turn, 7)).await.unwrap();
    // WHEN a worker takes it for one second and dies
    let first = receive(queue.as_ref(), 1, &short()).await;
    assert_eq!(turns(&first), [turn.as_str()]);
    // THEN after the lease it is handed out again, counting the attempt
    let mut again = Vec::new();
    for _ in 0..10 {
        again = receive(queue.as_ref(), 1, &long("test")).await;
        if !again.is_empty() {
            break;
        }
    }
    assert_eq!(turns(&again), [turn.as_str()]);
    assert_eq!(again[0].attempts, 2);
    // AND once acknowledged it is gone
    queue.ack(&again[0].receipt).await.unwrap();
    assert!(receive(queue.as_ref(), 1, &long("test")).await.is_empty());
}

/// A heartbeat keeps a short lease: the job is not handed out again while its step runs.
pub(crate) async fn a_heartbeat_keeps_a_lease<H: Harness>(harness: &H) {
    let queue = harness.turns().await;
    let turn = unique_id("turn");
    queue.enqueue(&job(&unique_id("org"), "a", &turn, 1)).await.unwrap();
    // GIVEN a job leased for a second, and extended for a minute
    let first = receive(queue.as_ref(), 1, &short()).await;
    assert_eq!(turns(&first), [turn.as_str()]);
    queue.extend(&first[0].receipt, Duration::from_secs(60)).await.unwrap();
    // WHEN its first lease would have run out
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // THEN nobody else gets it
    assert!(receive(queue.as_ref(), 1, &long("other")).await.is_empty());
    queue.ack(&first[0].receipt).await.unwrap();
}

on_both_backends!(
    turns: a_sessions_turns_come_one_at_a_time_in_order,
    an_unacknowledged_turn_comes_back,
    a_heartbeat_keeps_a_lease
);

/// A worker restarted under its name takes back at once what it held when it died, and only
/// that: another holder's lease stays. (SQS knows no holders: its leases are short instead.)
#[tokio::test]
async fn a_restarted_holder_takes_back_its_leases_at_once() {
    let harness = spool_tests::EmbeddedHarness::new();
    let queue = harness.turns().await;
    let org = unique_id("org");
    let (mine, theirs) = (unique_id("turn"), unique_id("turn"));
    queue.enqueue(&job(&org, "a", &mine, 1)).await.unwrap();
    queue.enqueue(&job(&org, "b", &theirs, 1)).await.unwrap();
    // GIVEN two workers' hour-long leases
    let lease = |holder: &str| Lease::new(Duration::from_secs(3600), holder);
    assert_eq!(receive(queue.as_ref(), 1, &lease("worker-0")).await.len(), 1);
    assert_eq!(receive(queue.as_ref(), 1, &lease("worker-1")).await.len(), 1);
    // WHEN worker-0 comes back after a crash
    let recovered = queue.recover("worker-0").await.unwrap();
    // THEN what it held is handed out again at once, as a new attempt; worker-1's is not
    assert_eq!(recovered, 1);
    let again = receive(queue.as_ref(), 10, &lease("worker-0")).await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].attempts, 2);
    let first_held = again[0].job.turn_id.clone();
    assert!(first_held == mine || first_held == theirs);
    assert_eq!(queue.recover("nobody").await.unwrap(), 0);
}

/// Turns are handed out round-robin across organizations, and one organization never holds
/// more than its share: an organization that queued ten chats' turns first does not starve one
/// that queued a single turn after them.
#[tokio::test]
async fn turns_are_handed_out_fairly_across_organizations() {
    let harness = spool_tests::EmbeddedHarness::new();
    let queue = harness.turns().await;
    let (busy, quiet) = (unique_id("org"), unique_id("org"));
    for i in 0..10 {
        queue
            .enqueue(&job(&busy, &format!("chat-{i}"), &unique_id("turn"), 1))
            .await
            .unwrap();
    }
    let theirs = unique_id("turn");
    queue.enqueue(&job(&quiet, "chat", &theirs, 1)).await.unwrap();
    let fair = |max| Receive {
        per_org: 2,
        ..Receive::new(max, long("worker"), WAIT)
    };
    // WHEN a worker with four free slots asks, two per organization at most
    let first = queue.receive(&fair(4)).await.unwrap();
    // THEN it gets two of the busy organization's turns and the quiet one's
    let orgs: Vec<&str> = first.iter().map(|d| d.job.org.as_str()).collect();
    assert_eq!(orgs.iter().filter(|o| **o == busy).count(), 2, "{orgs:?}");
    assert!(turns(&first).contains(&theirs.as_str()), "{orgs:?}");
    // AND while those run, the busy organization gets nothing more
    assert!(queue.receive(&fair(4)).await.unwrap().is_empty());
    // AND when one of its turns is done, one more of its turns comes
    let done = first.iter().find(|d| d.job.org == busy).unwrap();
    queue.ack(&done.receipt).await.unwrap();
    let next = queue.receive(&fair(4)).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].job.org, busy);
}

/// A queued turn's place counts its own organization's turns only, even beside organizations
/// whose ids begin with its own, and moves up as they finish; a turn that runs, or that waits
/// behind its own chat's earlier turn, has none.
#[tokio::test]
async fn a_queued_turns_place_counts_its_organization_only() {
    let harness = spool_tests::EmbeddedHarness::new();
    let queue = harness.turns().await;
    let org = unique_id("org");
    let (dash, digit) = (format!("{org}-2"), format!("{org}1"));
    let (first, second, third, later) = (
        unique_id("turn"),
        unique_id("turn"),
        unique_id("turn"),
        unique_id("turn"),
    );
    for (o, chat, turn) in [
        (&org, "a", &first),
        (&org, "b", &second),
        (&org, "c", &third),
        (&org, "b", &later),
        (&dash, "x", &unique_id("turn")),
        (&digit, "y", &unique_id("turn")),
    ] {
        queue.enqueue(&job(o, chat, turn, 1)).await.unwrap();
    }
    // GIVEN one turn per organization running
    let running = queue
        .receive(&Receive {
            per_org: 1,
            ..Receive::new(10, long("worker"), WAIT)
        })
        .await
        .unwrap();
    assert_eq!(running.len(), 3, "{:?}", turns(&running));
    let place = |chat: &'static str, turn: String| {
        let queue = queue.clone();
        let org = org.clone();
        async move { queue.queued_behind(&org, chat, &turn, 1).await.unwrap() }
    };
    // THEN the organization's waiting turns are one and two behind; the others' do not count
    assert_eq!(place("b", second.clone()).await, Some(1));
    assert_eq!(place("c", third.clone()).await, Some(2));
    assert_eq!(place("a", first.clone()).await, None, "it runs");
    assert_eq!(
        place("b", later.clone()).await,
        None,
        "its chat's earlier turn holds it"
    );
    // WHEN the running turn finishes, the others move up
    let done = running.iter().find(|d| d.job.turn_id == first).unwrap();
    queue.ack(&done.receipt).await.unwrap();
    assert_eq!(place("b", second).await, Some(0));
    assert_eq!(place("c", third).await, Some(1));
}
