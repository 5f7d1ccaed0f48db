//! # Secrets from Secrets Manager
//!
//! On Lambda nothing secret is in a function's environment. `SPOOL_SECRET_ARNS` names Secrets
//! Manager secrets, each a JSON object of configuration variables (the template's signing
//! secret is `{"SPOOL_JWT_SECRET": "…"}`; an operator's provider keys are, for example,
//! `{"SPOOL_ANTHROPIC_API_KEY": "…"}`). [`configure`] reads their current versions once, at
//! cold start, and builds the process's [`Config`] from the environment with them over it, in
//! memory only.
//!
//! The signing secret rotates without signing anyone out, using Secrets Manager's stages:
//! tokens name their key (`kid`), the `AWSCURRENT` version signs, the `AWSPENDING` version
//! verifies, and the `AWSPREVIOUS` version verifies for a token's lifetime after the secret
//! last changed. [`Configured::keep_fresh`] reads the stages again every
//! `SPOOL_SECRETS_REFRESH_MS`, so a rotation staged as `AWSPENDING` is accepted everywhere
//! before it is promoted to sign (docs/RUNBOOK.md, "Rotate the signing secret"). CloudFront's
//! origin secret (`SPOOL_ORIGIN_SECRET`) is accepted in its current and previous versions, so
//! it rotates too. Only the current versions must be readable: a stage that is missing or
//! malformed is skipped with a warning, never a reason not to start.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_secretsmanager::Client;
use secrecy::{ExposeSecret, SecretString};
use spool_auth::{OriginCheck, TokenKeys};
use spool_platform::{Config, Error};

use crate::errors::describe;

/// The variable whose value signs tokens.
const SIGNING_VAR: &str = "SPOOL_JWT_SECRET";
/// The variable whose value CloudFront sends to the functions.
const ORIGIN_VAR: &str = "SPOOL_ORIGIN_SECRET";
/// The stages whose values of those two verify, besides the current one.
const OTHER_STAGES: [&str; 2] = ["AWSPENDING", "AWSPREVIOUS"];

/// Where a process's secrets are read from.
#[derive(Debug, Clone)]
pub struct SecretSource {
    client: Client,
    arns: Vec<String>,
}

/// What the secrets held when they were read.
#[derive(Default)]
pub struct SecretValues {
    /// Configuration variables from the current versions, in the order of the ARNs.
    vars: Vec<(String, SecretString)>,
    /// The signing and origin secrets' values in their other stages: (variable, stage, value).
    staged: Vec<(&'static str, &'static str, SecretString)>,
    /// When the secret holding the signing secret last changed (seconds since the Unix epoch).
    signing_changed: Option<i64>,
}

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.vars.iter().map(|(name, _)| name.as_str()).collect();
        let staged: Vec<String> = self
            .staged
            .iter()
            .map(|(var, stage, _)| format!("{var}@{stage}"))
            .collect();
        write!(f, "SecretValues({names:?}, staged {staged:?})")
    }
}

type Object = HashMap<String, SecretString>;

impl SecretSource {
    /// Reads the secrets `arns` name through `client`.
    pub fn new(client: Client, arns: Vec<String>) -> Self {
        Self { client, arns }
    }

    /// One stage of one secret, parsed; `None` when the secret has no version in that stage.
    async fn stage(&self, arn: &str, stage: &str) -> Result<Option<Object>, Error> {
        let failed = |reason: String| Error::Secret {
            arn: arn.to_owned(),
            reason,
        };
        let out = match self
            .client
            .get_secret_value()
            .secret_id(arn)
            .version_stage(stage)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                let missing = e
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception());
                if missing && stage != "AWSCURRENT" {
                    return Ok(None);
                }
                return Err(failed(describe(&e)));
            }
        };
        let text = out
            .secret_string()
            .ok_or_else(|| failed(format!("its {stage} version holds binary data, not a JSON object")))?;
        let object: HashMap<String, serde_json::Value> = serde_json::from_str(text)
            .map_err(|_| failed(format!("its {stage} version is not a JSON object of strings")))?;
        object
            .into_iter()
            .map(|(name, value)| match value {
                serde_json::Value::String(value) => Ok((name, SecretString::from(value))),
                _ => Err(failed(format!("`{name}` in its {stage} version is not a string"))),
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// When `arn` last changed, if Secrets Manager says.
    async fn changed(&self, arn: &str) -> Option<i64> {
        match self.client.describe_secret().secret_id(arn).send().await {
            Ok(out) => out.last_changed_date().map(|date| date.secs()),
            Err(e) => {
                tracing::warn!(%arn, error = %describe(&e), "cannot read when the signing secret changed; its previous version verifies for a token's lifetime from now");
                None
            }
        }
    }

    /// Reads every secret's current version, and the signing and origin secrets' other
    /// stages (best effort: a stage that cannot be read or parsed is skipped, with a warning).
    pub async fn read(&self) -> Result<SecretValues, Error> {
        let mut values = SecretValues::default();
        for arn in &self.arns {
            let current = self.stage(arn, "AWSCURRENT").await?.unwrap_or_default();
            let mut names: Vec<_> = current.into_iter().collect();
            names.sort_by(|a, b| a.0.cmp(&b.0));
            let holds = |var: &str| names.iter().any(|(name, _)| name == var);
            let rotating: Vec<&'static str> = [SIGNING_VAR, ORIGIN_VAR].into_iter().filter(|var| holds(var)).collect();
            for stage in OTHER_STAGES.into_iter().filter(|_| !rotating.is_empty()) {
                match self.stage(arn, stage).await {
                    Ok(Some(mut other)) => {
                        for var in &rotating {
                            if let Some(value) = other.remove(*var) {
                                values.staged.push((var, stage, value));
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "skipping a secret's {stage} version"),
                }
            }
            if rotating.contains(&SIGNING_VAR) {
                values.signing_changed = self.changed(arn).await;
            }
            values.vars.extend(names);
        }
        tracing::info!(secrets = self.arns.len(), values = ?values, "read the configured secrets");
        Ok(values)
    }
}

/// A process's configuration, and where its secrets came from.
#[derive(Debug)]
pub struct Configured {
    /// The configuration: the environment, with the secrets over it.
    pub config: Config,
    /// Where the secrets are read again, when any are configured.
    source: Option<SecretSource>,
    /// What they held at start (nothing without secrets).
    values: SecretValues,
}

/// The configuration from the process's environment and the secrets `SPOOL_SECRET_ARNS` names.
pub async fn configure() -> Result<Configured, Error> {
    configure_from(std::env::vars().collect()).await
}

/// [`configure`] from `vars` in place of the environment.
pub async fn configure_from(vars: Vec<(String, String)>) -> Result<Configured, Error> {
    let config = Config::from_vars(vars.clone())?;
    if config.aws.secret_arns.is_empty() {
        return Ok(Configured {
            config,
            source: None,
            values: SecretValues::default(),
        });
    }
    let sdk = crate::load_sdk_config(&config.aws).await;
    let source = SecretSource::new(Client::new(&sdk), config.aws.secret_arns.clone());
    let values = source.read().await?;
    Ok(Configured {
        config: merged(vars, &values)?,
        source: Some(source),
        values,
    })
}

/// The configuration from `vars` with the secrets' current values over them.
fn merged(vars: Vec<(String, String)>, values: &SecretValues) -> Result<Config, Error> {
    let secrets = values
        .vars
        .iter()
        .map(|(name, value)| (name.clone(), value.expose_secret().to_owned()));
    Config::from_vars(vars.into_iter().chain(secrets))
}

/// The token keys: the current signing secret; the pending one; the previous one for a token's
/// lifetime (and a refresh) after the secret last changed. A staged value too weak to be a key
/// is skipped.
fn keys_of(config: &Config, values: &SecretValues) -> Result<TokenKeys, Error> {
    let mut keys = config.token_keys(config.require_jwt_secret()?)?;
    let now = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock) / 1000;
    let window = spool_auth::TOKEN_TTL_SECONDS + i64::try_from(config.aws.secrets_refresh.as_secs()).unwrap_or(0) + 300;
    for (var, stage, secret) in values.staged.iter().filter(|(var, ..)| *var == SIGNING_VAR) {
        let bytes = secret.expose_secret().as_bytes();
        let with = if *stage == "AWSPREVIOUS" {
            keys.clone()
                .with_previous(bytes, values.signing_changed.unwrap_or(now) + window)
        } else {
            keys.clone().with_verifier(bytes)
        };
        match with {
            Ok(with) => keys = with,
            Err(e) => tracing::warn!(%var, %stage, error = %e, "skipping a staged signing secret"),
        }
    }
    Ok(keys)
}

/// What CloudFront may send: the current origin secret and its other stages' values.
fn origin_of(config: &Config, values: &SecretValues) -> Option<OriginCheck> {
    let current = config.origin_secret.as_ref()?;
    let mut accepted = vec![current.expose_secret()];
    accepted.extend(
        values
            .staged
            .iter()
            .filter(|(var, ..)| *var == ORIGIN_VAR)
            .map(|(_, _, value)| value.expose_secret()),
    );
    Some(OriginCheck::any_of(&accepted))
}

impl Configured {
    /// What an HTTP function checks every request with: the token keys and the CDN origin
    /// check, both kept fresh as the secrets rotate ([`Configured::keep_fresh`]).
    pub fn edge_keys(&self) -> Result<(TokenKeys, Option<OriginCheck>), Error> {
        let keys = self.token_keys()?;
        let origin = self.origin_check();
        self.keep_fresh(&keys, origin.as_ref());
        Ok((keys, origin))
    }

    /// The token keys: the signing secret, with its other stages as [`keys_of`] says.
    pub fn token_keys(&self) -> Result<TokenKeys, Error> {
        keys_of(&self.config, &self.values)
    }

    /// What a request must carry to have come through CloudFront (`SPOOL_ORIGIN_SECRET`, in its
    /// current and previous versions); `None` when no origin secret is configured.
    pub fn origin_check(&self) -> Option<OriginCheck> {
        origin_of(&self.config, &self.values)
    }

    /// Keeps `keys` and `origin` (and every clone of them) up to date with the secrets, reading
    /// them every `SPOOL_SECRETS_REFRESH_MS` on a task of its own. Nothing to do without secrets.
    pub fn keep_fresh(&self, keys: &TokenKeys, origin: Option<&OriginCheck>) {
        let Some(source) = &self.source else { return };
        let (source, keys, origin, config) = (source.clone(), keys.clone(), origin.cloned(), self.config.clone());
        let every = config.aws.secrets_refresh.max(Duration::from_secs(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match refreshed(&source, &config).await {
                    Ok(fresh) => {
                        if fresh.keys.kids() != keys.kids() {
                            tracing::info!(kids = ?fresh.keys.kids(), "the signing secret changed; using the new keys");
                        }
                        keys.replace(&fresh.keys);
                        if let (Some(origin), Some(fresh)) = (&origin, &fresh.origin) {
                            origin.replace(fresh);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "could not read the secrets again; keeping the keys in use"),
                }
            }
        });
    }
}

/// The keys and origin check as the secrets are now.
#[derive(Debug)]
pub struct Fresh {
    /// The token keys.
    pub keys: TokenKeys,
    /// The origin check, when an origin secret is configured.
    pub origin: Option<OriginCheck>,
}

/// The token keys and origin check from the secrets as they are now.
pub async fn refreshed(source: &SecretSource, config: &Config) -> Result<Fresh, Error> {
    let values = source.read().await?;
    let config = merged(Vec::new(), &values).map(|fresh| Config {
        jwt_secret: fresh.jwt_secret.or_else(|| config.jwt_secret.clone()),
        origin_secret: fresh.origin_secret.or_else(|| config.origin_secret.clone()),
        ..config.clone()
    })?;
    Ok(Fresh {
        keys: keys_of(&config, &values)?,
        origin: origin_of(&config, &values),
    })
}
