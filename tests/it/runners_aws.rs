//! The AWS store's runner records, on the emulator: DynamoDB's TTL deletes an item late, so a
//! record whose `ttl` has passed is left out of the list before DynamoDB removes it.

use aws_sdk_dynamodb::types::AttributeValue;
use spool_chat::{
    runner::{JOB_TTL_MS, RunnerJob, RunnerRecord, RunnerStore},
    workspace::CliType,
};
use spool_log::clock::{Clock, SystemClock};
use spool_tests::{AwsHarness, Harness, unique_id};

fn runner(name: &str, last_seen_ms: i64) -> RunnerRecord {
    RunnerRecord {
        name: name.to_owned(),
        version: None,
        clis: Vec::new(),
        workspaces: Vec::new(),
        last_seen_ms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_whose_ttl_has_passed_is_not_listed() {
    let harness = AwsHarness::new();
    let store = harness.metadata().await;
    let org = unique_id("org");
    let now = SystemClock.now_ms();
    // GIVEN two runners seen just now
    store.runner_seen(&org, &runner("a", now)).await.unwrap();
    store.runner_seen(&org, &runner("b", now)).await.unwrap();
    let item = harness
        .clients()
        .await
        .dynamodb
        .get_item()
        .table_name(harness.config().aws.metadata_table.clone().unwrap())
        .key("pk", AttributeValue::S(format!("o#{org}#runners")))
        .key("sk", AttributeValue::S("a".to_owned()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    // AND their records expire through the table's TTL attribute, a day after they were seen
    let ttl: i64 = item["ttl"].as_n().unwrap().parse().unwrap();
    assert_eq!(ttl, (now + spool_chat::runner::RUNNER_RECORD_TTL_MS) / 1000);

    // WHEN one record's `ttl` has passed, though DynamoDB has not deleted it yet
    harness
        .clients()
        .await
        .dynamodb
        .update_item()
        .table_name(harness.config().aws.metadata_table.clone().unwrap())
        .key("pk", AttributeValue::S(format!("o#{org}#runners")))
        .key("sk", AttributeValue::S("a".to_owned()))
        .update_expression("SET #ttl = :past")
        .expression_attribute_names("#ttl", "ttl")
        .expression_attribute_values(":past", AttributeValue::N((now / 1000 - 1).to_string()))
        .send()
        .await
        .unwrap();
    // THEN it is not listed, and the other is
    let names: Vec<String> = store.runners(&org).await.unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_job_expires_through_the_ttl_attribute_a_week_after_its_offer() {
    let harness = AwsHarness::new();
    let store = harness.metadata().await;
    let (org, turn) = (unique_id("org"), unique_id("turn"));
    let now = SystemClock.now_ms();
    let job = RunnerJob {
        turn_id: turn.clone(),
        session_id: unique_id("ses"),
        workspace_id: None,
        cli: CliType::Claude,
        offered_seq: 3,
        offered_ms: now,
        wait_ms: 600_000,
        epoch: 0,
        runner: None,
        lease_until_ms: 0,
        outcome: None,
    };
    // WHEN a job is offered, claimed and settled
    store.offer_job(&org, &job).await.unwrap();
    assert!(store.claim_job(&org, &turn, 0, "box", now + 60_000).await.unwrap());
    let outcome = spool_chat::runner::RunnerOutcome::Failed { reason: "x".to_owned() };
    assert!(store.settle_job(&org, &turn, 1, &outcome).await.unwrap());
    // THEN its item keeps the TTL attribute of its offer: a job its turn's end left behind goes
    let item = harness
        .clients()
        .await
        .dynamodb
        .get_item()
        .table_name(harness.config().aws.metadata_table.clone().unwrap())
        .key("pk", AttributeValue::S(format!("o#{org}#rjobs")))
        .key("sk", AttributeValue::S(turn.clone()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let ttl: i64 = item["ttl"].as_n().unwrap().parse().unwrap();
    assert_eq!(ttl, (now + JOB_TTL_MS) / 1000);
}
