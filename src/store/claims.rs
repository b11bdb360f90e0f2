//! Claiming: which pending attempts a worker takes, written once for both
//! databases over the statements of [`super::driver`]: what a claim is
//! given (the providers' leases, the limits, each worker's place in its
//! round of owners) and what it answers. How one claim goes, step by step,
//! is in `claims/window.rs`.
//!
//! An attempt over a limit is not refused: it stays `pending` and is
//! claimed when the limit allows. (The reconciler's claim of unknown
//! attempts, [`UnknownAttempt`], is one statement of each backend.)

mod window;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::{AttemptRef, ClaimedAttempt, Result, Store, Transition, UnknownAttempt, WaitingFacts, transitions};
use crate::domain::Waiting;
pub(crate) use crate::domain::limits::{Deferral, ProviderLimits};
use crate::domain::{JobId, OwnerId};
use crate::sync::LockAnyway;

/// What a worker's claims go by: the providers it can call and how long
/// its lease on an attempt of each holds (the provider's deadline plus a
/// margin; only attempts on these providers are claimed), the limits the
/// claims enforce, and where the worker is in its round of owners.
#[derive(Clone, Debug)]
pub struct ClaimRules {
    /// The lease of a provider missing from `by_provider` (none is claimed).
    pub default: Duration,
    /// Per provider name.
    pub by_provider: Vec<(String, Duration)>,
    /// The owners' and providers' limits the claims enforce.
    pub limits: ClaimLimits,
    /// Where this worker's claims are in their round of owners.
    pub rotation: Rotation,
}

impl ClaimRules {
    /// Rules without limits, in a round of owners of their own.
    pub fn new(default: Duration, by_provider: Vec<(String, Duration)>) -> Self {
        Self { default, by_provider, limits: ClaimLimits::default(), rotation: Rotation::default() }
    }

    /// The lease of an attempt on `provider`.
    pub fn lease_of(&self, provider: &str) -> Duration {
        self.by_provider.iter().find(|(name, _)| name == provider).map_or(self.default, |(_, lease)| *lease)
    }
}

/// The limits a claim enforces, the same on every replica.
#[derive(Clone, Debug, Default)]
pub struct ClaimLimits {
    /// Attempts of one owner running at once across the cluster, unless
    /// one of its keys sets its own (`None`: no limit).
    pub max_in_flight_per_owner: Option<u32>,
    /// Per provider name.
    pub providers: BTreeMap<String, ProviderLimits>,
}

impl ClaimLimits {
    /// The limits of `[worker] max_in_flight_per_owner` (0: none) and of
    /// each provider, by name.
    pub fn new(max_in_flight_per_owner: u32, providers: impl IntoIterator<Item = (String, ProviderLimits)>) -> Self {
        Self {
            max_in_flight_per_owner: Some(max_in_flight_per_owner).filter(|&n| n > 0),
            providers: providers.into_iter().collect(),
        }
    }
}

/// Where the claims of one worker are in their round of owners: the next
/// claim starts after this owner.
#[derive(Clone, Debug, Default)]
pub struct Rotation(Arc<Mutex<String>>);

impl Rotation {
    fn get(&self) -> String {
        self.0.lock_anyway().clone()
    }

    fn set(&self, owner: &str) {
        owner.clone_into(&mut self.0.lock_anyway());
    }
}

impl WaitingFacts {
    /// The reason, under `limits`.
    pub fn reason(&self, limits: &ClaimLimits) -> Waiting {
        let ms = |seconds: f64| Some((seconds * 1000.0).ceil() as u64);
        let owner_limit = self.owner_limit.and_then(|n| u32::try_from(n).ok()).or(limits.max_in_flight_per_owner);
        let provider_limit = limits.providers.get(&self.provider).and_then(|l| l.max_concurrent);
        let (reason, limit, for_ms) = if self.due_in > 0.0 {
            ("retry-backoff", None, ms(self.due_in))
        } else if self.paused_for > 0.0 {
            (Deferral::ProviderPaused.as_str(), None, ms(self.paused_for))
        } else if let Some(limit) = owner_limit.filter(|&limit| self.owner_running >= i64::from(limit)) {
            (Deferral::OwnerMaxInFlight.as_str(), Some(limit), None)
        } else if let Some(limit) = provider_limit.filter(|&limit| self.provider_running >= i64::from(limit)) {
            (Deferral::ProviderMaxConcurrent.as_str(), Some(limit), None)
        } else if let Some(per_minute) = limits.providers.get(&self.provider).and_then(|l| l.requests_per_minute)
            && let level = refilled(self.requests, self.requests_idle, per_minute)
            && level < 1.0
        {
            (
                Deferral::ProviderRequestsPerMinute.as_str(),
                Some(per_minute),
                Some(refill_wait(level, 1.0, per_minute).as_millis() as u64),
            )
        } else {
            ("worker", None, None)
        };
        Waiting { reason: reason.to_owned(), limit, for_ms }
    }
}

/// A token bucket of `per_minute` refilled evenly over a minute: its level
/// now, from the level last written (`None`: full) and the seconds since.
pub(crate) fn refilled(level: Option<f64>, idle_seconds: f64, per_minute: u32) -> f64 {
    let size = f64::from(per_minute);
    level.map_or(size, |level| (level + idle_seconds.max(0.0) * size / 60.0).min(size))
}

/// How long until a bucket of `per_minute` at `level` holds `needed`
/// (at most a full bucket's worth).
pub(crate) fn refill_wait(level: f64, needed: f64, per_minute: u32) -> Duration {
    let size = f64::from(per_minute);
    let short = needed.min(size) - level;
    if short <= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(short * 60.0 / size) }
}

/// What a claim took, and how many attempts it left pending for a limit,
/// by limit (for the caller to count).
#[derive(Debug, Default)]
pub struct Claimed {
    /// The attempts now `running` under this worker's claim.
    pub attempts: Vec<ClaimedAttempt>,
    /// Attempts left pending, by the limit that held them.
    pub deferred: HashMap<Deferral, u64>,
}

impl Store {
    /// Claims up to `max` due pending attempts for `worker`, fairly across
    /// owners (each owner's oldest first) and within the owners' and
    /// providers' limits, each under its provider's lease; they become
    /// `running` (see the module `crate::store::claims`).
    #[tracing::instrument(level = "debug", skip(self, rules))]
    pub async fn claim_attempts(&self, worker: &str, max: u32, rules: &ClaimRules) -> Result<Claimed> {
        window::claim(self, worker, max, rules).await
    }

    /// Puts a running attempt its provider refused before any work back to
    /// `pending` for `delay`, the same attempt, and pauses `pause` as long;
    /// fenced by `worker`, at most `max` times (see `transitions::requeue`).
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %attempt.job_id, attempt.number = attempt.number))]
    pub async fn requeue_attempt(
        &self,
        attempt: &AttemptRef,
        worker: &str,
        (delay, max): (Duration, Option<u32>),
        pause: Option<&str>,
        detail: Value,
    ) -> Result<Transition> {
        transitions::requeue(self, attempt, worker, (delay, max), pause, detail).await
    }

    /// Pauses claims of `provider`'s attempts for `pause`, for every worker.
    pub async fn pause_provider(&self, provider: &str, pause: Duration) -> Result<()> {
        let mut tx = self.begin().await?;
        tx.pause_provider(provider, pause).await?;
        tx.commit().await
    }

    /// Takes `tokens` from `provider`'s shared bucket of `per_minute`: `None`
    /// when taken, else how long until it holds them (or is full, for more).
    pub async fn reserve_tokens(&self, provider: &str, tokens: u64, per_minute: u32) -> Result<Option<Duration>> {
        self.driver().reserve_tokens(provider, tokens, per_minute).await
    }

    /// What a queued job of the owner waits for, or `None` without a pending attempt.
    pub async fn waiting_facts(&self, owner: &OwnerId, job_id: JobId) -> Result<Option<WaitingFacts>> {
        self.driver().waiting_facts(owner, job_id).await
    }

    /// Turns running attempts whose lease has expired (their worker died or
    /// stalled) into `unknown` (I4): never `pending`, never `failed`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn expire_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        transitions::expire_leases(self, max).await
    }

    /// The jobs that finished (won, or were canceled) while attempts of
    /// theirs run under `worker`'s leases: the calls its sweep aborts.
    pub async fn finished_jobs_running_on(&self, worker: &str) -> Result<Vec<JobId>> {
        self.driver().finished_jobs_running_on(worker).await
    }

    /// Claims up to `max` unknown attempts of `providers` that are due for a
    /// status lookup, and holds them for `hold` before they are due again.
    pub async fn claim_reconciliations(
        &self,
        providers: &[String],
        max: u32,
        hold: Duration,
    ) -> Result<Vec<UnknownAttempt>> {
        // A read first: with nothing due, a reconciler writes nothing.
        if !self.driver().any_due_unknown(providers).await? {
            return Ok(Vec::new());
        }
        self.driver().claim_reconciliations(providers, max, hold).await
    }

    /// Puts off the next status lookup of an unknown attempt.
    pub async fn postpone_reconciliation(&self, attempt: &AttemptRef, delay: Duration) -> Result<()> {
        self.driver().postpone_reconciliation(attempt, delay).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refills_evenly_over_a_minute_up_to_its_size() {
        assert_eq!(refilled(None, 0.0, 60), 60.0);
        assert_eq!(refilled(Some(0.0), 30.0, 60), 30.0);
        assert_eq!(refilled(Some(-10.0), 10.0, 60), 0.0);
        assert_eq!(refilled(Some(50.0), 600.0, 60), 60.0);
        assert_eq!(refill_wait(0.0, 30.0, 60), Duration::from_secs(30));
        assert_eq!(refill_wait(10.0, 5.0, 60), Duration::ZERO);
        assert_eq!(
            refill_wait(0.0, 1_000.0, 60),
            Duration::from_secs(60),
            "a need over the bucket's size waits for a full bucket"
        );
    }
}
