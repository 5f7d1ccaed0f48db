//! # The embedded backend's ports, built in one place
//!
//! [`Stores`] is what a process runs on with the embedded backend: everything in one data
//! directory, the stream log (`spool.db`, `pages/`), the metadata store (`metadata.db`, also
//! the turn queue) and chats' files.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use spool_log::{aggregate::Aggregates, error::Error};

use crate::{EmbeddedLog, EmbeddedMetadata, LocalFiles, Options};

/// The embedded backend's ports over one data directory.
#[derive(Debug, Clone)]
pub struct Stores {
    /// The stream log.
    pub log: Arc<EmbeddedLog>,
    /// Organizations, keys, workspaces, agents and the rest; also the turn queue.
    pub metadata: Arc<EmbeddedMetadata>,
    /// Chats' files' bytes.
    pub files: Arc<LocalFiles>,
    dir: PathBuf,
}

/// Why [`Stores::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The stream log could not be opened.
    #[error("cannot open the embedded store in {}", .dir.display())]
    Log {
        /// The data directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: Error,
    },
    /// The metadata store could not be opened.
    #[error("cannot open the embedded directory in {}", .dir.display())]
    Metadata {
        /// The data directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: Error,
    },
}

impl Stores {
    /// Opens (creating if need be) the stores in `dir`, the log set up with `options`.
    pub fn open(dir: &Path, options: Options) -> Result<Self, OpenError> {
        let log = EmbeddedLog::open(dir, options).map_err(|source| OpenError::Log {
            dir: dir.to_path_buf(),
            source,
        })?;
        let metadata = EmbeddedMetadata::open(dir).map_err(|source| OpenError::Metadata {
            dir: dir.to_path_buf(),
            source,
        })?;
        Ok(Self {
            log: Arc::new(log),
            metadata: Arc::new(metadata),
            files: Arc::new(LocalFiles::new(dir)),
            dir: dir.to_path_buf(),
        })
    }

    /// Where workspaces' feed events and audit records are handed over: the log itself, at
    /// once (there is no queue).
    pub fn aggregates(&self) -> Arc<dyn Aggregates> {
        Arc::new(spool_log::aggregate::Direct(self.log.clone()))
    }

    /// What this backend is, for people: the data directory.
    pub fn description(&self) -> String {
        format!("embedded store in {}", self.dir.display())
    }
}
