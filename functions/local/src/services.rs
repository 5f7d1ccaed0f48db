//! # What `spool serve` and `spool admin` run on
//!
//! The configured backend's ports, as the backend builds them ([`spool_embedded::Stores`],
//! [`spool_aws::Stores`]).

use std::sync::Arc;

use anyhow::Context;
use spool_chat::{attachment::FileStore, metadata::Metadata, turns::TurnQueue};
use spool_log::{aggregate::Aggregates, port::StreamLog};
use spool_platform::{Backend, Config};

/// Everything `spool serve` runs on.
pub(crate) struct Services {
    pub(crate) log: Arc<dyn StreamLog>,
    pub(crate) metadata: Arc<dyn Metadata>,
    pub(crate) turns: Arc<dyn TurnQueue>,
    /// What it runs on, for people.
    pub(crate) description: String,
    /// Chats' files' bytes.
    pub(crate) files: Arc<dyn FileStore>,
    /// Where workspaces' feed events and audit records are handed over.
    pub(crate) aggregates: Arc<dyn Aggregates>,
    /// The AWS backend's stores, when that is the backend: its job queues.
    pub(crate) aws: Option<spool_aws::Stores>,
    /// The embedded store's records, when that is the backend: the jobs under way, the sweep
    /// of unfinished uploads.
    pub(crate) embedded: Option<Arc<spool_embedded::EmbeddedMetadata>>,
}

/// The configured backend's ports; `counter` counts the AWS backend's requests.
pub(crate) async fn services(config: &Config, counter: Option<spool_aws::RequestCounter>) -> anyhow::Result<Services> {
    match config.backend {
        Backend::Embedded => {
            let options = spool_embedded::Options {
                limits: config.limits,
                poll_interval: config.live_poll,
                ..spool_embedded::Options::default()
            };
            let stores = spool_embedded::Stores::open(&config.data_dir, options)?;
            Ok(Services {
                log: stores.log.clone(),
                metadata: stores.metadata.clone(),
                turns: stores.metadata.clone(),
                description: stores.description(),
                files: stores.files.clone(),
                aggregates: stores.aggregates(),
                aws: None,
                embedded: Some(stores.metadata),
            })
        }
        Backend::Aws => {
            let stores = spool_aws::Stores::connect(config, counter)
                .await
                .context("cannot set up the AWS backend")?;
            Ok(Services {
                log: stores.log(),
                metadata: stores.metadata()?,
                turns: stores.turns()?,
                description: stores.description(),
                files: stores.files()?,
                aggregates: stores.aggregates(),
                aws: Some(stores),
                embedded: None,
            })
        }
    }
}
