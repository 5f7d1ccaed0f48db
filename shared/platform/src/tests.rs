//! # The configuration's tests: defaults, overrides, checks at start and env files

use std::path::PathBuf;

use spool_log::limits::LogLimits;

use crate::{Backend, Config, read_env_file};

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn defaults_need_no_variable() {
    let config = Config::from_vars(Vec::new()).unwrap();
    assert_eq!(config.backend, Backend::Embedded);
    assert_eq!(config.addr.to_string(), "127.0.0.1:8080");
    assert_eq!(config.limits, LogLimits::default());
    assert!(config.aws.credentials.is_none());
    // The third source design sets no limit on chats processed at once: an organization runs
    // 16 turns at once, and a flood of its chats leaves as many slots to the others.
    assert_eq!(config.agents.org_turn_concurrency, 16);
    assert!(config.agents.worker_concurrency >= 2 * config.agents.org_turn_concurrency);
    let set = Config::from_vars(vars(&[("SPOOL_ORG_TURN_CONCURRENCY", "2")])).unwrap();
    assert_eq!(set.agents.org_turn_concurrency, 2);
}

#[test]
fn later_values_win_and_bad_values_name_the_variable() {
    let config = Config::from_vars(vars(&[("SPOOL_BACKEND", "embedded"), ("SPOOL_BACKEND", "aws")])).unwrap();
    assert_eq!(config.backend, Backend::Aws);
    let err = Config::from_vars(vars(&[("SPOOL_PAGE_BYTES", "lots")])).unwrap_err();
    assert!(err.to_string().contains("SPOOL_PAGE_BYTES"), "{err}");
    assert!(Config::from_vars(vars(&[("SPOOL_PAGE_BYTES", "0")])).is_err());
}

#[test]
fn the_cli_work_dir_follows_the_data_dir_and_is_absolute() {
    let mut config = Config::from_vars(vars(&[("SPOOL_DATA_DIR", "from-env")])).unwrap();
    // a flag that sets the data directory after the environment was read moves it too
    config.data_dir = PathBuf::from("from-flag");
    let dir = config.cli_work_dir();
    assert!(dir.is_absolute(), "{}", dir.display());
    assert!(dir.ends_with("from-flag/cli"), "{}", dir.display());
    let config = Config::from_vars(vars(&[("SPOOL_CLI_WORK_DIR", "/srv/cli")])).unwrap();
    assert_eq!(config.cli_work_dir(), PathBuf::from("/srv/cli"));
}

#[test]
fn workspace_roots_are_checked_at_start() {
    let config = Config::from_vars(vars(&[("SPOOL_WORKSPACE_ROOTS", "/srv/repos/{org}:/srv/shared")])).unwrap();
    assert_eq!(config.agents.workspace_roots.len(), 2);
    for bad in ["/srv:/srv/a", "relative", "/srv/{org}:/srv/shared", "/srv/x{org}"] {
        let err = Config::from_vars(vars(&[("SPOOL_WORKSPACE_ROOTS", bad)])).unwrap_err();
        assert!(err.to_string().contains("SPOOL_WORKSPACE_ROOTS"), "{bad}: {err}");
    }
}

#[test]
fn cli_env_passes_named_keys_and_refuses_spool_secrets() {
    use secrecy::ExposeSecret;
    let config = Config::from_vars(vars(&[
        ("SPOOL_CLI_ENV", "ANTHROPIC_API_KEY, UNSET_KEY"),
        ("ANTHROPIC_API_KEY", "sk-1"),
        ("LANG", "C.UTF-8"),
    ]))
    .unwrap();
    let env: Vec<(&str, &str)> = config
        .agents
        .cli_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.expose_secret()))
        .collect();
    assert_eq!(env, [("ANTHROPIC_API_KEY", "sk-1")]);
    assert_eq!(config.agents.cli_inherited, [("LANG".to_owned(), "C.UTF-8".to_owned())]);
    for bad in ["SPOOL_JWT_SECRET", "aws_secret_access_key", "A-B", "1X"] {
        let err = Config::from_vars(vars(&[("SPOOL_CLI_ENV", bad)])).unwrap_err();
        assert!(err.to_string().contains("SPOOL_CLI_ENV"), "{err}");
    }
}

#[test]
fn env_files_allow_comments_quotes_and_export() {
    let dir = std::env::temp_dir().join(format!("spool-env-{}", std::process::id()));
    std::fs::write(&dir, "# emulator\nexport A=1\nB=\"two\"\n\nC='3'\n").unwrap();
    let read = read_env_file(&dir).unwrap();
    std::fs::remove_file(&dir).unwrap();
    assert_eq!(read, vars(&[("A", "1"), ("B", "two"), ("C", "3")]));
    assert!(
        read_env_file(std::path::Path::new("/nonexistent/.env"))
            .unwrap()
            .is_empty()
    );
}
