//! # Organizations and their API keys
//!
//! An organization owns everything else: its streams live under `o/{org}/`, and its API keys
//! are what the handshake exchanges for a token. A key is shown once, when it is made; the
//! directory keeps only a hash of its secret (see `spool-auth`).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use spool_log::error::Error;

/// An organization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Org {
    /// Its id: 1 to 64 letters, digits, `-` or `_` (one segment of a storage key).
    pub id: String,
    /// Its display name.
    pub name: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: i64,
}

/// What the directory keeps of an API key: never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// The key's public id, the part of the key before its secret.
    pub key_id: String,
    /// The organization the key acts for.
    pub org_id: String,
    /// The SHA-256 of the key's secret, in lowercase hex.
    pub secret_hash: String,
    /// The capabilities tokens issued for this key carry (e.g. `agent`).
    pub capabilities: Vec<String>,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: i64,
}

/// Organizations and API keys.
#[async_trait]
pub trait Directory: Send + Sync {
    /// Stores a new organization; [`Error::Exists`] if its id is taken.
    async fn create_org(&self, org: &Org) -> Result<(), Error>;

    /// The organization with this id, if any.
    async fn org(&self, id: &str) -> Result<Option<Org>, Error>;

    /// Stores a new API key of an existing organization ([`Error::Missing`] otherwise);
    /// [`Error::Exists`] if its id is taken.
    async fn add_api_key(&self, key: &ApiKeyRecord) -> Result<(), Error>;

    /// The API key with this id, if any.
    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, Error>;

    /// Deletes the API key with this id, so no handshake accepts it again; what it was, if it
    /// existed.
    async fn remove_api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, Error>;

    /// The organization that owns the shared workspace root `root` (a resolved path): `org`,
    /// which claims it now, if no organization had; otherwise the one that did. Atomic: of two
    /// organizations claiming at once, one owns the root and both are told which.
    async fn claim_root(&self, root: &str, org: &str) -> Result<String, Error>;

    /// The organization that owns the shared workspace root `root` (a resolved path), if one
    /// has claimed it; claims nothing.
    async fn root_owner(&self, root: &str) -> Result<Option<String>, Error>;
}

/// The organization's audit stream, within its namespace (`o/{org}/audit`): what was done with
/// its credentials. The chat API writes it; clients may only read it.
pub const AUDIT_STREAM: &str = "audit";

/// "organization `{id}`", for errors.
pub fn org_label(id: &str) -> String {
    format!("organization `{id}`")
}

/// "API key `{id}`", for errors.
pub fn key_label(id: &str) -> String {
    format!("API key `{id}`")
}
