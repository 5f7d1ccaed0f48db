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
//! tokens name their key (`kid`), the `AWSCURRENT` version signs, and the `AWSPENDING` and
//! `AWSPREVIOUS` versions verify. [`Configured::keep_fresh`] reads the stages again every
//! `SPOOL_SECRETS_REFRESH_MS`, so a rotation staged as `AWSPENDING` is accepted everywhere
//! before it is promoted to sign (docs/RUNBOOK.md, "Rotate the signing secret").

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_secretsmanager::Client;
use secrecy::{ExposeSecret, SecretString};
use spool_auth::TokenKeys;
use spool_platform::{Config, Error};

use crate::errors::describe;

/// The variable whose value signs tokens.
const SIGNING_VAR: &str = "SPOOL_JWT_SECRET";
/// The stages whose signing secret verifies without signing.
const VERIFYING_STAGES: [&str; 2] = ["AWSPENDING", "AWSPREVIOUS"];

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
    /// The signing secret's values in its other stages.
    verifiers: Vec<SecretString>,
}

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.vars.iter().map(|(name, _)| name.as_str()).collect();
        write!(f, "SecretValues({names:?}, {} verifiers)", self.verifiers.len())
    }
}

impl SecretSource {
    /// Reads the secrets `arns` name through `client`.
    pub fn new(client: Client, arns: Vec<String>) -> Self {
        Self { client, arns }
    }

    /// One stage of one secret, parsed; `None` when the secret has no version in that stage.
    async fn stage(&self, arn: &str, stage: &str) -> Result<Option<HashMap<String, SecretString>>, Error> {
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

    /// Reads every secret's current version, and the signing secret's other stages.
    pub async fn read(&self) -> Result<SecretValues, Error> {
        let mut values = SecretValues::default();
        for arn in &self.arns {
            let current = self.stage(arn, "AWSCURRENT").await?.unwrap_or_default();
            let mut names: Vec<_> = current.into_iter().collect();
            names.sort_by(|a, b| a.0.cmp(&b.0));
            if names.iter().any(|(name, _)| name == SIGNING_VAR) {
                for stage in VERIFYING_STAGES {
                    if let Some(mut other) = self.stage(arn, stage).await?
                        && let Some(secret) = other.remove(SIGNING_VAR)
                    {
                        values.verifiers.push(secret);
                    }
                }
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
    secrets: Option<(SecretSource, SecretValues)>,
}

/// The configuration from the process's environment and the secrets `SPOOL_SECRET_ARNS` names.
pub async fn configure() -> Result<Configured, Error> {
    configure_from(std::env::vars().collect()).await
}

/// [`configure`] from `vars` in place of the environment.
pub async fn configure_from(vars: Vec<(String, String)>) -> Result<Configured, Error> {
    let config = Config::from_vars(vars.clone())?;
    if config.aws.secret_arns.is_empty() {
        return Ok(Configured { config, secrets: None });
    }
    let sdk = crate::load_sdk_config(&config.aws).await;
    let source = SecretSource::new(Client::new(&sdk), config.aws.secret_arns.clone());
    let values = source.read().await?;
    let merged = vars.into_iter().chain(
        values
            .vars
            .iter()
            .map(|(name, value)| (name.clone(), value.expose_secret().to_owned())),
    );
    Ok(Configured {
        config: Config::from_vars(merged)?,
        secrets: Some((source, values)),
    })
}

fn keys_of(config: &Config, verifiers: &[SecretString]) -> Result<TokenKeys, Error> {
    let mut keys = config.token_keys(config.require_jwt_secret()?)?;
    for secret in verifiers {
        keys = keys
            .with_verifier(secret.expose_secret().as_bytes())
            .map_err(|e| Error::Invalid {
                var: SIGNING_VAR,
                value: "(a staged secret)".to_owned(),
                reason: e.to_string(),
            })?;
    }
    Ok(keys)
}

impl Configured {
    /// The token keys: the signing secret, verifying its other stages too.
    pub fn token_keys(&self) -> Result<TokenKeys, Error> {
        let verifiers = self.secrets.as_ref().map_or(&[][..], |(_, values)| &values.verifiers);
        keys_of(&self.config, verifiers)
    }

    /// Keeps `keys` (and every clone of them) up to date with the secrets, reading them every
    /// `SPOOL_SECRETS_REFRESH_MS` on a task of its own. Nothing to do without secrets.
    pub fn keep_fresh(&self, keys: &TokenKeys) {
        let Some((source, _)) = &self.secrets else { return };
        let (source, keys, config) = (source.clone(), keys.clone(), self.config.clone());
        let every = config.aws.secrets_refresh.max(Duration::from_secs(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match refreshed(&source, &config).await {
                    Ok(fresh) if fresh.kids() != keys.kids() => {
                        tracing::info!(kids = ?fresh.kids(), "the signing secret changed; using the new keys");
                        keys.replace(&fresh);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "could not read the secrets again; keeping the keys in use"),
                }
            }
        });
    }
}

/// The token keys from the secrets as they are now.
pub async fn refreshed(source: &SecretSource, config: &Config) -> Result<TokenKeys, Error> {
    let values = source.read().await?;
    let signing = values
        .vars
        .iter()
        .rev()
        .find(|(name, _)| name == SIGNING_VAR)
        .map(|(_, secret)| secret.expose_secret().to_owned());
    let mut config = config.clone();
    if let Some(signing) = signing {
        config.jwt_secret = Some(SecretString::from(signing));
    }
    keys_of(&config, &values.verifiers)
}
