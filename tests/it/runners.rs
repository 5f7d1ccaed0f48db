//! Runner jobs and runners in the metadata store, one contract for both backends.

use std::sync::LazyLock;

use serde_json::json;
use spool_chat::{
    clis::CliStatus,
    runner::{RUNNER_RECORD_TTL_MS, RunnerJob, RunnerOutcome, RunnerRecord, RunnerStore},
    workspace::CliType,
};
use spool_log::clock::{Clock, SystemClock};
use spool_tests::{Harness, unique_id};

/// When the tests' jobs are offered, `at` ms after (a store removes jobs a week old).
static OFFERS_FROM: LazyLock<i64> = LazyLock::new(|| SystemClock.now_ms());

fn job(turn_id: &str, at: i64) -> RunnerJob {
    RunnerJob {
        turn_id: turn_id.to_owned(),
        session_id: unique_id("ses"),
        workspace_id: Some(unique_id("ws")),
        cli: CliType::Codex,
        offered_seq: 12,
        offered_ms: *OFFERS_FROM + at,
        wait_ms: 600_000,
        epoch: 0,
        runner: None,
        lease_until_ms: 0,
        outcome: None,
    }
}

fn reply(text: &str) -> RunnerOutcome {
    RunnerOutcome::Reply {
        message: Some(text.to_owned()),
        actions: vec![json!({"type": "create_task", "title": text})],
    }
}

fn runner(name: &str, last_seen_ms: i64, version: &str) -> RunnerRecord {
    RunnerRecord {
        name: name.to_owned(),
        version: Some(version.to_owned()),
        clis: vec![CliStatus {
            cli: CliType::Claude,
            installed: true,
            version: Some("2.0.1".to_owned()),
            healthy: true,
            reason: None,
        }],
        workspaces: vec!["ws_1".to_owned()],
        last_seen_ms,
    }
}

fn turns(jobs: &[RunnerJob]) -> Vec<&str> {
    jobs.iter().map(|j| j.turn_id.as_str()).collect()
}

/// A job is offered once, and each claim names the epoch it saw: it wins once and raises it.
pub(crate) async fn a_job_is_offered_once_and_each_epoch_claimed_once<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, turn) = (unique_id("org"), unique_id("turn"));
    let offered = job(&turn, 1_000);

    // WHEN a job is offered twice for one turn
    assert!(a.offer_job(&org, &offered).await.unwrap());
    let mut again = job(&turn, 2_000);
    again.cli = CliType::Gemini;
    // THEN the second offer is refused and leaves the first as it was
    assert!(!b.offer_job(&org, &again).await.unwrap());
    assert_eq!(b.runner_job(&org, &turn).await.unwrap(), Some(offered.clone()));

    // WHEN a runner claims it at the epoch it read
    assert!(b.claim_job(&org, &turn, 0, "box-1", 5_000).await.unwrap());
    // THEN the job is its, under a raised epoch
    let claimed = a.runner_job(&org, &turn).await.unwrap().unwrap();
    assert_eq!(
        (claimed.epoch, claimed.runner.as_deref(), claimed.lease_until_ms),
        (1, Some("box-1"), 5_000)
    );
    assert_eq!(claimed.outcome, None);
    assert_eq!(
        (claimed.session_id, claimed.offered_seq),
        (offered.session_id.clone(), 12)
    );
    // AND a claim naming the old epoch, or one never reached, or a turn with no job, loses
    assert!(!a.claim_job(&org, &turn, 0, "box-2", 6_000).await.unwrap());
    assert!(!a.claim_job(&org, &turn, 5, "box-2", 6_000).await.unwrap());
    assert!(!a.claim_job(&org, &unique_id("turn"), 0, "box-2", 6_000).await.unwrap());
    assert_eq!(
        a.runner_job(&org, &turn).await.unwrap().unwrap().runner.as_deref(),
        Some("box-1")
    );

    // WHEN another runner claims it again at the epoch it now has (a lost lease)
    assert!(a.claim_job(&org, &turn, 1, "box-2", 70_000).await.unwrap());
    // THEN it holds the job under the next epoch
    let again = b.runner_job(&org, &turn).await.unwrap().unwrap();
    assert_eq!(
        (again.epoch, again.runner.as_deref(), again.lease_until_ms),
        (2, Some("box-2"), 70_000)
    );
}

/// Eight runners claiming one job at once: exactly one wins each round, and the epoch moves
/// once per round.
pub(crate) async fn concurrent_claims_of_one_job_have_one_winner<H: Harness>(harness: &H) {
    let org = unique_id("org");
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(harness.metadata().await);
    }
    for round in 0..6u64 {
        let turn = unique_id("turn");
        stores[0].offer_job(&org, &job(&turn, 1_000)).await.unwrap();
        // A job claimed `round` times before this round's race
        for epoch in 0..round {
            assert!(stores[0].claim_job(&org, &turn, epoch, "warm-up", 1_000).await.unwrap());
        }
        let mut racing = tokio::task::JoinSet::new();
        for (i, store) in stores.iter().enumerate() {
            let (store, org, turn) = (store.clone(), org.clone(), turn.clone());
            racing.spawn(async move {
                let name = format!("box-{i}");
                let won = store.claim_job(&org, &turn, round, &name, 9_000).await.unwrap();
                (name, won)
            });
        }
        let results = racing.join_all().await;
        let winners: Vec<&str> = results
            .iter()
            .filter(|(_, won)| *won)
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let after = stores[7].runner_job(&org, &turn).await.unwrap().unwrap();
        assert_eq!(after.epoch, round + 1, "round {round}");
        assert_eq!(after.runner.as_deref(), Some(winners[0]), "round {round}");
    }
}

/// A claim that another claim superseded can neither renew nor settle; a settle is accepted
/// once, after which nothing claims, renews or settles the job; a removed job is gone.
pub(crate) async fn only_the_current_claim_renews_and_settles_once<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, turn) = (unique_id("org"), unique_id("turn"));
    a.offer_job(&org, &job(&turn, 1_000)).await.unwrap();

    // GIVEN a job never claimed: epoch 0 names no claim, so it neither renews nor settles
    assert!(!a.renew_job(&org, &turn, 0, 9_000).await.unwrap());
    assert!(!a.settle_job(&org, &turn, 0, &reply("early")).await.unwrap());
    assert_eq!(a.runner_job(&org, &turn).await.unwrap().unwrap().outcome, None);

    // GIVEN claim 1, which renews its lease
    assert!(a.claim_job(&org, &turn, 0, "box-1", 5_000).await.unwrap());
    assert!(a.renew_job(&org, &turn, 1, 65_000).await.unwrap());
    assert_eq!(b.runner_job(&org, &turn).await.unwrap().unwrap().lease_until_ms, 65_000);

    // WHEN claim 2 supersedes it
    assert!(b.claim_job(&org, &turn, 1, "box-2", 130_000).await.unwrap());
    // THEN claim 1 neither renews nor settles, and changes nothing trying
    assert!(!a.renew_job(&org, &turn, 1, 999_000).await.unwrap());
    assert!(!a.settle_job(&org, &turn, 1, &reply("stale")).await.unwrap());
    let held = b.runner_job(&org, &turn).await.unwrap().unwrap();
    assert_eq!((held.epoch, held.lease_until_ms, held.outcome), (2, 130_000, None));
    // AND claim 2 renews, then settles once
    assert!(b.renew_job(&org, &turn, 2, 190_000).await.unwrap());
    assert!(b.settle_job(&org, &turn, 2, &reply("done")).await.unwrap());
    assert!(!a.settle_job(&org, &turn, 2, &reply("twice")).await.unwrap());
    let settled = a.runner_job(&org, &turn).await.unwrap().unwrap();
    assert_eq!(settled.outcome, Some(reply("done")));
    assert_eq!((settled.epoch, settled.lease_until_ms), (2, 190_000));
    // AND once settled, nothing claims or renews it
    assert!(!a.claim_job(&org, &turn, 2, "box-3", 300_000).await.unwrap());
    assert!(!a.renew_job(&org, &turn, 2, 300_000).await.unwrap());
    let failed = RunnerOutcome::Failed {
        reason: "late".to_owned(),
    };
    assert!(!a.settle_job(&org, &turn, 2, &failed).await.unwrap());
    assert_eq!(b.runner_job(&org, &turn).await.unwrap(), Some(settled));

    // WHEN it is removed (twice: none is fine)
    a.remove_job(&org, &turn).await.unwrap();
    a.remove_job(&org, &turn).await.unwrap();
    // THEN it is gone, and nothing claims, renews or settles it
    assert_eq!(b.runner_job(&org, &turn).await.unwrap(), None);
    assert!(!b.claim_job(&org, &turn, 2, "box-3", 300_000).await.unwrap());
    assert!(!b.renew_job(&org, &turn, 2, 300_000).await.unwrap());
    assert!(!b.settle_job(&org, &turn, 2, &failed).await.unwrap());
    assert!(b.runner_jobs(&org, 10).await.unwrap().is_empty());
    // AND the turn may be offered again
    assert!(b.offer_job(&org, &job(&turn, 2_000)).await.unwrap());
}

/// An organization's jobs are listed oldest offer first (ties by turn), up to the limit; the
/// same turn id in two organizations is two jobs, and neither organization sees or touches
/// the other's.
pub(crate) async fn jobs_are_listed_and_kept_per_organization<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, other) = (unique_id("org"), unique_id("org"));
    // Turn ids whose order is not their offers' order
    let (t1, t2, t3, t4) = (
        format!("{}-d", unique_id("turn")),
        format!("{}-c", unique_id("turn")),
        format!("{}-b", unique_id("turn")),
        format!("{}-a", unique_id("turn")),
    );
    // GIVEN four jobs offered in an order unlike their offer times, two at the same time
    for (turn, at) in [(&t1, 3_000), (&t2, 1_000), (&t3, 2_000), (&t4, 2_000)] {
        assert!(a.offer_job(&org, &job(turn, at)).await.unwrap());
    }
    // AND the other organization's job for one of the same turn ids, offered first of all
    let theirs = job(&t2, 10);
    assert!(a.offer_job(&other, &theirs).await.unwrap());

    // THEN the organization's jobs come oldest first, ties by turn id
    let (tie_first, tie_second) = if t3 < t4 { (&t3, &t4) } else { (&t4, &t3) };
    let expected = [t2.as_str(), tie_first, tie_second, t1.as_str()];
    assert_eq!(turns(&b.runner_jobs(&org, 10).await.unwrap()), expected);
    assert_eq!(turns(&b.runner_jobs(&org, 4).await.unwrap()), expected);
    // AND up to the limit
    assert_eq!(turns(&b.runner_jobs(&org, 2).await.unwrap()), &expected[..2]);
    assert!(b.runner_jobs(&org, 0).await.unwrap().is_empty());
    // AND the other organization sees its own job only
    assert_eq!(b.runner_jobs(&other, 10).await.unwrap(), vec![theirs.clone()]);
    assert_eq!(b.runner_job(&other, &t1).await.unwrap(), None);
    assert!(b.runner_jobs(&unique_id("org"), 10).await.unwrap().is_empty());

    // WHEN the other organization claims, renews, settles and removes its job of that turn id
    assert!(b.claim_job(&other, &t2, 0, "their-box", 5_000).await.unwrap());
    assert!(b.renew_job(&other, &t2, 1, 6_000).await.unwrap());
    assert!(b.settle_job(&other, &t2, 1, &reply("theirs")).await.unwrap());
    // AND tries the organization's other turns
    assert!(!b.claim_job(&other, &t1, 0, "their-box", 5_000).await.unwrap());
    assert!(!b.renew_job(&other, &t1, 0, 5_000).await.unwrap());
    assert!(!b.settle_job(&other, &t1, 1, &reply("stolen")).await.unwrap());
    b.remove_job(&other, &t3).await.unwrap();
    // THEN the organization's jobs are untouched
    let ours = a.runner_jobs(&org, 10).await.unwrap();
    assert_eq!(turns(&ours), expected);
    assert!(
        ours.iter()
            .all(|j| j.epoch == 0 && j.runner.is_none() && j.outcome.is_none())
    );
    // AND the other's job changed as it did
    let changed = a.runner_job(&other, &t2).await.unwrap().unwrap();
    assert_eq!((changed.epoch, changed.outcome), (1, Some(reply("theirs"))));
    // AND removing it leaves the organization's job of the same turn
    b.remove_job(&other, &t2).await.unwrap();
    assert_eq!(a.runner_job(&other, &t2).await.unwrap(), None);
    assert_eq!(turns(&a.runner_jobs(&org, 10).await.unwrap()), expected);
}

/// A runner's record replaces what it reported before; each organization has its own runners,
/// by name; a record not seen for a day is gone.
pub(crate) async fn runners_are_recorded_per_organization<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org, other) = (unique_id("org"), unique_id("org"));
    let now = SystemClock.now_ms();

    // WHEN two runners are seen, one of them twice
    a.runner_seen(&org, &runner("zeta", now - 5_000, "0.1.0"))
        .await
        .unwrap();
    a.runner_seen(&org, &runner("alpha", now - 2_000, "0.1.0"))
        .await
        .unwrap();
    let mut newer = runner("zeta", now, "0.2.0");
    newer.clis.clear();
    newer.workspaces.clear();
    b.runner_seen(&org, &newer).await.unwrap();
    // THEN each is listed once, by name, as it last reported itself
    assert_eq!(
        a.runners(&org).await.unwrap(),
        vec![runner("alpha", now - 2_000, "0.1.0"), newer.clone()]
    );
    // AND another organization has none of them, and its own runner of the same name
    assert!(b.runners(&other).await.unwrap().is_empty());
    let theirs = runner("zeta", now, "9.9.9");
    b.runner_seen(&other, &theirs).await.unwrap();
    assert_eq!(a.runners(&other).await.unwrap(), vec![theirs]);
    assert_eq!(a.runners(&org).await.unwrap().len(), 2);

    // WHEN a runner was last seen more than a day ago, and another just under a day ago
    let gone = runner("old", now - RUNNER_RECORD_TTL_MS - 60_000, "0.1.0");
    let kept = runner("older", now - RUNNER_RECORD_TTL_MS + 600_000, "0.1.0");
    a.runner_seen(&org, &gone).await.unwrap();
    a.runner_seen(&org, &kept).await.unwrap();
    // THEN only the recent one is listed
    let names: Vec<String> = b.runners(&org).await.unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["alpha", "older", "zeta"]);
    // AND seeing the gone one again brings it back
    a.runner_seen(&org, &runner("old", now, "0.1.0")).await.unwrap();
    assert_eq!(b.runners(&org).await.unwrap().len(), 4);
}

on_both_backends!(runners:
    a_job_is_offered_once_and_each_epoch_claimed_once,
    concurrent_claims_of_one_job_have_one_winner,
    only_the_current_claim_renews_and_settles_once,
    jobs_are_listed_and_kept_per_organization,
    runners_are_recorded_per_organization,
);

/// A restarted `spool serve` schedules again the check of every turn that waits for a runner:
/// the checks were in its memory, and a turn whose check is lost would wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_looks_again_at_every_turn_that_waits_for_a_runner() {
    let harness = spool_tests::EmbeddedHarness::new();
    let store = harness.metadata().await;
    let org = unique_id("org");
    let waiting = job(&unique_id("turn"), SystemClock.now_ms());
    assert!(store.offer_job(&org, &waiting).await.unwrap());
    let jobs = store.interrupted_jobs().await.unwrap();
    let check = spool_log::jobs::MaintenanceJob::RunnerCheck {
        org,
        session_id: waiting.session_id.clone(),
        turn_id: waiting.turn_id.clone(),
    };
    assert!(jobs.contains(&check), "{jobs:?}");
}
