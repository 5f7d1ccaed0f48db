//! # Telemetry of a local process

/// Sets up `tracing` for a local process: human-readable lines on stderr (coloured only on a
/// terminal, so a log file or a pipe gets plain text), filtered by `RUST_LOG` (default `info`). Lambda functions use `lambda_runtime`'s subscriber instead,
/// which honours `AWS_LAMBDA_LOG_FORMAT=JSON`.
pub fn init_local_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A second call (several tests in one process) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
