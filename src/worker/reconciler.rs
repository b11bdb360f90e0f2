//! The reconciler: asks providers that support a status lookup what became
//! of unknown attempts, by attempt id (or by the provider's own id of the
//! request: a background response's), with exponential backoff, and settles
//! them through the same transitions as the worker: a late output through
//! the compare-and-swap (it may still win if nothing else has), a failure as
//! `failed` (after which the retry policy may go on), a request the provider
//! canceled as `canceled`. Unknown attempts of providers without a lookup,
//! and background requests whose id never came back, wait for an
//! operator's resolve.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument as _;

use super::{Worker, record_outcome};
use crate::process::metrics::Lookup;
use crate::provider::{Completion, FailureClass, FailureKind, Provider, ProviderError, RequestRef, RequestStatus};
use crate::store::UnknownAttempt;

pub(super) async fn run(worker: Arc<Worker>, mut shutdown: watch::Receiver<bool>) {
    let interval = worker.settings.reconcile_interval;
    let askable: Vec<String> =
        worker.providers.iter().filter(|(_, p)| p.settings().has_status_lookup()).map(|(n, _)| n.clone()).collect();
    // While one lookup runs, no other reconciler takes the same attempt.
    let hold = worker.settings.reconcile_backoff_max.max(Duration::from_secs(30));
    while !*shutdown.borrow() {
        if !askable.is_empty() {
            match worker.store.claim_reconciliations(&askable, 32, hold).await {
                Ok(due) => {
                    let mut lookups = tokio::task::JoinSet::new();
                    for unknown in due {
                        let worker = worker.clone();
                        lookups.spawn(async move { reconcile(&worker, unknown).await });
                    }
                    while lookups.join_next().await.is_some() {}
                }
                Err(error) => tracing::warn!(%error, "claiming unknown attempts failed"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Asks the provider what became of one unknown attempt, and settles it
/// by the answer, or asks again later.
async fn reconcile(worker: &Worker, unknown: UnknownAttempt) {
    let attempt = &unknown.attempt;
    let Some(provider) = worker.providers.get(&unknown.provider) else { return };
    let later = worker.reconcile_backoff(unknown.reconcile_count);
    let output = worker.catalog.output_of(&unknown.task);
    let Some(answer) = ask_status(provider.as_ref(), &unknown, output).await else {
        return wait_for_operator(worker, &unknown).await;
    };
    count_lookup(&unknown.provider, &answer);
    match answer {
        Ok(RequestStatus::Succeeded(completion)) => settle(worker, &unknown, Ok(completion)).await,
        Ok(RequestStatus::Failed(error)) => settle(worker, &unknown, Err(error)).await,
        Ok(RequestStatus::Canceled(usage)) => {
            settle(worker, &unknown, Err(ProviderError::canceled_at_provider(usage))).await
        }
        Ok(RequestStatus::NotFound) if absence_settles(provider.settings(), unknown.unknown_for) => {
            // The provider records every request it takes, and long past the
            // attempt's deadline it has none: it was never received.
            let error = ProviderError::new(
                FailureClass::Definitive { retryable: true },
                FailureKind::NotReceived,
                None,
                "the provider has no record of this request",
            );
            settle(worker, &unknown, Err(error)).await;
        }
        Ok(RequestStatus::NotFound) => {
            if !provider.settings().absence_is_final() && unknown.reconcile_count == 1 {
                tracing::warn!(
                    owner = %attempt.owner, job.id = %attempt.job_id, attempt.number = attempt.number,
                    "the provider's status lookup has no record of this attempt, but its absence is not final \
                     (absence_is_final): it stays unknown until the provider finds it or an operator resolves it"
                );
            }
            postpone(worker, &unknown, later).await;
        }
        Ok(RequestStatus::Running) => postpone(worker, &unknown, later).await,
        Err(error) => {
            tracing::warn!(%error, attempt.id = %unknown.id, "status lookup failed; asking again later");
            postpone(worker, &unknown, later).await;
        }
    }
}

/// The provider's status of the attempt's request, within the provider's
/// timeout (a deadline error past it); `None` when there is nothing to ask
/// by (a background request whose id never came back).
async fn ask_status(
    provider: &dyn Provider,
    unknown: &UnknownAttempt,
    output: crate::domain::OutputKind,
) -> Option<Result<RequestStatus, ProviderError>> {
    let timeout = provider.settings().timeout;
    let client_id = unknown.id.to_string();
    let asked = RequestRef { client_id: &client_id, provider_id: unknown.provider_request_id.as_deref(), output };
    match tokio::time::timeout(timeout, provider.status(asked)).await {
        Ok(answer) => answer,
        Err(_) => Some(Err(ProviderError::deadline(timeout, timeout))),
    }
}

/// Leaves an attempt the provider cannot be asked about to an operator's
/// resolve (said once, at its first lookup), asking again at the longest
/// backoff.
async fn wait_for_operator(worker: &Worker, unknown: &UnknownAttempt) {
    let attempt = &unknown.attempt;
    if unknown.reconcile_count == 1 {
        tracing::warn!(
            owner = %attempt.owner, job.id = %attempt.job_id, attempt.number = attempt.number,
            "the provider gave no id for this attempt's request, so it cannot be asked about it: \
             it stays unknown until an operator resolves it"
        );
    }
    postpone(worker, unknown, worker.settings.reconcile_backoff_max).await;
}

/// Counts a status lookup of `provider` by what it answered.
fn count_lookup(provider: &str, answer: &Result<RequestStatus, ProviderError>) {
    let result = match answer {
        Ok(RequestStatus::Succeeded(_)) => Lookup::Succeeded,
        Ok(RequestStatus::Failed(_)) => Lookup::Failed,
        Ok(RequestStatus::Canceled(_)) => Lookup::Canceled,
        Ok(RequestStatus::Running) => Lookup::Running,
        Ok(RequestStatus::NotFound) => Lookup::NotFound,
        Err(_) => Lookup::Error,
    };
    crate::process::metrics::reconciliation(provider, result);
}

/// Records the `outcome` the provider told of the unknown attempt, in a
/// `reconcile` span of its trace.
async fn settle(worker: &Worker, unknown: &UnknownAttempt, outcome: Result<Completion, ProviderError>) {
    let attempt = &unknown.attempt;
    let (lookups, trace) = (unknown.reconcile_count, unknown.trace.as_ref());
    let trace_id = trace.map(|t| t.trace_id());
    let span = tracing::info_span!(
        "reconcile",
        owner = %attempt.owner, job.id = %attempt.job_id, attempt.number = attempt.number,
        attempt.state = tracing::field::Empty, trace_id, lookups,
    );
    crate::process::telemetry::adopt(&span, trace);
    async {
        tracing::info!("reconciling an unknown attempt");
        record_outcome(worker, attempt, &unknown.task, &unknown.provider, outcome).await;
    }
    .instrument(span)
    .await;
}

/// Whether a "no such request" settles an attempt unknown for `unknown_for`
/// as never received: only from a provider whose absence is final, and only
/// once its grace has passed after the attempt's deadline (an attempt
/// becomes unknown no earlier than it started, so `unknown_for` past the
/// deadline plus the grace is past both).
fn absence_settles(settings: &crate::config::ProviderSettings, unknown_for: Duration) -> bool {
    settings.absence_is_final() && unknown_for > settings.timeout + settings.absence_grace
}

async fn postpone(worker: &Worker, unknown: &UnknownAttempt, delay: Duration) {
    if let Err(error) = worker.store.postpone_reconciliation(&unknown.attempt, delay).await {
        tracing::warn!(%error, "postponing a status lookup failed");
    }
}
