//! Slash commands in `metadata.db`: one row per command, keyed by organization, scope and name,
//! with its size in bytes. A command is stored in a write transaction that first checks the
//! caps of its scope and of its organization (the counts, and the sums of `bytes` from an index
//! that holds them): a replaced command counts once, and only its change in size.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use spool_chat::caps::Capped;
use spool_commands::{CommandScope, Commands, StoredCommand};
use spool_log::error::Error;

use crate::{
    db::sql,
    metadata::{EmbeddedMetadata, under_cap},
};

#[async_trait]
impl Commands for EmbeddedMetadata {
    async fn put_command(&self, org: &str, scope: &CommandScope, command: &StoredCommand) -> Result<(), Error> {
        let (org, scope, command, caps) = (org.to_owned(), scope.key(), command.clone(), self.caps);
        self.write(move |tx| {
            let old: Option<i64> = tx
                .query_row(
                    "SELECT bytes FROM slash_commands WHERE org = ?1 AND scope = ?2 AND name = ?3",
                    params![org, scope, command.name],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| sql("read a slash command", e))?;
            let bytes = i64::try_from(command.markdown.len()).unwrap_or(i64::MAX);
            let adding = u64::from(old.is_none());
            let growing = u64::try_from(bytes - old.unwrap_or(0)).unwrap_or(0);
            let (scope_of, org_of): (&[&dyn rusqlite::ToSql], &[&dyn rusqlite::ToSql]) = (&[&org, &scope], &[&org]);
            let count = "SELECT COUNT(*) FROM slash_commands WHERE org = ?1";
            let sum = "SELECT COALESCE(SUM(bytes), 0) FROM slash_commands WHERE org = ?1";
            let scoped = " AND scope = ?2";
            for (query, of, adds, max, capped) in [
                (format!("{count}{scoped}"), scope_of, adding, caps.commands_per_scope, Capped::Commands),
                (format!("{sum}{scoped}"), scope_of, growing, caps.command_bytes_per_scope, Capped::CommandBytes),
                (count.to_owned(), org_of, adding, caps.commands_per_org, Capped::OrgCommands),
                (sum.to_owned(), org_of, growing, caps.command_bytes_per_org, Capped::OrgCommandBytes),
            ] {
                // A replaced command that shrinks is always taken, even past a cap.
                if adds > 0 {
                    under_cap(tx, &query, of, adds, max, capped)?;
                }
            }
            tx.execute(
                "INSERT INTO slash_commands (org, scope, name, updated_ms, markdown, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (org, scope, name) DO UPDATE
                 SET updated_ms = excluded.updated_ms, markdown = excluded.markdown, bytes = excluded.bytes",
                params![org, scope, command.name, command.updated_ms, command.markdown, bytes],
            )
            .map_err(|e| sql("store a slash command", e))?;
            Ok(())
        })
        .await
    }

    async fn command_names(&self, org: &str, scope: &CommandScope) -> Result<Vec<String>, Error> {
        let (org, scope) = (org.to_owned(), scope.key());
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached("SELECT name FROM slash_commands WHERE org = ?1 AND scope = ?2 ORDER BY name")
                .map_err(|e| sql("list slash command names", e))?;
            let rows = statement
                .query_map(params![org, scope], |r| r.get(0))
                .map_err(|e| sql("list slash command names", e))?;
            rows.collect::<Result<_, _>>()
                .map_err(|e| sql("list slash command names", e))
        })
        .await
    }

    async fn command(&self, org: &str, scope: &CommandScope, name: &str) -> Result<Option<StoredCommand>, Error> {
        let (org, scope, name) = (org.to_owned(), scope.key(), name.to_owned());
        self.with(move |conn| {
            conn.query_row(
                "SELECT name, updated_ms, markdown FROM slash_commands WHERE org = ?1 AND scope = ?2 AND name = ?3",
                params![org, scope, name],
                row,
            )
            .optional()
            .map_err(|e| sql("read a slash command", e))
        })
        .await
    }

    async fn commands(&self, org: &str, scope: &CommandScope) -> Result<Vec<StoredCommand>, Error> {
        let (org, scope) = (org.to_owned(), scope.key());
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT name, updated_ms, markdown FROM slash_commands WHERE org = ?1 AND scope = ?2 ORDER BY name",
                )
                .map_err(|e| sql("list slash commands", e))?;
            let rows = statement
                .query_map(params![org, scope], row)
                .map_err(|e| sql("list slash commands", e))?;
            rows.collect::<Result<_, _>>()
                .map_err(|e| sql("list slash commands", e))
        })
        .await
    }

    async fn delete_command(&self, org: &str, scope: &CommandScope, name: &str) -> Result<bool, Error> {
        let (org, scope, name) = (org.to_owned(), scope.key(), name.to_owned());
        self.with(move |conn| {
            let deleted = conn
                .execute(
                    "DELETE FROM slash_commands WHERE org = ?1 AND scope = ?2 AND name = ?3",
                    params![org, scope, name],
                )
                .map_err(|e| sql("delete a slash command", e))?;
            Ok(deleted > 0)
        })
        .await
    }
}

fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredCommand> {
    Ok(StoredCommand {
        name: row.get(0)?,
        updated_ms: row.get(1)?,
        markdown: row.get(2)?,
    })
}
