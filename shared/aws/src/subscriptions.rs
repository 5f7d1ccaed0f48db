//! # Subscriptions in the metadata table, their jobs on the maintenance queue
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | subscription | `o#{org}#subs` | `{id}` | `data` (the record as JSON), `ver` (its version) |
//!
//! A save is a `PutItem` on the condition that `ver` is still the one read (or that the item
//! does not exist), so two functions never both open or end a wake. An organization's
//! subscriptions are one `Query`. A subscription is made and deleted in one transaction with
//! the organization's subscription counter ([`crate::caps`]), which holds the cap. Jobs go to
//! the maintenance queue with their delay (at most 15 minutes, more than a lease or a retry
//! ever waits).

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::{
    error::SdkError,
    operation::put_item::PutItemError,
    types::{Delete, Put, TransactWriteItem},
};
use spool_log::{
    error::Error,
    jobs::{Deferred, MaintenanceJob},
    subscription::{SubscriptionStore, Versioned, record::Subscription},
};

use crate::{
    AwsMetadata, SqsSealScheduler,
    caps::{Change, Counter},
    errors::ddb,
    items::{n, s},
    keys::subscriptions_pk,
    metadata::{number, string},
};

fn decode(item: &crate::items::Item) -> Result<Versioned, Error> {
    let data = string(item, "data", "a subscription")?;
    let record = serde_json::from_str(&data).map_err(|e| Error::Corrupt {
        what: format!("a stored subscription: {e}"),
    })?;
    let version = number(item, "ver", "a subscription")?;
    Ok(Versioned {
        record,
        version: u64::try_from(version).unwrap_or(0),
    })
}

#[async_trait]
impl SubscriptionStore for AwsMetadata {
    async fn get(&self, org: &str, id: &str) -> Result<Option<Versioned>, Error> {
        AwsMetadata::get(self, subscriptions_pk(org), id, "GetItem (subscription)")
            .await?
            .map(|item| decode(&item))
            .transpose()
    }

    async fn save(&self, org: &str, record: &Subscription, expected: Option<u64>) -> Result<bool, Error> {
        let data = serde_json::to_string(record).map_err(|e| Error::unavailable("encode a subscription", e))?;
        if expected.is_none() {
            let put = Put::builder()
                .table_name(&self.table)
                .item("pk", s(subscriptions_pk(org)))
                .item("sk", s(&record.id))
                .item("data", s(data))
                .item("ver", n(1))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(|e| Error::unavailable("build a DynamoDB request", e))?;
            let counter = Counter::subscriptions(org, self.caps.subscriptions_per_org);
            let change = Change {
                counter: &counter,
                count: 1,
                bytes: 0,
            };
            let items = vec![TransactWriteItem::builder().put(put).build()];
            return Ok(self.counted(items, &[change]).await?.is_none());
        }
        let put = self
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .item("pk", s(subscriptions_pk(org)))
            .item("sk", s(&record.id))
            .item("data", s(data))
            .item("ver", n(expected.map_or(1, |v| v + 1)));
        let put = match expected {
            None => put.condition_expression("attribute_not_exists(pk)"),
            Some(version) => put
                .condition_expression("ver = :ver")
                .expression_attribute_values(":ver", n(version)),
        };
        match put.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(false)
            }
            Err(e) => Err(ddb("PutItem (subscription)", e)),
        }
    }

    async fn delete(&self, org: &str, id: &str) -> Result<bool, Error> {
        let delete = Delete::builder()
            .table_name(&self.table)
            .key("pk", s(subscriptions_pk(org)))
            .key("sk", s(id))
            .condition_expression("attribute_exists(pk)")
            .build()
            .map_err(|e| Error::unavailable("build a DynamoDB request", e))?;
        let counter = Counter::subscriptions(org, self.caps.subscriptions_per_org);
        let change = Change {
            counter: &counter,
            count: -1,
            bytes: 0,
        };
        let items = vec![TransactWriteItem::builder().delete(delete).build()];
        Ok(self.counted(items, &[change]).await?.is_none())
    }

    async fn list(&self, org: &str) -> Result<Vec<Subscription>, Error> {
        self.query_prefix(subscriptions_pk(org), "")
            .await?
            .iter()
            .map(|item| decode(item).map(|v| v.record))
            .collect()
    }
}

#[async_trait]
impl Deferred for SqsSealScheduler {
    async fn defer(&self, job: MaintenanceJob, delay: Duration) -> Result<(), Error> {
        self.send(&job, delay).await
    }
}
