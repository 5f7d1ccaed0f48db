//! # The subscription routes' bodies
//!
//! What clients send to the protocol's subscription routes ([`crate::subscriptions`]) and the
//! JSON they are answered, read into and out of the rules of `spool_log::subscription`.
//! A malformed body is `400 INVALID_REQUEST`, as the protocol has it.

use serde::Deserialize;
use serde_json::{Value, json};
use spool_log::{
    clock::rfc3339_ms,
    error::Error,
    stream::Offset,
    subscription::{
        record::{Ack, Subscription},
        refusal::Refusal,
        service::{Claimed, WakeReport},
        spec::Delivery,
    },
};

/// The streams of `POST …/streams`: `{"streams": [path, …]}`.
pub(crate) fn streams(body: &[u8]) -> Result<Vec<String>, Error> {
    #[derive(Deserialize)]
    struct Body {
        streams: Vec<String>,
    }
    let body: Body =
        serde_json::from_slice(body).map_err(|e| Refusal::invalid(format!("expected {{\"streams\": [...]}}: {e}")))?;
    Ok(body.streams)
}

/// The worker of `POST …/claim`: `{"worker": "…"}`.
pub(crate) fn worker(body: &[u8]) -> Result<String, Error> {
    #[derive(Deserialize)]
    struct Body {
        worker: String,
    }
    let body: Body =
        serde_json::from_slice(body).map_err(|e| Refusal::invalid(format!("expected {{\"worker\": \"...\"}}: {e}")))?;
    Ok(body.worker)
}

/// The report of a callback, an ack or a release: `{"wake_id", "generation", "acks", "done"}`.
pub(crate) fn wake_report(body: &[u8]) -> Result<WakeReport, Error> {
    #[derive(Deserialize)]
    struct Body {
        wake_id: Option<String>,
        generation: Option<u64>,
        #[serde(default)]
        acks: Vec<Ack>,
        #[serde(default)]
        done: bool,
    }
    let body: Body = serde_json::from_slice(body).map_err(|e| {
        Refusal::invalid(format!(
            "expected {{\"wake_id\", \"generation\", \"acks\", \"done\"}}: {e}"
        ))
    })?;
    Ok(WakeReport {
        wake_id: body.wake_id,
        generation: body.generation,
        acks: body.acks,
        done: body.done,
    })
}

/// The answer of a callback or an ack: whether a next wake opened.
pub(crate) fn finished(next_wake: bool) -> Value {
    json!({ "ok": true, "next_wake": next_wake })
}

/// The answer of a claim.
pub(crate) fn claimed(claim: Claimed) -> Value {
    json!({
        "wake_id": claim.wake_id,
        "generation": claim.generation,
        "token": claim.token,
        "streams": claim.streams,
        "lease_ttl_ms": claim.lease_ttl_ms,
    })
}

/// The subscription as `PUT` and `GET` answer it; webhook requests are signed with the key
/// `kid`.
pub(crate) fn view(sub: &Subscription, kid: &str) -> Value {
    let (webhook, wake_stream) = match &sub.spec.delivery {
        Delivery::Webhook { url } => (
            json!({
                "url": url,
                "signing": {
                    "alg": "ed25519",
                    "kid": kid,
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
        "created_at": rfc3339_ms(sub.created_ms),
        "status": sub.status(),
        "next_attempt_at": sub.next_attempt_ms.map(rfc3339_ms),
        "description": sub.spec.description,
    })
}
