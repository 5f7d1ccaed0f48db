//! # A transition's outcome

use std::time::Duration;

use super::JobKind;

/// What a transition did: its answer, whether the record changed, and the jobs to schedule for
/// the record's generation once it is saved.
pub(super) struct Step<T> {
    pub(super) value: T,
    pub(super) changed: bool,
    pub(super) jobs: Vec<(JobKind, Duration)>,
}

impl<T> Step<T> {
    pub(super) fn same(value: T) -> Self {
        Self {
            value,
            changed: false,
            jobs: Vec::new(),
        }
    }

    pub(super) fn changed(value: T) -> Self {
        Self {
            value,
            changed: true,
            jobs: Vec::new(),
        }
    }

    pub(super) fn then(mut self, kind: JobKind, delay: Duration) -> Self {
        self.jobs.push((kind, delay));
        self
    }

    /// With a delivery job if `reopened`.
    pub(super) fn deliver_if(self, reopened: bool) -> Self {
        if reopened {
            self.then(JobKind::Deliver, Duration::ZERO)
        } else {
            self
        }
    }
}
