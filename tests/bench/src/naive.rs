//! # Two naive designs, run on the emulator with the turns Spool ran
//!
//! What a chat backend without Spool's log costs for the same chat events, measured the way
//! Spool's are ([`crate::aws_chat`]): the same events (those Spool's turns wrote, read back),
//! written to a DynamoDB table of the benchmark's own in DynamoDB Local through the SDK, with a
//! [`RequestCounter`] counting the requests and the capacity units DynamoDB reports.
//!
//! - **One item per event**: each chat event is its own item, put on the condition that its
//!   key is free (the writer keeps the chat's next number, as Spool's writer does); no pages.
//! - **One item per token**: the same, but an answer's text is written as it comes, one item
//!   per token (here, per word of the scripted answer), with no coalescing and no pages.
//!
//! Each chat has one live reader while its turns run, polling for new items every
//! [`POLL`] (an eventually consistent `Query` from the last item it saw: what a reader of such a
//! table does without a push channel), and one later reader catches up on the whole chat (the
//! same `Query`, paged). Neither design has a feed, turn records or anything else Spool keeps,
//! which favours them.

use std::time::Duration;

use anyhow::Context;
use aws_sdk_dynamodb::{
    primitives::Blob,
    types::{AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType},
};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use spool_aws::{AwsClients, RequestCounter};
use spool_platform::Config;

use crate::aws_chat::Usage;

/// How often a naive design's live reader polls its chat while a turn runs.
const POLL: Duration = Duration::from_millis(500);

/// One turn Spool ran: its chat, the events it wrote, and how long it ran.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub(crate) chat: usize,
    pub(crate) events: Vec<Bytes>,
    pub(crate) seconds: f64,
}

/// A naive design.
#[derive(Debug, Clone, Copy)]
enum Design {
    ItemPerEvent,
    ItemPerToken,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Self::ItemPerEvent => "one DynamoDB item per event, no pages",
            Self::ItemPerToken => "one DynamoDB item per token, no coalescing, no pages",
        }
    }

    /// The items `event` is written as.
    fn items(self, event: &Bytes) -> Vec<Bytes> {
        let Self::ItemPerToken = self else {
            return vec![event.clone()];
        };
        let Ok(mut value) = serde_json::from_slice::<Value>(event) else {
            return vec![event.clone()];
        };
        let Some(delta) = value
            .pointer("/payload/delta")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return vec![event.clone()];
        };
        delta
            .split_inclusive(' ')
            .map(|token| {
                value["payload"]["delta"] = Value::String(token.to_owned());
                Bytes::from(value.to_string())
            })
            .collect()
    }
}

/// What one naive design sent, per 1,000 of the chat events Spool wrote.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Naive {
    pub(crate) design: String,
    /// Items written per chat event.
    pub(crate) items_per_event: f64,
    /// The writer's requests.
    pub(crate) write: Usage,
    /// The live readers' polls while the turns ran.
    pub(crate) live: Usage,
    /// One reader catching up on every chat once.
    pub(crate) catch_up: Usage,
}

/// Runs both designs with `turns` (round `chats` chats).
pub(crate) async fn run(config: &Config, turns: &[Turn], chats: usize) -> anyhow::Result<Vec<Naive>> {
    let mut out = Vec::new();
    for design in [Design::ItemPerEvent, Design::ItemPerToken] {
        crate::progress("naive designs", design.name());
        out.push(one(config, design, turns, chats).await?);
    }
    Ok(out)
}

/// A table of the run's own, keyed as a chat's items would be.
struct Table {
    name: String,
    writer: aws_sdk_dynamodb::Client,
}

impl Table {
    async fn create(clients: &AwsClients) -> anyhow::Result<Self> {
        let name = format!("spool-bench-naive-{}", uuid::Uuid::new_v4().simple());
        let key = |name: &str, kind| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .map_err(anyhow::Error::from)
        };
        let attribute = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(anyhow::Error::from)
        };
        clients
            .dynamodb
            .create_table()
            .table_name(&name)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key("pk", KeyType::Hash)?)
            .key_schema(key("sk", KeyType::Range)?)
            .attribute_definitions(attribute("pk")?)
            .attribute_definitions(attribute("sk")?)
            .send()
            .await
            .context("cannot create the naive designs' table in the emulator")?;
        Ok(Self {
            name,
            writer: clients.dynamodb.clone(),
        })
    }

    async fn put(&self, chat: usize, n: u64, item: &Bytes) -> anyhow::Result<()> {
        self.writer
            .put_item()
            .table_name(&self.name)
            .item("pk", AttributeValue::S(format!("chat#{chat}")))
            .item("sk", AttributeValue::S(format!("{n:012}")))
            .item("data", AttributeValue::B(Blob::new(item.to_vec())))
            .condition_expression("attribute_not_exists(sk)")
            .send()
            .await
            .context("naive PutItem")?;
        Ok(())
    }

    /// The items of `chat` after `after` (all when `None`), eventually consistent, every page;
    /// the last key read.
    async fn read_after(
        &self,
        reader: &aws_sdk_dynamodb::Client,
        chat: usize,
        after: Option<u64>,
    ) -> anyhow::Result<(usize, Option<u64>)> {
        let (mut items, mut last, mut start) = (0, after, None);
        loop {
            let out = reader
                .query()
                .table_name(&self.name)
                .key_condition_expression("pk = :pk AND sk > :after")
                .expression_attribute_values(":pk", AttributeValue::S(format!("chat#{chat}")))
                .expression_attribute_values(
                    ":after",
                    AttributeValue::S(after.map_or_else(|| "-".to_owned(), |n| format!("{n:012}"))),
                )
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .context("naive Query")?;
            items += out.items().len();
            if let Some(sk) = out.items().last().and_then(|i| i.get("sk")).and_then(|v| v.as_s().ok()) {
                last = sk.parse().ok();
            }
            match out.last_evaluated_key {
                Some(key) => start = Some(key),
                None => return Ok((items, last)),
            }
        }
    }

    async fn drop(self, clients: &AwsClients) {
        let _ = clients.dynamodb.delete_table().table_name(&self.name).send().await;
    }
}

async fn one(config: &Config, design: Design, turns: &[Turn], chats: usize) -> anyhow::Result<Naive> {
    let (write, live, catch_up) = (
        RequestCounter::default(),
        RequestCounter::default(),
        RequestCounter::default(),
    );
    let plain = AwsClients::new(&config.aws, None).await;
    let table = Table::create(&plain).await?;
    let writer = Table {
        name: table.name.clone(),
        writer: AwsClients::new(&config.aws, Some(write.clone())).await.dynamodb,
    };
    let live_reader = AwsClients::new(&config.aws, Some(live.clone())).await.dynamodb;
    let late_reader = AwsClients::new(&config.aws, Some(catch_up.clone())).await.dynamodb;
    let (mut next, mut seen) = (vec![0u64; chats], vec![None; chats]);
    let (mut events, mut items) = (0usize, 0usize);
    for turn in turns {
        // The turn's items, written as they come: the live reader polls every POLL of the
        // turn's time, so each poll finds the items written since the last.
        let written: Vec<Bytes> = turn.events.iter().flat_map(|e| design.items(e)).collect();
        events += turn.events.len();
        items += written.len();
        let polls = ((turn.seconds / POLL.as_secs_f64()).ceil() as usize).max(1);
        for chunk in written.chunks(written.len().div_ceil(polls).max(1)) {
            for item in chunk {
                next[turn.chat] += 1;
                writer.put(turn.chat, next[turn.chat], item).await?;
            }
            let (_, last) = table.read_after(&live_reader, turn.chat, seen[turn.chat]).await?;
            seen[turn.chat] = last.or(seen[turn.chat]);
        }
    }
    for (chat, written) in next.iter().enumerate() {
        let (read, _) = table.read_after(&late_reader, chat, None).await?;
        anyhow::ensure!(read as u64 == *written, "the naive table lost items of chat {chat}");
    }
    table.drop(&plain).await;
    anyhow::ensure!(events > 0, "no events to write");
    let per = events as f64 / 1000.0;
    Ok(Naive {
        design: design.name().to_owned(),
        items_per_event: items as f64 / events as f64,
        write: Usage::of(&write, per),
        live: Usage::of(&live, per),
        catch_up: Usage::of(&catch_up, per),
    })
}
