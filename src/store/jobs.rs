//! What the store's job and attempt transitions take and answer: new jobs
//! and attempts, the typed outcomes of every guarded transition (a lost
//! race or a stale guard is a value, never an error), and job listings.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::{
    AdmissionRefusal, Attempt, AttemptId, AttemptOrigin, AttemptState, Fingerprint, IdempotencyKey, Job, JobId,
    JobState, JobSummary, OwnerId,
};

/// A job to create with its first attempt.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// The authenticated owner.
    pub owner: OwnerId,
    /// The new job's id (used only if the key is new).
    pub id: JobId,
    /// The client's key for this intent.
    pub idempotency_key: IdempotencyKey,
    /// The intent's fingerprint.
    pub fingerprint: Fingerprint,
    /// The task's name.
    pub task: String,
    /// The validated input.
    pub input: Value,
    /// The resolved primary provider.
    pub provider: String,
    /// The id of the first attempt.
    pub first_attempt_id: AttemptId,
    /// The job's budget, from the create request.
    pub max_cost: Option<crate::domain::Money>,
    /// The create request's trace context, kept with the first attempt.
    pub trace: Option<crate::domain::TraceContext>,
}

impl NewJob {
    /// The job as just inserted at `created_at`: queued, its first attempt pending.
    pub(crate) fn created(&self, created_at: DateTime<Utc>) -> Job {
        Job {
            id: self.id,
            owner: self.owner.clone(),
            idempotency_key: self.idempotency_key.as_str().to_owned(),
            fingerprint: self.fingerprint,
            task: self.task.clone(),
            input: self.input.clone(),
            provider: self.provider.clone(),
            state: JobState::Queued,
            winning_attempt: None,
            result: None,
            created_at,
            updated_at: created_at,
            expires_at: None,
            max_cost: self.max_cost,
            cost: None,
            waiting: None,
            canceling: Vec::new(),
            attempts: vec![Attempt {
                number: 1,
                id: self.first_attempt_id,
                provider: self.provider.clone(),
                state: AttemptState::Pending,
                origin: AttemptOrigin::Client,
                idempotency_key: None,
                worker: None,
                lease_until: None,
                output: None,
                error: None,
                created_at,
                not_before: created_at,
                started_at: None,
                finished_at: None,
                usage: None,
                cost: None,
                unapplied_output: None,
                provider_request_id: None,
                trace: self.trace.clone(),
            }],
        }
    }
}

/// The answer to [`Store::create_job`].
#[derive(Clone, Debug)]
pub enum CreateJob {
    /// The key was new: this job was inserted, with its first attempt pending.
    Created(Job),
    /// The key was taken: this is the job that holds it, as it is now. The
    /// caller compares fingerprints to tell a replay from a reused key.
    Existing(Job),
}

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

/// The answer to [`Store::cancel_job`].
#[derive(Clone, Debug)]
pub enum Cancel {
    /// The job is now canceled; pending attempts were canceled with it.
    Canceled(Job),
    /// It was canceled before: nothing changed.
    AlreadyCanceled(Job),
    /// It succeeded: a finished job cannot be canceled.
    Succeeded(Job),
    /// No such job for this owner.
    NotFound,
}

/// What the metrics gauges show of the attempts table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    /// Pending attempts due for a worker now.
    pub pending_due: i64,
    /// Attempts whose outcome is unknown.
    pub unknown_open: i64,
    /// How long the oldest unknown attempt has been unknown.
    pub oldest_unknown: Duration,
    /// Pending attempts (due or not) per owner that has any.
    pub pending_by_owner: Vec<(String, i64)>,
    /// Pending attempts per provider that has any.
    pub pending_by_provider: Vec<(String, i64)>,
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

/// How an operator settles an unknown attempt.
#[derive(Clone, Debug)]
pub enum Resolution {
    /// The provider did the work; this is its output.
    Succeeded(Value),
    /// The provider did not do the work.
    Failed,
}

/// A page request over an owner's jobs, newest first.
#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only jobs of this task.
    pub task: Option<String>,
    /// Only jobs older than this one (the cursor).
    pub before: Option<JobId>,
    /// At most this many.
    pub limit: u32,
}

/// A job of a listing that may span owners (the dashboard's).
#[derive(Clone, Debug)]
pub struct OwnedJobSummary {
    /// Whose job it is.
    pub owner: OwnerId,
    /// The job.
    pub job: JobSummary,
}

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
pub struct Settlement<'a> {
    /// The worker holding the attempt's lease, when one settles it.
    pub holder: Option<&'a str>,
    /// What the attempt used and cost.
    pub usage: Option<&'a crate::store::AttemptUsage>,
}
