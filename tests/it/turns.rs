//! The turn queue, one contract for both backends (the embedded table, SQS FIFO on the
//! emulator): a session's turns in order and one at a time, deduplicated by turn id, handed out
//! again when a lease runs out.

use std::time::Duration;

use spool_domain::{Delivery, TurnJob};
use spool_tests::{Harness, unique_id};

fn job(org: &str, session: &str, turn: &str, seq: u64) -> TurnJob {
    TurnJob {
        org: org.to_owned(),
        session_id: session.to_owned(),
        turn_id: turn.to_owned(),
        trigger_seq: seq,
    }
}

fn turns(deliveries: &[Delivery]) -> Vec<&str> {
    deliveries.iter().map(|d| d.job.turn_id.as_str()).collect()
}

const LONG: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(1);

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
    let first = queue.receive(10, LONG, WAIT).await.unwrap();
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
        assert!(turns(&queue.receive(10, LONG, WAIT).await.unwrap()).is_empty());
    }

    // WHEN the turns are done
    let mut seen: Vec<String> = got.iter().map(|t| (*t).to_owned()).collect();
    for delivery in &first {
        queue.ack(&delivery.receipt).await.unwrap();
    }
    // THEN what is left comes next, A's second turn exactly once
    for _ in 0..5 {
        let next = queue.receive(10, LONG, WAIT).await.unwrap();
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
    let first = queue.receive(1, Duration::from_secs(1), WAIT).await.unwrap();
    assert_eq!(turns(&first), [turn.as_str()]);
    // THEN after the lease it is handed out again, counting the attempt
    let mut again = Vec::new();
    for _ in 0..10 {
        again = queue.receive(1, LONG, WAIT).await.unwrap();
        if !again.is_empty() {
            break;
        }
    }
    assert_eq!(turns(&again), [turn.as_str()]);
    assert_eq!(again[0].attempts, 2);
    // AND once acknowledged it is gone
    queue.ack(&again[0].receipt).await.unwrap();
    assert!(queue.receive(1, LONG, WAIT).await.unwrap().is_empty());
}

on_both_backends!(turns: a_sessions_turns_come_one_at_a_time_in_order, an_unacknowledged_turn_comes_back);
