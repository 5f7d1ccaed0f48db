//! # A subscription's refusals
//!
//! What the protocol's subscription routes refuse, each with its own status and code
//! (`FENCED`, `ALREADY_CLAIMED`, …); carried in the one error type as
//! [`Error::Refused`](crate::error::Error::Refused).

/// A request the protocol refuses, with its own code (`FENCED`, `ALREADY_CLAIMED`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The protocol's error code.
    pub code: &'static str,
    /// For people.
    pub message: String,
    /// With `ALREADY_CLAIMED`: who holds the wake.
    pub current_holder: Option<String>,
    /// With `ALREADY_CLAIMED`: the wake's generation.
    pub generation: Option<u64>,
}

impl Refusal {
    /// A refusal with no details.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            current_holder: None,
            generation: None,
        }
    }

    /// `400 INVALID_REQUEST`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, "INVALID_REQUEST", message)
    }

    /// `404 SUBSCRIPTION_NOT_FOUND`.
    pub fn not_found(id: &str) -> Self {
        Self::new(
            404,
            "SUBSCRIPTION_NOT_FOUND",
            format!("no subscription `{id}`; create it with PUT"),
        )
    }

    /// `409 FENCED`.
    pub fn fenced() -> Self {
        Self::new(
            409,
            "FENCED",
            "this wake is over (a newer generation or wake replaced it); wait for the next wake",
        )
    }
}
