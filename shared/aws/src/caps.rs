//! # Caps on DynamoDB: a counter item per capped scope
//!
//! DynamoDB cannot count and insert atomically, so each capped scope has a counter item, and a
//! capped write is one `TransactWriteItems` of the record's own writes and an `Update` of each
//! counter it changes, on the condition that the counter exists and stays under its cap
//! (`cnt <= :max - 1`; `bytes <= :max - growth` where bytes are capped). Two creates at once
//! cannot both take the last place: one transaction's condition sees the other's count.
//! A delete decrements in the same transaction as the delete; a scope deleted whole (a
//! workspace, a chat) deletes its counters with its other items.
//!
//! | counter | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | a workspace's agents, tasks, webhooks, MCP servers | `o#{org}#ws#{ws}` | `cap#agents`, `cap#tasks`, `cap#hooks`, `cap#mcp` | `cnt` |
//! | a workspace's slash commands | `o#{org}#ws#{ws}` | `cap#cmds` | `cnt`, `bytes` |
//! | the organization's global commands | `o#{org}#cmds` | `cap#cmds` | `cnt`, `bytes` |
//! | all the organization's commands | `o#{org}` | `cap#cmds` | `cnt`, `bytes` |
//! | the organization's subscriptions | `o#{org}` | `cap#subs` | `cnt` |
//! | a chat's files | `o#{org}#ses#{id}` | `cap#att` | `cnt` |
//!
//! **Records from before the counters.** A counter that is missing (its scope's records were
//! written before counters existed, or it has none yet) is made from a strongly consistent count
//! of the records, put only if it is still missing. Every write of a capped record changes its
//! counter in its transaction, on the condition that the counter exists; so while a counter is
//! missing no record of its scope changes, and the count it is made from is still true when it
//! is put (the put fails if another writer made it first, and the write is tried again).
//!
//! **Records that expire.** A file whose upload is never completed is deleted by DynamoDB's TTL,
//! which no transaction sees, so a chat's file counter can only count too many. When it says
//! full, the chat's files are counted again and the counter lowered to the count (on the
//! condition that it still holds what was read), before the create is refused.

use aws_sdk_dynamodb::{
    error::SdkError,
    types::{AttributeValue, Select, TransactWriteItem, Update},
};
use spool_chat::caps::Capped;
use spool_log::error::Error;

use crate::{
    errors::{build, cancellation_reasons, ddb},
    items::{Item, n, s},
    keys::{commands_pk, hooks_pk, org_pk, session_pk, subscriptions_pk, ws_pk},
    metadata::AwsMetadata,
};

/// How many times a capped write is tried against writers that keep changing its counters.
const ATTEMPTS: u32 = 80;

/// A capped scope's counter.
#[derive(Debug, Clone)]
pub(crate) struct Counter {
    pk: String,
    sk: &'static str,
    counts: Counts,
    max: (Capped, u64),
    max_bytes: Option<(Capped, u64)>,
    recount_when_full: bool,
}

/// How a missing counter's records are counted.
#[derive(Debug, Clone)]
enum Counts {
    /// The items of `pk` whose sort key starts with `prefix`; with `bytes`, also the sum of
    /// the lengths (UTF-8 bytes) of that string attribute.
    Prefix {
        pk: String,
        prefix: &'static str,
        bytes: Option<&'static str>,
    },
    /// The items of `pk` whose attribute `attr` is `value`.
    Where {
        pk: String,
        attr: &'static str,
        value: String,
    },
    /// Every stored command of the organization: its global ones and each workspace's.
    OrgCommands { org: String },
}

/// What a write does to a counter: records added (or removed, below 0) and bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Change<'a> {
    pub(crate) counter: &'a Counter,
    pub(crate) count: i64,
    pub(crate) bytes: i64,
}

impl Counter {
    /// A workspace's counter of `sk` (`cap#agents`, …), counting the items whose keys start
    /// with `prefix`.
    pub(crate) fn in_workspace(
        org: &str,
        ws: &str,
        sk: &'static str,
        prefix: &'static str,
        max: (Capped, u64),
    ) -> Self {
        let pk = ws_pk(org, ws);
        Self {
            counts: Counts::Prefix {
                pk: pk.clone(),
                prefix,
                bytes: None,
            },
            pk,
            sk,
            max,
            max_bytes: None,
            recount_when_full: false,
        }
    }

    /// A workspace's webhook counter: its endpoints are in the organization's partition.
    pub(crate) fn hooks(org: &str, ws: &str, max: u64) -> Self {
        let mut counter = Self::in_workspace(org, ws, "cap#hooks", "", (Capped::Hooks, max));
        counter.counts = Counts::Where {
            pk: hooks_pk(org),
            attr: "ws",
            value: ws.to_owned(),
        };
        counter
    }

    /// A workspace's MCP server counter (its servers are `mcp#{id}` in its partition).
    pub(crate) fn mcp_servers(org: &str, ws: &str, max: u64) -> Self {
        Self::in_workspace(org, ws, "cap#mcp", "mcp#", (Capped::McpServers, max))
    }

    /// The counter of one scope's commands (in the scope's partition, `pk`).
    pub(crate) fn commands(pk: String, max: u64, max_bytes: u64) -> Self {
        Self {
            counts: Counts::Prefix {
                pk: pk.clone(),
                prefix: "cmd#",
                bytes: Some("md"),
            },
            pk,
            sk: "cap#cmds",
            max: (Capped::Commands, max),
            max_bytes: Some((Capped::CommandBytes, max_bytes)),
            recount_when_full: false,
        }
    }

    /// The counter of every command of the organization.
    pub(crate) fn org_commands(org: &str, max: u64, max_bytes: u64) -> Self {
        Self {
            pk: org_pk(org),
            sk: "cap#cmds",
            counts: Counts::OrgCommands { org: org.to_owned() },
            max: (Capped::OrgCommands, max),
            max_bytes: Some((Capped::OrgCommandBytes, max_bytes)),
            recount_when_full: false,
        }
    }

    /// The counter of the organization's subscriptions.
    pub(crate) fn subscriptions(org: &str, max: u64) -> Self {
        Self {
            pk: org_pk(org),
            sk: "cap#subs",
            counts: Counts::Prefix {
                pk: subscriptions_pk(org),
                prefix: "",
                bytes: None,
            },
            max: (Capped::Subscriptions, max),
            max_bytes: None,
            recount_when_full: false,
        }
    }

    /// The counter of a chat's files, counted again when full (uploads never completed
    /// expire without a transaction).
    pub(crate) fn attachments(org: &str, session_id: &str, max: u64) -> Self {
        let pk = session_pk(org, session_id);
        Self {
            counts: Counts::Prefix {
                pk: pk.clone(),
                prefix: "att#",
                bytes: None,
            },
            pk,
            sk: "cap#att",
            max: (Capped::Attachments, max),
            max_bytes: None,
            recount_when_full: true,
        }
    }

    /// Its key, to delete it with its scope.
    pub(crate) fn key(&self) -> (String, &'static str) {
        (self.pk.clone(), self.sk)
    }

    /// Refuses at once a change no counter could take: more than the whole cap.
    fn check(&self, change: &Change<'_>) -> Result<(), Error> {
        let (capped, max) = self.max;
        if change.count > 0 && u64::try_from(change.count).unwrap_or(u64::MAX) > max {
            return Err(capped.error(max));
        }
        if let Some((capped, max)) = self.max_bytes
            && change.bytes > 0
            && u64::try_from(change.bytes).unwrap_or(u64::MAX) > max
        {
            return Err(capped.error(max));
        }
        Ok(())
    }
}

/// A counter as stored: (`cnt`, `bytes`).
type Held = (i64, i64);

fn held(item: &Item) -> Held {
    let number = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (number("cnt"), number("bytes"))
}

const FAILED: &str = "ConditionalCheckFailed";

impl AwsMetadata {
    /// Writes `items` (a record's own writes, each with its condition) and `changes` to their
    /// counters in one transaction. `None` when written; `Some` with a flag per item of `items`
    /// when one of them failed its condition (nothing was written). A change that would take a
    /// counter past its cap is [`Error::CapReached`], and nothing is written.
    /// Puts a new record `item` (`what`, for the error when one with its key exists) and
    /// counts it on `counter`, in one transaction.
    pub(crate) async fn create_counted(&self, item: Item, counter: &Counter, what: String) -> Result<(), Error> {
        let put = build(
            aws_sdk_dynamodb::types::Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(pk)")
                .build(),
        )?;
        let change = Change {
            counter,
            count: 1,
            bytes: 0,
        };
        match self
            .counted(vec![TransactWriteItem::builder().put(put).build()], &[change])
            .await?
        {
            None => Ok(()),
            Some(_) => Err(Error::Exists { what }),
        }
    }

    pub(crate) async fn counted(
        &self,
        items: Vec<TransactWriteItem>,
        changes: &[Change<'_>],
    ) -> Result<Option<Vec<bool>>, Error> {
        let changes: Vec<&Change<'_>> = changes.iter().filter(|c| c.count != 0 || c.bytes != 0).collect();
        for change in &changes {
            change.counter.check(change)?;
        }
        for attempt in 0..ATTEMPTS {
            let mut all = items.clone();
            for change in &changes {
                all.push(self.counter_update(change)?);
            }
            let Err(e) = crate::items::transact(&self.dynamodb, all).await else {
                return Ok(None);
            };
            let codes = cancellation_reasons("TransactWriteItems (capped)", e)?;
            let (mine, counters) = codes.split_at(items.len().min(codes.len()));
            if mine.iter().any(|c| c == FAILED) {
                return Ok(Some(mine.iter().map(|c| c == FAILED).collect()));
            }
            for (change, code) in changes.iter().zip(counters) {
                if code == FAILED {
                    self.settle(change).await?;
                }
            }
            spool_log::retry::backoff(attempt).await;
        }
        Err(Error::unavailable(
            "DynamoDB TransactWriteItems (capped)",
            "a counter kept changing under concurrent writers; retry shortly",
        ))
    }

    /// The `Update` of a counter by `change`, on the condition that it exists and stays under
    /// its caps.
    fn counter_update(&self, change: &Change<'_>) -> Result<TransactWriteItem, Error> {
        let counter = change.counter;
        let mut update = Update::builder()
            .table_name(&self.table)
            .key("pk", s(&counter.pk))
            .key("sk", s(counter.sk))
            .expression_attribute_names("#c", "cnt")
            .expression_attribute_values(":dc", n(change.count));
        let mut set = "SET #c = #c + :dc".to_owned();
        let mut condition = "attribute_exists(pk)".to_owned();
        if change.count > 0 {
            condition.push_str(" AND #c <= :cmax");
            let room = i64::try_from(counter.max.1).unwrap_or(i64::MAX) - change.count;
            update = update.expression_attribute_values(":cmax", n(room));
        }
        if let Some((_, max_bytes)) = counter.max_bytes {
            set.push_str(", #b = #b + :db");
            update = update
                .expression_attribute_names("#b", "bytes")
                .expression_attribute_values(":db", n(change.bytes));
            if change.bytes > 0 {
                condition.push_str(" AND #b <= :bmax");
                let room = i64::try_from(max_bytes).unwrap_or(i64::MAX) - change.bytes;
                update = update.expression_attribute_values(":bmax", n(room));
            }
        }
        let update = build(update.update_expression(set).condition_expression(condition).build())?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// After `change`'s counter failed its condition: makes it if it is missing, refuses the
    /// change if the counter is full (after counting again, for a counter whose records
    /// expire), and otherwise lets the write be tried again.
    async fn settle(&self, change: &Change<'_>) -> Result<(), Error> {
        let counter = change.counter;
        let Some(item) = self
            .get(counter.pk.clone(), counter.sk, "GetItem (cap counter)")
            .await?
        else {
            let (count, bytes) = self.count(&counter.counts).await?;
            let mut item = Item::from([
                ("pk".to_owned(), s(&counter.pk)),
                ("sk".to_owned(), s(counter.sk)),
                ("cnt".to_owned(), n(count)),
            ]);
            if counter.max_bytes.is_some() {
                item.insert("bytes".to_owned(), n(bytes));
            }
            // Made by another writer meanwhile: theirs is as true as this one.
            self.put_if(item, "attribute_not_exists(pk)", "PutItem (cap counter)")
                .await?;
            return Ok(());
        };
        let (count, bytes) = held(&item);
        let (capped, max) = counter.max;
        let room = i64::try_from(max).unwrap_or(i64::MAX);
        if change.count > 0 && count + change.count > room {
            if counter.recount_when_full && self.recount(counter, count).await? {
                return Ok(());
            }
            return Err(capped.error(max));
        }
        if let Some((capped, max)) = counter.max_bytes
            && change.bytes > 0
            && bytes + change.bytes > i64::try_from(max).unwrap_or(i64::MAX)
        {
            return Err(capped.error(max));
        }
        Ok(())
    }

    /// Counts `counter`'s records again and lowers it to the count if it holds `seen` and
    /// counts more; whether it did.
    async fn recount(&self, counter: &Counter, seen: i64) -> Result<bool, Error> {
        let (count, _) = self.count(&counter.counts).await?;
        if count >= seen {
            return Ok(false);
        }
        let lowered = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(&counter.pk))
            .key("sk", s(counter.sk))
            .update_expression("SET #c = :count")
            .condition_expression("#c = :seen")
            .expression_attribute_names("#c", "cnt")
            .expression_attribute_values(":count", n(count))
            .expression_attribute_values(":seen", n(seen))
            .send()
            .await;
        match lowered {
            Ok(_) => Ok(true),
            // Changed meanwhile: the write is tried again against the new value.
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => Ok(true),
            Err(e) => Err(ddb("UpdateItem (cap counter)", e)),
        }
    }

    /// The records a counter counts, strongly consistent: (how many, their bytes).
    async fn count(&self, counts: &Counts) -> Result<Held, Error> {
        match counts {
            Counts::Prefix {
                pk,
                prefix,
                bytes: Some(attr),
            } => {
                let items = self.query_prefix(pk.clone(), prefix).await?;
                let bytes = items
                    .iter()
                    .filter_map(|item| item.get(*attr).and_then(|v| v.as_s().ok()))
                    .map(String::len)
                    .sum::<usize>();
                Ok((len(items.len()), len(bytes)))
            }
            Counts::Prefix {
                pk,
                prefix,
                bytes: None,
            } => Ok((self.count_where(pk, prefix, None).await?, 0)),
            Counts::Where { pk, attr, value } => Ok((self.count_where(pk, "", Some((attr, value))).await?, 0)),
            Counts::OrgCommands { org } => {
                let mut scopes = vec![commands_pk(org, &spool_commands::CommandScope::Global)];
                for item in self.query_prefix(org_pk(org), "ws#").await? {
                    if let Some(ws) = item
                        .get("sk")
                        .and_then(|v| v.as_s().ok())
                        .and_then(|sk| sk.strip_prefix("ws#"))
                    {
                        scopes.push(ws_pk(org, ws));
                    }
                }
                let mut total = (0, 0);
                for pk in scopes {
                    let counts = Counts::Prefix {
                        pk,
                        prefix: "cmd#",
                        bytes: Some("md"),
                    };
                    let (count, bytes) = Box::pin(self.count(&counts)).await?;
                    total = (total.0 + count, total.1 + bytes);
                }
                Ok(total)
            }
        }
    }

    /// How many items of `pk` have a sort key starting with `prefix` (and `attr` = value).
    async fn count_where(&self, pk: &str, prefix: &str, filter: Option<(&str, &String)>) -> Result<i64, Error> {
        let mut total = 0;
        let mut start = None;
        loop {
            let mut query = self
                .dynamodb
                .query()
                .table_name(&self.table)
                .select(Select::Count)
                .consistent_read(true)
                .expression_attribute_values(":pk", s(pk));
            query = if prefix.is_empty() {
                query.key_condition_expression("pk = :pk")
            } else {
                query
                    .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                    .expression_attribute_values(":prefix", s(prefix))
            };
            if let Some((attr, value)) = filter {
                query = query
                    .filter_expression("#a = :v")
                    .expression_attribute_names("#a", attr)
                    .expression_attribute_values(":v", AttributeValue::S(value.clone()));
            }
            let page = query
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb("Query (cap count)", e))?;
            total += i64::from(page.count);
            match page.last_evaluated_key {
                Some(key) => start = Some(key),
                None => return Ok(total),
            }
        }
    }
}

fn len(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
