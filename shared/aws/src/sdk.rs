//! # AWS SDK bootstrap
//!
//! One place builds every client, from the typed [`AwsSettings`]: the endpoint override
//! (`AWS_ENDPOINT_URL`, for LocalStack and moto), the region, static credentials when given
//! (else the SDK's default chain: the Lambda role, a profile, …), and one pinned behaviour
//! version, so an SDK upgrade cannot silently change retries or timeouts.
//!
//! With an endpoint override, S3 uses path-style addressing (`http://localhost:4566/bucket/key`
//! instead of `bucket.localhost`) and checksums only where an operation requires them, which
//! emulators handle reliably.

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;
use secrecy::ExposeSecret;
use spool_platform::AwsSettings;

use crate::metrics::RequestCounter;

/// The SDK behaviour version every Spool client uses.
pub fn behavior_version() -> BehaviorVersion {
    BehaviorVersion::v2026_01_12()
}

/// Loads the shared SDK configuration.
pub async fn load_sdk_config(settings: &AwsSettings) -> SdkConfig {
    let mut loader = aws_config::defaults(behavior_version());
    if let Some(endpoint) = &settings.endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some(region) = &settings.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(creds) = &settings.credentials {
        loader = loader.credentials_provider(Credentials::new(
            creds.access_key_id.clone(),
            creds.secret_access_key.expose_secret().to_owned(),
            creds.session_token.as_ref().map(|t| t.expose_secret().to_owned()),
            None,
            "spool-config",
        ));
    }
    loader.load().await
}

/// The three clients Spool uses, built once per process.
#[derive(Debug, Clone)]
pub struct AwsClients {
    /// DynamoDB: stream heads, the hot tail, metadata.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// S3: sealed pages and large appends.
    pub s3: aws_sdk_s3::Client,
    /// SQS: agent turns and maintenance jobs.
    pub sqs: aws_sdk_sqs::Client,
}

impl AwsClients {
    /// Builds the clients from `settings`, counting every request in `counter` when given.
    pub async fn new(settings: &AwsSettings, counter: Option<RequestCounter>) -> Self {
        Self::with_faults(settings, counter, None).await
    }

    /// [`Self::new`], with `faults` injected into every request (the chaos tests).
    pub async fn with_faults(
        settings: &AwsSettings,
        counter: Option<RequestCounter>,
        faults: Option<crate::FaultInjector>,
    ) -> Self {
        let sdk = load_sdk_config(settings).await;
        let emulated = settings.endpoint_url.is_some();

        let mut dynamodb = aws_sdk_dynamodb::config::Builder::from(&sdk);
        let mut s3 = aws_sdk_s3::config::Builder::from(&sdk);
        let mut sqs = aws_sdk_sqs::config::Builder::from(&sdk);
        if emulated {
            use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
            s3 = s3
                .force_path_style(true)
                .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
                .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        }
        if let Some(endpoint) = &settings.dynamodb_endpoint_url {
            dynamodb = dynamodb.endpoint_url(endpoint);
        }
        if let Some(counter) = counter {
            dynamodb = dynamodb.interceptor(counter.clone());
            s3 = s3.interceptor(counter.clone());
            sqs = sqs.interceptor(counter);
        }
        if let Some(faults) = faults {
            dynamodb = dynamodb.interceptor(faults.clone());
            s3 = s3.interceptor(faults.clone());
            sqs = sqs.interceptor(faults);
        }
        Self {
            dynamodb: aws_sdk_dynamodb::Client::from_conf(dynamodb.build()),
            s3: aws_sdk_s3::Client::from_conf(s3.build()),
            sqs: aws_sdk_sqs::Client::from_conf(sqs.build()),
        }
    }
}
