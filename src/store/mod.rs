//! The `Store` trait: every read and every state transition of jobs,
//! attempts, events and API keys, behind one interface. Callers never see
//! SQL. The logic of each transition is written once, in `transitions.rs`,
//! over the per-backend statements of `driver.rs`; `postgres.rs` and
//! `sqlite.rs` hold only their SQL and what truly differs between the two
//! databases; `rows.rs` reads rows into values for both. See
//! `docs/design.md`, "Storage".
//!
//! Every transition that touches an existing job locks the job's row first
//! (so the stored job state, derived with [`JobState::derive`], is always the
//! state of its attempts) and is guarded by the states it may start from. A
//! guard that matches zero rows is a typed outcome ([`Transition::Stale`],
//! [`Transition::Lost`]), never an error and never ignored.

pub mod claims;
pub mod driver;
mod hot;
pub mod postgres;
pub mod purge;
pub mod retention;
mod rows;
pub mod sessions;
mod shared;
pub mod sqlite;
mod transitions;
pub mod usage;
pub mod webhooks;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::policy::{NextAttempt, PastAttempt};
use crate::domain::{
    AdmissionRefusal, Attempt, AttemptError, AttemptId, AttemptLimits, AttemptOrigin, AttemptState, AttemptTransition,
    Fingerprint, IdempotencyKey, Job, JobEvent, JobId, JobState, JobSummary, KeyRole, OwnerId,
};
pub use claims::{Leases, UnknownAttempt};
pub use driver::Driver;

pub use postgres::PostgresStore;
pub use sessions::{NewSession, StoredSession};
pub use sqlite::SqliteStore;
pub use transitions::Finish;
pub use usage::{AttemptUsage, UsageFilter, UsageRow};
pub use webhooks::{ClaimedDelivery, Delivery, DeliveryTry, Endpoint, NewEndpoint, TryOutcome};

/// What a store call can fail with. Outcomes of the business (a lost race,
/// a refused admission) are never errors: they are in the return types.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or has no connection to spare; the
    /// request may be retried later.
    #[error("the database is unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// Anything else the database said.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// The migrations could not be applied.
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    /// The database is reached in a way the store cannot work with (a
    /// pooler that moves a connection between server sessions).
    #[error("the database connection cannot be used: {0}")]
    Unsupported(String),
    /// A stored value that the program cannot read back.
    #[error("unreadable stored value: {0}")]
    Corrupt(String),
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

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

/// What the store needs to know about tasks to admit attempts and to
/// schedule the next one after a failure, inside the same transaction.
pub trait TaskRules: Send + Sync {
    /// The limits of a task.
    fn limits(&self, task: &str) -> AttemptLimits;
    /// The current contract hash of `task` for `provider`; `None` when either
    /// is not configured. A provider other than a job's own needs a passing
    /// qualification with this hash (I5).
    fn contract_hash(&self, task: &str, provider: &str) -> Option<[u8; 32]>;
    /// The retry and failover policy: where the next automatic attempt of a
    /// `task` job whose attempts (in number order) are these could go, best
    /// first. The store takes the first qualified one.
    fn retry_candidates(&self, task: &str, primary: &str, attempts: &[PastAttempt<'_>]) -> Vec<NextAttempt>;
    /// Whether a qualification of `provider` for `task` is running in this
    /// process (a refusal for want of a passing one says so).
    fn being_qualified(&self, _task: &str, _provider: &str) -> bool {
        false
    }
    /// The task's budget per job, if it has one.
    fn max_cost(&self, _task: &str) -> Option<crate::domain::Money> {
        None
    }
    /// The most an attempt of a `task` job with this input may cost on
    /// `provider`: its prompt's tokens and the provider's
    /// `max_output_tokens` at its price. `None` when the provider has no
    /// price (such attempts are never refused for budget).
    fn worst_case_cost(&self, _task: &str, _provider: &str, _input: &Value) -> Option<crate::domain::Money> {
        None
    }
}

/// Where a provider stands for a task's current contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QualificationState {
    /// It passed a qualification of the current contract.
    Qualified {
        /// When.
        at: DateTime<Utc>,
    },
    /// Its latest qualification of the current contract failed.
    Failed {
        /// When.
        at: DateTime<Utc>,
        /// The report's summary.
        summary: String,
    },
    /// It was qualified only for an earlier contract.
    Stale {
        /// When that was.
        at: DateTime<Utc>,
    },
    /// It was never qualified for this task.
    Never,
}

impl QualificationState {
    /// Whether attempts may go to the provider.
    pub fn passed(&self) -> bool {
        matches!(self, QualificationState::Qualified { .. })
    }

    /// A stable name: `qualified`, `failed`, `stale`, `never`.
    pub fn name(&self) -> &'static str {
        match self {
            QualificationState::Qualified { .. } => "qualified",
            QualificationState::Failed { .. } => "failed",
            QualificationState::Stale { .. } => "stale",
            QualificationState::Never => "never",
        }
    }

    /// Why attempts may not go to the provider, for people.
    pub fn refusal(&self, provider: &str, task: &str) -> Option<String> {
        match self {
            QualificationState::Qualified { .. } => None,
            QualificationState::Failed { at, summary } => {
                Some(format!("provider '{provider}' failed qualification for task '{task}' at {at}: {summary}"))
            }
            QualificationState::Stale { at } => Some(format!(
                "the contract of task '{task}' changed since provider '{provider}' was qualified at {at}; qualify it again"
            )),
            QualificationState::Never => Some(format!("provider '{provider}' was never qualified for task '{task}'")),
        }
    }
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

/// A stored qualification run.
#[derive(Clone, Debug)]
pub struct QualificationRecord {
    /// Its id.
    pub id: Uuid,
    /// The provider qualified.
    pub provider: String,
    /// Against this task's contract.
    pub task: String,
    /// The contract hash it ran against.
    pub contract_hash: [u8; 32],
    /// Whether every example passed.
    pub passed: bool,
    /// The report, per example.
    pub report: Value,
    /// When it ran.
    pub created_at: DateTime<Utc>,
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

/// An API key as stored: never the token, only its hash.
#[derive(Clone, Debug)]
pub struct ApiKey {
    /// The key's id, for revocation.
    pub id: Uuid,
    /// The owner it authenticates as.
    pub owner: OwnerId,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
    /// What it may do.
    pub role: KeyRole,
    /// Its own limit of its owner's attempts running at once, if it sets one.
    pub max_in_flight: Option<u32>,
}

/// A live key found by its token's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveKey {
    /// The key's id: revocations name keys by it.
    pub id: Uuid,
    /// The owner it authenticates as.
    pub owner: OwnerId,
    /// What it may do.
    pub role: KeyRole,
    /// The stored hash, compared with the presented token's in constant time.
    pub token_hash: [u8; 32],
}

/// What a store's follower of API-key changes reports (see
/// [`Store::follow_key_changes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyChange {
    /// Every change from now on will be reported; changes made before may
    /// have been missed.
    Following,
    /// The follower lost its connection: changes may go unreported until it
    /// reports `Following` again.
    Lost,
    /// This key was revoked, changed or deleted.
    Changed(Uuid),
}

/// Every operation onejob performs on its database. A backend implements
/// the reads and the simple writes, and the statements of [`Driver`]; the
/// transitions (creating a job, admitting, settling, reaping, resolving,
/// canceling) are provided, written once in `transitions.rs`, and not
/// overridden.
#[async_trait]
pub trait Store: Driver {
    /// Applies the pending migrations.
    async fn migrate(&self) -> Result<()>;

    /// Answers when the database does and the migrations are applied.
    async fn check_ready(&self) -> Result<()>;

    /// Fails when the connections do not keep their server sessions (a
    /// pooler in transaction mode): checked once at start.
    async fn check_session_pooling(&self) -> Result<()> {
        Ok(())
    }

    /// Stores a new API key's hash.
    async fn insert_api_key(&self, id: Uuid, owner: &OwnerId, role: KeyRole, token_hash: &[u8; 32]) -> Result<()>;

    /// Sets a live key's own limit of its owner's attempts running at once
    /// (`None`: the default): whether a live key has that id.
    async fn set_key_max_in_flight(&self, id: Uuid, max_in_flight: Option<u32>) -> Result<bool>;

    /// The live (unrevoked) key with this hash.
    async fn find_api_key(&self, token_hash: &[u8; 32]) -> Result<Option<LiveKey>>;

    /// The owner of a live (unrevoked) key with this hash.
    async fn find_api_key_owner(&self, token_hash: &[u8; 32]) -> Result<Option<OwnerId>> {
        Ok(self.find_api_key(token_hash).await?.map(|key| key.owner))
    }

    /// Revokes a key; `false` when there is no such live key. Every process
    /// following key changes hears of it when it commits; on Postgres this
    /// returns once each of them has confirmed it forgot the key (or after
    /// two seconds, with a warning naming how many did not).
    async fn revoke_api_key(&self, id: Uuid) -> Result<bool>;

    /// Tells a revoker that this process forgot key `id` (see
    /// [`Self::revoke_api_key`]).
    async fn confirm_key_forgotten(&self, _id: Uuid) -> Result<()> {
        Ok(())
    }

    /// Reports every change to any API key made by any process, for caches
    /// of checked keys; the follower stops when the receiver is dropped.
    /// `None` when this store cannot push changes (SQLite): a caller must
    /// then look keys up every time.
    fn follow_key_changes(&self) -> Option<tokio::sync::mpsc::Receiver<KeyChange>> {
        None
    }

    /// Every key, or one owner's.
    async fn list_api_keys(&self, owner: Option<&OwnerId>) -> Result<Vec<ApiKey>>;

    /// Whether any API key exists at all.
    async fn has_api_keys(&self) -> Result<bool>;

    /// Creates a job with its first attempt, or finds the job that holds the
    /// key already (I1: the unique constraint decides).
    async fn create_job(&self, new: &NewJob) -> Result<CreateJob> {
        transitions::create_job(self, new).await
    }

    /// One of the owner's jobs with its attempts.
    async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>>;

    /// One of the owner's jobs by its idempotency key.
    async fn find_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>>;

    /// A page of the owner's jobs, newest first.
    async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>>;

    /// A job's audit log, oldest first.
    async fn list_events(&self, owner: &OwnerId, job_id: JobId) -> Result<Vec<JobEvent>>;

    /// Adds an attempt to a job if every admission rule allows it, in one
    /// transaction with the job locked.
    async fn admit_attempt(
        &self,
        owner: &OwnerId,
        job_id: JobId,
        new: &NewAttempt,
        rules: &dyn TaskRules,
    ) -> Result<Admission> {
        transitions::admit_attempt(self, owner, job_id, new, rules).await
    }

    /// Claims up to `max` due pending attempts for `worker`, fairly across
    /// owners (each owner's oldest first) and within the owners' and
    /// providers' limits, each under its provider's lease; they become
    /// `running` (see [`claims`]).
    async fn claim_attempts(&self, worker: &str, max: u32, leases: &Leases) -> Result<Vec<ClaimedAttempt>> {
        claims::claim(self, worker, max, leases).await
    }

    /// Puts a running attempt its provider refused before any work back to
    /// `pending` for `delay`, the same attempt, and pauses `pause` as long;
    /// fenced by `worker`, at most `max` times (see [`transitions::requeue`]).
    async fn requeue_attempt(
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
    async fn pause_provider(&self, provider: &str, pause: Duration) -> Result<()> {
        let mut tx = self.begin().await?;
        tx.pause_provider(provider, pause).await?;
        tx.commit().await
    }

    /// Takes `tokens` from `provider`'s shared bucket of `per_minute`: `None`
    /// when taken, else how long until it holds them (or is full, for more).
    async fn reserve_tokens(&self, provider: &str, tokens: u64, per_minute: u32) -> Result<Option<Duration>>;

    /// What a queued job of the owner waits for, or `None` without a pending attempt.
    async fn waiting_facts(&self, owner: &OwnerId, job_id: JobId) -> Result<Option<claims::WaitingFacts>>;

    /// Turns running attempts whose lease has expired (their worker died or
    /// stalled) into `unknown` (I4): never `pending`, never `failed`.
    async fn expire_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        transitions::expire_leases(self, max).await
    }

    /// The jobs that finished (won, or were canceled) while attempts of
    /// theirs run under `worker`'s leases: the calls its sweep aborts.
    async fn finished_jobs_running_on(&self, worker: &str) -> Result<Vec<JobId>>;

    /// Claims up to `max` unknown attempts of `providers` that are due for a
    /// status lookup, and holds them for `hold` before they are due again.
    async fn claim_reconciliations(
        &self,
        providers: &[String],
        max: u32,
        hold: Duration,
    ) -> Result<Vec<UnknownAttempt>>;

    /// Puts off the next status lookup of an unknown attempt.
    async fn postpone_reconciliation(&self, attempt: &AttemptRef, delay: Duration) -> Result<()>;

    /// Purges up to `max` finished jobs under `rule` in one transaction
    /// (see [`retention`]), unless another process is purging.
    async fn purge_batch(&self, rule: &retention::PurgeRule, max: u32) -> Result<retention::PurgeBatch> {
        retention::purge_batch(self, rule, max).await
    }

    /// How many finished jobs `rule` would purge now (nothing is changed).
    async fn count_purgeable(&self, rule: &retention::PurgeRule) -> Result<u64> {
        self.begin().await?.count_purgeable(rule).await
    }

    /// Gives the space a large purge freed back to the disk where the
    /// database does not reuse it by itself: SQLite's incremental vacuum
    /// (a file made with it); nothing on Postgres, whose autovacuum does.
    async fn reclaim_space(&self) -> Result<()> {
        Ok(())
    }

    /// Erases one of `owner`'s finished jobs now (`DELETE /jobs/{id}`).
    async fn erase_job(&self, owner: &OwnerId, id: JobId) -> Result<retention::Erasure> {
        retention::erase_job(self, owner, id).await
    }

    /// How many jobs are `unknown` and unchanged since `before`: kept
    /// whatever their age, and reported.
    async fn count_unknown_since(&self, before: DateTime<Utc>) -> Result<u64>;

    /// Cancels a job unless it succeeded: pending attempts are canceled;
    /// running ones are left to their workers, which abort their calls
    /// (the task's `cancel_losers`) or record their answers, never applied.
    async fn cancel_job(&self, owner: &OwnerId, id: JobId) -> Result<Cancel> {
        transitions::cancel_job(self, owner, id).await
    }

    /// Stores a qualification run.
    async fn insert_qualification(
        &self,
        provider: &str,
        task: &str,
        contract_hash: &[u8; 32],
        passed: bool,
        report: &Value,
    ) -> Result<QualificationRecord>;

    /// Where `provider` stands for `task`'s contract with this hash.
    async fn qualification_state(
        &self,
        provider: &str,
        task: &str,
        contract_hash: &[u8; 32],
    ) -> Result<QualificationState>;

    /// The latest qualification run of `provider` for `task`, of any contract.
    async fn latest_qualification(&self, provider: &str, task: &str) -> Result<Option<QualificationRecord>>;

    /// Queue depth and unknown attempts, for the metrics gauges.
    async fn sample_gauges(&self) -> Result<Gauges>;

    /// Records an attempt's output. The job's compare-and-swap decides: the
    /// first output wins, every later one is `superseded` (I3). `holder`
    /// fences the settlement: when given, it applies only while the attempt
    /// is `running` under that worker's live lease ([`Transition::Fenced`]
    /// otherwise); the reconciler, which settles `unknown` attempts, gives
    /// none. `usage` is recorded by the same statement as the settlement
    /// (a settlement refused records none: see [`Store::record_usage`]).
    async fn finish_attempt(
        &self,
        attempt: &AttemptRef,
        output: &Value,
        holder: Option<&str>,
        usage: Option<&AttemptUsage>,
    ) -> Result<Transition> {
        transitions::settle_with_output(self, attempt, output, AttemptTransition::Finish, None, (holder, usage)).await
    }

    /// Records several attempts' outputs, as [`Store::finish_attempt`] does
    /// each, in one transaction: one compare-and-swap per attempt, one
    /// commit; the answers in the order given.
    async fn finish_attempts(&self, finishes: &[Finish<'_>]) -> Vec<Result<Transition>> {
        transitions::finish_attempts(self, finishes).await
    }

    /// Records a definitive failure of a running or unknown attempt, and
    /// admits the retry policy's next attempt in the same transaction;
    /// fenced by `holder`, with `usage`, as [`Store::finish_attempt`] is.
    async fn fail_attempt(
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
            (holder, usage),
        )
        .await
    }

    /// Records that a running attempt's call was aborted because its job
    /// had finished: it is `canceled`; fenced by `holder` as
    /// [`Store::finish_attempt`] is, with `usage`.
    async fn abort_attempt(
        &self,
        attempt: &AttemptRef,
        error: &AttemptError,
        holder: Option<&str>,
        usage: Option<&AttemptUsage>,
    ) -> Result<Transition> {
        transitions::settle_without_output(self, attempt, AttemptTransition::Abort, error, None, None, (holder, usage))
            .await
    }

    /// Records that a running attempt's outcome cannot be known (I4);
    /// fenced by `holder`, with `usage`, as [`Store::finish_attempt`] is.
    async fn mark_unknown(
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
            (holder, usage),
        )
        .await
    }

    /// Keeps an output that did not become the attempt's (it broke the
    /// contract, or came after the attempt was settled) on the attempt, for
    /// audit: `unapplied` is [`crate::domain::unapplied_output`]'s.
    async fn record_unapplied_output(&self, attempt: &AttemptRef, unapplied: &Value) -> Result<bool>;

    /// Keeps the provider's own id of an attempt's request (a background
    /// response's) on the attempt, as soon as it is known: its status
    /// lookup and cancel call need it. The first id stays; whoever holds
    /// the attempt, and whatever its state, the id is a fact about it.
    async fn record_provider_request(&self, attempt: &AttemptRef, provider_request_id: &str) -> Result<bool>;

    /// Settles an unknown attempt by an operator's word, through the same
    /// compare-and-swap as a worker's finish.
    async fn resolve_unknown(
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
    async fn find_unknown_attempt_owner(&self, job_id: JobId, number: i32) -> Result<Option<OwnerId>>;

    /// A page of jobs, newest first, of one owner or (`None`) of every
    /// owner, only the one holding idempotency key `key` when given: the
    /// dashboard's listing. Across owners it reads every owner's rows.
    async fn browse_jobs(
        &self,
        owner: Option<&OwnerId>,
        key: Option<&str>,
        filter: &JobFilter,
    ) -> Result<Vec<OwnedJobSummary>>;

    /// The owner of job `id`, of any owner: how an admin's dashboard finds a
    /// job it was given the id of.
    async fn find_job_owner(&self, id: JobId) -> Result<Option<OwnerId>>;

    /// The attempts whose outcome is unknown, of one owner or (`None`) of
    /// every owner, the longest unknown first, at most `limit`.
    async fn list_unknown_attempts(&self, owner: Option<&OwnerId>, limit: u32) -> Result<Vec<OpenUnknown>>;

    /// Records the tokens an attempt used and their cost, whatever its
    /// state; a later record (the provider's own count after an estimate)
    /// replaces an earlier one. `false`: no such attempt for this owner.
    async fn record_usage(&self, attempt: &AttemptRef, usage: &AttemptUsage) -> Result<bool>;

    /// The owner's attempts with recorded usage created in the filter's
    /// range, oldest first, for the usage report.
    async fn list_usage(&self, owner: &OwnerId, filter: &UsageFilter) -> Result<Vec<UsageRow>>;

    // Dashboard sessions and the first run (see `sessions.rs`).

    /// Stores a new dashboard session, ending `session.lifetime` from now
    /// by the database's clock.
    async fn insert_dashboard_session(&self, session: &NewSession) -> Result<()>;

    /// The dashboard session whose token hashes to `token_hash`, live or
    /// not, with its key's token hash and the database's clock: one look-up
    /// by an index.
    async fn find_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<Option<StoredSession>>;

    /// Marks a dashboard session used now.
    async fn touch_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<()>;

    /// Ends a dashboard session: its row is deleted. `false` when there was
    /// none.
    async fn delete_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<bool>;

    /// Deletes every dashboard session past its lifetime or unused for
    /// `idle`; how many.
    async fn delete_expired_dashboard_sessions(&self, idle: Duration) -> Result<u64>;

    /// Stores the first run's key, unless the database had its first run
    /// already or has a key: `bootstrap`'s one row, inserted in the key's
    /// transaction, decides, so that of replicas starting together on an
    /// empty database exactly one makes it. `true` when this call made it.
    async fn insert_first_run_key(
        &self,
        id: Uuid,
        owner: &OwnerId,
        role: KeyRole,
        token_hash: &[u8; 32],
    ) -> Result<bool>;

    // Webhooks (see `webhooks.rs`).

    /// Stores an endpoint and its subscriptions.
    async fn insert_webhook_endpoint(&self, new: &NewEndpoint) -> Result<Endpoint>;

    /// An owner's endpoints, the oldest first.
    async fn list_webhook_endpoints(&self, owner: &OwnerId) -> Result<Vec<Endpoint>>;

    /// Deletes an owner's endpoint with its deliveries; `false` when it had none such.
    async fn delete_webhook_endpoint(&self, owner: &OwnerId, id: Uuid) -> Result<bool>;

    /// Gives an owner's endpoint a new secret; the old one still signs for
    /// `keep_old`. `None` when it has no such endpoint.
    async fn rotate_webhook_secret(
        &self,
        owner: &OwnerId,
        id: Uuid,
        secret: &str,
        keep_old: Duration,
    ) -> Result<Option<Endpoint>>;

    /// The latest `limit` deliveries to an owner's endpoint, each with its
    /// tries; `None` when it has no such endpoint.
    async fn list_webhook_deliveries(
        &self,
        owner: &OwnerId,
        endpoint: Uuid,
        limit: u32,
    ) -> Result<Option<Vec<Delivery>>>;

    /// Claims up to `max` due deliveries of live endpoints for `lease`.
    async fn claim_webhook_deliveries(&self, max: u32, lease: Duration) -> Result<Vec<ClaimedDelivery>>;

    /// Records tries of claimed deliveries, and what follows from each, in
    /// one transaction.
    async fn record_webhook_tries(&self, done: &[DeliveryTry]) -> Result<()>;
}

/// A stored value the program cannot read back.
pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Whether the database has every migration this program embeds.
pub(crate) fn check_migrations(applied: Option<i64>, latest: i64) -> Result<()> {
    if applied.unwrap_or(0) < latest {
        return Err(corrupt(format!("migrations not applied: database at {applied:?}, program at {latest}")));
    }
    Ok(())
}

/// Sorts a sqlx error into "try again later" and everything else.
pub(crate) fn classify(error: sqlx::Error) -> StoreError {
    let unavailable = match &error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Tls(_) => true,
        // Connection exceptions, too many connections, shutdowns, statement
        // or lock timeouts, and serialization failures: a retry may pass.
        // Postgres: by SQLSTATE. SQLite: busy, locked (plain and extended
        // codes), and a file that cannot be opened.
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("57P")
                || matches!(&*code, "53300" | "40001" | "40P01" | "57014" | "55P03")
                || matches!(&*code, "5" | "6" | "14" | "261" | "262" | "517")
        }),
        _ => false,
    };
    if unavailable { StoreError::Unavailable(error) } else { StoreError::Database(error) }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        classify(error)
    }
}
