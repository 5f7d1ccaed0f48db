//! # The subscription service
//!
//! [`Subscriptions`] serves the protocol's `__ds` requests, hears every append the stream
//! routes make ([`Subscriptions::appended`]) and runs the jobs that deliver and expire wakes
//! ([`Subscriptions::run`]). Every change is a compare-and-set of the record: read it (and the
//! linked streams' tails when the change depends on them), apply a transition of
//! [`super::record`], save it if the version is still the one read, else start again. Jobs are
//! scheduled only after their change is saved.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    JobKind, Outbound, Refusal, SubscriptionJob, SubscriptionStore, WebhookSigner,
    record::{Ack, Subscription, Tails},
    spec::{self, Delivery, Spec, UrlPolicy},
};
use crate::{
    Append, Clock, Error, Offset, StreamLog, StreamPath,
    jobs::{Deferred, MaintenanceJob},
};

/// How long a process trusts its list of an organization's subscriptions before reading it
/// again. A subscription made in another process is seen by this one's appends this much later.
const WATCH_TTL: Duration = Duration::from_secs(1);
/// How long an open wake may go without its job running before an append drives it again.
const STALE_MS: i64 = 60_000;
/// Compare-and-set attempts before giving up.
const ATTEMPTS: usize = 16;
/// The longest wait between webhook attempts.
const MAX_RETRY_MS: u64 = 60_000;

/// Each organization's subscriptions as this process last read them, and when.
type Watching = HashMap<String, (Instant, Arc<Vec<Subscription>>)>;

/// The subscription service.
pub struct Subscriptions {
    store: Arc<dyn SubscriptionStore>,
    log: Arc<dyn StreamLog>,
    scheduler: Arc<dyn Deferred>,
    signer: Arc<dyn WebhookSigner>,
    clock: Arc<dyn Clock>,
    urls: UrlPolicy,
    outbound: Option<Arc<dyn Outbound>>,
    watching: Mutex<Watching>,
}

/// What a transition did: its answer, whether the record changed, and the jobs to schedule for
/// the record's generation once it is saved.
struct Step<T> {
    value: T,
    changed: bool,
    jobs: Vec<(JobKind, Duration)>,
}

impl<T> Step<T> {
    fn same(value: T) -> Self {
        Self {
            value,
            changed: false,
            jobs: Vec::new(),
        }
    }

    fn changed(value: T) -> Self {
        Self {
            value,
            changed: true,
            jobs: Vec::new(),
        }
    }

    fn then(mut self, kind: JobKind, delay: Duration) -> Self {
        self.jobs.push((kind, delay));
        self
    }

    /// With a delivery job if `reopened`.
    fn deliver_if(self, reopened: bool) -> Self {
        if reopened {
            self.then(JobKind::Deliver, Duration::ZERO)
        } else {
            self
        }
    }
}

/// The body of a callback, an ack or a release.
#[derive(Deserialize)]
struct WakeRequest {
    wake_id: Option<String>,
    generation: Option<u64>,
    #[serde(default)]
    acks: Vec<Ack>,
    #[serde(default)]
    done: bool,
}

/// Which kind of subscription a wake request is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Webhook,
    PullWake,
}

impl Subscriptions {
    /// The service over its ports; webhook URLs follow `urls`.
    pub fn new(
        store: Arc<dyn SubscriptionStore>,
        log: Arc<dyn StreamLog>,
        scheduler: Arc<dyn Deferred>,
        signer: Arc<dyn WebhookSigner>,
        clock: Arc<dyn Clock>,
        urls: UrlPolicy,
    ) -> Self {
        Self {
            store,
            log,
            scheduler,
            signer,
            clock,
            urls,
            outbound: None,
            watching: Mutex::new(HashMap::new()),
        }
    }

    /// The same, making webhook requests through `outbound` (where jobs run).
    #[must_use]
    pub fn with_outbound(mut self, outbound: Arc<dyn Outbound>) -> Self {
        self.outbound = Some(outbound);
        self
    }

    /// The webhook signing keys, as a JSON Web Key Set.
    pub fn jwks(&self) -> Value {
        self.signer.jwks()
    }

    /// `PUT`: creates the subscription (`true`) or re-confirms an identical one (`false`).
    pub async fn put(&self, org: &str, id: &str, body: &[u8], root_url: &str) -> Result<(bool, Value), Error> {
        spec::check_id(id)?;
        let spec = Spec::parse(body, self.urls)?;
        let mut record = Subscription::new(id.to_owned(), spec, root_url.to_owned(), self.clock.now_ms());
        if let Delivery::PullWake { wake_stream } = &record.spec.delivery {
            writable(org, wake_stream)?;
        }
        for path in record.spec.streams.clone() {
            writable(org, &path)?;
            let at = self.tail(org, &path).await?.unwrap_or(0);
            record.link(&path, true, at)?;
        }
        for _ in 0..ATTEMPTS {
            if let Some(existing) = self.store.get(org, id).await? {
                if existing.record.hash != record.hash {
                    return Err(Refusal::new(
                        409,
                        "SUBSCRIPTION_ALREADY_EXISTS",
                        format!("subscription `{id}` exists with another configuration; delete it first"),
                    )
                    .into());
                }
                return Ok((false, self.view(&existing.record)));
            }
            if self.store.save(org, &record, None).await? {
                self.forget(org);
                // An append that came between reading the tails and saving woke nobody.
                self.recheck(org, id).await?;
                return Ok((true, self.view(&record)));
            }
        }
        Err(busy(id))
    }

    /// `GET`: the subscription.
    pub async fn get(&self, org: &str, id: &str) -> Result<Value, Error> {
        spec::check_id(id)?;
        let found = self.store.get(org, id).await?.ok_or_else(|| Refusal::not_found(id))?;
        Ok(self.view(&found.record))
    }

    /// `DELETE`: the subscription and its cursors; its open wake's requests fail from now on.
    pub async fn delete(&self, org: &str, id: &str) -> Result<(), Error> {
        spec::check_id(id)?;
        let deleted = self.store.delete(org, id).await?;
        self.forget(org);
        if deleted {
            Ok(())
        } else {
            Err(Refusal::not_found(id).into())
        }
    }

    /// `POST …/streams`: links streams by name, each at its tail.
    pub async fn add_streams(&self, org: &str, id: &str, body: &[u8]) -> Result<(), Error> {
        #[derive(Deserialize)]
        struct Body {
            streams: Vec<String>,
        }
        spec::check_id(id)?;
        let body: Body = serde_json::from_slice(body)
            .map_err(|e| Refusal::invalid(format!("expected {{\"streams\": [...]}}: {e}")))?;
        let paths = spec::check_paths(&body.streams)?;
        let mut at = Vec::with_capacity(paths.len());
        for path in paths {
            writable(org, &path)?;
            at.push((self.tail(org, &path).await?.unwrap_or(0), path));
        }
        self.modify(org, id, false, |sub, _, _| {
            let mut changed = false;
            for (tail, path) in &at {
                changed |= sub.link(path, true, *tail)?;
            }
            Ok(Step {
                value: (),
                changed,
                jobs: Vec::new(),
            })
        })
        .await?;
        self.forget(org);
        self.recheck(org, id).await
    }

    /// `DELETE …/streams/{path}`: removes an explicit link (a pattern's stays).
    pub async fn remove_stream(&self, org: &str, id: &str, path: &str) -> Result<(), Error> {
        spec::check_id(id)?;
        let path = spec::check_path(path)?;
        self.modify(org, id, false, |sub, _, _| {
            let before = sub.links.len();
            let explicit = sub.links.get(&path).is_some_and(|l| l.explicit);
            sub.unlink_explicit(&path);
            Ok(if explicit || sub.links.len() != before {
                Step::changed(())
            } else {
                Step::same(())
            })
        })
        .await?;
        self.forget(org);
        Ok(())
    }

    /// An append made `path` (stream-root-relative) go from `before` to `tail` messages: links
    /// it to the subscriptions whose pattern matches, at `before`, and opens a wake for those
    /// that were idle. Never fails the append, which is already durable: a failure here is
    /// logged, and the next append (or ack) wakes the subscription.
    pub async fn appended(&self, org: &str, path: &str, before: u64, tail: u64) {
        if path == spec::RESERVED || path.starts_with("__ds/") {
            return;
        }
        let subs = match self.watching(org).await {
            Ok(subs) => subs,
            Err(e) => {
                tracing::warn!(%org, %path, error = %e, "cannot read the subscriptions an append may wake");
                return;
            }
        };
        for sub in subs.iter().filter(|s| s.watches(path)) {
            let woke = self
                .modify(org, &sub.id, false, |s, _, now| {
                    let mut changed = false;
                    if s.spec.matches(path) {
                        match s.link(path, false, before) {
                            Ok(linked) => changed = linked,
                            Err(refusal) => tracing::warn!(%org, subscription = %s.id, %path, "{refusal}"),
                        }
                    }
                    let pending = s.links.get(path).is_some_and(|l| tail > l.acked);
                    if s.wake.is_none() && pending {
                        s.open_wake(now);
                        return Ok(Step::changed(()).then(JobKind::Deliver, Duration::ZERO));
                    }
                    // A wake whose job was lost (a crash between saving it and scheduling, a
                    // job given up to the dead-letter queue) is driven again.
                    let stale = |at: i64| now > at + STALE_MS;
                    let job = match &s.wake {
                        Some(w) if !w.delivered && w.holder.is_none() => {
                            (stale(w.opened_ms) && s.next_attempt_ms.is_none_or(stale)).then_some(JobKind::Deliver)
                        }
                        Some(w) => w.lease_until_ms.is_some_and(stale).then_some(JobKind::Expire),
                        None => None,
                    };
                    let step = Step {
                        value: (),
                        changed,
                        jobs: Vec::new(),
                    };
                    Ok(match job {
                        Some(kind) => step.then(kind, Duration::ZERO),
                        None => step,
                    })
                })
                .await;
            match woke {
                Ok(()) => {}
                Err(Error::Refused(r)) if r.status == 404 => {}
                Err(e) => {
                    tracing::warn!(%org, %path, subscription = %sub.id, error = %e, "cannot wake a subscription; its next append will");
                }
            }
        }
    }

    /// `POST …/callback`: a webhook receiver acks, extends its lease, or finishes (`done`).
    pub async fn callback(&self, id: &str, token: &str, body: &[u8]) -> Result<Value, Error> {
        let next = self.finish(id, token, body, Kind::Webhook).await?;
        Ok(json!({ "ok": true, "next_wake": next }))
    }

    /// `POST …/ack`: a pull-wake worker acks, heartbeats, or finishes (`done`).
    pub async fn ack(&self, id: &str, token: &str, body: &[u8]) -> Result<Value, Error> {
        let next = self.finish(id, token, body, Kind::PullWake).await?;
        Ok(json!({ "ok": true, "next_wake": next }))
    }

    /// `POST …/release`: a pull-wake worker gives its wake up without acking.
    pub async fn release(&self, id: &str, token: &str, body: &[u8]) -> Result<(), Error> {
        let (org, token_generation) = Self::parse_token(token)?;
        let request = wake_request(body)?;
        self.verify_token(token, &org, id, token_generation, request.wake_id.as_deref())?;
        self.modify(&org, id, true, |sub, tails, now| {
            check_kind(sub, Kind::PullWake)?;
            sub.fence(token_generation, request.generation, request.wake_id.as_deref())?;
            let reopened = sub.end_wake(tails, now);
            Ok(Step::changed(()).deliver_if(reopened))
        })
        .await
    }

    /// `POST …/claim`: a pull-wake worker takes the pending work, with a lease.
    pub async fn claim(&self, org: &str, id: &str, body: &[u8]) -> Result<Value, Error> {
        #[derive(Deserialize)]
        struct Body {
            worker: String,
        }
        spec::check_id(id)?;
        let body: Body = serde_json::from_slice(body)
            .map_err(|e| Refusal::invalid(format!("expected {{\"worker\": \"...\"}}: {e}")))?;
        if body.worker.is_empty() || body.worker.len() > 256 {
            return Err(Refusal::invalid("worker is 1 to 256 characters").into());
        }
        let claimed = self
            .modify(org, id, true, |sub, tails, now| {
                check_kind(sub, Kind::PullWake)?;
                if let Some(wake) = &sub.wake
                    && let Some(holder) = &wake.holder
                {
                    if wake.lease_until_ms.is_some_and(|until| until > now) {
                        return Err(Refusal {
                            current_holder: Some(holder.clone()),
                            generation: Some(sub.generation),
                            ..Refusal::new(
                                409,
                                "ALREADY_CLAIMED",
                                format!("`{holder}` holds this subscription's wake"),
                            )
                        }
                        .into());
                    }
                    // The holder's lease ran out: its wake ends, fenced, and this claim opens the next.
                    sub.wake = None;
                }
                if !sub.pending(tails) {
                    let none = Refusal::new(
                        409,
                        "NO_PENDING_WORK",
                        "no linked stream has messages past its acked offset",
                    );
                    // A wake nobody holds has nothing to do: it ends, so the next append wakes.
                    return Ok(if sub.wake.take().is_some() {
                        Step::changed(Err(none))
                    } else {
                        Step::same(Err(none))
                    });
                }
                if sub.wake.is_none() {
                    sub.open_wake(now);
                }
                let ttl = sub.spec.lease_ttl_ms;
                let generation = sub.generation;
                let snapshot = sub.pending_tails(tails);
                let Some(wake) = sub.wake.as_mut() else {
                    return Err(busy(id));
                };
                wake.holder = Some(body.worker.clone());
                wake.lease_until_ms = Some(now + ttl as i64);
                wake.delivered = true;
                wake.snapshot = snapshot;
                let token = self.token(org, id, generation, &wake.id);
                let claimed = json!({
                    "wake_id": wake.id,
                    "generation": generation,
                    "token": token,
                    "streams": sub.infos(tails),
                    "lease_ttl_ms": ttl,
                });
                Ok(Step::changed(Ok(claimed)).then(JobKind::Expire, Duration::from_millis(ttl)))
            })
            .await?;
        Ok(claimed?)
    }

    /// Runs a job: delivers a wake, or ends one whose lease ran out.
    pub async fn run(&self, job: &SubscriptionJob) -> Result<(), Error> {
        let result = match job.kind {
            JobKind::Deliver => self.deliver(job).await,
            JobKind::Expire => self.expire(job).await,
        };
        match result {
            // Deleted since: nothing to do.
            Err(Error::Refused(r)) if r.status == 404 => Ok(()),
            other => other,
        }
    }

    async fn deliver(&self, job: &SubscriptionJob) -> Result<(), Error> {
        let Some(found) = self.store.get(&job.org, &job.id).await? else {
            return Ok(());
        };
        // The wake this job is for, not yet delivered, at the attempt this job is for (a
        // duplicate job, or one a restart scheduled again, finds it past that and does nothing).
        let current = |sub: &Subscription| {
            sub.generation == job.generation
                && sub.failures == job.attempt
                && sub.wake.as_ref().is_some_and(|w| !w.delivered && w.holder.is_none())
        };
        if !current(&found.record) {
            return Ok(());
        }
        match found.record.spec.delivery.clone() {
            Delivery::PullWake { wake_stream } => self.write_wake_event(job, &found.record, &wake_stream).await,
            Delivery::Webhook { url } => self.post_webhook(job, &url, current).await,
        }
    }

    /// Appends the wake event to the wake stream, then marks the wake delivered (a crash in
    /// between appends it twice, which claiming makes harmless).
    async fn write_wake_event(
        &self,
        job: &SubscriptionJob,
        sub: &Subscription,
        wake_stream: &str,
    ) -> Result<(), Error> {
        let tails = self.tails(&job.org, sub).await?;
        let stream = sub
            .links
            .iter()
            .find(|(path, link)| tails.get(*path).is_some_and(|t| *t > link.acked))
            .map(|(path, _)| path.clone());
        let event = json!({
            "type": "wake",
            "subscription_id": sub.id,
            "stream": stream,
            "generation": job.generation,
            "ts": self.clock.now_ms(),
        });
        let path = stream_path(&job.org, wake_stream)?;
        let append = Append::messages([bytes::Bytes::from(event.to_string())]);
        let written = match self.log.append(&path, append).await {
            Ok(_) => true,
            Err(Error::NotFound { .. } | Error::Gone { .. } | Error::Closed { .. }) => {
                tracing::warn!(org = %job.org, subscription = %sub.id, %wake_stream, "the wake stream does not exist or is closed; create it so workers hear of wakes (trying again)");
                false
            }
            Err(e) => return Err(e),
        };
        // Delivered, the wake has a lease as a webhook's has: a wake no worker claims in time
        // ends, and the next one is written again. Not written, it is tried again later.
        self.modify(&job.org, &job.id, false, |s, _, now| {
            let ttl = s.spec.lease_ttl_ms;
            if s.generation != job.generation || s.failures != job.attempt {
                return Ok(Step::same(()));
            }
            let Some(w) = s.wake.as_mut().filter(|w| !w.delivered) else {
                return Ok(Step::same(()));
            };
            if written {
                w.delivered = true;
                w.lease_until_ms = Some(now + ttl as i64);
                s.failures = 0;
                s.next_attempt_ms = None;
                return Ok(Step::changed(()).then(JobKind::Expire, Duration::from_millis(ttl)));
            }
            s.failures += 1;
            let delay = retry_delay(s.failures);
            s.next_attempt_ms = Some(now + delay.as_millis() as i64);
            Ok(Step::changed(()).then(JobKind::Deliver, delay))
        })
        .await
    }

    /// Sends the webhook: records the snapshot it carries, `POST`s it signed, then records the
    /// outcome: delivered (with a lease, or acked at once on `{"done": true}`), or failed, with
    /// the next attempt scheduled (1 s doubling to 60 s, ±20%).
    async fn post_webhook(
        &self,
        job: &SubscriptionJob,
        url: &str,
        current: impl Fn(&Subscription) -> bool,
    ) -> Result<(), Error> {
        let org = job.org.as_str();
        let Some((wake_id, body)) = self
            .modify(org, &job.id, true, |sub, tails, _| {
                if !current(sub) {
                    return Ok(Step::same(None));
                }
                let generation = sub.generation;
                let Some(wake) = sub.wake.as_mut() else {
                    return Ok(Step::same(None));
                };
                let wake_id = wake.id.clone();
                let snapshot = sub.pending_tails(tails);
                if let Some(wake) = sub.wake.as_mut() {
                    wake.snapshot = snapshot;
                }
                let body = json!({
                    "subscription_id": sub.id,
                    "wake_id": wake_id,
                    "generation": generation,
                    "streams": sub.infos(tails),
                    "callback_url": format!("{}__ds/subscriptions/{}/callback", sub.root_url, sub.id),
                    "callback_token": self.token(org, &sub.id, generation, &wake_id),
                });
                Ok(Step::changed(Some((wake_id, body.to_string()))))
            })
            .await?
        else {
            return Ok(());
        };
        let Some(outbound) = &self.outbound else {
            return Err(Error::unavailable(
                "deliver a webhook",
                "this process makes no webhook requests",
            ));
        };
        let timestamp = self.clock.now_ms() / 1000;
        let signature = self.signer.sign(format!("{timestamp}.{body}").as_bytes());
        let header = format!(
            "t={timestamp},kid={},ed25519={}",
            self.signer.kid(),
            B64.encode(signature)
        );
        let headers = [
            ("content-type", "application/json".to_owned()),
            ("webhook-signature", header),
        ];
        let outcome = outbound.post(url, &headers, body.into_bytes()).await;
        let done = match &outcome {
            Ok(reply) if (200..300).contains(&reply.status) => Some(
                serde_json::from_slice::<Value>(&reply.body)
                    .ok()
                    .and_then(|v| v.get("done").and_then(Value::as_bool))
                    .unwrap_or(false),
            ),
            Ok(reply) => {
                tracing::warn!(org, subscription = %job.id, status = reply.status, "the webhook answered an error; retrying");
                None
            }
            Err(e) => {
                tracing::warn!(org, subscription = %job.id, error = %e, "the webhook could not be reached; retrying");
                None
            }
        };
        self.modify(org, &job.id, done == Some(true), |sub, tails, now| {
            let generation = sub.generation;
            let ttl = sub.spec.lease_ttl_ms;
            let attempt = sub.failures;
            let Some(wake) = sub
                .wake
                .as_mut()
                .filter(|w| w.id == wake_id && generation == job.generation && attempt == job.attempt)
            else {
                return Ok(Step::same(()));
            };
            match done {
                Some(true) => {
                    sub.ack_snapshot();
                    let reopened = sub.end_wake(tails, now);
                    Ok(Step::changed(()).deliver_if(reopened))
                }
                Some(false) => {
                    wake.delivered = true;
                    wake.lease_until_ms = Some(now + ttl as i64);
                    sub.failures = 0;
                    sub.next_attempt_ms = None;
                    Ok(Step::changed(()).then(JobKind::Expire, Duration::from_millis(ttl)))
                }
                None => {
                    sub.failures += 1;
                    let delay = retry_delay(sub.failures);
                    sub.next_attempt_ms = Some(now + delay.as_millis() as i64);
                    Ok(Step::changed(()).then(JobKind::Deliver, delay))
                }
            }
        })
        .await
    }

    /// Ends a delivered wake whose lease ran out (and opens the next if work is pending), or
    /// looks again when the lease was extended.
    async fn expire(&self, job: &SubscriptionJob) -> Result<(), Error> {
        self.modify(&job.org, &job.id, true, |sub, tails, now| {
            let Some(wake) = sub
                .wake
                .as_ref()
                .filter(|w| w.delivered && sub.generation == job.generation)
            else {
                return Ok(Step::same(()));
            };
            match wake.lease_until_ms {
                None => Ok(Step::same(())),
                Some(until) if until > now => {
                    Ok(Step::same(()).then(JobKind::Expire, Duration::from_millis((until - now) as u64)))
                }
                Some(_) => {
                    let reopened = sub.end_wake(tails, now);
                    Ok(Step::changed(()).deliver_if(reopened))
                }
            }
        })
        .await
    }

    /// A callback or an ack: checks the token and the fence, applies the acks, extends the
    /// lease, and with `done` ends the wake (opening the next if work is pending).
    async fn finish(&self, id: &str, token: &str, body: &[u8], kind: Kind) -> Result<bool, Error> {
        let (org, token_generation) = Self::parse_token(token)?;
        let request = wake_request(body)?;
        self.verify_token(token, &org, id, token_generation, request.wake_id.as_deref())?;
        self.modify(&org, id, true, |sub, tails, now| {
            check_kind(sub, kind)?;
            sub.fence(token_generation, request.generation, request.wake_id.as_deref())?;
            // A lease that ran out is over, even before its expiry job ends the wake.
            if sub
                .wake
                .as_ref()
                .and_then(|w| w.lease_until_ms)
                .is_some_and(|until| until < now)
            {
                return Err(Refusal::fenced().into());
            }
            sub.apply_acks(&request.acks, tails)?;
            if request.done {
                let reopened = sub.end_wake(tails, now);
                return Ok(Step::changed(reopened).deliver_if(reopened));
            }
            let ttl = sub.spec.lease_ttl_ms;
            if let Some(wake) = sub.wake.as_mut() {
                wake.lease_until_ms = Some(now + ttl as i64);
            }
            Ok(Step::changed(false))
        })
        .await
    }

    /// Reads the record (and its streams' tails if `with_tails`), applies `f`, and saves the
    /// record if `f` changed it and nobody saved it since; then schedules `f`'s jobs. A change
    /// that ended a wake is followed by [`Self::recheck`]: an append that came meanwhile saw
    /// the wake open and woke nobody.
    async fn modify<T>(
        &self,
        org: &str,
        id: &str,
        with_tails: bool,
        f: impl FnMut(&mut Subscription, &Tails, i64) -> Result<Step<T>, Error>,
    ) -> Result<T, Error> {
        let (value, ended) = self.modify_once(org, id, with_tails, f).await?;
        if ended {
            self.recheck(org, id).await?;
        }
        Ok(value)
    }

    /// Opens a wake if none is open and a linked stream has pending messages.
    async fn recheck(&self, org: &str, id: &str) -> Result<(), Error> {
        self.modify_once(org, id, true, |sub, tails, now| {
            Ok(if sub.wake.is_none() && sub.pending(tails) {
                sub.open_wake(now);
                Step::changed(()).then(JobKind::Deliver, Duration::ZERO)
            } else {
                Step::same(())
            })
        })
        .await
        .map(drop)
    }

    /// [`Self::modify`] without the recheck: the value, and whether a wake ended.
    async fn modify_once<T>(
        &self,
        org: &str,
        id: &str,
        with_tails: bool,
        mut f: impl FnMut(&mut Subscription, &Tails, i64) -> Result<Step<T>, Error>,
    ) -> Result<(T, bool), Error> {
        for _ in 0..ATTEMPTS {
            let found = self.store.get(org, id).await?.ok_or_else(|| Refusal::not_found(id))?;
            let mut record = found.record;
            let had_wake = record.wake.is_some();
            let (tails, restarted) = if with_tails {
                let tails = self.tails(org, &record).await?;
                let restarted = record.restart_recreated(&tails);
                (tails, restarted)
            } else {
                (Tails::new(), false)
            };
            let step = f(&mut record, &tails, self.clock.now_ms())?;
            let changed = step.changed || restarted;
            if changed && !self.store.save(org, &record, Some(found.version)).await? {
                continue;
            }
            for (kind, delay) in step.jobs {
                let job = SubscriptionJob {
                    org: org.to_owned(),
                    id: id.to_owned(),
                    generation: record.generation,
                    kind,
                    attempt: record.failures,
                };
                self.scheduler.defer(MaintenanceJob::Subscription(job), delay).await?;
            }
            let ended = changed && had_wake && record.wake.is_none();
            return Ok((step.value, ended));
        }
        Err(busy(id))
    }

    /// The tails of the record's linked streams, read at once; a stream that no longer exists
    /// has none.
    async fn tails(&self, org: &str, sub: &Subscription) -> Result<Tails, Error> {
        let mut reads = tokio::task::JoinSet::new();
        for path in sub.links.keys() {
            let log = self.log.clone();
            let (stream, path) = (stream_path(org, path)?, path.clone());
            reads.spawn(async move { (path, log.metadata(&stream).await) });
        }
        let mut tails = Tails::new();
        while let Some(read) = reads.join_next().await {
            let (path, meta) = read.map_err(|e| Error::unavailable("read a stream's tail", e))?;
            match meta {
                Ok(meta) => {
                    tails.insert(path, meta.tail.seq());
                }
                Err(Error::NotFound { .. } | Error::Gone { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(tails)
    }

    async fn tail(&self, org: &str, path: &str) -> Result<Option<u64>, Error> {
        match self.log.metadata(&stream_path(org, path)?).await {
            Ok(meta) => Ok(Some(meta.tail.seq())),
            Err(Error::NotFound { .. } | Error::Gone { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The organization's subscriptions, as read at most [`WATCH_TTL`] ago.
    async fn watching(&self, org: &str) -> Result<Arc<Vec<Subscription>>, Error> {
        let cached = self
            .lock()
            .get(org)
            .filter(|(at, _)| at.elapsed() < WATCH_TTL)
            .map(|(_, s)| s.clone());
        if let Some(subs) = cached {
            return Ok(subs);
        }
        let subs = Arc::new(self.store.list(org).await?);
        self.lock().insert(org.to_owned(), (Instant::now(), subs.clone()));
        Ok(subs)
    }

    /// Drops this process's list of the organization's subscriptions (they changed).
    fn forget(&self, org: &str) {
        self.lock().remove(org);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watching> {
        self.watching.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A wake's token: `ds1.{org}.{generation}.{mac}`, the MAC over the organization, the
    /// subscription, the generation and the wake, so it opens this wake and no other.
    fn token(&self, org: &str, id: &str, generation: u64, wake_id: &str) -> String {
        let mac = self
            .signer
            .mac(format!("ds1\n{org}\n{id}\n{generation}\n{wake_id}").as_bytes());
        format!("ds1.{}.{generation}.{}", B64.encode(org), B64.encode(mac))
    }

    fn parse_token(token: &str) -> Result<(String, u64), Refusal> {
        let invalid = || {
            Refusal::new(
                401,
                "TOKEN_INVALID",
                "the token is not one this server gave for this wake",
            )
        };
        let mut parts = token.split('.');
        let (Some("ds1"), Some(org), Some(generation), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let org = B64
            .decode(org)
            .ok()
            .and_then(|o| String::from_utf8(o).ok())
            .ok_or_else(invalid)?;
        let generation = generation.parse().map_err(|_| invalid())?;
        Ok((org, generation))
    }

    fn verify_token(
        &self,
        token: &str,
        org: &str,
        id: &str,
        generation: u64,
        wake_id: Option<&str>,
    ) -> Result<(), Refusal> {
        let expected = self.token(org, id, generation, wake_id.unwrap_or(""));
        if constant_time_eq(expected.as_bytes(), token.as_bytes()) {
            Ok(())
        } else {
            Err(Refusal::new(
                401,
                "TOKEN_INVALID",
                "the token is not one this server gave for this wake",
            ))
        }
    }

    /// The subscription as `GET` shows it.
    fn view(&self, sub: &Subscription) -> Value {
        let (webhook, wake_stream) = match &sub.spec.delivery {
            Delivery::Webhook { url } => (
                json!({
                    "url": url,
                    "signing": {
                        "alg": "ed25519",
                        "kid": self.signer.kid(),
                        "jwks_url": format!("{}__ds/jwks.json", sub.root_url),
                    },
                }),
                Value::Null,
            ),
            Delivery::PullWake { wake_stream } => (Value::Null, json!(wake_stream)),
        };
        let streams: Vec<Value> = sub
            .links
            .iter()
            .map(|(path, link)| {
                json!({
                    "path": path,
                    "link_type": if link.explicit { "explicit" } else { "glob" },
                    "acked_offset": Offset::after(link.acked).to_string(),
                })
            })
            .collect();
        json!({
            "id": sub.id,
            "subscription_id": sub.id,
            "type": match sub.spec.delivery { Delivery::Webhook { .. } => "webhook", Delivery::PullWake { .. } => "pull-wake" },
            "pattern": sub.spec.pattern,
            "streams": streams,
            "webhook": webhook,
            "wake_stream": wake_stream,
            "lease_ttl_ms": sub.spec.lease_ttl_ms,
            "created_at": crate::clock::rfc3339_ms(sub.created_ms),
            "status": sub.status(),
            "next_attempt_at": sub.next_attempt_ms.map(crate::clock::rfc3339_ms),
            "description": sub.spec.description,
        })
    }
}

fn wake_request(body: &[u8]) -> Result<WakeRequest, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        Refusal::invalid(format!(
            "expected {{\"wake_id\", \"generation\", \"acks\", \"done\"}}: {e}"
        ))
    })
}

fn check_kind(sub: &Subscription, kind: Kind) -> Result<(), Refusal> {
    let actual = match sub.spec.delivery {
        Delivery::Webhook { .. } => Kind::Webhook,
        Delivery::PullWake { .. } => Kind::PullWake,
    };
    match (actual == kind, kind) {
        (true, _) => Ok(()),
        (false, Kind::Webhook) => Err(Refusal::invalid(
            "this is a pull-wake subscription: use ack and release",
        )),
        (false, Kind::PullWake) => Err(Refusal::invalid("this is a webhook subscription: use its callback")),
    }
}

fn stream_path(org: &str, path: &str) -> Result<StreamPath, Error> {
    StreamPath::in_org(org, path)
}

/// A stream a subscription may name: one whose full path (with its organization's) is valid.
fn writable(org: &str, path: &str) -> Result<(), Refusal> {
    stream_path(org, path)
        .map(drop)
        .map_err(|e| Refusal::invalid(format!("stream `{path}`: {e}")))
}

fn busy(id: &str) -> Error {
    Error::unavailable(
        format!("update subscription `{id}`"),
        "too many concurrent changes; retry",
    )
}

/// The wait before webhook attempt `failures + 1`: 1 s doubling to 60 s, ±20%.
fn retry_delay(failures: u32) -> Duration {
    let base = 1_000u64
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(MAX_RETRY_MS);
    let jitter = fastrand::f64().mul_add(0.4, -0.2) * base as f64;
    Duration::from_millis((base as f64 + jitter).max(0.0) as u64)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_a_minute() {
        for (failures, base) in [(1, 1_000.0), (2, 2_000.0), (3, 4_000.0), (7, 60_000.0), (40, 60_000.0)] {
            let ms = retry_delay(failures).as_millis() as f64;
            assert!(ms >= base * 0.8 && ms <= base * 1.2, "{failures}: {ms}");
        }
    }
}
