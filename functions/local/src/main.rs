//! `spool`: every Spool function in one process. See `spool --help`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    spool_platform::init_local_tracing();
    spool_local::Cli::parse().run().await
}
