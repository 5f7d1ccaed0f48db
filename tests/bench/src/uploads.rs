//! Files through each backend: one large upload into a chat under the real `spool serve`, in
//! its three steps (declare, send the bytes where Spool says, complete), then the download.
//! On the embedded store the bytes go through `spool serve`'s own route; on AWS (the emulator)
//! straight to S3 with the pre-signed URL, never through Spool. The server's resident memory
//! before and its peak after say what carrying the bytes cost it.

use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{chat::Client, protocol::Target};

/// One upload's figures.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct UploadFigures {
    pub(crate) backend: String,
    /// Where the bytes went: `spool serve` or S3.
    pub(crate) through: String,
    pub(crate) megabytes: f64,
    pub(crate) declare_ms: f64,
    pub(crate) upload_ms: f64,
    pub(crate) complete_ms: f64,
    pub(crate) download_ms: f64,
    /// The server's resident memory before the upload, and its peak (VmHWM) after the download.
    pub(crate) rss_before_mb: f64,
    pub(crate) rss_peak_mb: f64,
}

/// Uploads and downloads `megabytes` of random bytes through `server` (signed in).
pub(crate) async fn run(server: &Target, backend: &str, megabytes: usize) -> anyhow::Result<UploadFigures> {
    let key = server.api_key.clone().context("no API key in the banner")?;
    let client = Client::sign_in(&server.origin, &key).await?;
    let chat = client.post("/v1/sessions", &json!({ "title": "files" })).await?;
    let chat = chat["id"].as_str().context("no chat id")?.to_owned();
    let mut bytes = vec![0_u8; megabytes * 1_000_000];
    fastrand::fill(&mut bytes);
    let bytes = bytes::Bytes::from(bytes);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let rss_before_mb = server.resident_mb().unwrap_or(f64::NAN);

    let t = Instant::now();
    let declared = client
        .post(
            &format!("/v1/sessions/{chat}/attachments"),
            &json!({ "filename": "big.bin", "content_type": "application/octet-stream", "size": bytes.len() }),
        )
        .await?;
    let declare_ms = t.elapsed().as_secs_f64() * 1000.0;
    let id = declared["attachment_id"]
        .as_str()
        .context("no attachment id")?
        .to_owned();
    let upload = &declared["upload"];
    let url = upload["url"].as_str().context("no upload URL")?;
    let (url, through) = if url.starts_with('/') {
        (format!("{}{url}", server.origin), "spool serve")
    } else {
        (url.to_owned(), "S3 (pre-signed PUT)")
    };
    let mut put = reqwest::Client::new().put(&url).body(bytes.clone());
    for (name, value) in upload["headers"].as_object().context("no upload headers")? {
        put = put.header(name.as_str(), value.as_str().unwrap_or_default());
    }
    let t = Instant::now();
    let sent = put.send().await?;
    anyhow::ensure!(sent.status().is_success(), "the upload failed: {}", sent.status());
    let upload_ms = t.elapsed().as_secs_f64() * 1000.0;

    let t = Instant::now();
    let completed: Value = client
        .post(&format!("/v1/sessions/{chat}/attachments/{id}/complete"), &json!({}))
        .await?;
    anyhow::ensure!(completed["attachment"]["status"] == "complete", "{completed}");
    let complete_ms = t.elapsed().as_secs_f64() * 1000.0;

    let t = Instant::now();
    let got = client
        .http
        .get(format!("{}/v1/sessions/{chat}/attachments/{id}", server.origin))
        .send()
        .await?;
    anyhow::ensure!(got.status().is_success(), "the download failed: {}", got.status());
    let body = got.bytes().await?;
    let download_ms = t.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(body == bytes, "the download is not the upload");

    Ok(UploadFigures {
        backend: backend.to_owned(),
        through: through.to_owned(),
        megabytes: megabytes as f64,
        declare_ms,
        upload_ms,
        complete_ms,
        download_ms,
        rss_before_mb,
        rss_peak_mb: server.peak_resident_mb().unwrap_or(f64::NAN),
    })
}

/// The uploads' table.
pub(crate) fn table(figures: &[UploadFigures]) -> String {
    let mut out = String::from(
        "| a file into a chat, under `spool serve` | bytes go through | declare ms | upload ms | upload MB/s | complete ms | download ms | server memory before → peak, MB |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for f in figures {
        out.push_str(&format!(
            "| {} MB, {} | {} | {:.1} | {:.0} | {:.0} | {:.1} | {:.0} | {:.1} → {:.1} |\n",
            f.megabytes,
            f.backend,
            f.through,
            f.declare_ms,
            f.upload_ms,
            f.megabytes / (f.upload_ms / 1000.0),
            f.complete_ms,
            f.download_ms,
            f.rss_before_mb,
            f.rss_peak_mb
        ));
    }
    out
}
