//! What admits an attempt besides the state rules of
//! [`crate::domain::check_admission`]: the retry policy's choice of the next
//! attempt after a failure, the qualification gate (I5), the job's budget,
//! and an attempt's number and key. Called inside a transition, with the
//! job locked.

use super::driver::{LockedJob, Tx, update_job_state};
use super::usage::{check_budget, stored_budget};
use super::{Admission, AttemptRef, NewAttempt, Result, Scheduled, TaskRules, corrupt};
use crate::domain::policy::PastAttempt;
use crate::domain::{
    Attempt, AttemptId, AttemptOrigin, AttemptState, EventKind, IdempotencyKey, JobId, JobState, Money, OwnerId,
    check_admission,
};
use serde_json::{Value, json};
use std::time::Duration;

/// Asks the retry policy for the next attempt of a job whose attempt just
/// failed, and admits it under the same rules as a client's: the first
/// candidate that is qualified and fits the budget; skipped ones are
/// recorded. The job is locked by the caller.
pub(super) async fn schedule_next_attempt(
    tx: &mut Tx,
    failed: &AttemptRef,
    job: &LockedJob,
    rules: &dyn TaskRules,
) -> Result<Option<Scheduled>> {
    let (owner, job_id, task) = (&failed.owner, failed.job_id, job.task.as_str());
    let attempts = tx.read_attempts(owner, job_id).await?;
    let past = past_attempts(&attempts);
    let budget = job_budget(tx, owner, job_id, task, rules).await?;
    let mut chosen = None;
    for candidate in rules.retry_candidates(task, &job.provider, &past) {
        let mut verdict = check_qualified(tx, rules, task, &job.provider, &candidate.provider).await?;
        if verdict.is_ok()
            && let Some((budget, input)) = &budget
        {
            verdict = check_budget(rules, task, input, *budget, &attempts, &candidate.provider);
        }
        match verdict {
            Ok(()) => {
                chosen = Some(candidate);
                break;
            }
            Err(reason) => {
                tracing::info!(owner = %owner, job.id = %job_id, provider = %candidate.provider, %reason,
                               "failover skipped a provider that is not qualified or over the budget");
                let detail = json!({ "provider": candidate.provider, "reason": reason, "after": failed.number });
                tx.append_event(owner, job_id, EventKind::FailoverSkipped, None, detail).await?;
            }
        }
    }
    let Some(next) = chosen else { return Ok(None) };
    let states: Vec<AttemptState> = attempts.iter().map(|a| a.state).collect();
    if let Err(refusal) = check_admission(JobState::Failed, &states, rules.limits(task), true) {
        let detail = json!({ "problem": refusal.problem_type(), "provider": next.provider, "origin": AttemptOrigin::Policy.as_str() });
        tx.append_event(owner, job_id, EventKind::AdmissionRefused, None, detail).await?;
        return Ok(None);
    }
    let number = next_number(&attempts)?;
    let new = NewAttempt {
        id: AttemptId::new(),
        provider: Some(next.provider.clone()),
        idempotency_key: None,
        origin: AttemptOrigin::Policy,
        delay: next.delay,
        // A retry is done for the same request: it stays in its trace.
        trace: attempts.iter().find(|a| a.number == failed.number).and_then(|a| a.trace.clone()),
    };
    let key = AttemptRef { owner: owner.clone(), job_id, number };
    tx.insert_attempt(&key, &new, &next.provider).await?;
    let job_state = update_job_state(tx, owner, job_id, JobState::Failed).await?;
    let detail = json!({ "attempt_id": new.id, "provider": next.provider, "origin": AttemptOrigin::Policy.as_str(),
                         "after": failed.number, "delay_ms": next.delay.as_millis() as u64,
                         "job_state": job_state.as_str() });
    tx.append_event(owner, job_id, EventKind::AttemptAdmitted, Some(number), detail).await?;
    Ok(Some(Scheduled { number, provider: next.provider, delay: next.delay }))
}

/// Whether `provider` may serve an attempt of a `task` job whose own
/// provider is `primary`: the job's own provider always may; any other
/// needs a passing qualification of the task's current contract (I5).
/// `Err` says why not.
pub(super) async fn check_qualified(
    tx: &mut Tx,
    rules: &dyn TaskRules,
    task: &str,
    primary: &str,
    provider: &str,
) -> Result<std::result::Result<(), String>> {
    if provider == primary {
        return Ok(Ok(()));
    }
    let Some(hash) = rules.contract_hash(task, provider) else {
        return Ok(Err(format!(
            "provider '{provider}' cannot serve task '{task}' here: one of them is not configured"
        )));
    };
    let state = tx.qualification_state(provider, task, &hash).await?;
    if !state.passed() && rules.being_qualified(task, provider) {
        return Ok(Err(format!(
            "provider '{provider}' is still being qualified for task '{task}'; it can serve attempts once it passes"
        )));
    }
    Ok(state.refusal(provider, task).map_or(Ok(()), Err))
}

/// The budget of a job (its own `max_cost` or its task's, the lower) and
/// its input, to cost attempts with; `None` when it has no budget.
pub(super) async fn job_budget(
    tx: &mut Tx,
    owner: &OwnerId,
    job_id: JobId,
    task: &str,
    rules: &dyn TaskRules,
) -> Result<Option<(Money, Value)>> {
    let (max_cost, input) = tx.job_budget(owner, job_id).await?;
    stored_budget(rules, task, max_cost, || Ok(input))
}

/// The number the next attempt of a job with these attempts takes.
pub(super) fn next_number(attempts: &[Attempt]) -> Result<i32> {
    i32::try_from(attempts.len() + 1).map_err(corrupt)
}

/// What the retry policy needs of a job's attempts.
fn past_attempts(attempts: &[Attempt]) -> Vec<PastAttempt<'_>> {
    attempts
        .iter()
        .map(|a| PastAttempt {
            provider: &a.provider,
            state: a.state,
            retryable: a
                .error
                .as_ref()
                .and_then(|e| e.pointer("/detail/retryable"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            retry_after: a
                .error
                .as_ref()
                .and_then(|e| e.pointer("/detail/retry_after_ms"))
                .and_then(Value::as_u64)
                .map(Duration::from_millis),
        })
        .collect()
}

/// The answer to an attempt request whose key this job has seen before:
/// a replay when it asked for the same provider, a reused key otherwise.
pub(super) fn earlier_attempt(attempts: &[Attempt], key: Option<&IdempotencyKey>, provider: &str) -> Option<Admission> {
    let key = key?;
    let earlier = attempts.iter().find(|a| a.idempotency_key.as_deref() == Some(key.as_str()))?;
    Some(if earlier.provider == provider {
        Admission::Replayed(earlier.clone())
    } else {
        Admission::KeyReused(earlier.clone())
    })
}
