//! The cost model: what a million chat events cost on AWS at on-demand list prices, from the
//! requests [`crate::aws_chat`] counted.
//!
//! The prices are constants with the date they were read, to be updated when AWS changes them.
//! Free tiers, storage, data transfer and CloudFront (except its requests in the collapsed
//! reader-hour, where they are most of the cost) are left out; so is everything the
//! emulator cannot tell (real request latencies, so Lambda durations are the ones measured
//! here, on loopback to the emulator).

use serde::{Deserialize, Serialize};

use crate::{
    aws_chat::{AwsChat, Usage},
    collapse::Collapse,
};

/// Where and when the prices below were read.
pub(crate) const PRICES: &str = "AWS us-east-1 on-demand list prices as published in 2025 (DynamoDB's \
     since its 1 November 2024 reduction); not rechecked on the day of the run";

/// US dollars per DynamoDB write request unit (on-demand).
const DYNAMODB_WRITE_UNIT: f64 = 0.625 / 1e6;
/// Per DynamoDB read request unit.
const DYNAMODB_READ_UNIT: f64 = 0.125 / 1e6;
/// Per S3 Standard PUT, COPY, POST or LIST request.
const S3_PUT: f64 = 0.005 / 1e3;
/// Per S3 Standard GET request.
const S3_GET: f64 = 0.0004 / 1e3;
/// Per SQS request (FIFO, the dearer kind: the turns queue is FIFO, the maintenance queue not).
const SQS_REQUEST: f64 = 0.50 / 1e6;
/// Per Lambda invocation.
const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
/// Per GB-second of Lambda on arm64.
const LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;
/// Per API Gateway HTTP API request (the first 300 million a month).
const HTTP_API_REQUEST: f64 = 1.00 / 1e6;
/// Per CloudFront HTTPS request (United States, Europe).
const CLOUDFRONT_REQUEST: f64 = 0.0100 / 1e4;

/// How long the template's stream function holds a long-poll (`SPOOL_LONG_POLL_MS`).
const LONG_POLL_SECONDS: f64 = 50.0;

/// Memory of the functions in `infra/template.yaml`, in GB: the API and stream functions get the
/// global 256 MB, the turns worker 512 MB.
const API_GB: f64 = 0.25;
const STREAM_GB: f64 = 0.25;
const TURNS_GB: f64 = 0.5;

/// One line of the model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Line {
    pub(crate) item: String,
    /// Units per million events (requests, capacity units, GB-seconds).
    pub(crate) units: f64,
    pub(crate) usd: f64,
}

/// The model for a million events written once and read once, and for a live reader's hour.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Model {
    pub(crate) prices: String,
    pub(crate) per_million_events: Vec<Line>,
    pub(crate) per_live_reader_hour: Vec<Line>,
    /// The naive designs' million events, measured with the same events
    /// ([`crate::naive`]): by design, its lines.
    #[serde(default)]
    pub(crate) designs: Vec<(String, Vec<Line>)>,
    /// A turn of the fixed shape, in USD per million turns: Spool's, then each naive design's
    /// (written, one live reader while it runs, one later catch-up).
    #[serde(default)]
    pub(crate) per_million_turns: Vec<(String, f64)>,
    /// The floor per million events: a write unit each and their share of a full page (DynamoDB
    /// and S3), and with the turns' Lambda time at the chosen memory size.
    #[serde(default)]
    pub(crate) floor: Floor,
    /// The worker's memory sizes: MB, a turn's modeled duration in seconds, USD per million
    /// turns; and the size chosen.
    #[serde(default)]
    pub(crate) worker_memory: Vec<(u32, f64, f64)>,
    #[serde(default)]
    pub(crate) worker_memory_chosen: u32,
    /// Chat events per turn, and the turn's worker CPU seconds the memory model starts from.
    #[serde(default)]
    pub(crate) events_per_turn: f64,
    #[serde(default)]
    pub(crate) cpu_seconds_per_turn: f64,
    /// An idle reader-hour of one chat read by this many readers through CloudFront with read
    /// grants (long-polls collapsed), and how many times cheaper than an SSE reader-hour.
    #[serde(default)]
    pub(crate) collapsed_reader_hours: Vec<(u64, f64, f64)>,
    /// Origin long-polls per collapsed key the simulation measured, used above: for a chat
    /// with a few readers, and for the chat with thousands.
    #[serde(default)]
    pub(crate) origin_polls_per_key: (f64, f64),
    /// S3 PUTs per million events if every page were full (the page-size minimum).
    #[serde(default)]
    pub(crate) page_minimum_puts_per_million: f64,
}

/// The physical floor of a million chat events.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Floor {
    /// One write unit per event and its share of a full page's PUT.
    pub(crate) storage_usd: f64,
    /// The same with each turn's Lambda time (its model stream) at the chosen memory size.
    pub(crate) total_usd: f64,
}

/// Memory sizes a worker is priced at, in MB.
const WORKER_MEMORY_MB: [u32; 4] = [128, 256, 512, 1024];
/// A Lambda function gets one full vCPU at this many MB, and a share in proportion below.
const FULL_VCPU_MB: f64 = 1769.0;
/// How much longer than at a full vCPU a turn may take at the chosen size.
const MAX_STRETCH: f64 = 1.10;
/// The smallest size chosen: the worker's largest append (8 MiB) held a few times over, its
/// model stream and its runtime, with room.
const MIN_WORKER_MB: u32 = 256;

/// A turn's duration at `mb`: its wait on the model as measured, and its CPU time slowed by
/// the share of a vCPU Lambda gives that size.
fn turn_seconds_at(mb: u32, turn_seconds: f64, cpu_seconds: f64) -> f64 {
    let wait = (turn_seconds - cpu_seconds).max(0.0);
    cpu_seconds.mul_add((FULL_VCPU_MB / f64::from(mb)).max(1.0), wait)
}

fn line(item: &str, units: f64, price: f64) -> Line {
    Line {
        item: item.to_owned(),
        units,
        usd: units * price,
    }
}

/// The AWS request lines of `usage` (already scaled to the unit the model is for).
fn requests(usage: &Usage, what: &str) -> Vec<Line> {
    // DELETE requests are free.
    let s3_put = usage.requests("S3", |op| {
        op.starts_with("Put") || op.starts_with("List") || op.starts_with("Copy")
    });
    vec![
        line(
            &format!("DynamoDB write units, {what}"),
            usage.write_units,
            DYNAMODB_WRITE_UNIT,
        ),
        line(
            &format!("DynamoDB read units, {what}"),
            usage.read_units,
            DYNAMODB_READ_UNIT,
        ),
        line(&format!("S3 PUT/LIST, {what}"), s3_put, S3_PUT),
        line(
            &format!("S3 GET, {what}"),
            usage.requests("S3", |op| op == "GetObject" || op == "HeadObject"),
            S3_GET,
        ),
        line(
            &format!("SQS requests, {what}"),
            usage.requests("SQS", |_| true),
            SQS_REQUEST,
        ),
    ]
}

/// Prices what `chat` measured (and, with `collapse`, live readers through CloudFront).
pub(crate) fn model(chat: &AwsChat, collapse: Option<&Collapse>) -> Model {
    // Per 1,000 events → per million.
    let k = 1000.0;
    let mut per_million: Vec<Line> = requests(&chat.write, "writing and sealing")
        .into_iter()
        .chain(requests(&chat.catch_up, "one reader catching up"))
        .map(|mut l| {
            l.units *= k;
            l.usd *= k;
            l
        })
        .filter(|l| l.units > 0.0)
        .collect();
    let invocations = (chat.api_invocations + chat.worker_invocations + chat.catch_up_requests) * k;
    per_million.push(line("Lambda invocations", invocations, LAMBDA_REQUEST));
    per_million.push(line(
        "API Gateway HTTP API requests",
        chat.api_invocations * k,
        HTTP_API_REQUEST,
    ));
    // At the median durations (the means of older reports), so that a stall of the emulator
    // (which AWS would not have) is not priced as if every request had it.
    let or_mean = |median: f64, mean: f64| if median > 0.0 { median } else { mean };
    let gb_seconds: f64 = [
        (
            chat.api_invocations,
            or_mean(chat.api_request_p50_ms, chat.api_request_ms) / 1000.0,
            API_GB,
        ),
        (
            chat.worker_invocations,
            or_mean(chat.turn_p50_seconds, chat.turn_seconds),
            TURNS_GB,
        ),
        (chat.catch_up_requests, chat.catch_up_request_ms / 1000.0, STREAM_GB),
    ]
    .iter()
    .map(|(invocations, seconds, gb)| invocations * k * seconds * gb)
    .sum();
    per_million.push(line(
        "Lambda GB-seconds (arm64), at the median durations measured here",
        gb_seconds,
        LAMBDA_GB_SECOND,
    ));

    // A live reader holds the stream function for as long as it listens.
    let hour = 60.0;
    let mut per_hour: Vec<Line> = requests(&chat.idle_reader_minute, "polling the head")
        .into_iter()
        .map(|mut l| {
            l.units *= hour;
            l.usd *= hour;
            l
        })
        .filter(|l| l.units > 0.0)
        .collect();
    per_hour.push(line(
        "Lambda GB-seconds (arm64), the stream function held open",
        3600.0 * STREAM_GB,
        LAMBDA_GB_SECOND,
    ));
    let sse_hour: f64 = per_hour.iter().map(|l| l.usd).sum();

    // Collapsed: per chat, one origin long-poll per key (times what the simulation measured)
    // every LONG_POLL_SECONDS, shared by its readers; per reader, CloudFront's requests.
    let k = collapse.map_or((1.0, 1.0), |c| {
        (c.other_origin_per_event.max(1.0), c.hot_origin_per_event.max(1.0))
    });
    let polls = 3600.0 / LONG_POLL_SECONDS;
    let probe_units = chat.idle_reader_minute.read_units * LONG_POLL_SECONDS / 60.0;
    let held = LONG_POLL_SECONDS * STREAM_GB * LAMBDA_GB_SECOND;
    let origin_poll = probe_units.mul_add(DYNAMODB_READ_UNIT, LAMBDA_REQUEST + held);
    let collapsed_reader_hours = [1u64, 100, 10_000]
        .iter()
        .map(|&n| {
            let per_key = if n < 10 { k.0 } else { k.1 };
            let chat_hour = polls * per_key * origin_poll;
            let usd = chat_hour / n as f64 + polls * CLOUDFRONT_REQUEST;
            (n, usd, sse_hour / usd)
        })
        .collect();

    // The worker's memory: the turn's measured wait, and its CPU time slowed at small sizes.
    let turn_s = or_mean(chat.turn_p50_seconds, chat.turn_seconds);
    let per_turn_calls = 1e6 / (chat.events as f64 / chat.turns.max(1) as f64);
    let worker_memory: Vec<(u32, f64, f64)> = WORKER_MEMORY_MB
        .iter()
        .map(|&mb| {
            let seconds = turn_seconds_at(mb, turn_s, chat.cpu_seconds_per_turn);
            (mb, seconds, 1e6 * seconds * f64::from(mb) / 1024.0 * LAMBDA_GB_SECOND)
        })
        .collect();
    let fastest = turn_seconds_at(1024, turn_s, chat.cpu_seconds_per_turn);
    let worker_memory_chosen = worker_memory
        .iter()
        .filter(|(mb, seconds, _)| *mb >= MIN_WORKER_MB && *seconds <= fastest * MAX_STRETCH)
        .min_by(|a, b| a.2.total_cmp(&b.2))
        .map_or(1024, |m| m.0);
    let events_per_turn = chat.events as f64 / chat.turns.max(1) as f64;

    // What every design pays alike: the turn's job on the turns queue (send, receive, delete),
    // the API's invocations and the Lambda time; the naive designs' live readers' own
    // invocations are left out (which favours them).
    let shared: Vec<Line> = per_million
        .iter()
        .filter(|l| l.item.starts_with("Lambda") || l.item.starts_with("API Gateway"))
        .cloned()
        .chain([line(
            "SQS requests, the turn's job (send, receive, delete)",
            3.0 * per_turn_calls,
            SQS_REQUEST,
        )])
        .collect();
    let designs: Vec<(String, Vec<Line>)> = chat
        .naive
        .iter()
        .map(|naive| {
            let mut lines = Vec::new();
            for (usage, what) in [
                (&naive.write, "writing"),
                (&naive.live, "one live reader polling every 500 ms"),
                (&naive.catch_up, "one reader catching up"),
            ] {
                lines.extend(
                    requests(usage, what)
                        .into_iter()
                        .map(|mut l| {
                            l.units *= 1000.0;
                            l.usd *= 1000.0;
                            l
                        })
                        .filter(|l| l.units > 0.0),
                );
            }
            lines.extend(shared.iter().cloned());
            (naive.design.clone(), lines)
        })
        .collect();

    // A turn of the fixed shape. Spool's live reader costs what an SSE reader-minute does for
    // the turn's time, and reads the turn's events once (as the catch-up reader does).
    let usd = |lines: &[Line]| lines.iter().map(|l| l.usd).sum::<f64>();
    let catch_up_per_event: f64 = per_million
        .iter()
        .filter(|l| l.item.ends_with("one reader catching up"))
        .map(|l| l.usd)
        .sum::<f64>()
        / 1e6;
    let per_event = usd(&per_million) / 1e6 + catch_up_per_event;
    let spool_turn = (sse_hour / 3600.0).mul_add(turn_s, per_event * events_per_turn);
    let mut per_million_turns = vec![("Spool".to_owned(), spool_turn * 1e6)];
    per_million_turns.extend(
        designs
            .iter()
            .map(|(name, lines)| (name.clone(), usd(lines) / 1e6 * events_per_turn * 1e6)),
    );

    // The floor: a write unit per (small) event, its share of a full page; and the turn's Lambda
    // time at the chosen size.
    let page_share = chat.mean_event_bytes / spool_log::limits::LogLimits::DEFAULT_PAGE_BYTES as f64 * S3_PUT;
    let storage_usd = 1e6 * (DYNAMODB_WRITE_UNIT + page_share);
    let chosen_s = turn_seconds_at(worker_memory_chosen, turn_s, chat.cpu_seconds_per_turn);
    let lambda_usd = per_turn_calls * chosen_s * f64::from(worker_memory_chosen) / 1024.0 * LAMBDA_GB_SECOND;
    let floor = Floor {
        storage_usd,
        total_usd: storage_usd + lambda_usd,
    };
    let page_minimum_puts_per_million =
        1e6 * chat.mean_event_bytes / spool_log::limits::LogLimits::DEFAULT_PAGE_BYTES as f64;
    Model {
        prices: PRICES.to_owned(),
        per_million_events: per_million,
        per_live_reader_hour: per_hour,
        designs,
        per_million_turns,
        floor,
        worker_memory,
        worker_memory_chosen,
        events_per_turn,
        cpu_seconds_per_turn: chat.cpu_seconds_per_turn,
        collapsed_reader_hours,
        origin_polls_per_key: k,
        page_minimum_puts_per_million,
    }
}

/// The model as markdown tables.
pub(crate) fn table(model: &Model) -> String {
    let mut out = String::new();
    for (title, lines) in [
        (
            "per million chat events (written, sealed, read once)",
            &model.per_million_events,
        ),
        ("per live reader-hour (SSE, nothing new)", &model.per_live_reader_hour),
    ] {
        out.push_str(&format!("| cost {title} | units | USD |\n| --- | ---: | ---: |\n"));
        for l in lines.iter() {
            out.push_str(&format!("| {} | {:.0} | {:.4} |\n", l.item, l.units, l.usd));
        }
        let total: f64 = lines.iter().map(|l| l.usd).sum();
        out.push_str(&format!("| **total** | | **{total:.4}** |\n\n"));
    }
    for (design, lines) in &model.designs {
        out.push_str(&format!(
            "| a naive design, per million chat events: {design} (measured on the emulator with the same events) | units | USD |\n| --- | ---: | ---: |\n"
        ));
        for l in lines {
            out.push_str(&format!("| {} | {:.0} | {:.4} |\n", l.item, l.units, l.usd));
        }
        let total: f64 = lines.iter().map(|l| l.usd).sum();
        out.push_str(&format!("| **total** | | **{total:.4}** |\n\n"));
    }
    if !model.per_million_turns.is_empty() {
        out.push_str(&format!(
            "| per million turns of the fixed shape ({:.0} events each: a message, a tool call, a 300-word answer at 50 words a second; one live reader, one later catch-up) | USD | against Spool |\n| --- | ---: | ---: |\n",
            model.events_per_turn
        ));
        let spool = model.per_million_turns[0].1;
        for (design, usd) in &model.per_million_turns {
            out.push_str(&format!("| {design} | {usd:.2} | {:.2}× |\n", usd / spool.max(1e-12)));
        }
        out.push('\n');
    }
    if model.floor.total_usd > 0.0 {
        let storage: f64 = model
            .per_million_events
            .iter()
            .filter(|l| l.item.contains("writing and sealing") || l.item.contains("catching up"))
            .map(|l| l.usd)
            .sum();
        out.push_str(&format!(
            "The floor of a million chat events: ${:.4} of storage (a write unit each and its share of a full page; Spool's DynamoDB, S3 and SQS cost ${storage:.4}, {:.2}× the floor), ${:.4} with the turns' Lambda time at {} MB.\n\n",
            model.floor.storage_usd,
            storage / model.floor.storage_usd.max(1e-12),
            model.floor.total_usd,
            model.worker_memory_chosen
        ));
    }
    if !model.worker_memory.is_empty() {
        out.push_str(&format!(
            "| the worker's memory (arm64; a turn's wait on its model as measured, its {:.3} CPU seconds slowed by the vCPU share of the size: modeled, Lambda does not run here) | turn seconds | USD per million turns |\n| --- | ---: | ---: |\n",
            model.cpu_seconds_per_turn
        ));
        for (mb, seconds, usd) in &model.worker_memory {
            let chosen = if *mb == model.worker_memory_chosen {
                " (chosen)"
            } else {
                ""
            };
            out.push_str(&format!("| {mb} MB{chosen} | {seconds:.2} | {usd:.2} |\n"));
        }
        out.push('\n');
    }
    if !model.collapsed_reader_hours.is_empty() {
        out.push_str(&format!(
            "| an idle reader-hour of one chat through CloudFront, read grants, {LONG_POLL_SECONDS:.0} s long-polls (origin long-polls per key as simulated: {:.2} with a few readers, {:.2} with thousands) | USD per reader-hour | SSE reader-hour / this |\n| --- | ---: | ---: |\n",
            model.origin_polls_per_key.0, model.origin_polls_per_key.1
        ));
        for (n, usd, ratio) in &model.collapsed_reader_hours {
            out.push_str(&format!(
                "| {n} reader{} | {usd:.6} | {ratio:.2} |\n",
                if *n == 1 { "" } else { "s" }
            ));
        }
        out.push('\n');
    }
    if model.page_minimum_puts_per_million > 0.0 {
        let puts = model
            .per_million_events
            .iter()
            .find(|l| l.item == "S3 PUT/LIST, writing and sealing")
            .map_or(0.0, |l| l.units);
        out.push_str(&format!(
            "S3 PUT/LIST per million events written and sealed: {puts:.0}, against {:.0} if every page were a full 1 MiB ({:.1}×).\n\n",
            model.page_minimum_puts_per_million,
            puts / model.page_minimum_puts_per_million.max(1e-9)
        ));
    }
    out.push_str(&format!("Prices: {}.\n", model.prices));
    out
}
