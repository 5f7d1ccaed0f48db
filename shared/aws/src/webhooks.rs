//! # Chat webhooks in the metadata table
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | endpoint | `o#{org}#hooks` | `{id}` | `data` (JSON), `ws` (its workspace) |
//! | delivery | `o#{org}#hook#{hook_id}` | `{id}` (`msg_` + a UUIDv7: by time) | `data` (JSON), `ttl` |
//!
//! An organization's endpoints are one `Query` (a workspace's are filtered from it; there are
//! few). A delivery is put only if its key is free, so an event handed over twice is one
//! delivery; an endpoint's newest deliveries are a backward `Query`. Deliveries expire by
//! DynamoDB's TTL a week after they were made; a deleted endpoint's are deleted with it. A
//! delivery is saved on the condition that its attempt count (`tries`) is the one read, so two
//! jobs of one attempt record it once. An endpoint is made and deleted in one transaction with
//! its workspace's webhook counter ([`crate::caps`]), which holds the cap.

use async_trait::async_trait;
use aws_sdk_dynamodb::{
    error::SdkError,
    operation::put_item::PutItemError,
    types::{Delete, DeleteRequest, TransactWriteItem, WriteRequest},
};
use serde::{Serialize, de::DeserializeOwned};
use spool_chat::webhook::{DELIVERY_RECORD_MS, Delivery, Hook, HookStore};
use spool_log::error::Error;

use crate::{
    AwsMetadata,
    caps::{Change, Counter},
    errors::ddb,
    items::{Item, n, s},
    keys::{deliveries_pk, hooks_pk},
    metadata::string,
};

fn decode<T: DeserializeOwned>(item: &Item, what: &str) -> Result<T, Error> {
    let data = string(item, "data", what)?;
    serde_json::from_str(&data).map_err(|e| Error::Corrupt {
        what: format!("a stored {what}: {e}"),
    })
}

fn encode<T: Serialize>(value: &T, what: &str) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::unavailable(format!("encode a {what}"), e))
}

impl AwsMetadata {
    fn hook_item(org: &str, hook: &Hook) -> Result<Item, Error> {
        Ok(Item::from([
            ("pk".to_owned(), s(hooks_pk(org))),
            ("sk".to_owned(), s(&hook.id)),
            ("ws".to_owned(), s(&hook.workspace_id)),
            ("data".to_owned(), s(encode(hook, "webhook")?)),
        ]))
    }

    fn delivery_item(org: &str, delivery: &Delivery) -> Result<Item, Error> {
        let expires = (delivery.created_ms + DELIVERY_RECORD_MS) / 1000;
        Ok(Item::from([
            ("pk".to_owned(), s(deliveries_pk(org, &delivery.hook_id))),
            ("sk".to_owned(), s(&delivery.id)),
            ("data".to_owned(), s(encode(delivery, "delivery")?)),
            ("tries".to_owned(), n(delivery.attempts.len())),
            ("ttl".to_owned(), n(expires)),
        ]))
    }
}

#[async_trait]
impl HookStore for AwsMetadata {
    async fn create_hook(&self, org: &str, hook: &Hook) -> Result<(), Error> {
        let counter = Counter::hooks(org, &hook.workspace_id, self.caps.hooks_per_workspace);
        self.create_counted(Self::hook_item(org, hook)?, &counter, format!("webhook `{}`", hook.id))
            .await
    }

    async fn hook(&self, org: &str, id: &str) -> Result<Option<Hook>, Error> {
        self.get(hooks_pk(org), id, "GetItem (webhook)")
            .await?
            .map(|item| decode(&item, "webhook"))
            .transpose()
    }

    async fn hooks(&self, org: &str, workspace_id: &str) -> Result<Vec<Hook>, Error> {
        let mut hooks: Vec<Hook> = self
            .query_prefix(hooks_pk(org), "")
            .await?
            .iter()
            .filter(|item| {
                item.get("ws")
                    .and_then(|v| v.as_s().ok())
                    .is_some_and(|ws| ws == workspace_id)
            })
            .map(|item| decode(item, "webhook"))
            .collect::<Result<_, _>>()?;
        hooks.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(hooks)
    }

    async fn update_hook(&self, org: &str, hook: &Hook) -> Result<(), Error> {
        if self
            .put_if(Self::hook_item(org, hook)?, "attribute_exists(pk)", "PutItem (webhook)")
            .await?
        {
            Ok(())
        } else {
            Err(Error::Missing {
                what: format!("webhook `{}`", hook.id),
            })
        }
    }

    async fn delete_hook(&self, org: &str, id: &str) -> Result<(), Error> {
        let missing = || Error::Missing {
            what: format!("webhook `{id}`"),
        };
        let hook = self.hook(org, id).await?.ok_or_else(missing)?;
        let delete = Delete::builder()
            .table_name(&self.table)
            .key("pk", s(hooks_pk(org)))
            .key("sk", s(id))
            .condition_expression("attribute_exists(pk)")
            .build()
            .map_err(|e| Error::unavailable("build a DynamoDB request", e))?;
        let counter = Counter::hooks(org, &hook.workspace_id, self.caps.hooks_per_workspace);
        let change = Change {
            counter: &counter,
            count: -1,
            bytes: 0,
        };
        if self
            .counted(vec![TransactWriteItem::builder().delete(delete).build()], &[change])
            .await?
            .is_some()
        {
            return Err(missing());
        }
        // Its deliveries (what they carried is the workspace's): 25 at a time.
        let items = self.query_prefix(deliveries_pk(org, id), "").await?;
        for chunk in items.chunks(25) {
            let requests: Vec<WriteRequest> = chunk
                .iter()
                .filter_map(|item| {
                    let key = Item::from([
                        ("pk".to_owned(), item.get("pk")?.clone()),
                        ("sk".to_owned(), item.get("sk")?.clone()),
                    ]);
                    let delete = DeleteRequest::builder().set_key(Some(key)).build().ok()?;
                    Some(WriteRequest::builder().delete_request(delete).build())
                })
                .collect();
            let mut pending = Some(requests);
            for _ in 0..5 {
                let Some(requests) = pending.take().filter(|r| !r.is_empty()) else {
                    break;
                };
                let out = self
                    .dynamodb
                    .batch_write_item()
                    .request_items(&self.table, requests)
                    .send()
                    .await
                    .map_err(|e| ddb("BatchWriteItem (webhook deliveries)", e))?;
                pending = out.unprocessed_items.and_then(|mut u| u.remove(&self.table));
            }
        }
        Ok(())
    }

    async fn add_delivery(&self, org: &str, delivery: &Delivery) -> Result<bool, Error> {
        self.put_if(
            Self::delivery_item(org, delivery)?,
            "attribute_not_exists(pk)",
            "PutItem (webhook delivery)",
        )
        .await
    }

    async fn delivery(&self, org: &str, hook_id: &str, id: &str) -> Result<Option<Delivery>, Error> {
        self.get(deliveries_pk(org, hook_id), id, "GetItem (webhook delivery)")
            .await?
            .map(|item| decode(&item, "delivery"))
            .transpose()
    }

    async fn save_delivery(&self, org: &str, delivery: &Delivery, attempts: usize) -> Result<bool, Error> {
        let saved = self
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(Self::delivery_item(org, delivery)?))
            .condition_expression("tries = :tries")
            .expression_attribute_values(":tries", n(attempts))
            .send()
            .await;
        match saved {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(false)
            }
            Err(e) => Err(ddb("PutItem (webhook delivery)", e)),
        }
    }

    async fn deliveries(&self, org: &str, hook_id: &str, limit: usize) -> Result<Vec<Delivery>, Error> {
        let out = self
            .dynamodb
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(deliveries_pk(org, hook_id)))
            .scan_index_forward(false)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb("Query (webhook deliveries)", e))?;
        out.items().iter().map(|item| decode(item, "delivery")).collect()
    }
}
