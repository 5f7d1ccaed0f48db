//! # The AWS metadata store: the metadata table
//!
//! Organizations, API keys, workspaces and agents, in the template's metadata table (`pk`,
//! `sk`, GSIs `by_activity` and `by_owner`). Every record of an organization has the
//! organization in its key, so a request can only ever address its own organization's records.
//! See [`crate::directory`] and [`crate::workspaces`] for the items, [`crate::keys`] for how
//! every item is keyed, and [`crate::caps`] for the counters that hold the caps.

use aws_sdk_dynamodb::{
    Client,
    error::SdkError,
    operation::{put_item::PutItemError, update_item::UpdateItemError},
};
use spool_chat::caps::Caps;
use spool_log::error::Error;

use crate::{
    errors::ddb,
    items::{Item, s},
};

/// The metadata store on DynamoDB; cheap to clone.
#[derive(Debug, Clone)]
pub struct AwsMetadata {
    pub(crate) dynamodb: Client,
    pub(crate) table: String,
    /// What one workspace, chat or organization may hold.
    pub(crate) caps: Caps,
}

impl AwsMetadata {
    /// The store in `table` (the template's metadata table).
    pub fn new(dynamodb: Client, table: impl Into<String>) -> Self {
        Self {
            dynamodb,
            table: table.into(),
            caps: Caps::default(),
        }
    }

    /// The same store, holding records to `caps` instead of [`Caps::default`].
    #[must_use]
    pub fn with_caps(mut self, caps: Caps) -> Self {
        self.caps = caps;
        self
    }

    /// A `PutItem` under `condition`; false when the condition failed.
    pub(crate) async fn put_if(&self, item: Item, condition: &str, what: &str) -> Result<bool, Error> {
        let result = self
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(false)
            }
            Err(e) => Err(ddb(what, e)),
        }
    }

    pub(crate) async fn get(&self, pk: String, sk: &str, what: &str) -> Result<Option<Item>, Error> {
        let out = self
            .dynamodb
            .get_item()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb(what, e))?;
        Ok(out.item)
    }
}

/// Whether a conditional `UpdateItem` applied (`false`: its condition failed).
pub(crate) fn applied<T>(
    result: Result<T, SdkError<UpdateItemError, aws_sdk_dynamodb::config::http::HttpResponse>>,
    what: &str,
) -> Result<bool, Error> {
    match result {
        Ok(_) => Ok(true),
        Err(SdkError::ServiceError(e)) if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) => {
            Ok(false)
        }
        Err(e) => Err(ddb(what, e)),
    }
}

pub(crate) fn string(item: &Item, name: &str, what: &str) -> Result<String, Error> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .ok_or_else(|| Error::Corrupt {
            what: format!("{what} has no `{name}`"),
        })
}

pub(crate) fn number(item: &Item, name: &str, what: &str) -> Result<i64, Error> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::Corrupt {
            what: format!("{what} has no numeric `{name}`"),
        })
}
