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
use spool_chat::{
    attachment::{Attachment, FileStore, object_key},
    event::FileRef,
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
    /// The most bytes of files one request carries, newest files first; older ones are named in
    /// a note, so a chat of many images cannot exhaust the worker's memory.
    pub total_bytes: u64,
}

impl Default for InlineLimits {
    fn default() -> Self {
        Self {
            text_bytes: 100_000,
            image_bytes: 5 * 1024 * 1024,
            total_bytes: 20 * 1024 * 1024,
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
    async fn bytes(&self, file: &FileRef, max: u64) -> Result<Option<Vec<u8>>, spool_log::error::Error> {
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
            .map_err(|e| spool_log::error::Error::unavailable("read an attachment", e))?;
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
/// within `limits`, the newest first until the request's budget is spent (text that is not
/// UTF-8, and what does not fit, stays a note).
pub async fn inline(
    messages: &mut [Message],
    access: &FileAccess,
    limits: InlineLimits,
) -> Result<(), spool_log::error::Error> {
    let mut budget = limits.total_bytes;
    for message in messages.iter_mut().rev() {
        let Message::File(attached) = message else { continue };
        let file = &attached.file;
        if file.size > budget {
            attached.content = None;
            continue;
        }
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
        if attached.content.is_some() {
            budget -= file.size;
        }
    }
    Ok(())
}

/// The chat's current files, from its records
/// ([`spool_chat::service::current_files`]), as a runtime sees them.
pub fn current(records: Vec<Attachment>) -> Vec<Attached> {
    spool_chat::service::current_files(records)
        .iter()
        .map(|a| Attached {
            file: spool_chat::service::file_ref(a),
            path: spool_chat::service::agent_path(&a.filename),
            content: None,
        })
        .collect()
}

/// What a model is told about a file it is not given whole.
pub fn note(attached: &Attached) -> String {
    format!("{}. Its content is not shown here.", uploaded(attached))
}

/// The heading of a file a model is given.
pub fn heading(attached: &Attached) -> String {
    format!("{}:", uploaded(attached))
}

/// "User has uploaded {name} ({size}, {type})".
fn uploaded(attached: &Attached) -> String {
    let f = &attached.file;
    format!(
        "User has uploaded {} ({}, {})",
        f.filename,
        spool_chat::service::human_size(f.size),
        f.content_type
    )
}

/// Copies `files` into `{chat_dir}/attachments/`, each under its name, unless the copy there is
/// already that file; answers where each is, or `None` for one missing from storage (the CLI
/// is told, and the turn goes on). Everything happens relative to the folder's own handle,
/// opened without following links: whatever an agent left in the folder's place or a file's
/// (a link, a file, a directory) is moved aside or replaced, never followed.
pub async fn place(files: &[Attached], access: &FileAccess, chat_dir: &Path) -> Result<Vec<Option<PathBuf>>, Error> {
    let failed = |what: &str, e: std::io::Error| Error::Failed(format!("cannot {what}: {e}"));
    let folder = Folder::open(chat_dir, "attachments").map_err(|e| failed("make the attachments folder", e))?;
    // Which file each name holds, so an unchanged file is not copied again. Its name starts
    // with a dot, which no safe filename does.
    let mut manifest: HashMap<String, String> = folder
        .read(MANIFEST)
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut placed = Vec::with_capacity(files.len());
    for attached in files {
        let f = &attached.file;
        // Names are safe base names already; check again, since a path is made of it.
        if matches!(f.filename.as_str(), "" | "." | "..")
            || f.filename.starts_with('.')
            || f.filename.contains(['/', '\\', '\0'])
        {
            return Err(Error::Failed(format!(
                "the file name `{}` cannot name a file",
                f.filename
            )));
        }
        let unchanged = manifest.get(&f.filename) == Some(&f.id) && folder.regular_size(&f.filename) == Some(f.size);
        if !unchanged {
            let key = object_key(&access.org, &access.session_id, &f.id);
            let Some(mut reader) = access.store.read(&key).await? else {
                tracing::warn!(org = %access.org, session = %access.session_id, attachment = %f.id, "a chat's file is missing from storage");
                placed.push(None);
                continue;
            };
            let (temporary, file) = folder.create_temporary().map_err(|e| failed("place a file", e))?;
            let written = async {
                let mut out = tokio::fs::File::from_std(file);
                tokio::io::copy(&mut reader, &mut out).await?;
                out.flush().await
            }
            .await;
            if let Err(e) = written.and_then(|()| folder.replace(&temporary, &f.filename)) {
                folder.remove(&temporary);
                return Err(failed(&format!("place the file {}", f.filename), e));
            }
            manifest.insert(f.filename.clone(), f.id.clone());
        }
        placed.push(Some(chat_dir.join("attachments").join(&f.filename)));
    }
    let json = serde_json::to_vec(&manifest).unwrap_or_default();
    folder
        .write(MANIFEST, &json)
        .map_err(|e| failed("write the attachments' list", e))?;
    Ok(placed)
}

/// The attachments folder's list of which file each name holds.
const MANIFEST: &str = ".spool-manifest.json";

/// A folder used only through its handle, opened without following a link, so a link an agent
/// puts in place of the folder or of a file in it is never followed.
struct Folder(std::os::fd::OwnedFd);

impl Folder {
    /// `name` in `parent` (made, mode 0700), opened as a folder; a link or a file there is
    /// removed first.
    fn open(parent: &Path, name: &str) -> std::io::Result<Self> {
        use rustix::fs::{AtFlags, Mode, OFlags};
        let directory = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
        let parent = rustix::fs::open(parent, directory, Mode::empty())?;
        let make = || match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700)) {
            Err(e) if e != rustix::io::Errno::EXIST => Err(e),
            _ => Ok(()),
        };
        make()?;
        match rustix::fs::openat(&parent, name, directory, Mode::empty()) {
            Ok(fd) => Ok(Self(fd)),
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                rustix::fs::unlinkat(&parent, name, AtFlags::empty())?;
                make()?;
                Ok(Self(rustix::fs::openat(&parent, name, directory, Mode::empty())?))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The contents of the regular file `name`, if there is one.
    fn read(&self, name: &str) -> Option<Vec<u8>> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.0, name, flags, Mode::empty()).ok()?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut bytes).ok()?;
        Some(bytes)
    }

    /// The size of the regular file `name` (not a link, a folder or anything else).
    fn regular_size(&self, name: &str) -> Option<u64> {
        let stat = rustix::fs::statat(&self.0, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile)
            .then(|| u64::try_from(stat.st_size).ok())
            .flatten()
    }

    /// A new, private temporary file in the folder: its name and the open file.
    fn create_temporary(&self) -> std::io::Result<(String, std::fs::File)> {
        use rustix::fs::{Mode, OFlags};
        let name = format!(".{}.part", spool_chat::workspace::new_id("tmp"));
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.0, &name, flags, Mode::from_raw_mode(0o600))?;
        Ok((name, std::fs::File::from(fd)))
    }

    /// Renames `temporary` to `name`, replacing a file or a link there; a folder there is moved
    /// aside first (to a hidden name: it is the agent's to tidy).
    fn replace(&self, temporary: &str, name: &str) -> std::io::Result<()> {
        let stat = rustix::fs::statat(&self.0, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
        if stat.is_ok_and(|s| rustix::fs::FileType::from_raw_mode(s.st_mode) == rustix::fs::FileType::Directory) {
            let aside = format!(".{}.moved-aside", spool_chat::workspace::new_id("dir"));
            rustix::fs::renameat(&self.0, name, &self.0, &aside)?;
        }
        Ok(rustix::fs::renameat(&self.0, temporary, &self.0, name)?)
    }

    /// Writes `name` whole: a temporary file renamed over it.
    fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let (temporary, mut file) = self.create_temporary()?;
        let written = std::io::Write::write_all(&mut file, bytes).and_then(|()| self.replace(&temporary, name));
        if written.is_err() {
            self.remove(&temporary);
        }
        written
    }

    /// Removes the file `name`, if it is there.
    fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.0, name, rustix::fs::AtFlags::empty());
    }
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
