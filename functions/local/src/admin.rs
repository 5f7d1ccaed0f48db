//! # `spool admin`: organizations and API keys, on the backend `--backend` names
//!
//! Each command prints its result as JSON on stdout; keys are shown only when they are made.

use anyhow::Context;
use clap::Subcommand;

use crate::{StoreArgs, now_ms, services::services};

#[derive(Debug, Subcommand)]
pub(crate) enum AdminCommand {
    /// Make an organization; prints `{"org_id", "name"}` as JSON.
    CreateOrg {
        /// Its display name.
        name: String,
        /// Its id (1 to 64 letters, digits, `-` or `_`) instead of a random `org_…`.
        #[arg(long)]
        id: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Make an API key for an organization; prints `{"org_id", "key_id", "api_key",
    /// "capabilities"}` as JSON. The key is shown only this once: Spool keeps only its hash.
    CreateApiKey {
        /// The organization's id.
        org: String,
        /// A capability that tokens issued for the key carry (repeatable), e.g. `agent`.
        #[arg(long = "capability", value_name = "NAME")]
        capabilities: Vec<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke an API key: no handshake accepts it again, and the tokens issued for it stop
    /// working within SPOOL_REVOCATION_CHECK_MS (30 s); prints `{"key_id", "org_id",
    /// "revoked"}` as JSON.
    RevokeApiKey {
        /// The key's id (the part of `spool_{key_id}_{secret}` before the secret), or the
        /// whole key.
        key: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// `spool admin …`: prints the result as JSON on stdout.
pub(crate) async fn run(command: AdminCommand) -> anyhow::Result<()> {
    let (AdminCommand::CreateOrg { store, .. }
    | AdminCommand::CreateApiKey { store, .. }
    | AdminCommand::RevokeApiKey { store, .. }) = &command;
    let config = store.config()?;
    let services = services(&config, None).await?;
    let directory = services.metadata.as_ref();
    let out = match &command {
        AdminCommand::CreateOrg { name, id, .. } => {
            let org = spool_api::admin::create_org(directory, id.as_deref(), name, now_ms())
                .await
                .context("cannot create the organization")?;
            spool_chat::service::ensure_global_session(
                services.metadata.as_ref(),
                services.log.as_ref(),
                &org.id,
                now_ms(),
            )
            .await
            .context("cannot create the organization's global chat")?;
            serde_json::json!({ "org_id": org.id, "name": org.name })
        }
        AdminCommand::CreateApiKey { org, capabilities, .. } => {
            let (record, key) = spool_api::admin::create_api_key(directory, org, capabilities, now_ms())
                .await
                .with_context(|| {
                    format!(
                        "cannot create an API key for `{org}` (make the organization with `spool admin create-org`)"
                    )
                })?;
            serde_json::json!({
                "org_id": record.org_id,
                "key_id": record.key_id,
                "api_key": key.reveal(),
                "capabilities": record.capabilities,
            })
        }
        AdminCommand::RevokeApiKey { key, .. } => {
            // A whole key names its id; so does the id alone.
            let key_id = spool_auth::ApiKey::parse(key)
                .map(|k| k.key_id().to_owned())
                .unwrap_or_else(|_| key.trim().to_owned());
            // The list first: a crash between the two leaves a key that is refused, not one
            // whose tokens still work.
            spool_chat::revocation::revoke(services.log.as_ref(), &key_id, now_ms())
                .await
                .context("cannot record the revocation")?;
            let removed = directory
                .remove_api_key(&key_id)
                .await
                .context("cannot delete the API key")?;
            let Some(record) = removed else {
                anyhow::bail!("there is no API key `{key_id}` (its tokens are refused anyway)");
            };
            serde_json::json!({ "key_id": record.key_id, "org_id": record.org_id, "revoked": true })
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
