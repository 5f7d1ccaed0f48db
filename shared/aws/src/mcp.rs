//! # Workspaces' MCP servers in the metadata table
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | server | `o#{org}#ws#{ws}` | `mcp#{id}` | `data` (JSON, its secrets sealed), `updated_ms` |
//! | pointer | `o#{org}#mcp#{id}` | `mcp` | `ws` (its workspace) |
//! | name | `o#{org}#ws#{ws}` | `mcpname#{name}` | `id` (the server that has it) |
//! | counter | `o#{org}#ws#{ws}` | `cap#mcp` | see [`crate::caps`] |
//!
//! A workspace's servers are one strongly consistent `Query` of its partition; the pointer finds
//! a server by its id alone. A server is made in one transaction with its pointer, its name item
//! (put only if the name is free, so two creates of one name never both succeed) and its
//! workspace's counter (which holds the cap), on the condition that the workspace exists; a
//! change puts the server only if its `updated_ms` is still the one read (optimistic: a
//! concurrent change makes it [`mcp_server_changed`]), a rename moves the name item in that
//! transaction, and a delete removes all
//! three and decrements the counter. Deleting the workspace deletes its partition, pointers
//! included ([`crate::workspaces`]).

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem};
use spool_chat::mcp::{McpServer, McpServerStore, mcp_server_changed};
use spool_log::error::Error;

use crate::{
    caps::{Change, Counter},
    errors::build,
    items::{Item, s},
    keys::{mcp_pointer_pk, org_pk, ws_pk},
    metadata::{AwsMetadata, string},
};

fn decode(item: &Item) -> Result<McpServer, Error> {
    let data = string(item, "data", "an MCP server")?;
    serde_json::from_str(&data).map_err(|e| Error::Corrupt {
        what: format!("a stored MCP server: {e}"),
    })
}

fn missing(what: &str, id: &str) -> Error {
    Error::Missing {
        what: format!("{what} `{id}`"),
    }
}

fn name_taken(server: &McpServer) -> Error {
    Error::Exists {
        what: format!("MCP server `{}` of workspace `{}`", server.name, server.workspace_id),
    }
}

impl AwsMetadata {
    /// The put of a server, with its `updated_ms` as an attribute too; new (`read_ms` none) or
    /// replacing the one whose `updated_ms` is `read_ms`.
    fn mcp_put(&self, org: &str, server: &McpServer, read_ms: Option<i64>) -> Result<TransactWriteItem, Error> {
        let data = serde_json::to_string(server).map_err(|e| Error::unavailable("encode an MCP server", e))?;
        let put = Put::builder()
            .table_name(&self.table)
            .item("pk", s(ws_pk(org, &server.workspace_id)))
            .item("sk", s(format!("mcp#{}", server.id)))
            .item("data", s(data))
            .item("updated_ms", AttributeValue::N(server.updated_ms.to_string()));
        let put = match read_ms {
            None => put.condition_expression("attribute_not_exists(pk)"),
            Some(read_ms) => put
                .condition_expression("attribute_exists(pk) AND #u = :u")
                .expression_attribute_names("#u", "updated_ms")
                .expression_attribute_values(":u", AttributeValue::N(read_ms.to_string())),
        };
        Ok(TransactWriteItem::builder().put(build(put.build())?).build())
    }

    fn mcp_name_put(&self, org: &str, server: &McpServer) -> Result<TransactWriteItem, Error> {
        let put = build(
            Put::builder()
                .table_name(&self.table)
                .item("pk", s(ws_pk(org, &server.workspace_id)))
                .item("sk", s(format!("mcpname#{}", server.name)))
                .item("id", s(&server.id))
                .condition_expression("attribute_not_exists(pk)")
                .build(),
        )?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The delete of an item; with `held_by`, only if it is the name item of that server, and
    /// with `exists`, only if it exists.
    fn mcp_delete(
        &self,
        pk: String,
        sk: String,
        held_by: Option<&str>,
        exists: bool,
    ) -> Result<TransactWriteItem, Error> {
        let mut delete = Delete::builder()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk));
        if let Some(id) = held_by {
            delete = delete
                .condition_expression("#i = :id")
                .expression_attribute_names("#i", "id")
                .expression_attribute_values(":id", s(id));
        } else if exists {
            delete = delete.condition_expression("attribute_exists(pk)");
        }
        Ok(TransactWriteItem::builder().delete(build(delete.build())?).build())
    }

    async fn mcp_workspace(&self, org: &str, id: &str) -> Result<Option<String>, Error> {
        let pointer = self
            .get(mcp_pointer_pk(org, id), "mcp", "GetItem (MCP server pointer)")
            .await?;
        pointer
            .map(|item| string(&item, "ws", "an MCP server pointer"))
            .transpose()
    }
}

#[async_trait]
impl McpServerStore for AwsMetadata {
    async fn create_mcp_server(&self, org: &str, server: &McpServer) -> Result<(), Error> {
        let check_ws = build(
            ConditionCheck::builder()
                .table_name(&self.table)
                .key("pk", s(org_pk(org)))
                .key("sk", s(format!("ws#{}", server.workspace_id)))
                .condition_expression("attribute_exists(pk)")
                .build(),
        )?;
        let pointer = build(
            Put::builder()
                .table_name(&self.table)
                .item("pk", s(mcp_pointer_pk(org, &server.id)))
                .item("sk", s("mcp"))
                .item("ws", s(&server.workspace_id))
                .condition_expression("attribute_not_exists(pk)")
                .build(),
        )?;
        let items = vec![
            TransactWriteItem::builder().condition_check(check_ws).build(),
            self.mcp_put(org, server, None)?,
            TransactWriteItem::builder().put(pointer).build(),
            self.mcp_name_put(org, server)?,
        ];
        let counter = Counter::mcp_servers(org, &server.workspace_id, self.caps.mcp_servers_per_workspace);
        let change = Change {
            counter: &counter,
            count: 1,
            bytes: 0,
        };
        match self.counted(items, &[change]).await? {
            None => Ok(()),
            Some(failed) if failed.first() == Some(&true) => Err(missing("workspace", &server.workspace_id)),
            Some(failed) if failed.get(3) == Some(&true) => Err(name_taken(server)),
            Some(_) => Err(Error::Exists {
                what: format!("MCP server `{}`", server.id),
            }),
        }
    }

    async fn mcp_server(&self, org: &str, id: &str) -> Result<Option<McpServer>, Error> {
        let Some(ws) = self.mcp_workspace(org, id).await? else {
            return Ok(None);
        };
        self.get(ws_pk(org, &ws), &format!("mcp#{id}"), "GetItem (MCP server)")
            .await?
            .map(|item| decode(&item))
            .transpose()
    }

    async fn mcp_servers(&self, org: &str, workspace_id: &str) -> Result<Vec<McpServer>, Error> {
        let mut servers: Vec<McpServer> = self
            .query_prefix(ws_pk(org, workspace_id), "mcp#")
            .await?
            .iter()
            .map(decode)
            .collect::<Result<_, _>>()?;
        servers.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(servers)
    }

    async fn update_mcp_server(&self, org: &str, server: &McpServer, read_ms: i64) -> Result<(), Error> {
        let old = self
            .mcp_server(org, &server.id)
            .await?
            .ok_or_else(|| missing("MCP server", &server.id))?;
        if old.updated_ms != read_ms {
            return Err(mcp_server_changed(&server.id));
        }
        let mut items = vec![self.mcp_put(org, server, Some(read_ms))?];
        if old.name != server.name {
            items.push(self.mcp_delete(
                ws_pk(org, &server.workspace_id),
                format!("mcpname#{}", old.name),
                Some(&server.id),
                false,
            )?);
            items.push(self.mcp_name_put(org, server)?);
        }
        match self.counted(items, &[]).await? {
            None => Ok(()),
            Some(failed) if failed.first() != Some(&true) && failed.get(2) == Some(&true) => Err(name_taken(server)),
            // Deleted meanwhile, or changed by another update: it is not the one read.
            Some(_) => match self.mcp_workspace(org, &server.id).await? {
                Some(_) => Err(mcp_server_changed(&server.id)),
                None => Err(missing("MCP server", &server.id)),
            },
        }
    }

    async fn delete_mcp_server(&self, org: &str, id: &str) -> Result<(), Error> {
        let server = self
            .mcp_server(org, id)
            .await?
            .ok_or_else(|| missing("MCP server", id))?;
        let pk = ws_pk(org, &server.workspace_id);
        let items = vec![
            self.mcp_delete(pk.clone(), format!("mcp#{id}"), None, true)?,
            self.mcp_delete(mcp_pointer_pk(org, id), "mcp".to_owned(), None, false)?,
            self.mcp_delete(pk, format!("mcpname#{}", server.name), Some(id), false)?,
        ];
        let counter = Counter::mcp_servers(org, &server.workspace_id, self.caps.mcp_servers_per_workspace);
        let change = Change {
            counter: &counter,
            count: -1,
            bytes: 0,
        };
        match self.counted(items, &[change]).await? {
            None => Ok(()),
            Some(_) => Err(missing("MCP server", id)),
        }
    }
}
