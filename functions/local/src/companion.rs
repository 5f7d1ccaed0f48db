//! `spool companion`: the companion service over a library of notes, on loopback
//! ([`spool_companion`]).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use spool_companion::{
    CompanionState, Library,
    http::check_loopback,
    mcp::{McpConfig, McpHub},
    spool::SpoolLink,
};

/// `spool companion --library DIR --spool-url URL`.
#[derive(Debug, clap::Args)]
pub struct CompanionArgs {
    /// The folder of notes (markdown and text) to answer from.
    #[arg(long)]
    pub library: PathBuf,
    /// Where Spool is (its API), e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub spool_url: String,
    /// Where the companion listens: loopback only.
    #[arg(long, default_value = "127.0.0.1:8826")]
    pub addr: SocketAddr,
    /// A file holding the organization's API key (instead of SPOOL_API_KEY).
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// The organization's API key (tokens for the library are made from it).
    #[arg(long, env = "SPOOL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// A hosted UI origin allowed to call the companion besides localhost pages (repeatable),
    /// e.g. https://chat.example.com.
    #[arg(long = "origin", value_name = "ORIGIN")]
    pub origins: Vec<String>,
    /// Where this machine's salt for the library id is kept.
    #[arg(long, env = "SPOOL_COMPANION_SALT_FILE")]
    pub salt_file: Option<PathBuf>,
    /// The companion's MCP servers, in Claude Desktop's shape (`{"mcpServers": {"name":
    /// {"command", "args", "env"}}}`); by default ~/.config/spool/companion-mcp.json when it
    /// exists.
    #[arg(long, env = "SPOOL_COMPANION_MCP_CONFIG")]
    pub mcp_config: Option<PathBuf>,
    /// How often the library is checked for changed notes, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub rescan_ms: u64,
}

impl CompanionArgs {
    fn api_key(&self) -> anyhow::Result<String> {
        if let Some(file) = &self.api_key_file {
            let key = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
            return Ok(key.trim().to_owned());
        }
        self.api_key.clone().filter(|k| !k.trim().is_empty()).context(
            "give the organization's API key in SPOOL_API_KEY or --api-key-file (spool serve prints the local one)",
        )
    }

    fn salt_file(&self) -> anyhow::Result<PathBuf> {
        if let Some(file) = &self.salt_file {
            return Ok(file.clone());
        }
        let home = std::env::var_os("HOME").context("set HOME or --salt-file")?;
        Ok(PathBuf::from(home).join(".config/spool/companion-salt"))
    }

    /// The MCP servers: from `--mcp-config` (which must be there), or from the default file
    /// when it exists, or none.
    fn mcp_config(&self) -> anyhow::Result<McpConfig> {
        if let Some(file) = &self.mcp_config {
            return Ok(McpConfig::load(file)?);
        }
        let Some(home) = std::env::var_os("HOME") else {
            return Ok(McpConfig::default());
        };
        let file = PathBuf::from(home).join(".config/spool/companion-mcp.json");
        if file.exists() {
            Ok(McpConfig::load(&file)?)
        } else {
            Ok(McpConfig::default())
        }
    }
}

/// Runs the companion until Ctrl-C.
pub async fn run(args: CompanionArgs) -> anyhow::Result<()> {
    check_loopback(args.addr).map_err(anyhow::Error::msg)?;
    let api_key = args.api_key()?;
    let mcp = Arc::new(McpHub::new(args.mcp_config()?));
    let started = std::time::Instant::now();
    let root = args.library.clone();
    let library = tokio::task::spawn_blocking(move || Library::open(&root))
        .await?
        .with_context(|| format!("cannot index the library {}", args.library.display()))?;
    let library = Arc::new(library);
    let salt = spool_companion::spool::salt(&args.salt_file()?).context("cannot keep the library id's salt")?;
    let library_id = spool_companion::spool::library_id(library.root(), &salt);
    let notes = library.notes().unwrap_or(0);
    eprintln!(
        "Indexed {notes} notes in {} ms from {} (library id {library_id})",
        started.elapsed().as_millis(),
        library.root().display()
    );
    let rescan = library.clone();
    let every = Duration::from_millis(args.rescan_ms.max(100));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let library = rescan.clone();
            match tokio::task::spawn_blocking(move || library.rescan()).await {
                Ok(Ok(r)) if r.indexed + r.removed > 0 => {
                    tracing::info!(
                        indexed = r.indexed,
                        removed = r.removed,
                        notes = r.notes,
                        "library updated"
                    );
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot rescan the library; trying again"),
                Err(e) => tracing::warn!(error = %e, "cannot rescan the library; trying again"),
            }
        }
    });
    let state = Arc::new(CompanionState {
        library,
        spool: SpoolLink::new(&args.spool_url, api_key, library_id),
        origins: args.origins,
        mcp: mcp.clone(),
    });
    let listener = tokio::net::TcpListener::bind(args.addr).await.with_context(|| {
        format!(
            "cannot listen on {}; is another companion running? pass --addr",
            args.addr
        )
    })?;
    // Say at start what the key carries (the handshake's answer), and warn when the UI can use
    // none of it; a Spool not up yet is asked again when a page connects.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    match state.spool.token(now).await {
        Ok(token) => spool_companion::spool::start_lines(&token)
            .iter()
            .for_each(|line| eprintln!("{line}")),
        Err(e) => eprintln!("Warning: no token from Spool yet ({e}); the companion asks again when a page connects"),
    }
    let servers = mcp.names();
    if !servers.is_empty() {
        eprintln!(
            "MCP servers (started on first use, for chats with mcp_tools): {}",
            servers.join(", ")
        );
    }
    eprintln!(
        "Companion listening on http://{} for Spool at {}",
        listener.local_addr()?,
        args.spool_url
    );
    axum::serve(listener, spool_companion::router(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    // The servers' process groups are killed, not left behind.
    mcp.shutdown().await;
    Ok(())
}
