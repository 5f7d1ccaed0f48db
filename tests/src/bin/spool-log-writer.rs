//! A separate process that appends to an embedded store, for the multi-process tests:
//! `spool-log-writer DIR PATH WRITER COUNT` appends `{"w": WRITER, "i": 0..COUNT}` one at a time.

use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use spool_embedded::EmbeddedLog;
use spool_log::{
    port::StreamWriter,
    stream::{Append, StreamPath},
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, path, writer, count] = args.as_slice() else {
        anyhow::bail!("usage: spool-log-writer DIR PATH WRITER COUNT");
    };
    let writer: u64 = writer.parse().context("WRITER")?;
    let count: u64 = count.parse().context("COUNT")?;
    let log = Arc::new(EmbeddedLog::open(dir, spool_tests::embedded_options(false))?);
    let path = StreamPath::parse(path.clone())?;
    for i in 0..count {
        let message = Bytes::from(serde_json::json!({ "w": writer, "i": i }).to_string());
        log.append(&path, Append::one(message)).await?;
    }
    Ok(())
}
