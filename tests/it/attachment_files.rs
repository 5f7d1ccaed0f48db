//! Attachments' bytes in each store: on AWS a real pre-signed `PutObject` URL used by a plain
//! HTTP client, checked with `HeadObject`, and a pre-signed `GetObject` that names the file;
//! under `spool serve` the bytes go through Spool, exactly as declared, once.

use std::time::Duration;

use spool_chat::attachment::{FileStore, Transfer, object_key};
use spool_tests::unique_id;

#[tokio::test]
async fn local_files_go_through_spool() {
    let dir = tempfile::tempdir().unwrap();
    let files = spool_embedded::LocalFiles::new(dir.path());
    let key = object_key("org_a", &unique_id("ses"), "att_1");
    let minute = Duration::from_secs(60);
    assert_eq!(
        files.upload(&key, "text/plain", 5, None, minute).await.unwrap(),
        Transfer::ThroughSpool
    );
    files.write(&key, 5, Box::pin(&b"hello"[..])).await.unwrap();
    assert_eq!(files.size(&key).await.unwrap(), Some(5));
    files.keep(&key).await.unwrap();
    assert_eq!(
        files.download(&key, "a.txt", "text/plain", minute).await.unwrap(),
        Transfer::ThroughSpool
    );
}

#[cfg(feature = "emulator")]
#[tokio::test]
async fn s3_files_go_straight_to_the_bucket_with_pre_signed_urls() {
    let harness = spool_tests::AwsHarness::new();
    let bucket = harness.config().aws.attachments_bucket.clone().unwrap();
    let files = spool_aws::S3Files::new(harness.clients().await.s3, bucket);
    let key = object_key("org_a", &unique_id("ses"), "att_1");
    let minute = Duration::from_secs(60);
    let body = b"hello, bucket".to_vec();
    // WHEN a client PUTs the bytes to the pre-signed URL with the headers it was given
    let Transfer::Direct { method, url, headers } = files
        .upload(&key, "text/plain", body.len() as u64, None, minute)
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
    // THEN the store sees it, pending until it is kept, and a second upload is refused
    assert_eq!(files.size(&key).await.unwrap(), Some(body.len() as u64));
    let s3 = harness.clients().await.s3;
    let bucket = harness.config().aws.attachments_bucket.clone().unwrap();
    let tags = |s3: aws_sdk_s3::Client, bucket: String, key: String| async move {
        s3.get_object_tagging()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap()
            .tag_set()
            .iter()
            .map(|t| format!("{}={}", t.key(), t.value()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        tags(s3.clone(), bucket.clone(), key.clone()).await,
        ["spool-upload=pending"]
    );
    let mut again = http.put(&url).body(b"HELLO, BUCKET".to_vec());
    for (name, value) in &headers {
        again = again.header(name.as_str(), value.as_str());
    }
    assert_eq!(
        again.send().await.unwrap().status(),
        reqwest::StatusCode::PRECONDITION_FAILED
    );
    files.keep(&key).await.unwrap();
    assert!(
        tags(s3, bucket, key.clone()).await.is_empty(),
        "kept past the lifecycle rule"
    );
    // and a pre-signed GET returns it as a named attachment
    let Transfer::Direct { url, .. } = files.download(&key, "notes.txt", "text/plain", minute).await.unwrap() else {
        panic!("S3 downloads are direct");
    };
    assert_eq!(files.sha256(&key).await.unwrap().unwrap().len(), 64);
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

/// `spool serve`'s sweep deletes uploads never completed, a grace period after their URL
/// expired, bytes and record, and keeps completed files.
#[tokio::test]
async fn the_sweep_deletes_only_unfinished_uploads_past_their_grace() {
    use spool_chat::attachment::{Attachment, AttachmentStatus, Attachments};
    let dir = tempfile::tempdir().unwrap();
    let files = spool_embedded::LocalFiles::new(dir.path());
    let records = spool_embedded::EmbeddedMetadata::open(dir.path()).unwrap();
    let record = |id: &str, expires: i64| Attachment {
        id: id.to_owned(),
        session_id: "ses_1".to_owned(),
        filename: format!("{id}.txt"),
        content_type: "text/plain".to_owned(),
        size: 2,
        sha256: None,
        author: "key:k".to_owned(),
        status: AttachmentStatus::Uploading,
        created_ms: expires - 1000,
        upload_expires_ms: expires,
        completed_ms: None,
    };
    for (id, expires) in [("att_old", 1_000), ("att_new", 50_000), ("att_done", 1_000)] {
        records.create_attachment("org_a", &record(id, expires)).await.unwrap();
        let key = object_key("org_a", "ses_1", id);
        files.write(&key, 2, Box::pin(&b"hi"[..])).await.unwrap();
    }
    records
        .complete_attachment("org_a", "ses_1", "att_done", 2_000)
        .await
        .unwrap();
    // WHEN the sweep runs with a cut-off between the two expiries
    let swept = spool_embedded::sweep_uploads(&records, &files, 10_000).await.unwrap();
    // THEN only the old unfinished upload is gone, bytes and record
    assert_eq!(swept, 1);
    let left: Vec<String> = records
        .attachments("org_a", "ses_1")
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(left, ["att_done", "att_new"], "oldest first");
    assert_eq!(
        files.size(&object_key("org_a", "ses_1", "att_old")).await.unwrap(),
        None
    );
    assert_eq!(
        files.size(&object_key("org_a", "ses_1", "att_done")).await.unwrap(),
        Some(2)
    );
    // A completion racing the sweep finds no record: it cannot complete bytes the sweep deletes.
    assert_eq!(
        records
            .complete_attachment("org_a", "ses_1", "att_old", 3_000)
            .await
            .unwrap(),
        None
    );
}

/// The template's lifecycle rule deletes what S3Files tags pending, in the bucket the functions
/// are given (the emulator ignores lifecycle rules, so the template itself is read).
#[test]
fn the_template_expires_what_the_store_tags_pending() {
    let template = include_str!("../../infra/template.yaml");
    let (key, value) = spool_aws::PENDING_TAG.split_once('=').unwrap();
    assert!(
        template.contains(&format!("- {{ Key: {key}, Value: {value} }}")),
        "a lifecycle rule on {key}={value}"
    );
    assert!(template.contains("SPOOL_ATTACHMENTS_BUCKET: !Ref AttachmentsBucket"));
    assert!(template.contains("AllowedOrigins: !Ref UiOrigins"));
}
