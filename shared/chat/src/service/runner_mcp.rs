//! The MCP servers a runner's claim sends: the workspace's enabled servers the job's request
//! names, resolved through the [`McpCatalog`](crate::mcp::McpCatalog) with their secrets, never read from the stored
//! request (which names them only).

use serde_json::Value;
use spool_log::error::Error;

use super::RunnerService;
use crate::{mcp::McpEndpoint, runner::RunnerMcpServer};

/// The enabled MCP servers of the workspaces one look read, by workspace.
pub(super) type WorkspaceEndpoints = std::collections::HashMap<String, Vec<McpEndpoint>>;

impl RunnerService {
    /// The enabled MCP servers of `workspace` (none without a catalog or a workspace), read
    /// once per look.
    pub(super) async fn endpoints(
        &self,
        org: &str,
        workspace: Option<&str>,
        read: &mut WorkspaceEndpoints,
    ) -> Result<Vec<McpEndpoint>, Error> {
        let (Some(catalog), Some(workspace)) = (&self.mcp, workspace) else {
            return Ok(Vec::new());
        };
        if let Some(endpoints) = read.get(workspace) {
            return Ok(endpoints.clone());
        }
        let endpoints = catalog.endpoints(org, workspace).await?;
        read.insert(workspace.to_owned(), endpoints.clone());
        Ok(endpoints)
    }
}

/// Of `available`, the servers `request` names (`mcp_servers`, by id), in its order: one
/// disabled or deleted since the turn began is left out.
pub(super) fn named_servers(request: &Value, available: Vec<McpEndpoint>) -> Vec<McpEndpoint> {
    let named: Vec<RunnerMcpServer> = request
        .get("mcp_servers")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let mut available = available;
    named
        .iter()
        .filter_map(|n| {
            let i = available.iter().position(|e| e.id == n.id)?;
            Some(available.swap_remove(i))
        })
        .collect()
}
