//! Running one claimed attempt, and recording any outcome (the worker's or
//! the reconciler's) through the store's guarded transitions.
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

use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::Instrument;

use super::Worker;
use crate::domain::{AttemptError, Usage, unapplied_output};
use crate::metrics::{self, Settled};
use crate::provider::{Completion, FailureClass, ProviderError, RequestRef};
use crate::signals::CallWatch;
use crate::store::{self, AttemptRef, AttemptUsage, ClaimedAttempt, Transition};

/// The error kind of an attempt not sent because its lease ran out first.
const LEASE_LOST: &str = "lease-lost";

/// The error kind of an attempt whose call was aborted because its job had finished.
const CANCELED: &str = "canceled";

/// The error kind of an attempt not sent because its provider's tokens per
/// minute were spent.
const TOKENS_SPENT: &str = "provider-tokens-per-minute";

/// The longest a provider's `Retry-After` pauses it and puts an attempt off.
const MAX_PAUSE: Duration = Duration::from_secs(15 * 60);

/// The longest wait for a provider's answer to its cancel call.
const CANCEL_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A worker's hold on the attempt it records: its settlements are fenced by
/// it, and must land before the lease ends.
#[derive(Clone, Copy)]
struct Claim<'a> {
    worker: &'a str,
    lease_end: Instant,
}

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
    crate::telemetry::adopt(&span, claimed.trace.as_ref());
    async {
        let cancels = worker.catalog.task(&claimed.task).is_some_and(|task| task.settings.cancel_losers);
        let mut watch = cancels.then(|| worker.signals.watch_call(claimed.attempt.job_id, claimed.id));
        let (outcome, progress) = call(worker, &claimed, lease_end, watch.as_mut()).await;
        drop(watch);
        if matches!(&outcome, Err(error) if error.kind == LEASE_LOST) {
            tracing::warn!("the attempt's lease ran out before its request was sent: not sent, left to the reaper");
            return;
        }
        if let Some(id) = progress.provider_request_id.as_deref().filter(|_| !progress.kept) {
            keep_provider_request(worker, &claimed.attempt, id).await;
        }
        if let Err(error) = &outcome
            && let Some((wait, detail)) = refused_before_any_work(error)
            && requeue(worker, &claimed, wait, detail).await
        {
            return;
        }
        let estimate = progress.estimate;
        if let Some(park) = crate::failpoints::parked_at("worker-before-record") {
            tokio::time::sleep(park).await;
        }
        let claim = Claim { worker: &worker.id, lease_end };
        record_metered_outcome(
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
    }
    .instrument(span)
    .await;
}

/// A refusal that did no work and says how long to wait: the provider's
/// 429 with `Retry-After`, or this provider's tokens per minute spent
/// before the send. How long (at most [`MAX_PAUSE`]), and the detail of
/// the `attempt-requeued` event.
fn refused_before_any_work(error: &ProviderError) -> Option<(Duration, Value)> {
    let reason = match (error.status, error.kind) {
        (Some(429), _) => "provider-rate-limited",
        (None, TOKENS_SPENT) => TOKENS_SPENT,
        _ => return None,
    };
    let wait = Duration::from_millis(error.detail.get("retry_after_ms")?.as_u64()?).min(MAX_PAUSE);
    Some((wait, json!({ "reason": reason, "status": error.status, "message": error.message })))
}

/// Puts the claimed attempt back to `pending` for `wait` and pauses its
/// provider as long, for every worker: whether it was put back (otherwise
/// the refusal is recorded as the failure it is; the provider is paused
/// all the same). A provider's own refusals count against
/// `worker.max_requeues`; this worker's tokens per minute do not, since the
/// provider never saw the request.
async fn requeue(worker: &Worker, claimed: &ClaimedAttempt, wait: Duration, detail: Value) -> bool {
    let counted = detail["reason"] != TOKENS_SPENT;
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
        None => Err(cancel_at_provider(worker, claimed, lease_end, &progress).await),
    };
    if let (Err(error), Some(id)) = (&mut outcome, &progress.provider_request_id)
        && error.class == FailureClass::Ambiguous
    {
        match &mut error.detail {
            Value::Object(detail) => {
                detail.insert("provider_request_id".into(), json!(id));
            }
            other => *other = json!({ "provider_request_id": id }),
        }
    }
    (outcome, progress)
}

/// After a call was aborted because its job had finished: tells the
/// provider to stop, where it has a cancel call and the request may have
/// left, within the lease; the failure to record says what is known (in
/// its detail: `sent`, `cancel_call`, and what the provider said).
async fn cancel_at_provider(
    worker: &Worker,
    claimed: &ClaimedAttempt,
    lease_end: Instant,
    progress: &Progress,
) -> ProviderError {
    let canceled = |message: &str, detail: Value| {
        let mut error = ProviderError::new(FailureClass::Canceled, CANCELED, None, message);
        error.detail = detail;
        error
    };
    if !progress.sent {
        return canceled("its job finished before the request was sent; nothing was sent", json!({ "sent": false }));
    }
    let message = "its job finished while the call was in flight; the call was aborted";
    let Some(provider) = worker.providers.get(&claimed.provider) else {
        return canceled(message, json!({ "sent": true, "cancel_call": "none" }));
    };
    let margin = Duration::from_millis(worker.settings.lease_margin_ms);
    let left = lease_end.saturating_duration_since(Instant::now()).saturating_sub(margin).min(CANCEL_CALL_TIMEOUT);
    let client_id = claimed.id.to_string();
    let request = RequestRef { client_id: &client_id, provider_id: progress.provider_request_id.as_deref() };
    let asked = tokio::time::timeout(left, provider.cancel(request)).await;
    let (said, detail) = match asked {
        Ok(None) => ("", json!({ "sent": true, "cancel_call": "none" })),
        Ok(Some(Ok(answer))) => (
            " and canceled at the provider",
            json!({ "sent": true, "cancel_call": "made", "provider_status": answer.status, "usage": answer.usage }),
        ),
        Ok(Some(Err(error))) => {
            ("", json!({ "sent": true, "cancel_call": "failed", "cancel_error": error.to_string() }))
        }
        Err(_) => (
            "",
            json!({ "sent": true, "cancel_call": "failed",
                               "cancel_error": format!("no answer within {} ms", left.as_millis()) }),
        ),
    };
    tracing::info!(cancel_call = %detail["cancel_call"], "the attempt's call was aborted: its job finished");
    canceled(&format!("{message}{said}"), detail)
}

async fn call_counted(
    worker: &Worker,
    claimed: &ClaimedAttempt,
    lease_end: Instant,
    progress: &mut Progress,
) -> Result<Completion, ProviderError> {
    let not_configured = |what: &str| {
        ProviderError::new(
            FailureClass::Definitive { retryable: false },
            "not-configured",
            None,
            format!("{what} is not configured on this worker"),
        )
    };
    let provider = worker
        .providers
        .get(&claimed.provider)
        .ok_or_else(|| not_configured(&format!("provider '{}'", claimed.provider)))?;
    let task = worker.catalog.task(&claimed.task).ok_or_else(|| not_configured(&format!("task '{}'", claimed.task)))?;
    let settings = provider.settings();
    let mut prepared =
        task.contract.prepare(&task.name, settings, claimed.id.to_string(), &claimed.input, settings.temperature)?;
    // The call is a client span of the attempt's trace, named and described
    // as OpenTelemetry's GenAI conventions say; it carries the trace onward.
    // (The attempt's fields again: a log line shows its innermost span's.)
    let call_span = tracing::info_span!(
        "provider call",
        owner = %claimed.attempt.owner,
        job.id = %claimed.attempt.job_id,
        attempt.number = i64::from(claimed.attempt.number),
        provider = %claimed.provider,
        trace_id = claimed.trace.as_ref().map(|t| t.trace_id()),
        otel.name = %crate::telemetry::SpanName("chat", &settings.model),
        otel.kind = "client",
        gen_ai.system = "openai",
        gen_ai.operation.name = "chat",
        gen_ai.request.model = %settings.model,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    prepared.request.trace = crate::telemetry::outgoing(&call_span, claimed.trace.as_ref());
    progress.estimate = Some(Usage {
        prompt_tokens: i64::try_from(prepared.prompt_tokens).unwrap_or(i64::MAX),
        completion_tokens: i64::from(settings.max_output_tokens),
        estimated: true,
    });
    if let Some(per_minute) = settings.tokens_per_minute {
        let tokens = u64::try_from(prepared.prompt_tokens)
            .unwrap_or(u64::MAX)
            .saturating_add(u64::from(settings.max_output_tokens));
        let wait = match worker.store.reserve_tokens(&claimed.provider, tokens, per_minute).await {
            Ok(None) => None,
            Ok(Some(wait)) => Some(wait),
            Err(error) => {
                tracing::warn!(%error, "reserving the provider's tokens per minute failed: not sent, put off a second");
                Some(Duration::from_secs(1))
            }
        };
        if let Some(wait) = wait {
            metrics::claims_deferred(store::claims::Deferral::ProviderTokensPerMinute, 1);
            let message = format!(
                "the provider's {per_minute} tokens per minute are spent: {tokens} more fit in {} ms",
                wait.as_millis()
            );
            let mut error =
                ProviderError::new(FailureClass::Definitive { retryable: true }, TOKENS_SPENT, None, message);
            error.detail =
                json!({ "retry_after_ms": u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "tokens": tokens });
            return Err(error);
        }
    }
    if let Some(park) = crate::failpoints::parked_at("worker-before-send") {
        tokio::time::sleep(park).await;
    }
    // One deadline for connect, headers and body, inside the lease: checked
    // here, right before the send.
    let margin = Duration::from_millis(worker.settings.lease_margin_ms);
    let left = lease_end.saturating_duration_since(Instant::now()).saturating_sub(margin);
    if left.is_zero() {
        let message = "the lease ran out before the request was sent";
        return Err(ProviderError::new(FailureClass::Definitive { retryable: false }, LEASE_LOST, None, message));
    }
    let timeout = settings.timeout().min(left);
    let started = std::time::Instant::now();
    progress.sent = true;
    // A background request's id is kept on the attempt before it is
    // followed: the reconciler asks by it if the deadline comes first.
    let accepted = async |id: &str| {
        progress.provider_request_id = Some(id.to_owned());
        // One try here, not to delay following it; more after the call.
        progress.kept = match worker.store.record_provider_request(&claimed.attempt, id).await {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(%error, provider_request_id = id, "keeping the provider's request id failed; trying again after the call");
                false
            }
        };
    };
    let calling = tokio::time::timeout(timeout, crate::provider::call(provider.as_ref(), &prepared.request, accepted));
    let result = match calling.instrument(call_span.clone()).await {
        Ok(result) => result,
        Err(_) => Err(ProviderError::deadline(timeout)),
    };
    match &result {
        Ok(Completion { usage: Some(usage), .. }) => {
            call_span.record("gen_ai.usage.input_tokens", usage.prompt_tokens);
            call_span.record("gen_ai.usage.output_tokens", usage.completion_tokens);
        }
        Err(error) => {
            call_span.record("error.type", error.kind);
        }
        Ok(_) => {}
    }
    let outcome = match &result {
        Ok(_) => "answered",
        Err(error) if error.class == FailureClass::Ambiguous => "ambiguous",
        Err(_) => "failed",
    };
    crate::metrics::provider_call(&claimed.provider, outcome, started.elapsed());
    result
}

/// The stored form of a provider failure.
fn attempt_error(error: &ProviderError) -> AttemptError {
    let retryable = matches!(error.class, FailureClass::Definitive { retryable: true });
    let mut detail = json!({ "status": error.status, "retryable": retryable });
    if let Value::Object(extra) = &error.detail {
        detail.as_object_mut().expect("an object").extend(extra.clone());
    }
    AttemptError { kind: error.kind.to_owned(), message: error.message.clone(), detail }
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
    let mut until = Instant::now() + Duration::from_millis(worker.settings.failover_qualification_wait_ms);
    if let Some(claim) = claim {
        let margin = Duration::from_millis(worker.settings.lease_margin_ms);
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
async fn record_metered_outcome(
    worker: &Worker,
    attempt: &AttemptRef,
    task: &str,
    provider: &str,
    mut outcome: Result<Completion, ProviderError>,
    estimate: Option<Usage>,
    claim: Option<Claim<'_>>,
) {
    let holder = claim.map(|claim| claim.worker);
    let usage = usage_of(&outcome, estimate).map(|usage| AttemptUsage {
        usage,
        cost: worker.providers.get(provider).and_then(|p| p.settings().price.as_ref()).map(|price| price.cost(&usage)),
    });
    let mut rejected = None;
    if let Err(error) = &mut outcome
        && let Some(text) =
            error.detail.as_object_mut().and_then(|detail| detail.remove(crate::provider::answer::RECEIVED_TEXT))
    {
        rejected = Some(unapplied_output("contract-violation", &text, chrono::Utc::now()));
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
                rejected = Some(unapplied_output("contract-violation", &completion.output, chrono::Utc::now()));
                Err(error)
            }
        }
    });
    if matches!(&outcome, Err(error) if matches!(error.class, FailureClass::Definitive { .. })) {
        await_failover_qualifications(worker, task, claim).await;
    }
    let started = tokio::time::Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        let recorded =
            match record_once(worker, attempt, provider, &outcome, rejected.as_ref(), (holder, usage.as_ref())).await {
                Ok(None) => match &usage {
                    Some(usage) => worker.store.record_usage(attempt, usage).await.map(|_| None),
                    None => Ok(None),
                },
                other => other,
            };
        match recorded {
            Ok(settled) => {
                if let (Some(settled), Some(usage)) = (settled, &usage) {
                    metrics::usage(provider, settled, &usage.usage, usage.cost.as_ref());
                }
                worker.signals.job_changed(attempt.job_id);
                if settled == Some(Settled::Succeeded) {
                    // The job is won: its other calls in flight here stop.
                    worker.signals.job_finished(attempt.job_id);
                }
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

/// Settles an output: a claim's in the next batch of this worker's outputs
/// ([`super::finishes`]), the reconciler's (no holder) alone.
async fn finish(
    worker: &Worker,
    attempt: &AttemptRef,
    output: &Value,
    (holder, usage): (Option<&str>, Option<&AttemptUsage>),
) -> store::Result<Transition> {
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
    (holder, usage): (Option<&str>, Option<&AttemptUsage>),
) -> store::Result<Option<Settled>> {
    let store = worker.store.as_ref();
    let mut settled = None;
    if let Some(rejected) = rejected {
        store.record_unapplied_output(attempt, rejected).await?;
    }
    match outcome {
        Ok(completion) => match finish(worker, attempt, &completion.output, (holder, usage)).await? {
            Transition::Won { canceled } => {
                tracing::Span::current().record("attempt.state", "succeeded");
                tracing::info!(?canceled, "attempt succeeded and won the job");
                metrics::attempt(provider, Settled::Succeeded);
                metrics::attempts_canceled(canceled.len());
                settled = Some(Settled::Succeeded);
            }
            // Logged by the store with both numbers.
            Transition::Lost { .. } => {
                tracing::Span::current().record("attempt.state", "superseded");
                metrics::attempt(provider, Settled::Superseded);
                metrics::race_lost(provider);
                settled = Some(Settled::Superseded);
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
                    metrics::attempt(provider, Settled::Failed);
                    settled = Some(Settled::Failed);
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
                    metrics::attempt(provider, Settled::Canceled);
                    settled = Some(Settled::Canceled);
                }
            }
            FailureClass::Ambiguous => {
                let transition = store.mark_unknown(attempt, &attempt_error(error), holder, usage).await?;
                tracing::warn!(%error, outcome = ?transition, "attempt outcome unknown; new attempts wait for reconciliation");
                if transition == Transition::Applied {
                    tracing::Span::current().record("attempt.state", "unknown");
                    metrics::attempt(provider, Settled::Unknown);
                    settled = Some(Settled::Unknown);
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
    let said =
        |error: &ProviderError| error.detail.get("usage").and_then(|usage| serde_json::from_value(usage.clone()).ok());
    match outcome {
        Ok(completion) => completion.usage.or(estimate),
        Err(error) if error.class == FailureClass::Ambiguous => estimate,
        Err(error) if error.class == FailureClass::Canceled => {
            let sent = error.detail.get("sent").and_then(Value::as_bool).unwrap_or(true);
            said(error).or(estimate.filter(|_| sent))
        }
        Err(error) => said(error),
    }
}
