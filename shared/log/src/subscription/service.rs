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

use serde_json::Value;

use super::{
    JobKind, Outbound, SubscriptionJob, SubscriptionStore, WebhookSigner,
    record::{Ack, StreamInfo, Subscription, Tails},
    refusal::Refusal,
    spec::{self, Delivery, Spec, UrlPolicy},
};
use crate::{
    clock::Clock,
    error::Error,
    jobs::{Deferred, MaintenanceJob},
    port::StreamLog,
    stream::{Append, StreamPath},
};

mod deliver;
mod step;
mod token;

use step::Step;

/// How long a process trusts its list of an organization's subscriptions before reading it
/// again. A subscription made in another process is seen by this one's appends this much later.
const WATCH_TTL: Duration = Duration::from_secs(1);
/// How long an open wake may go without its job running before an append drives it again.
const STALE_MS: i64 = 60_000;
/// Compare-and-set attempts before giving up.
const ATTEMPTS: usize = 16;

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

/// What a callback, an ack or a release reports: the wake it is for and what it acked.
#[derive(Debug, Clone, Default)]
pub struct WakeReport {
    /// The wake (none: the caller does not name one).
    pub wake_id: Option<String>,
    /// The subscription's generation the caller holds.
    pub generation: Option<u64>,
    /// The offsets acked, per stream.
    pub acks: Vec<Ack>,
    /// The wake is finished.
    pub done: bool,
}

/// A pull-wake worker's claim: the wake it now holds, and its work.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The wake.
    pub wake_id: String,
    /// The subscription's generation.
    pub generation: u64,
    /// The wake's token, the credential of its acks and release.
    pub token: String,
    /// The linked streams and how far each is acked.
    pub streams: Vec<StreamInfo>,
    /// How long the claim holds without an ack.
    pub lease_ttl_ms: u64,
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

    /// The id of the key webhook requests are signed with.
    pub fn signing_kid(&self) -> String {
        self.signer.kid()
    }

    /// Which webhook URLs this service calls, for [`Spec::parse`].
    pub fn urls(&self) -> UrlPolicy {
        self.urls
    }

    /// `PUT`: creates the subscription (`true`) or re-confirms an identical one (`false`), and
    /// answers it as it is stored.
    pub async fn put(&self, org: &str, id: &str, spec: Spec, root_url: &str) -> Result<(bool, Subscription), Error> {
        spec::check_id(id)?;
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
                return Ok((false, existing.record));
            }
            if self.store.save(org, &record, None).await? {
                self.forget(org);
                // An append that came between reading the tails and saving woke nobody.
                self.recheck(org, id).await?;
                return Ok((true, record));
            }
        }
        Err(busy(id))
    }

    /// `GET`: the subscription.
    pub async fn get(&self, org: &str, id: &str) -> Result<Subscription, Error> {
        spec::check_id(id)?;
        let found = self.store.get(org, id).await?.ok_or_else(|| Refusal::not_found(id))?;
        Ok(found.record)
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

    /// `POST …/streams`: links `streams` by name, each at its tail.
    pub async fn add_streams(&self, org: &str, id: &str, streams: &[String]) -> Result<(), Error> {
        spec::check_id(id)?;
        let paths = spec::check_paths(streams)?;
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

    /// `POST …/callback`: a webhook receiver acks, extends its lease, or finishes (`done`);
    /// whether a next wake opened.
    pub async fn callback(&self, id: &str, token: &str, request: &WakeReport) -> Result<bool, Error> {
        self.finish(id, token, request, Kind::Webhook).await
    }

    /// `POST …/ack`: a pull-wake worker acks, heartbeats, or finishes (`done`); whether a next
    /// wake opened.
    pub async fn ack(&self, id: &str, token: &str, request: &WakeReport) -> Result<bool, Error> {
        self.finish(id, token, request, Kind::PullWake).await
    }

    /// `POST …/release`: a pull-wake worker gives its wake up without acking.
    pub async fn release(&self, id: &str, token: &str, request: &WakeReport) -> Result<(), Error> {
        let (org, token_generation) = Self::parse_token(token)?;
        self.verify_token(token, &org, id, token_generation, request.wake_id.as_deref())?;
        self.modify(&org, id, true, |sub, tails, now| {
            check_kind(sub, Kind::PullWake)?;
            sub.fence(token_generation, request.generation, request.wake_id.as_deref())?;
            let reopened = sub.end_wake(tails, now);
            Ok(Step::changed(()).deliver_if(reopened))
        })
        .await
    }

    /// `POST …/claim`: the pull-wake worker `worker` takes the pending work, with a lease.
    pub async fn claim(&self, org: &str, id: &str, worker: &str) -> Result<Claimed, Error> {
        spec::check_id(id)?;
        if worker.is_empty() || worker.len() > 256 {
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
                wake.holder = Some(worker.to_owned());
                wake.lease_until_ms = Some(now + ttl as i64);
                wake.delivered = true;
                wake.snapshot = snapshot;
                let token = self.token(org, id, generation, &wake.id);
                let claimed = Claimed {
                    wake_id: wake.id.clone(),
                    generation,
                    token,
                    streams: sub.infos(tails),
                    lease_ttl_ms: ttl,
                };
                Ok(Step::changed(Ok(claimed)).then(JobKind::Expire, Duration::from_millis(ttl)))
            })
            .await?;
        Ok(claimed?)
    }

    /// A callback or an ack: checks the token and the fence, applies the acks, extends the
    /// lease, and with `done` ends the wake (opening the next if work is pending).
    async fn finish(&self, id: &str, token: &str, request: &WakeReport, kind: Kind) -> Result<bool, Error> {
        let (org, token_generation) = Self::parse_token(token)?;
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
