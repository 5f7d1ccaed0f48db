//! # Reading variables: numbers, durations and env files

use std::{collections::HashMap, str::FromStr, time::Duration};

use crate::Error;

/// A duration in milliseconds, at least 1 ms.
pub(crate) fn millis(vars: &HashMap<String, String>, var: &'static str, default: Duration) -> Result<Duration, Error> {
    let ms = parse(vars, var, u64::try_from(default.as_millis()).unwrap_or(u64::MAX))?;
    Ok(Duration::from_millis(ms.max(1)))
}

pub(crate) fn parse<T>(vars: &HashMap<String, String>, var: &'static str, default: T) -> Result<T, Error>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    match vars.get(var) {
        None => Ok(default),
        Some(value) => value.trim().parse().map_err(|e: T::Err| Error::Invalid {
            var,
            value: value.clone(),
            reason: e.to_string(),
        }),
    }
}

/// Reads `KEY=VALUE` lines from an env file (blank lines and `#` comments skipped, values may
/// be single- or double-quoted). A missing file reads as empty.
pub fn read_env_file(path: &std::path::Path) -> Result<Vec<(String, String)>, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::EnvFile {
                path: path.to_owned(),
                source,
            });
        }
    };
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let (key, value) = line.trim_start_matches("export ").split_once('=')?;
            let value = value.trim();
            let unquoted = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value);
            Some((key.trim().to_owned(), unquoted.to_owned()))
        })
        .collect())
}
