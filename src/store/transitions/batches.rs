//! Settling a worker's outputs in batches ([`crate::store::Store::finish_attempts`]):
//! one transaction and one commit for many outputs, each settled through
//! its own job's lock, fence and compare-and-swap, exactly as the
//! transitions settle one. On Postgres the batch's jobs are
//! locked by one statement per owner and their outputs written by one.

use super::{
    fence, log_if_lost, outcome_of_settle_with_output, settle_locked, settle_with_output, settle_with_output_values,
};
use crate::domain::AttemptTransition;
use crate::store::driver::{LockedAttempt, Tx};
use crate::store::usage::AttemptUsage;
use crate::store::{AttemptRef, Result, SettleOptions, Store, Transition};
use serde_json::Value;

/// A worker's output for an attempt it holds, to settle with others in one
/// transaction ([`Store::finish_attempts`]).
#[derive(Clone, Copy, Debug)]
pub struct Finish<'a> {
    /// The attempt.
    pub attempt: &'a AttemptRef,
    /// Its output.
    pub output: &'a Value,
    /// The worker holding it, which fences the settlement.
    pub holder: Option<&'a str>,
    /// Its usage, recorded with the settlement.
    pub usage: Option<&'a AttemptUsage>,
}

/// Settles several attempts with their outputs in one transaction (one
/// commit), each through its own job lock and compare-and-swap, exactly as
/// [`settle_with_output`] settles one (the same outcomes, events and
/// outbox rows); the answers are in the order of `finishes`. The jobs are
/// locked in the order of their ids and none is waited for: one locked by
/// another transaction is settled alone after the commit, as is every
/// attempt of a batch that failed (so that one cannot fail the others).
pub(in crate::store) async fn finish_attempts(store: &Store, finishes: &[Finish<'_>]) -> Vec<Result<Transition>> {
    if let [finish] = *finishes {
        // Alone: waiting for its job's lock holds up no other output.
        return vec![finish_alone(store, finish).await];
    }
    let outcomes = settle_together(store, finishes).await;
    let mut answers = Vec::with_capacity(finishes.len());
    for (&finish, outcome) in finishes.iter().zip(outcomes) {
        answers.push(match outcome {
            Some(outcome) => Ok(outcome),
            None => finish_alone(store, finish).await,
        });
    }
    answers
}

/// The transaction of [`finish_attempts`], even for one output, and
/// nothing after it: the outcome of each output it settled or refused, in
/// the order of `finishes`, and `None` for each it left to be settled
/// alone (its job locked by another transaction, or missing; every output
/// of a batch that failed). It never waits for another transaction's lock.
pub(in crate::store) async fn settle_together(store: &Store, finishes: &[Finish<'_>]) -> Vec<Option<Transition>> {
    let mut order: Vec<usize> = (0..finishes.len()).collect();
    // By job (a stable sort: two outputs for one job keep their order, the
    // first to arrive wins).
    order.sort_by_key(|&i| (finishes[i].attempt.owner.as_str(), finishes[i].attempt.job_id.0));
    match settle_in_one_transaction(store, finishes, &order).await {
        Ok(outcomes) => {
            let logged = finishes.iter().zip(outcomes);
            logged.map(|(finish, outcome)| outcome.map(|outcome| log_if_lost(finish.attempt, outcome))).collect()
        }
        Err(error) => {
            tracing::warn!(%error, size = finishes.len(), "a batch of settlements failed; settling each alone");
            vec![None; finishes.len()]
        }
    }
}

/// The one transaction of [`settle_together`], its jobs locked in `order`.
async fn settle_in_one_transaction(
    store: &Store,
    finishes: &[Finish<'_>],
    order: &[usize],
) -> Result<Vec<Option<Transition>>> {
    let mut tx = store.begin().await?;
    let mut outcomes: Vec<Option<Transition>> = vec![None; finishes.len()];
    // The first output of each job, locked with the others, fenced and
    // checked, then settled with the others: one statement per owner.
    let mut locks = lock_batch(&mut tx, finishes, order).await?;
    let (mut ready, mut settlements, mut jobs, mut later) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &i in order {
        let Finish { attempt, output, holder, usage } = finishes[i];
        match locks[i].take() {
            None => later.push(i),
            // Locked elsewhere, or missing: settled alone after the commit.
            Some(None) => {}
            Some(Some(locked)) => match fence(locked, holder).and_then(|locked| {
                settle_with_output_values(attempt, output, AttemptTransition::Finish, None, usage, locked)
            }) {
                Ok((settlement, job)) => {
                    ready.push(i);
                    settlements.push(settlement);
                    jobs.push(job);
                }
                Err(refused) => outcomes[i] = Some(refused),
            },
        }
    }
    let mut start = 0;
    for owners in ready.chunk_by(|&a, &b| finishes[a].attempt.owner == finishes[b].attempt.owner) {
        let range = start..start + owners.len();
        start = range.end;
        let settled = tx.settle_outputs(&settlements[range.clone()]).await?;
        for ((&i, job), settled) in owners.iter().zip(&jobs[range]).zip(settled) {
            let Finish { attempt, output, .. } = finishes[i];
            outcomes[i] = Some(outcome_of_settle_with_output(&mut tx, attempt, output, job, settled).await?);
        }
    }
    // A later output for a job settled above: locked now, it reads that
    // settlement.
    for i in later {
        let Finish { attempt, output, holder, usage } = finishes[i];
        let Some(locked) = tx.lock_attempt_job(attempt, true).await? else { continue };
        outcomes[i] = Some(match fence(locked, holder) {
            Ok(locked) => {
                settle_locked(&mut tx, attempt, output, AttemptTransition::Finish, None, usage, locked).await?
            }
            Err(refused) => refused,
        });
    }
    if crate::failpoints::fails("settle-before-commit") {
        return Err(super::corrupt("failpoint settle-before-commit"));
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// Settles one output alone, in a transaction of its own.
async fn finish_alone(store: &Store, finish: Finish<'_>) -> Result<Transition> {
    let Finish { attempt, output, holder, usage } = finish;
    settle_with_output(store, attempt, output, AttemptTransition::Finish, None, SettleOptions { holder, usage }).await
}

/// The locks of a batch's jobs, taken before any is settled, in `order`
/// (by owner, then job): for the first output of each job, its job locked
/// and its attempt's holder (`None` inside: the attempt is missing, or
/// another transaction holds the job), one statement per owner. A later
/// output of the same job has none here (`None`): it is locked once the
/// first has settled, and reads that settlement.
async fn lock_batch(
    tx: &mut Tx,
    finishes: &[Finish<'_>],
    order: &[usize],
) -> Result<Vec<Option<Option<LockedAttempt>>>> {
    let mut locks = vec![None; finishes.len()];
    for owners in order.chunk_by(|&a, &b| finishes[a].attempt.owner == finishes[b].attempt.owner) {
        let firsts: Vec<usize> = owners
            .chunk_by(|&a, &b| finishes[a].attempt.job_id == finishes[b].attempt.job_id)
            .map(|outputs| outputs[0])
            .collect();
        let attempts: Vec<&AttemptRef> = firsts.iter().map(|&i| finishes[i].attempt).collect();
        for (i, locked) in firsts.into_iter().zip(tx.lock_attempt_jobs(&attempts).await?) {
            locks[i] = Some(locked);
        }
    }
    Ok(locks)
}
