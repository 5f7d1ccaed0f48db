//! Attachment records in `metadata.db`: one row per file, keyed by organization and chat. A
//! record is inserted in a write transaction that counts its chat's first, so the cap holds.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use spool_chat::{
    attachment::{Attachment, Attachments},
    caps::Capped,
};
use spool_log::error::Error;

use crate::{
    db::sql,
    metadata::{EmbeddedMetadata, is_constraint, under_cap},
};

fn encode(attachment: &Attachment) -> Result<String, Error> {
    serde_json::to_string(attachment).map_err(|e| Error::unavailable("encode an attachment", e))
}

fn decode(data: &str) -> Result<Attachment, Error> {
    serde_json::from_str(data).map_err(|e| Error::Corrupt {
        what: format!("an attachment: {e}"),
    })
}

#[async_trait]
impl Attachments for EmbeddedMetadata {
    async fn create_attachment(&self, org: &str, attachment: &Attachment) -> Result<(), Error> {
        let (org, a) = (org.to_owned(), attachment.clone());
        let data = encode(&a)?;
        let max = self.caps.attachments_per_chat;
        self.write(move |tx| {
            under_cap(
                tx,
                "SELECT COUNT(*) FROM attachments WHERE org = ?1 AND session_id = ?2",
                params![org, a.session_id],
                1,
                max,
                Capped::Attachments,
            )?;
            tx.execute(
                "INSERT INTO attachments (org, session_id, id, created_ms, status, data) VALUES (?1, ?2, ?3, ?4, 'uploading', ?5)",
                params![org, a.session_id, a.id, a.created_ms, data],
            )
            .map(drop)
            .map_err(|e| {
                if is_constraint(&e) {
                    Error::Exists {
                        what: format!("attachment `{}`", a.id),
                    }
                } else {
                    sql("store an attachment", e)
                }
            })
        })
        .await
    }

    async fn attachment(&self, org: &str, session_id: &str, id: &str) -> Result<Option<Attachment>, Error> {
        let (org, session_id, id) = (org.to_owned(), session_id.to_owned(), id.to_owned());
        self.with(move |conn| {
            conn.query_row(
                "SELECT data FROM attachments WHERE org = ?1 AND session_id = ?2 AND id = ?3",
                params![org, session_id, id],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| sql("read an attachment", e))?
            .map(|data| decode(&data))
            .transpose()
        })
        .await
    }

    async fn attachments(&self, org: &str, session_id: &str) -> Result<Vec<Attachment>, Error> {
        let (org, session_id) = (org.to_owned(), session_id.to_owned());
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT data FROM attachments WHERE org = ?1 AND session_id = ?2 ORDER BY created_ms, id",
                )
                .map_err(|e| sql("list attachments", e))?;
            let rows = statement
                .query_map(params![org, session_id], |r| r.get::<_, String>(0))
                .map_err(|e| sql("list attachments", e))?;
            rows.map(|row| decode(&row.map_err(|e| sql("list attachments", e))?))
                .collect()
        })
        .await
    }

    async fn complete_attachment(
        &self,
        org: &str,
        session_id: &str,
        id: &str,
        at_ms: i64,
    ) -> Result<Option<Attachment>, Error> {
        let (org, session_id, id) = (org.to_owned(), session_id.to_owned(), id.to_owned());
        // One statement, conditional on the status: the change happens once, whoever else
        // completes it, and no read lock is upgraded on the way.
        self.with(move |conn| {
            conn.query_row(
                "UPDATE attachments
                 SET status = 'complete', data = json_set(data, '$.status', 'complete', '$.completed_ms', ?4)
                 WHERE org = ?1 AND session_id = ?2 AND id = ?3 AND status = 'uploading'
                 RETURNING data",
                params![org, session_id, id, at_ms],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| sql("complete an attachment", e))?
            .map(|data| decode(&data))
            .transpose()
        })
        .await
    }

    async fn abandon_attachment(&self, org: &str, session_id: &str, id: &str) -> Result<bool, Error> {
        let (org, session_id, id) = (org.to_owned(), session_id.to_owned(), id.to_owned());
        self.with(move |conn| {
            conn.execute(
                "DELETE FROM attachments WHERE org = ?1 AND session_id = ?2 AND id = ?3 AND status = 'uploading'",
                params![org, session_id, id],
            )
            .map(|deleted| deleted > 0)
            .map_err(|e| sql("abandon an attachment", e))
        })
        .await
    }
}

impl EmbeddedMetadata {
    /// Takes the records of files whose upload was never completed and whose URL expired
    /// before `before_ms` (at most 1,000), with their organization: they are gone from the
    /// store once this answers, so a completion racing the sweep finds no record (`404`) rather
    /// than completing a file whose bytes the sweep deletes next.
    pub async fn take_unfinished_uploads(&self, before_ms: i64) -> Result<Vec<(String, Attachment)>, Error> {
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached(
                    "DELETE FROM attachments WHERE rowid IN (
                         SELECT rowid FROM attachments
                         WHERE status = 'uploading' AND json_extract(data, '$.upload_expires_ms') < ?1
                         LIMIT 1000)
                     RETURNING org, data",
                )
                .map_err(|e| sql("take unfinished uploads", e))?;
            let rows = statement
                .query_map(params![before_ms], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(|e| sql("take unfinished uploads", e))?;
            rows.map(|row| {
                let (org, data) = row.map_err(|e| sql("take unfinished uploads", e))?;
                Ok((org, decode(&data)?))
            })
            .collect()
        })
        .await
    }
}

/// Deletes the files whose upload was never completed and whose URL expired before
/// `before_ms`: their records, then their bytes. Answers how many.
pub async fn sweep_uploads(
    records: &EmbeddedMetadata,
    files: &dyn spool_chat::attachment::FileStore,
    before_ms: i64,
) -> Result<usize, Error> {
    let unfinished = records.take_unfinished_uploads(before_ms).await?;
    for (org, a) in &unfinished {
        files
            .delete(&spool_chat::attachment::object_key(org, &a.session_id, &a.id))
            .await?;
    }
    Ok(unfinished.len())
}
