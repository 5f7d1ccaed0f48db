//! # Notifications by Amazon SES
//!
//! [`SesNotifier`] sends a workspace's notifications as plain-text email through SES v2
//! `SendEmail`, from the address an operator verified (`SPOOL_NOTIFY_FROM`).
//! [`notifier_from_config`] picks it when that address is set, else the log.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message};
use spool_chat::notifier::{LogNotifier, Notification, Notifier};
use spool_log::error::Error;
use spool_platform::Config;

use crate::errors::describe;

/// Sends notifications from one verified address.
#[derive(Debug, Clone)]
pub struct SesNotifier {
    client: aws_sdk_sesv2::Client,
    from: String,
}

impl SesNotifier {
    /// Sends through `client` from `from`.
    pub fn new(client: aws_sdk_sesv2::Client, from: String) -> Self {
        Self { client, from }
    }
}

fn text(data: &str) -> Result<Content, Error> {
    Content::builder()
        .data(data)
        .charset("UTF-8")
        .build()
        .map_err(|e| Error::unavailable("SES SendEmail", e))
}

#[async_trait]
impl Notifier for SesNotifier {
    fn via(&self) -> &'static str {
        "email"
    }

    fn sender(&self) -> Option<&str> {
        Some(&self.from)
    }

    async fn send(&self, n: &Notification) -> Result<(), Error> {
        let message = Message::builder()
            .subject(text(&n.subject)?)
            .body(Body::builder().text(text(&n.body)?).build())
            .build();
        self.client
            .send_email()
            .from_email_address(&self.from)
            .destination(Destination::builder().to_addresses(&n.to).build())
            .content(EmailContent::builder().simple(message).build())
            .send()
            .await
            .map_err(|e| Error::unavailable("SES SendEmail", describe(&e)))?;
        tracing::info!(to = %n.to, kind = ?n.kind, "notification sent by SES");
        Ok(())
    }
}

/// SES from `SPOOL_NOTIFY_FROM` when it is set (with the process's AWS settings, whatever its
/// backend), else a line in the log.
pub async fn notifier_from_config(config: &Config) -> Arc<dyn Notifier> {
    match &config.aws.notify_from {
        Some(from) => {
            let sdk = crate::load_sdk_config(&config.aws).await;
            Arc::new(SesNotifier::new(aws_sdk_sesv2::Client::new(&sdk), from.clone()))
        }
        None => Arc::new(LogNotifier),
    }
}
