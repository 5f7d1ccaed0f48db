//! # Delivering wakes: the jobs that post a wake's webhook or append its wake event, and
//! end a wake whose lease ran out

use std::time::Duration;

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD as B64};
use serde_json::{Value, json};

use super::*;

/// The longest wait between webhook attempts.
const MAX_RETRY_MS: u64 = 60_000;

impl Subscriptions {
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
}

/// The wait before webhook attempt `failures + 1`: 1 s doubling to 60 s, ±20%.
fn retry_delay(failures: u32) -> Duration {
    let base = 1_000u64
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(MAX_RETRY_MS);
    let jitter = fastrand::f64().mul_add(0.4, -0.2) * base as f64;
    Duration::from_millis((base as f64 + jitter).max(0.0) as u64)
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
