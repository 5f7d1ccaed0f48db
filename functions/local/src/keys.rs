//! # The local keys
//!
//! What `spool serve` keeps in its data directory so that every start signs and prints the same
//! keys: the token signing secret and the local organization's API key, each in a file only its
//! owner can read.

use anyhow::Context;
use spool_platform::Config;

use crate::{LOCAL_ORG, now_ms, services::Services};

/// What the local key's tokens carry: a companion run with it may turn on context from the
/// person's notes (`context_for_query`), saving into them (`capture_ingest`) and the tools of
/// its own MCP servers (`mcp_tools`) for their chats.
const LOCAL_KEY_CAPABILITIES: [spool_auth::Capability; 3] = [
    spool_auth::Capability::ContextForQuery,
    spool_auth::Capability::CaptureIngest,
    spool_auth::Capability::McpTools,
];

/// The local organization's API key: made with the organization on first start and kept in
/// `{data_dir}/local-api-key` (readable by its owner only) so every start can print it. Only
/// this development key is kept whole; keys from `spool admin create-api-key` are not.
pub(crate) async fn local_api_key(services: &Services, config: &Config) -> anyhow::Result<String> {
    let directory = services.metadata.as_ref();
    spool_api::admin::ensure_local_org(directory, now_ms()).await?;
    spool_chat::service::ensure_global_session(directory, services.log.as_ref(), LOCAL_ORG, now_ms()).await?;
    let file = config.data_dir.join("local-api-key");
    if let Ok(text) = std::fs::read_to_string(&file) {
        let key = spool_auth::ApiKey::parse(&text);
        if let Ok(key) = key
            && let Some(record) = directory.api_key(key.key_id()).await?
            && record.org_id == LOCAL_ORG
            && key.matches(&record.secret_hash)
            && LOCAL_KEY_CAPABILITIES
                .iter()
                .all(|c| record.capabilities.iter().any(|have| have == c.as_str()))
        {
            return Ok(key.reveal());
        }
        tracing::warn!(file = %file.display(), "the kept local API key is not valid here (or predates the companion); making a new one");
        std::fs::remove_file(&file).with_context(|| format!("cannot replace {}", file.display()))?;
    }
    let capabilities = LOCAL_KEY_CAPABILITIES.map(|c| c.as_str().to_owned());
    let (_, key) = spool_api::admin::create_api_key(directory, LOCAL_ORG, &capabilities, now_ms()).await?;
    private_dir(&config.data_dir)?;
    write_private(&file, &key.reveal()).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(key.reveal())
}

/// The token keys: from `SPOOL_JWT_SECRET`, or from a secret `spool serve` made on its first
/// start and keeps in the data directory (readable by its owner only), so tokens survive
/// restarts.
pub(crate) fn token_keys(config: &Config) -> anyhow::Result<spool_auth::TokenKeys> {
    Ok(config.token_keys(jwt_secret(config)?.as_bytes())?)
}

/// The token signing secret: `SPOOL_JWT_SECRET`, or the one kept in the data directory.
pub(crate) fn jwt_secret(config: &Config) -> anyhow::Result<String> {
    use secrecy::ExposeSecret;
    if let Some(secret) = &config.jwt_secret {
        return Ok(secret.expose_secret().to_owned());
    }
    let file = config.data_dir.join("jwt-secret");
    let secret = match std::fs::read_to_string(&file) {
        Ok(secret) => secret.trim().to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let secret = spool_auth::random_secret(32)?;
            private_dir(&config.data_dir)?;
            write_private(&file, &secret).with_context(|| format!("cannot write {}", file.display()))?;
            secret
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    Ok(secret)
}

/// The box that seals MCP servers' secrets: over `SPOOL_DATA_KEY`, or over a key `spool serve`
/// made on its first start and keeps in the data directory (`data-key`, readable by its owner
/// only), so what it sealed opens after a restart.
pub(crate) fn data_key(config: &Config) -> anyhow::Result<spool_chat::mcp::SecretBox> {
    if let Some(sealer) = config.data_box()? {
        return Ok(sealer);
    }
    let file = config.data_dir.join("data-key");
    let key = match std::fs::read_to_string(&file) {
        Ok(key) => key,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = spool_chat::mcp::SecretBox::generate()?;
            private_dir(&config.data_dir)?;
            write_private(&file, &key).with_context(|| format!("cannot write {}", file.display()))?;
            key
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    spool_chat::mcp::SecretBox::parse(&key)
        .map_err(|reason| anyhow::anyhow!("{} is not a data key: it {reason}", file.display()))
}

/// Makes the data directory (and missing parents) readable by its owner only.
fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Writes a new file only its owner can read.
fn write_private(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(contents.as_bytes())
}
