//! Tests of the append rule and of forks.

use super::*;
use crate::stream::ForkRequest;

fn state() -> StreamState {
    let req = CreateStream::new(ContentType::parse("application/json").unwrap());
    StreamState::new(StreamPath::parse("s").unwrap(), &req, 1_000, &LogLimits::default()).unwrap()
}

fn claim(epoch: u64, seq: u64) -> ProducerClaim {
    ProducerClaim {
        id: "p".to_owned(),
        epoch,
        seq,
    }
}

fn with_producer(epoch: u64, seq: u64) -> Append {
    Append {
        producer: Some(claim(epoch, seq)),
        ..Append::one(Bytes::from_static(b"1"))
    }
}

#[test]
fn appends_take_the_next_sequence_numbers() {
    // GIVEN an empty stream
    let mut s = state();
    // WHEN two batches are appended
    let a = apply_append(
        &mut s,
        None,
        &Append::messages([Bytes::from("1"), Bytes::from("2")]),
        0,
        &LogLimits::default(),
    )
    .unwrap();
    let b = apply_append(&mut s, None, &Append::one(Bytes::from("3")), 0, &LogLimits::default()).unwrap();
    // THEN they get 1..=2 and 3, and the tail follows
    assert_eq!(a.ack.appended, Some(SeqRange { first: 1, last: 2 }));
    assert_eq!(b.ack.appended, Some(SeqRange { first: 3, last: 3 }));
    assert_eq!(s.tail, 3);
    assert_eq!(s.total_bytes, 3);
}

#[test]
fn a_retried_producer_batch_is_acknowledged_without_appending() {
    let mut s = state();
    let first = apply_append(&mut s, None, &with_producer(0, 0), 0, &LogLimits::default()).unwrap();
    let producer = first.producer.unwrap().1;
    let retry = apply_append(&mut s, Some(producer), &with_producer(0, 0), 0, &LogLimits::default()).unwrap();
    assert!(retry.ack.duplicate && !retry.changed);
    assert_eq!(retry.ack.appended, None);
    assert_eq!(s.tail, 1);
}

#[test]
fn producer_epochs_fence_zombies_and_sequences_must_not_skip() {
    let mut s = state();
    let limits = LogLimits::default();
    let current = Some(ProducerState {
        epoch: 2,
        seq: 5,
        offset: 0,
    });
    assert!(matches!(
        apply_append(&mut s, current, &with_producer(1, 6), 0, &limits),
        Err(Error::StaleProducerEpoch { current: 2, got: 1 })
    ));
    assert!(matches!(
        apply_append(&mut s, current, &with_producer(2, 8), 0, &limits),
        Err(Error::ProducerSeqGap {
            expected: 6,
            received: 8
        })
    ));
    assert!(matches!(
        apply_append(&mut s, current, &with_producer(3, 1), 0, &limits),
        Err(Error::InvalidProducerEpochSeq { .. })
    ));
    assert!(matches!(
        apply_append(&mut s, None, &with_producer(0, 3), 0, &limits),
        Err(Error::ProducerSeqGap {
            expected: 0,
            received: 3
        })
    ));
    let bumped = apply_append(&mut s, current, &with_producer(3, 0), 0, &limits).unwrap();
    assert_eq!(
        bumped.producer.unwrap().1,
        ProducerState {
            epoch: 3,
            seq: 0,
            offset: 1
        }
    );
    assert_eq!(s.tail, 1, "only the accepted request appended");
}

#[test]
fn stream_seq_must_increase() {
    let mut s = state();
    let limits = LogLimits::default();
    let seq = |v: &str| Append {
        stream_seq: Some(v.to_owned()),
        ..Append::one(Bytes::from("1"))
    };
    apply_append(&mut s, None, &seq("b"), 0, &limits).unwrap();
    assert!(matches!(
        apply_append(&mut s, None, &seq("b"), 0, &limits),
        Err(Error::StreamSeqConflict { .. })
    ));
    assert!(matches!(
        apply_append(&mut s, None, &seq("a"), 0, &limits),
        Err(Error::StreamSeqConflict { .. })
    ));
    apply_append(&mut s, None, &seq("c"), 0, &limits).unwrap();
}

#[test]
fn a_closed_stream_rejects_appends_but_acknowledges_its_closer() {
    let mut s = state();
    let limits = LogLimits::default();
    let mut close = with_producer(0, 0);
    close.close = true;
    apply_append(&mut s, None, &close, 0, &limits).unwrap();
    assert!(s.closed);
    // the closing request again: a duplicate
    let again = apply_append(&mut s, None, &close, 0, &limits).unwrap();
    assert!(again.ack.duplicate && again.ack.closed);
    // a plain close again: idempotent
    assert!(
        apply_append(&mut s, None, &Append::close_only(), 0, &limits)
            .unwrap()
            .ack
            .closed
    );
    // anything else: closed
    assert!(matches!(
        apply_append(&mut s, None, &Append::one(Bytes::from("2")), 0, &limits),
        Err(Error::Closed { .. })
    ));
}

#[test]
fn closed_is_checked_before_content_type() {
    let mut s = state();
    let limits = LogLimits::default();
    apply_append(&mut s, None, &Append::close_only(), 0, &limits).unwrap();
    let wrong = Append {
        content_type: Some(ContentType::parse("text/plain").unwrap()),
        ..Append::one(Bytes::from("x"))
    };
    assert!(matches!(
        apply_append(&mut s, None, &wrong, 0, &limits),
        Err(Error::Closed { .. })
    ));
}

#[test]
fn oversized_and_empty_appends_are_rejected() {
    let mut s = state();
    let limits = LogLimits {
        max_append_bytes: 4,
        ..LogLimits::default()
    };
    assert!(matches!(
        apply_append(&mut s, None, &Append::one(Bytes::from("12345")), 0, &limits),
        Err(Error::PayloadTooLarge { size: 5, max: 4 })
    ));
    assert!(matches!(
        apply_append(&mut s, None, &Append::default(), 0, &limits),
        Err(Error::EmptyAppend)
    ));
}

#[test]
fn an_expired_stream_is_gone() {
    let mut s = state();
    s.expiry = Expiry::Ttl { seconds: 1 };
    assert!(
        apply_append(
            &mut s,
            None,
            &Append::one(Bytes::from("1")),
            1_500,
            &LogLimits::default()
        )
        .is_ok()
    );
    assert!(matches!(
        apply_append(
            &mut s,
            None,
            &Append::one(Bytes::from("1")),
            2_600,
            &LogLimits::default()
        ),
        Err(Error::NotFound { .. })
    ));
}

fn fork(offset: Option<u64>, sub_offset: u64) -> ForkRequest {
    ForkRequest {
        source: StreamPath::parse("s").unwrap(),
        offset: offset.map(Offset::after),
        sub_offset,
        content_type: None,
        expiry: None,
    }
}

#[test]
fn fork_plans_follow_the_content_type() {
    let target = StreamPath::parse("f").unwrap();
    let mut json = state();
    json.tail = 5;
    assert_eq!(json.plan_fork(&target, &fork(None, 0)).unwrap().at, 5);
    assert_eq!(json.plan_fork(&target, &fork(Some(2), 2)).unwrap().at, 4);
    assert!(json.plan_fork(&target, &fork(Some(4), 2)).is_err());
    assert!(json.plan_fork(&target, &fork(Some(6), 0)).is_err());

    let mut bytes = state();
    bytes.content_type = ContentType::octet_stream();
    bytes.tail = 3;
    let plan = bytes.plan_fork(&target, &fork(Some(1), 4)).unwrap();
    assert_eq!((plan.at, plan.cut), (1, Some((2, 4))));
    assert!(bytes.plan_fork(&target, &fork(Some(3), 1)).is_err());

    let mut other = fork(None, 0);
    other.content_type = Some(ContentType::parse("text/plain").unwrap());
    assert!(matches!(
        json.plan_fork(&target, &other),
        Err(Error::ConfigMismatch { .. })
    ));
    json.deleted = true;
    assert!(matches!(
        json.plan_fork(&target, &fork(None, 0)),
        Err(Error::ConfigMismatch { .. })
    ));
}

#[test]
fn lineage_keeps_inherited_runs_and_adds_the_parents_own() {
    let mut parent = state();
    parent.lineage = vec![Segment {
        sid: "a".into(),
        upto: 3,
    }];
    parent.tail = 6;
    let runs = |at| {
        parent
            .lineage_up_to(at)
            .into_iter()
            .map(|s| (s.sid, s.upto))
            .collect::<Vec<_>>()
    };
    assert_eq!(runs(0), vec![]);
    assert_eq!(runs(2), vec![("a".to_owned(), 2)]);
    assert_eq!(runs(3), vec![("a".to_owned(), 3)]);
    assert_eq!(runs(5), vec![("a".to_owned(), 3), (parent.sid.clone(), 5)]);
    assert_eq!(parent.inherited_run(2).map(|s| s.upto), Some(3));
    assert!(parent.inherited_run(3).is_none());
}
