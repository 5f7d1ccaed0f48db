//! # Metrics in CloudWatch's Embedded Metric Format
//!
//! [`EmfMetrics`] writes each measurement as one JSON line on stdout with an `_aws` block
//! (namespace `Spool`, dimension `Function`, plus the metric's own), which CloudWatch Logs turns
//! into metrics with no API call and no extra latency. The template's dashboard and alarms
//! (seal lag, turn steps) read them.

use std::io::Write;

use serde_json::{Map, Value, json};
use spool_log::metrics::{Metric, Metrics};

/// The CloudWatch namespace of Spool's own metrics.
pub const NAMESPACE: &str = "Spool";

/// Writes metrics as EMF lines.
#[derive(Debug, Clone)]
pub struct EmfMetrics {
    function: String,
}

impl EmfMetrics {
    /// Metrics of `function` (on Lambda, `AWS_LAMBDA_FUNCTION_NAME`).
    pub fn new(function: impl Into<String>) -> Self {
        Self {
            function: function.into(),
        }
    }

    /// Metrics of the Lambda function this process is.
    pub fn for_this_function() -> Self {
        Self::new(std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "spool".to_owned()))
    }

    /// The EMF document for `metric` at `timestamp_ms`.
    pub fn document(&self, metric: &Metric, timestamp_ms: i64) -> Value {
        let values = metric.values();
        let mut dimensions = vec!["Function"];
        let mut doc = Map::new();
        doc.insert("Function".to_owned(), json!(self.function));
        if let Some((name, value)) = metric.dimension() {
            dimensions.push(name);
            doc.insert(name.to_owned(), json!(value));
        }
        let definitions: Vec<Value> = values
            .iter()
            .map(|(name, _, unit)| json!({ "Name": name, "Unit": unit }))
            .collect();
        for (name, value, _) in &values {
            doc.insert((*name).to_owned(), json!(value));
        }
        doc.insert(
            "_aws".to_owned(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{ "Namespace": NAMESPACE, "Dimensions": [dimensions], "Metrics": definitions }],
            }),
        );
        Value::Object(doc)
    }
}

impl Metrics for EmfMetrics {
    fn record(&self, metric: Metric) {
        let now = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock);
        let line = self.document(&metric, now).to_string();
        // One write per line, so lines from concurrent tasks never interleave.
        let _ = std::io::stdout().lock().write_all(format!("{line}\n").as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_measurement_is_an_emf_document_cloudwatch_can_read() {
        let emf = EmfMetrics::new("spool-prod-turns");
        let doc = emf.document(
            &Metric::TurnStep {
                took: Duration::from_millis(1500),
                outcome: "ended",
            },
            1_700_000_000_000,
        );
        let aws = &doc["_aws"];
        assert_eq!(aws["Timestamp"], 1_700_000_000_000_i64);
        let directive = &aws["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Spool");
        assert_eq!(directive["Dimensions"], json!([["Function", "Outcome"]]));
        assert_eq!(
            directive["Metrics"],
            json!([{ "Name": "TurnStepMs", "Unit": "Milliseconds" }])
        );
        // Every dimension and metric the directive names is a member of the document.
        assert_eq!(doc["Function"], "spool-prod-turns");
        assert_eq!(doc["Outcome"], "ended");
        assert_eq!(doc["TurnStepMs"], 1500.0);
        let tokens = emf.document(&Metric::ModelTokens { input: 10, output: 20 }, 0);
        assert_eq!(tokens["InputTokens"], 10.0);
        assert_eq!(tokens["OutputTokens"], 20.0);
        assert_eq!(
            tokens["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"]])
        );
    }
}
