//! # Counting AWS requests
//!
//! An SDK interceptor that counts every request sent (retries included), by service and
//! operation. The benchmarks use it to report requests per appended message, which is what
//! DynamoDB, S3 and SQS bill by.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use aws_smithy_runtime_api::{
    box_error::BoxError,
    client::{
        interceptors::{Intercept, context::BeforeTransmitInterceptorContextRef},
        orchestrator::Metadata,
        runtime_components::RuntimeComponents,
    },
};
use aws_smithy_types::config_bag::ConfigBag;

/// Requests sent, by `(service, operation)`; cheap to clone, clones share counts.
#[derive(Debug, Default, Clone)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<(String, String), u64>>>,
}

impl RequestCounter {
    /// A snapshot of the counts.
    pub fn snapshot(&self) -> BTreeMap<(String, String), u64> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Requests sent to `service` (e.g. `DynamoDB`, `S3`, `SQS`) whose operation satisfies
    /// `filter`.
    pub fn total(&self, service: &str, filter: impl Fn(&str) -> bool) -> u64 {
        self.snapshot()
            .iter()
            .filter(|((s, op), _)| s.eq_ignore_ascii_case(service) && filter(op))
            .map(|(_, n)| n)
            .sum()
    }

    /// Forgets every count.
    pub fn reset(&self) {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(meta) = cfg.load::<Metadata>() {
            let key = (meta.service().to_owned(), meta.name().to_owned());
            *self
                .counts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key)
                .or_default() += 1;
        }
        Ok(())
    }
}
