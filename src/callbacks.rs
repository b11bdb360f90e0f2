//! Provider callbacks. A provider that runs an attempt in the background
//! and calls back with its outcome (a Cog server's webhook) is given the
//! attempt's callback URL, `{public_url}/callbacks/{job}/{number}/{token}`.
//! The token is an HMAC-SHA256 of the job and the attempt's number under
//! the server's callback secret, which the migrations made, the same for
//! every replica: whoever holds the URL was given it by onejob, and an
//! owner, who sees its attempts' ids, cannot make one.
//!
//! A callback settles its attempt through the same guarded transitions as
//! a worker's outcome or the reconciler's, whether the attempt is still
//! `running` (its worker, in this process or another, sees it settled and
//! stops waiting) or `unknown` (its worker gave up waiting, or died). A
//! callback for an attempt already settled changes nothing (but that the
//! usage it reports is kept on an attempt settled without any) and is
//! answered all the same, so that its sender stops sending it.

use std::sync::Arc;

use serde_json::Value;
use tracing::Instrument;

use crate::domain::{AttemptState, JobId};
use crate::provider::{CallbackRefusal, ProviderError, RequestStatus};
use crate::store::{AttemptRef, StoreError};
use crate::worker::Worker;

/// What became of a callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Received {
    /// It told the attempt's outcome, which was recorded.
    Settled,
    /// The attempt had been settled before: nothing changed.
    AlreadySettled,
    /// It told of a prediction still running: nothing to record.
    NotFinal,
    /// The job is gone (purged or erased): nothing to record.
    JobGone,
}

/// Why a callback was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallbackError {
    /// The job has no such attempt, or its provider does not call back.
    #[error("{0}")]
    NotFound(String),
    /// The provider signs its callbacks, and this one is not signed by it.
    #[error("{0}")]
    NotSigned(String),
    /// Its signature could not be checked now: the sender should send it
    /// again.
    #[error("{0}")]
    CannotVerify(String),
    /// Its body is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// The database could not be used, or the outcome could not be
    /// recorded: the sender should send it again.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The outcome was not recorded in time (the database, or the files'
    /// store, did not take it): the sender should send it again.
    #[error("the outcome could not be recorded yet")]
    NotRecorded,
}

/// How many callbacks' bodies are read at once: each may hold a prediction
/// whose files come inline, tens of megabytes.
const BODIES_AT_ONCE: usize = 4;

/// The callbacks' use case: verifies each, and records what it says.
pub(crate) struct Callbacks {
    worker: Arc<Worker>,
    bodies: tokio::sync::Semaphore,
}

impl Callbacks {
    /// Records through `worker`'s settlements (a process that runs no
    /// worker loop still records callbacks this way).
    pub(crate) fn new(worker: Arc<Worker>) -> Self {
        Self { worker, bodies: tokio::sync::Semaphore::new(BODIES_AT_ONCE) }
    }

    /// A place to read a callback's body in, held until it is recorded:
    /// at most a few are read at once.
    pub(crate) async fn body_place(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.bodies.acquire().await.expect("the semaphore is never closed")
    }

    /// Whether `token` is that of the callback URL of attempt `number` of
    /// `job`: asked before the callback's body is read.
    pub(crate) async fn check(&self, job: JobId, number: i32, token: &str) -> Result<bool, StoreError> {
        self.worker.callbacks.verify(job, number, token).await
    }

    /// Receives the callback of attempt `number` of `job` with `headers`
    /// and `body`, its token checked: verified by the provider where it
    /// signs its callbacks, then recorded.
    pub(crate) async fn receive(
        &self,
        job: JobId,
        number: i32,
        headers: &axum::http::HeaderMap,
        body: bytes::Bytes,
    ) -> Result<Received, CallbackError> {
        let worker = &self.worker;
        let Some(owner) = worker.store.find_job_owner(job).await? else { return Ok(Received::JobGone) };
        let Some(found) = worker.store.get_job(&owner, job).await? else { return Ok(Received::JobGone) };
        let Some(attempt) = found.attempts.iter().find(|a| a.number == number) else {
            return Err(CallbackError::NotFound(format!("job {job} has no attempt {number}")));
        };
        let Some(provider) = worker.providers.get(&attempt.provider).filter(|p| p.settings().answers_by_callback())
        else {
            return Err(CallbackError::NotFound(format!("attempt {number}'s provider does not call back")));
        };
        provider.verify_callback(headers, &body).await.map_err(|refusal| match refusal {
            CallbackRefusal::NotSigned(why) => CallbackError::NotSigned(why),
            CallbackRefusal::CannotVerify(why) => CallbackError::CannotVerify(why),
        })?;
        let prediction: Value = serde_json::from_slice(&body).map_err(|e| CallbackError::NotJson(e.to_string()))?;
        drop(body);
        let (said_id, status) = provider.read_callback(prediction).await.map_err(|error| {
            tracing::warn!(%error, job.id = %job, attempt.number = number, "a callback's outcome could not be read yet");
            CallbackError::NotRecorded
        })?;
        let said_id = said_id.filter(|id| is_an_id(id));
        // Signed by the provider is not enough: it must be of the attempt's
        // own prediction, where the attempt knows it.
        if let Some(known) = &attempt.provider_request_id
            && said_id.as_ref() != Some(known)
        {
            let said = said_id.as_deref().unwrap_or("without an id");
            return Err(CallbackError::NotFound(format!(
                "the callback is of prediction {said}, not attempt {number}'s"
            )));
        }
        let outcome = match status {
            RequestStatus::Running | RequestStatus::NotFound => return Ok(Received::NotFinal),
            RequestStatus::Succeeded(completion) => Ok(completion),
            RequestStatus::Failed(error) => Err(error),
            RequestStatus::Canceled(usage) => Err(ProviderError::canceled_at_provider(usage)),
        };
        let attempt_ref = AttemptRef { owner: owner.clone(), job_id: job, number };
        if !matches!(attempt.state, AttemptState::Running | AttemptState::Unknown) {
            tracing::info!(job.id = %job, attempt.number = number, state = ?attempt.state,
                "a callback came for an attempt already settled: nothing changed but its usage, if it had none");
            self.keep_late_usage(&attempt_ref, attempt, provider.as_ref(), &found.task, &outcome).await?;
            return Ok(Received::AlreadySettled);
        }
        // The provider's id of the request, which a lost answer to the
        // create did not bring (Replicate's), is kept first.
        if let (None, Some(id)) = (&attempt.provider_request_id, &said_id) {
            worker.store.record_provider_request(&attempt_ref, id).await?;
        }
        let span = tracing::info_span!("callback", owner = %owner, job.id = %job, attempt.number = number,
            provider = %provider.name(), attempt.state = tracing::field::Empty);
        crate::worker::record_outcome(worker, &attempt_ref, &found.task, provider.name(), outcome)
            .instrument(span)
            .await;
        // Answered 2xx only once the attempt is settled (by this callback,
        // or anything else): otherwise the sender is to send it again.
        let settled = worker.store.get_job(&owner, job).await?.and_then(|found| {
            let state = found.attempts.iter().find(|a| a.number == number)?.state;
            Some(!matches!(state, AttemptState::Running | AttemptState::Unknown))
        });
        match settled {
            Some(false) => Err(CallbackError::NotRecorded),
            Some(true) | None => Ok(Received::Settled),
        }
    }

    /// Records the usage a callback reports for an attempt settled
    /// without one (a loser canceled before its provider said what it
    /// used, or whose create's answer was lost, so that it could not be
    /// canceled and ran to its end): what it was charged.
    async fn keep_late_usage(
        &self,
        attempt_ref: &AttemptRef,
        attempt: &crate::domain::Attempt,
        provider: &dyn crate::provider::Provider,
        task: &str,
        outcome: &Result<crate::provider::Completion, ProviderError>,
    ) -> Result<(), StoreError> {
        let mut reported = match outcome {
            Ok(completion) => completion.usage,
            Err(error) => error.facts.usage,
        };
        // The files its output held, which a provider billing per output
        // charged for although they were not kept.
        let rules = self.worker.catalog.task(task).and_then(|task| task.settings.files.as_ref());
        if let (Ok(completion), Some(rules)) = (outcome, rules)
            && let Ok(files) = crate::files::check(&completion.output, rules)
        {
            reported.get_or_insert_with(crate::domain::Usage::default).outputs = i64::try_from(files).unwrap_or(0);
        }
        let (None, Some(usage)) = (attempt.usage, reported) else { return Ok(()) };
        let cost = provider.settings().price.as_ref().map(|price| price.cost(&usage));
        self.worker.store.record_usage(attempt_ref, &crate::store::AttemptUsage { usage, cost }).await?;
        Ok(())
    }
}

/// Whether `id` may be kept as a provider's id of a request: short, of
/// the characters providers' ids use.
fn is_an_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 200 && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}
