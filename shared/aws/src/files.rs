//! # Attachments' bytes in S3
//!
//! Clients move them straight to and from the bucket with pre-signed requests, so a function
//! never carries them and API Gateway's payload limit does not apply. An upload URL is a
//! `PutObject` signed with the declared `Content-Length` and `Content-Type`, so S3 refuses
//! other bytes, with `If-None-Match: *`, so it stores an object once, and with the tag
//! [`PENDING_TAG`], which the bucket's lifecycle rule expires unless the upload is completed
//! (which removes the tag). A download URL is a `GetObject` that answers with
//! `Content-Disposition: attachment` and the declared type. Both expire in minutes.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::{
    error::SdkError,
    operation::{get_object::GetObjectError, head_object::HeadObjectError},
    presigning::PresigningConfig,
    types::ChecksumMode,
};
use spool_chat::attachment::{FileReader, FileStore, Transfer, content_disposition, sha256_of};
use spool_log::error::Error;

use crate::errors::s3;

/// The tag of an object whose upload is not completed (`spool-upload=pending`): the template's
/// lifecycle rule deletes such objects a day after they were made.
pub const PENDING_TAG: &str = "spool-upload=pending";

/// Attachments in an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3Files {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Files {
    /// The store in `bucket`.
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }
}

/// A hex SHA-256 as S3's checksum headers spell it (base64).
fn hex_to_base64(hex: &str) -> Result<String, Error> {
    use base64::Engine as _;
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| Error::invalid("sha256", "not hex"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A full-object SHA-256 checksum from S3 (base64) as hex; none for a composite one.
fn base64_to_hex(b64: &str) -> Option<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    (bytes.len() == 32).then(|| spool_chat::attachment::hex(&bytes))
}

fn presigning(expires_in: Duration) -> Result<PresigningConfig, Error> {
    PresigningConfig::expires_in(expires_in).map_err(|e| Error::unavailable("pre-sign an attachment's URL", e))
}

fn transfer(request: &aws_sdk_s3::presigning::PresignedRequest) -> Transfer {
    Transfer::Direct {
        method: request.method().to_owned(),
        url: request.uri().to_owned(),
        headers: request
            .headers()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect(),
    }
}

/// A key as `CopyObject`'s source names it: URL-encoded, its `/` kept.
fn copy_source_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[async_trait]
impl FileStore for S3Files {
    async fn upload(
        &self,
        key: &str,
        content_type: &str,
        size: u64,
        sha256: Option<&str>,
        expires_in: Duration,
    ) -> Result<Transfer, Error> {
        let size = i64::try_from(size).map_err(|_| Error::invalid("size", "too large"))?;
        // A declared checksum is signed in, so S3 refuses other bytes and keeps it for
        // `sha256` to compare (no bytes read by a function).
        let checksum = sha256.map(hex_to_base64).transpose()?;
        let request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_length(size)
            .content_type(content_type)
            .if_none_match("*")
            .tagging(PENDING_TAG)
            .set_checksum_sha256(checksum)
            .presigned(presigning(expires_in)?)
            .await
            .map_err(|e| s3("pre-sign PutObject (attachment)", e))?;
        Ok(transfer(&request))
    }

    async fn sha256(&self, key: &str) -> Result<Option<String>, Error> {
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await;
        match head {
            Ok(out) => match out.checksum_sha256().and_then(base64_to_hex) {
                Some(verified) => Ok(Some(verified)),
                // Uploaded without a checksum S3 kept: read it once.
                None => match self.read(key).await? {
                    Some(reader) => Ok(Some(sha256_of(reader).await?)),
                    None => Ok(None),
                },
            },
            Err(SdkError::ServiceError(e)) if matches!(e.err(), HeadObjectError::NotFound(_)) => Ok(None),
            Err(e) => Err(s3("HeadObject (attachment checksum)", e)),
        }
    }

    async fn download(
        &self,
        key: &str,
        filename: &str,
        content_type: &str,
        expires_in: Duration,
    ) -> Result<Transfer, Error> {
        let request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .response_content_disposition(content_disposition(filename))
            .response_content_type(content_type)
            .presigned(presigning(expires_in)?)
            .await
            .map_err(|e| s3("pre-sign GetObject (attachment)", e))?;
        Ok(transfer(&request))
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, Error> {
        match self.client.head_object().bucket(&self.bucket).key(key).send().await {
            Ok(out) => Ok(out.content_length().and_then(|n| u64::try_from(n).ok())),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), HeadObjectError::NotFound(_)) => Ok(None),
            Err(e) => Err(s3("HeadObject (attachment)", e)),
        }
    }

    /// Uploads to S3 go to their pre-signed URL, never through Spool.
    async fn write(&self, _: &str, _: u64, _: FileReader) -> Result<(), Error> {
        Err(Error::invalid(
            "upload",
            "uploads to S3 go to the pre-signed URL that POST …/attachments answers",
        ))
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), Error> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .body(bytes.into())
            .send()
            .await
            .map_err(|e| s3("PutObject (Spool's file)", e))?;
        Ok(())
    }

    async fn read(&self, key: &str) -> Result<Option<FileReader>, Error> {
        match self.client.get_object().bucket(&self.bucket).key(key).send().await {
            Ok(out) => Ok(Some(Box::pin(out.body.into_async_read()))),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), GetObjectError::NoSuchKey(_)) => Ok(None),
            Err(e) => Err(s3("GetObject (attachment)", e)),
        }
    }

    async fn keep(&self, key: &str) -> Result<(), Error> {
        self.client
            .delete_object_tagging()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| s3("DeleteObjectTagging (attachment)", e))?;
        Ok(())
    }

    /// A server-side `CopyObject`: the bytes never leave S3. The copy has no tags, so the
    /// lifecycle rule of pending uploads never takes it.
    async fn copy(&self, from: &str, to: &str) -> Result<(), Error> {
        use aws_sdk_s3::error::ProvideErrorMetadata as _;
        let copied = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(to)
            .copy_source(format!("{}/{}", self.bucket, copy_source_key(from)))
            .tagging_directive(aws_sdk_s3::types::TaggingDirective::Replace)
            .send()
            .await;
        match copied {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().code() == Some("NoSuchKey") => Err(Error::Missing {
                what: format!("the bytes of `{from}`"),
            }),
            Err(e) => Err(s3("CopyObject (attachment)", e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), Error> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| s3("DeleteObject (attachment)", e))?;
        Ok(())
    }
}
