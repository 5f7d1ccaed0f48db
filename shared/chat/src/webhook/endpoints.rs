//! # A workspace's webhook endpoints, as callers manage them
//!
//! [`HookEndpoints`] makes, reads, changes and deletes a workspace's endpoints and shows their
//! newest deliveries: an endpoint belongs to a workspace of the organization, its URL follows
//! the deployment's [`UrlPolicy`], it names at least one event (each once), and its description
//! is bounded. Callers parse, call one method and shape its answer; who may ask and how often is
//! theirs to check.

use std::sync::Arc;

use super::{Delivery, Hook, HookEvent, SHOWN_DELIVERIES};
use crate::{metadata::Metadata, workspace::new_id};
use spool_log::{
    clock::Clock,
    error::Error,
    subscription::{
        refusal::Refusal,
        spec::{MAX_DESCRIPTION_CHARS, UrlPolicy, check_webhook_url},
    },
};

/// A workspace's webhook endpoints over their store.
#[derive(Clone)]
pub struct HookEndpoints {
    metadata: Arc<dyn Metadata>,
    clock: Arc<dyn Clock>,
    urls: UrlPolicy,
}

/// A new endpoint, as the caller asks for it.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    /// Where deliveries go.
    pub url: String,
    /// What it gets; every kind when absent.
    pub events: Option<Vec<HookEvent>>,
    /// For people.
    pub description: Option<String>,
    /// On (when absent) or off.
    pub enabled: Option<bool>,
    /// Its signing secret (`whsec_…`), made by the caller.
    pub secret: String,
}

/// A change to an endpoint: only what it names changes.
#[derive(Debug, Clone, Default)]
pub struct EndpointEdit {
    /// Its URL.
    pub url: Option<String>,
    /// What it gets.
    pub events: Option<Vec<HookEvent>>,
    /// Its description; an empty one clears it.
    pub description: Option<String>,
    /// On or off.
    pub enabled: Option<bool>,
}

impl HookEndpoints {
    /// The endpoints over `metadata`, accepting URLs under `urls` (only `https` to public
    /// addresses by default).
    pub fn new(metadata: Arc<dyn Metadata>, clock: Arc<dyn Clock>) -> Self {
        Self {
            metadata,
            clock,
            urls: UrlPolicy { loopback_http: false },
        }
    }

    /// The same, accepting endpoints' URLs under `urls`.
    #[must_use]
    pub fn with_urls(mut self, urls: UrlPolicy) -> Self {
        self.urls = urls;
        self
    }

    /// Makes an endpoint of workspace `workspace_id` ([`Error::Missing`] if the organization
    /// has no such workspace); the store refuses it past the workspace's cap, atomically
    /// ([`Error::CapReached`]). Returns it, with its secret.
    pub async fn create(&self, org: &str, workspace_id: &str, new: NewEndpoint) -> Result<Hook, Error> {
        self.workspace(org, workspace_id).await?;
        let hook = Hook {
            id: new_id("wh"),
            workspace_id: workspace_id.to_owned(),
            url: new.url,
            events: distinct(new.events.unwrap_or_else(|| HookEvent::ALL.to_vec())),
            enabled: new.enabled.unwrap_or(true),
            description: new.description,
            secret: new.secret,
            created_ms: self.clock.now_ms(),
        };
        check(&hook, self.urls)?;
        self.metadata.create_hook(org, &hook).await?;
        tracing::info!(org, workspace = %workspace_id, webhook = %hook.id, "webhook made");
        Ok(hook)
    }

    /// The organization's endpoint `id` ([`Error::Missing`] if it has none).
    pub async fn hook(&self, org: &str, id: &str) -> Result<Hook, Error> {
        self.metadata.hook(org, id).await?.ok_or_else(|| Error::Missing {
            what: format!("webhook `{id}`"),
        })
    }

    /// Workspace `workspace_id`'s endpoints, oldest first ([`Error::Missing`] if the
    /// organization has no such workspace).
    pub async fn hooks(&self, org: &str, workspace_id: &str) -> Result<Vec<Hook>, Error> {
        self.workspace(org, workspace_id).await?;
        self.metadata.hooks(org, workspace_id).await
    }

    /// Changes endpoint `id` as `edit` says; returns it changed.
    pub async fn update(&self, org: &str, id: &str, edit: EndpointEdit) -> Result<Hook, Error> {
        let mut hook = self.hook(org, id).await?;
        if let Some(url) = edit.url {
            hook.url = url;
        }
        if let Some(events) = edit.events {
            hook.events = distinct(events);
        }
        if let Some(description) = edit.description {
            hook.description = Some(description).filter(|d| !d.is_empty());
        }
        if let Some(enabled) = edit.enabled {
            hook.enabled = enabled;
        }
        check(&hook, self.urls)?;
        self.metadata.update_hook(org, &hook).await?;
        Ok(hook)
    }

    /// Deletes endpoint `id` and its deliveries ([`Error::Missing`] if it does not exist).
    pub async fn remove(&self, org: &str, id: &str) -> Result<(), Error> {
        self.metadata.delete_hook(org, id).await
    }

    /// Endpoint `id`'s newest deliveries, newest first, at most [`SHOWN_DELIVERIES`].
    pub async fn deliveries(&self, org: &str, id: &str) -> Result<Vec<Delivery>, Error> {
        self.hook(org, id).await?;
        self.metadata.deliveries(org, id, SHOWN_DELIVERIES).await
    }

    async fn workspace(&self, org: &str, id: &str) -> Result<(), Error> {
        match self.metadata.workspace(org, id).await? {
            Some(_) => Ok(()),
            None => Err(Error::Missing {
                what: format!("workspace `{id}`"),
            }),
        }
    }
}

/// Checks that `hook`'s URL is one this deployment calls (`urls`), that it names some event and
/// that its description is short enough (`400 bad_request` otherwise, as any malformed request).
fn check(hook: &Hook, urls: UrlPolicy) -> Result<(), Error> {
    check_webhook_url(&hook.url, urls)?;
    if hook.events.is_empty() {
        return Err(bad_request(
            "`events` names none; leave it out for every kind".to_owned(),
        ));
    }
    if hook
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION_CHARS)
    {
        return Err(bad_request(format!(
            "`description` is longer than {MAX_DESCRIPTION_CHARS} characters"
        )));
    }
    Ok(())
}

fn bad_request(message: String) -> Error {
    Refusal::new(400, "bad_request", message).into()
}

/// `events` without repeats, in their first order.
fn distinct(mut events: Vec<HookEvent>) -> Vec<HookEvent> {
    let mut seen = Vec::with_capacity(events.len());
    events.retain(|e| {
        let new = !seen.contains(e);
        seen.push(*e);
        new
    });
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(events: Vec<HookEvent>, description: Option<String>) -> Hook {
        Hook {
            id: "wh_1".to_owned(),
            workspace_id: "ws_1".to_owned(),
            url: "https://example.com/hook".to_owned(),
            events,
            enabled: true,
            description,
            secret: "whsec_AAAA".to_owned(),
            created_ms: 0,
        }
    }

    fn code(e: Error) -> (u16, &'static str) {
        match e {
            Error::Refused(r) => (r.status, r.code),
            other => panic!("not a refusal: {other}"),
        }
    }

    #[test]
    fn an_endpoint_without_events_or_with_a_long_description_is_a_bad_request() {
        // GIVEN the production URL policy
        let urls = UrlPolicy { loopback_http: false };
        // WHEN endpoints break one rule each THEN each is a 400 bad_request
        assert_eq!(
            code(check(&hook(Vec::new(), None), urls).unwrap_err()),
            (400, "bad_request")
        );
        let long = "d".repeat(MAX_DESCRIPTION_CHARS + 1);
        let e = check(&hook(HookEvent::ALL.to_vec(), Some(long)), urls).unwrap_err();
        assert_eq!(code(e), (400, "bad_request"));
        // AND one that keeps them all passes
        assert!(check(&hook(HookEvent::ALL.to_vec(), Some("d".to_owned())), urls).is_ok());
    }

    #[test]
    fn repeated_events_are_kept_once_in_their_first_order() {
        let events = distinct(vec![
            HookEvent::TaskCreated,
            HookEvent::TurnFailed,
            HookEvent::TaskCreated,
        ]);
        assert_eq!(events, vec![HookEvent::TaskCreated, HookEvent::TurnFailed]);
    }
}
