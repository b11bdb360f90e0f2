//! What the store's attempt transitions take and answer: new attempts, the
//! typed outcomes of every guarded transition (a lost race or a stale guard
//! is a value, never an error), settlements, resolutions, and the attempts
//! the worker claims or reconciles.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::transitions;
use super::transitions::batches::{self, Finish};
use super::usage::AttemptUsage;
use super::{Result, Store, TaskRules};
use crate::domain::{AttemptError, AttemptTransition};

use crate::domain::{
    AdmissionRefusal, Attempt, AttemptId, AttemptOrigin, AttemptState, IdempotencyKey, JobId, OwnerId,
};

/// An attempt to add to an existing job.
#[derive(Clone, Debug)]
pub struct NewAttempt {
    /// The new attempt's id.
    pub id: AttemptId,
    /// The provider; `None` for the job's primary.
    pub provider: Option<String>,
    /// The key of the request adding it, scoped to the job.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Who asks for it.
    pub origin: AttemptOrigin,
    /// How long to wait before it may be claimed (retry backoff).
    pub delay: Duration,
    /// The trace context it is asked for under (the request's, or for a
    /// retry the failed attempt's).
    pub trace: Option<crate::domain::TraceContext>,
}

/// An automatic attempt added by the retry policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduled {
    /// Its number.
    pub number: i32,
    /// Its provider.
    pub provider: String,
    /// How long until it may be claimed.
    pub delay: Duration,
}

/// The answer to [`Store::admit_attempt`].
#[derive(Clone, Debug)]
pub enum Admission {
    /// The attempt was added, pending.
    Admitted(Attempt),
    /// The key was used before on this job for the same provider: that attempt.
    Replayed(Attempt),
    /// The key was used before on this job for another provider: that attempt.
    KeyReused(Attempt),
    /// A rule refused it; the refusal is in the job's events.
    Refused {
        /// Which rule.
        refusal: AdmissionRefusal,
        /// Why, when there is more to say (an unqualified provider's state).
        reason: Option<String>,
    },
    /// No such job for this owner.
    JobNotFound,
}

/// Names one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRef {
    /// The job's owner.
    pub owner: OwnerId,
    /// The job.
    pub job_id: JobId,
    /// The attempt's number within the job.
    pub number: i32,
}

/// An attempt a worker has claimed, with what it needs to run it.
#[derive(Clone, Debug)]
pub struct ClaimedAttempt {
    /// Which attempt.
    pub attempt: AttemptRef,
    /// Its id, sent to the provider.
    pub id: AttemptId,
    /// The provider to call.
    pub provider: String,
    /// Who started it.
    pub origin: AttemptOrigin,
    /// The job's task.
    pub task: String,
    /// The job's input.
    pub input: Value,
    /// Until when the claim holds.
    pub lease_until: DateTime<Utc>,
    /// How long it waited from when it was due to its claim.
    pub waited: Duration,
    /// The trace context it was asked for under.
    pub trace: Option<crate::domain::TraceContext>,
}

/// The outcome of a transition on an existing attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The attempt's output won the job's compare-and-swap: it is the result.
    Won {
        /// Pending siblings canceled by the win.
        canceled: Vec<i32>,
    },
    /// The compare-and-swap touched zero rows: another attempt had won (or
    /// the job was canceled). The output is kept on the attempt, `superseded`.
    Lost {
        /// The attempt that holds the job's result, if any.
        winner: Option<i32>,
    },
    /// The attempt failed; the retry policy added `next` in the same
    /// transaction, if it had one.
    Failed {
        /// The automatic attempt that follows, if any.
        next: Option<Scheduled>,
    },
    /// The attempt's outcome is now unknown.
    Applied,
    /// The attempt was not in a state this transition may start from; nothing
    /// changed.
    Stale(AttemptState),
    /// No such attempt for this owner.
    NotFound,
    /// The worker settling it no longer holds it (its lease expired, or the
    /// attempt left `running`): nothing changed. Its state then.
    Fenced(AttemptState),
}

/// Why and by whom an operator settled an unknown attempt, for its event.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Resolved<'a> {
    /// The operator's reason.
    pub reason: &'a str,
    /// The API key that resolved it, when a key did.
    pub key: Option<uuid::Uuid>,
    /// That key's role.
    pub role: Option<crate::domain::KeyRole>,
}

impl<'a> Resolved<'a> {
    /// A resolution with `reason` and no key (the store's own callers).
    pub fn because(reason: &'a str) -> Self {
        Self { reason, key: None, role: None }
    }
}

pub use crate::domain::Resolution;

/// An attempt whose outcome is still unknown, for the operators' list.
#[derive(Clone, Debug)]
pub struct OpenUnknown {
    /// Which attempt.
    pub attempt: AttemptRef,
    /// The provider it ran on.
    pub provider: String,
    /// The job's task.
    pub task: String,
    /// Since when its outcome has been unknown.
    pub unknown_since: Option<DateTime<Utc>>,
    /// Why it became unknown (`{type, message, detail}`).
    pub error: Option<Value>,
    /// How many times the reconciler has asked its provider about it.
    pub reconcile_count: i32,
}

/// What a settlement carries besides its outcome: the worker whose claim
/// fences it (none for an operator's or the reconciler's), and the
/// attempt's usage, recorded in the same transaction.
#[derive(Clone, Copy, Debug, Default)]
pub struct SettleOptions<'a> {
    /// The worker holding the attempt's lease, when one settles it.
    pub holder: Option<&'a str>,
    /// What the attempt used and cost.
    pub usage: Option<&'a crate::store::AttemptUsage>,
}

/// An unknown attempt due for a status lookup, claimed for a while so that
/// only one reconciler asks at a time.
#[derive(Clone, Debug)]
pub struct UnknownAttempt {
    /// Which attempt.
    pub attempt: AttemptRef,
    /// Its id, by which the provider knows it.
    pub id: AttemptId,
    /// The provider to ask.
    pub provider: String,
    /// The job's task.
    pub task: String,
    /// How long its outcome has been unknown, by the database's clock.
    pub unknown_for: Duration,
    /// How many times it has been claimed for reconciliation, this one included.
    pub reconcile_count: i32,
    /// The provider's own id of its request (a background response's), if
    /// it gave one.
    pub provider_request_id: Option<String>,
    /// The trace context it was asked for under.
    pub trace: Option<crate::domain::TraceContext>,
}

/// What a queued job waits for, as [`super::Store::waiting_facts`] reads it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct WaitingFacts {
    /// Its pending attempt's provider.
    pub provider: String,
    /// Seconds until the pending attempt is due (a retry's backoff, a
    /// requeue's wait); 0 or less: due.
    pub due_in: f64,
    /// How much longer its provider is paused, in seconds.
    pub paused_for: f64,
    /// The owner's running attempts.
    pub owner_running: i64,
    /// The provider's running attempts.
    pub provider_running: i64,
    /// The largest `max_in_flight` the owner's live keys set.
    pub owner_limit: Option<i32>,
    /// The provider's request bucket when last written (`None`: full).
    pub requests: Option<f64>,
    /// Seconds since then.
    pub requests_idle: f64,
}

impl Store {
    /// Adds an attempt to a job if every admission rule allows it, in one
    /// transaction with the job locked.
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %job_id))]
    pub async fn admit_attempt(
        &self,
        owner: &OwnerId,
        job_id: JobId,
        new: &NewAttempt,
        rules: &dyn TaskRules,
    ) -> Result<Admission> {
        transitions::admit_attempt(self, owner, job_id, new, rules).await
    }

    /// Adds a hedge of the running attempt `hedged`, pending, on the first
    /// of `providers` its job may take it on (see
    /// [`crate::domain::hedge::check_hedge`]), with the job locked; `limits`
    /// are the task's `max_hedges` and how long `hedged` has gone without
    /// an answer (for the event).
    pub async fn admit_hedge(
        &self,
        hedged: &AttemptRef,
        providers: &[String],
        limits: (u32, Duration),
        rules: &dyn TaskRules,
    ) -> Result<super::Hedged> {
        super::admission::admit_hedge(self, hedged, providers, limits, rules).await
    }

    /// How many jobs are `unknown` and unchanged since `before`: kept
    /// whatever their age, and reported.
    pub async fn count_unknown_since(&self, before: DateTime<Utc>) -> Result<u64> {
        self.driver().count_unknown_since(before).await
    }

    /// Records an attempt's output. The job's compare-and-swap decides: the
    /// first output wins, every later one is `superseded` (I3). `holder`
    /// fences the settlement: when given, it applies only while the attempt
    /// is `running` under that worker's live lease ([`Transition::Fenced`]
    /// otherwise); the reconciler, which settles `unknown` attempts, gives
    /// none. `usage` is recorded by the same statement as the settlement
    /// (a settlement refused records none: see [`Store::record_usage`]).
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %attempt.job_id, attempt.number = attempt.number))]
    pub async fn finish_attempt(
        &self,
        attempt: &AttemptRef,
        output: &Value,
        holder: Option<&str>,
        usage: Option<&AttemptUsage>,
    ) -> Result<Transition> {
        let settlement = SettleOptions { holder, usage };
        transitions::settle_with_output(self, attempt, output, AttemptTransition::Finish, None, settlement).await
    }

    /// Records several attempts' outputs, as [`Store::finish_attempt`] does
    /// each, in one transaction: one compare-and-swap per attempt, one
    /// commit; the answers in the order given.
    #[tracing::instrument(level = "debug", skip_all, fields(count = finishes.len()))]
    pub async fn finish_attempts(&self, finishes: &[Finish<'_>]) -> Vec<Result<Transition>> {
        batches::finish_attempts(self, finishes).await
    }

    /// The transaction of [`Store::finish_attempts`] alone, even for one
    /// output: the outcome of each output it settled or refused, and
    /// `None` for each it left to be settled alone (by
    /// [`Store::finish_attempt`]): its job locked by another transaction,
    /// or missing, or the batch failed. It never waits for another
    /// transaction's lock.
    #[tracing::instrument(level = "debug", skip_all, fields(count = finishes.len()))]
    pub async fn settle_together(&self, finishes: &[Finish<'_>]) -> Vec<Option<Transition>> {
        batches::settle_together(self, finishes).await
    }

    /// Records a definitive failure of a running or unknown attempt, and
    /// admits the retry policy's next attempt in the same transaction;
    /// fenced by `holder`, with `usage`, as [`Store::finish_attempt`] is.
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %attempt.job_id, attempt.number = attempt.number))]
    pub async fn fail_attempt(
        &self,
        attempt: &AttemptRef,
        error: &AttemptError,
        rules: &dyn TaskRules,
        holder: Option<&str>,
        usage: Option<&AttemptUsage>,
    ) -> Result<Transition> {
        transitions::settle_without_output(
            self,
            attempt,
            AttemptTransition::Fail,
            error,
            None,
            Some(rules),
            SettleOptions { holder, usage },
        )
        .await
    }

    /// Records that a running attempt's call was aborted because its job
    /// had finished: it is `canceled`; fenced by `holder` as
    /// [`Store::finish_attempt`] is, with `usage`.
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %attempt.job_id, attempt.number = attempt.number))]
    pub async fn abort_attempt(
        &self,
        attempt: &AttemptRef,
        error: &AttemptError,
        holder: Option<&str>,
        usage: Option<&AttemptUsage>,
    ) -> Result<Transition> {
        transitions::settle_without_output(
            self,
            attempt,
            AttemptTransition::Abort,
            error,
            None,
            None,
            SettleOptions { holder, usage },
        )
        .await
    }

    /// Records that a running attempt's outcome cannot be known (I4);
    /// fenced by `holder`, with `usage`, as [`Store::finish_attempt`] is.
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %attempt.job_id, attempt.number = attempt.number))]
    pub async fn mark_unknown(
        &self,
        attempt: &AttemptRef,
        error: &AttemptError,
        holder: Option<&str>,
        usage: Option<&AttemptUsage>,
    ) -> Result<Transition> {
        transitions::settle_without_output(
            self,
            attempt,
            AttemptTransition::MarkUnknown,
            error,
            None,
            None,
            SettleOptions { holder, usage },
        )
        .await
    }

    /// Keeps an output that did not become the attempt's (it broke the
    /// contract, or came after the attempt was settled) on the attempt, for
    /// audit: `unapplied` is [`crate::domain::unapplied_output`]'s.
    pub async fn record_unapplied_output(&self, attempt: &AttemptRef, unapplied: &Value) -> Result<bool> {
        self.driver().record_unapplied_output(attempt, unapplied).await
    }

    /// Keeps the provider's own id of an attempt's request (a background
    /// response's) on the attempt, as soon as it is known: its status
    /// lookup and cancel call need it. The first id stays; whoever holds
    /// the attempt, and whatever its state, the id is a fact about it.
    pub async fn record_provider_request(&self, attempt: &AttemptRef, provider_request_id: &str) -> Result<bool> {
        self.driver().record_provider_request(attempt, provider_request_id).await
    }

    /// Settles an unknown attempt by an operator's word, through the same
    /// compare-and-swap as a worker's finish.
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %attempt.job_id, attempt.number = attempt.number))]
    pub async fn resolve_unknown(
        &self,
        attempt: &AttemptRef,
        resolution: &Resolution,
        resolved: &Resolved<'_>,
        rules: &dyn TaskRules,
    ) -> Result<Transition> {
        transitions::resolve_unknown(self, attempt, resolution, resolved, rules).await
    }

    /// The owner of the job `job_id` whose attempt `number` is unknown, of
    /// any owner: how an admin finds another owner's attempt to resolve.
    /// Looks only at unknown attempts (a partial index holds them alone).
    pub async fn find_unknown_attempt_owner(&self, job_id: JobId, number: i32) -> Result<Option<OwnerId>> {
        self.driver().find_unknown_attempt_owner(job_id, number).await
    }

    /// The attempts whose outcome is unknown, of one owner or (`None`) of
    /// every owner, the longest unknown first, at most `limit`.
    pub async fn list_unknown_attempts(&self, owner: Option<&OwnerId>, limit: u32) -> Result<Vec<OpenUnknown>> {
        self.driver().list_unknown_attempts(owner, limit).await
    }
}
