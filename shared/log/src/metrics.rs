//! # Operational metrics
//!
//! What Spool measures about itself while it runs, as typed values: how long a turn step took,
//! the model tokens a reply used, how often appends met a concurrent writer, and how long a
//! seal request waited. A [`Metrics`] port records them: on Lambda as CloudWatch Embedded
//! Metric Format lines (`spool_aws::EmfMetrics`, which the template's dashboard and alarms
//! read), elsewhere as log lines ([`LogMetrics`]).

use std::time::Duration;

/// One measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// A turn step ran for `took`, and ended as `outcome` (`ended`, `waiting`, `continued`,
    /// `nothing`, `failed`).
    TurnStep {
        /// How long it ran.
        took: Duration,
        /// How it ended.
        outcome: &'static str,
    },
    /// A model's reply read `input` and wrote `output` tokens.
    ModelTokens {
        /// Tokens read.
        input: u64,
        /// Tokens written.
        output: u64,
    },
    /// An append round lost to a concurrent writer of the same stream and was tried again.
    AppendConflict,
    /// A seal request waited `lag` on the maintenance queue before a worker sealed.
    SealLag {
        /// From its sending to its sealing.
        lag: Duration,
    },
}

impl Metric {
    /// Its CloudWatch metric names, values and units.
    pub fn values(&self) -> Vec<(&'static str, f64, &'static str)> {
        let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
        match self {
            Self::TurnStep { took, .. } => vec![("TurnStepMs", ms(took), "Milliseconds")],
            #[allow(clippy::cast_precision_loss)]
            Self::ModelTokens { input, output } => vec![
                ("InputTokens", *input as f64, "Count"),
                ("OutputTokens", *output as f64, "Count"),
            ],
            Self::AppendConflict => vec![("AppendConflicts", 1.0, "Count")],
            Self::SealLag { lag } => vec![("SealLagMs", ms(lag), "Milliseconds")],
        }
    }

    /// A dimension beyond the function's, if the metric has one.
    pub fn dimension(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::TurnStep { outcome, .. } => Some(("Outcome", outcome)),
            _ => None,
        }
    }
}

/// Where metrics go.
pub trait Metrics: Send + Sync + std::fmt::Debug {
    /// Records one measurement; never fails, never blocks for long.
    fn record(&self, metric: Metric);
}

/// Metrics as debug log lines, where no metrics service listens (`spool serve`, tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogMetrics;

impl Metrics for LogMetrics {
    fn record(&self, metric: Metric) {
        tracing::debug!(?metric, "metric");
    }
}
