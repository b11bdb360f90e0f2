//! Applying the retry and failover policy after a definitive failure: read
//! the job, let [`RetryPolicy`] decide, and admit the next attempt through
//! the same admission rules as a client's (so never while an attempt is
//! pending or unknown, never past the budget, only to qualified providers).
//! The worker calls it after a failure, the reconciler and an operator's
//! resolve after settling an unknown attempt as failed.

use std::sync::Arc;

use crate::catalog::Catalog;
use crate::domain::policy::{PastAttempt, RetryPolicy};
use crate::domain::{AttemptId, AttemptOrigin, JobState};
use crate::signals::Signals;
use crate::store::{self, Admission, AttemptRef, NewAttempt, Store};

/// Adds the next automatic attempt of a job whose attempt just failed, if
/// the policy has one. Returns the new attempt's number.
pub async fn after_failure(
    store: &dyn Store,
    catalog: &Catalog,
    signals: &Arc<Signals>,
    failed: &AttemptRef,
) -> store::Result<Option<i32>> {
    let Some(job) = store.get_job(&failed.owner, failed.job_id).await? else { return Ok(None) };
    let Some(task) = catalog.task(&job.task) else { return Ok(None) };
    if job.state != JobState::Failed {
        return Ok(None);
    }
    let past: Vec<PastAttempt<'_>> = job
        .attempts
        .iter()
        .map(|a| PastAttempt {
            provider: &a.provider,
            state: a.state,
            retryable: a.error.as_ref().and_then(|e| e.pointer("/detail/retryable")).and_then(|r| r.as_bool()).unwrap_or(false),
        })
        .collect();
    let policy = RetryPolicy {
        primary: &job.provider,
        failover: &task.settings.failover,
        retries_per_provider: task.settings.retries_per_provider,
        max_attempts: task.settings.max_attempts,
        backoff: std::time::Duration::from_millis(task.settings.retry_backoff_ms),
    };
    let Some(next) = policy.next_attempt(&past) else {
        tracing::info!(owner = %failed.owner, job.id = %failed.job_id, "no further automatic attempt: the job stays failed");
        return Ok(None);
    };
    let new = NewAttempt {
        id: AttemptId::new(),
        provider: Some(next.provider.clone()),
        idempotency_key: None,
        origin: AttemptOrigin::Policy,
        delay: next.delay,
    };
    match store.admit_attempt(&failed.owner, failed.job_id, &new, catalog).await? {
        Admission::Admitted(attempt) => {
            tracing::info!(
                owner = %failed.owner, job.id = %failed.job_id, attempt.number = attempt.number,
                provider = %attempt.provider, delay_ms = next.delay.as_millis() as u64,
                "policy added an attempt"
            );
            signals.job_changed(failed.job_id);
            let signals = signals.clone();
            tokio::spawn(async move {
                tokio::time::sleep(next.delay).await;
                signals.work_available();
            });
            Ok(Some(attempt.number))
        }
        other => {
            tracing::info!(owner = %failed.owner, job.id = %failed.job_id, outcome = ?other, "policy attempt not admitted");
            Ok(None)
        }
    }
}
