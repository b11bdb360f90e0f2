//! Running one claimed attempt, and recording any outcome (the worker's or
//! the reconciler's) through the store's guarded transitions.

use std::time::Duration;

use serde_json::json;
use tracing::Instrument;

use super::Worker;
use crate::domain::AttemptError;
use crate::provider::{self, Completion, FailureClass, ProviderError, ProviderRequest};
use crate::store::{self, AttemptRef, ClaimedAttempt, Transition};

/// Calls the provider within the attempt's deadline and records the outcome.
pub(super) async fn run(worker: &Worker, claimed: ClaimedAttempt) {
    let span = tracing::info_span!(
        "attempt",
        owner = %claimed.attempt.owner,
        job.id = %claimed.attempt.job_id,
        attempt.number = claimed.attempt.number,
        attempt.id = %claimed.id,
        provider = %claimed.provider,
    );
    async {
        let outcome = match worker.providers.get(&claimed.provider) {
            None => Err(ProviderError::new(
                FailureClass::Definitive { retryable: false },
                "provider-not-configured",
                None,
                format!("no provider named '{}' is configured on this worker", claimed.provider),
            )),
            Some(provider) => {
                let request = ProviderRequest {
                    attempt_id: claimed.id,
                    task: claimed.task.clone(),
                    messages: provider::render_messages(&claimed.task, &claimed.input),
                    input: claimed.input.clone(),
                };
                // One deadline for connect, headers and body.
                let timeout = provider.settings().timeout();
                match tokio::time::timeout(timeout, provider.call(&request)).await {
                    Ok(result) => result,
                    Err(_) => Err(ProviderError::deadline(timeout)),
                }
            }
        };
        record_outcome(worker, &claimed.attempt, outcome).await;
    }
    .instrument(span)
    .await;
}

/// The stored form of a provider failure.
fn attempt_error(error: &ProviderError) -> AttemptError {
    let retryable = matches!(error.class, FailureClass::Definitive { retryable: true });
    AttemptError {
        kind: error.kind.to_owned(),
        message: error.message.clone(),
        detail: json!({ "status": error.status, "retryable": retryable }),
    }
}

/// Checks an output against the task's contract before it may win.
fn check_contract(completion: Completion) -> Result<Completion, ProviderError> {
    if completion.output.is_object() {
        Ok(completion)
    } else {
        Err(ProviderError::contract_violation("the output is not a JSON object"))
    }
}

/// How long an outcome is retried while the database cannot record it.
const RECORD_PATIENCE: Duration = Duration::from_secs(300);

/// Records what became of an attempt: an output goes through the job's
/// compare-and-swap; a definitive failure fails it (and the retry policy may
/// add the next attempt in the same transaction); an ambiguous one makes it
/// `unknown`. Every transition is guarded, so retrying one after a database
/// error is safe; it is retried for minutes, through a database failover.
/// An outcome that still cannot be recorded is left to the reaper and the
/// reconciler, which will find the attempt `unknown`.
pub async fn record_outcome(worker: &Worker, attempt: &AttemptRef, outcome: Result<Completion, ProviderError>) {
    let outcome = outcome.and_then(check_contract);
    let started = tokio::time::Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        match record_once(worker, attempt, &outcome).await {
            Ok(()) => {
                worker.signals.job_changed(attempt.job_id);
                return;
            }
            Err(error) if started.elapsed() < RECORD_PATIENCE => {
                tracing::warn!(%error, "recording the attempt's outcome failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(error) => {
                tracing::error!(%error, "the attempt's outcome could not be recorded; it will be reconciled as unknown");
                return;
            }
        }
    }
}

async fn record_once(worker: &Worker, attempt: &AttemptRef, outcome: &Result<Completion, ProviderError>) -> store::Result<()> {
    let store = worker.store.as_ref();
    match outcome {
        Ok(completion) => match store.finish_attempt(attempt, &completion.output).await? {
            Transition::Won { canceled } => tracing::info!(?canceled, "attempt succeeded and won the job"),
            Transition::Lost { .. } => {} // logged by the store with both numbers
            other => tracing::info!(outcome = ?other, "output arrived for an attempt that was already settled"),
        },
        Err(error) => match error.class {
            FailureClass::Definitive { .. } => {
                let transition = store.fail_attempt(attempt, &attempt_error(error), worker.catalog.as_ref()).await?;
                tracing::info!(%error, outcome = ?transition, "attempt failed");
                if let Transition::Failed { next: Some(next) } = &transition {
                    tracing::info!(next.number = next.number, next.provider = %next.provider, "the retry policy added an attempt");
                    worker.signals.work_available_after(next.delay);
                }
            }
            FailureClass::Ambiguous => {
                let transition = store.mark_unknown(attempt, &attempt_error(error)).await?;
                tracing::warn!(%error, outcome = ?transition, "attempt outcome unknown; new attempts wait for reconciliation");
            }
        },
    }
    Ok(())
}
