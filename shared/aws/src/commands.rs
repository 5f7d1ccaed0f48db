//! # Slash commands in the metadata table
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | global command | `o#{org}#cmds` | `cmd#{name}` | `md` (the markdown), `at` (saved, ms) |
//! | workspace command | `o#{org}#ws#{ws}` | `cmd#{name}` | the same |
//!
//! A workspace's commands share its partition, so they are listed with one strongly consistent
//! `Query` and deleted with the workspace's other children.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValue;
use spool_domain::{
    Error,
    commands::{CommandScope, Commands, StoredCommand},
};

use crate::{
    errors::ddb,
    items::{Item, n, s},
    metadata::{AwsMetadata, number, string},
};

fn scope_pk(org: &str, scope: &CommandScope) -> String {
    match scope {
        CommandScope::Global => format!("o#{org}#cmds"),
        CommandScope::Workspace(ws) => format!("o#{org}#ws#{ws}"),
    }
}

fn decode(item: &Item) -> Result<StoredCommand, Error> {
    let sk = string(item, "sk", "a slash command")?;
    Ok(StoredCommand {
        name: sk.strip_prefix("cmd#").unwrap_or(&sk).to_owned(),
        markdown: string(item, "md", "a slash command")?,
        updated_ms: number(item, "at", "a slash command")?,
    })
}

#[async_trait]
impl Commands for AwsMetadata {
    async fn put_command(&self, org: &str, scope: &CommandScope, command: &StoredCommand) -> Result<(), Error> {
        self.dynamodb
            .put_item()
            .table_name(&self.table)
            .item("pk", s(scope_pk(org, scope)))
            .item("sk", s(format!("cmd#{}", command.name)))
            .item("md", s(&command.markdown))
            .item("at", n(command.updated_ms))
            .send()
            .await
            .map_err(|e| ddb("PutItem (slash command)", e))?;
        Ok(())
    }

    async fn command(&self, org: &str, scope: &CommandScope, name: &str) -> Result<Option<StoredCommand>, Error> {
        self.get(scope_pk(org, scope), &format!("cmd#{name}"), "GetItem (slash command)")
            .await?
            .as_ref()
            .map(decode)
            .transpose()
    }

    async fn commands(&self, org: &str, scope: &CommandScope) -> Result<Vec<StoredCommand>, Error> {
        self.query_prefix(scope_pk(org, scope), "cmd#")
            .await?
            .iter()
            .map(decode)
            .collect()
    }

    async fn delete_command(&self, org: &str, scope: &CommandScope, name: &str) -> Result<bool, Error> {
        let out = self
            .dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(scope_pk(org, scope)))
            .key("sk", s(format!("cmd#{name}")))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| ddb("DeleteItem (slash command)", e))?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }
}
