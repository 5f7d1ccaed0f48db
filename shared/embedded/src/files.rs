//! Attachments' bytes in the data directory: `{data}/attachments/{org}/{session}/{attachment}`
//! (folders 0700, files 0600). Clients move them through `spool serve`'s own routes
//! ([`Transfer::ThroughSpool`]), which write with [`FileStore::write`] (to a temporary file,
//! exactly the declared size, then linked into place, once) and read with [`FileStore::read`].

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use async_trait::async_trait;
use spool_chat::attachment::{FileReader, FileStore, Transfer};
use spool_log::error::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The embedded store of attachments' bytes.
#[derive(Debug, Clone)]
pub struct LocalFiles {
    root: PathBuf,
}

impl LocalFiles {
    /// The store under `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            root: data_dir.to_path_buf(),
        }
    }

    /// Where `key` is kept. Keys are made by [`spool_chat::attachment::object_key`] from
    /// checked ids; one with a `..` or an absolute part is refused all the same.
    pub fn path(&self, key: &str) -> Result<PathBuf, Error> {
        let safe = !key.is_empty()
            && key
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\\'));
        if !safe {
            return Err(Error::invalid("attachment", format!("`{key}` is not a storage key")));
        }
        Ok(self.root.join(key))
    }

    /// The folder `path` goes in, made (owner-only) if it is not there.
    async fn folder_of(&self, path: &Path) -> Result<PathBuf, Error> {
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        tokio::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .await
            .map_err(|e| Error::unavailable("make a folder for Spool's files", e))?;
        Ok(dir)
    }
}

/// A file removed when this is dropped (nothing there is fine).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A unique enough name for a temporary file.
fn uuid_like() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

#[async_trait]
impl FileStore for LocalFiles {
    async fn upload(&self, key: &str, _: &str, _: u64, _: Option<&str>, _: Duration) -> Result<Transfer, Error> {
        self.path(key)?;
        Ok(Transfer::ThroughSpool)
    }

    async fn download(&self, key: &str, _: &str, _: &str, _: Duration) -> Result<Transfer, Error> {
        self.path(key)?;
        Ok(Transfer::ThroughSpool)
    }

    /// Writes `bytes` as `key` through a temporary file renamed into place, replacing it.
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), Error> {
        let path = self.path(key)?;
        let dir = self.folder_of(&path).await?;
        let io = |e: std::io::Error| Error::unavailable("write a file of Spool's", e);
        let temporary = dir.join(format!(".{}.part", uuid_like()));
        let _temporary = RemoveOnDrop(temporary.clone());
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .await
            .map_err(io)?;
        file.write_all(&bytes).await.map_err(io)?;
        file.sync_all().await.map_err(io)?;
        tokio::fs::rename(&temporary, &path).await.map_err(io)
    }

    /// Writes exactly `size` bytes from `body` as `key`; more or fewer is refused and nothing
    /// is kept. An object already there is refused ([`Error::Exists`]): an upload happens once.
    async fn write(&self, key: &str, size: u64, mut body: FileReader) -> Result<(), Error> {
        let path = self.path(key)?;
        if tokio::fs::try_exists(&path).await.unwrap_or(false) {
            return Err(Error::Exists {
                what: format!("the upload of `{key}`"),
            });
        }
        let dir = self.folder_of(&path).await?;
        let io = |e: std::io::Error| Error::unavailable("write an attachment", e);
        let temporary = dir.join(format!(".{}.part", uuid_like()));
        // Removed however this ends: an error, or the request dropped (a client gone, a deadline).
        let _temporary = RemoveOnDrop(temporary.clone());
        async {
            let mut file = tokio::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temporary)
                .await
                .map_err(io)?;
            let mut buffer = vec![0_u8; 256 * 1024];
            let mut written: u64 = 0;
            loop {
                // A body that fails to arrive is the sender's problem, not the store's.
                let n = body.read(&mut buffer).await.map_err(|e| {
                    Error::invalid(
                        "upload",
                        format!("the body could not be read to its end ({e}); send it again"),
                    )
                })?;
                if n == 0 {
                    break;
                }
                written += n as u64;
                if written > size {
                    return Err(Error::invalid(
                        "upload",
                        format!("the body is longer than the declared {size} bytes"),
                    ));
                }
                file.write_all(&buffer[..n]).await.map_err(io)?;
            }
            if written != size {
                return Err(Error::invalid(
                    "upload",
                    format!("the body has {written} bytes; {size} were declared"),
                ));
            }
            file.flush().await.map_err(io)?;
            file.sync_all().await.map_err(io)?;
            // Create-only: a concurrent upload of the same key that finished first wins.
            tokio::fs::hard_link(&temporary, &path).await.map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Error::Exists {
                        what: format!("the upload of `{key}`"),
                    }
                } else {
                    io(e)
                }
            })
        }
        .await
    }

    async fn read(&self, key: &str) -> Result<Option<FileReader>, Error> {
        match tokio::fs::File::open(self.path(key)?).await {
            Ok(file) => Ok(Some(Box::pin(file))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::unavailable("read an attachment", e)),
        }
    }

    /// Nothing to mark: `spool serve`'s sweep goes by the attachments' records.
    async fn keep(&self, key: &str) -> Result<(), Error> {
        self.path(key).map(drop)
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, Error> {
        match tokio::fs::metadata(self.path(key)?).await {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::unavailable("read an attachment's size", e)),
        }
    }

    /// A hard link: an object is never changed once stored, and deleting either name leaves
    /// the other, so the bytes are kept once for both.
    async fn copy(&self, from: &str, to: &str) -> Result<(), Error> {
        let (source, target) = (self.path(from)?, self.path(to)?);
        self.folder_of(&target).await?;
        let io = |e: std::io::Error| Error::unavailable("copy an attachment", e);
        match tokio::fs::hard_link(&source, &target).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::Missing {
                what: format!("the bytes of `{from}`"),
            }),
            Err(e) => Err(io(e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), Error> {
        match tokio::fs::remove_file(self.path(key)?).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::unavailable("delete an attachment", e)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_are_written_once_exactly_as_declared() {
        let dir = tempfile::tempdir().unwrap();
        let files = LocalFiles::new(dir.path());
        let key = spool_chat::attachment::object_key("org_a", "ses_1", "att_1");
        assert_eq!(
            files
                .upload(&key, "text/plain", 5, None, Duration::from_secs(60))
                .await
                .unwrap(),
            Transfer::ThroughSpool
        );
        assert_eq!(files.size(&key).await.unwrap(), None);
        // Too long and too short are refused, and leave nothing
        assert!(files.write(&key, 5, Box::pin(&b"hello!"[..])).await.is_err());
        assert!(files.write(&key, 5, Box::pin(&b"hell"[..])).await.is_err());
        assert_eq!(files.size(&key).await.unwrap(), None);
        files.write(&key, 5, Box::pin(&b"hello"[..])).await.unwrap();
        assert_eq!(files.size(&key).await.unwrap(), Some(5));
        assert!(
            matches!(
                files.write(&key, 5, Box::pin(&b"again"[..])).await,
                Err(Error::Exists { .. })
            ),
            "once"
        );
        assert_eq!(std::fs::read(files.path(&key).unwrap()).unwrap(), b"hello");
        assert_eq!(
            files.sha256(&key).await.unwrap().as_deref(),
            Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
        );
        let mut read = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut files.read(&key).await.unwrap().unwrap(), &mut read)
            .await
            .unwrap();
        assert_eq!(read, b"hello");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(files.path(&key).unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let leftovers = std::fs::read_dir(files.path(&key).unwrap().parent().unwrap())
            .unwrap()
            .count();
        assert_eq!(leftovers, 1, "no temporary files left");
        files.delete(&key).await.unwrap();
        files.delete(&key).await.unwrap();
        assert_eq!(files.size(&key).await.unwrap(), None);
        for bad in ["", "../x", "a/../b", "/etc/passwd", "a//b", "a\\\\b"] {
            assert!(files.path(bad).is_err(), "{bad}");
        }
    }
}
