//! # The audit stream
//!
//! Each organization has one: `audit` (stored at `o/{org}/audit`), a JSON stream of what was
//! done with its credentials (handshakes; capability changes when sessions exist). Clients can
//! read it through the stream function and cannot write it.

use serde_json::Value;
pub use spool_domain::directory::AUDIT_STREAM;
use spool_domain::{Append, ContentType, CreateStream, Error, StreamLog, StreamPath};

/// Appends `event` to the audit stream of `org`, creating the stream on first use.
pub(crate) async fn record(log: &dyn StreamLog, org: &str, event: &Value) -> Result<(), Error> {
    let path = StreamPath::parse(format!("o/{org}/{AUDIT_STREAM}"))?;
    let body = bytes::Bytes::from(event.to_string());
    match log.append(&path, Append::one(body.clone())).await {
        Err(Error::NotFound { .. }) => {
            log.create(&path, CreateStream::new(ContentType::parse("application/json")?))
                .await?;
            log.append(&path, Append::one(body)).await.map(drop)
        }
        other => other.map(drop),
    }
}
