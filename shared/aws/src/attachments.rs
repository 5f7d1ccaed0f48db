//! # Attachment records in the metadata table
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | attachment | `o#{org}#ses#{session}` | `att#{id}` | `data` (JSON), `st` (`uploading` or `complete`), `ttl` while uploading |
//!
//! A chat's attachments share its partition, so they are listed with one strongly consistent
//! `Query` (and ordered by creation, their ids being time-ordered); completing one is an update
//! on the condition that it is still uploading, so it happens once, and removes the `ttl` with
//! which DynamoDB deletes the record of an upload never completed (a day after its URL expired,
//! as the bucket's lifecycle rule deletes its bytes). Abandoning one (an upload refused) deletes
//! it on the same condition, so a completed file is never lost to it. A record is made in one
//! transaction with its chat's file counter ([`crate::caps`]), which holds the cap.

use async_trait::async_trait;
use aws_sdk_dynamodb::{
    error::SdkError,
    operation::{delete_item::DeleteItemError, update_item::UpdateItemError},
    types::ReturnValue,
};
use spool_chat::attachment::{Attachment, AttachmentStatus, Attachments};
use spool_log::error::Error;

use crate::{
    caps::Counter,
    errors::ddb,
    items::{Item, s, ttl_attribute},
    keys::session_pk,
    metadata::{AwsMetadata, string},
};

fn decode(item: &Item) -> Result<Attachment, Error> {
    let data = string(item, "data", "an attachment")?;
    serde_json::from_str(&data).map_err(|e| Error::Corrupt {
        what: format!("an attachment: {e}"),
    })
}

fn encode(attachment: &Attachment) -> Result<String, Error> {
    serde_json::to_string(attachment).map_err(|e| Error::unavailable("encode an attachment", e))
}

#[async_trait]
impl Attachments for AwsMetadata {
    async fn create_attachment(&self, org: &str, attachment: &Attachment) -> Result<(), Error> {
        let item = Item::from([
            ("pk".to_owned(), s(session_pk(org, &attachment.session_id))),
            ("sk".to_owned(), s(format!("att#{}", attachment.id))),
            ("st".to_owned(), s("uploading")),
            ("data".to_owned(), s(encode(attachment)?)),
        ]);
        let mut item = item;
        item.extend(ttl_attribute(Some(attachment.upload_expires_ms)).map(|ttl| ("ttl".to_owned(), ttl)));
        let counter = Counter::attachments(org, &attachment.session_id, self.caps.attachments_per_chat);
        self.create_counted(item, &counter, format!("attachment `{}`", attachment.id))
            .await
    }

    async fn attachment(&self, org: &str, session_id: &str, id: &str) -> Result<Option<Attachment>, Error> {
        self.get(
            session_pk(org, session_id),
            &format!("att#{id}"),
            "GetItem (attachment)",
        )
        .await?
        .as_ref()
        .map(decode)
        .transpose()
    }

    async fn attachments(&self, org: &str, session_id: &str) -> Result<Vec<Attachment>, Error> {
        let mut found: Vec<Attachment> = self
            .query_prefix(session_pk(org, session_id), "att#")
            .await?
            .iter()
            .map(decode)
            .collect::<Result<_, _>>()?;
        found.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(found)
    }

    async fn complete_attachment(
        &self,
        org: &str,
        session_id: &str,
        id: &str,
        at_ms: i64,
    ) -> Result<Option<Attachment>, Error> {
        let Some(mut attachment) = self.attachment(org, session_id, id).await? else {
            return Ok(None);
        };
        if attachment.status != AttachmentStatus::Uploading {
            return Ok(None);
        }
        attachment.status = AttachmentStatus::Complete;
        attachment.completed_ms = Some(at_ms);
        let result = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(session_pk(org, session_id)))
            .key("sk", s(format!("att#{id}")))
            .update_expression("SET #st = :complete, #data = :data REMOVE #ttl")
            .condition_expression("#st = :uploading")
            .expression_attribute_names("#st", "st")
            .expression_attribute_names("#data", "data")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":complete", s("complete"))
            .expression_attribute_values(":uploading", s("uploading"))
            .expression_attribute_values(":data", s(encode(&attachment)?))
            .return_values(ReturnValue::None)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Some(attachment)),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(None)
            }
            Err(e) => Err(ddb("UpdateItem (attachment)", e)),
        }
    }

    async fn abandon_attachment(&self, org: &str, session_id: &str, id: &str) -> Result<bool, Error> {
        let result = self
            .dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(session_pk(org, session_id)))
            .key("sk", s(format!("att#{id}")))
            .condition_expression("#st = :uploading")
            .expression_attribute_names("#st", "st")
            .expression_attribute_values(":uploading", s("uploading"))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), DeleteItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(false)
            }
            Err(e) => Err(ddb("DeleteItem (attachment)", e)),
        }
    }
}
