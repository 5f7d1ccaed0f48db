//! `spool-bench`: Spool's benchmark program (`make bench`).
//!
//! Runs the same stream-log workloads against the embedded backend (in a temporary directory)
//! and, given the emulator's env file, against the AWS backend, in one run, and prints one table
//! with a column per backend. Request counts on AWS come from an SDK interceptor that counts
//! every request sent. Results also go to a JSON file.

mod aws_chat;
mod chat;
mod collapse;
mod cost;
mod naive;
mod pages;
mod protocol;
mod uploads;

use std::{path::PathBuf, sync::Arc, time::Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use serde::{Deserialize, Serialize};
use spool_aws::RequestCounter;
use spool_log::{
    limits::LogLimits,
    port::StreamLog,
    stream::{Append, ContentType, CreateStream, Offset, Position, SealMode, StreamPath},
};

/// Benchmarks of the stream log on both backends.
#[derive(Debug, Parser)]
struct Args {
    /// The emulator's env file (from `make emulator-up`); without it only the embedded backend runs.
    #[arg(long)]
    env_file: Option<PathBuf>,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "target/bench/log.json")]
    out: PathBuf,
    /// Appends per write workload.
    #[arg(long, default_value_t = 2000)]
    appends: u64,
    /// Messages in the stream the catch-up read workload reads.
    #[arg(long, default_value_t = 20_000)]
    read_messages: u64,
    /// The `spool` binary, for the chat API workloads under `spool serve` (skipped without it).
    #[arg(long)]
    spool: Option<PathBuf>,
    /// Messages per chat API workload.
    #[arg(long, default_value_t = 2000)]
    chat_messages: usize,
    /// The reference server's script (`tests/bench/reference/server.mjs`): runs the protocol
    /// workloads over HTTP against `spool serve` (needs `--spool`) and the reference server, in
    /// memory and file-backed.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Electric's Rust Durable Streams server (`durable-streams-server`, which `make bench`
    /// builds into its own target dir): a further column on the protocol workloads.
    #[arg(long)]
    electric: Option<PathBuf>,
    /// Messages in the large catch-up read of the protocol workloads.
    #[arg(long, default_value_t = 1_000_000)]
    large_read_messages: u64,
    /// A README whose `<!-- bench:start -->` … `<!-- bench:end -->` block gets the results.
    #[arg(long)]
    readme: Option<PathBuf>,
    /// Chat turns in the AWS chat workload (requests per 1,000 events, the cost model).
    #[arg(long, default_value_t = 30)]
    aws_chat_turns: u64,
    /// Messages in each stream of the sealed-page-size comparison.
    #[arg(long, default_value_t = 50_000)]
    page_messages: u64,
    /// Reads from random offsets per page size.
    #[arg(long, default_value_t = 100)]
    page_resumes: usize,
    /// Megabytes of the file uploaded through each backend (needs `--spool`).
    #[arg(long, default_value_t = 50)]
    upload_mb: usize,
    /// Run only the file uploads (with `--spool`, and `--env-file` for AWS).
    #[arg(long)]
    only_uploads: bool,
    /// Run nothing: take the results from this JSON file (a previous `--out`), for `--readme`
    /// (the Lambda binaries' sizes are measured again if `make lambda-build` has built them).
    #[arg(long)]
    from_json: Option<PathBuf>,
    /// nginx (Debian's `nginx-light`), the request-collapsing cache of the live-reader
    /// simulation (needs `--env-file`); without it the simulation does not run.
    #[arg(long)]
    nginx: Option<PathBuf>,
    /// Readers of the busy chat in the live-reader simulation.
    #[arg(long, default_value_t = 2000)]
    collapse_hot_readers: usize,
    /// Other chats in the live-reader simulation, and readers of each.
    #[arg(long, default_value_t = 200)]
    collapse_chats: usize,
    #[arg(long, default_value_t = 3)]
    collapse_readers_per_chat: usize,
    /// Events appended to every chat of the live-reader simulation.
    #[arg(long, default_value_t = 10)]
    collapse_events: u64,
    /// Run only the live-reader simulation (with `--env-file` and `--nginx`), and fail if a
    /// reader missed or repeated an event or an outsider read the busy chat (`make test` runs
    /// a small one).
    #[arg(long)]
    only_collapse: bool,
    /// Run only the AWS chat workload and the naive designs (with `--env-file`): print the
    /// requests per 1,000 events and the cost model, and keep the figures in
    /// `target/bench/aws-chat.json`.
    #[arg(long)]
    only_aws_chat: bool,
}

/// One backend's figures.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Figures {
    backend: String,
    sequential_appends_per_s: f64,
    concurrent_appends_one_stream_per_s: f64,
    appends_16_streams_per_s: f64,
    catch_up_hot_mb_per_s: f64,
    catch_up_sealed_mb_per_s: f64,
    /// AWS only: requests per append on the uncontended path.
    dynamodb_writes_per_append: Option<f64>,
    dynamodb_reads_per_append: Option<f64>,
    s3_puts_per_append: Option<f64>,
    /// AWS only: requests of sealing, per page and per message sealed.
    s3_puts_per_page: Option<f64>,
    dynamodb_writes_per_sealed_message: Option<f64>,
    pages_sealed: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    date: String,
    machine: String,
    appends: u64,
    read_messages: u64,
    message_bytes: usize,
    limits: String,
    results: Vec<Figures>,
    chat_api: Vec<chat::Latency>,
    #[serde(default)]
    protocol_sizes: Option<protocol::Sizes>,
    #[serde(default)]
    protocol: Vec<protocol::ProtocolFigures>,
    #[serde(default)]
    binaries: Vec<Binary>,
    #[serde(default)]
    aws_chat: Option<aws_chat::AwsChat>,
    #[serde(default)]
    cost: Option<cost::Model>,
    #[serde(default)]
    page_sizes: Vec<pages::PageSize>,
    #[serde(default)]
    uploads: Vec<uploads::UploadFigures>,
    #[serde(default)]
    collapse: Option<collapse::Collapse>,
}

/// A Lambda function's binary: what is uploaded.
#[derive(Debug, Serialize, Deserialize)]
struct Binary {
    function: String,
    megabytes: f64,
    /// How it was built.
    build: String,
}

/// The Lambda binaries' sizes: `cargo lambda build --profile lambda --arm64`'s if they exist
/// (`make lambda-build`), else the stripped release builds (`cargo build --release`).
fn binaries() -> Vec<Binary> {
    ["spool-api", "spool-stream", "spool-worker"]
        .iter()
        .filter_map(|name| {
            let lambda = PathBuf::from(format!("target/lambda/{name}/bootstrap"));
            let (path, build) = if lambda.is_file() {
                (lambda, "cargo lambda build --profile lambda --arm64")
            } else {
                (
                    PathBuf::from(format!("target/release/{name}")),
                    "cargo build --release (stripped), x86_64",
                )
            };
            let bytes = std::fs::metadata(&path).ok()?.len();
            Some(Binary {
                function: (*name).to_owned(),
                megabytes: bytes as f64 / 1e6,
                build: build.to_owned(),
            })
        })
        .collect()
}

const MESSAGE_BYTES: usize = 100;

fn message(i: u64) -> Bytes {
    let head = format!("{{\"i\":{i},\"pad\":\"");
    let pad = MESSAGE_BYTES.saturating_sub(head.len() + 2);
    Bytes::from(format!("{head}{}\"}}", "x".repeat(pad)))
}

fn json() -> CreateStream {
    CreateStream::new(ContentType::parse("application/json").expect("valid"))
}

fn path(name: &str) -> StreamPath {
    StreamPath::parse(format!("bench/{}/{name}", uuid::Uuid::new_v4().simple())).expect("valid")
}

fn per_second(n: u64, started: Instant) -> f64 {
    n as f64 / started.elapsed().as_secs_f64()
}

fn progress(backend: &str, step: &str) {
    eprintln!("[{backend}] {step}");
}

async fn run(
    backend: &str,
    log: Arc<dyn StreamLog>,
    counter: Option<&RequestCounter>,
    args: &Args,
) -> anyhow::Result<Figures> {
    let mut f = Figures {
        backend: backend.to_owned(),
        ..Figures::default()
    };
    let writes = |c: &RequestCounter| {
        c.total("DynamoDB", |op| {
            matches!(
                op,
                "PutItem" | "UpdateItem" | "DeleteItem" | "TransactWriteItems" | "BatchWriteItem"
            )
        })
    };
    let reads = |c: &RequestCounter| c.total("DynamoDB", |op| matches!(op, "GetItem" | "Query" | "BatchGetItem"));
    let puts = |c: &RequestCounter| c.total("S3", |op| op == "PutObject");

    // Sequential appends to one stream: the uncontended path.
    progress(backend, "sequential appends");
    let one = path("sequential");
    log.create(&one, json()).await?;
    log.append(&one, Append::one(message(0))).await?; // warm the writer's head cache
    if let Some(c) = counter {
        c.reset();
    }
    let started = Instant::now();
    for i in 0..args.appends {
        log.append(&one, Append::one(message(i))).await?;
    }
    f.sequential_appends_per_s = per_second(args.appends, started);
    if let Some(c) = counter {
        let n = args.appends as f64;
        f.dynamodb_writes_per_append = Some(writes(c) as f64 / n);
        f.dynamodb_reads_per_append = Some(reads(c) as f64 / n);
        f.s3_puts_per_append = Some(puts(c) as f64 / n);
    }

    // Sealing what was appended.
    progress(backend, "sealing");
    if let Some(c) = counter {
        c.reset();
    }
    let report = log.seal(&one, SealMode::Final).await?;
    f.pages_sealed = report.written.len() as u64;
    if let Some(c) = counter
        && f.pages_sealed > 0
    {
        f.s3_puts_per_page = Some(puts(c) as f64 / f.pages_sealed as f64);
        let sealed = report.sealed_through.seq() as f64;
        f.dynamodb_writes_per_sealed_message = Some(writes(c) as f64 / sealed);
    }

    // 8 concurrent writers on one stream, one process (group commit).
    progress(backend, "8 concurrent writers, one stream");
    let shared = path("concurrent");
    log.create(&shared, json()).await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..8 {
        let (log, shared, n) = (log.clone(), shared.clone(), args.appends / 8);
        tasks.spawn(async move {
            for i in 0..n {
                log.append(&shared, Append::one(message(w * n + i))).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    f.concurrent_appends_one_stream_per_s = per_second(args.appends / 8 * 8, started);
    let tail = log.metadata(&shared).await?.tail;
    anyhow::ensure!(tail == Offset::after(args.appends / 8 * 8), "lost appends: tail {tail}");

    // 16 streams, one writer each.
    progress(backend, "16 streams");
    let streams: Vec<StreamPath> = (0..16).map(|i| path(&format!("s{i}"))).collect();
    for s in &streams {
        log.create(s, json()).await?;
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for s in streams {
        let (log, n) = (log.clone(), args.appends / 16);
        tasks.spawn(async move {
            for i in 0..n {
                log.append(&s, Append::one(message(i))).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    f.appends_16_streams_per_s = per_second(args.appends / 16 * 16, started);

    // Catch-up reads, from the hot tail and then from sealed pages.
    progress(backend, "catch-up reads");
    let history = path("history");
    log.create(&history, json()).await?;
    let batch = 100;
    for start in (0..args.read_messages).step_by(batch) {
        let messages = (start..(start + batch as u64).min(args.read_messages)).map(message);
        log.append(&history, Append::messages(messages)).await?;
    }
    f.catch_up_hot_mb_per_s = read_all(log.as_ref(), &history, args.read_messages).await?;
    log.seal(&history, SealMode::Final).await?;
    f.catch_up_sealed_mb_per_s = read_all(log.as_ref(), &history, args.read_messages).await?;
    Ok(f)
}

/// Reads a whole stream from its start; returns MB/s.
async fn read_all(log: &dyn StreamLog, path: &StreamPath, expected: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut at = Offset::START;
    let mut bytes = 0usize;
    let mut count = 0u64;
    loop {
        let chunk = log.read(path, Position::At(at), None).await?;
        bytes += chunk.messages.iter().map(Bytes::len).sum::<usize>();
        count += chunk.messages.len() as u64;
        at = chunk.next_offset;
        if chunk.up_to_date {
            break;
        }
    }
    anyhow::ensure!(count == expected, "read {count} messages, expected {expected}");
    Ok(bytes as f64 / 1e6 / started.elapsed().as_secs_f64())
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The stream-log workloads as a markdown table: a column per backend, then AWS over embedded.
fn log_table(results: &[Figures]) -> String {
    type Row = (&'static str, fn(&Figures) -> Option<f64>);
    let rows: [Row; 10] = [
        ("appends/s, sequential, 1 stream", |f| Some(f.sequential_appends_per_s)),
        ("appends/s, 8 writers, 1 stream (group commit)", |f| {
            Some(f.concurrent_appends_one_stream_per_s)
        }),
        ("appends/s, 16 streams, 1 writer each", |f| {
            Some(f.appends_16_streams_per_s)
        }),
        ("catch-up read MB/s, hot tail", |f| Some(f.catch_up_hot_mb_per_s)),
        ("catch-up read MB/s, sealed pages", |f| Some(f.catch_up_sealed_mb_per_s)),
        ("DynamoDB write requests per append (uncontended)", |f| {
            f.dynamodb_writes_per_append
        }),
        ("DynamoDB read requests per append (uncontended)", |f| {
            f.dynamodb_reads_per_append
        }),
        ("S3 PUTs per append", |f| f.s3_puts_per_append),
        ("S3 PUTs per sealed page", |f| f.s3_puts_per_page),
        (
            "DynamoDB write requests per sealed message (releasing the hot tail)",
            |f| f.dynamodb_writes_per_sealed_message,
        ),
    ];
    let mut out = String::from("| stream log, in process | ");
    out.push_str(
        &results
            .iter()
            .map(|f| f.backend.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
    );
    let ratio = results.len() == 2;
    out.push_str(if ratio { " | aws / embedded |\n" } else { " |\n" });
    out.push_str(&format!(
        "| --- |{}\n",
        " ---: |".repeat(results.len() + usize::from(ratio))
    ));
    for (name, get) in rows {
        let values: Vec<Option<f64>> = results.iter().map(get).collect();
        if values.iter().all(Option::is_none) {
            continue;
        }
        out.push_str(&format!("| {name} |"));
        for v in &values {
            out.push_str(&format!(" {} |", v.map_or_else(|| "–".to_owned(), fmt)));
        }
        if ratio {
            match values[..] {
                [Some(a), Some(b)] if a > 0.0 => out.push_str(&format!(" {:.3} |", b / a)),
                _ => out.push_str(" |"),
            }
        }
        out.push('\n');
    }
    out
}

/// The chat API workloads as a markdown table.
fn chat_table(chat: &[chat::Latency]) -> String {
    let mut out = String::from(
        "| chat API under spool serve (embedded) | requests | p50 ms | p99 ms | per s |\n| --- | ---: | ---: | ---: | ---: |\n",
    );
    for l in chat {
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {:.0} |\n",
            l.workload, l.requests, l.p50_ms, l.p99_ms, l.per_s
        ));
    }
    out
}

/// The AWS chat workload: requests by operation in each phase.
fn aws_chat_table(chat: &aws_chat::AwsChat) -> String {
    let phases = [
        ("writing and sealing, per 1,000 events", &chat.write),
        ("catching up, per 1,000 events read", &chat.catch_up),
        ("an idle SSE reader, per minute", &chat.idle_reader_minute),
    ];
    let mut out = format!(
        "AWS backend on the emulator, in process as `spool serve --backend aws`: {} scripted turns \
         (each a tool call, then a 300-word answer at 50 words a second; {:.2} s each in the worker on average, median {:.2} s, slowest \
         {:.2} s; posts {:.0} ms on average, median {:.0} ms, slowest {:.0} ms; {:.2} s from the \
         message to its `agent_end` read back) wrote {} events ({:.0} B each on average) round three chats; the \
         worker seals full pages as they fill and each chat's last page once the chat has been \
         idle ({:.0} s here, 10 minutes deployed). The process used {:.2} CPU seconds a turn.\n\n| requests (SDK-counted) |",
        chat.turns,
        chat.turn_seconds,
        chat.turn_p50_seconds,
        chat.turn_max_seconds,
        chat.api_request_ms,
        chat.api_request_p50_ms,
        chat.api_request_max_ms,
        chat.message_to_end_seconds,
        chat.events,
        chat.mean_event_bytes,
        chat.idle_seal_seconds,
        chat.cpu_seconds_per_turn,
    );
    for (name, _) in phases {
        out.push_str(&format!(" {name} |"));
    }
    out.push_str(&format!("\n| --- |{}\n", " ---: |".repeat(phases.len())));
    let mut operations: Vec<&String> = phases.iter().flat_map(|(_, u)| u.requests.keys()).collect();
    operations.sort();
    operations.dedup();
    let mut row = |label: &str, get: &dyn Fn(&aws_chat::Usage) -> f64| {
        out.push_str(&format!("| {label} |"));
        for (_, usage) in phases {
            out.push_str(&format!(" {:.2} |", get(usage)));
        }
        out.push('\n');
    };
    for op in operations {
        row(op, &|u| u.requests.get(op).copied().unwrap_or(0.0));
    }
    row("DynamoDB write capacity units", &|u| u.write_units);
    row("DynamoDB read capacity units", &|u| u.read_units);
    // Where the writing phase's DynamoDB requests go, by the shape of the keys they address.
    let mut targets: Vec<(&String, &f64)> = chat.write.targets.iter().collect();
    targets.sort_by(|a, b| b.1.total_cmp(a.1));
    if !targets.is_empty() {
        out.push_str("\n| DynamoDB requests writing and sealing, by the records they address (ids as `_`) | requests per 1,000 events | capacity units |\n| --- | ---: | ---: |\n");
        for (target, n) in targets.into_iter().take(16) {
            let units = chat.write.target_units.get(target).copied().unwrap_or(0.0);
            out.push_str(&format!("| `{}` | {n:.2} | {units:.2} |\n", target.replace('|', "\\|")));
        }
    }
    out
}

/// The sealed-page-size comparison.
fn page_table(sizes: &[pages::PageSize]) -> String {
    let mut out = String::from(
        "| sealed page size | pages | S3 PUT+LIST per million messages sealed | S3 GETs per million read | catch-up MB/s | resume p50 ms | resume p99 ms |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for p in sizes {
        out.push_str(&format!(
            "| {} KiB | {} | {:.0} | {:.0} | {:.1} | {:.2} | {:.2} |\n",
            p.page_kib,
            p.pages,
            p.s3_writes_per_million,
            p.s3_gets_per_million_read,
            p.catch_up_mb_per_s,
            p.resume_p50_ms,
            p.resume_p99_ms
        ));
    }
    out
}

/// Every table of a report, with when and where it was measured.
fn render(report: &Report) -> String {
    let mut out = format!(
        "Measured {} on {} (`make bench`; 100-byte JSON messages).\n\n",
        report.date.get(..10).unwrap_or(&report.date),
        report.machine
    );
    if let Some(sizes) = &report.protocol_sizes {
        out.push_str(&protocol_table(&report.protocol, sizes));
        out.push('\n');
    }
    out.push_str(&log_table(&report.results));
    if !report.chat_api.is_empty() {
        out.push('\n');
        out.push_str(&chat_table(&report.chat_api));
    }
    if let Some(chat) = &report.aws_chat {
        out.push('\n');
        out.push_str(&aws_chat_table(chat));
    }
    if !report.page_sizes.is_empty() {
        out.push('\n');
        out.push_str(&page_table(&report.page_sizes));
    }
    if !report.uploads.is_empty() {
        out.push('\n');
        out.push_str(&uploads::table(&report.uploads));
    }
    if let Some(collapse) = &report.collapse {
        out.push('\n');
        out.push_str(&collapse::table(collapse));
    }
    if let Some(model) = &report.cost {
        out.push('\n');
        out.push_str(&cost::table(model));
    }
    if !report.binaries.is_empty() {
        out.push_str("\n| Lambda binary | MB | built with |\n| --- | ---: | --- |\n");
        for b in &report.binaries {
            out.push_str(&format!("| {} | {:.1} | {} |\n", b.function, b.megabytes, b.build));
        }
    }
    out
}

/// Replaces the `<!-- bench:start -->` … `<!-- bench:end -->` block of `readme` with `tables`.
fn splice_readme(readme: &std::path::Path, tables: &str) -> anyhow::Result<()> {
    const START: &str = "<!-- bench:start -->";
    const END: &str = "<!-- bench:end -->";
    let text = std::fs::read_to_string(readme).with_context(|| format!("cannot read {}", readme.display()))?;
    let (Some(a), Some(b)) = (text.find(START), text.find(END)) else {
        anyhow::bail!("{} has no {START} … {END} block", readme.display());
    };
    anyhow::ensure!(a < b, "{}: {END} comes before {START}", readme.display());
    let updated = format!("{}{START}\n{tables}{}", &text[..a], &text[b..]);
    std::fs::write(readme, updated).with_context(|| format!("cannot write {}", readme.display()))?;
    eprintln!("results written into {}", readme.display());
    Ok(())
}

/// The live-reader simulation, when there is an emulator and nginx.
async fn simulate_collapse(args: &Args) -> anyhow::Result<Option<collapse::Collapse>> {
    let (Some(env_file), Some(nginx)) = (&args.env_file, &args.nginx) else {
        return Ok(None);
    };
    let config = spool_platform::Config::from_env_and_file(env_file)?;
    let shape = collapse::Shape {
        hot_readers: args.collapse_hot_readers,
        chats: args.collapse_chats,
        readers_per_chat: args.collapse_readers_per_chat,
        events: args.collapse_events,
    };
    Ok(Some(collapse::run(&config, nginx, shape).await?))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(json) = &args.from_json {
        let mut report: Report =
            serde_json::from_slice(&std::fs::read(json).with_context(|| format!("cannot read {}", json.display()))?)?;
        // The Lambda binaries are what is uploaded: measure them if `make lambda-build` has built
        // them since the run.
        let built = binaries();
        if built.iter().any(|b| b.build.starts_with("cargo lambda")) {
            report.binaries = built;
        }
        let tables = render(&report);
        print!("{tables}");
        if let Some(readme) = &args.readme {
            splice_readme(readme, &tables)?;
        }
        return Ok(());
    }
    if args.only_collapse {
        let collapse = simulate_collapse(&args)
            .await?
            .context("--only-collapse needs --env-file and --nginx")?;
        print!("{}", collapse::table(&collapse));
        return Ok(());
    }
    if args.only_aws_chat {
        let env_file = args.env_file.as_ref().context("--only-aws-chat needs --env-file")?;
        let config = spool_platform::Config::from_env_and_file(env_file)?;
        let chat = aws_chat::run(&config, args.aws_chat_turns).await?;
        let json = std::path::Path::new("target/bench/aws-chat.json");
        std::fs::create_dir_all("target/bench")?;
        std::fs::write(json, serde_json::to_string_pretty(&chat)?)?;
        println!("{}\n{}", aws_chat_table(&chat), cost::table(&cost::model(&chat, None)));
        progress("aws chat", &format!("the figures are in {}", json.display()));
        return Ok(());
    }
    let limits = LogLimits::default();
    let mut results = Vec::new();
    // Files through each backend, first, on a quiet machine.
    let mut upload_figures = Vec::new();
    if let Some(spool) = &args.spool {
        progress("spool serve", "a file upload, embedded");
        let server = protocol::Target::spool(spool, true)?;
        upload_figures.push(uploads::run(&server, "embedded", args.upload_mb).await?);
        drop(server);
        if let Some(env_file) = &args.env_file {
            progress("spool serve --backend aws", "a file upload, straight to S3");
            let server = protocol::Target::spool_aws(spool, env_file)?;
            upload_figures.push(uploads::run(&server, "aws-emulator", args.upload_mb).await?);
        }
    }
    if args.only_uploads {
        print!("{}", uploads::table(&upload_figures));
        return Ok(());
    }

    let dir = tempfile::tempdir()?;
    let options = spool_embedded::Options {
        limits,
        auto_seal: false,
        ..spool_embedded::Options::default()
    };
    let embedded: Arc<dyn StreamLog> = Arc::new(spool_embedded::EmbeddedLog::open(dir.path(), options)?);
    results.push(run("embedded", embedded, None, &args).await?);

    if let Some(env_file) = &args.env_file {
        let config = spool_platform::Config::from_env_and_file(env_file)?;
        anyhow::ensure!(
            config.aws.endpoint_url.is_some(),
            "{} has no emulator endpoint",
            env_file.display()
        );
        let counter = RequestCounter::default();
        let mut config = config;
        config.aws.maintenance_queue_url = None; // seal explicitly, and count it apart
        let aws: Arc<dyn StreamLog> = spool_aws::Stores::connect(&config, Some(counter.clone())).await?.log();
        results.push(run("aws-emulator", aws, Some(&counter), &args).await?);
    }
    let (mut aws_chat, mut page_sizes) = (None, Vec::new());
    if let Some(env_file) = &args.env_file {
        let config = spool_platform::Config::from_env_and_file(env_file)?;
        aws_chat = Some(aws_chat::run(&config, args.aws_chat_turns).await?);
        page_sizes = pages::run(&config, args.page_messages, args.page_resumes).await?;
    }
    let collapse = simulate_collapse(&args).await?;

    let mut protocol_results = Vec::new();
    let mut protocol_sizes = None;
    if let (Some(script), Some(spool)) = (&args.reference, &args.spool) {
        let sizes = protocol::Sizes {
            appends: args.appends,
            small_read: args.read_messages,
            large_read: args.large_read_messages,
            live_messages: 250,
            fan_out_readers: 100,
            resume_stream: 50_000,
            resume_readers: 200,
        };
        // One target at a time, so none competes with another for the two cores.
        let electric = args.electric.clone();
        let mut starts: Vec<Box<dyn Fn() -> anyhow::Result<protocol::Target>>> = vec![
            Box::new(|| protocol::Target::spool(spool, false)),
            Box::new(|| protocol::Target::reference(script, false)),
            Box::new(|| protocol::Target::reference(script, true)),
        ];
        if let Some(bin) = electric {
            starts.push(Box::new(move || protocol::Target::electric(&bin)));
        }
        for start in &starts {
            let target = start()?;
            protocol_results.push(protocol::run(&target, &sizes).await?);
        }
        protocol_sizes = Some(sizes);
    }
    let mut chat_api = Vec::new();
    if let Some(spool) = &args.spool {
        progress("spool serve", "POST /v1/sessions/{id}/messages");
        chat_api = chat::run(spool, args.chat_messages).await?;
    }
    let report = Report {
        date: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        machine: format!(
            "{} cores, {}",
            std::thread::available_parallelism().map_or(0, usize::from),
            std::env::consts::ARCH
        ),
        appends: args.appends,
        read_messages: args.read_messages,
        message_bytes: MESSAGE_BYTES,
        limits: format!("{limits:?}"),
        results,
        chat_api,
        protocol_sizes,
        protocol: protocol_results,
        binaries: binaries(),
        cost: aws_chat.as_ref().map(|chat| cost::model(chat, collapse.as_ref())),
        aws_chat,
        page_sizes,
        uploads: upload_figures,
        collapse,
    };
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    eprintln!("results written to {}", args.out.display());
    let tables = render(&report);
    println!();
    print!("{tables}");
    if let Some(readme) = &args.readme {
        splice_readme(readme, &tables)?;
    }
    Ok(())
}

/// The protocol workloads: a column per server, then Spool over each reference (for rates,
/// above 1 is Spool faster; for times and memory, below 1 is Spool better).
fn protocol_table(results: &[protocol::ProtocolFigures], sizes: &protocol::Sizes) -> String {
    type Row = (String, fn(&protocol::ProtocolFigures) -> f64);
    let rows: Vec<Row> = vec![
        ("start to ready, ms".to_owned(), |f| f.start_to_ready_ms),
        ("idle resident memory, MB".to_owned(), |f| f.idle_rss_mb),
        (
            format!("appends/s, sequential ({} × 100 B JSON)", sizes.appends),
            |f| f.sequential_appends_per_s,
        ),
        (
            "appends/s, 8 writers, 1 stream (order and count checked)".to_owned(),
            |f| f.concurrent_appends_per_s,
        ),
        (format!("catch-up MB/s, {} messages", sizes.small_read), |f| {
            f.catch_up_small_mb_per_s
        }),
        (format!("catch-up MB/s, {} messages", sizes.large_read), |f| {
            f.catch_up_large_mb_per_s
        }),
        ("live SSE p50 ms, 50 appends/s".to_owned(), |f| f.live_p50_ms),
        ("live SSE p99 ms, 50 appends/s".to_owned(), |f| f.live_p99_ms),
        (format!("fan-out p50 ms, {} SSE readers", sizes.fan_out_readers), |f| {
            f.fan_out_p50_ms
        }),
        (format!("fan-out p99 ms, {} SSE readers", sizes.fan_out_readers), |f| {
            f.fan_out_p99_ms
        }),
        (
            format!(
                "resume p50 ms, {} readers, {} messages",
                sizes.resume_readers, sizes.resume_stream
            ),
            |f| f.resume_p50_ms,
        ),
        (
            format!(
                "resume p99 ms, {} readers, {} messages",
                sizes.resume_readers, sizes.resume_stream
            ),
            |f| f.resume_p99_ms,
        ),
    ];
    let mut out = String::from("| Durable Streams over HTTP |");
    for f in results {
        out.push_str(&format!(" {} |", f.target));
    }
    for f in results.iter().skip(1) {
        out.push_str(&format!(" spool / {} |", f.target));
    }
    out.push_str(&format!(
        "\n| --- |{}\n",
        " ---: |".repeat((2 * results.len()).saturating_sub(1))
    ));
    for (label, value) in rows {
        out.push_str(&format!("| {label} |"));
        for f in results {
            out.push_str(&format!(" {:.2} |", value(f)));
        }
        for f in results.iter().skip(1) {
            let reference = value(f);
            let ratio = results.first().map_or(f64::NAN, |spool| value(spool) / reference);
            out.push_str(&format!(" {ratio:.2} |"));
        }
        out.push('\n');
    }
    out
}
