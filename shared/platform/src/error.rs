//! # Why a configuration cannot be used

use std::path::PathBuf;

/// A configuration value that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A variable has a value that does not parse.
    #[error("{var}={value:?} is invalid: {reason}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A variable the chosen backend needs is not set.
    #[error("{var} is not set; {hint}")]
    Missing {
        /// The variable.
        var: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// A secret named by `SPOOL_SECRET_ARNS` could not be read or is not what Spool expects.
    #[error(
        "cannot use secret {arn}: {reason}. It must exist, hold a JSON object of configuration variables (e.g. {{\"SPOOL_JWT_SECRET\": \"…\"}}), and be readable by the function's role (secretsmanager:GetSecretValue)"
    )]
    Secret {
        /// The secret's ARN.
        arn: String,
        /// What went wrong.
        reason: String,
    },
    /// The env file could not be read.
    #[error("cannot read env file {path}: {source}")]
    EnvFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
