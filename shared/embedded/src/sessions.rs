//! # Session records in the embedded metadata store
//!
//! `workspace_key` is the workspace id, or `""` for sessions outside workspaces; the activity
//! fields (`last_active_ms`, `preview`) are columns of their own, so a touch never overwrites a
//! client's change and an update never rolls activity back.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params};
use spool_chat::{
    listing::{Page, SessionQuery, TurnQuery},
    metadata::Sessions,
    session::{OpenRequest, PendingTurn, RUN_COUNT_TTL_MS, RequestKind, Session, TurnRecord},
};
use spool_log::error::Error;

use crate::{
    db::sql,
    metadata::{EmbeddedMetadata, is_constraint},
};

fn encode(session: &Session) -> Result<String, Error> {
    serde_json::to_string(session).map_err(|e| Error::unavailable("embedded metadata: encode a session", e))
}

type SessionRow = (String, i64, String, Option<String>, Option<i64>);

fn decode(row: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
}

fn corrupt(e: serde_json::Error) -> Error {
    Error::Corrupt {
        what: format!("a session: {e}"),
    }
}

fn merge((data, last_active_ms, preview, pending, branch_seq): SessionRow) -> Result<Session, Error> {
    let mut session: Session = serde_json::from_str(&data).map_err(corrupt)?;
    session.last_active_ms = last_active_ms;
    session.preview = preview;
    session.pending_turn = pending.map(|p| serde_json::from_str(&p)).transpose().map_err(corrupt)?;
    session.branch_seq = branch_seq.and_then(|s| u64::try_from(s).ok());
    Ok(session)
}

#[async_trait]
impl Sessions for EmbeddedMetadata {
    async fn create_session(&self, org: &str, session: &Session) -> Result<(), Error> {
        let (org, session) = (org.to_owned(), session.clone());
        self.with(move |conn| {
            conn.execute(
                "INSERT INTO sessions (org, id, workspace_key, last_active_ms, preview, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    org,
                    session.id,
                    session.workspace_id.as_deref().unwrap_or(""),
                    session.last_active_ms,
                    session.preview,
                    encode(&session)?
                ],
            )
            .map(drop)
            .map_err(|e| {
                if is_constraint(&e) {
                    Error::Exists {
                        what: format!("session `{}`", session.id),
                    }
                } else {
                    sql("insert a session", e)
                }
            })
        })
        .await
    }

    async fn session(&self, org: &str, id: &str) -> Result<Option<Session>, Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            conn.query_row(
                "SELECT data, last_active_ms, preview, pending, branch_seq FROM sessions WHERE org = ?1 AND id = ?2",
                params![org, id],
                decode,
            )
            .optional()
            .map_err(|e| sql("read a session", e))?
            .map(merge)
            .transpose()
        })
        .await
    }

    async fn update_session(&self, org: &str, session: &Session) -> Result<(), Error> {
        let (org, session) = (org.to_owned(), session.clone());
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE sessions SET data = ?3 WHERE org = ?1 AND id = ?2",
                    params![org, session.id, encode(&session)?],
                )
                .map_err(|e| sql("update a session", e))?;
            if changed == 0 {
                return Err(Error::Missing {
                    what: format!("session `{}`", session.id),
                });
            }
            Ok(())
        })
        .await
    }

    async fn touch_session(&self, org: &str, id: &str, at_ms: i64, preview: &str) -> Result<(), Error> {
        let (org, id, preview) = (org.to_owned(), id.to_owned(), preview.to_owned());
        self.with(move |conn| {
            conn.execute(
                "UPDATE sessions SET last_active_ms = ?3, preview = ?4
                 WHERE org = ?1 AND id = ?2 AND last_active_ms <= ?3",
                params![org, id, at_ms, preview],
            )
            .map(drop)
            .map_err(|e| sql("touch a session", e))
        })
        .await
    }

    async fn note_branch(&self, org: &str, id: &str, seq: u64) -> Result<(), Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        let seq = i64::try_from(seq).map_err(|_| Error::invalid("seq", "out of range"))?;
        self.with(move |conn| {
            conn.execute(
                "UPDATE sessions SET branch_seq = ?3
                 WHERE org = ?1 AND id = ?2 AND (branch_seq IS NULL OR branch_seq < ?3)",
                params![org, id, seq],
            )
            .map(drop)
            .map_err(|e| sql("note a session's branch", e))
        })
        .await
    }

    async fn delete_session(&self, org: &str, id: &str) -> Result<(), Error> {
        let (org, id) = (org.to_owned(), id.to_owned());
        self.with(move |conn| {
            let tx = conn.unchecked_transaction().map_err(|e| sql("begin", e))?;
            for table in ["open_requests", "turns", "attachments"] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE org = ?1 AND session_id = ?2"),
                    params![org, id],
                )
                .map_err(|e| sql("delete a session's requests, turns and attachments", e))?;
            }
            let changed = tx
                .execute("DELETE FROM sessions WHERE org = ?1 AND id = ?2", params![org, id])
                .map_err(|e| sql("delete a session", e))?;
            tx.commit().map_err(|e| sql("commit a session delete", e))?;
            if changed == 0 {
                return Err(Error::Missing {
                    what: format!("session `{id}`"),
                });
            }
            Ok(())
        })
        .await
    }

    async fn sessions(&self, org: &str, query: &SessionQuery) -> Result<Page<Session>, Error> {
        let (org, query) = (org.to_owned(), query.clone());
        self.with(move |conn| {
            // The index `sessions_by_activity` gives the order; the creator and agent are
            // compared in SQL, the title (case-insensitive, Unicode) by the query's own rule as
            // rows stream in, so a search reads no further than the page it fills.
            let mut statement = conn
                .prepare_cached(
                    "SELECT data, last_active_ms, preview, pending, branch_seq FROM sessions
                     WHERE org = ?1 AND workspace_key = ?2
                       AND (?3 IS NULL OR (last_active_ms, id) < (?3, ?4))
                       AND (?5 IS NULL OR json_extract(data, '$.created_by') = ?5)
                       AND (?6 IS NULL OR json_extract(data, '$.agent_id') = ?6)
                     ORDER BY last_active_ms DESC, id DESC",
                )
                .map_err(|e| sql("list sessions", e))?;
            let after = query.after.as_ref();
            let rows = statement
                .query_map(
                    params![
                        org,
                        query.workspace_id.as_deref().unwrap_or(""),
                        after.map(|a| a.ms),
                        after.map(|a| a.id.as_str()),
                        query.created_by,
                        query.agent_id
                    ],
                    decode,
                )
                .map_err(|e| sql("list sessions", e))?;
            let mut matched = Vec::new();
            for row in rows {
                let session = merge(row.map_err(|e| sql("list sessions", e))?)?;
                if query.matches(&session) {
                    matched.push(session);
                    if matched.len() > query.limit {
                        break;
                    }
                }
            }
            Ok(Page::of(matched, query.limit, SessionQuery::key))
        })
        .await
    }

    async fn open_request(&self, org: &str, session_id: &str, request: &OpenRequest) -> Result<(), Error> {
        let (org, session_id, request) = (org.to_owned(), session_id.to_owned(), request.clone());
        let data = serde_json::to_string(&request).map_err(|e| Error::unavailable("encode a request", e))?;
        self.with(move |conn| {
            conn.execute(
                "INSERT INTO open_requests (org, session_id, id, data) VALUES (?1, ?2, ?3, ?4)",
                params![org, session_id, request.id, data],
            )
            .map(drop)
            .map_err(|e| {
                if is_constraint(&e) {
                    Error::Exists {
                        what: format!("request `{}`", request.id),
                    }
                } else {
                    sql("open a request", e)
                }
            })
        })
        .await
    }

    async fn take_request(
        &self,
        org: &str,
        session_id: &str,
        request_id: &str,
        kind: Option<RequestKind>,
    ) -> Result<Option<OpenRequest>, Error> {
        let (org, session_id, request_id) = (org.to_owned(), session_id.to_owned(), request_id.to_owned());
        let kind = kind.map(RequestKind::as_str);
        self.with(move |conn| {
            conn.query_row(
                "DELETE FROM open_requests WHERE org = ?1 AND session_id = ?2 AND id = ?3
                   AND (?4 IS NULL OR json_extract(data, '$.kind') = ?4)
                 RETURNING data",
                params![org, session_id, request_id, kind],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| sql("take a request", e))?
            .map(|data| {
                serde_json::from_str(&data).map_err(|e| Error::Corrupt {
                    what: format!("an open request: {e}"),
                })
            })
            .transpose()
        })
        .await
    }

    async fn open_requests(&self, org: &str, session_id: &str) -> Result<Vec<OpenRequest>, Error> {
        let (org, session_id) = (org.to_owned(), session_id.to_owned());
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached("SELECT data FROM open_requests WHERE org = ?1 AND session_id = ?2 ORDER BY rowid")
                .map_err(|e| sql("list requests", e))?;
            let rows = statement
                .query_map(params![org, session_id], |r| r.get::<_, String>(0))
                .map_err(|e| sql("list requests", e))?;
            rows.map(|row| {
                let data = row.map_err(|e| sql("list requests", e))?;
                serde_json::from_str(&data).map_err(|e| Error::Corrupt {
                    what: format!("an open request: {e}"),
                })
            })
            .collect()
        })
        .await
    }

    async fn record_turn(&self, org: &str, session_id: &str, turn: &TurnRecord) -> Result<(), Error> {
        let (org, session_id, turn) = (org.to_owned(), session_id.to_owned(), turn.clone());
        let data = serde_json::to_string(&turn).map_err(|e| Error::unavailable("encode a turn record", e))?;
        self.with(move |conn| {
            // Finished records past their time go as new ones come (an index range delete).
            conn.execute(
                "DELETE FROM turns WHERE expires_ms IS NOT NULL AND expires_ms < ?1",
                params![turn.updated_ms],
            )
            .map_err(|e| sql("expire turn records", e))?;
            conn.execute(
                "INSERT INTO turns (org, session_id, turn_id, status_rank, created_ms, expires_ms, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (org, session_id, turn_id) DO UPDATE SET
                     status_rank = excluded.status_rank, expires_ms = excluded.expires_ms,
                     data = json_set(excluded.data, '$.created_ms', json_extract(turns.data, '$.created_ms'))
                 WHERE excluded.status_rank >= turns.status_rank",
                params![
                    org,
                    session_id,
                    turn.turn_id,
                    turn.status.rank(),
                    turn.created_ms,
                    turn.expires_ms,
                    data
                ],
            )
            .map(drop)
            .map_err(|e| sql("record a turn", e))
        })
        .await
    }

    async fn count_run(&self, org: &str, session_id: &str, step: &str, now_ms: i64) -> Result<u32, Error> {
        let (org, session_id, step) = (org.to_owned(), session_id.to_owned(), step.to_owned());
        self.with(move |conn| {
            conn.execute("DELETE FROM turn_runs WHERE expires_ms < ?1", params![now_ms])
                .map_err(|e| sql("expire run counts", e))?;
            conn.query_row(
                "INSERT INTO turn_runs (org, session_id, step, runs, expires_ms) VALUES (?1, ?2, ?3, 1, ?4)
                 ON CONFLICT (org, session_id, step) DO UPDATE SET runs = runs + 1, expires_ms = excluded.expires_ms
                 RETURNING runs",
                params![org, session_id, step, now_ms.saturating_add(RUN_COUNT_TTL_MS)],
                |row| row.get::<_, u32>(0),
            )
            .map_err(|e| sql("count a turn's run", e))
        })
        .await
    }

    async fn turns(&self, org: &str, query: &TurnQuery) -> Result<Page<TurnRecord>, Error> {
        let (org, query) = (org.to_owned(), query.clone());
        let peek = i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX);
        let status = query.status.map(|s| serde_json::to_value(s).ok());
        let status = status.flatten().and_then(|v| v.as_str().map(str::to_owned));
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT data FROM turns WHERE org = ?1 AND session_id = ?2
                       AND (expires_ms IS NULL OR expires_ms >= ?3)
                       AND (?4 IS NULL OR (created_ms, turn_id) < (?4, ?5))
                       AND (?6 IS NULL OR json_extract(data, '$.status') = ?6)
                     ORDER BY created_ms DESC, turn_id DESC LIMIT ?7",
                )
                .map_err(|e| sql("list turns", e))?;
            let after = query.after.as_ref();
            let rows = statement
                .query_map(
                    params![
                        org,
                        query.session_id,
                        query.now_ms,
                        after.map(|a| a.ms),
                        after.map(|a| a.id.as_str()),
                        status,
                        peek
                    ],
                    |r| r.get::<_, String>(0),
                )
                .map_err(|e| sql("list turns", e))?;
            let turns = rows
                .map(|row| {
                    let data = row.map_err(|e| sql("list turns", e))?;
                    serde_json::from_str(&data).map_err(|e| Error::Corrupt {
                        what: format!("a turn record: {e}"),
                    })
                })
                .collect::<Result<Vec<TurnRecord>, Error>>()?;
            Ok(Page::of(turns, query.limit, TurnQuery::key))
        })
        .await
    }

    async fn claim_turn(&self, org: &str, id: &str, turn: &PendingTurn) -> Result<Result<(), PendingTurn>, Error> {
        let (org, id, turn_id) = (org.to_owned(), id.to_owned(), turn.turn_id.clone());
        let claim = serde_json::to_string(turn).map_err(|e| Error::unavailable("encode a pending turn", e))?;
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE sessions SET pending = ?3 WHERE org = ?1 AND id = ?2 AND pending IS NULL",
                    params![org, id, claim],
                )
                .map_err(|e| sql("claim a turn", e))?;
            if changed == 1 {
                return Ok(Ok(()));
            }
            let holder: Option<Option<String>> = conn
                .query_row(
                    "SELECT pending FROM sessions WHERE org = ?1 AND id = ?2",
                    params![org, id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| sql("read a pending turn", e))?;
            match holder {
                None => Err(Error::Missing {
                    what: format!("session `{id}`"),
                }),
                Some(Some(holder)) => {
                    let holder: PendingTurn = serde_json::from_str(&holder).map_err(corrupt)?;
                    // Claiming the turn one holds already is a success (as on DynamoDB, where a
                    // retried write meets its own claim).
                    Ok(if holder.turn_id == turn_id { Ok(()) } else { Err(holder) })
                }
                // Released between the two statements: a retry will claim it.
                Some(None) => Err(Error::Contention {
                    path: Session::stream(&org, &id)?,
                }),
            }
        })
        .await
    }

    async fn release_turn(&self, org: &str, id: &str, turn_id: &str) -> Result<bool, Error> {
        let (org, id, turn_id) = (org.to_owned(), id.to_owned(), turn_id.to_owned());
        self.with(move |conn| {
            conn.execute(
                "UPDATE sessions SET pending = NULL
                 WHERE org = ?1 AND id = ?2 AND json_extract(pending, '$.turn_id') = ?3",
                params![org, id, turn_id],
            )
            .map(|changed| changed == 1)
            .map_err(|e| sql("release a turn", e))
        })
        .await
    }
}
