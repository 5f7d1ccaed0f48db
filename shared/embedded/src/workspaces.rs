//! # Workspaces, agents and tasks in the embedded metadata store
//!
//! An agent or a task is inserted in a write transaction that counts the workspace's first
//! ([`crate::metadata::under_cap`]), so its cap holds under any concurrency.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
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
    db::sql,
    metadata::{EmbeddedMetadata, is_constraint, under_cap},
};

fn encode<T: Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::unavailable("embedded metadata: encode a record", e))
}

fn decode<T: DeserializeOwned>(what: &str, data: &str) -> Result<T, Error> {
    serde_json::from_str(data).map_err(|e| Error::Corrupt {
        what: format!("{what}: {e}"),
    })
}

fn missing(what: &str, id: &str) -> Error {
    Error::Missing {
        what: format!("{what} `{id}`"),
    }
}

fn one<T: DeserializeOwned>(
    conn: &Connection,
    query: &str,
    org: &str,
    id: &str,
    what: &str,
) -> Result<Option<T>, Error> {
    conn.query_row(query, params![org, id], |r| r.get::<_, String>(0))
        .optional()
        .map_err(|e| sql(what, e))?
        .map(|data| decode(what, &data))
        .transpose()
}

fn many<T: DeserializeOwned>(
    conn: &Connection,
    query: &str,
    args: impl rusqlite::Params,
    what: &str,
) -> Result<Vec<T>, Error> {
    let mut statement = conn.prepare_cached(query).map_err(|e| sql(what, e))?;
    let rows = statement
        .query_map(args, |r| r.get::<_, String>(0))
        .map_err(|e| sql(what, e))?;
    rows.map(|row| decode(what, &row.map_err(|e| sql(what, e))?)).collect()
}

/// [`Error::Missing`] unless the organization has the workspace.
pub(crate) fn require_workspace(conn: &Connection, org: &str, workspace_id: &str) -> Result<(), Error> {
    conn.query_row(
        "SELECT 1 FROM workspaces WHERE org = ?1 AND id = ?2",
        params![org, workspace_id],
        |_| Ok(()),
    )
    .optional()
    .map_err(|e| sql("read a workspace", e))?
    .ok_or_else(|| missing("workspace", workspace_id))
}

fn insert_agent(conn: &Connection, org: &str, agent: &Agent) -> Result<(), Error> {
    conn.execute(
        "INSERT INTO agents (org, id, workspace_id, position, data) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![org, agent.id, agent.workspace_id, agent.position, encode(agent)?],
    )
    .map(drop)
    .map_err(|e| {
        if is_constraint(&e) {
            Error::Exists {
                what: format!("agent `{}`", agent.id),
            }
        } else {
            sql("insert an agent", e)
        }
    })
}

#[async_trait]
impl Workspaces for EmbeddedMetadata {
    async fn create_workspace(&self, org: &str, workspace: &Workspace, builtin: &Agent) -> Result<(), Error> {
        let (org, workspace, builtin) = (org.to_owned(), workspace.clone(), builtin.clone());
        self.with(move |conn| {
            let tx = conn.unchecked_transaction().map_err(|e| sql("begin", e))?;
            tx.execute(
                "INSERT INTO workspaces (org, id, created_ms, data) VALUES (?1, ?2, ?3, ?4)",
                params![org, workspace.id, workspace.created_ms, encode(&workspace)?],
            )
            .map_err(|e| {
                if is_constraint(&e) {
                    Error::Exists {
                        what: format!("workspace `{}`", workspace.id),
                    }
                } else {
                    sql("insert a workspace", e)
                }
            })?;
            insert_agent(&tx, &org, &builtin)?;
            tx.commit().map_err(|e| sql("commit a workspace", e))
        })
        .await
    }

    async fn workspace(&self, org: &str, id: &str) -> Result<Option<Workspace>, Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            one(
                conn,
                "SELECT data FROM workspaces WHERE org = ?1 AND id = ?2",
                &org,
                &id,
                "read a workspace",
            )
        })
        .await
    }

    async fn workspaces(&self, org: &str) -> Result<Vec<Workspace>, Error> {
        let org = org.to_owned();
        self.with(move |conn| {
            many(
                conn,
                "SELECT data FROM workspaces WHERE org = ?1 ORDER BY created_ms, id",
                params![org],
                "list workspaces",
            )
        })
        .await
    }

    async fn update_workspace(&self, org: &str, workspace: &Workspace) -> Result<(), Error> {
        let (org, workspace) = (org.to_owned(), workspace.clone());
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE workspaces SET data = ?3 WHERE org = ?1 AND id = ?2",
                    params![org, workspace.id, encode(&workspace)?],
                )
                .map_err(|e| sql("update a workspace", e))?;
            if changed == 0 {
                return Err(missing("workspace", &workspace.id));
            }
            Ok(())
        })
        .await
    }

    async fn delete_workspace(&self, org: &str, id: &str) -> Result<(), Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            // Its agents go with it (ON DELETE CASCADE), its commands in the same transaction.
            let tx = conn.unchecked_transaction().map_err(|e| sql("begin", e))?;
            let changed = tx
                .execute("DELETE FROM workspaces WHERE org = ?1 AND id = ?2", params![org, id])
                .map_err(|e| sql("delete a workspace", e))?;
            if changed == 0 {
                return Err(missing("workspace", &id));
            }
            tx.execute(
                "DELETE FROM slash_commands WHERE org = ?1 AND scope = ?2",
                params![org, CommandScope::Workspace(id.clone()).key()],
            )
            .map_err(|e| sql("delete a workspace's commands", e))?;
            tx.commit().map_err(|e| sql("commit a workspace's deletion", e))
        })
        .await
    }

    async fn create_agent(&self, org: &str, agent: &Agent) -> Result<(), Error> {
        let (org, agent, max) = (org.to_owned(), agent.clone(), self.caps.agents_per_workspace);
        self.write(move |tx| {
            require_workspace(tx, &org, &agent.workspace_id)?;
            under_cap(
                tx,
                "SELECT COUNT(*) FROM agents WHERE org = ?1 AND workspace_id = ?2",
                params![org, agent.workspace_id],
                1,
                max,
                Capped::Agents,
            )?;
            insert_agent(tx, &org, &agent)
        })
        .await
    }

    async fn agent(&self, org: &str, id: &str) -> Result<Option<Agent>, Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            one(
                conn,
                "SELECT data FROM agents WHERE org = ?1 AND id = ?2",
                &org,
                &id,
                "read an agent",
            )
        })
        .await
    }

    async fn agents(&self, org: &str, workspace_id: &str) -> Result<Vec<Agent>, Error> {
        let (org, workspace_id) = (org.to_owned(), workspace_id.to_owned());
        self.with(move |conn| {
            many(
                conn,
                "SELECT data FROM agents WHERE org = ?1 AND workspace_id = ?2 ORDER BY position, id",
                params![org, workspace_id],
                "list agents",
            )
        })
        .await
    }

    async fn update_agent(&self, org: &str, agent: &Agent) -> Result<(), Error> {
        let (org, agent) = (org.to_owned(), agent.clone());
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE agents SET position = ?3, data = ?4 WHERE org = ?1 AND id = ?2",
                    params![org, agent.id, agent.position, encode(&agent)?],
                )
                .map_err(|e| sql("update an agent", e))?;
            if changed == 0 {
                return Err(missing("agent", &agent.id));
            }
            Ok(())
        })
        .await
    }

    async fn delete_agent(&self, org: &str, id: &str) -> Result<(), Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            let changed = conn
                .execute("DELETE FROM agents WHERE org = ?1 AND id = ?2", params![org, id])
                .map_err(|e| sql("delete an agent", e))?;
            if changed == 0 {
                return Err(missing("agent", &id));
            }
            Ok(())
        })
        .await
    }

    async fn set_positions(&self, org: &str, workspace_id: &str, positions: &[(String, u32)]) -> Result<(), Error> {
        let (org, workspace_id, positions) = (org.to_owned(), workspace_id.to_owned(), positions.to_vec());
        self.with(move |conn| {
            let tx = conn.unchecked_transaction().map_err(|e| sql("begin", e))?;
            for (id, position) in &positions {
                let changed = tx
                    .execute(
                        "UPDATE agents SET position = ?4, data = json_set(data, '$.position', ?4)
                         WHERE org = ?1 AND workspace_id = ?2 AND id = ?3",
                        params![org, workspace_id, id, position],
                    )
                    .map_err(|e| sql("reorder agents", e))?;
                if changed == 0 {
                    return Err(missing("agent", id));
                }
            }
            tx.commit().map_err(|e| sql("commit an agent order", e))
        })
        .await
    }

    async fn create_task(&self, org: &str, task: &Task) -> Result<(), Error> {
        let (org, task, max) = (org.to_owned(), task.clone(), self.caps.tasks_per_workspace);
        self.write(move |tx| {
            require_workspace(tx, &org, &task.workspace_id)?;
            under_cap(
                tx,
                "SELECT COUNT(*) FROM tasks WHERE org = ?1 AND workspace_id = ?2",
                params![org, task.workspace_id],
                1,
                max,
                Capped::Tasks,
            )?;
            tx.execute(
                "INSERT INTO tasks (org, id, workspace_id, created_ms, data) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![org, task.id, task.workspace_id, task.created_ms, encode(&task)?],
            )
            .map(drop)
            .map_err(|e| {
                if is_constraint(&e) {
                    Error::Exists {
                        what: format!("task `{}`", task.id),
                    }
                } else {
                    sql("insert a task", e)
                }
            })
        })
        .await
    }

    async fn task(&self, org: &str, id: &str) -> Result<Option<Task>, Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            one(
                conn,
                "SELECT data FROM tasks WHERE org = ?1 AND id = ?2",
                &org,
                &id,
                "read a task",
            )
        })
        .await
    }

    async fn update_task(&self, org: &str, task: &Task) -> Result<(), Error> {
        let (org, task) = (org.to_owned(), task.clone());
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE tasks SET data = ?3 WHERE org = ?1 AND id = ?2",
                    params![org, task.id, encode(&task)?],
                )
                .map_err(|e| sql("update a task", e))?;
            if changed == 0 {
                return Err(missing("task", &task.id));
            }
            Ok(())
        })
        .await
    }

    async fn delete_task(&self, org: &str, id: &str) -> Result<(), Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            let changed = conn
                .execute("DELETE FROM tasks WHERE org = ?1 AND id = ?2", params![org, id])
                .map_err(|e| sql("delete a task", e))?;
            if changed == 0 {
                return Err(missing("task", &id));
            }
            Ok(())
        })
        .await
    }

    async fn tasks(&self, org: &str, query: &TaskQuery) -> Result<Page<Task>, Error> {
        let (org, query) = (org.to_owned(), query.clone());
        let peek = i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX);
        self.with(move |conn| {
            let after = query.after.as_ref();
            let tasks = many(
                conn,
                "SELECT data FROM tasks WHERE org = ?1 AND workspace_id = ?2
                   AND (?3 IS NULL OR (created_ms, id) < (?3, ?4))
                   AND (?5 IS NULL OR json_extract(data, '$.session_id') = ?5)
                 ORDER BY created_ms DESC, id DESC LIMIT ?6",
                params![
                    org,
                    query.workspace_id,
                    after.map(|a| a.ms),
                    after.map(|a| a.id.as_str()),
                    query.session_id,
                    peek
                ],
                "list tasks",
            )?;
            Ok(Page::of(tasks, query.limit, TaskQuery::key))
        })
        .await
    }
}
