//! # A chat's files
//!
//! A person declares a file (its name, type and size), sends its bytes straight to storage
//! with the [`Transfer`] this answers, then completes it: the stored object is checked (its
//! size, and its SHA-256 when one was declared), kept, the record marked complete, and the chat
//! records a `system` event saying who uploaded what and where an agent reads it. Each step may
//! be retried: the event is written once (an idempotent producer named after the attachment),
//! and a completed file answers its event again.
//!
//! A file named like an earlier one of the chat replaces it: agents see the newest, and the
//! event names the one it replaces. Messages refer to completed files by id, and carry their
//! names ([`ChatService::message_files`]).
//!
//! Under `spool serve` the bytes come through Spool ([`ChatService::receive_upload`]), under a
//! grant in the upload URL. A grant takes one attempt: bytes refused for their type or size use
//! it up (the file's record is removed, so the grant names nothing), and the file is declared
//! again. Only a body that never arrived whole (the client went away) leaves it working.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use super::ChatService;
use crate::{
    attachment::{
        Attachment, AttachmentStatus, DEFAULT_MAX_ATTACHMENT_BYTES, FileReader, Transfer, check_content_type,
        check_sha256, object_key, safe_filename,
    },
    event::{ChatEvent, FileRef, Level, SystemNote, Uploaded},
    session::{EventDraft, Session, append_events},
    workspace::new_id,
};
use spool_log::{clock::rfc3339_ms, error::Error, stream::ProducerClaim};

/// How large files may be and how long their URLs last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachmentLimits {
    /// The largest file (`SPOOL_MAX_ATTACHMENT_BYTES`).
    pub max_bytes: u64,
    /// How long an upload URL works.
    pub upload_ttl: Duration,
    /// How long a download URL works.
    pub download_ttl: Duration,
    /// How long after its upload URL expired a file may still be completed: well inside the
    /// day after which unfinished uploads are cleaned up, so a completion never races that.
    pub complete_grace: Duration,
}

impl Default for AttachmentLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_ATTACHMENT_BYTES,
            upload_ttl: Duration::from_secs(15 * 60),
            download_ttl: Duration::from_secs(5 * 60),
            complete_grace: Duration::from_secs(60 * 60),
        }
    }
}

/// A file a person is about to upload.
#[derive(Debug, Clone)]
pub struct NewUpload {
    /// Its name as the client has it (reduced to a safe base name).
    pub filename: String,
    /// Its media type.
    pub content_type: String,
    /// Its exact size in bytes.
    pub size: u64,
    /// The SHA-256 of its bytes (hex), to be checked when it is completed.
    pub sha256: Option<String>,
    /// Who uploads it.
    pub author: String,
}

/// A file declared: its record and how to send its bytes.
#[derive(Debug, Clone)]
pub struct Declared {
    /// The record (`uploading`).
    pub attachment: Attachment,
    /// Where the bytes go.
    pub transfer: Transfer,
}

/// What completing a file did.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// Recorded in the chat (now or by an earlier call).
    Recorded {
        /// The completed record.
        attachment: Box<Attachment>,
        /// Its `system` event's seq.
        seq: u64,
        /// The earlier file of the same name it replaces.
        replaces: Option<String>,
    },
    /// Its bytes are not all there: nothing (`None`), or this many.
    NotUploaded(Option<u64>),
    /// The bytes' SHA-256 is not the one declared.
    ChecksumMismatch,
    /// Too long after its upload URL expired: it is left to the clean-up.
    Expired,
}

/// What became of bytes sent to Spool's own upload route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Stored; the file is completed next.
    Stored,
    /// No such file is waiting for its bytes: never declared, deleted with its chat, or
    /// abandoned when an earlier upload was refused.
    NoFile,
    /// Its bytes were taken already (a URL works once).
    AlreadyUploaded,
}

/// A request body that notes whether reading it failed: the client's connection, not what it
/// sent.
struct Watched {
    body: FileReader,
    failed: Arc<AtomicBool>,
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = self.body.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Err(_)) = &polled {
            self.failed.store(true, Ordering::Relaxed);
        }
        polled
    }
}

/// Where an agent reads a file, relative to the chat's folder.
pub fn agent_path(filename: &str) -> String {
    format!("attachments/{filename}")
}

/// A human size: `512 B`, `12.3 KB`, `4.0 MB`.
pub fn human_size(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let b = bytes as f64;
    if bytes < 1000 {
        format!("{bytes} B")
    } else if bytes < 1_000_000 {
        format!("{:.1} KB", b / 1e3)
    } else if bytes < 1_000_000_000 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.1} GB", b / 1e9)
    }
}

impl ChatService {
    /// The limits files are held to.
    pub fn attachment_limits(&self) -> AttachmentLimits {
        self.attachments
    }

    /// Declares a file of `session`: checks its name, type and size, records it, and answers
    /// how its bytes are sent. A size over the limit is [`Error::FileTooLarge`], before
    /// anything is recorded.
    pub async fn declare_upload(&self, org: &str, session: &Session, new: NewUpload) -> Result<Declared, Error> {
        let filename = safe_filename(&new.filename)?;
        let content_type = check_content_type(&new.content_type)?;
        let sha256 = new.sha256.as_deref().map(check_sha256).transpose()?;
        if new.size > self.attachments.max_bytes {
            return Err(Error::FileTooLarge {
                size: new.size,
                max: self.attachments.max_bytes,
            });
        }
        let now = self.clock.now_ms();
        let ttl_ms = i64::try_from(self.attachments.upload_ttl.as_millis()).unwrap_or(i64::MAX);
        let attachment = Attachment {
            id: new_id("att"),
            session_id: session.id.clone(),
            filename,
            content_type,
            size: new.size,
            sha256,
            author: new.author,
            status: AttachmentStatus::Uploading,
            created_ms: now,
            upload_expires_ms: now.saturating_add(ttl_ms),
            completed_ms: None,
        };
        let key = object_key(org, &session.id, &attachment.id);
        let transfer = self
            .files
            .upload(
                &key,
                &attachment.content_type,
                attachment.size,
                attachment.sha256.as_deref(),
                self.attachments.upload_ttl,
            )
            .await?;
        self.metadata.create_attachment(org, &attachment).await?;
        tracing::info!(org, session = %session.id, attachment = %attachment.id, size = attachment.size, "upload declared");
        Ok(Declared { attachment, transfer })
    }

    /// A file of `session` ([`Error::Missing`] if it has none of that id).
    pub async fn attachment(&self, org: &str, session: &Session, id: &str) -> Result<Attachment, Error> {
        self.metadata
            .attachment(org, &session.id, id)
            .await?
            .ok_or_else(|| Error::Missing {
                what: format!("attachment `{id}` of this chat"),
            })
    }

    /// Takes the bytes of file `id` of chat `session_id`, sent as `sent_type` to Spool's own
    /// upload route under a verified grant: exactly the declared type and size, once. Bytes
    /// refused for their type or size abandon the file (its grant then names nothing) and are
    /// [`Error::Invalid`]; a body cut off in transit leaves the file waiting for them.
    pub async fn receive_upload(
        &self,
        org: &str,
        session_id: &str,
        id: &str,
        sent_type: &str,
        body: FileReader,
    ) -> Result<Received, Error> {
        let Some(attachment) = self.metadata.attachment(org, session_id, id).await? else {
            return Ok(Received::NoFile);
        };
        if attachment.status != AttachmentStatus::Uploading {
            return Ok(Received::AlreadyUploaded);
        }
        let key = object_key(org, session_id, id);
        let (what, reason) = if check_content_type(sent_type).ok().as_deref() == Some(&*attachment.content_type) {
            let failed = Arc::new(AtomicBool::new(false));
            let watched = Watched {
                body,
                failed: failed.clone(),
            };
            match self.files.write(&key, attachment.size, Box::pin(watched)).await {
                Ok(()) => {
                    // The chat may have been deleted while the bytes came: then they go too.
                    if self.metadata.attachment(org, session_id, id).await?.is_none() {
                        self.files.delete(&key).await?;
                        return Ok(Received::NoFile);
                    }
                    tracing::info!(org, attachment = %id, size = attachment.size, "upload stored");
                    return Ok(Received::Stored);
                }
                Err(Error::Exists { .. }) => return Ok(Received::AlreadyUploaded),
                Err(Error::Invalid { what, reason }) if !failed.load(Ordering::Relaxed) => (what, reason),
                Err(e) => return Err(e),
            }
        } else {
            (
                "content_type",
                format!(
                    "the bytes were not sent with `Content-Type: {}`, as declared",
                    attachment.content_type
                ),
            )
        };
        self.metadata.abandon_attachment(org, session_id, id).await?;
        tracing::info!(org, attachment = %id, "upload refused; its file is abandoned");
        Err(Error::invalid(
            what,
            format!("{reason}; this upload URL is used up: declare the file again"),
        ))
    }

    /// Completes a file: checks what was stored, keeps it (past the clean-up of unfinished
    /// uploads), marks it complete, then records it in the chat. In that order, so a crash
    /// part-way never leaves a recorded file to be cleaned up: at worst a completed file whose
    /// event the client's retry (this again) appends.
    pub async fn complete_upload(&self, org: &str, session: &Session, id: &str) -> Result<Completion, Error> {
        let mut attachment = self.attachment(org, session, id).await?;
        let key = object_key(org, &session.id, id);
        if attachment.status == AttachmentStatus::Uploading {
            let grace = i64::try_from(self.attachments.complete_grace.as_millis()).unwrap_or(i64::MAX);
            if self.clock.now_ms() > attachment.upload_expires_ms.saturating_add(grace) {
                return Ok(Completion::Expired);
            }
            let stored = self.files.size(&key).await?;
            if stored != Some(attachment.size) {
                return Ok(Completion::NotUploaded(stored));
            }
            if let Some(expected) = &attachment.sha256
                && self.files.sha256(&key).await?.as_ref() != Some(expected)
            {
                return Ok(Completion::ChecksumMismatch);
            }
            self.files.keep(&key).await?;
            attachment = match self
                .metadata
                .complete_attachment(org, &session.id, id, self.clock.now_ms())
                .await?
            {
                Some(completed) => completed,
                // Completed meanwhile: as recorded.
                None => self.attachment(org, session, id).await?,
            };
        }
        // The newest file of this name completed before it is the one it replaces.
        let replaces = self
            .metadata
            .attachments(org, &session.id)
            .await?
            .into_iter()
            .filter(|a| {
                a.filename == attachment.filename
                    && a.status == AttachmentStatus::Complete
                    && order(a) < order(&attachment)
            })
            .max_by(|a, b| order(a).cmp(&order(b)))
            .map(|a| a.id);
        let seq = self.record_upload(org, session, &attachment, replaces.clone()).await?;
        tracing::info!(org, session = %session.id, attachment = %id, seq, "upload completed");
        Ok(Completion::Recorded {
            attachment: Box::new(attachment),
            seq,
            replaces,
        })
    }

    /// Appends the `system` event of an upload, once: a retry finds the first one's seq.
    async fn record_upload(
        &self,
        org: &str,
        session: &Session,
        attachment: &Attachment,
        replaces: Option<String>,
    ) -> Result<u64, Error> {
        let path = agent_path(&attachment.filename);
        let mut message = format!(
            "User has uploaded {} ({}, {}); agents read it at {path}",
            attachment.filename,
            human_size(attachment.size),
            attachment.content_type
        );
        if replaces.is_some() {
            message.push_str(&format!(". It replaces the earlier file named {}", attachment.filename));
        }
        let event = ChatEvent::System(SystemNote {
            level: Level::Info,
            message,
            upload: Some(Uploaded {
                file: file_ref(attachment),
                path,
                replaces,
            }),
        });
        let producer = ProducerClaim {
            id: format!("att:{}", attachment.id),
            epoch: 0,
            seq: 0,
        };
        let appended = append_events(
            self.log.as_ref(),
            &Session::stream(org, &session.id)?,
            &session.id,
            &[EventDraft::new(event, None)],
            Some(producer),
            &rfc3339_ms(self.clock.now_ms()),
            None,
        )
        .await?;
        if !appended.duplicate {
            self.seal_when_idle(org, session, appended.first).await;
            let preview = format!("📎 {}", attachment.filename);
            self.metadata
                .touch_session(org, &session.id, self.clock.now_ms(), &preview)
                .await?;
            if let Some(ws) = &session.workspace_id {
                let event = crate::event::FeedEvent::MessageAdded {
                    chat_id: session.id.clone(),
                    chat_title: session.title.clone(),
                    author_type: crate::event::AuthorType::System,
                    workspace_id: ws.clone(),
                };
                self.feed(org, ws, &event).await?;
            }
        }
        Ok(appended.first)
    }

    /// How a client fetches a completed file ([`Error::Missing`] until it is completed).
    pub async fn download(&self, org: &str, session: &Session, id: &str) -> Result<(Attachment, Transfer), Error> {
        let attachment = self.attachment(org, session, id).await?;
        if attachment.status != AttachmentStatus::Complete {
            return Err(Error::Missing {
                what: format!("attachment `{id}` (its upload is not completed)"),
            });
        }
        let transfer = self
            .files
            .download(
                &object_key(org, &session.id, id),
                &attachment.filename,
                &attachment.content_type,
                self.attachments.download_ttl,
            )
            .await?;
        Ok((attachment, transfer))
    }

    /// The bytes of a completed file, for routes that serve them themselves.
    pub async fn read_file(&self, org: &str, session_id: &str, id: &str) -> Result<FileReader, Error> {
        self.files
            .read(&object_key(org, session_id, id))
            .await?
            .ok_or_else(|| Error::Missing {
                what: format!("the bytes of attachment `{id}`"),
            })
    }

    /// The completed files `ids` of `session`, as a message names them; an id that names none
    /// is [`Error::Invalid`].
    pub async fn message_files(&self, org: &str, session: &Session, ids: &[String]) -> Result<Vec<FileRef>, Error> {
        let mut files: Vec<FileRef> = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            if files.iter().any(|f| &f.id == id) {
                continue;
            }
            match self.metadata.attachment(org, &session.id, id).await? {
                Some(a) if a.status == AttachmentStatus::Complete => files.push(file_ref(&a)),
                Some(_) => {
                    return Err(Error::invalid(
                        "files",
                        format!("files[{i}] `{id}` is not uploaded yet; complete its upload first"),
                    ));
                }
                None => {
                    return Err(Error::invalid(
                        "files",
                        format!("files[{i}] `{id}` names no file of this chat; upload it with POST …/attachments"),
                    ));
                }
            }
        }
        Ok(files)
    }

    /// Deletes the stored bytes of a chat's files (before the chat's records go).
    pub(super) async fn remove_files(&self, org: &str, session_id: &str) -> Result<(), Error> {
        for attachment in self.metadata.attachments(org, session_id).await? {
            self.files.delete(&object_key(org, session_id, &attachment.id)).await?;
        }
        Ok(())
    }
}

/// The order files of one name replace each other in: by completion, then creation, then id.
fn order(a: &Attachment) -> (Option<i64>, i64, &str) {
    (a.completed_ms, a.created_ms, &a.id)
}

/// A chat's current files, from its records: the newest completed file of each name, in the
/// order they were completed ([`order`]). A file whose upload never completed (or was
/// abandoned), and one a newer file of its name replaced, is not among them.
pub fn current_files(mut records: Vec<Attachment>) -> Vec<Attachment> {
    records.retain(|a| a.status == AttachmentStatus::Complete);
    records.sort_by(|a, b| order(a).cmp(&order(b)));
    let mut files: Vec<Attachment> = Vec::new();
    for a in records {
        files.retain(|f| f.filename != a.filename);
        files.push(a);
    }
    files
}

/// How events name a file.
pub fn file_ref(a: &Attachment) -> FileRef {
    FileRef {
        id: a.id.clone(),
        filename: a.filename.clone(),
        content_type: a.content_type.clone(),
        size: a.size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(999), "999 B");
        assert_eq!(human_size(12_345), "12.3 KB");
        assert_eq!(human_size(50_000_000), "50.0 MB");
        assert_eq!(agent_path("a b.txt"), "attachments/a b.txt");
    }
}
