//! # Chat webhooks, in the Standard Webhooks format
//!
//! A workspace registers endpoints ([`Hook`]) for what happens in its chats: a turn completed
//! or failed, an agent waits on a person (a question, an approval, a plan), a task was made.
//! These are the workspace's feed events ([`FeedEvent`]), pushed: each one a webhook event
//! ([`HookEvent::of`]) becomes a [`Delivery`] per endpoint that wants it, whose id is the feed
//! event's (`msg_…`), so an event handed over twice (a redelivered feed batch, a retried step) is
//! delivered once. A delivery is signed as Standard Webhooks asks (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature: v1,base64(HMAC-SHA256(secret, id.timestamp.body))`)
//! and retried on the schedule [`RETRY_SCHEDULE`] by a job ([`spool_log::jobs::MaintenanceJob`])
//! until the endpoint answers 2xx, every attempt recorded where the API shows it.
//!
//! - [`endpoints`]: [`endpoints::HookEndpoints`], a workspace's endpoints as callers manage them.
//! - [`service`]: [`service::ChatHooks`], which turns feed events into deliveries and runs them.

pub mod endpoints;
pub mod service;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::event::{EndReason, FeedEvent};
use spool_log::error::Error;

/// When a delivery is tried: at once, then after each of these waits (Standard Webhooks'
/// suggested schedule), and given up after the last.
pub const RETRY_SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];
/// How many deliveries of an endpoint the API shows.
pub const SHOWN_DELIVERIES: usize = 50;
/// How long delivery records are kept.
pub const DELIVERY_RECORD_MS: i64 = 7 * 24 * 3600 * 1000;

/// What a webhook tells.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HookEvent {
    /// A turn ended as it should.
    #[serde(rename = "turn.completed")]
    TurnCompleted,
    /// A turn failed or was aborted.
    #[serde(rename = "turn.failed")]
    TurnFailed,
    /// An agent waits on a person: a question, a tool to approve, a plan to review.
    #[serde(rename = "input.required")]
    InputRequired,
    /// A task was made, by an agent or by hand.
    #[serde(rename = "task.created")]
    TaskCreated,
}

impl HookEvent {
    /// Every kind.
    pub const ALL: [HookEvent; 4] = [
        HookEvent::TurnCompleted,
        HookEvent::TurnFailed,
        HookEvent::InputRequired,
        HookEvent::TaskCreated,
    ];

    /// The webhook event a feed event is, if any.
    pub fn of(event: &FeedEvent) -> Option<Self> {
        match event {
            FeedEvent::ProcessingFinished {
                reason: EndReason::Complete,
                ..
            } => Some(Self::TurnCompleted),
            FeedEvent::ProcessingFinished { .. } => Some(Self::TurnFailed),
            FeedEvent::InputRequired { .. } => Some(Self::InputRequired),
            FeedEvent::TaskCreated { .. } => Some(Self::TaskCreated),
            _ => None,
        }
    }

    /// Its name, as in the payload's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TurnCompleted => "turn.completed",
            Self::TurnFailed => "turn.failed",
            Self::InputRequired => "input.required",
            Self::TaskCreated => "task.created",
        }
    }
}

/// A workspace's webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    /// `wh_…`.
    pub id: String,
    /// The workspace whose chats it hears.
    pub workspace_id: String,
    /// Where deliveries go (`https`, to a public address).
    pub url: String,
    /// What it wants.
    pub events: Vec<HookEvent>,
    /// Off: it gets nothing, and deliveries waiting for it are given up.
    pub enabled: bool,
    /// For people.
    #[serde(default)]
    pub description: Option<String>,
    /// The signing secret, `whsec_` and base64 of its bytes; shown once, when it is made.
    pub secret: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: i64,
}

impl Hook {
    /// Whether it gets `event`.
    pub fn wants(&self, event: HookEvent) -> bool {
        self.enabled && self.events.contains(&event)
    }
}

/// Where a delivery stands.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not yet answered with 2xx; another attempt is scheduled.
    Pending,
    /// Answered with 2xx.
    Delivered,
    /// Given up: every attempt failed, or the endpoint was turned off or deleted.
    Failed,
}

/// One attempt at a delivery.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// When (ms since the Unix epoch).
    pub at_ms: i64,
    /// The endpoint's status, if it answered.
    pub status: Option<u16>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// How long it took.
    pub duration_ms: u64,
}

/// One event for one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// `msg_…`: the same for every attempt and every endpoint (`webhook-id`).
    pub id: String,
    /// The endpoint.
    pub hook_id: String,
    /// What it tells.
    pub event: HookEvent,
    /// The exact body every attempt sends.
    pub body: String,
    /// When it was made.
    pub created_ms: i64,
    /// Where it stands.
    pub state: DeliveryStatus,
    /// Its attempts, oldest first.
    pub attempts: Vec<Attempt>,
    /// When the next attempt is due, while pending.
    pub next_attempt_ms: Option<i64>,
}

/// Where endpoints and their deliveries are kept, per organization.
#[async_trait]
pub trait HookStore: Send + Sync {
    /// Stores a new endpoint; [`Error::CapReached`] (and nothing stored) when its workspace has
    /// [`crate::caps::Caps::hooks_per_workspace`] already.
    async fn create_hook(&self, org: &str, hook: &Hook) -> Result<(), Error>;

    /// The endpoint, if the organization has it.
    async fn hook(&self, org: &str, id: &str) -> Result<Option<Hook>, Error>;

    /// A workspace's endpoints, oldest first.
    async fn hooks(&self, org: &str, workspace_id: &str) -> Result<Vec<Hook>, Error>;

    /// Replaces an endpoint ([`Error::Missing`] if it does not exist).
    async fn update_hook(&self, org: &str, hook: &Hook) -> Result<(), Error>;

    /// Deletes an endpoint and its deliveries ([`Error::Missing`] if it does not exist).
    async fn delete_hook(&self, org: &str, id: &str) -> Result<(), Error>;

    /// Stores a new delivery; `false` (and nothing changes) if one with its id exists for its
    /// endpoint.
    async fn add_delivery(&self, org: &str, delivery: &Delivery) -> Result<bool, Error>;

    /// A delivery of an endpoint.
    async fn delivery(&self, org: &str, hook_id: &str, id: &str) -> Result<Option<Delivery>, Error>;

    /// Replaces a delivery if it still has `attempts` attempts (another job did not record
    /// one since); `false` otherwise.
    async fn save_delivery(&self, org: &str, delivery: &Delivery, attempts: usize) -> Result<bool, Error>;

    /// An endpoint's newest deliveries, newest first, at most `limit`.
    async fn deliveries(&self, org: &str, hook_id: &str, limit: usize) -> Result<Vec<Delivery>, Error>;
}
