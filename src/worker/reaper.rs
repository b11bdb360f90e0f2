//! The reaper (which also samples the metrics gauges): a running attempt whose lease expired (its worker died or
//! stalled past its deadline) becomes `unknown` — never `pending` (it may
//! have been sent) and never `failed` (it may have succeeded) (I4, I8).
//!
//! Each tick it also sweeps for jobs that finished through another process
//! (a win recorded there, a cancel through another API server) while this
//! worker has calls of theirs in flight, and aborts those calls as a
//! finish in this process would at once.

use std::sync::Arc;

use tokio::sync::watch;

use super::Worker;

pub(super) async fn run(worker: Arc<Worker>, mut shutdown: watch::Receiver<bool>) {
    let interval = worker.settings.reaper_interval;
    while !*shutdown.borrow() {
        match worker.store.expire_leases(100).await {
            Ok(expired) => {
                for attempt in expired {
                    tracing::warn!(
                        owner = %attempt.owner, job.id = %attempt.job_id, attempt.number = attempt.number,
                        "lease expired: attempt outcome unknown"
                    );
                    worker.signals.job_changed(attempt.job_id);
                    crate::process::metrics::lease_expired();
                }
            }
            Err(error) => tracing::warn!(%error, "reaping expired leases failed"),
        }
        sweep_finished_jobs(&worker).await;
        // The gauges are sampled here too: one look a tick, for every process.
        match worker.store.sample_gauges().await {
            Ok(g) => {
                crate::process::metrics::sampled(g.pending_due, g.unknown_open, g.oldest_unknown);
                crate::process::metrics::pending(&g.pending_by_owner, &g.pending_by_provider);
            }
            Err(error) => tracing::warn!(%error, "sampling the gauges failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Aborts this worker's calls in flight whose jobs finished elsewhere.
async fn sweep_finished_jobs(worker: &Worker) {
    if worker.signals.jobs_with_calls() == 0 {
        return;
    }
    match worker.store.finished_jobs_running_on(&worker.id).await {
        Ok(finished) => {
            for job in finished {
                worker.signals.job_finished(job);
            }
        }
        Err(error) => tracing::warn!(%error, "looking for finished jobs with calls in flight failed"),
    }
}
