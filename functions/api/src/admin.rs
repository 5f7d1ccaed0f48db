//! # Provisioning: organizations and API keys
//!
//! What `spool admin create-org` and `spool admin create-api-key` do, and the local development
//! organization `spool serve` makes on its first start. An API key is returned whole exactly
//! once, here; the directory keeps only its hash.

use spool_auth::ApiKey;
use spool_chat::directory::{ApiKeyRecord, Directory, Org};
use spool_log::error::Error;

/// The organization of local development: `spool serve` makes it on first start, and
/// `--no-auth` requests act for it.
pub const LOCAL_ORG: &str = "local";

/// Capability names: 1 to 64 lowercase letters, digits or `_`.
fn check_capability(name: &str) -> Result<(), Error> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "capability",
            format!("`{name}`: use 1 to 64 lowercase letters, digits or `_`"),
        ))
    }
}

fn auth_error(e: spool_auth::AuthError) -> Error {
    match e {
        spool_auth::AuthError::InvalidOrg(id) => Error::invalid(
            "organization id",
            format!("`{id}`: use 1 to 64 letters, digits, `-` or `_`"),
        ),
        other => Error::unavailable("generate a credential", other),
    }
}

/// Makes an organization named `name`, with the id `id` or a new random one (`org_…`).
pub async fn create_org(directory: &dyn Directory, id: Option<&str>, name: &str, now_ms: i64) -> Result<Org, Error> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(Error::invalid(
            "organization name",
            "give a name of 1 to 200 characters",
        ));
    }
    let id = match id {
        Some(id) => id.to_owned(),
        None => format!("org_{}", spool_auth::random_secret(8).map_err(auth_error)?),
    };
    spool_auth::check_org(&id).map_err(auth_error)?;
    let org = Org {
        id,
        name: name.to_owned(),
        created_ms: now_ms,
    };
    directory.create_org(&org).await?;
    tracing::info!(org = %org.id, "organization created");
    Ok(org)
}

/// Makes an API key for the organization `org_id` granting `capabilities`, and returns it whole:
/// the only time it can be shown.
pub async fn create_api_key(
    directory: &dyn Directory,
    org_id: &str,
    capabilities: &[String],
    now_ms: i64,
) -> Result<(ApiKeyRecord, ApiKey), Error> {
    for capability in capabilities {
        check_capability(capability)?;
    }
    let mut capabilities = capabilities.to_vec();
    capabilities.sort();
    capabilities.dedup();
    let runner = spool_auth::Capability::Runner.as_str();
    if capabilities.len() > 1 && capabilities.iter().any(|c| c == runner) {
        return Err(Error::invalid(
            "capability",
            format!(
                "a runner's key carries `{runner}` alone (its tokens reach only the runner routes); make another key for the rest"
            ),
        ));
    }
    let key = ApiKey::generate().map_err(auth_error)?;
    let record = ApiKeyRecord {
        key_id: key.key_id().to_owned(),
        org_id: org_id.to_owned(),
        secret_hash: key.secret_hash(),
        capabilities,
        created_ms: now_ms,
    };
    directory.add_api_key(&record).await?;
    tracing::info!(org = %org_id, key_id = %record.key_id, "API key created");
    Ok((record, key))
}

/// Makes the local development organization unless it exists; true if it was made now.
pub async fn ensure_local_org(directory: &dyn Directory, now_ms: i64) -> Result<bool, Error> {
    if directory.org(LOCAL_ORG).await?.is_some() {
        return Ok(false);
    }
    match create_org(directory, Some(LOCAL_ORG), "Local development", now_ms).await {
        Ok(_) => Ok(true),
        // Another process made it meanwhile.
        Err(Error::Exists { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}
