//! Running one claimed attempt: rendered, sent within its deadline and its
//! lease, and aborted when its job ends; what became of it is recorded by
//! [`super::record`], through the store's guarded transitions.
//!
//! The worker's claim is fenced at both ends. Its lease covers the whole
//! call: the provider's deadline ends no later than the lease, less its
//! margin, by this process's monotonic clock, and an attempt whose lease
//! has run out by the moment of the send is not sent (a worker paused
//! after its claim wakes to find its attempt reaped, perhaps reconciled and
//! retried under a new id). Its settlements apply only while the attempt is
//! `running` under its unexpired lease ([`Transition::Fenced`] otherwise).
//!
//! When the attempt's task has `cancel_losers`, the call is watched for the
//! end of its job (another attempt won, or the owner canceled): the request
//! is then dropped, which closes its connection, the provider is told to
//! stop where it has a cancel call, and the attempt is recorded `canceled`
//! with what it used as the provider said, or at worst. An answer that had
//! arrived by then is recorded as usual (a lost race: `superseded`).

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;

mod call;
mod failures;

use call::call_counted;
use failures::refused_before_any_work;

use super::Worker;
use super::record::{Claim, record_metered_outcome};
use crate::domain::{AttemptOrigin, Usage};
use crate::process::metrics::{self};
use crate::process::signals::CallWatch;
use crate::provider::{CancelCall, Completion, FailureClass, FailureFacts, FailureKind, ProviderError, RequestRef};
use crate::store::{AttemptRef, ClaimedAttempt, Transition};

/// The longest wait for a provider's answer to its cancel call.
const CANCEL_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Renders the prompt, checks it fits, calls the provider within the
/// attempt's deadline and its lease (which ends at `lease_end`), and
/// records the outcome.
pub(super) async fn run(worker: &Worker, claimed: ClaimedAttempt, lease_end: Instant) {
    let span = tracing::info_span!(
        "attempt",
        owner = %claimed.attempt.owner,
        job.id = %claimed.attempt.job_id,
        attempt.number = i64::from(claimed.attempt.number),
        attempt.id = %claimed.id,
        provider = %claimed.provider,
        attempt.state = tracing::field::Empty,
        trace_id = claimed.trace.as_ref().map(|t| t.trace_id()),
    );
    crate::process::telemetry::adopt(&span, claimed.trace.as_ref());
    async {
        tracing::debug!(task = %claimed.task, "attempt claimed");
        let cancels = worker.catalog.task(&claimed.task).is_some_and(|task| task.settings.cancel_losers);
        let mut watch = cancels.then(|| worker.signals.watch_call(claimed.attempt.job_id, claimed.id));
        let (outcome, progress) = call(worker, &claimed, lease_end, watch.as_mut()).await;
        drop(watch);
        if matches!(&outcome, Err(error) if error.kind == FailureKind::LeaseLost) {
            tracing::warn!("the attempt's lease ran out before its request was sent: not sent, left to the reaper");
            return;
        }
        if let Err(error) = &outcome
            && error.kind == FailureKind::SettledElsewhere
        {
            tracing::info!(%error, "the attempt was settled while its call waited for the provider's callback");
            return;
        }
        let refused = outcome.as_ref().err().and_then(|error| Some((error, refused_before_any_work(error)?)));
        // A refusal's request id is its error's; the attempt keeps the one
        // of the request that was answered.
        if let Some(id) = progress.provider_request_id.as_deref().filter(|_| !progress.kept && refused.is_none()) {
            keep_provider_request(worker, &claimed.attempt, id).await;
        }
        if let Some((error, (wait, detail))) = refused
            && requeue(worker, &claimed, wait, detail, error.kind != FailureKind::TokensSpent).await
        {
            return;
        }
        let estimate = progress.estimate;
        if let Some(park) = crate::failpoints::parked_at("worker-before-record") {
            tokio::time::sleep(park).await;
        }
        let claim = Claim { worker: &worker.id, lease_end };
        let settled = record_metered_outcome(
            worker,
            &claimed.attempt,
            &claimed.task,
            &claimed.provider,
            outcome,
            estimate,
            Some(claim),
        )
        .instrument(tracing::info_span!(
            "settle",
            owner = %claimed.attempt.owner,
            job.id = %claimed.attempt.job_id,
            attempt.number = i64::from(claimed.attempt.number),
            provider = %claimed.provider,
            attempt.state = tracing::field::Empty,
            trace_id = claimed.trace.as_ref().map(|t| t.trace_id()),
        ))
        .await;
        if claimed.origin == AttemptOrigin::Hedge && settled == Some(metrics::SettledAs::Succeeded) {
            metrics::hedge_won(&claimed.provider);
        }
    }
    .instrument(span)
    .await;
}

/// Puts the claimed attempt back to `pending` for `wait` and pauses its
/// provider as long, for every worker: whether it was put back (otherwise
/// the refusal is recorded as the failure it is; the provider is paused
/// all the same). A `counted` refusal (the provider's own) counts against
/// `worker.max_requeues`; this worker's tokens per minute do not, since the
/// provider never saw the request.
async fn requeue(worker: &Worker, claimed: &ClaimedAttempt, wait: Duration, detail: Value, counted: bool) -> bool {
    let max = counted.then_some(worker.settings.max_requeues);
    let requeued = if max == Some(0) {
        Ok(Transition::Stale(crate::domain::AttemptState::Running))
    } else {
        worker.store.requeue_attempt(&claimed.attempt, &worker.id, (wait, max), Some(&claimed.provider), detail).await
    };
    let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    match requeued {
        Ok(Transition::Applied) => {
            tracing::info!(
                wait_ms,
                "the provider refused the request before any work: the attempt is pending again, the provider paused"
            );
            worker.signals.job_changed(claimed.attempt.job_id);
            return true;
        }
        Ok(other) => {
            tracing::info!(outcome = ?other, "the refused attempt was not put back (its job finished, holds another \
                                    pending attempt, or it was put back max_requeues times): recorded as failed")
        }
        Err(error) => tracing::warn!(%error, "putting the refused attempt back failed: recorded as failed"),
    }
    if let Err(error) = worker.store.pause_provider(&claimed.provider, wait).await {
        tracing::warn!(%error, wait_ms, "pausing the provider as it asked failed");
    }
    false
}

/// What a call got to: the most it could use, once the prompt was
/// rendered and counted, whether its request may have left, and the
/// provider's id of it (a background response's), kept on the attempt or not.
#[derive(Default)]
struct Progress {
    estimate: Option<Usage>,
    sent: bool,
    provider_request_id: Option<String>,
    kept: bool,
    /// Its answer passed its bound: the call was stopped.
    stopped: bool,
    /// It is its provider's breaker's probe.
    probe: bool,
}

/// Keeps the provider's id of the attempt's request on the attempt; says
/// whether it is kept.
async fn keep_provider_request(worker: &Worker, attempt: &AttemptRef, id: &str) -> bool {
    let mut delay = Duration::from_millis(100);
    for _ in 0..5 {
        match worker.store.record_provider_request(attempt, id).await {
            Ok(_) => return true,
            Err(error) => {
                tracing::warn!(%error, provider_request_id = id, "keeping the provider's request id failed; retrying")
            }
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
    }
    tracing::error!(
        provider_request_id = id,
        "the provider's request id could not be kept: if the outcome is unknown, \
                     only an operator can settle it"
    );
    false
}

/// Calls the provider; with the outcome, how far the call got (see
/// [`Progress`]). With a `watch`, the end of the job aborts the call (an
/// answer ready at the same moment is taken first). An unknown outcome of
/// a request the provider gave an id says it in its detail.
async fn call(
    worker: &Worker,
    claimed: &ClaimedAttempt,
    lease_end: Instant,
    watch: Option<&mut CallWatch<'_>>,
) -> (Result<Completion, ProviderError>, Progress) {
    let mut progress = Progress::default();
    let answered = {
        let calling = call_counted(worker, claimed, lease_end, &mut progress);
        match watch {
            None => Some(calling.await),
            Some(watch) => tokio::select! {
                biased;
                outcome = calling => Some(outcome),
                () = watch.job_finished() => None,
            },
        }
    };
    let mut outcome = match answered {
        Some(outcome) => outcome,
        None => match call::settled_by_callback(worker, claimed).await {
            // Its own callback ended the job: nothing to cancel.
            Some(settled) => Err(settled),
            None => Err(cancel_at_provider(worker, claimed, lease_end, &progress).await),
        },
    };
    if let Err(error) = &mut outcome
        && progress.stopped
    {
        // Stopped here: the provider is told to stop too, where it can be.
        let told = stop_at_provider(worker, claimed, lease_end, &progress).await;
        let usage = told.usage.or(error.facts.usage);
        *error.facts = FailureFacts { usage, usage_said: false, ..told };
    }
    if let (Err(error), Some(id)) = (&mut outcome, &progress.provider_request_id)
        && error.class == FailureClass::Ambiguous
    {
        error.facts.provider_request_id = Some(id.clone());
    }
    // An answer's id of the request (the Messages API's `request-id`) is
    // kept on the attempt too, after the call.
    let answered_id = match &outcome {
        Ok(completion) => completion.provider_request_id.as_ref(),
        Err(error) => error.facts.provider_request_id.as_ref(),
    };
    if progress.provider_request_id.is_none()
        && let Some(id) = answered_id
    {
        progress.provider_request_id = Some(id.clone());
    }
    (outcome, progress)
}

/// After a call was aborted because its job had finished: tells the
/// provider to stop ([`stop_at_provider`]); the failure to record says
/// what is known (in its detail: `sent`, `cancel_call`, and what the
/// provider said).
async fn cancel_at_provider(
    worker: &Worker,
    claimed: &ClaimedAttempt,
    lease_end: Instant,
    progress: &Progress,
) -> ProviderError {
    let canceled = |message: &str, facts: FailureFacts| {
        ProviderError::new(FailureClass::Canceled, FailureKind::Canceled, None, message).with_facts(facts)
    };
    if !progress.sent {
        let facts = FailureFacts { sent: Some(false), ..FailureFacts::default() };
        return canceled("its job finished before the request was sent; nothing was sent", facts);
    }
    let facts = stop_at_provider(worker, claimed, lease_end, progress).await;
    let said = if facts.cancel_call == Some(CancelCall::Made) { " and canceled at the provider" } else { "" };
    let cancel_call = facts.cancel_call.map_or("", CancelCall::as_str);
    tracing::info!(cancel_call, "the attempt's call was aborted: its job finished");
    canceled(&format!("its job finished while the call was in flight; the call was aborted{said}"), facts)
}

/// Tells the provider to stop working on a sent request whose call was
/// aborted, where it has a cancel call, within the lease: what is known
/// (`sent`, `cancel_call`, and what the provider said, with the usage it
/// reported).
async fn stop_at_provider(
    worker: &Worker,
    claimed: &ClaimedAttempt,
    lease_end: Instant,
    progress: &Progress,
) -> FailureFacts {
    let sent = |cancel_call: CancelCall| FailureFacts {
        sent: Some(true),
        cancel_call: Some(cancel_call),
        ..FailureFacts::default()
    };
    let Some(provider) = worker.providers.get(&claimed.provider) else {
        return sent(CancelCall::None);
    };
    let margin = worker.settings.lease_margin;
    let left = lease_end.saturating_duration_since(Instant::now()).saturating_sub(margin).min(CANCEL_CALL_TIMEOUT);
    let client_id = claimed.id.to_string();
    let output = worker.catalog.output_of(&claimed.task);
    let request = RequestRef { client_id: &client_id, provider_id: progress.provider_request_id.as_deref(), output };
    match tokio::time::timeout(left, provider.cancel(request)).await {
        Ok(None) => sent(CancelCall::None),
        Ok(Some(Ok(answer))) => FailureFacts {
            provider_status: Some(answer.status),
            usage: answer.usage,
            usage_said: true,
            ..sent(CancelCall::Made)
        },
        Ok(Some(Err(error))) => FailureFacts { cancel_error: Some(error.to_string()), ..sent(CancelCall::Failed) },
        Err(_) => {
            let why = format!("no answer within {} ms", left.as_millis());
            FailureFacts { cancel_error: Some(why), ..sent(CancelCall::Failed) }
        }
    }
}
