//! # Injected faults
//!
//! An SDK interceptor that makes requests fail the two ways AWS requests fail, so the chaos
//! tests (and `make soak`) can hold Spool to its promises under them:
//!
//! - **refused**: the request is never sent and the call fails, as a throttled request does
//!   once the SDK's retries are spent. Nothing was applied.
//! - **answer lost**: the request is sent and applied, and its answer is replaced by a `500`,
//!   as when a response is lost on the way back (a timeout after a commit). The SDK retries it
//!   (a new attempt, with its own dice), so each write must be safe to repeat: transactions
//!   carry an idempotency token, conditional writes recognise their own effect, appends carry
//!   producer claims.
//!
//! Decisions come from a seeded generator, and every fault is counted, so a run can be
//! described and replayed.

use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::{
    box_error::BoxError,
    client::{
        interceptors::{
            Intercept,
            context::{BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef},
        },
        orchestrator::Metadata,
        runtime_components::RuntimeComponents,
    },
    http::StatusCode,
};
use aws_smithy_types::{body::SdkBody, config_bag::ConfigBag};

/// How often each fault happens, per attempt (0 to 1).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FaultPlan {
    /// Requests refused before they are sent.
    pub refuse: f64,
    /// Requests applied whose answer is replaced by a `500`.
    pub lose_answer: f64,
}

impl FaultPlan {
    /// No faults.
    pub const NONE: Self = Self {
        refuse: 0.0,
        lose_answer: 0.0,
    };
}

/// What was injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Attempts seen.
    pub attempts: u64,
    /// Attempts refused before they were sent.
    pub refused: u64,
    /// Attempts applied whose answer was lost.
    pub answers_lost: u64,
}

#[derive(Debug)]
struct State {
    rng: fastrand::Rng,
    plan: FaultPlan,
    counts: FaultCounts,
}

/// The interceptor; cheap to clone, clones share their plan and counts.
#[derive(Debug, Clone)]
pub struct FaultInjector {
    state: Arc<Mutex<State>>,
}

impl FaultInjector {
    /// Injects `plan`'s faults, decided by a generator seeded with `seed`.
    pub fn new(seed: u64, plan: FaultPlan) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                rng: fastrand::Rng::with_seed(seed),
                plan,
                counts: FaultCounts::default(),
            })),
        }
    }

    /// Changes the plan (e.g. [`FaultPlan::NONE`] to let a run settle).
    pub fn set_plan(&self, plan: FaultPlan) {
        self.state().plan = plan;
    }

    /// What was injected so far.
    pub fn counts(&self) -> FaultCounts {
        self.state().counts
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A `500` body each service's deserializer reads as a retryable server error.
fn server_error(service: &str) -> (&'static str, &'static str) {
    match service {
        "S3" => (
            "application/xml",
            "<Error><Code>InternalError</Code><Message>injected: the answer was lost</Message></Error>",
        ),
        _ => (
            "application/x-amz-json-1.0",
            r#"{"__type":"com.amazonaws#InternalFailure","message":"injected: the answer was lost"}"#,
        ),
    }
}

impl Intercept for FaultInjector {
    fn name(&self) -> &'static str {
        "FaultInjector"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let mut state = self.state();
        state.counts.attempts += 1;
        if state.rng.f64() < state.plan.refuse {
            state.counts.refused += 1;
            return Err("injected: the request was refused before it was sent (throttled)".into());
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        {
            let mut state = self.state();
            if state.rng.f64() >= state.plan.lose_answer {
                return Ok(());
            }
            state.counts.answers_lost += 1;
        }
        let service = cfg.load::<Metadata>().map_or("", |m| m.service()).to_owned();
        let (content_type, body) = server_error(&service);
        let response = context.response_mut();
        *response.status_mut() = StatusCode::try_from(500u16).map_err(|e| format!("{e:?}"))?;
        response.headers_mut().insert("content-type", content_type);
        response.headers_mut().remove("content-length");
        response.headers_mut().remove("x-amz-crc32");
        *response.body_mut() = SdkBody::from(body);
        Ok(())
    }
}
