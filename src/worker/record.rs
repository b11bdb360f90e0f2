//! Recording what became of an attempt, the worker's outcome or the
//! reconciler's, through the store's guarded transitions: metered, retried
//! through database outages, fenced by the worker's claim.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::Worker;
use crate::domain::{AttemptError, Usage, unapplied_output};
use crate::process::metrics::{self, SettledAs};
use crate::provider::{Completion, FailureClass, FailureKind, ProviderError};
use crate::store::{self, AttemptRef, AttemptUsage, SettleOptions, Transition};

/// A worker's hold on the attempt it records: its settlements are fenced by
/// it, and must land before the lease ends.
#[derive(Clone, Copy)]
pub(super) struct Claim<'a> {
    pub(super) worker: &'a str,
    pub(super) lease_end: Instant,
}

/// The stored form of a provider failure.
fn attempt_error(error: &ProviderError) -> AttemptError {
    AttemptError { kind: error.kind.as_str().to_owned(), message: error.message.clone(), detail: error.stored_detail() }
}

/// How long an outcome is retried while the database cannot record it.
const RECORD_PATIENCE: Duration = Duration::from_secs(300);

/// Records what became of an attempt of a `task` job: an output that meets
/// the task's contract goes through the job's compare-and-swap (one that
/// does not fails the attempt and never becomes the result, I5); a
/// definitive failure fails it (and the retry policy may add the next
/// attempt in the same transaction); an ambiguous one makes it `unknown`.
/// Every transition is guarded, so retrying one after a database error is
/// safe; it is retried for minutes, through a database failover. An outcome
/// that still cannot be recorded is left to the reaper and the reconciler,
/// which will find the attempt `unknown`.
pub async fn record_outcome(
    worker: &Worker,
    attempt: &AttemptRef,
    task: &str,
    provider: &str,
    outcome: Result<Completion, ProviderError>,
) {
    record_metered_outcome(worker, attempt, task, provider, outcome, None, None).await;
}

/// Before a failed attempt's failover is decided: waits for the verdicts
/// of the task's failover providers whose qualification is running in this
/// process, at most `worker.failover_qualification_wait_ms` and never past
/// the claim's lease (less its margin). A provider still unqualified then
/// is skipped, and the skip says it was still being qualified.
async fn await_failover_qualifications(worker: &Worker, task: &str, claim: Option<Claim<'_>>) {
    let Some(task) = worker.catalog.task(task) else { return };
    let running = worker.catalog.qualifications();
    let failover = &task.settings.failover;
    if !failover.iter().any(|provider| running.is_running(provider, &task.name)) {
        return;
    }
    let mut until = Instant::now() + worker.settings.failover_qualification_wait;
    if let Some(claim) = claim {
        let margin = worker.settings.lease_margin;
        until = until.min(claim.lease_end.checked_sub(margin).unwrap_or(claim.lease_end));
    }
    tracing::info!("waiting for the qualification of a failover provider before deciding the failover");
    let started = Instant::now();
    let finished = running.wait(&task.name, failover, until).await;
    tracing::info!(finished, waited_ms = started.elapsed().as_millis() as u64, "failover qualifications waited for");
}

/// [`record_outcome`], with the usage the attempt may have had when the
/// provider does not say (`estimate`), fenced by the worker's `claim` (its
/// own outcomes, which must land within its lease). The usage and its cost
/// (see [`usage_of`]) are recorded by the statement that settles the
/// attempt; when the settlement is refused (the attempt was settled
/// otherwise, or is no longer held), on their own, since the provider may
/// have charged for them all the same. An output that breaks the contract
/// is kept on the attempt, unvalidated, as its failure is recorded.
pub(super) async fn record_metered_outcome(
    worker: &Worker,
    attempt: &AttemptRef,
    task: &str,
    provider: &str,
    outcome: Result<Completion, ProviderError>,
    estimate: Option<Usage>,
    claim: Option<Claim<'_>>,
) -> Option<SettledAs> {
    let holder = claim.map(|claim| claim.worker);
    let mut usage = usage_of(&outcome, estimate);
    let (outcome, rejected) = check_output(worker, task, outcome);
    let (outcome, outputs) = keep_files(worker, attempt, task, outcome).await;
    if outputs > 0 {
        // What a provider billing per output charges for.
        usage.get_or_insert_with(Usage::default).outputs = outputs;
    }
    let usage = meter_usage(worker, provider, usage);
    if matches!(&outcome, Err(error) if matches!(error.class, FailureClass::Definitive { .. })) {
        await_failover_qualifications(worker, task, claim).await;
    }
    let started = tokio::time::Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        let settlement = SettleOptions { holder, usage: usage.as_ref() };
        match record_with_usage(worker, attempt, provider, &outcome, rejected.as_ref(), settlement).await {
            Ok(settled) => {
                announce_settled(worker, attempt, provider, settled, usage.as_ref());
                return settled;
            }
            Err(error) if started.elapsed() < RECORD_PATIENCE => {
                tracing::warn!(%error, "recording the attempt's outcome failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(error) => {
                tracing::error!(%error, "the attempt's outcome could not be recorded; it will be reconciled as unknown");
                return None;
            }
        }
    }
}

/// What the outcome used (see [`usage_of`]), with its cost at the
/// provider's price.
fn meter_usage(worker: &Worker, provider: &str, usage: Option<Usage>) -> Option<AttemptUsage> {
    usage.map(|usage| AttemptUsage {
        usage,
        cost: worker.providers.get(provider).and_then(|p| p.settings().price.as_ref()).map(|price| price.cost(&usage)),
    })
}

/// Checks an answer's output against the `task`'s contract: the outcome
/// to record, with the output to keep unapplied (the text a failure
/// received, or an output that breaks the contract).
fn check_output(
    worker: &Worker,
    task: &str,
    mut outcome: Result<Completion, ProviderError>,
) -> (Result<Completion, ProviderError>, Option<Value>) {
    let mut rejected = None;
    if let Err(error) = &mut outcome
        && let Some(text) = error.facts.received_text.take()
    {
        rejected = Some(unapplied_output(error.kind.as_str(), &Value::String(text), chrono::Utc::now()));
    }
    let outcome = outcome.and_then(|completion| {
        let checked = match worker.catalog.task(task) {
            Some(task) => task.contract.accept(&completion.output),
            None => Err(ProviderError::contract_violation(format!(
                "task '{task}' is not configured; no output can be checked"
            ))),
        };
        match checked {
            Ok(()) => Ok(completion),
            Err(error) => {
                rejected = Some(unapplied_output(
                    FailureKind::ContractViolation.as_str(),
                    &completion.output,
                    chrono::Utc::now(),
                ));
                Err(error)
            }
        }
    });
    (outcome, rejected)
}

/// Keeps the files of a files task's output ([`crate::files`]): the
/// outcome with the output naming the kept files (and how many), or a
/// `contract-violation` when a file breaks the task's rules. A blob store that cannot be
/// written is tried again, as a database that cannot record is; past that
/// patience the outcome is `unknown` (the provider made it; an operator
/// settles it).
async fn keep_files(
    worker: &Worker,
    attempt: &AttemptRef,
    task: &str,
    outcome: Result<Completion, ProviderError>,
) -> (Result<Completion, ProviderError>, i64) {
    let mut completion = match outcome {
        Ok(completion) => completion,
        Err(error) => return (Err(error), 0),
    };
    let Some(rules) = worker.catalog.task(task).and_then(|task| task.settings.files.as_ref()) else {
        return (Ok(completion), 0);
    };
    let started = tokio::time::Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        match worker.files.keep(attempt.job_id, attempt.number, &mut completion.output, rules).await {
            Ok(()) => {
                let outputs = i64::try_from(crate::files::named(&completion.output).len()).unwrap_or(i64::MAX);
                return (Ok(completion), outputs);
            }
            Err(crate::files::KeepError::Rejected(why)) => {
                let why = format!("the output's files break the contract: {why}");
                return (Err(ProviderError::contract_violation(why)), 0);
            }
            Err(error) if started.elapsed() < RECORD_PATIENCE => {
                tracing::warn!(%error, "keeping the output's files failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(error) => {
                tracing::error!(%error, "the output's files could not be kept: the attempt is left unknown");
                let error =
                    ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, None, error.to_string());
                return (Err(error), 0);
            }
        }
    }
}

/// [`record_once`]; when its transition is refused, the usage on its own.
async fn record_with_usage(
    worker: &Worker,
    attempt: &AttemptRef,
    provider: &str,
    outcome: &Result<Completion, ProviderError>,
    rejected: Option<&Value>,
    settlement: SettleOptions<'_>,
) -> store::Result<Option<SettledAs>> {
    let usage = settlement.usage;
    match record_once(worker, attempt, provider, outcome, rejected, settlement).await {
        Ok(None) => match usage {
            Some(usage) => worker.store.record_usage(attempt, usage).await.map(|_| None),
            None => Ok(None),
        },
        other => other,
    }
}

/// Tells of a recorded outcome: its usage in the metrics when it settled
/// the attempt, the job's change, and its end when the attempt won it.
fn announce_settled(
    worker: &Worker,
    attempt: &AttemptRef,
    provider: &str,
    settled: Option<SettledAs>,
    usage: Option<&AttemptUsage>,
) {
    if let (Some(settled), Some(usage)) = (settled, usage) {
        metrics::usage(provider, settled, &usage.usage, usage.cost.as_ref());
    }
    worker.signals.job_changed(attempt.job_id);
    if settled == Some(SettledAs::Succeeded) {
        // The job is won: its other calls in flight here stop.
        worker.signals.job_finished(attempt.job_id);
    }
}

/// Settles an output: a claim's in the next batch of this worker's outputs
/// ([`super::finishes`]), the reconciler's (no holder) alone.
async fn finish(
    worker: &Worker,
    attempt: &AttemptRef,
    output: &Value,
    settlement: SettleOptions<'_>,
) -> store::Result<Transition> {
    let SettleOptions { holder, usage } = settlement;
    match holder {
        Some(holder) => worker.finishes.finish(&worker.store, attempt, output, holder, usage).await,
        None => worker.store.finish_attempt(attempt, output, None, usage).await,
    }
}

/// Records the outcome, with its usage, through the transition it calls
/// for: how the attempt settled, or `None` when the transition was refused
/// (and recorded no usage).
async fn record_once(
    worker: &Worker,
    attempt: &AttemptRef,
    provider: &str,
    outcome: &Result<Completion, ProviderError>,
    rejected: Option<&Value>,
    settlement: SettleOptions<'_>,
) -> store::Result<Option<SettledAs>> {
    let SettleOptions { holder, usage } = settlement;
    let store = &worker.store;
    let mut settled = None;
    if let Some(rejected) = rejected {
        store.record_unapplied_output(attempt, rejected).await?;
    }
    match outcome {
        Ok(completion) => match finish(worker, attempt, &completion.output, SettleOptions { holder, usage }).await? {
            Transition::Won { canceled } => {
                tracing::Span::current().record("attempt.state", "succeeded");
                tracing::info!(?canceled, "attempt succeeded and won the job");
                metrics::attempt(provider, SettledAs::Succeeded);
                metrics::attempts_canceled(canceled.len());
                settled = Some(SettledAs::Succeeded);
            }
            // Logged by the store with both numbers.
            Transition::Lost { .. } => {
                tracing::Span::current().record("attempt.state", "superseded");
                metrics::attempt(provider, SettledAs::Superseded);
                metrics::race_lost(provider);
                settled = Some(SettledAs::Superseded);
            }
            other => {
                store
                    .record_unapplied_output(attempt, &unapplied_output("late", &completion.output, chrono::Utc::now()))
                    .await?;
                tracing::info!(outcome = ?other, "output arrived for an attempt already settled or no longer held; kept as unapplied");
            }
        },
        Err(error) => match error.class {
            FailureClass::Definitive { .. } => {
                let transition =
                    store.fail_attempt(attempt, &attempt_error(error), worker.catalog.as_ref(), holder, usage).await?;
                tracing::info!(%error, outcome = ?transition, "attempt failed");
                if let Transition::Failed { next } = &transition {
                    tracing::Span::current().record("attempt.state", "failed");
                    metrics::attempt(provider, SettledAs::Failed);
                    settled = Some(SettledAs::Failed);
                    if let Some(next) = next {
                        tracing::info!(next.number = next.number, next.provider = %next.provider, "the retry policy added an attempt");
                        worker.signals.work_available_after(next.delay);
                    }
                }
            }
            FailureClass::Canceled => {
                let transition = store.abort_attempt(attempt, &attempt_error(error), holder, usage).await?;
                tracing::info!(outcome = ?transition, "attempt canceled: its call was aborted");
                if transition == Transition::Applied {
                    tracing::Span::current().record("attempt.state", "canceled");
                    metrics::attempt(provider, SettledAs::Canceled);
                    settled = Some(SettledAs::Canceled);
                }
            }
            FailureClass::Ambiguous => {
                let transition = store.mark_unknown(attempt, &attempt_error(error), holder, usage).await?;
                tracing::warn!(%error, outcome = ?transition, "attempt outcome unknown; new attempts wait for reconciliation");
                if transition == Transition::Applied {
                    tracing::Span::current().record("attempt.state", "unknown");
                    metrics::attempt(provider, SettledAs::Unknown);
                    settled = Some(SettledAs::Unknown);
                }
            }
        },
    }
    Ok(settled)
}

/// What an outcome used: the provider's count when it answered (with an
/// output, or with one that broke the contract, which it charged for all
/// the same); the estimate when the outcome is unknown or the provider
/// did not count; for an aborted call, what the provider's cancel call
/// said it used, else the estimate, or nothing when nothing was sent;
/// nothing for a definitive failure without an answer, which it did not
/// charge.
fn usage_of(outcome: &Result<Completion, ProviderError>, estimate: Option<Usage>) -> Option<Usage> {
    match outcome {
        Ok(completion) => completion.usage.or(estimate),
        Err(error) if error.class == FailureClass::Ambiguous => estimate,
        Err(error) if error.class == FailureClass::Canceled => {
            let sent = error.facts.sent.unwrap_or(true);
            error.facts.usage.or(estimate.filter(|_| sent))
        }
        Err(error) => error.facts.usage,
    }
}
