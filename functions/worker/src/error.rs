//! # Why a job failed

/// Why a job failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The message is not a job this worker knows. It is reported as failed, so that after
    /// the queue's retries it lands in the dead-letter queue for an operator to look at.
    #[error("malformed job: {0}")]
    Malformed(#[source] serde_json::Error),
    /// A turn arrived at a worker that runs no turns.
    #[error("this worker runs no agent turns")]
    NoTurns,
    /// An aggregate stream's event arrived at a worker that appends none.
    #[error("this worker appends no aggregate streams' events")]
    NoAggregates,
    /// A subscription or webhook job arrived at a worker that runs none.
    #[error("this worker runs no subscription or webhook jobs (it has no SPOOL_WEBHOOK_SECRET)")]
    NoSubscriptions,
    /// The stores failed.
    #[error(transparent)]
    Log(#[from] spool_log::error::Error),
    /// The step failed for the last time and its turn was ended with an error: the job is done
    /// with (on Lambda it still goes to the dead-letter queue, for an operator to look at).
    #[error("the turn was given up after its last attempt: {0}")]
    GaveUp(#[source] Box<Error>),
}
