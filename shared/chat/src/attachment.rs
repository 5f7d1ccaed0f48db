//! # Attachments: files a person puts in a chat
//!
//! An attachment is declared (its name, type and size), then its bytes go straight to storage,
//! then it is completed, which the chat records. This module holds its record, the rules for
//! what a file may be called and typed, and the metadata port that keeps the records
//! ([`Attachments`]).
//!
//! Invariants: a stored filename is a safe base name (no path separator, no `..`, no control
//! or format character, at most [`MAX_FILENAME_CHARS`] characters), so it can never name a
//! place outside a chat's folder, nor show as another name; an attachment is completed at most
//! once, and abandoned (when its upload is refused) only before.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use spool_log::error::Error;

/// The longest filename kept (its extension is kept when a longer one is shortened).
pub const MAX_FILENAME_CHARS: usize = 200;

/// The default largest attachment (`SPOOL_MAX_ATTACHMENT_BYTES`): 100 MiB.
pub const DEFAULT_MAX_ATTACHMENT_BYTES: u64 = 100 * 1024 * 1024;

/// Where an attachment is in its life.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentStatus {
    /// Declared; its bytes are on their way.
    Uploading,
    /// Uploaded, checked and recorded in the chat.
    Complete,
}

/// A file in a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Its id (`att_…`).
    pub id: String,
    /// The chat it belongs to.
    pub session_id: String,
    /// Its safe base name ([`safe_filename`]).
    pub filename: String,
    /// Its media type ([`check_content_type`]).
    pub content_type: String,
    /// Its size in bytes, as declared (and checked when completed).
    pub size: u64,
    /// The SHA-256 of its bytes (hex), when the client sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Who uploaded it (the token's subject).
    pub author: String,
    /// Where it is in its life.
    pub status: AttachmentStatus,
    /// When it was declared (ms since the Unix epoch).
    pub created_ms: i64,
    /// When its upload URL expires.
    pub upload_expires_ms: i64,
    /// When it was completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_ms: Option<i64>,
}

/// The metadata store's attachment records, kept with their chat.
#[async_trait]
pub trait Attachments: Send + Sync {
    /// Stores a new attachment ([`Error::Exists`] if its id is taken); [`Error::CapReached`]
    /// (and nothing stored) when its chat has [`crate::caps::Caps::attachments_per_chat`]
    /// already, uploads not yet completed included.
    async fn create_attachment(&self, org: &str, attachment: &Attachment) -> Result<(), Error>;

    /// The attachment `id` of a chat, if any.
    async fn attachment(&self, org: &str, session_id: &str, id: &str) -> Result<Option<Attachment>, Error>;

    /// A chat's attachments, oldest first.
    async fn attachments(&self, org: &str, session_id: &str) -> Result<Vec<Attachment>, Error>;

    /// Marks an uploading attachment complete at `at_ms`, atomically: of two completions, one
    /// gets the completed record and the other `None` (as does a missing attachment).
    async fn complete_attachment(
        &self,
        org: &str,
        session_id: &str,
        id: &str,
        at_ms: i64,
    ) -> Result<Option<Attachment>, Error>;

    /// Deletes an attachment whose upload is not completed, atomically (a completed one stays):
    /// whether one was deleted. Its upload grant then names nothing.
    async fn abandon_attachment(&self, org: &str, session_id: &str, id: &str) -> Result<bool, Error>;
}

/// Where an attachment's bytes are kept: `attachments/{org}/{session}/{attachment}`.
pub fn object_key(org: &str, session_id: &str, attachment_id: &str) -> String {
    format!("attachments/{org}/{session_id}/{attachment_id}")
}

/// How a client moves an attachment's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transfer {
    /// Straight to or from storage: a pre-signed request the client makes as given.
    Direct {
        /// The HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// The headers the client must send with it (those the signature covers).
        headers: Vec<(String, String)>,
    },
    /// Through Spool's own routes (the embedded store, under `spool serve`).
    ThroughSpool,
}

/// An attachment's bytes, as read from storage.
pub type FileReader = std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>;

/// Where attachments' bytes live (S3; a folder of the data directory), so that on AWS they go
/// straight between the client and storage and never through a function.
///
/// An object is stored once at its key ([`object_key`]) and never replaced; until its upload is
/// completed it is *pending*, and a pending object is removed a day or so after its upload URL
/// expires (an S3 lifecycle rule on its tag; `spool serve`'s sweep), so an upload that is never
/// completed leaves nothing behind.
#[async_trait]
pub trait FileStore: Send + Sync {
    /// How a client sends exactly `size` bytes of `content_type` (whose SHA-256 is `sha256`,
    /// hex, when declared) as `key`, once, for `expires_in`.
    async fn upload(
        &self,
        key: &str,
        content_type: &str,
        size: u64,
        sha256: Option<&str>,
        expires_in: std::time::Duration,
    ) -> Result<Transfer, Error>;

    /// How a client fetches `key`, to be saved as `filename`, for `expires_in`.
    async fn download(
        &self,
        key: &str,
        filename: &str,
        content_type: &str,
        expires_in: std::time::Duration,
    ) -> Result<Transfer, Error>;

    /// The size of what is stored at `key`, if anything is.
    async fn size(&self, key: &str) -> Result<Option<u64>, Error>;

    /// Stores exactly `size` bytes of `body` as `key`, once, for stores that take uploads through
    /// Spool ([`Transfer::ThroughSpool`]); a body of another size is [`Error::Invalid`] and
    /// leaves nothing, a second upload is [`Error::Exists`].
    async fn write(&self, key: &str, size: u64, body: FileReader) -> Result<(), Error>;

    /// Stores `bytes` Spool itself made (not a client's upload) as `key`, replacing what is
    /// there: a runner job's request ([`crate::runner::request_key`]).
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), Error>;

    /// The bytes stored at `key`, if any.
    async fn read(&self, key: &str) -> Result<Option<FileReader>, Error>;

    /// Marks `key` completed: it is kept past the clean-up of pending uploads.
    async fn keep(&self, key: &str) -> Result<(), Error>;

    /// Deletes what is stored at `key` (nothing there is fine).
    async fn delete(&self, key: &str) -> Result<(), Error>;

    /// Stores the completed object at `from` again as `to`, kept (never pending), within the
    /// store: a fork's copy of a file its history names, which stays when the original goes.
    /// Nothing at `from` is [`Error::Missing`]; an object at `to` already (a retry) is fine.
    async fn copy(&self, from: &str, to: &str) -> Result<(), Error>;

    /// The SHA-256 of what is stored at `key` (lower-case hex), if anything is: read once, unless
    /// the store verified and kept it at upload.
    async fn sha256(&self, key: &str) -> Result<Option<String>, Error> {
        match self.read(key).await? {
            Some(reader) => Ok(Some(sha256_of(reader).await?)),
            None => Ok(None),
        }
    }
}

/// The SHA-256 of everything `reader` gives (lower-case hex).
pub async fn sha256_of(mut reader: FileReader) -> Result<String, Error> {
    use sha2::Digest;
    use tokio::io::AsyncReadExt;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0_u8; 64 * 1024];
    loop {
        let n = reader
            .read(&mut buffer)
            .await
            .map_err(|e| Error::unavailable("read an attachment", e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A SHA-256 as a client may send it: 64 hex digits, lower-cased.
pub fn check_sha256(raw: &str) -> Result<String, Error> {
    if raw.len() == 64 && raw.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(raw.to_ascii_lowercase())
    } else {
        Err(Error::invalid(
            "sha256",
            "give the SHA-256 of the file's bytes as 64 hex digits",
        ))
    }
}

/// `Content-Disposition: attachment` for `filename` (a safe base name), with its UTF-8 form.
pub fn content_disposition(filename: &str) -> String {
    let ascii: String = filename
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() && c != '"' && c != '\\') || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded: String = filename
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// What a file may be called in a chat: the base name of `raw` (after its last `/` or `\`),
/// without control or format characters ([`crate::names`]: `\u{202e}txt.exe` is `txt.exe`)
/// and with surrounding dots and spaces trimmed, at most [`MAX_FILENAME_CHARS`] characters
/// (keeping the extension). Empty, `.` or `..` is refused.
pub fn safe_filename(raw: &str) -> Result<String, Error> {
    let base = raw.rsplit(['/', '\\']).next().unwrap_or(raw);
    let cleaned: String = base
        .chars()
        .filter(|c| !c.is_control() && !crate::names::is_format(*c))
        .collect();
    let trimmed = cleaned.trim_matches(|c: char| c == '.' || c.is_whitespace());
    if trimmed.is_empty() {
        return Err(Error::invalid(
            "filename",
            format!(
                "`{}` leaves no name once paths and dots are taken out; name the file",
                raw.escape_debug()
            ),
        ));
    }
    if trimmed.chars().count() <= MAX_FILENAME_CHARS {
        return Ok(trimmed.to_owned());
    }
    // Shorten the stem, keep a short extension.
    let (stem, extension) = match trimmed.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && ext.chars().count() <= 16 => (stem, format!(".{ext}")),
        _ => (trimmed, String::new()),
    };
    let keep = MAX_FILENAME_CHARS - extension.chars().count();
    let stem: String = stem.chars().take(keep).collect();
    Ok(format!("{}{extension}", stem.trim_end_matches('.')))
}

/// A media type as `type/subtype` (parameters dropped), lower-cased; `application/octet-stream`
/// when empty.
pub fn check_content_type(raw: &str) -> Result<String, Error> {
    let essence = raw.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if essence.is_empty() {
        return Ok("application/octet-stream".to_owned());
    }
    let token = |s: &str| {
        !s.is_empty() && s.len() <= 127 && s.chars().all(|c| c.is_ascii_alphanumeric() || "!#$&^_.+-".contains(c))
    };
    match essence.split_once('/') {
        Some((kind, subtype)) if token(kind) && token(subtype) => Ok(essence),
        _ => Err(Error::invalid(
            "content_type",
            format!("`{}` is not a media type such as `text/plain`", raw.escape_debug()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_filenames_become_safe_base_names_or_are_refused() {
        assert_eq!(safe_filename("report.pdf").unwrap(), "report.pdf");
        assert_eq!(safe_filename("../../etc/passwd").unwrap(), "passwd");
        assert_eq!(safe_filename("a/b").unwrap(), "b");
        assert_eq!(safe_filename("C:\\Users\\me\\notes.txt").unwrap(), "notes.txt");
        assert_eq!(safe_filename("bad\0name\n.txt").unwrap(), "badname.txt");
        assert_eq!(safe_filename("  .hidden.  ").unwrap(), "hidden");
        assert_eq!(safe_filename("\u{202e}txt.exe").unwrap(), "txt.exe");
        assert_eq!(safe_filename("in\u{200b}voice\u{2066}.pdf").unwrap(), "invoice.pdf");
        for refused in [
            "",
            ".",
            "..",
            "...",
            "a/..",
            "dir/",
            "\0\0",
            " . ",
            "\u{202e}",
            ".\u{200b}.",
        ] {
            assert!(safe_filename(refused).is_err(), "{refused:?}");
        }
        let long = format!("{}.tar.gz", "x".repeat(10_000));
        let kept = safe_filename(&long).unwrap();
        assert_eq!(kept.chars().count(), MAX_FILENAME_CHARS);
        assert!(kept.ends_with(".gz"), "{kept}");
        let no_extension = safe_filename(&"y".repeat(10_000)).unwrap();
        assert_eq!(no_extension.chars().count(), MAX_FILENAME_CHARS);
    }

    #[test]
    fn downloads_are_named_safely() {
        assert_eq!(
            content_disposition("report.pdf"),
            "attachment; filename=\"report.pdf\"; filename*=UTF-8''report.pdf"
        );
        assert_eq!(
            content_disposition("naïve \"q\".txt"),
            "attachment; filename=\"na_ve _q_.txt\"; filename*=UTF-8''na%C3%AFve%20%22q%22.txt"
        );
        assert_eq!(object_key("o", "s", "a"), "attachments/o/s/a");
    }

    #[test]
    fn content_types_are_media_types() {
        assert_eq!(check_content_type("Image/PNG").unwrap(), "image/png");
        assert_eq!(check_content_type("text/plain; charset=utf-8").unwrap(), "text/plain");
        assert_eq!(check_content_type("").unwrap(), "application/octet-stream");
        for bad in ["text", "text/", "/plain", "text/pl ain", "a/b/c", "text/pl\u{7}ain"] {
            assert!(check_content_type(bad).is_err(), "{bad:?}");
        }
    }
}
