//! # Workspaces' MCP servers in the metadata database
//!
//! `mcp_servers` holds each server as JSON (its header and env values sealed, as the service
//! gave them), with its workspace and name as columns: `UNIQUE (org, workspace_id, name)` keeps
//! names unique under any concurrency, and the foreign key deletes a workspace's servers with
//! it. An update applies only if the stored `updated_ms` is still the one read (optimistic: a
//! concurrent change makes it [`mcp_server_changed`]). A server is inserted in a write transaction that counts its workspace's first, so the cap
//! ([`spool_chat::caps::Caps::mcp_servers_per_workspace`]) holds.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use spool_chat::{
    caps::Capped,
    mcp::{McpServer, McpServerStore, mcp_server_changed},
};
use spool_log::error::Error;

use crate::{
    db::sql,
    metadata::{EmbeddedMetadata, is_constraint, under_cap},
    workspaces::require_workspace,
};

fn decode(body: &str) -> Result<McpServer, Error> {
    serde_json::from_str(body).map_err(|e| Error::Corrupt {
        what: format!("a stored MCP server: {e}"),
    })
}

fn encode(server: &McpServer) -> Result<String, Error> {
    serde_json::to_string(server).map_err(|e| Error::unavailable("encode an MCP server", e))
}

fn missing(id: &str) -> Error {
    Error::Missing {
        what: format!("MCP server `{id}`"),
    }
}

/// A write refused by the unique name: the workspace has a server of this name.
fn taken(e: rusqlite::Error, server: &McpServer, doing: &str) -> Error {
    if is_constraint(&e) {
        Error::Exists {
            what: format!("MCP server `{}` of workspace `{}`", server.name, server.workspace_id),
        }
    } else {
        sql(doing, e)
    }
}

#[async_trait]
impl McpServerStore for EmbeddedMetadata {
    async fn create_mcp_server(&self, org: &str, server: &McpServer) -> Result<(), Error> {
        let (org, server, max) = (org.to_owned(), server.clone(), self.caps.mcp_servers_per_workspace);
        let body = encode(&server)?;
        self.write(move |tx| {
            require_workspace(tx, &org, &server.workspace_id)?;
            under_cap(
                tx,
                "SELECT COUNT(*) FROM mcp_servers WHERE org = ?1 AND workspace_id = ?2",
                params![org, server.workspace_id],
                1,
                max,
                Capped::McpServers,
            )?;
            tx.execute(
                "INSERT INTO mcp_servers (org, id, workspace_id, name, created_ms, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![org, server.id, server.workspace_id, server.name, server.created_ms, body],
            )
            .map_err(|e| taken(e, &server, "store an MCP server"))?;
            Ok(())
        })
        .await
    }

    async fn mcp_server(&self, org: &str, id: &str) -> Result<Option<McpServer>, Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            let body: Option<String> = conn
                .query_row(
                    "SELECT body FROM mcp_servers WHERE org = ?1 AND id = ?2",
                    params![org, id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| sql("read an MCP server", e))?;
            body.as_deref().map(decode).transpose()
        })
        .await
    }

    async fn mcp_servers(&self, org: &str, workspace_id: &str) -> Result<Vec<McpServer>, Error> {
        let (org, ws) = (org.to_owned(), workspace_id.to_owned());
        self.with(move |conn| {
            let mut stmt = conn
                .prepare("SELECT body FROM mcp_servers WHERE org = ?1 AND workspace_id = ?2 ORDER BY created_ms, id")
                .map_err(|e| sql("list MCP servers", e))?;
            let bodies = stmt
                .query_map(params![org, ws], |r| r.get::<_, String>(0))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| sql("list MCP servers", e))?;
            bodies.iter().map(|b| decode(b)).collect()
        })
        .await
    }

    async fn update_mcp_server(&self, org: &str, server: &McpServer, read_ms: i64) -> Result<(), Error> {
        let (org, server) = (org.to_owned(), server.clone());
        let body = encode(&server)?;
        self.with(move |conn| {
            let n = conn
                .execute(
                    "UPDATE mcp_servers SET name = ?3, body = ?4 \
                     WHERE org = ?1 AND id = ?2 AND json_extract(body, '$.updated_ms') = ?5",
                    params![org, server.id, server.name, body, read_ms],
                )
                .map_err(|e| taken(e, &server, "update an MCP server"))?;
            if n > 0 {
                return Ok(());
            }
            let exists = conn
                .query_row(
                    "SELECT 1 FROM mcp_servers WHERE org = ?1 AND id = ?2",
                    params![org, server.id],
                    |_| Ok(()),
                )
                .optional()
                .map_err(|e| sql("read an MCP server", e))?;
            match exists {
                Some(()) => Err(mcp_server_changed(&server.id)),
                None => Err(missing(&server.id)),
            }
        })
        .await
    }

    async fn delete_mcp_server(&self, org: &str, id: &str) -> Result<(), Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            let n = conn
                .execute("DELETE FROM mcp_servers WHERE org = ?1 AND id = ?2", params![org, id])
                .map_err(|e| sql("delete an MCP server", e))?;
            if n == 0 { Err(missing(&id)) } else { Ok(()) }
        })
        .await
    }
}
