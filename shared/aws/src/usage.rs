//! # The usage ledger in the metadata table
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | entry | `o#{org}#usage#ses#{chat}` | `e#{seq:020}` | one model step: its workspace, agent, model, day, tokens (`ti`, `tc`, `to`), `ts` |
//! | chat total | `o#{org}#usage#ses#{chat}` | `t#{agent}#{model}` | the chat's tokens of one agent and model |
//! | workspace day | `o#{org}#usage#ws#{ws}` | `d#{day}#{chat}#{agent}#{model}` | the workspace's tokens of one day, chat, agent and model |
//! | workspace month | `o#{org}#usage#ws#{ws}` | `m#{YYYY-MM}` | the workspace's tokens of one month (what its budget counts) |
//!
//! (`{agent}` is `a:{id}` or `-`, `{model}` `m:{name}` or `-`.) An entry is put in one
//! transaction with `ADD`s to the totals it counts in, on the condition that it is not there
//! yet: a second record of the same usage event (a redelivered step) fails the condition and
//! counts nothing. Queries read totals only, never entries: a chat's by prefix (`t#`), a
//! workspace's over a range of days by `sk BETWEEN d#{from} AND d#{to}` (`d#{to}` sorts
//! before every item of that day), a month's with one `GetItem`.
//!
//! Item sizes: each item holds one combination's three counters and its names, a few hundred
//! bytes whatever the traffic; what grows is the number of items (per day, one per chat, agent
//! and model that ran), never an item, so DynamoDB's 400 KB item limit is never approached and
//! no write contends on one ever-growing item beyond the month total. A usage partition is
//! apart from its chat's and workspace's, so the ledger outlives a deleted chat or workspace
//! (a record of what was spent).

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use spool_chat::usage::{DayRange, Month, Tokens, UsageEntry, UsageLedger, UsageRow};
use spool_log::error::Error;

use crate::{
    errors::{build, cancellation_reasons},
    items::{Item, n, s},
    keys::{usage_chat_pk, usage_ws_pk},
    metadata::AwsMetadata,
    workspaces::SortKeys,
};

/// How many times a record is tried against concurrent writers of the same totals.
const ATTEMPTS: u32 = 10;

fn agent_key(agent: Option<&str>) -> String {
    agent.map_or_else(|| "-".to_owned(), |a| format!("a:{a}"))
}

fn model_key(model: Option<&str>) -> String {
    model.map_or_else(|| "-".to_owned(), |m| format!("m:{m}"))
}

fn add_tokens(
    update: aws_sdk_dynamodb::types::builders::UpdateBuilder,
    tokens: &Tokens,
) -> aws_sdk_dynamodb::types::builders::UpdateBuilder {
    update
        .expression_attribute_names("#ti", "ti")
        .expression_attribute_names("#tc", "tc")
        .expression_attribute_names("#to", "to")
        .expression_attribute_values(":ti", n(tokens.input))
        .expression_attribute_values(":tc", n(tokens.cached_input))
        .expression_attribute_values(":to", n(tokens.output))
}

impl AwsMetadata {
    /// A total's `Update`: its names set, its tokens added.
    fn total(&self, pk: String, sk: String, entry: &UsageEntry) -> Result<TransactWriteItem, Error> {
        let mut set = vec!["#chat = :chat", "#an = :an"];
        let mut update = Update::builder()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .expression_attribute_names("#chat", "chat")
            .expression_attribute_names("#an", "aname")
            .expression_attribute_values(":chat", s(&entry.chat_id))
            .expression_attribute_values(":an", s(&entry.agent_name));
        if let Some(agent) = &entry.agent_id {
            set.push("#ag = :ag");
            update = update
                .expression_attribute_names("#ag", "agent")
                .expression_attribute_values(":ag", s(agent));
        }
        if let Some(model) = &entry.model {
            set.push("#m = :m");
            update = update
                .expression_attribute_names("#m", "model")
                .expression_attribute_values(":m", s(model));
        }
        let expression = format!("SET {} ADD #ti :ti, #tc :tc, #to :to", set.join(", "));
        let update = add_tokens(update.update_expression(expression), &entry.tokens);
        Ok(TransactWriteItem::builder().update(build(update.build())?).build())
    }

    fn usage_writes(&self, org: &str, entry: &UsageEntry) -> Result<Vec<TransactWriteItem>, Error> {
        let chat_pk = usage_chat_pk(org, &entry.chat_id);
        let (agent, model) = (agent_key(entry.agent_id.as_deref()), model_key(entry.model.as_deref()));
        let mut put = Put::builder()
            .table_name(&self.table)
            .item("pk", s(&chat_pk))
            .item("sk", s(format!("e#{:020}", entry.seq)))
            .item("chat", s(&entry.chat_id))
            .item("aname", s(&entry.agent_name))
            .item("day", s(entry.day.to_string()))
            .item("ti", n(entry.tokens.input))
            .item("tc", n(entry.tokens.cached_input))
            .item("to", n(entry.tokens.output))
            .item("ts", n(entry.ts_ms))
            .condition_expression("attribute_not_exists(pk)");
        for (name, value) in [
            ("ws", &entry.workspace_id),
            ("agent", &entry.agent_id),
            ("model", &entry.model),
        ] {
            if let Some(value) = value {
                put = put.item(name, s(value));
            }
        }
        let mut writes = vec![
            TransactWriteItem::builder().put(build(put.build())?).build(),
            self.total(chat_pk, format!("t#{agent}#{model}"), entry)?,
        ];
        if let Some(ws) = &entry.workspace_id {
            let ws_pk = usage_ws_pk(org, ws);
            let day = format!("d#{}#{}#{agent}#{model}", entry.day, entry.chat_id);
            writes.push(self.total(ws_pk.clone(), day, entry)?);
            let month = Update::builder()
                .table_name(&self.table)
                .key("pk", s(ws_pk))
                .key("sk", s(format!("m#{}", entry.day.month())))
                .update_expression("ADD #ti :ti, #tc :tc, #to :to");
            let month = add_tokens(month, &entry.tokens);
            writes.push(TransactWriteItem::builder().update(build(month.build())?).build());
        }
        Ok(writes)
    }
}

fn text(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn tokens(item: &Item) -> Tokens {
    let count = |name: &str| {
        item.get(name)
            .and_then(|v: &AttributeValue| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Tokens {
        input: count("ti"),
        cached_input: count("tc"),
        output: count("to"),
    }
}

fn row(item: &Item) -> UsageRow {
    UsageRow {
        chat_id: text(item, "chat").unwrap_or_default(),
        agent_id: text(item, "agent"),
        agent_name: text(item, "aname").unwrap_or_default(),
        model: text(item, "model"),
        tokens: tokens(item),
    }
}

#[async_trait]
impl UsageLedger for AwsMetadata {
    async fn record_usage(&self, org: &str, entry: &UsageEntry) -> Result<bool, Error> {
        let writes = self.usage_writes(org, entry)?;
        for attempt in 0..ATTEMPTS {
            let Err(e) = crate::items::transact(&self.dynamodb, writes.clone()).await else {
                return Ok(true);
            };
            let codes = cancellation_reasons("TransactWriteItems (usage)", e)?;
            if codes.first().is_some_and(|c| c == "ConditionalCheckFailed") {
                return Ok(false);
            }
            // Another step added to the same totals at the same moment: try again.
            spool_log::retry::backoff(attempt).await;
        }
        Err(Error::unavailable(
            "DynamoDB TransactWriteItems (usage)",
            "the usage totals kept changing under concurrent writers",
        ))
    }

    async fn chat_usage(&self, org: &str, chat_id: &str) -> Result<Vec<UsageRow>, Error> {
        let items = self.query_prefix(usage_chat_pk(org, chat_id), "t#").await?;
        Ok(items.iter().map(row).collect())
    }

    async fn workspace_usage(&self, org: &str, workspace_id: &str, range: DayRange) -> Result<Vec<UsageRow>, Error> {
        let (low, high) = (format!("d#{}", range.from), format!("d#{}", range.to));
        let keys = SortKeys::Between(&low, &high);
        let items = self
            .query_items(usage_ws_pk(org, workspace_id), keys, "Query (usage)")
            .await?;
        Ok(items.iter().map(row).collect())
    }

    async fn workspace_month(&self, org: &str, workspace_id: &str, month: Month) -> Result<Tokens, Error> {
        let item = self
            .get(
                usage_ws_pk(org, workspace_id),
                &format!("m#{month}"),
                "GetItem (usage month)",
            )
            .await?;
        Ok(item.as_ref().map(tokens).unwrap_or_default())
    }
}
