//! # Subscriptions: durable cursors that wake workers
//!
//! The Durable Streams protocol's reserved subscription API (`{stream-url}/__ds/...`,
//! `PROTOCOL.md` sections 6 and 7). A subscription links streams, by a glob `pattern` and by
//! name, keeps an acked offset per linked stream, and when a linked stream's tail passes its
//! acked offset and nobody is working, opens a *wake*: a new `generation` with a fresh
//! `wake_id`. A wake goes out as a signed webhook `POST`, or as an event appended to a wake
//! stream that workers race to claim. Whoever holds the wake acks offsets with a token scoped
//! to that wake; a stale generation or wake is `FENCED`.
//!
//! - [`spec`]: the configuration a client sends, validated, and the SSRF rules for webhook URLs;
//! - [`address`]: which addresses a webhook may reach ([`address::is_public`]);
//! - [`record`]: the stored record and its transitions, without I/O;
//! - [`service`]: [`service::Subscriptions`], which drives the record over the ports below.
//!
//! The ports: [`SubscriptionStore`] keeps records with a version for compare-and-set (the
//! metadata table on AWS, SQLite in `spool serve`); [`crate::jobs::Deferred`] runs a
//! [`SubscriptionJob`] later (the maintenance queue with a delay on AWS, a task in `spool
//! serve`); [`Outbound`] makes the webhook's `POST`; [`WebhookSigner`] signs (Ed25519, its
//! public key in the JWKS) and makes callback tokens.
//!
//! What differs from the reference server: a pattern links a stream at its first append after
//! the subscription is made, at the offset before that append (so nothing is replayed and
//! nothing missed); existing streams that are not appended to are not listed, since the AWS log
//! has no listing index to backfill from.

pub mod address;
pub mod record;
pub mod refusal;
pub mod service;
pub mod spec;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use record::Subscription;

/// Work on a subscription that runs later, off the request path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionJob {
    /// The subscription's organization.
    pub org: String,
    /// Its id.
    pub id: String,
    /// The wake this job is for: a job for an older one does nothing.
    pub generation: u64,
    /// What to do.
    pub kind: JobKind,
    /// The wake's failed deliveries when this job was scheduled: a delivery job whose wake
    /// failed again since (it ran twice) does nothing.
    #[serde(default)]
    pub attempt: u32,
}

/// What a [`SubscriptionJob`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Deliver the wake: `POST` the webhook (again, after a failure), or append the wake event.
    Deliver,
    /// End the wake if its lease ran out, and wake again if work is pending.
    Expire,
}

/// A stored record and the version a compare-and-set names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The record.
    pub record: Subscription,
    /// Its version: 1 when created, one more on every save.
    pub version: u64,
}

/// Where subscriptions are kept, per organization.
#[async_trait]
pub trait SubscriptionStore: Send + Sync {
    /// The subscription, if it exists.
    async fn get(&self, org: &str, id: &str) -> Result<Option<Versioned>, Error>;

    /// Saves `record` if its stored version is still `expected` (`None`: if it does not exist);
    /// `false` when another save came first. A new record past the organization's cap on
    /// subscriptions (the store is given it) is [`Error::CapReached`], and nothing is stored.
    async fn save(&self, org: &str, record: &Subscription, expected: Option<u64>) -> Result<bool, Error>;

    /// Deletes the subscription; `false` if there was none.
    async fn delete(&self, org: &str, id: &str) -> Result<bool, Error>;

    /// Every subscription of the organization.
    async fn list(&self, org: &str) -> Result<Vec<Subscription>, Error>;
}

/// A webhook receiver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Its status.
    pub status: u16,
    /// Its body (the first bytes of it).
    pub body: Vec<u8>,
}

/// Makes webhook requests.
#[async_trait]
pub trait Outbound: Send + Sync {
    /// `POST`s `body` (JSON) to `url` with `headers`; `Err` when no answer came (refused,
    /// timed out, or the name resolved to an address webhooks may not reach).
    async fn post(&self, url: &str, headers: &[(&'static str, String)], body: Vec<u8>) -> Result<Reply, String>;
}

/// Signs webhook requests and callback tokens.
pub trait WebhookSigner: Send + Sync {
    /// The signing key's id, as in the JWKS.
    fn kid(&self) -> String;
    /// An Ed25519 signature of `message`.
    fn sign(&self, message: &[u8]) -> Vec<u8>;
    /// An HMAC-SHA256 of `message` with a key of the server's own.
    fn mac(&self, message: &[u8]) -> [u8; 32];
    /// The public keys, as a JSON Web Key Set.
    fn jwks(&self) -> serde_json::Value;
}
