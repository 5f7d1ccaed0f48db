//! # The directory's API keys, as the handshake asks for them
//!
//! The handshake exchanges an API key for a token: it looks the key up by its public id here,
//! then checks the secret against the hash the directory keeps and records the outcome (both
//! the chat API's, with `spool-auth`).

use std::sync::Arc;

use crate::directory::{ApiKeyRecord, Directory};
use spool_log::error::Error;

/// The directory's API keys.
#[derive(Clone)]
pub struct KeyDirectory {
    directory: Arc<dyn Directory>,
}

impl KeyDirectory {
    /// The keys of `directory`.
    pub fn new(directory: Arc<dyn Directory>) -> Self {
        Self { directory }
    }

    /// The API key with public id `key_id`, if the directory has it.
    pub async fn key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, Error> {
        self.directory.api_key(key_id).await
    }
}
