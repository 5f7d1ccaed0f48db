//! # Turn jobs
//!
//! A turn job runs one step of a turn through the [`Engine`]. A step that fails is retried by
//! the queue (a new delivery, which finds in the chat's stream what the failed one wrote); the
//! last attempt that fails ends the turn with a `system` event and `agent_end{reason: error}`
//! before the message goes to the dead-letter queue. A step still running at its host's
//! deadline stops cleanly and a new job carries it on.

use spool_agents::{Engine, Outcome};
use spool_chat::turns::TurnJob;
use tracing::Instrument;

use crate::{Error, Worker};

impl Worker {
    /// Runs one step of a turn, delivered for the `delivery`-th time. Attempts are runs, counted
    /// in the store as they start ([`Engine::count_run`]): a delivery that never reached a
    /// worker (a throttled invocation) uses none. On the last attempt, or the last delivery
    /// before the dead-letter queue, a failure ends the turn (a `system` event,
    /// `agent_end{reason: error}`) and is returned as [`Error::GaveUp`]. If even that fails,
    /// the plain error comes back, the job is delivered again, and a run past the last attempt
    /// only tries to end the turn: no chat is left waiting on a turn nobody runs.
    pub async fn run_turn(&self, job: &TurnJob, delivery: u32) -> Result<Outcome, Error> {
        self.run_turn_until(job, delivery, None).await
    }

    /// [`Self::run_turn`] on a host that stops at `host_deadline` (a Lambda invocation's, less
    /// a margin): a step still running then ends cleanly and a new job carries it
    /// on, put on the turns queue before this one is acknowledged (so a crash between the two
    /// only runs the step again).
    pub async fn run_turn_until(
        &self,
        job: &TurnJob,
        delivery: u32,
        host_deadline: Option<tokio::time::Instant>,
    ) -> Result<Outcome, Error> {
        let engine = self.engine.as_ref().ok_or(Error::NoTurns)?;
        let started = std::time::Instant::now();
        let result = self.step(engine, job, delivery, host_deadline).await;
        let outcome = match &result {
            Ok(Outcome::Ended(_)) => "ended",
            Ok(Outcome::Waiting) => "waiting",
            Ok(Outcome::Continued) => "continued",
            Ok(Outcome::Nothing) => "nothing",
            Err(_) => "failed",
        };
        self.metrics.record(spool_log::metrics::Metric::TurnStep {
            took: started.elapsed(),
            outcome,
        });
        result
    }

    async fn step(
        &self,
        engine: &Engine,
        job: &TurnJob,
        delivery: u32,
        host_deadline: Option<tokio::time::Instant>,
    ) -> Result<Outcome, Error> {
        let span = tracing::info_span!("turn", org = %job.org, session = %job.session_id, turn = %job.turn_id, trigger = job.trigger_seq, delivery, attempt = tracing::field::Empty);
        async {
            let started_ms = spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock);
            // The store keeps the count; if it cannot, the delivery's count stands in (it only
            // over-counts, by throttled deliveries).
            let attempt = match engine.count_run(job).await {
                Ok(attempt) => attempt,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot count this run; counting deliveries instead");
                    delivery
                }
            };
            tracing::Span::current().record("attempt", attempt);
            let last = attempt >= self.max_attempts || delivery >= self.max_deliveries;
            if attempt > self.max_attempts {
                let reason = "its last attempt failed";
                engine.give_up(job, attempt, reason).await?;
                return Err(Error::GaveUp(Box::new(Error::Log(
                    spool_log::error::Error::unavailable("run a turn step", reason),
                ))));
            }
            // Fencing needs a number that grows with every delivery and that no two runs share:
            // the queue's delivery count (the run count is for attempts only: a retried count whose
            // answer was lost, or one that fell back to the delivery, could repeat a number).
            match engine.run_until(job, delivery, host_deadline).await {
                Ok(Outcome::Continued) => {
                    let queue = self.heartbeats.as_ref().map(|(queue, _)| queue).ok_or(Error::NoTurns)?;
                    match queue.enqueue(&job.continued(started_ms)).await {
                        Ok(()) => {
                            tracing::info!(
                                continuation = job.continuation + 1,
                                "the step stopped before the host's deadline; a new job carries it on"
                            );
                            Ok(Outcome::Continued)
                        }
                        // The last delivery cannot hand over: the turn ends rather than wait.
                        Err(e) if last => {
                            let reason = format!("it could not be carried over: {e}");
                            engine.give_up(job, attempt, &reason).await?;
                            Err(Error::GaveUp(Box::new(e.into())))
                        }
                        Err(e) => Err(e.into()),
                    }
                }
                Ok(outcome) => {
                    tracing::info!(?outcome, "turn step done");
                    Ok(outcome)
                }
                Err(e) if last => {
                    tracing::error!(error.message = %e, error.cause_chain = ?e, "turn step failed for the last time");
                    match engine.give_up(job, attempt, &e.to_string()).await {
                        Ok(()) => Err(Error::GaveUp(Box::new(e.into()))),
                        Err(give_up) => {
                            tracing::error!(error = %give_up, "cannot end the failed turn yet; it is delivered again");
                            Err(e.into())
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error.message = %e, error.cause_chain = ?e, "turn step failed; it will be retried");
                    Err(e.into())
                }
            }
        }
        .instrument(span)
        .await
    }
}
