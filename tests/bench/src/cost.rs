//! The cost model: what a million chat events cost on AWS at on-demand list prices, from the
//! requests [`crate::aws_chat`] counted.
//!
//! The prices are constants with the date they were read, to be updated when AWS changes them.
//! Free tiers, storage, data transfer and CloudFront are left out; so is everything the
//! emulator cannot tell (real request latencies, so Lambda durations are the ones measured
//! here, on loopback to the emulator).

use serde::{Deserialize, Serialize};

use crate::aws_chat::{AwsChat, Usage};

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

/// Prices what `chat` measured.
pub(crate) fn model(chat: &AwsChat) -> Model {
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
    let gb_seconds: f64 = [
        (chat.api_invocations, chat.api_request_ms / 1000.0, API_GB),
        (chat.worker_invocations, chat.turn_seconds, TURNS_GB),
        (chat.catch_up_requests, chat.catch_up_request_ms / 1000.0, STREAM_GB),
    ]
    .iter()
    .map(|(invocations, seconds, gb)| invocations * k * seconds * gb)
    .sum();
    per_million.push(line(
        "Lambda GB-seconds (arm64), at the durations measured here",
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
    Model {
        prices: PRICES.to_owned(),
        per_million_events: per_million,
        per_live_reader_hour: per_hour,
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
    out.push_str(&format!("Prices: {}.\n", model.prices));
    out
}
