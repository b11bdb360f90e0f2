//! The facts admission decides on, read inside a transition with the job
//! locked, for [`crate::domain::check_admission`]; the retry policy's
//! choice of the next attempt after a failure, admitted by the same rules;
//! an attempt's number and key.

use super::driver::{LockedJob, Tx, update_job_state};
use super::events::NewEvent;
use super::usage::stored_budget;
use super::{Admission, AttemptRef, NewAttempt, Result, Scheduled, TaskRules, corrupt};
use crate::domain::admission::{check_provider, contract_to_check};
use crate::domain::hedge::{HedgeSkip, check_hedge};
use crate::domain::policy::PastAttempt;
use crate::domain::{
    AdmissionFacts, Attempt, AttemptId, AttemptOrigin, EventKind, IdempotencyKey, JobId, JobState, Money, OwnerId,
    QualificationState, check_admission,
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
    // The facts but the candidate's, which each candidate fills in.
    let base = AdmissionFacts {
        task,
        primary: &job.provider,
        provider: &job.provider,
        job: JobState::Failed,
        attempts: &attempts,
        qualification: None,
        budget: budget.as_ref().map(|(money, input)| (*money, input)),
        // The policy adds an attempt only once every other has settled.
        output_held: false,
    };
    let mut chosen = None;
    for candidate in rules.retry_candidates(task, &job.provider, &past) {
        let qualification = read_qualification(tx, rules, task, &job.provider, &candidate.provider).await?;
        let facts = AdmissionFacts { provider: &candidate.provider, qualification: qualification.as_ref(), ..base };
        match check_provider(&facts, rules) {
            Ok(()) => {
                chosen = Some((candidate, qualification));
                break;
            }
            Err(refused) => {
                let reason = refused.reason.unwrap_or_default();
                tracing::info!(owner = %owner, job.id = %job_id, provider = %candidate.provider, %reason,
                               "failover skipped a provider that is not qualified or over the budget");
                let detail = json!({ "provider": candidate.provider, "reason": reason, "after": failed.number });
                tx.append_event(NewEvent::of_job(owner, job_id, EventKind::FailoverSkipped, detail)).await?;
            }
        }
    }
    let Some((next, qualification)) = chosen else { return Ok(None) };
    let facts = AdmissionFacts { provider: &next.provider, qualification: qualification.as_ref(), ..base };
    if let Err(refused) = check_admission(&facts, rules) {
        let detail = json!({ "problem": refused.refusal.problem_type(), "provider": next.provider, "origin": AttemptOrigin::Policy.as_str() });
        tx.append_event(NewEvent::of_job(owner, job_id, EventKind::AdmissionRefused, detail)).await?;
        return Ok(None);
    }
    let number = next_number(&attempts)?;
    if crate::failpoints::fails_for("policy-before-next-attempt", &job_id.to_string()) {
        return Err(corrupt("failpoint policy-before-next-attempt"));
    }
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
    tx.append_event(NewEvent::of_attempt(&key, EventKind::AttemptAdmitted, detail)).await?;
    Ok(Some(Scheduled { number, provider: next.provider, delay: next.delay }))
}

/// The answer to [`super::Store::admit_hedge`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hedged {
    /// A hedge was added, pending: its number and provider.
    Started {
        /// Its number.
        number: i32,
        /// Its provider.
        provider: String,
    },
    /// None was; why.
    Skipped(HedgeSkip),
}

/// Adds a hedge of the running attempt `hedged` on the first of
/// `providers` that the job may take it on ([`check_hedge`]): one
/// transaction, with the job locked. `waited` is how long `hedged` went
/// without an answer, for the event.
pub(super) async fn admit_hedge(
    store: &super::Store,
    hedged: &AttemptRef,
    providers: &[String],
    (max_hedges, waited): (u32, Duration),
    rules: &dyn TaskRules,
) -> Result<Hedged> {
    let (owner, job_id) = (&hedged.owner, hedged.job_id);
    let mut tx = store.begin().await?;
    let Some(job) = tx.lock_job(owner, job_id).await? else { return Ok(Hedged::Skipped(HedgeSkip::Answered)) };
    let attempts = tx.read_attempts(owner, job_id).await?;
    let budget = job_budget(&mut tx, owner, job_id, &job.task, rules).await?;
    let output = tx.lock_output(owner, job_id).await?;
    let base = AdmissionFacts {
        task: &job.task,
        primary: &job.provider,
        provider: &job.provider,
        job: job.state,
        attempts: &attempts,
        qualification: None,
        budget: budget.as_ref().map(|(money, input)| (*money, input)),
        output_held: output.is_some_and(|output| output.holder_state == Some(crate::domain::AttemptState::Running)),
    };
    let mut skipped = HedgeSkip::NoProvider;
    for provider in providers {
        let qualification = read_qualification(&mut tx, rules, &job.task, &job.provider, provider).await?;
        let facts = AdmissionFacts { provider, qualification: qualification.as_ref(), ..base };
        match check_hedge(&facts, hedged.number, max_hedges, rules) {
            Ok(()) => {}
            Err((HedgeSkip::NoProvider, refused)) => {
                let reason = refused.and_then(|refused| refused.reason).unwrap_or_default();
                tracing::debug!(owner = %owner, job.id = %job_id, %provider, %reason, "a hedge passed over a provider");
                continue;
            }
            Err((skip, _)) => {
                skipped = skip;
                break;
            }
        }
        let number = next_number(&attempts)?;
        let new = NewAttempt {
            id: AttemptId::new(),
            provider: Some(provider.clone()),
            idempotency_key: None,
            origin: AttemptOrigin::Hedge,
            delay: Duration::ZERO,
            // Raced for the same request: it stays in its trace.
            trace: attempts.iter().find(|a| a.number == hedged.number).and_then(|a| a.trace.clone()),
        };
        let key = AttemptRef { owner: owner.clone(), job_id, number };
        tx.insert_attempt(&key, &new, provider).await?;
        let job_state = update_job_state(&mut tx, owner, job_id, job.state).await?;
        let detail = json!({ "attempt_id": new.id, "provider": provider, "origin": AttemptOrigin::Hedge.as_str(),
                             "hedge_of": hedged.number, "after_ms": u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                             "job_state": job_state.as_str() });
        tx.append_event(NewEvent::of_attempt(&key, EventKind::AttemptAdmitted, detail)).await?;
        tx.commit().await?;
        return Ok(Hedged::Started { number, provider: provider.clone() });
    }
    // Nothing was written: the transaction ends unused.
    drop(tx);
    Ok(Hedged::Skipped(skipped))
}

/// Where `provider` stands for the contract an attempt of a `task` job
/// whose own provider is `primary` needs on it (see
/// [`contract_to_check`]); `None` when it needs none.
pub(super) async fn read_qualification(
    tx: &mut Tx,
    rules: &dyn TaskRules,
    task: &str,
    primary: &str,
    provider: &str,
) -> Result<Option<QualificationState>> {
    let Some(hash) = contract_to_check(rules, task, primary, provider) else { return Ok(None) };
    Ok(Some(tx.qualification_state(provider, task, &hash).await?))
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
