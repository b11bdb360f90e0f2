//! The logic of every transition, written once for both databases over the
//! statements of [`super::driver`]: creating a job, admitting an attempt,
//! settling one with or without an output, reaping expired leases,
//! resolving, canceling, and scheduling the retry policy's next attempt
//! (whose choice, with the other admission checks, is in [`super::admission`]).
//! The edges come from [`AttemptTransition::edge`]; job states from
//! [`JobState::derive`]; admission from [`check_admission`].
//!
//! Every transition on an existing job locks the job first
//! ([`super::driver::DriverTx::lock_job`]), so the stored job state is always the state of
//! its attempts, and guards its update by the edge's `from` states. A guard
//! that matches zero rows is a typed outcome ([`Transition::Stale`],
//! [`Transition::Lost`]), never an error and never ignored (I3).

pub(super) mod batches;

use std::time::Duration;

use serde_json::{Value, json};

use super::admission::{earlier_attempt, job_budget, next_number, read_qualification, schedule_next_attempt};
use super::driver::{
    AttemptHolder, AttemptOutcome, LockedJob, SettleWithOutput, SettledWithOutput, Tx, update_job_state,
};
use super::events::NewEvent;
use super::usage::AttemptUsage;
use super::webhooks::Outgoing;
use super::{
    Admission, AttemptRef, Cancel, CreateJob, NewAttempt, NewJob, Resolution, Resolved, Result, SettleOptions, Store,
    TaskRules, Transition, corrupt,
};
use crate::domain::webhook::WebhookEventType;
use crate::domain::{
    AdmissionFacts, AttemptError, AttemptState, AttemptTransition, EventKind, IdempotencyKey, JobId, JobState,
    NOT_RECEIVED, OwnerId, Refused, check_admission,
};

/// Creates a job with its first attempt, or finds the job that holds its
/// key (I1: the unique constraint decides).
pub(super) async fn create_job(store: &Store, new: &NewJob) -> Result<CreateJob> {
    if let Some(created_at) = super::groups::create_job(store, new).await? {
        return Ok(CreateJob::Created(new.created(created_at)));
    }
    // The key is taken. The insert's snapshot may predate the racing insert
    // it waited for, so the holder is read by a new statement.
    match store.driver().find_job_by_key(&new.owner, &new.idempotency_key).await? {
        Some(job) => Ok(CreateJob::Existing(job)),
        None => Err(corrupt("an idempotency key conflicted, but no job holds it")),
    }
}

/// Adds an attempt to a job if every admission rule allows it, with the
/// job locked so that the answer holds until commit.
pub(super) async fn admit_attempt(
    store: &Store,
    owner: &OwnerId,
    job_id: JobId,
    new: &NewAttempt,
    rules: &dyn TaskRules,
) -> Result<Admission> {
    let mut tx = store.begin().await?;
    let Some(job) = tx.lock_job(owner, job_id).await? else {
        return Ok(Admission::JobNotFound);
    };
    let provider = new.provider.as_deref().unwrap_or(&job.provider);
    let attempts = tx.read_attempts(owner, job_id).await?;

    // A key seen before on this job answers with what it made, whatever the
    // job's state is now.
    if let Some(answer) = earlier_attempt(&attempts, new.idempotency_key.as_ref(), provider) {
        return Ok(answer);
    }

    let qualification = read_qualification(&mut tx, rules, &job.task, &job.provider, provider).await?;
    let budget = job_budget(&mut tx, owner, job_id, &job.task, rules).await?;
    let output = tx.lock_output(owner, job_id).await?;
    let facts = AdmissionFacts {
        task: &job.task,
        primary: &job.provider,
        provider,
        job: job.state,
        attempts: &attempts,
        qualification: qualification.as_ref(),
        budget: budget.as_ref().map(|(money, input)| (*money, input)),
        output_held: output.is_some_and(|output| output.holder_state == Some(AttemptState::Running)),
    };
    if let Err(Refused { refusal, reason }) = check_admission(&facts, rules) {
        let detail = json!({ "problem": refusal.problem_type(), "provider": provider, "reason": reason,
                             "idempotency_key": new.idempotency_key.as_ref().map(IdempotencyKey::as_str),
                             "origin": new.origin.as_str() });
        tx.append_event(NewEvent::of_job(owner, job_id, EventKind::AdmissionRefused, detail)).await?;
        tx.commit().await?;
        return Ok(Admission::Refused { refusal, reason });
    }

    let number = next_number(&attempts)?;
    let key = AttemptRef { owner: owner.clone(), job_id, number };
    let attempt = tx.insert_attempt(&key, new, provider).await?;
    let job_state = update_job_state(&mut tx, owner, job_id, job.state).await?;
    let detail = json!({ "attempt_id": new.id, "provider": provider, "origin": new.origin.as_str(),
                         "job_state": job_state.as_str() });
    tx.append_event(NewEvent::of_attempt(&key, EventKind::AttemptAdmitted, detail)).await?;
    tx.commit().await?;
    Ok(Admission::Admitted(attempt))
}

/// Settles an attempt with an output through the job's compare-and-swap
/// (I3): `transition` is [`AttemptTransition::Finish`] (a worker's, fenced
/// by its `holder` name, or the reconciler's) or
/// [`AttemptTransition::ResolveSucceeded`] (an operator's, `resolved`).
/// The attempt's `usage`, when given, is recorded by the settling statement.
pub(super) async fn settle_with_output(
    store: &Store,
    attempt: &AttemptRef,
    output: &Value,
    transition: AttemptTransition,
    resolved: Option<&Resolved<'_>>,
    settlement: SettleOptions<'_>,
) -> Result<Transition> {
    let SettleOptions { holder, usage } = settlement;
    let mut tx = store.begin().await?;
    let locked = match lock_fenced(&mut tx, attempt, holder).await? {
        Ok(locked) => locked,
        Err(refused) => return Ok(refused),
    };
    let outcome = settle_locked(&mut tx, attempt, output, transition, resolved, usage, locked).await?;
    if let Transition::Stale(_) = outcome {
        return Ok(outcome);
    }
    if crate::failpoints::fails("settle-before-commit") {
        return Err(corrupt("failpoint settle-before-commit"));
    }
    tx.commit().await?;
    Ok(log_if_lost(attempt, outcome))
}

/// The settlement with an output of an attempt whose job is locked, as
/// `locked` read them; writes nothing when the attempt cannot take it
/// ([`Transition::Stale`]). The race's log line waits for the commit
/// ([`log_if_lost`]).
async fn settle_locked(
    tx: &mut Tx,
    attempt: &AttemptRef,
    output: &Value,
    transition: AttemptTransition,
    resolved: Option<&Resolved<'_>>,
    usage: Option<&AttemptUsage>,
    locked: (LockedJob, AttemptState),
) -> Result<Transition> {
    let (settlement, job) = match settle_with_output_values(attempt, output, transition, resolved, usage, locked) {
        Ok(ready) => ready,
        Err(stale) => return Ok(stale),
    };
    let settled = tx.settle_with_output(&settlement).await?;
    outcome_of_settle_with_output(tx, attempt, output, &job, settled).await
}

/// What the settlement with an output of an attempt whose job is locked
/// writes, with its job; [`Transition::Stale`] when the attempt cannot take
/// it (nothing is written then).
fn settle_with_output_values<'a>(
    attempt: &'a AttemptRef,
    output: &'a Value,
    transition: AttemptTransition,
    resolved: Option<&Resolved<'_>>,
    usage: Option<&'a AttemptUsage>,
    (job, current): (LockedJob, AttemptState),
) -> std::result::Result<(SettleWithOutput<'a>, LockedJob), Transition> {
    if !transition.from().contains(&current) {
        return Err(Transition::Stale(current));
    }
    let winner = job.winning_attempt;
    let (reason, resolved_by) = resolution_detail(resolved);
    let settlement = SettleWithOutput {
        attempt,
        output,
        usage,
        from: transition.from(),
        won: json!({ "from": current.as_str(), "reason": reason, "resolved_by": resolved_by }),
        lost: json!({ "loser": attempt.number, "winner": winner, "job_state": job.state.as_str(), "reason": reason,
                      "resolved_by": resolved_by }),
    };
    Ok((settlement, job))
}

/// A written settlement's outcome: won (the webhooks told that the job
/// succeeded) or lost (that the attempt was superseded).
async fn outcome_of_settle_with_output(
    tx: &mut Tx,
    attempt: &AttemptRef,
    output: &Value,
    job: &LockedJob,
    settled: SettledWithOutput,
) -> Result<Transition> {
    if settled.settled != 1 {
        // Cannot happen with the job locked; refuse to commit if it does.
        return Err(corrupt("an attempt changed under its locked job"));
    }
    let (owner, job_id) = (&attempt.owner, attempt.job_id);
    if settled.won {
        let data = || {
            json!({ "job_state": JobState::Succeeded.as_str(), "attempt": attempt.number, "result": output,
                              "canceled": settled.canceled })
        };
        enqueue_webhook_message(tx, owner, job_id, job, WebhookEventType::JobSucceeded, data).await?;
        Ok(Transition::Won { canceled: settled.canceled })
    } else {
        let winner = job.winning_attempt;
        let data = || json!({ "job_state": job.state.as_str(), "attempt": attempt.number, "winner": winner });
        enqueue_webhook_message(tx, owner, job_id, job, WebhookEventType::AttemptSuperseded, data).await?;
        Ok(Transition::Lost { winner })
    }
}

/// A committed settlement's outcome, with the one log line a lost race gets.
fn log_if_lost(attempt: &AttemptRef, outcome: Transition) -> Transition {
    if let Transition::Lost { winner } = outcome {
        log_race_lost(attempt, winner);
    }
    outcome
}

/// Moves an attempt to `failed` or `unknown` along `transition`, and the
/// job to the state that implies; fenced by `holder` as
/// [`settle_with_output`] is. After a failure, when `rules` are given and
/// nothing else of the job is open, the retry policy's next attempt is
/// admitted in the same transaction, so that it cannot be lost between the
/// two. An attempt the provider never received ([`NOT_RECEIVED`]) used and
/// cost nothing: its estimated usage is forgotten in the same transaction.
/// The attempt's `usage`, when given, is recorded with its outcome.
pub(super) async fn settle_without_output(
    store: &Store,
    attempt: &AttemptRef,
    transition: AttemptTransition,
    error: &AttemptError,
    resolved: Option<&Resolved<'_>>,
    rules: Option<&dyn TaskRules>,
    settlement: SettleOptions<'_>,
) -> Result<Transition> {
    let SettleOptions { holder, usage } = settlement;
    let &[to] = transition.to() else {
        return Err(corrupt(format!("{transition:?} does not settle without an output")));
    };
    let mut tx = store.begin().await?;
    let job = match lock_fenced(&mut tx, attempt, holder).await? {
        Ok((job, _)) => job,
        Err(refused) => return Ok(refused),
    };
    if tx.set_attempt_outcome(attempt, &AttemptOutcome { to, from: transition.from(), error, usage }).await? == 0 {
        return Ok(match tx.attempt_state(attempt).await? {
            Some(state) => Transition::Stale(state),
            None => Transition::NotFound,
        });
    }
    if error.kind == NOT_RECEIVED {
        tx.forget_usage(attempt).await?;
    }
    let job_state = update_job_state(&mut tx, &attempt.owner, attempt.job_id, job.state).await?;
    let (reason, resolved_by) = resolution_detail(resolved);
    let mut detail =
        json!({ "error": error, "job_state": job_state.as_str(), "reason": reason, "resolved_by": resolved_by });
    if transition == AttemptTransition::Abort {
        // The race is recorded as a lost one, without an output.
        detail["winner"] = json!(job.winning_attempt);
    }
    tx.append_event(NewEvent::of_attempt(attempt, transition.event(), detail)).await?;
    let outcome = match (to, rules) {
        (AttemptState::Failed, Some(rules)) if job_state == JobState::Failed => {
            Transition::Failed { next: schedule_next_attempt(&mut tx, attempt, &job, rules).await? }
        }
        (AttemptState::Failed, _) => Transition::Failed { next: None },
        _ => Transition::Applied,
    };
    let (owner, job_id) = (&attempt.owner, attempt.job_id);
    let data = || json!({ "job_state": job_state.as_str(), "attempt": attempt.number, "error": error });
    match (to, &outcome) {
        (AttemptState::Unknown, _) => {
            enqueue_webhook_message(&mut tx, owner, job_id, &job, WebhookEventType::AttemptUnknown, data).await?;
            if job_state == JobState::Unknown && job.state != JobState::Unknown {
                enqueue_webhook_message(&mut tx, owner, job_id, &job, WebhookEventType::JobUnknown, data).await?;
            }
        }
        // The job failed, and nothing follows by itself.
        (AttemptState::Failed, Transition::Failed { next: None }) if job_state == JobState::Failed => {
            enqueue_webhook_message(&mut tx, owner, job_id, &job, WebhookEventType::JobFailed, data).await?;
        }
        // An unknown attempt the provider reports canceled, the job's last open one.
        (AttemptState::Canceled, _) if job_state == JobState::Failed && job.state != JobState::Failed => {
            enqueue_webhook_message(&mut tx, owner, job_id, &job, WebhookEventType::JobFailed, data).await?;
        }
        _ => {}
    }
    tx.commit().await?;
    if transition == AttemptTransition::Abort && job.winning_attempt.is_some() {
        tracing::warn!(owner = %attempt.owner, job.id = %attempt.job_id, attempt.number = attempt.number,
                       winner = ?job.winning_attempt, "race lost: the call was aborted before its answer; attempt canceled");
    }
    Ok(outcome)
}

/// Puts a running attempt its provider refused before doing any work back
/// to `pending`, due in `delay`, as the same attempt (the same id; no
/// attempt of the job's budget spent), and pauses `pause` (its provider,
/// for every worker) as long. Fenced by `worker`. When the job has
/// finished, holds another pending attempt (a job holds one at most), or
/// the attempt was put back `max` times already (`None`: this refusal is
/// not counted), nothing changes: `Stale(Running)`, and the caller
/// records the refusal as a failure.
pub(super) async fn requeue(
    store: &Store,
    attempt: &AttemptRef,
    worker: &str,
    (delay, max): (Duration, Option<u32>),
    pause: Option<&str>,
    mut detail: Value,
) -> Result<Transition> {
    let mut tx = store.begin().await?;
    let job = match lock_fenced(&mut tx, attempt, Some(worker)).await? {
        Ok((job, _)) => job,
        Err(refused) => return Ok(refused),
    };
    let states = tx.attempt_states(&attempt.owner, attempt.job_id).await?;
    if job.state.is_terminal() || states.contains(&AttemptState::Pending) {
        return Ok(Transition::Stale(AttemptState::Running));
    }
    if tx.requeue_attempt(attempt, delay, max).await? == 0 {
        return Ok(Transition::Stale(AttemptState::Running));
    }
    let job_state = update_job_state(&mut tx, &attempt.owner, attempt.job_id, job.state).await?;
    detail["job_state"] = json!(job_state.as_str());
    detail["due_in_ms"] = json!(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
    let event = AttemptTransition::Requeue.event();
    tx.append_event(NewEvent::of_attempt(attempt, event, detail)).await?;
    if let Some(provider) = pause {
        tx.pause_provider(provider, delay).await?;
    }
    tx.commit().await?;
    Ok(Transition::Applied)
}

/// Settles an unknown attempt by an operator's word.
pub(super) async fn resolve_unknown(
    store: &Store,
    attempt: &AttemptRef,
    resolution: &Resolution,
    resolved: &Resolved<'_>,
    rules: &dyn TaskRules,
) -> Result<Transition> {
    match resolution {
        Resolution::Succeeded(output) => {
            settle_with_output(
                store,
                attempt,
                output,
                AttemptTransition::ResolveSucceeded,
                Some(resolved),
                SettleOptions::default(),
            )
            .await
        }
        Resolution::Failed => {
            let error = AttemptError::new("resolved-failed", resolved.reason);
            let transition = AttemptTransition::ResolveFailed;
            settle_without_output(
                store,
                attempt,
                transition,
                &error,
                Some(resolved),
                Some(rules),
                SettleOptions::default(),
            )
            .await
        }
    }
}

/// Locks the attempt's job and reads the attempt's state, fenced: with a
/// `holder`, the settlement applies only while the attempt is `running`
/// under that worker's live lease ([`Transition::Fenced`] otherwise). A
/// missing job or attempt is [`Transition::NotFound`].
async fn lock_fenced(
    tx: &mut Tx,
    attempt: &AttemptRef,
    holder: Option<&str>,
) -> Result<std::result::Result<(LockedJob, AttemptState), Transition>> {
    Ok(match tx.lock_attempt_job(attempt, false).await? {
        None => Err(Transition::NotFound),
        Some(locked) => fence(locked, holder),
    })
}

/// The fence of [`lock_fenced`] on a locked job and its attempt's holder.
fn fence(
    (job, held): (LockedJob, Option<AttemptHolder>),
    holder: Option<&str>,
) -> std::result::Result<(LockedJob, AttemptState), Transition> {
    match held {
        None => Err(Transition::NotFound),
        Some(held) if holder.is_some_and(|worker| !held.held_by(worker)) => Err(Transition::Fenced(held.state)),
        Some(held) => Ok((job, held.state)),
    }
}

/// The reason and the resolving key of an operator's settlement, for its event.
fn resolution_detail<'a>(resolved: Option<&Resolved<'a>>) -> (Option<&'a str>, Value) {
    let Some(resolved) = resolved else { return (None, Value::Null) };
    let by = match (resolved.key, resolved.role) {
        (Some(key), role) => json!({ "key": key, "role": role }),
        (None, Some(role)) => json!({ "role": role }),
        (None, None) => Value::Null,
    };
    (Some(resolved.reason), by)
}

/// Turns running attempts whose lease expired into `unknown` (I4).
pub(super) async fn expire_leases(store: &Store, max: u32) -> Result<Vec<AttemptRef>> {
    let error =
        AttemptError::new("lease-expired", "the worker running this attempt stopped answering before it finished");
    let mut expired = Vec::new();
    for attempt in store.driver().expired_leases(max).await? {
        let outcome = settle_without_output(
            store,
            &attempt,
            AttemptTransition::ExpireLease,
            &error,
            None,
            None,
            SettleOptions::default(),
        )
        .await?;
        if outcome == Transition::Applied {
            expired.push(attempt);
        }
    }
    Ok(expired)
}

/// Cancels a job unless it succeeded: pending attempts are canceled;
/// running ones are left to their workers, which abort their calls (the
/// task's `cancel_losers`) or record their answers, never applied.
pub(super) async fn cancel_job(store: &Store, owner: &OwnerId, id: JobId, rules: &dyn TaskRules) -> Result<Cancel> {
    let mut tx = store.begin().await?;
    let Some(job) = tx.lock_job(owner, id).await? else {
        return Ok(Cancel::NotFound);
    };
    if job.state.is_terminal() {
        drop(tx);
        let current = store.get_job(owner, id).await?.ok_or_else(|| corrupt("a locked job vanished"))?;
        return Ok(match job.state {
            JobState::Canceled => Cancel::AlreadyCanceled(current),
            _ => Cancel::Succeeded(current),
        });
    }
    let canceled = tx.cancel_job_and_pending(owner, id).await?;
    let attempts = tx.read_attempts(owner, id).await?;
    let canceling = crate::domain::attempts_being_canceled(
        JobState::Canceled,
        attempts.iter().map(|a| (a.number, a.state)),
        rules.cancels_losers(&job.task),
    );
    let detail = json!({ "from": job.state.as_str(), "canceled": canceled, "canceling": canceling });
    tx.append_event(NewEvent::of_job(owner, id, AttemptTransition::Cancel.event(), detail.clone())).await?;
    let data = || {
        let mut data = detail;
        data["job_state"] = json!(JobState::Canceled.as_str());
        data
    };
    enqueue_webhook_message(&mut tx, owner, id, &job, WebhookEventType::JobCanceled, data).await?;
    tx.commit().await?;
    let job = store.get_job(owner, id).await?.ok_or_else(|| corrupt("a canceled job vanished"))?;
    Ok(Cancel::Canceled(job))
}

/// Writes a webhook message about a job to the outbox, in the transition's
/// transaction (a Standard Webhooks body: `type`, `timestamp`, `data` with
/// the job's id and task added to `data`): a delivery to each of the
/// owner's endpoints subscribed to `event`, or nothing when none is. An
/// owner without any subscription (as the job's lock read it) is written
/// nothing, with no statement; `data` is made only when it is written.
async fn enqueue_webhook_message(
    tx: &mut Tx,
    owner: &OwnerId,
    job_id: JobId,
    job: &LockedJob,
    event: WebhookEventType,
    data: impl FnOnce() -> Value,
) -> Result<()> {
    if !job.hooked {
        return Ok(());
    }
    let mut data = data();
    if let Some(fields) = data.as_object_mut() {
        fields.insert("job_id".into(), json!(job_id));
        fields.insert("task".into(), json!(job.task));
    }
    let payload = json!({ "type": event.as_str(), "timestamp": chrono::Utc::now(), "data": data }).to_string();
    tx.enqueue_webhook(&Outgoing { owner, job_id, event, payload }).await
}

/// Writes the one log line a lost race gets (I3).
fn log_race_lost(attempt: &AttemptRef, winner: Option<i32>) {
    tracing::warn!(
        owner = %attempt.owner,
        job.id = %attempt.job_id,
        attempt.number = attempt.number,
        winner = ?winner,
        "race lost: the compare-and-swap touched zero rows; output kept as superseded"
    );
}
