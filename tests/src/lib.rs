//! # Test support for Spool's end-to-end and contract tests
//!
//! [`Harness`] hands the contract suite independent instances of one backend over shared
//! storage: two instances behave like two processes (two `spool serve`, two Lambda
//! instances), each with its own connections, caches and group commit. The embedded harness
//! uses a fresh temporary directory; the AWS harness uses the emulator that `make emulator-up`
//! started (read from `.env.emulator`) and keeps tests apart with unique stream paths.

pub mod counting;

use std::{path::PathBuf, sync::Arc, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use spool_aws::{AwsClients, AwsLog, AwsLogOptions, AwsMetadata, RequestCounter, SqsTurnQueue};
use spool_chat::turns::TurnQueue;
use spool_embedded::{EmbeddedLog, EmbeddedMetadata, Options};
use spool_log::{
    clock::ManualClock, error::Error, failpoint::FailPoints, limits::LogLimits, port::StreamLog, stream::StreamPath,
};
use spool_platform::Config;

/// Limits that make small tests cross page boundaries: pages of at most 2 KiB or 32 messages,
/// and a chat idle for 300 ms has its last page sealed.
pub fn test_limits() -> LogLimits {
    LogLimits {
        max_append_bytes: 4 * 1024 * 1024,
        max_read_bytes: 64 * 1024,
        page_bytes: 2 * 1024,
        page_max_messages: 32,
        // A chat's last page is sealed soon after its turn, so tests see it.
        idle_seal: std::time::Duration::from_millis(300),
    }
}

/// Embedded-store options for tests: [`test_limits`], sealing in the background or not.
pub fn embedded_options(auto_seal: bool) -> Options {
    Options {
        limits: test_limits(),
        auto_seal,
        ..Options::default()
    }
}

/// How often live readers re-check in tests.
pub const TEST_POLL: Duration = Duration::from_millis(50);

/// Serves `app` on a free loopback port until the test ends; its base URL.
pub async fn serve_on_loopback(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// The folder under which tests' workspaces may have working directories: each organization
/// its own folder in it (`orgs/{org}`), and each test its own temporary folder in that.
pub fn workspace_root() -> PathBuf {
    let root = std::env::temp_dir().join("spool-test-workspaces");
    std::fs::create_dir_all(root.join("orgs")).expect("the tests' workspace root");
    root
}

/// The roots the tests' API and engine confine working directories to: `orgs/{org}` under
/// [`workspace_root`], each organization's own, and [`shared_root`], the first user's.
pub fn workspace_roots(claims: Arc<dyn spool_chat::directory::Directory>) -> spool_chat::confine::WorkspaceRoots {
    let own = workspace_root().join("orgs").join(spool_chat::confine::ORG_PLACEHOLDER);
    spool_chat::confine::WorkspaceRoots::new(&[own, shared_root()], &[], claims)
}

/// A shared root of [`workspace_roots`], one for each test process (so that its claim, which
/// outlives a test in the emulator's table, is never another test's).
pub fn shared_root() -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let root = workspace_root().join("shared").join(unique_id("root"));
        std::fs::create_dir_all(&root).expect("the tests' shared root");
        root
    })
    .clone()
}

/// A new folder that `org` may make a working directory (under its own root of
/// [`workspace_roots`]), removed when dropped.
pub fn workspace_dir(org: &str) -> tempfile::TempDir {
    let own = workspace_root().join("orgs").join(org);
    std::fs::create_dir_all(&own).expect("the organization's workspace root");
    tempfile::tempdir_in(own).expect("a working directory")
}

/// How long a test waits for something that happens in the background (a turn, a seal, a
/// process dying) before it fails: long enough for a busy CI machine, short of hanging.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits until `check` answers `Some`, looking again every 20 ms, for at most [`PATIENCE`];
/// panics naming `what` after that.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An event of `turn`, from its envelope's `type` and `payload` as a fixture spells them.
pub fn draft(kind_type: &str, payload: serde_json::Value, turn: Option<&str>) -> spool_chat::session::EventDraft {
    let event = serde_json::from_value(serde_json::json!({ "type": kind_type, "payload": payload }))
        .unwrap_or_else(|e| panic!("a {kind_type} event: {e}"));
    spool_chat::session::EventDraft::new(event, turn.map(str::to_owned))
}

/// An id no other test uses (for organizations, keys and the like).
pub fn unique_id(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

/// A path no other test uses.
pub fn unique_path(name: &str) -> StreamPath {
    StreamPath::parse(format!("test/{}/{name}", uuid::Uuid::new_v4().simple())).expect("valid path")
}

/// One backend, as the contract suite sees it.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The backend's log type.
    type Log: StreamLog + Clone + 'static;
    /// The backend's metadata store (organizations, keys, workspaces, agents).
    type Metadata: spool_chat::metadata::Metadata + Clone + 'static;

    /// A new, independent instance over the shared storage.
    async fn instance(&self) -> Self::Log;

    /// A new, independent metadata store over the shared storage.
    async fn metadata(&self) -> Self::Metadata;

    /// [`Self::metadata`], holding records to `caps` (smaller ones, so a test reaches them).
    async fn capped_metadata(&self, caps: spool_chat::caps::Caps) -> Self::Metadata;

    /// The turn queue, this harness's own (so tests running at once do not take each other's
    /// jobs).
    async fn turns(&self) -> Arc<dyn TurnQueue>;

    /// Where chats' files' bytes are kept.
    async fn files(&self) -> Arc<dyn spool_chat::attachment::FileStore>;

    /// The raw bytes of a stream's sealed pages, by page name.
    async fn page_files(&self, log: &Self::Log, path: &StreamPath) -> Result<Vec<(String, Bytes)>, Error>;

    /// The fail points every instance checks.
    fn fail_points(&self) -> &Arc<FailPoints>;

    /// The clock every instance reads.
    fn clock(&self) -> &ManualClock;
}

/// The embedded backend in a temporary directory.
pub struct EmbeddedHarness {
    dir: tempfile::TempDir,
    fail: Arc<FailPoints>,
    clock: ManualClock,
}

impl EmbeddedHarness {
    /// A harness over a fresh temporary directory.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temporary directory"),
            fail: Arc::new(FailPoints::default()),
            clock: ManualClock::new(),
        }
    }

    /// The data directory.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Default for EmbeddedHarness {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Harness for EmbeddedHarness {
    type Log = EmbeddedLog;
    type Metadata = EmbeddedMetadata;

    async fn metadata(&self) -> EmbeddedMetadata {
        EmbeddedMetadata::open(self.dir.path()).expect("open embedded metadata")
    }

    async fn capped_metadata(&self, caps: spool_chat::caps::Caps) -> EmbeddedMetadata {
        self.metadata().await.with_caps(caps)
    }

    async fn turns(&self) -> Arc<dyn TurnQueue> {
        Arc::new(self.metadata().await)
    }

    async fn instance(&self) -> EmbeddedLog {
        let options = Options {
            limits: test_limits(),
            clock: Arc::new(self.clock.clone()),
            fail_points: Arc::clone(&self.fail),
            poll_interval: TEST_POLL,
            auto_seal: false,
        };
        EmbeddedLog::open(self.dir.path(), options).expect("open embedded store")
    }

    async fn files(&self) -> Arc<dyn spool_chat::attachment::FileStore> {
        Arc::new(spool_embedded::LocalFiles::new(self.dir.path()))
    }

    async fn page_files(&self, log: &EmbeddedLog, path: &StreamPath) -> Result<Vec<(String, Bytes)>, Error> {
        log.page_files(path).await
    }

    fn fail_points(&self) -> &Arc<FailPoints> {
        &self.fail
    }

    fn clock(&self) -> &ManualClock {
        &self.clock
    }
}

/// The emulator's configuration, from `.env.emulator` at the workspace root (or the file
/// `SPOOL_EMULATOR_ENV` names), overridden by the process environment.
pub fn emulator_config() -> Config {
    let file = std::env::var_os("SPOOL_EMULATOR_ENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.env.emulator"));
    assert!(
        file.exists(),
        "{} is missing: start the emulator with `make emulator-up` (make test does it for you)",
        file.display()
    );
    let config = Config::from_env_and_file(&file).expect("emulator configuration");
    assert!(
        config.aws.endpoint_url.is_some(),
        "{} has no AWS_ENDPOINT_URL; the emulator tests never run against real AWS",
        file.display()
    );
    config
}

/// The AWS backend on the emulator.
pub struct AwsHarness {
    config: Config,
    fail: Arc<FailPoints>,
    clock: ManualClock,
    /// Counts the requests of every instance.
    pub requests: RequestCounter,
    turns_queue: tokio::sync::OnceCell<String>,
}

impl AwsHarness {
    /// A harness over the emulator `make emulator-up` started.
    pub fn new() -> Self {
        Self {
            config: emulator_config(),
            fail: Arc::new(FailPoints::default()),
            clock: ManualClock::new(),
            requests: RequestCounter::default(),
            turns_queue: tokio::sync::OnceCell::new(),
        }
    }

    /// The configuration the harness reads.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// SDK clients for the emulator.
    pub async fn clients(&self) -> AwsClients {
        AwsClients::new(&self.config.aws, Some(self.requests.clone())).await
    }

    /// Options for a log over the emulator's table and bucket.
    pub fn options(&self) -> AwsLogOptions {
        let aws = &self.config.aws;
        let mut options = AwsLogOptions::new(
            aws.streams_table.clone().expect("SPOOL_STREAMS_TABLE in .env.emulator"),
            aws.pages_bucket.clone().expect("SPOOL_PAGES_BUCKET in .env.emulator"),
        );
        options.limits = test_limits();
        options.clock = Arc::new(self.clock.clone());
        options.fail_points = Arc::clone(&self.fail);
        options.poll_interval = TEST_POLL;
        options
    }
}

impl Default for AwsHarness {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Harness for AwsHarness {
    type Log = AwsLog;
    type Metadata = AwsMetadata;

    async fn metadata(&self) -> AwsMetadata {
        let table = self
            .config
            .aws
            .metadata_table
            .clone()
            .expect("SPOOL_METADATA_TABLE in .env.emulator");
        AwsMetadata::new(self.clients().await.dynamodb, table)
    }

    async fn capped_metadata(&self, caps: spool_chat::caps::Caps) -> AwsMetadata {
        self.metadata().await.with_caps(caps)
    }

    async fn turns(&self) -> Arc<dyn TurnQueue> {
        let sqs = self.clients().await.sqs;
        let url = self
            .turns_queue
            .get_or_init(|| async {
                let name = format!("test-turns-{}.fifo", uuid::Uuid::new_v4().simple());
                sqs.create_queue()
                    .queue_name(name)
                    .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
                    .send()
                    .await
                    .expect("create a FIFO queue in the emulator")
                    .queue_url
                    .expect("a queue URL")
            })
            .await
            .clone();
        Arc::new(SqsTurnQueue::new(sqs, url))
    }

    async fn instance(&self) -> AwsLog {
        AwsLog::new(self.clients().await, self.options())
    }

    async fn files(&self) -> Arc<dyn spool_chat::attachment::FileStore> {
        let bucket = self
            .config
            .aws
            .attachments_bucket
            .clone()
            .expect("SPOOL_PAGES_BUCKET in .env.emulator");
        Arc::new(spool_aws::S3Files::new(self.clients().await.s3, bucket))
    }

    async fn page_files(&self, log: &AwsLog, path: &StreamPath) -> Result<Vec<(String, Bytes)>, Error> {
        log.page_files(path).await
    }

    fn fail_points(&self) -> &Arc<FailPoints> {
        &self.fail
    }

    fn clock(&self) -> &ManualClock {
        &self.clock
    }
}
