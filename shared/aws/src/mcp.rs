//! A workspace's MCP servers ([`spool_chat::mcp`]) in this store.

use async_trait::async_trait;
use spool_chat::mcp::{McpServer, McpServerStore};
use spool_log::error::Error;

use crate::metadata::AwsMetadata;

#[allow(clippy::todo)]
#[async_trait]
impl McpServerStore for AwsMetadata {
    async fn create_mcp_server(&self, _org: &str, _server: &McpServer) -> Result<(), Error> {
        todo!()
    }

    async fn mcp_server(&self, _org: &str, _id: &str) -> Result<Option<McpServer>, Error> {
        todo!()
    }

    async fn mcp_servers(&self, _org: &str, _workspace_id: &str) -> Result<Vec<McpServer>, Error> {
        todo!()
    }

    async fn update_mcp_server(&self, _org: &str, _server: &McpServer) -> Result<(), Error> {
        todo!()
    }

    async fn delete_mcp_server(&self, _org: &str, _id: &str) -> Result<(), Error> {
        todo!()
    }
}
