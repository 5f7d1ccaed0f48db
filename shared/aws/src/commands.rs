//! # Slash commands in the metadata table
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | global command | `o#{org}#cmds` | `cmd#{name}` | `md` (the markdown), `at` (saved, ms) |
//! | workspace command | `o#{org}#ws#{ws}` | `cmd#{name}` | the same |
//!
//! A workspace's commands share its partition, so they are listed with one strongly consistent
//! `Query` and deleted with the workspace's other children. A command is stored or deleted in
//! one transaction with two counters ([`crate::caps`]): its scope's and its organization's,
//! each of commands and of their bytes. The write is conditioned on the command being what was
//! read first (absent, or the same markdown), so a replaced command counts once and the
//! counters change by exactly its change in size; a writer that finds it changed reads again.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem};
use spool_commands::{CommandScope, Commands, StoredCommand};
use spool_log::error::Error;

use crate::{
    caps::{Change, Counter},
    errors::build,
    items::{Item, n, s},
    keys::commands_pk,
    metadata::{AwsMetadata, number, string},
};

/// How many times a write is tried against writers that keep changing the same command.
const ATTEMPTS: u32 = 20;

fn decode(item: &Item) -> Result<StoredCommand, Error> {
    let sk = string(item, "sk", "a slash command")?;
    Ok(StoredCommand {
        name: sk.strip_prefix("cmd#").unwrap_or(&sk).to_owned(),
        markdown: string(item, "md", "a slash command")?,
        updated_ms: number(item, "at", "a slash command")?,
    })
}

fn size(markdown: &str) -> i64 {
    i64::try_from(markdown.len()).unwrap_or(i64::MAX)
}

impl AwsMetadata {
    /// The counters a command of `scope` changes: its scope's and its organization's.
    fn command_counters(&self, org: &str, scope: &CommandScope) -> [Counter; 2] {
        let caps = self.caps;
        [
            Counter::commands(
                commands_pk(org, scope),
                caps.commands_per_scope,
                caps.command_bytes_per_scope,
            ),
            Counter::org_commands(org, caps.commands_per_org, caps.command_bytes_per_org),
        ]
    }
}

#[async_trait]
impl Commands for AwsMetadata {
    async fn put_command(&self, org: &str, scope: &CommandScope, command: &StoredCommand) -> Result<(), Error> {
        let counters = self.command_counters(org, scope);
        let key = format!("cmd#{}", command.name);
        for _ in 0..ATTEMPTS {
            let old = self.command(org, scope, &command.name).await?;
            let put = Put::builder()
                .table_name(&self.table)
                .item("pk", s(commands_pk(org, scope)))
                .item("sk", s(&key))
                .item("md", s(&command.markdown))
                .item("at", n(command.updated_ms));
            let put = match &old {
                None => put.condition_expression("attribute_not_exists(pk)"),
                Some(old) => put
                    .condition_expression("md = :old")
                    .expression_attribute_values(":old", s(&old.markdown)),
            };
            let change = |counter| Change {
                counter,
                count: i64::from(old.is_none()),
                bytes: size(&command.markdown) - old.as_ref().map_or(0, |o| size(&o.markdown)),
            };
            let items = vec![TransactWriteItem::builder().put(build(put.build())?).build()];
            if self
                .counted(items, &[change(&counters[0]), change(&counters[1])])
                .await?
                .is_none()
            {
                return Ok(());
            }
        }
        Err(Error::unavailable(
            "DynamoDB TransactWriteItems (slash command)",
            "the command kept changing under concurrent writers; retry shortly",
        ))
    }

    async fn command(&self, org: &str, scope: &CommandScope, name: &str) -> Result<Option<StoredCommand>, Error> {
        self.get(
            commands_pk(org, scope),
            &format!("cmd#{name}"),
            "GetItem (slash command)",
        )
        .await?
        .as_ref()
        .map(decode)
        .transpose()
    }

    async fn command_names(&self, org: &str, scope: &CommandScope) -> Result<Vec<String>, Error> {
        let items = self.query_prefix(commands_pk(org, scope), "cmd#").await?;
        Ok(items
            .iter()
            .filter_map(|item| item.get("sk")?.as_s().ok()?.strip_prefix("cmd#").map(str::to_owned))
            .collect())
    }

    async fn commands(&self, org: &str, scope: &CommandScope) -> Result<Vec<StoredCommand>, Error> {
        self.query_prefix(commands_pk(org, scope), "cmd#")
            .await?
            .iter()
            .map(decode)
            .collect()
    }

    async fn delete_command(&self, org: &str, scope: &CommandScope, name: &str) -> Result<bool, Error> {
        let counters = self.command_counters(org, scope);
        for _ in 0..ATTEMPTS {
            let Some(old) = self.command(org, scope, name).await? else {
                return Ok(false);
            };
            let delete = Delete::builder()
                .table_name(&self.table)
                .key("pk", s(commands_pk(org, scope)))
                .key("sk", s(format!("cmd#{name}")))
                .condition_expression("md = :old")
                .expression_attribute_values(":old", s(&old.markdown));
            let change = |counter| Change {
                counter,
                count: -1,
                bytes: -size(&old.markdown),
            };
            let items = vec![TransactWriteItem::builder().delete(build(delete.build())?).build()];
            if self
                .counted(items, &[change(&counters[0]), change(&counters[1])])
                .await?
                .is_none()
            {
                return Ok(true);
            }
        }
        Err(Error::unavailable(
            "DynamoDB TransactWriteItems (slash command)",
            "the command kept changing under concurrent writers; retry shortly",
        ))
    }
}
