//! # Maintenance jobs
//!
//! The maintenance queue's jobs: sealing streams' pages (full ones as they fill, the short
//! last one once a chat is idle), subscriptions' wakes, chat webhooks' deliveries and the
//! checks of turns that wait for a runner; and the
//! daily sweep of chats' folders on the worker's disk.

use std::sync::Arc;

use spool_log::{
    jobs::MaintenanceJob,
    stream::{Offset, SealMode},
};

use crate::{Error, Worker};

/// The daily sweep of the chats' folders under the CLI work directory.
pub fn folder_sweep(
    config: &spool_platform::Config,
    metadata: Arc<dyn spool_chat::metadata::Metadata>,
) -> spool_agents::sweep::FolderSweep {
    spool_agents::sweep::FolderSweep::new(config.cli_work_dir(), metadata)
}

impl Worker {
    /// Runs one maintenance job. Sealing a stream that no longer exists is done already.
    pub async fn run(&self, job: MaintenanceJob) -> Result<(), Error> {
        match job {
            MaintenanceJob::Webhook {
                org,
                hook_id,
                delivery_id,
                attempt,
            } => {
                let hooks = self.hooks.as_ref().ok_or(Error::NoSubscriptions)?;
                Ok(hooks.deliver(&org, &hook_id, &delivery_id, attempt).await?)
            }
            MaintenanceJob::RunnerCheck {
                org,
                session_id,
                turn_id,
            } => {
                let checks = self.runner_checks.as_ref().ok_or(Error::NoTurns)?;
                let job = spool_agents::runner_check(
                    checks.metadata.as_ref(),
                    checks.log.as_ref(),
                    spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock),
                    &org,
                    &session_id,
                    &turn_id,
                )
                .await?;
                if let Some(job) = job {
                    tracing::info!(%org, session = %session_id, turn = %turn_id, "a turn waits for a runner: queued again for the engine to look at");
                    checks.turns.enqueue(&job).await?;
                }
                Ok(())
            }
            MaintenanceJob::Subscription(job) => {
                let subscriptions = self.subscriptions.as_ref().ok_or(Error::NoSubscriptions)?;
                Ok(subscriptions.run(&job).await?)
            }
            MaintenanceJob::Aggregate {
                path,
                event,
                if_missing,
            } => self.append_aggregate(&path, &[event], if_missing).await,
            MaintenanceJob::Seal {
                path,
                final_seal,
                if_tail,
                chain,
            } => {
                let sealed = match (final_seal, if_tail) {
                    // An idle seal: the short last page only if nothing came since it was sent.
                    (true, Some(tail)) => {
                        let tail = Offset::after(tail);
                        self.sealer.seal(&path, SealMode::Idle { tail, chain }).await
                    }
                    (true, None) => self.sealer.seal(&path, SealMode::Final).await,
                    (false, _) => self.sealer.seal(&path, SealMode::Full).await,
                };
                match sealed {
                    Ok(report) => {
                        tracing::info!(
                            %path,
                            written = report.written.len(),
                            adopted = report.adopted.len(),
                            sealed_through = %report.sealed_through,
                            "sealed"
                        );
                        Ok(())
                    }
                    // Deleted (while forks of it live, too): there is nothing left to seal.
                    Err(spool_log::error::Error::NotFound { .. } | spool_log::error::Error::Gone { .. }) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Sweeps chats' folders if the daily sweep is due, beside whatever the worker runs.
    pub(crate) fn sweep_if_due(&self) {
        if let Some(sweep) = &self.sweep {
            let sweep = sweep.clone();
            tokio::spawn(async move {
                sweep
                    .run_if_due(spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock))
                    .await;
            });
        }
    }
}
