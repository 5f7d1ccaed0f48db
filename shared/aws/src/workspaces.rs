//! # Workspaces and agents in the metadata table
//!
//! | item | `pk` | `sk` | holds |
//! | --- | --- | --- | --- |
//! | workspace | `o#{org}` | `ws#{id}` | `data` (the workspace as JSON) |
//! | agent | `o#{org}#ws#{ws}` | `agent#{id}` | `data` (JSON), `pos` (its position) |
//! | agent pointer | `o#{org}#agent#{id}` | `agent` | `ws` (its workspace) |
//! | task | `o#{org}#ws#{ws}` | `task#{id}` | `data` (JSON) |
//! | task pointer | `o#{org}#task#{id}` | `task` | `ws` |
//! | counters | `o#{org}#ws#{ws}` | `cap#agents`, `cap#tasks`, `cap#hooks`, `cap#cmds`, `cap#mcp` | see [`crate::caps`] |
//! | MCP servers | `o#{org}#ws#{ws}` (pointers `o#{org}#mcp#{id}`) | `mcp#{id}`, `mcpname#{name}` | see [`crate::mcp`] |
//!
//! An organization's workspaces share its partition and a workspace's agents share the
//! workspace's, so both lists are one strongly consistent `Query`; the pointer finds an agent by
//! its id alone (`PATCH /v1/agents/{id}`). An agent's position lives in `pos`, so a reorder is one
//! transaction of small updates. An agent or a task is made and deleted in one transaction
//! with its workspace's counter ([`crate::caps`]); a new workspace's agent counter is made with
//! it. Deleting a workspace removes its commands first (each with the organization's command
//! counter), then its other items (counters too), and the workspace last, so a delete
//! interrupted half-way is finished by repeating it.

use async_trait::async_trait;
use aws_sdk_dynamodb::{
    error::SdkError,
    operation::transact_write_items::TransactWriteItemsError,
    types::{AttributeValue, Delete, DeleteRequest, Put, TransactWriteItem, Update, WriteRequest},
};
use serde::{Serialize, de::DeserializeOwned};
use spool_chat::{
    caps::Capped,
    listing::{Page, TaskQuery},
    metadata::Workspaces,
    workspace::{Agent, Task, Workspace},
};
use spool_commands::CommandScope;
use spool_log::error::Error;

use crate::{
    caps::{Change, Counter},
    errors::{build, cancellation_reasons, ddb},
    items::batch_write,
    items::{Item, n, s},
    keys::{agent_pointer_pk, org_pk, task_pointer_pk, ws_pk},
    metadata::{AwsMetadata, number, string},
};

fn encode<T: Serialize>(value: &T) -> Result<AttributeValue, Error> {
    serde_json::to_string(value)
        .map(s)
        .map_err(|e| Error::unavailable("encode a metadata record", e))
}

fn decode<T: DeserializeOwned>(item: &Item, what: &str) -> Result<T, Error> {
    let data = string(item, "data", what)?;
    serde_json::from_str(&data).map_err(|e| Error::Corrupt {
        what: format!("{what}: {e}"),
    })
}

fn decode_agent(item: &Item) -> Result<Agent, Error> {
    let mut agent: Agent = decode(item, "an agent")?;
    agent.position = u32::try_from(number(item, "pos", "an agent")?).unwrap_or(u32::MAX);
    Ok(agent)
}

fn missing(what: &str, id: &str) -> Error {
    Error::Missing {
        what: format!("{what} `{id}`"),
    }
}

/// Which transaction items failed their condition, or the error itself.
fn cancelled(
    e: SdkError<TransactWriteItemsError, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> Result<Vec<bool>, Error> {
    Ok(cancellation_reasons("TransactWriteItems", e)?
        .iter()
        .map(|code| code == "ConditionalCheckFailed")
        .collect())
}

impl AwsMetadata {
    fn agents_counter(&self, org: &str, ws: &str) -> Counter {
        Counter::in_workspace(
            org,
            ws,
            "cap#agents",
            "agent#",
            (Capped::Agents, self.caps.agents_per_workspace),
        )
    }

    fn tasks_counter(&self, org: &str, ws: &str) -> Counter {
        Counter::in_workspace(
            org,
            ws,
            "cap#tasks",
            "task#",
            (Capped::Tasks, self.caps.tasks_per_workspace),
        )
    }

    /// Replaces an existing item with `put` (whose condition requires it to exist):
    /// [`Error::Missing`] naming `what` `id` if it is gone.
    async fn replace(&self, put: Put, what: &str, id: &str) -> Result<(), Error> {
        match self
            .transact(vec![TransactWriteItem::builder().put(put).build()])
            .await?
        {
            None => Ok(()),
            Some(_) => Err(missing(what, id)),
        }
    }

    /// Deletes an item and its pointer (each a `(pk, sk)`) in one transaction, both required to
    /// exist: [`Error::Missing`] naming `what` `id` otherwise.
    async fn delete_with_pointer(
        &self,
        item: (String, String),
        pointer: (String, String),
        counter: &Counter,
        what: &str,
        id: &str,
    ) -> Result<(), Error> {
        let delete = |(pk, sk): (String, String)| {
            build(
                Delete::builder()
                    .table_name(&self.table)
                    .key("pk", s(pk))
                    .key("sk", s(sk))
                    .condition_expression("attribute_exists(pk)")
                    .build(),
            )
        };
        let items = vec![
            TransactWriteItem::builder().delete(delete(item)?).build(),
            TransactWriteItem::builder().delete(delete(pointer)?).build(),
        ];
        let change = Change {
            counter,
            count: -1,
            bytes: 0,
        };
        match self.counted(items, &[change]).await? {
            None => Ok(()),
            Some(_) => Err(missing(what, id)),
        }
    }

    fn agent_put(&self, org: &str, agent: &Agent, condition: &str) -> Result<Put, Error> {
        build(
            Put::builder()
                .table_name(&self.table)
                .item("pk", s(ws_pk(org, &agent.workspace_id)))
                .item("sk", s(format!("agent#{}", agent.id)))
                .item("data", encode(agent)?)
                .item("pos", n(agent.position))
                .condition_expression(condition)
                .build(),
        )
    }

    fn task_put(&self, org: &str, task: &Task, condition: &str) -> Result<Put, Error> {
        build(
            Put::builder()
                .table_name(&self.table)
                .item("pk", s(ws_pk(org, &task.workspace_id)))
                .item("sk", s(format!("task#{}", task.id)))
                .item("data", encode(task)?)
                .condition_expression(condition)
                .build(),
        )
    }

    fn pointer_put(&self, org: &str, agent: &Agent) -> Result<Put, Error> {
        build(
            Put::builder()
                .table_name(&self.table)
                .item("pk", s(agent_pointer_pk(org, &agent.id)))
                .item("sk", s("agent"))
                .item("ws", s(&agent.workspace_id))
                .condition_expression("attribute_not_exists(pk)")
                .build(),
        )
    }

    async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<Option<Vec<bool>>, Error> {
        match crate::items::transact(&self.dynamodb, items).await {
            Ok(_) => Ok(None),
            Err(e) => cancelled(e).map(Some),
        }
    }

    /// The workspace an agent id belongs to, from its pointer.
    async fn agent_workspace(&self, org: &str, id: &str) -> Result<Option<String>, Error> {
        let pointer = self
            .get(agent_pointer_pk(org, id), "agent", "GetItem (agent pointer)")
            .await?;
        pointer.map(|item| string(&item, "ws", "an agent pointer")).transpose()
    }

    /// Every item of a partition whose sort key starts with `prefix` (all of them for "").
    pub(crate) async fn query_prefix(&self, pk: String, prefix: &str) -> Result<Vec<Item>, Error> {
        let keys = if prefix.is_empty() {
            SortKeys::All
        } else {
            SortKeys::Prefix(prefix)
        };
        self.query_items(pk, keys, "Query (metadata)").await
    }

    /// Every item of a partition whose sort key `keys` takes, read page after page
    /// (consistently); `what` names the request in errors.
    pub(crate) async fn query_items(
        &self,
        pk: String,
        keys: SortKeys<'_>,
        what: &'static str,
    ) -> Result<Vec<Item>, Error> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let query = self
                .dynamodb
                .query()
                .table_name(&self.table)
                .expression_attribute_values(":pk", s(&pk))
                .consistent_read(true);
            let query = match keys {
                SortKeys::All => query.key_condition_expression("pk = :pk"),
                SortKeys::Prefix(prefix) => query
                    .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                    .expression_attribute_values(":prefix", s(prefix)),
                SortKeys::Between(low, high) => query
                    .key_condition_expression("pk = :pk AND sk BETWEEN :low AND :high")
                    .expression_attribute_values(":low", s(low))
                    .expression_attribute_values(":high", s(high)),
            };
            let page = query
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb(what, e))?;
            items.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(key) => start = Some(key),
                None => return Ok(items),
            }
        }
    }
}

fn delete_request(pk: String, sk: &str) -> Result<WriteRequest, Error> {
    let delete = build(DeleteRequest::builder().key("pk", s(pk)).key("sk", s(sk)).build())?;
    Ok(WriteRequest::builder().delete_request(delete).build())
}

#[async_trait]
impl Workspaces for AwsMetadata {
    async fn create_workspace(&self, org: &str, workspace: &Workspace, builtin: &Agent) -> Result<(), Error> {
        let put_ws = build(
            Put::builder()
                .table_name(&self.table)
                .item("pk", s(org_pk(org)))
                .item("sk", s(format!("ws#{}", workspace.id)))
                .item("data", encode(workspace)?)
                .condition_expression("attribute_not_exists(pk)")
                .build(),
        )?;
        let items = vec![
            TransactWriteItem::builder().put(put_ws).build(),
            TransactWriteItem::builder()
                .put(self.agent_put(org, builtin, "attribute_not_exists(pk)")?)
                .build(),
            TransactWriteItem::builder()
                .put(self.pointer_put(org, builtin)?)
                .build(),
            // Its agent counter, with the built-in agent counted: a new workspace's is never
            // counted from its items. Any counter there is stale (the id is new).
            TransactWriteItem::builder()
                .put(build(
                    Put::builder()
                        .table_name(&self.table)
                        .item("pk", s(ws_pk(org, &workspace.id)))
                        .item("sk", s("cap#agents"))
                        .item("cnt", n(1))
                        .build(),
                )?)
                .build(),
        ];
        match self.transact(items).await? {
            None => Ok(()),
            Some(failed) if failed.first() == Some(&true) => Err(Error::Exists {
                what: format!("workspace `{}`", workspace.id),
            }),
            Some(_) => Err(Error::Exists {
                what: format!("agent `{}`", builtin.id),
            }),
        }
    }

    async fn workspace(&self, org: &str, id: &str) -> Result<Option<Workspace>, Error> {
        self.get(org_pk(org), &format!("ws#{id}"), "GetItem (workspace)")
            .await?
            .map(|item| decode(&item, "a workspace"))
            .transpose()
    }

    async fn workspaces(&self, org: &str) -> Result<Vec<Workspace>, Error> {
        let mut list: Vec<Workspace> = self
            .query_prefix(org_pk(org), "ws#")
            .await?
            .iter()
            .map(|item| decode(item, "a workspace"))
            .collect::<Result<_, _>>()?;
        list.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(list)
    }

    async fn update_workspace(&self, org: &str, workspace: &Workspace) -> Result<(), Error> {
        let item = Item::from([
            ("pk".to_owned(), s(org_pk(org))),
            ("sk".to_owned(), s(format!("ws#{}", workspace.id))),
            ("data".to_owned(), encode(workspace)?),
        ]);
        if self.put_if(item, "attribute_exists(pk)", "PutItem (workspace)").await? {
            Ok(())
        } else {
            Err(missing("workspace", &workspace.id))
        }
    }

    async fn delete_workspace(&self, org: &str, id: &str) -> Result<(), Error> {
        if self.workspace(org, id).await?.is_none() {
            return Err(missing("workspace", id));
        }
        // Its commands one by one, so the organization's command counter loses each.
        let scope = CommandScope::Workspace(id.to_owned());
        for name in spool_commands::Commands::command_names(self, org, &scope).await? {
            spool_commands::Commands::delete_command(self, org, &scope, &name).await?;
        }
        let children = self.query_prefix(ws_pk(org, id), "").await?;
        let mut requests = Vec::with_capacity(children.len() * 2);
        for item in &children {
            let sk = string(item, "sk", "a workspace item")?;
            if let Some(agent_id) = sk.strip_prefix("agent#") {
                requests.push(delete_request(agent_pointer_pk(org, agent_id), "agent")?);
            }
            if let Some(task_id) = sk.strip_prefix("task#") {
                requests.push(delete_request(task_pointer_pk(org, task_id), "task")?);
            }
            if let Some(server_id) = sk.strip_prefix("mcp#") {
                requests.push(delete_request(crate::keys::mcp_pointer_pk(org, server_id), "mcp")?);
            }
            requests.push(delete_request(ws_pk(org, id), &sk)?);
        }
        batch_write(&self.dynamodb, &self.table, requests).await?;
        self.dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(org_pk(org)))
            .key("sk", s(format!("ws#{id}")))
            .send()
            .await
            .map_err(|e| ddb("DeleteItem (workspace)", e))?;
        Ok(())
    }

    async fn create_agent(&self, org: &str, agent: &Agent) -> Result<(), Error> {
        let check_ws = build(
            aws_sdk_dynamodb::types::ConditionCheck::builder()
                .table_name(&self.table)
                .key("pk", s(org_pk(org)))
                .key("sk", s(format!("ws#{}", agent.workspace_id)))
                .condition_expression("attribute_exists(pk)")
                .build(),
        )?;
        let items = vec![
            TransactWriteItem::builder().condition_check(check_ws).build(),
            TransactWriteItem::builder()
                .put(self.agent_put(org, agent, "attribute_not_exists(pk)")?)
                .build(),
            TransactWriteItem::builder().put(self.pointer_put(org, agent)?).build(),
        ];
        let counter = self.agents_counter(org, &agent.workspace_id);
        let change = Change {
            counter: &counter,
            count: 1,
            bytes: 0,
        };
        match self.counted(items, &[change]).await? {
            None => Ok(()),
            Some(failed) if failed.first() == Some(&true) => Err(missing("workspace", &agent.workspace_id)),
            Some(_) => Err(Error::Exists {
                what: format!("agent `{}`", agent.id),
            }),
        }
    }

    async fn agent(&self, org: &str, id: &str) -> Result<Option<Agent>, Error> {
        let Some(ws) = self.agent_workspace(org, id).await? else {
            return Ok(None);
        };
        self.get(ws_pk(org, &ws), &format!("agent#{id}"), "GetItem (agent)")
            .await?
            .map(|item| decode_agent(&item))
            .transpose()
    }

    async fn agents(&self, org: &str, workspace_id: &str) -> Result<Vec<Agent>, Error> {
        let mut list: Vec<Agent> = self
            .query_prefix(ws_pk(org, workspace_id), "agent#")
            .await?
            .iter()
            .map(decode_agent)
            .collect::<Result<_, _>>()?;
        list.sort_by(|a, b| (a.position, &a.id).cmp(&(b.position, &b.id)));
        Ok(list)
    }

    async fn update_agent(&self, org: &str, agent: &Agent) -> Result<(), Error> {
        let put = self.agent_put(org, agent, "attribute_exists(pk)")?;
        self.replace(put, "agent", &agent.id).await
    }

    async fn delete_agent(&self, org: &str, id: &str) -> Result<(), Error> {
        let Some(ws) = self.agent_workspace(org, id).await? else {
            return Err(missing("agent", id));
        };
        let item = (ws_pk(org, &ws), format!("agent#{id}"));
        let pointer = (agent_pointer_pk(org, id), "agent".to_owned());
        let counter = self.agents_counter(org, &ws);
        self.delete_with_pointer(item, pointer, &counter, "agent", id).await
    }

    async fn set_positions(&self, org: &str, workspace_id: &str, positions: &[(String, u32)]) -> Result<(), Error> {
        if positions.is_empty() {
            return Ok(());
        }
        let items = positions
            .iter()
            .map(|(id, position)| {
                let update = build(
                    Update::builder()
                        .table_name(&self.table)
                        .key("pk", s(ws_pk(org, workspace_id)))
                        .key("sk", s(format!("agent#{id}")))
                        .update_expression("SET pos = :pos")
                        .expression_attribute_values(":pos", n(*position))
                        .condition_expression("attribute_exists(pk)")
                        .build(),
                )?;
                Ok(TransactWriteItem::builder().update(update).build())
            })
            .collect::<Result<Vec<_>, Error>>()?;
        match self.transact(items).await? {
            None => Ok(()),
            Some(failed) => {
                let index = failed.iter().position(|f| *f).unwrap_or(0);
                Err(missing("agent", &positions[index].0))
            }
        }
    }

    async fn create_task(&self, org: &str, task: &Task) -> Result<(), Error> {
        let check_ws = build(
            aws_sdk_dynamodb::types::ConditionCheck::builder()
                .table_name(&self.table)
                .key("pk", s(org_pk(org)))
                .key("sk", s(format!("ws#{}", task.workspace_id)))
                .condition_expression("attribute_exists(pk)")
                .build(),
        )?;
        let put = self.task_put(org, task, "attribute_not_exists(pk)")?;
        let pointer = build(
            Put::builder()
                .table_name(&self.table)
                .item("pk", s(task_pointer_pk(org, &task.id)))
                .item("sk", s("task"))
                .item("ws", s(&task.workspace_id))
                .condition_expression("attribute_not_exists(pk)")
                .build(),
        )?;
        let items = vec![
            TransactWriteItem::builder().condition_check(check_ws).build(),
            TransactWriteItem::builder().put(put).build(),
            TransactWriteItem::builder().put(pointer).build(),
        ];
        let counter = self.tasks_counter(org, &task.workspace_id);
        let change = Change {
            counter: &counter,
            count: 1,
            bytes: 0,
        };
        match self.counted(items, &[change]).await? {
            None => Ok(()),
            Some(failed) if failed.first() == Some(&true) => Err(missing("workspace", &task.workspace_id)),
            Some(_) => Err(Error::Exists {
                what: format!("task `{}`", task.id),
            }),
        }
    }

    async fn task(&self, org: &str, id: &str) -> Result<Option<Task>, Error> {
        let Some(pointer) = self
            .get(task_pointer_pk(org, id), "task", "GetItem (task pointer)")
            .await?
        else {
            return Ok(None);
        };
        let ws = string(&pointer, "ws", "a task pointer")?;
        self.get(ws_pk(org, &ws), &format!("task#{id}"), "GetItem (task)")
            .await?
            .map(|item| decode(&item, "a task"))
            .transpose()
    }

    async fn update_task(&self, org: &str, task: &Task) -> Result<(), Error> {
        let put = self.task_put(org, task, "attribute_exists(pk)")?;
        self.replace(put, "task", &task.id).await
    }

    async fn delete_task(&self, org: &str, id: &str) -> Result<(), Error> {
        let Some(task) = self.task(org, id).await? else {
            return Err(missing("task", id));
        };
        let item = (ws_pk(org, &task.workspace_id), format!("task#{id}"));
        let pointer = (task_pointer_pk(org, id), "task".to_owned());
        let counter = self.tasks_counter(org, &task.workspace_id);
        self.delete_with_pointer(item, pointer, &counter, "task", id).await
    }

    async fn tasks(&self, org: &str, query: &TaskQuery) -> Result<Page<Task>, Error> {
        // A workspace's tasks are one partition (capped): read whole, then paged.
        let mut list: Vec<Task> = self
            .query_prefix(ws_pk(org, &query.workspace_id), "task#")
            .await?
            .iter()
            .map(|item| decode(item, "a task"))
            .collect::<Result<_, _>>()?;
        list.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
        Ok(Page::slice(
            list,
            query.after.as_ref(),
            query.limit,
            TaskQuery::key,
            |t| query.matches(t),
        ))
    }
}

/// Which items of a partition a query takes, by sort key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SortKeys<'a> {
    /// All of them.
    All,
    /// Those whose sort key starts with this.
    Prefix(&'a str),
    /// Those whose sort key lies in `[low, high]`.
    Between(&'a str, &'a str),
}
