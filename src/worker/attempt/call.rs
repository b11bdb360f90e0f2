//! One attempt's call of its provider, step by step: the prompt rendered
//! and counted, a span for the call, the breaker passed, the tokens of the
//! minute reserved, the deadline cut to the lease, the request sent (its
//! streamed output written as it comes), and its outcome reported.

use std::time::Duration;

use tokio::time::Instant;

use super::failures::{breaker_outcome, provider_open};
use super::{Progress, Worker};
use crate::domain::Usage;
use crate::domain::breaker::Passage;
use crate::process::metrics;
use crate::provider::{
    Completion, FailureClass, FailureFacts, FailureKind, Provider, ProviderError, ProviderRequest, millis,
};
use crate::store::{self, ClaimedAttempt};
use crate::task::catalog::Task;
use crate::task::contract::Prepared;
use crate::worker::output::{self, Bound, Written};
use tracing::Instrument;

/// Calls the provider with the attempt's prompt, rendered and counted, if
/// its breaker lets it through, its tokens per minute are left and its
/// lease has time left: the answer or the failure; `progress` says how far
/// the call got.
pub(super) async fn call_counted(
    worker: &Worker,
    claimed: &ClaimedAttempt,
    lease_end: Instant,
    progress: &mut Progress,
) -> Result<Completion, ProviderError> {
    let call = Call::new(worker, claimed)?;
    let mut prepared = call.prepare().await?;
    let call_span = call.create_span();
    prepared.request.trace = crate::process::telemetry::outgoing(&call_span, claimed.trace.as_ref());
    progress.estimate = call.estimate(&prepared);
    progress.probe = call.pass_breaker().await?;
    call.reserve_tokens(prepared.prompt_tokens).await?;
    if let Some(park) = crate::failpoints::parked_at("worker-before-send") {
        tokio::time::sleep(park).await;
    }
    let timeout = call.limit_to_lease(lease_end)?;
    let started = std::time::Instant::now();
    progress.sent = true;
    let result = call.send(&mut prepared, timeout, progress, &call_span).await;
    call.report(&result, &call_span, started, progress.probe).await;
    result
}

/// When the claimed attempt's provider calls back and the attempt is no
/// longer `running` (settled by the callback, or made `unknown` by the
/// reaper while its call waited), the failure that says so: nothing is
/// left to record. `None` otherwise, and when the database cannot say.
pub(super) async fn settled_by_callback(worker: &Worker, claimed: &ClaimedAttempt) -> Option<ProviderError> {
    let provider = worker.providers.get(&claimed.provider)?;
    if !provider.settings().answers_by_callback() {
        return None;
    }
    let attempt = &claimed.attempt;
    let job = match worker.store.get_job(&attempt.owner, attempt.job_id).await {
        Ok(job) => job?,
        Err(error) => {
            tracing::debug!(%error, "reading the attempt while waiting for its callback failed");
            return None;
        }
    };
    let state = job.attempts.into_iter().find(|a| a.number == attempt.number)?.state;
    (state != crate::domain::AttemptState::Running).then(|| {
        let message = format!("the attempt was settled ({}) while its call waited", state.as_str());
        let error = ProviderError::new(FailureClass::Canceled, FailureKind::SettledElsewhere, None, message);
        // What became of it, for the breaker.
        error.with_facts(FailureFacts { provider_status: Some(state.as_str().to_owned()), ..FailureFacts::default() })
    })
}

/// One attempt's call of its provider, as the steps of [`call_counted`]
/// share it.
struct Call<'a> {
    worker: &'a Worker,
    claimed: &'a ClaimedAttempt,
    provider: &'a dyn Provider,
    task: &'a Task,
}

impl<'a> Call<'a> {
    /// The call of the claimed attempt, if this worker has its provider
    /// and its task.
    fn new(worker: &'a Worker, claimed: &'a ClaimedAttempt) -> Result<Self, ProviderError> {
        let not_configured = |what: &str| {
            ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::NotConfigured,
                None,
                format!("{what} is not configured on this worker"),
            )
        };
        let provider = worker
            .providers
            .get(&claimed.provider)
            .ok_or_else(|| not_configured(&format!("provider '{}'", claimed.provider)))?;
        let task =
            worker.catalog.task(&claimed.task).ok_or_else(|| not_configured(&format!("task '{}'", claimed.task)))?;
        Ok(Self { worker, claimed, provider: provider.as_ref(), task })
    }

    /// Renders the request, its prompt counted by the provider where it
    /// counts tokens.
    async fn prepare(&self) -> Result<Prepared, ProviderError> {
        let (claimed, task, settings) = (self.claimed, self.task, self.provider.settings());
        let mut prepared = task.contract.prepare(
            &task.name,
            settings,
            claimed.id.to_string(),
            &claimed.input,
            settings.temperature,
        )?;
        if settings.count_tokens {
            prepared.prompt_tokens = crate::task::contract::counted(self.provider, &prepared).await?;
        }
        if settings.answers_by_callback() {
            prepared.request.callback_url = Some(self.callback_url().await?);
        }
        Ok(prepared)
    }

    /// The attempt's callback URL; a failure before anything was sent when
    /// it cannot be made: the database does not answer (retryable), or this
    /// process knows no URL of the API (`server.public_url`).
    async fn callback_url(&self) -> Result<String, ProviderError> {
        let attempt = &self.claimed.attempt;
        let unsent = |retryable, message: String| {
            let class = FailureClass::Definitive { retryable };
            let error = ProviderError::new(class, FailureKind::NotConfigured, None, message);
            error.with_facts(FailureFacts { sent: Some(false), ..FailureFacts::default() })
        };
        match self.worker.callbacks.url_for(attempt.job_id, attempt.number).await {
            Ok(Some(url)) => Ok(url),
            Ok(None) => Err(unsent(
                false,
                "the provider calls back, and this worker knows no URL of the API: set server.public_url".into(),
            )),
            Err(error) => Err(unsent(true, format!("the attempt's callback URL could not be made: {error}"))),
        }
    }

    /// Resolves once the attempt is no longer `running` (its provider's
    /// callback settled it, here or in another process, or the reaper made
    /// it `unknown`): looked at on every change of the job this process
    /// hears of, and every `poll_interval_ms` of the provider.
    async fn settled_elsewhere(&self) -> ProviderError {
        let (worker, attempt) = (self.worker, &self.claimed.attempt);
        let watch = worker.signals.watch_job(attempt.job_id);
        let interval = self.provider.settings().poll_interval;
        loop {
            let change = watch.next_change_but_a_claim();
            if let Some(settled) = settled_by_callback(worker, self.claimed).await {
                return settled;
            }
            tokio::select! {
                () = change => {}
                () = tokio::time::sleep(interval) => {}
            }
        }
    }

    /// The call's span, a client span of the attempt's trace.
    fn create_span(&self) -> tracing::Span {
        let (claimed, settings) = (self.claimed, self.provider.settings());
        // The call is a client span of the attempt's trace, named and described
        // as OpenTelemetry's GenAI conventions say; it carries the trace onward.
        // (The attempt's fields again: a log line shows its innermost span's.)
        let system = if settings.api() == crate::config::ProviderApi::Messages { "anthropic" } else { "openai" };
        tracing::info_span!(
            "provider call",
            owner = %claimed.attempt.owner,
            job.id = %claimed.attempt.job_id,
            attempt.number = i64::from(claimed.attempt.number),
            provider = %claimed.provider,
            trace_id = claimed.trace.as_ref().map(|t| t.trace_id()),
            otel.name = %crate::process::telemetry::SpanName("chat", &settings.model),
            otel.kind = "client",
            gen_ai.system = system,
            gen_ai.operation.name = "chat",
            gen_ai.request.model = %settings.model,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            error.type = tracing::field::Empty,
        )
    }

    /// The most the call can use: its prompt and the longest answer; none
    /// for a provider that counts no tokens (a Cog server).
    fn estimate(&self, prepared: &Prepared) -> Option<Usage> {
        let settings = self.provider.settings();
        (!settings.answers_by_callback()).then(|| Usage {
            prompt_tokens: i64::try_from(prepared.prompt_tokens).unwrap_or(i64::MAX),
            completion_tokens: i64::from(settings.max_output_tokens),
            estimated: true,
            ..Usage::default()
        })
    }

    /// Whether the call is its provider's breaker's probe. A provider whose
    /// breaker is open is not called: the attempt fails fast, as retryable,
    /// and the policy's chain goes on past it.
    async fn pass_breaker(&self) -> Result<bool, ProviderError> {
        let (worker, provider) = (self.worker, &self.claimed.provider);
        let breakers = worker.catalog.breakers();
        match breakers.passage(provider) {
            Passage::Go => Ok(false),
            Passage::Probe => {
                let probe_for = self.provider.settings().timeout + worker.settings.lease_margin;
                if !crate::task::breakers::take_probe(&worker.store, breakers, provider, probe_for).await {
                    return Err(provider_open("another attempt is its probe"));
                }
                tracing::info!("the provider's breaker cooled down: this attempt is its probe");
                Ok(true)
            }
            Passage::Refused(_) => Err(provider_open("its breaker is open")),
        }
    }

    /// Takes the call's tokens (its prompt's and the longest answer's) from
    /// its provider's tokens per minute, where it has such a limit; a
    /// `tokens-spent` failure that says when they fit when they are spent.
    async fn reserve_tokens(&self, prompt_tokens: usize) -> Result<(), ProviderError> {
        let settings = self.provider.settings();
        let Some(per_minute) = settings.tokens_per_minute else { return Ok(()) };
        let tokens =
            u64::try_from(prompt_tokens).unwrap_or(u64::MAX).saturating_add(u64::from(settings.max_output_tokens));
        let wait = match self.worker.store.reserve_tokens(&self.claimed.provider, tokens, per_minute).await {
            Ok(None) => None,
            Ok(Some(wait)) => Some(wait),
            Err(error) => {
                tracing::warn!(%error, "reserving the provider's tokens per minute failed: not sent, put off a second");
                Some(Duration::from_secs(1))
            }
        };
        let Some(wait) = wait else { return Ok(()) };
        metrics::claims_deferred(store::claims::Deferral::ProviderTokensPerMinute, 1);
        let message = format!(
            "the provider's {per_minute} tokens per minute are spent: {tokens} more fit in {} ms",
            wait.as_millis()
        );
        let error =
            ProviderError::new(FailureClass::Definitive { retryable: true }, FailureKind::TokensSpent, None, message);
        let facts =
            FailureFacts { retry_after_ms: Some(millis(wait)), tokens: Some(tokens), ..FailureFacts::default() };
        Err(error.with_facts(facts))
    }

    /// The call's timeout: one deadline for connect, headers and body,
    /// inside the lease, checked right before the send (`lease-lost` when
    /// the lease ran out).
    fn limit_to_lease(&self, lease_end: Instant) -> Result<Duration, ProviderError> {
        let margin = self.worker.settings.lease_margin;
        let left = lease_end.saturating_duration_since(Instant::now()).saturating_sub(margin);
        if left.is_zero() {
            let message = "the lease ran out before the request was sent";
            return Err(ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::LeaseLost,
                None,
                message,
            ));
        }
        Ok(self.provider.settings().timeout.min(left))
    }

    /// Sends the request within `timeout` and follows it to its answer,
    /// hedging while it runs; a streaming task's answer is written to the
    /// job's output as it comes, and every piece is written before this
    /// answers.
    async fn send(
        &self,
        prepared: &mut Prepared,
        timeout: Duration,
        progress: &mut Progress,
        call_span: &tracing::Span,
    ) -> Result<Completion, ProviderError> {
        let (worker, claimed, settings) = (self.worker, self.claimed, self.provider.settings());
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
        let bound = Bound { max_tokens: settings.max_output_tokens, tokenizer: settings.tokenizer() };
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let writer = self.spawn_writer(&mut prepared.request, bound, stop);
        let stopped = async {
            if stopped.await.is_err() {
                // No writer, or one that never stopped the call.
                std::future::pending::<()>().await;
            }
        };
        let calling = tokio::time::timeout(
            timeout,
            crate::provider::call(self.provider, &prepared.request, accepted, self.settled_elsewhere()),
        );
        let sent = Instant::now();
        let mut stopped_here = false;
        let mut result = tokio::select! {
            biased;
            called = calling.instrument(call_span.clone()) => match called {
                Ok(result) => result,
                Err(_) => Err(self.past_deadline(timeout).await),
            },
            () = crate::worker::hedge::hedge_while_running(worker, claimed, sent) => unreachable!("hedging ends with the call"),
            () = stopped => {
                stopped_here = true;
                // Replaced by what the writer saw, below.
                Err(ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::ResponseTooLarge, None, ""))
            }
        };
        progress.stopped = stopped_here;
        // Every piece is written before the attempt is settled.
        prepared.request.deltas = None;
        let mut answered_at = Instant::now();
        if let Some(writer) = writer {
            let written = writer.await.unwrap_or_default();
            answered_at = written.first_at.unwrap_or(answered_at);
            result = output::streamed_outcome(result, written, prepared.prompt_tokens, bound);
        }
        if result.is_ok() {
            let streamed = self.task.settings.stream;
            worker.hedging.answered(&claimed.provider, streamed, answered_at.saturating_duration_since(sent));
        }
        result
    }

    /// The failure of a call whose answer did not come within `timeout`,
    /// with what the provider says of itself, where it says something.
    async fn past_deadline(&self, timeout: Duration) -> ProviderError {
        let mut error = ProviderError::deadline(self.provider.settings().timeout, timeout);
        // Within half the lease's margin, which the outcome's record needs.
        let patience = (self.worker.settings.lease_margin / 2).min(Duration::from_secs(1));
        let asked = tokio::time::timeout(patience, self.provider.evidence()).await;
        if let Ok(Some(evidence)) = asked {
            error.message = format!("{}; {evidence}", error.message);
            error.facts.provider_status = Some(evidence);
        }
        error
    }

    /// A streaming task's writer: the request's pieces go to the job's
    /// output as they come, and it stops the call by `stop` when the answer
    /// passes its `bound`. `None` for a task that does not stream.
    fn spawn_writer(
        &self,
        request: &mut ProviderRequest,
        bound: Bound,
        stop: tokio::sync::oneshot::Sender<()>,
    ) -> Option<tokio::task::JoinHandle<Written>> {
        let (worker, claimed) = (self.worker, self.claimed);
        self.task.settings.stream.then(|| {
            let (deltas, pieces) = tokio::sync::mpsc::unbounded_channel();
            request.deltas = Some(deltas);
            let writing = (worker.store.clone(), worker.appends.clone());
            let (signals, attempt) = (worker.signals.clone(), claimed.attempt.clone());
            tokio::spawn(output::write_output(writing, signals, attempt, claimed.id, (bound, stop), pieces))
        })
    }

    /// Tells of the call's `result`: on its span (the usage the provider
    /// counted, or the failure's kind), in the provider's call metrics with
    /// how long since it `started`, and to its breaker.
    async fn report(
        &self,
        result: &Result<Completion, ProviderError>,
        call_span: &tracing::Span,
        started: std::time::Instant,
        probe: bool,
    ) {
        let provider = &self.claimed.provider;
        match result {
            Ok(Completion { usage: Some(usage), .. }) => {
                call_span.record("gen_ai.usage.input_tokens", usage.prompt_tokens);
                call_span.record("gen_ai.usage.output_tokens", usage.completion_tokens);
            }
            Err(error) => {
                call_span.record("error.type", error.kind.as_str());
            }
            Ok(_) => {}
        }
        if let Err(error) = result
            && error.kind == FailureKind::SettledElsewhere
        {
            // Its callback settled it: the breaker hears what became of it
            // (an answer, or a failure of the provider's), the probe's
            // verdict included.
            let failed = match error.facts.provider_status.as_deref() {
                Some("succeeded" | "superseded") => Some(false),
                Some("failed" | "unknown") => Some(true),
                _ => None,
            };
            if let Some(failed) = failed {
                let breakers = self.worker.catalog.breakers();
                crate::task::breakers::record(&self.worker.store, breakers, provider, failed, probe).await;
            }
            return;
        }
        let outcome = match result {
            Ok(_) => "answered",
            Err(error) if error.class == FailureClass::Ambiguous => "ambiguous",
            Err(_) => "failed",
        };
        crate::process::metrics::provider_call(provider, outcome, started.elapsed());
        if let Some(failed) = breaker_outcome(result) {
            let breakers = self.worker.catalog.breakers();
            crate::task::breakers::record(&self.worker.store, breakers, provider, failed, probe).await;
        }
    }
}
