//! # The usage ledger in the metadata database
//!
//! `usage_entries` holds one row per model step, keyed by organization, chat and the seq of the
//! step's `usage` event: a second record of the same event is ignored (`INSERT OR IGNORE`), so
//! a redelivered step counts once. Totals are sums over the rows a query selects, by chat
//! (`PRIMARY KEY`) or by workspace and day (`usage_by_workspace_day`); a row's agent name is the
//! one of its latest entry.

use async_trait::async_trait;
use rusqlite::{Row, params};
use spool_chat::usage::{DayRange, Month, Tokens, UsageEntry, UsageLedger, UsageRow};
use spool_log::error::Error;

use crate::{db::sql, metadata::EmbeddedMetadata};

/// The columns of a total, as [`row`] reads them.
const TOTALS: &str = "chat_id, agent_id, agent_name, model, SUM(input_tokens), SUM(cached_input_tokens), \
     SUM(output_tokens), MAX(ts_ms)";

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn row(r: &Row<'_>) -> rusqlite::Result<UsageRow> {
    let n = |i: usize| r.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
    Ok(UsageRow {
        chat_id: r.get(0)?,
        agent_id: r.get(1)?,
        agent_name: r.get(2)?,
        model: r.get(3)?,
        tokens: Tokens {
            input: n(4)?,
            cached_input: n(5)?,
            output: n(6)?,
        },
    })
}

#[async_trait]
impl UsageLedger for EmbeddedMetadata {
    async fn record_usage(&self, org: &str, entry: &UsageEntry) -> Result<bool, Error> {
        let (org, e) = (org.to_owned(), entry.clone());
        self.with(move |conn| {
            let inserted = conn
                .execute(
                    "INSERT OR IGNORE INTO usage_entries (org, chat_id, seq, workspace_id, agent_id, agent_name, model,
                        day, input_tokens, cached_input_tokens, output_tokens, ts_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                    params![
                        org,
                        e.chat_id,
                        count(e.seq),
                        e.workspace_id,
                        e.agent_id,
                        e.agent_name,
                        e.model,
                        e.day.to_string(),
                        count(e.tokens.input),
                        count(e.tokens.cached_input),
                        count(e.tokens.output),
                        e.ts_ms
                    ],
                )
                .map_err(|e| sql("record usage", e))?;
            Ok(inserted == 1)
        })
        .await
    }

    async fn chat_usage(&self, org: &str, chat_id: &str) -> Result<Vec<UsageRow>, Error> {
        let (org, chat_id) = (org.to_owned(), chat_id.to_owned());
        self.with(move |conn| {
            let query =
                format!("SELECT {TOTALS} FROM usage_entries WHERE org = ?1 AND chat_id = ?2 GROUP BY agent_id, model");
            let mut statement = conn.prepare_cached(&query).map_err(|e| sql("read a chat's usage", e))?;
            let rows = statement
                .query_map(params![org, chat_id], row)
                .map_err(|e| sql("read a chat's usage", e))?;
            rows.collect::<Result<_, _>>()
                .map_err(|e| sql("read a chat's usage", e))
        })
        .await
    }

    async fn workspace_usage(&self, org: &str, workspace_id: &str, range: DayRange) -> Result<Vec<UsageRow>, Error> {
        let (org, ws) = (org.to_owned(), workspace_id.to_owned());
        let (from, to) = (range.from.to_string(), range.to.to_string());
        self.with(move |conn| {
            let query = format!(
                "SELECT {TOTALS} FROM usage_entries WHERE org = ?1 AND workspace_id = ?2 AND day >= ?3 AND day < ?4
                 GROUP BY chat_id, agent_id, model"
            );
            let mut statement = conn
                .prepare_cached(&query)
                .map_err(|e| sql("read a workspace's usage", e))?;
            let rows = statement
                .query_map(params![org, ws, from, to], row)
                .map_err(|e| sql("read a workspace's usage", e))?;
            rows.collect::<Result<_, _>>()
                .map_err(|e| sql("read a workspace's usage", e))
        })
        .await
    }

    async fn workspace_month(&self, org: &str, workspace_id: &str, month: Month) -> Result<Tokens, Error> {
        let rows = self.workspace_usage(org, workspace_id, month.days()).await?;
        let mut total = Tokens::default();
        for row in rows {
            total += row.tokens;
        }
        Ok(total)
    }
}
