//! Attachments' bytes in each store: on AWS a real pre-signed `PutObject` URL used by a plain
//! HTTP client, checked with `HeadObject`, and a pre-signed `GetObject` that names the file;
//! under `spool serve` the bytes go through Spool, exactly as declared, once.

use std::time::Duration;

use spool_domain::attachment::{FileStore, Transfer, object_key};
use spool_tests::unique_id;

#[tokio::test]
async fn local_files_go_through_spool() {
    let dir = tempfile::tempdir().unwrap();
    let files = spool_embedded::LocalFiles::new(dir.path());
    let key = object_key("org_a", &unique_id("ses"), "att_1");
    let minute = Duration::from_secs(60);
    assert_eq!(
        files.upload(&key, "text/plain", 5, minute).await.unwrap(),
        Transfer::ThroughSpool
    );
    files.write(&key, 5, &b"hello"[..]).await.unwrap();
    assert_eq!(files.size(&key).await.unwrap(), Some(5));
    assert_eq!(
        files.download(&key, "a.txt", "text/plain", minute).await.unwrap(),
        Transfer::ThroughSpool
    );
}

#[cfg(feature = "emulator")]
#[tokio::test]
async fn s3_files_go_straight_to_the_bucket_with_pre_signed_urls() {
    let harness = spool_tests::AwsHarness::new();
    let bucket = harness.config().aws.pages_bucket.clone().unwrap();
    let files = spool_aws::S3Files::new(harness.clients().await.s3, bucket);
    let key = object_key("org_a", &unique_id("ses"), "att_1");
    let minute = Duration::from_secs(60);
    let body = b"hello, bucket".to_vec();
    // WHEN a client PUTs the bytes to the pre-signed URL with the headers it was given
    let Transfer::Direct { method, url, headers } = files
        .upload(&key, "text/plain", body.len() as u64, minute)
        .await
        .unwrap()
    else {
        panic!("S3 uploads are direct");
    };
    assert_eq!(method, "PUT");
    assert!(url.contains("X-Amz-Signature="), "{url}");
    let signed = url.split("X-Amz-SignedHeaders=").nth(1).unwrap_or_default();
    assert!(
        signed.contains("content-length") && signed.contains("content-type"),
        "the length and type are signed: {url}"
    );
    assert_eq!(files.size(&key).await.unwrap(), None, "nothing before the upload");
    let http = reqwest::Client::new();
    let mut put = http.put(&url).body(body.clone());
    for (name, value) in &headers {
        put = put.header(name.as_str(), value.as_str());
    }
    let response = put.send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    // THEN the store sees it, and a pre-signed GET returns it as a named attachment
    assert_eq!(files.size(&key).await.unwrap(), Some(body.len() as u64));
    let Transfer::Direct { url, .. } = files.download(&key, "notes.txt", "text/plain", minute).await.unwrap() else {
        panic!("S3 downloads are direct");
    };
    let response = http.get(&url).send().await.unwrap();
    assert!(response.status().is_success());
    let disposition = response.headers()["content-disposition"].to_str().unwrap().to_owned();
    assert!(
        disposition.starts_with("attachment;") && disposition.contains("notes.txt"),
        "{disposition}"
    );
    assert_eq!(response.bytes().await.unwrap().as_ref(), body.as_slice());
    files.delete(&key).await.unwrap();
    assert_eq!(files.size(&key).await.unwrap(), None);
}
