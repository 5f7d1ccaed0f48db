//! # A chat's files, in the form each runtime takes them
//!
//! A file a person uploaded is a [`Message::File`] in the conversation, where its `system`
//! event was. Model runtimes get its content in the message ([`inline`]): an image as an image
//! part (PNG, JPEG, GIF or WebP, up to a size), a text-like file as its text with its name (up
//! to a size), anything else as a note naming it, its type and size. CLI agents get the files
//! themselves ([`place`]): the chat's current files (the newest of each name) are copied into
//! the chat's folder, `attachments/{filename}`, before the CLI runs, and its input file lists
//! their paths.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use base64::Engine as _;
use spool_domain::{
    attachment::{Attachment, AttachmentStatus, FileStore, object_key},
    chat::event::FileRef,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::runtime::{Error, Message};

/// A file of the chat, as a runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Attached {
    /// The file.
    pub file: FileRef,
    /// Where an agent reads it, relative to the chat's folder (`attachments/{filename}`).
    pub path: String,
    /// Its content, for model runtimes ([`inline`]); `None`: named in a note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Inline>,
}

/// A file's content in a model's request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Inline {
    /// An image, base64-encoded.
    Image {
        /// Its media type (`image/png`, …).
        media_type: String,
        /// Its bytes, base64.
        data: String,
    },
    /// A text-like file's text.
    Text {
        /// The text.
        text: String,
    },
}

/// How much of a file a model gets whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineLimits {
    /// The largest text-like file given as text (`SPOOL_ATTACHMENT_TEXT_BYTES`).
    pub text_bytes: u64,
    /// The largest image given as an image (`SPOOL_ATTACHMENT_IMAGE_BYTES`).
    pub image_bytes: u64,
}

impl Default for InlineLimits {
    fn default() -> Self {
        Self {
            text_bytes: 100_000,
            image_bytes: 5 * 1024 * 1024,
        }
    }
}

/// Where a runtime reads the chat's files from.
#[derive(Clone)]
pub struct FileAccess {
    /// The store.
    pub store: Arc<dyn FileStore>,
    /// The organization whose files these are.
    pub org: String,
    /// The chat.
    pub session_id: String,
}

impl std::fmt::Debug for FileAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileAccess")
            .field("org", &self.org)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl FileAccess {
    async fn bytes(&self, file: &FileRef, max: u64) -> Result<Option<Vec<u8>>, spool_domain::Error> {
        if file.size > max {
            return Ok(None);
        }
        let key = object_key(&self.org, &self.session_id, &file.id);
        let Some(reader) = self.store.read(&key).await? else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity(usize::try_from(file.size).unwrap_or(0));
        reader
            .take(max + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| spool_domain::Error::unavailable("read an attachment", e))?;
        Ok((bytes.len() as u64 <= max).then_some(bytes))
    }
}

/// The images every model runtime takes as images.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Extensions of files that are text whatever their declared type.
const TEXT_EXTENSIONS: &[&str] = &[
    "txt", "md", "markdown", "csv", "tsv", "json", "jsonl", "yaml", "yml", "toml", "xml", "html", "htm", "css", "js",
    "mjs", "ts", "tsx", "jsx", "rs", "py", "rb", "go", "java", "kt", "c", "h", "cc", "cpp", "hpp", "cs", "swift", "sh",
    "bash", "zsh", "sql", "log", "ini", "cfg", "conf", "env", "tex", "svg", "graphql", "proto", "lua", "php",
];

/// Whether a file is text a model can read.
pub fn is_text_like(file: &FileRef) -> bool {
    let kind = file.content_type.as_str();
    let extension = file
        .filename
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    kind.starts_with("text/")
        || kind.ends_with("+json")
        || kind.ends_with("+xml")
        || matches!(
            kind,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-yaml"
                | "application/yaml"
                | "application/toml"
                | "application/sql"
                | "application/x-sh"
        )
        || TEXT_EXTENSIONS.contains(&extension.as_str())
}

/// Fills in the content of the conversation's files for a model: images and text-like files
/// within `limits` (text that is not UTF-8 stays a note).
pub async fn inline(
    messages: &mut [Message],
    access: &FileAccess,
    limits: InlineLimits,
) -> Result<(), spool_domain::Error> {
    for message in messages.iter_mut() {
        let Message::File(attached) = message else { continue };
        let file = &attached.file;
        attached.content = if IMAGE_TYPES.contains(&file.content_type.as_str()) {
            access
                .bytes(file, limits.image_bytes)
                .await?
                .map(|bytes| Inline::Image {
                    media_type: file.content_type.clone(),
                    data: base64::engine::general_purpose::STANDARD.encode(bytes),
                })
        } else if is_text_like(file) {
            access
                .bytes(file, limits.text_bytes)
                .await?
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .map(|text| Inline::Text { text })
        } else {
            None
        };
    }
    Ok(())
}

/// The chat's current files, from its records: the newest completed file of each name, in the
/// order they were completed.
pub fn current(mut records: Vec<Attachment>) -> Vec<Attached> {
    records.retain(|a| a.status == AttachmentStatus::Complete);
    records.sort_by_key(|a| (a.completed_ms, a.created_ms));
    let mut files: Vec<Attached> = Vec::new();
    for a in &records {
        files.retain(|f| f.file.filename != a.filename);
        files.push(Attached {
            file: spool_domain::service::file_ref(a),
            path: spool_domain::service::agent_path(&a.filename),
            content: None,
        });
    }
    files
}

/// What a model is told about a file it is not given whole.
pub fn note(attached: &Attached) -> String {
    let f = &attached.file;
    format!(
        "User has uploaded {} ({}, {}). Its content is not shown here.",
        f.filename,
        spool_domain::service::human_size(f.size),
        f.content_type
    )
}

/// The heading of a file a model is given.
pub fn heading(attached: &Attached) -> String {
    let f = &attached.file;
    format!(
        "User has uploaded {} ({}, {}):",
        f.filename,
        spool_domain::service::human_size(f.size),
        f.content_type
    )
}

/// Copies `files` into `{chat_dir}/attachments/`, each under its name, unless the copy there is
/// already that file; answers their paths. The folder and the files are replaced, never
/// followed, if an agent left a link in their place.
pub async fn place(files: &[Attached], access: &FileAccess, chat_dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let failed = |what: &str, e: &dyn std::fmt::Display| Error::Failed(format!("cannot {what}: {e}"));
    let dir = chat_dir.join("attachments");
    match tokio::fs::symlink_metadata(&dir).await {
        Ok(m) if m.is_dir() => {}
        Ok(_) => tokio::fs::remove_file(&dir)
            .await
            .map_err(|e| failed("replace the attachments folder", &e))?,
        Err(_) => {}
    }
    tokio::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .await
        .map_err(|e| failed("make the attachments folder", &e))?;
    // Which file each name holds, so an unchanged file is not copied again.
    let manifest_path = chat_dir.join("attachments.json");
    let mut manifest: HashMap<String, String> = tokio::fs::read(&manifest_path)
        .await
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut paths = Vec::with_capacity(files.len());
    for attached in files {
        let f = &attached.file;
        // Names are safe base names already; check again, since a path is made of it.
        if matches!(f.filename.as_str(), "" | "." | "..") || f.filename.contains(['/', '\\', '\0']) {
            return Err(Error::Failed(format!(
                "the file name `{}` cannot name a file",
                f.filename
            )));
        }
        let target = dir.join(&f.filename);
        let unchanged = manifest.get(&f.filename) == Some(&f.id)
            && tokio::fs::symlink_metadata(&target)
                .await
                .is_ok_and(|m| m.is_file() && m.len() == f.size);
        if !unchanged {
            copy(access, f, &dir, &target).await?;
            manifest.insert(f.filename.clone(), f.id.clone());
        }
        paths.push(target);
    }
    let json = serde_json::to_vec(&manifest).unwrap_or_default();
    tokio::fs::write(&manifest_path, json)
        .await
        .map_err(|e| failed("write the attachments' list", &e))?;
    Ok(paths)
}

/// Copies one file to a new temporary file in `dir`, then renames it over `target`.
async fn copy(access: &FileAccess, file: &FileRef, dir: &Path, target: &Path) -> Result<(), Error> {
    let key = object_key(&access.org, &access.session_id, &file.id);
    let Some(mut reader) = access.store.read(&key).await? else {
        return Err(Error::Failed(format!(
            "the file {} is missing from storage; upload it again",
            file.filename
        )));
    };
    let temporary = dir.join(format!(".{}.part", spool_domain::workspace::new_id("tmp")));
    let result = async {
        let mut out = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .await?;
        tokio::io::copy(&mut reader, &mut out).await?;
        out.flush().await?;
        tokio::fs::rename(&temporary, target).await
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&temporary).await;
    }
    result.map_err(|e| Error::Failed(format!("cannot place the file {}: {e}", file.filename)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, kind: &str) -> FileRef {
        FileRef {
            id: "att_1".into(),
            filename: name.into(),
            content_type: kind.into(),
            size: 1,
        }
    }

    #[test]
    fn text_is_known_by_type_or_extension() {
        assert!(is_text_like(&file("a.bin", "text/plain")));
        assert!(is_text_like(&file("a", "application/ld+json")));
        assert!(is_text_like(&file("main.rs", "application/octet-stream")));
        assert!(!is_text_like(&file("a.pdf", "application/pdf")));
        assert!(!is_text_like(&file("a.png", "image/png")));
    }
}
