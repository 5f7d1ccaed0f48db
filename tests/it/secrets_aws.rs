//! Secrets from Secrets Manager, on the emulator: the configuration a Lambda function builds
//! at cold start holds the secrets `SPOOL_SECRET_ARNS` names (and its environment does not),
//! and the signing secret rotates through its stages without refusing anyone's token.

use std::path::PathBuf;

use secrecy::ExposeSecret;
use spool_auth::{Claims, TokenKeys};
use spool_aws::secrets::{SecretSource, configure_from, refreshed};
use spool_tests::{emulator_config, eventually, unique_id};

const FIRST: &str = "first-signing-secret-0123456789abcdef";
const SECOND: &str = "second-signing-secret-0123456789abcde";
const THIRD: &str = "third-signing-secret-0123456789abcdefg";

/// The emulator's variables, as a function's environment would hold them.
fn emulator_vars() -> Vec<(String, String)> {
    let file = std::env::var_os("SPOOL_EMULATOR_ENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.env.emulator"));
    spool_platform::read_env_file(&file).expect("the emulator's env file (make emulator-up)")
}

async fn client() -> aws_sdk_secretsmanager::Client {
    aws_sdk_secretsmanager::Client::new(&spool_aws::load_sdk_config(&emulator_config().aws).await)
}

/// A new secret holding `json`; its ARN.
async fn secret(client: &aws_sdk_secretsmanager::Client, json: &str) -> String {
    let out = client
        .create_secret()
        .name(unique_id("spool-test-secret"))
        .secret_string(json)
        .send()
        .await
        .unwrap();
    out.arn().unwrap().to_owned()
}

fn signing(secret: &str) -> String {
    serde_json::json!({ "SPOOL_JWT_SECRET": secret }).to_string()
}

fn token(secret: &str) -> String {
    TokenKeys::new(secret.as_bytes())
        .unwrap()
        .issue(&Claims::new("u", "org_a", chrono_now()))
        .unwrap()
}

fn chrono_now() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// The id of the version of `arn` in `stage`.
async fn version_in(client: &aws_sdk_secretsmanager::Client, arn: &str, stage: &str) -> String {
    let out = client
        .get_secret_value()
        .secret_id(arn)
        .version_stage(stage)
        .send()
        .await
        .unwrap();
    out.version_id().unwrap().to_owned()
}

/// Puts `secret` as the signing secret's AWSPENDING version; its version id.
async fn stage(client: &aws_sdk_secretsmanager::Client, arn: &str, secret: &str) -> String {
    let out = client
        .put_secret_value()
        .secret_id(arn)
        .secret_string(signing(secret))
        .version_stages("AWSPENDING")
        .send()
        .await
        .unwrap();
    out.version_id().unwrap().to_owned()
}

/// Moves AWSCURRENT to the `pending` version (Secrets Manager moves AWSPREVIOUS to the version
/// it leaves) and takes AWSPENDING off it: the runbook's promotion.
async fn promote(client: &aws_sdk_secretsmanager::Client, arn: &str, pending: &str) {
    let current = version_in(client, arn, "AWSCURRENT").await;
    client
        .update_secret_version_stage()
        .secret_id(arn)
        .version_stage("AWSCURRENT")
        .move_to_version_id(pending)
        .remove_from_version_id(&current)
        .send()
        .await
        .unwrap();
    client
        .update_secret_version_stage()
        .secret_id(arn)
        .version_stage("AWSPENDING")
        .remove_from_version_id(pending)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_function_configures_itself_from_its_secrets_not_its_environment() {
    let client = client().await;
    let signing_arn = secret(&client, &signing(FIRST)).await;
    let providers = secret(
        &client,
        r#"{"SPOOL_ANTHROPIC_API_KEY": "sk-ant-from-the-secret", "ANTHROPIC_API_KEY": "sk-cli", "SPOOL_CLI_ENV": "ANTHROPIC_API_KEY"}"#,
    )
    .await;
    // GIVEN an environment that names the secrets and holds no secret
    let mut vars = emulator_vars();
    vars.push(("SPOOL_SECRET_ARNS".into(), format!("{signing_arn}, {providers}")));
    assert!(!vars.iter().any(|(name, _)| name == "SPOOL_JWT_SECRET"));
    // WHEN a function configures itself
    let configured = configure_from(vars).await.unwrap();
    // THEN its configuration holds the secrets' values
    let config = &configured.config;
    assert_eq!(config.jwt_secret.as_ref().unwrap().expose_secret(), FIRST);
    assert_eq!(
        config
            .agents
            .anthropic
            .as_ref()
            .unwrap()
            .api_key
            .as_ref()
            .unwrap()
            .expose_secret(),
        "sk-ant-from-the-secret"
    );
    assert_eq!(config.agents.cli_env.len(), 1);
    assert_eq!(config.agents.cli_env[0].1.expose_secret(), "sk-cli");
    // AND its keys verify a token the secret signed
    let keys = configured.token_keys().unwrap();
    assert_eq!(keys.verify(&token(FIRST)).unwrap().sub, "u");
    // AND its configuration's debug form shows no secret
    let debug = format!("{configured:?}");
    assert!(!debug.contains(FIRST) && !debug.contains("sk-ant-from"), "{debug}");
}

#[tokio::test]
async fn a_missing_or_malformed_secret_is_a_clear_error() {
    let client = client().await;
    let not_json = secret(&client, "just a string").await;
    let not_strings = secret(&client, r#"{"SPOOL_JWT_SECRET": 7}"#).await;
    let missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:spool-no-such-secret-AbCdEf".to_owned();
    for (arn, says) in [
        (not_json, "not a JSON object"),
        (
            not_strings,
            "`SPOOL_JWT_SECRET` in its AWSCURRENT version is not a string",
        ),
        (missing, "secretsmanager:GetSecretValue"),
    ] {
        let mut vars = emulator_vars();
        vars.push(("SPOOL_SECRET_ARNS".into(), arn.clone()));
        let error = configure_from(vars).await.unwrap_err().to_string();
        assert!(error.contains(&arn) && error.contains(says), "{error}");
        assert!(!error.contains(FIRST));
    }
}

/// A rotation as docs/RUNBOOK.md tells it: stage the new secret as AWSPENDING, let every
/// process read it, then promote it. At no point is a token from either secret refused by a
/// process that has refreshed, and a process keeps serving between refreshes.
#[tokio::test]
async fn the_signing_secret_rotates_through_its_stages_without_refusing_tokens() {
    let client = client().await;
    let arn = secret(&client, &signing(FIRST)).await;
    let mut vars = emulator_vars();
    vars.push(("SPOOL_SECRET_ARNS".into(), arn.clone()));
    vars.push(("SPOOL_SECRETS_REFRESH_MS".into(), "1000".into()));
    let configured = configure_from(vars).await.unwrap();
    let keys = configured.token_keys().unwrap();
    let held = keys.clone(); // what a router holds
    configured.keep_fresh(&keys, None);
    let source = SecretSource::new(client.clone(), vec![arn.clone()]);
    let first_kid = TokenKeys::new(FIRST.as_bytes()).unwrap().kid();
    let second_kid = TokenKeys::new(SECOND.as_bytes()).unwrap().kid();

    // WHEN the next secret is staged
    let pending = stage(&client, &arn, SECOND).await;
    // THEN a process reads it, still signs with the current one and accepts both
    let staged = refreshed(&source, &configured.config).await.unwrap().keys;
    assert_eq!(staged.kid(), first_kid);
    assert_eq!(staged.verify(&token(SECOND)).unwrap().sub, "u");
    assert_eq!(staged.verify(&token(FIRST)).unwrap().sub, "u");
    // AND the running process picks it up by itself
    eventually("the staged secret reaches the running keys", || {
        let held = held.clone();
        async move { held.verify(&token(SECOND)).ok() }
    })
    .await;
    assert_eq!(held.kid(), first_kid);

    // WHEN it is promoted (the old one becomes AWSPREVIOUS)
    promote(&client, &arn, &pending).await;
    // THEN the new secret signs, and the old one's tokens still verify
    eventually("the promoted secret signs", || {
        let held = held.clone();
        let second_kid = second_kid.clone();
        async move { (held.kid() == second_kid).then_some(()) }
    })
    .await;
    assert_eq!(held.verify(&token(FIRST)).unwrap().sub, "u");
    let issued = held.issue(&Claims::new("v", "org_a", chrono_now())).unwrap();
    assert_eq!(
        TokenKeys::new(SECOND.as_bytes()).unwrap().verify(&issued).unwrap().sub,
        "v"
    );

    // WHEN the next rotation brings in a third secret
    let third = stage(&client, &arn, THIRD).await;
    promote(&client, &arn, &third).await;
    // THEN the first secret, two rotations old, no longer verifies
    let rotated = refreshed(&source, &configured.config).await.unwrap().keys;
    assert!(rotated.verify(&token(FIRST)).is_err());
    assert_eq!(rotated.verify(&token(SECOND)).unwrap().sub, "u");
    assert_eq!(rotated.verify(&token(THIRD)).unwrap().sub, "u");
}

/// Only the current versions must be readable: a previous version that is not what Spool
/// expects (the plain string an older template generated, a typo in a rotation) is skipped, and
/// the function starts. A too-short staged secret is skipped too.
#[tokio::test]
async fn a_malformed_staged_version_never_stops_a_function_from_starting() {
    let client = client().await;
    let arn = secret(&client, "an-old-plain-string-secret-from-an-older-template").await;
    client
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(signing(FIRST))
        .send()
        .await
        .unwrap();
    stage(&client, &arn, "short").await;
    let mut vars = emulator_vars();
    vars.push(("SPOOL_SECRET_ARNS".into(), arn));
    let configured = configure_from(vars).await.unwrap();
    let keys = configured.token_keys().unwrap();
    assert_eq!(keys.kids(), vec![TokenKeys::new(FIRST.as_bytes()).unwrap().kid()]);
    assert_eq!(keys.verify(&token(FIRST)).unwrap().sub, "u");
}

/// CloudFront's origin secret rotates like the signing secret: after a new value is put, the
/// functions accept it and the previous one (CloudFront may still send that) until the next.
#[tokio::test]
async fn the_origin_secret_accepts_its_current_and_previous_values() {
    let client = client().await;
    let origin = |value: &str| serde_json::json!({ "SPOOL_ORIGIN_SECRET": value }).to_string();
    let arn = secret(&client, &origin("first-origin-value")).await;
    client
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(origin("second-origin-value"))
        .send()
        .await
        .unwrap();
    let mut vars = emulator_vars();
    vars.push(("SPOOL_SECRET_ARNS".into(), arn));
    vars.push(("SPOOL_JWT_SECRET".into(), FIRST.into()));
    let configured = configure_from(vars).await.unwrap();
    let check = configured.origin_check().expect("an origin check");
    let headers = |value: &str| {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(spool_edge::ORIGIN_HEADER, value.parse().unwrap());
        headers
    };
    assert!(check.admits(&headers("second-origin-value")));
    assert!(check.admits(&headers("first-origin-value")));
    assert!(!check.admits(&headers("third-origin-value")));
}
