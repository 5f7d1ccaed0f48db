//! Slash commands in `metadata.db`: one row per command, keyed by organization, scope and name.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use spool_domain::{
    Error,
    commands::{CommandScope, Commands, StoredCommand},
};

use crate::{db::sql, metadata::EmbeddedMetadata};

#[async_trait]
impl Commands for EmbeddedMetadata {
    async fn put_command(&self, org: &str, scope: &CommandScope, command: &StoredCommand) -> Result<(), Error> {
        let (org, scope, command) = (org.to_owned(), scope.key(), command.clone());
        self.with(move |conn| {
            conn.execute(
                "INSERT INTO slash_commands (org, scope, name, updated_ms, markdown) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (org, scope, name) DO UPDATE SET updated_ms = excluded.updated_ms, markdown = excluded.markdown",
                params![org, scope, command.name, command.updated_ms, command.markdown],
            )
            .map_err(|e| sql("store a slash command", e))?;
            Ok(())
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
