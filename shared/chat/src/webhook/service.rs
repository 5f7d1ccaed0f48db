//! # The chat webhook service
//!
//! [`ChatHooks::appended`] hears a workspace's feed events once they are appended (the worker's
//! aggregate append on AWS, the direct append in `spool serve`) and stores a delivery per
//! endpoint that wants one, which a job then runs ([`ChatHooks::deliver`]): sign, post, record
//! the attempt, and schedule the next one or stop.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;

use super::{Attempt, Delivery, DeliveryStatus, Hook, HookEvent, HookStore, RETRY_SCHEDULE};
use crate::event::FeedEvent;
use spool_log::{
    aggregate::{Aggregates, IfMissing, stamp},
    clock::Clock,
    error::Error,
    jobs::{Deferred, MaintenanceJob},
    stream::StreamPath,
    subscription::{Outbound, spec::UrlPolicy},
};

/// How long an attempt's claim holds: its request's 10 s and room to record it. A job that
/// finds an older claim takes the attempt over (the one that claimed it died).
pub const CLAIM_MS: i64 = 30_000;

/// The prefix of a Standard Webhooks signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// The chat webhook service.
pub struct ChatHooks {
    store: Arc<dyn HookStore>,
    jobs: Arc<dyn Deferred>,
    clock: Arc<dyn Clock>,
    urls: UrlPolicy,
    outbound: Option<Arc<dyn Outbound>>,
}

impl ChatHooks {
    /// The service over its ports; endpoints' URLs follow `urls`.
    pub fn new(store: Arc<dyn HookStore>, jobs: Arc<dyn Deferred>, clock: Arc<dyn Clock>, urls: UrlPolicy) -> Self {
        Self {
            store,
            jobs,
            clock,
            urls,
            outbound: None,
        }
    }

    /// The same, making the requests through `outbound` (where jobs run).
    #[must_use]
    pub fn with_outbound(mut self, outbound: Arc<dyn Outbound>) -> Self {
        self.outbound = Some(outbound);
        self
    }

    /// Which endpoint URLs this deployment calls.
    pub fn urls(&self) -> UrlPolicy {
        self.urls
    }

    /// `events` were appended to the stream at `path`: if it is a workspace's feed, stores a
    /// delivery of each webhook event for each endpoint of the workspace that wants it, and
    /// schedules it. Safe to call again with the same events (a batch delivered again): an
    /// event is one delivery, and one stored but never scheduled is scheduled then.
    pub async fn appended(&self, path: &StreamPath, events: &[Value]) -> Result<(), Error> {
        let Some((org, workspace)) = feed_of(path) else {
            return Ok(());
        };
        let mut hooks: Option<Vec<Hook>> = None;
        for event in events {
            let Some((kind, event_id)) = webhook_event(event) else {
                continue;
            };
            if hooks.is_none() {
                hooks = Some(self.store.hooks(org, workspace).await?);
            }
            for hook in hooks.iter().flatten().filter(|h| h.wants(kind)) {
                self.enqueue(org, hook, kind, event_id, event).await?;
            }
        }
        Ok(())
    }

    async fn enqueue(
        &self,
        org: &str,
        hook: &Hook,
        kind: HookEvent,
        event_id: &str,
        event: &Value,
    ) -> Result<(), Error> {
        let now = self.clock.now_ms();
        let delivery = Delivery {
            id: message_id(event_id),
            hook_id: hook.id.clone(),
            event: kind,
            body: payload(kind, event).to_string(),
            created_ms: now,
            state: DeliveryStatus::Pending,
            attempts: Vec::new(),
            next_attempt_ms: Some(now),
        };
        if self.store.add_delivery(org, &delivery).await? {
            return self.schedule(org, &delivery, Duration::ZERO).await;
        }
        // The event was handed over again. If its delivery was stored but never tried (the
        // process stopped before scheduling it), schedule it; a job too many does nothing.
        match self.store.delivery(org, &hook.id, &delivery.id).await? {
            Some(stored) if stored.state == DeliveryStatus::Pending && stored.attempts.is_empty() => {
                self.schedule(org, &stored, Duration::ZERO).await
            }
            _ => Ok(()),
        }
    }

    async fn schedule(&self, org: &str, delivery: &Delivery, delay: Duration) -> Result<(), Error> {
        let job = MaintenanceJob::Webhook {
            org: org.to_owned(),
            hook_id: delivery.hook_id.clone(),
            delivery_id: delivery.id.clone(),
            attempt: u32::try_from(delivery.attempts.len()).unwrap_or(u32::MAX),
        };
        self.jobs.defer(job, delay).await
    }

    /// Runs a delivery's attempt number `attempt` (from 0), if it is still pending, still at
    /// that attempt and due (an early job schedules itself again for when it is). The attempt
    /// is claimed before the request (an attempt with neither status nor error, saved on the
    /// condition that no other job saved one), so a job that runs twice at once posts once; a
    /// claim whose job died is taken over once it is [`CLAIM_MS`] old.
    pub async fn deliver(&self, org: &str, hook_id: &str, id: &str, attempt: u32) -> Result<(), Error> {
        let Some(mut delivery) = self.store.delivery(org, hook_id, id).await? else {
            return Ok(());
        };
        let now = self.clock.now_ms();
        let stored = delivery.attempts.len();
        let claimed = delivery
            .attempts
            .last()
            .filter(|a| a.status.is_none() && a.error.is_none())
            .map(|a| a.at_ms);
        let this_attempt = stored == attempt as usize || stored == attempt as usize + 1;
        let runs = match claimed {
            None => stored == attempt as usize,
            // A claim left by a job that died: taken over by the job of that attempt.
            Some(at) => now > at + CLAIM_MS && this_attempt,
        };
        if delivery.state != DeliveryStatus::Pending {
            return Ok(());
        }
        if !runs {
            // A claim that may still be live: look again once it would have run out (the job
            // that holds it will have recorded its attempt, and this one then does nothing).
            if let Some(at) = claimed.filter(|_| this_attempt) {
                let job = MaintenanceJob::Webhook {
                    org: org.to_owned(),
                    hook_id: hook_id.to_owned(),
                    delivery_id: id.to_owned(),
                    attempt,
                };
                let wait = Duration::from_millis((at + CLAIM_MS - now).max(0) as u64 + 1_000);
                self.jobs.defer(job, wait).await?;
            }
            return Ok(());
        }
        if claimed.is_some() {
            delivery.attempts.pop();
        }
        let hook = match self.store.hook(org, hook_id).await? {
            Some(hook) if hook.enabled => hook,
            found => {
                let why = if found.is_some() {
                    "the endpoint was turned off"
                } else {
                    "the endpoint was deleted"
                };
                delivery.state = DeliveryStatus::Failed;
                delivery.next_attempt_ms = None;
                delivery.attempts.push(Attempt {
                    at_ms: now,
                    status: None,
                    error: Some(why.to_owned()),
                    duration_ms: 0,
                });
                self.store.save_delivery(org, &delivery, stored).await?;
                return Ok(());
            }
        };
        if let Some(due) = delivery.next_attempt_ms
            && due > now + 1_000
        {
            return self
                .schedule(org, &delivery, Duration::from_millis((due - now) as u64))
                .await;
        }
        let outbound = self
            .outbound
            .as_ref()
            .ok_or_else(|| Error::unavailable("deliver a webhook", "this process makes no webhook requests"))?;
        // The claim: this job's attempt, in flight.
        delivery.attempts.push(Attempt {
            at_ms: now,
            status: None,
            error: None,
            duration_ms: 0,
        });
        let tried = delivery.attempts.len();
        if !self.store.save_delivery(org, &delivery, stored).await? {
            return Ok(());
        }
        let timestamp = now / 1000;
        let signature = sign(&hook.secret, &delivery.id, timestamp, &delivery.body)?;
        let headers = [
            ("content-type", "application/json".to_owned()),
            ("webhook-id", delivery.id.clone()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ];
        let started = std::time::Instant::now();
        let outcome = outbound
            .post(&hook.url, &headers, delivery.body.clone().into_bytes())
            .await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (status, error) = match outcome {
            Ok(reply) => (Some(reply.status), None),
            Err(e) => (None, Some(e)),
        };
        if let Some(last) = delivery.attempts.last_mut() {
            *last = Attempt {
                at_ms: now,
                status,
                error,
                duration_ms,
            };
        }
        let done = status.is_some_and(|s| (200..300).contains(&s));
        let wait = RETRY_SCHEDULE.get(tried - 1).copied();
        match (done, wait) {
            (true, _) => {
                delivery.state = DeliveryStatus::Delivered;
                delivery.next_attempt_ms = None;
            }
            (false, Some(wait)) => {
                delivery.next_attempt_ms = Some(now + wait.as_millis() as i64);
                tracing::info!(%org, hook = %hook_id, delivery = %id, ?status, retry_in = ?wait, "a webhook delivery failed; it is tried again");
            }
            (false, None) => {
                delivery.state = DeliveryStatus::Failed;
                delivery.next_attempt_ms = None;
                tracing::warn!(%org, hook = %hook_id, delivery = %id, "a webhook delivery failed its last attempt; it is given up");
            }
        }
        if !self.store.save_delivery(org, &delivery, tried).await? {
            return Ok(());
        }
        if let (false, Some(wait)) = (done, wait) {
            self.schedule(org, &delivery, wait).await?;
        }
        Ok(())
    }
}

/// Feeds appended at once ([`spool_log::aggregate::Direct`], in `spool serve`), whose events then
/// go to the workspace's webhooks; on AWS the worker does the same after its aggregate appends.
pub struct HookedFeeds {
    /// Where events are appended.
    pub feeds: Arc<dyn Aggregates>,
    /// Who hears them.
    pub hooks: Arc<ChatHooks>,
}

#[async_trait]
impl Aggregates for HookedFeeds {
    async fn add(&self, path: &StreamPath, mut event: Value, if_missing: IfMissing) -> Result<(), Error> {
        stamp(&mut event)?;
        self.feeds.add(path, event.clone(), if_missing).await?;
        // The event is appended: a failure here is logged, not the request's (the delivery
        // is stored and scheduled again when `spool serve` starts, if it was stored).
        if let Err(e) = self.hooks.appended(path, std::slice::from_ref(&event)).await {
            tracing::warn!(%path, error = %e, "cannot hand a feed event to the workspace's webhooks");
        }
        Ok(())
    }
}

/// The organization and workspace of a feed's path (`o/{org}/workspaces/{ws}/feed`).
fn feed_of(path: &StreamPath) -> Option<(&str, &str)> {
    let (org, rest) = path.org_and_rel()?;
    let workspace = rest.strip_prefix("workspaces/")?.strip_suffix("/feed")?;
    (!workspace.contains('/')).then_some((org, workspace))
}

/// The webhook event a stored feed event is, and the feed event's id.
fn webhook_event(event: &Value) -> Option<(HookEvent, &str)> {
    let id = event.get("id")?.as_str()?;
    let feed: FeedEvent = serde_json::from_value(event.clone()).ok()?;
    Some((HookEvent::of(&feed)?, id))
}

/// A delivery's id: the feed event's (`ev_…` → `msg_…`), so one event is one message.
fn message_id(event_id: &str) -> String {
    format!("msg_{}", event_id.strip_prefix("ev_").unwrap_or(event_id))
}

/// The body: Standard Webhooks' `{type, timestamp, data}`, `data` the feed event's fields
/// with its id as `event_id`.
fn payload(kind: HookEvent, event: &Value) -> Value {
    let mut data: Map<String, Value> = event.as_object().cloned().unwrap_or_default();
    let timestamp = data.remove("ts").unwrap_or(Value::Null);
    data.remove("type");
    if let Some(id) = data.remove("id") {
        data.insert("event_id".to_owned(), id);
    }
    json!({ "type": kind.as_str(), "timestamp": timestamp, "data": data })
}

/// The `webhook-signature` of a message: `v1,` and the base64 HMAC-SHA256, keyed with the
/// secret's bytes, of `{id}.{timestamp}.{body}`.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> Result<String, Error> {
    let key = STANDARD
        .decode(secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret))
        .map_err(|e| Error::Corrupt {
            what: format!("a webhook secret is not base64: {e}"),
        })?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|e| Error::Corrupt {
        what: format!("a webhook secret: {e}"),
    })?;
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    Ok(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification (its reference libraries' tests).
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            sign(secret, id, 1614265330, body).unwrap(),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn feed_events_become_webhook_events_with_the_feed_events_ids() {
        let finished = json!({
            "type": "chat.processing_finished", "id": "ev_0192", "ts": "2026-11-25T10:00:00Z",
            "chat_id": "ses_1", "chat_title": "T", "agent_name": "A", "workspace_id": "ws_1", "reason": "error",
        });
        let (kind, id) = webhook_event(&finished).unwrap();
        assert_eq!((kind, id), (HookEvent::TurnFailed, "ev_0192"));
        assert_eq!(message_id(id), "msg_0192");
        let body = payload(kind, &finished);
        assert_eq!(body["type"], "turn.failed");
        assert_eq!(body["timestamp"], "2026-11-25T10:00:00Z");
        assert_eq!(body["data"]["event_id"], "ev_0192");
        assert_eq!(body["data"]["chat_id"], "ses_1");
        assert!(body["data"].get("type").is_none());
        let created =
            json!({"type": "chat.created", "id": "ev_2", "chat_id": "c", "chat_title": "t", "workspace_id": "w"});
        assert!(webhook_event(&created).is_none());
        let path = StreamPath::parse("o/org_1/workspaces/ws_1/feed").unwrap();
        assert_eq!(feed_of(&path), Some(("org_1", "ws_1")));
        assert_eq!(feed_of(&StreamPath::parse("o/org_1/audit").unwrap()), None);
    }
}
