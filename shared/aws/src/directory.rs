//! # The AWS directory: organizations and API keys in the metadata table
//!
//! | item | `pk` | `sk` | `gsi2pk` / `gsi2sk` (index `by_owner`) |
//! | --- | --- | --- | --- |
//! | organization | `o#{id}` | `org` | — |
//! | API key | `key#{key_id}` | `key` | `o#{org}#keys` / `key#{key_id}` |
//! | shared workspace root's claim | `root#{sha256 of the path}` | `claim` | — |
//!
//! A key is its own partition, so the handshake finds it with one `GetItem` by the id the key
//! carries; the index lists an organization's keys. A key is added in one transaction with a
//! check that its organization exists. A root's claim is one `UpdateItem` that sets the owner
//! only if none is set and returns the owner either way, so concurrent claims agree.

use async_trait::async_trait;
use aws_sdk_dynamodb::{
    error::SdkError,
    operation::transact_write_items::TransactWriteItemsError,
    types::{AttributeValue, ConditionCheck, Put, TransactWriteItem},
};
use spool_chat::directory::{ApiKeyRecord, Directory, Org, key_label, org_label};
use spool_log::error::Error;

use crate::{
    errors::ddb,
    items::{Item, n, s},
    keys::{key_pk, org_pk, owner_keys_pk, root_pk},
    metadata::{AwsMetadata, number, string},
};

#[async_trait]
impl Directory for AwsMetadata {
    async fn create_org(&self, org: &Org) -> Result<(), Error> {
        let item = Item::from([
            ("pk".to_owned(), s(org_pk(&org.id))),
            ("sk".to_owned(), s("org")),
            ("name".to_owned(), s(&org.name)),
            ("created_ms".to_owned(), n(org.created_ms)),
        ]);
        if self
            .put_if(item, "attribute_not_exists(pk)", "PutItem (organization)")
            .await?
        {
            Ok(())
        } else {
            Err(Error::Exists {
                what: org_label(&org.id),
            })
        }
    }

    async fn org(&self, id: &str) -> Result<Option<Org>, Error> {
        let what = org_label(id);
        let Some(item) = self.get(org_pk(id), "org", "GetItem (organization)").await? else {
            return Ok(None);
        };
        Ok(Some(Org {
            id: id.to_owned(),
            name: string(&item, "name", &what)?,
            created_ms: number(&item, "created_ms", &what)?,
        }))
    }

    async fn add_api_key(&self, key: &ApiKeyRecord) -> Result<(), Error> {
        let check_org = ConditionCheck::builder()
            .table_name(&self.table)
            .key("pk", s(org_pk(&key.org_id)))
            .key("sk", s("org"))
            .condition_expression("attribute_exists(pk)")
            .build()
            .map_err(|e| Error::unavailable("build a DynamoDB condition check", e))?;
        let capabilities = AttributeValue::L(key.capabilities.iter().map(s).collect());
        let put = Put::builder()
            .table_name(&self.table)
            .item("pk", s(key_pk(&key.key_id)))
            .item("sk", s("key"))
            .item("org", s(&key.org_id))
            .item("hash", s(&key.secret_hash))
            .item("caps", capabilities)
            .item("created_ms", n(key.created_ms))
            .item("gsi2pk", s(owner_keys_pk(&key.org_id)))
            .item("gsi2sk", s(key_pk(&key.key_id)))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| Error::unavailable("build a DynamoDB put", e))?;
        let result = self
            .dynamodb
            .transact_write_items()
            .client_request_token(crate::items::request_token())
            .transact_items(TransactWriteItem::builder().condition_check(check_org).build())
            .transact_items(TransactWriteItem::builder().put(put).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let failed = |i: usize| {
                        c.cancellation_reasons()
                            .get(i)
                            .is_some_and(|r| r.code() == Some("ConditionalCheckFailed"))
                    };
                    if failed(0) {
                        Err(Error::Missing {
                            what: org_label(&key.org_id),
                        })
                    } else if failed(1) {
                        Err(Error::Exists {
                            what: key_label(&key.key_id),
                        })
                    } else {
                        Err(ddb("TransactWriteItems (API key)", SdkError::ServiceError(e)))
                    }
                }
                _ => Err(ddb("TransactWriteItems (API key)", SdkError::ServiceError(e))),
            },
            Err(e) => Err(ddb("TransactWriteItems (API key)", e)),
        }
    }

    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, Error> {
        let what = key_label(key_id);
        let Some(item) = self.get(key_pk(key_id), "key", "GetItem (API key)").await? else {
            return Ok(None);
        };
        let capabilities = item
            .get("caps")
            .and_then(|v| v.as_l().ok())
            .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
            .unwrap_or_default();
        Ok(Some(ApiKeyRecord {
            key_id: key_id.to_owned(),
            org_id: string(&item, "org", &what)?,
            secret_hash: string(&item, "hash", &what)?,
            capabilities,
            created_ms: number(&item, "created_ms", &what)?,
        }))
    }

    async fn remove_api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, Error> {
        let removed = self.api_key(key_id).await?;
        self.dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(key_pk(key_id)))
            .key("sk", s("key"))
            .send()
            .await
            .map_err(|e| ddb("DeleteItem (API key)", e))?;
        Ok(removed)
    }

    async fn claim_root(&self, root: &str, org: &str) -> Result<String, Error> {
        let out = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(root_pk(root)))
            .key("sk", s("claim"))
            .update_expression("SET #org = if_not_exists(#org, :org), #path = if_not_exists(#path, :path)")
            .expression_attribute_names("#org", "org")
            .expression_attribute_names("#path", "path")
            .expression_attribute_values(":org", s(org))
            .expression_attribute_values(":path", s(root))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| ddb("UpdateItem (workspace root claim)", e))?;
        let item = out.attributes.unwrap_or_default();
        string(&item, "org", "a workspace root's claim")
    }

    async fn root_owner(&self, root: &str) -> Result<Option<String>, Error> {
        let Some(item) = self
            .get(root_pk(root), "claim", "GetItem (workspace root claim)")
            .await?
        else {
            return Ok(None);
        };
        string(&item, "org", "a workspace root's claim").map(Some)
    }
}
