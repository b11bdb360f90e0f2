//! The per-backend interface the transitions run on: one method per
//! statement, the same names in `postgres/` and `sqlite/`. Which
//! statements run, in which order and under which checks is decided once,
//! in `transitions.rs`; a backend only says how each statement is written
//! for its database. Where one database does in one statement what the
//! other needs several for (settling with an output on Postgres), that is
//! one driver method, not a second copy of the logic.
//!
//! Nothing outside the store calls these: callers use [`super::Store`].

mod claiming;
mod values;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::events::NewEvent;
use super::purge::{PurgeRule, RollupKey, RollupTotals};
use super::usage::{AttemptUsage, UsageRow};
use super::webhooks::Outgoing;
use uuid::Uuid;

use super::*;
use crate::domain::{Attempt, AttemptState, IdempotencyKey, Job, JobEvent, JobId, JobState, JobSummary, OwnerId};
pub(super) use claiming::by_kind;
pub(crate) use claiming::{Candidate, PendingOwner, ProviderGate, RunningCounts};
pub(super) use values::LockedAttemptRow;
pub(crate) use values::{AttemptHolder, AttemptOutcome, LockedAttempt, LockedJob, SettleWithOutput, SettledWithOutput};

/// A write transaction of one backend. Postgres holds the job's row lock
/// from [`DriverTx::lock_job`] to commit; SQLite holds its one write lock
/// for the whole transaction. Dropped without [`DriverTx::commit`], it
/// rolls back.
#[async_trait]
pub trait DriverTx: Send {
    /// Locks the job's row (every transition on an existing job starts
    /// here) and reads what the transitions need of it.
    async fn lock_job(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<LockedJob>>;

    /// The job's budget column (decimal text) and its input.
    async fn job_budget(&mut self, owner: &OwnerId, job_id: JobId) -> Result<(Option<String>, Value)>;

    /// The state of one attempt.
    async fn attempt_state(&mut self, attempt: &AttemptRef) -> Result<Option<AttemptState>>;

    /// Locks a job for a piece of its output; `None` without the job.
    async fn lock_output(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<super::output::OutputLock>>;

    /// Makes attempt `number` the one the job's output shows.
    async fn set_output_attempt(&mut self, owner: &OwnerId, job_id: JobId, number: i32) -> Result<()>;

    /// Writes a piece of the job's output.
    async fn insert_output(&mut self, owner: &OwnerId, job_id: JobId, piece: &super::output::OutputPiece)
    -> Result<()>;

    /// [`DriverTx::lock_job`] for the attempt's job, in the same statement
    /// reading the attempt's state, who holds it and whether that holder's
    /// lease is still live by the database's clock (what fences a worker's
    /// settlement); `None` for an attempt that does not exist. With
    /// `skip_locked`, a job another transaction holds locked is not waited
    /// for: `None` too (a batch that never waits cannot deadlock).
    async fn lock_attempt_job(&mut self, attempt: &AttemptRef, skip_locked: bool) -> Result<Option<LockedAttempt>>;

    /// [`DriverTx::lock_attempt_job`] with `skip_locked` for attempts of one
    /// owner's distinct jobs, locked in the order given: the answers in that
    /// order. Postgres reads and locks them all in one statement (the owner
    /// bound once, as every statement binds it); SQLite, whose transaction
    /// already holds its one write lock, one by one.
    async fn lock_attempt_jobs(&mut self, attempts: &[&AttemptRef]) -> Result<Vec<Option<LockedAttempt>>> {
        let mut locked = Vec::with_capacity(attempts.len());
        for attempt in attempts {
            locked.push(self.lock_attempt_job(attempt, true).await?);
        }
        Ok(locked)
    }

    /// The attempt used and cost nothing: its usage becomes zero (as
    /// counted, not estimated), and its cost zero if it had one. For an
    /// attempt the provider never received.
    async fn forget_usage(&mut self, attempt: &AttemptRef) -> Result<()>;

    /// The states of a job's attempts.
    async fn attempt_states(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<AttemptState>>;

    /// A job's attempts, by number.
    async fn read_attempts(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<Attempt>>;

    /// Stores a job's state.
    async fn set_job_state(&mut self, owner: &OwnerId, job_id: JobId, state: JobState) -> Result<()>;

    /// Inserts a pending attempt numbered `number` on `provider`.
    async fn insert_attempt(&mut self, attempt: &AttemptRef, new: &NewAttempt, provider: &str) -> Result<Attempt>;

    /// Appends a row to the job's audit log.
    async fn append_event(&mut self, event: NewEvent<'_>) -> Result<()>;

    /// Writes a delivery of `message` to each of its owner's live endpoints
    /// subscribed to its type: the outbox, in the transition's transaction.
    async fn enqueue_webhook(&mut self, message: &Outgoing<'_>) -> Result<()>;

    /// Where `provider` stands for `task`'s contract with this hash.
    async fn qualification_state(&mut self, provider: &str, task: &str, hash: &[u8; 32]) -> Result<QualificationState>;

    /// Moves the attempt from one of `outcome.from` to `outcome.to` with its
    /// error; an unknown one becomes due for reconciliation; its usage,
    /// when given, is recorded on it. The number of rows changed: 0 when
    /// the guard failed.
    async fn set_attempt_outcome(&mut self, attempt: &AttemptRef, outcome: &AttemptOutcome<'_>) -> Result<u64>;

    /// Settles the attempt with an output through the job's compare-and-swap
    /// (only a job that has not finished takes a winner), cancels the
    /// winner's pending siblings, and appends the event: `settlement.won`
    /// (with the canceled numbers added as `canceled`) or
    /// `settlement.lost`.
    async fn settle_with_output(&mut self, settlement: &SettleWithOutput<'_>) -> Result<SettledWithOutput>;

    /// [`DriverTx::settle_with_output`] for the outputs of one
    /// owner's distinct jobs, each locked: the answers in the order given.
    /// Postgres settles them all in one statement; SQLite one by one.
    async fn settle_outputs(&mut self, settlements: &[SettleWithOutput<'_>]) -> Result<Vec<SettledWithOutput>> {
        settle_each(self, settlements).await
    }

    /// Marks the job canceled and cancels its pending attempts: their numbers.
    async fn cancel_job_and_pending(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<i32>>;

    /// Takes the purge's lock for this transaction: `false` while another
    /// process's purge holds it (Postgres: an advisory lock; on SQLite the
    /// write transaction is the one writer, so always `true`).
    async fn take_purge_lock(&mut self) -> Result<bool>;

    /// Up to `max` finished jobs under `rule`, oldest change first, none of
    /// whose attempts is open or changed since the rule's cutoff; locked.
    async fn purgeable_jobs(&mut self, rule: &PurgeRule, max: u32) -> Result<Vec<(OwnerId, JobId)>>;

    /// How many finished jobs `rule` would purge now (nothing is locked).
    async fn count_purgeable_jobs(&mut self, rule: &PurgeRule) -> Result<u64>;

    /// The usage of the jobs' attempts that have any, with their owners.
    async fn usage_of_jobs(&mut self, jobs: &[(OwnerId, JobId)]) -> Result<Vec<(OwnerId, UsageRow)>>;

    /// Adds `totals` to a rollup row (made if missing), atomically with
    /// respect to other transactions adding to it.
    async fn add_to_rollup(&mut self, key: &RollupKey, totals: &RollupTotals) -> Result<()>;

    /// Deletes the jobs with their attempts, events and webhook deliveries
    /// (and their tries): how many jobs went.
    async fn delete_jobs(&mut self, jobs: &[(OwnerId, JobId)]) -> Result<u64>;

    /// Takes, in name order, the claim lock of each owner and the state row
    /// of each provider (made if missing) until commit: claims counting the
    /// same limit take turns (SQLite: its write lock already does).
    async fn lock_claims(&mut self, owners: &[String], providers: &[String]) -> Result<()>;

    /// Running attempts of each of `owners` and of each of `providers`.
    async fn running_counts(&mut self, owners: &[String], providers: &[String]) -> Result<RunningCounts>;

    /// The stored state of those of `providers` that have one.
    async fn provider_gates(&mut self, providers: &[String]) -> Result<Vec<ProviderGate>>;

    /// Up to `max` of `owner`'s due pending attempts on `providers` whose
    /// jobs have not finished, oldest first, locked (rows another claimer
    /// holds are skipped).
    async fn claim_candidates(&mut self, owner: &str, providers: &[String], max: u32) -> Result<Vec<Candidate>>;

    /// Starts one owner's candidates: `running` under `worker` for their
    /// leases, their jobs `running`, an `attempt-claimed` event each. When
    /// each lease ends, in order.
    async fn start_attempts(
        &mut self,
        worker: &str,
        candidates: &[Candidate],
        leases: &[std::time::Duration],
    ) -> Result<Vec<DateTime<Utc>>>;

    /// Writes a provider's request bucket level, as of now.
    async fn put_requests(&mut self, provider: &str, level: f64) -> Result<()>;

    /// Pauses claims of a provider's attempts for `pause` (a pause already
    /// lasting longer stays).
    async fn pause_provider(&mut self, provider: &str, pause: std::time::Duration) -> Result<()>;

    /// Moves a running attempt back to `pending`, due in `delay`, with no
    /// worker or lease, unless it was `max` times already (`None`: not
    /// counted): the number of rows changed.
    async fn requeue_attempt(
        &mut self,
        attempt: &AttemptRef,
        delay: std::time::Duration,
        max: Option<u32>,
    ) -> Result<u64>;

    /// Commits.
    async fn commit(self: Box<Self>) -> Result<()>;
}

/// A transaction of any backend.
pub(crate) type Tx = Box<dyn DriverTx>;

/// The statements of a backend that run outside the transitions'
/// transactions, and how to begin one.
#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// Begins a write transaction.
    async fn begin(&self) -> Result<Tx>;

    /// The turns in which groups of new jobs are written
    /// (`super::groups`): a turn of their own on Postgres, the one
    /// writer's on SQLite.
    fn creation_turns(&self) -> std::sync::Arc<tokio::sync::Semaphore>;

    /// How long a new job may wait queued for its group before it is
    /// refused as unavailable (`None`: as long as it takes).
    fn creation_deadline(&self) -> Option<Duration>;

    /// Inserts a group of new jobs, in one of [`Driver::creation_turns`]:
    /// each with its first attempt and its `job-created` event, unless its
    /// key is taken (the unique constraint decides, I1). Answers each
    /// creation: when its job was inserted, or `None`.
    async fn insert_jobs(&self, group: Vec<super::groups::Creation>);

    /// Up to `max` owners with pending attempts, in owner order after
    /// `after`, each with the largest `max_in_flight` its live keys set:
    /// read outside any transaction, a claim's hint of where to look.
    async fn pending_owners(&self, after: &str, max: u32) -> Result<Vec<PendingOwner>>;

    /// Whether `rule` may purge any job now: a read, so that a purger with
    /// nothing to purge takes no lock.
    async fn any_purgeable(&self, rule: &PurgeRule) -> Result<bool>;

    /// Running attempts whose lease has expired, the oldest first.
    async fn expired_leases(&self, max: u32) -> Result<Vec<AttemptRef>>;

    /// Applies the pending migrations.
    async fn migrate(&self) -> Result<()>;

    /// Answers when the database does and the migrations are applied.
    async fn check_ready(&self) -> Result<()>;

    /// Fails when the connections do not keep their server sessions (a
    /// pooler in transaction mode): checked once at start.
    async fn check_session_pooling(&self) -> Result<()> {
        Ok(())
    }

    /// What the database says of its replication; `None` where it has none
    /// (SQLite).
    async fn replication(&self) -> Result<Option<super::Replication>> {
        Ok(None)
    }

    /// Stores a new API key's hash.
    async fn insert_api_key(&self, key: &NewKey<'_>) -> Result<()>;

    /// Sets a live key's own limit of its owner's attempts running at once
    /// (`None`: the default): whether a live key has that id.
    async fn set_key_max_in_flight(&self, id: Uuid, max_in_flight: Option<u32>) -> Result<bool>;

    /// The live (unrevoked) key with this hash.
    async fn find_api_key(&self, token_hash: &[u8; 32]) -> Result<Option<LiveKey>>;

    /// Revokes a key; `false` when there is no such live key. Every process
    /// following key changes hears of it when it commits; on Postgres this
    /// returns once each of them has confirmed it forgot the key (or after
    /// two seconds, with a warning naming how many did not).
    async fn revoke_api_key(&self, id: Uuid, owner: Option<&OwnerId>) -> Result<bool>;

    /// Tells a revoker that this process forgot key `id` (see
    /// [`Self::revoke_api_key`]).
    async fn confirm_key_forgotten(&self, _id: Uuid) -> Result<()> {
        Ok(())
    }

    /// Reports changes to API keys made by any process (see
    /// [`Store::follow_key_changes`]).
    fn follow_key_changes(&self) -> Option<tokio::sync::mpsc::Receiver<KeyChange>>;

    /// Every key, or one owner's.
    async fn list_api_keys(&self, owner: Option<&OwnerId>) -> Result<Vec<ApiKey>>;

    /// Whether any API key exists at all.
    async fn has_api_keys(&self) -> Result<bool>;

    /// One of the owner's jobs with its attempts.
    async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>>;

    /// One of the owner's jobs by its idempotency key.
    async fn find_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>>;

    /// A page of the owner's jobs, newest first.
    async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>>;

    /// A job's audit log, oldest first.
    async fn list_events(&self, owner: &OwnerId, job_id: JobId) -> Result<Vec<JobEvent>>;

    /// The job's output after piece `after`, in order.
    async fn list_output(&self, owner: &OwnerId, job_id: JobId, after: i64) -> Result<Vec<super::output::OutputPiece>>;

    /// Appends each of `owner`'s `pieces` (job, attempt number, text; each
    /// job once) whose attempt holds its job's output, the job neither
    /// succeeded nor canceled, as one write: the number of each written.
    /// Postgres writes them by one statement; SQLite writes none this way
    /// (a batch is already one transaction of its one writer there).
    async fn append_to_held_outputs(&self, owner: &OwnerId, pieces: &[(JobId, i32, &str)]) -> Result<Vec<Option<i64>>>;

    /// Takes `tokens` from `provider`'s shared bucket of `per_minute`: `None`
    /// when taken, else how long until it holds them (or is full, for more).
    async fn reserve_tokens(&self, provider: &str, tokens: u64, per_minute: u32) -> Result<Option<Duration>>;

    /// Every provider's stored breaker.
    async fn list_breakers(&self) -> Result<Vec<super::breakers::StoredBreaker>>;

    /// Changes a provider's breaker; whether it applied.
    async fn change_breaker(&self, provider: &str, change: super::breakers::BreakerChange<'_>) -> Result<bool>;

    /// What a queued job of the owner waits for, or `None` without a pending attempt.
    async fn waiting_facts(&self, owner: &OwnerId, job_id: JobId) -> Result<Option<WaitingFacts>>;

    /// The jobs that finished (won, or were canceled) while attempts of
    /// theirs run under `worker`'s leases: the calls its sweep aborts.
    async fn finished_jobs_running_on(&self, worker: &str) -> Result<Vec<JobId>>;

    /// Whether any unknown attempt of `providers` is due for a status
    /// lookup: a read, so that an idle reconciler takes no write lock.
    async fn any_due_unknown(&self, providers: &[String]) -> Result<bool>;

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

    /// Gives the space a large purge freed back to the disk where the
    /// database does not reuse it by itself: SQLite's incremental vacuum
    /// (a file made with it); nothing on Postgres, whose autovacuum does.
    async fn reclaim_space(&self) -> Result<()> {
        Ok(())
    }

    /// How many jobs are `unknown` and unchanged since `before`: kept
    /// whatever their age, and reported.
    async fn count_unknown_since(&self, before: DateTime<Utc>) -> Result<u64>;

    /// Stores a qualification run.
    async fn insert_qualification(&self, run: &NewQualificationRun<'_>) -> Result<QualificationRecord>;

    /// Where `provider` stands for `task`'s contract with this hash.
    async fn qualification_state(
        &self,
        provider: &str,
        task: &str,
        contract_hash: &[u8; 32],
    ) -> Result<QualificationState>;

    /// The latest qualification run of `provider` for `task`, of any contract.
    async fn latest_qualification(&self, provider: &str, task: &str) -> Result<Option<QualificationRecord>>;

    /// Every (provider, task) pair with a qualification run, in order.
    async fn list_qualified_pairs(&self) -> Result<Vec<(String, String)>>;

    /// Queue depth and unknown attempts, for the metrics gauges.
    async fn sample_gauges(&self) -> Result<Gauges>;

    /// Keeps an output that did not become the attempt's (it broke the
    /// contract, or came after the attempt was settled) on the attempt, for
    /// audit: `unapplied` is [`crate::domain::unapplied_output`]'s.
    async fn record_unapplied_output(&self, attempt: &AttemptRef, unapplied: &Value) -> Result<bool>;

    /// Keeps the provider's own id of an attempt's request (a background
    /// response's) on the attempt, as soon as it is known: its status
    /// lookup and cancel call need it. The first id stays; whoever holds
    /// the attempt, and whatever its state, the id is a fact about it.
    async fn record_provider_request(&self, attempt: &AttemptRef, provider_request_id: &str) -> Result<bool>;

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

    /// The key of the callbacks' tokens, which the migrations made.
    async fn callback_secret(&self) -> Result<Option<String>>;

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
    async fn insert_first_run_key(&self, key: &NewKey<'_>) -> Result<bool>;

    /// Stores an endpoint and its subscriptions, unless its owner has
    /// `max_per_owner` endpoints already (`None`).
    async fn insert_webhook_endpoint(&self, new: &NewEndpoint, max_per_owner: u32) -> Result<Option<Endpoint>>;

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

    /// Whether any delivery is due: a read, so that an idle deliverer takes
    /// no write lock.
    async fn has_due_webhook_deliveries(&self) -> Result<bool>;

    /// Claims up to `max` due deliveries of live endpoints for `lease`,
    /// none of an owner in `skip`.
    async fn claim_webhook_deliveries(
        &self,
        max: u32,
        lease: Duration,
        skip: &[String],
    ) -> Result<Vec<ClaimedDelivery>>;

    /// Makes claimed deliveries of `owner` due again at once, their try
    /// not counted.
    async fn release_webhook_deliveries(&self, owner: &OwnerId, ids: &[Uuid]) -> Result<()>;

    /// Records tries of claimed deliveries, and what follows from each, in
    /// one transaction.
    async fn record_webhook_tries(&self, done: &[DeliveryTry]) -> Result<()>;
}

/// Settles outputs one statement each ([`DriverTx::settle_outputs`] where
/// one statement cannot hold them all).
pub(super) async fn settle_each<T: DriverTx + ?Sized>(
    tx: &mut T,
    settlements: &[SettleWithOutput<'_>],
) -> Result<Vec<SettledWithOutput>> {
    let mut settled = Vec::with_capacity(settlements.len());
    for settlement in settlements {
        settled.push(tx.settle_with_output(settlement).await?);
    }
    Ok(settled)
}

/// Stores the job state that its attempts now imply (a terminal one stays).
pub(super) async fn update_job_state(
    tx: &mut Tx,
    owner: &OwnerId,
    job_id: JobId,
    current: crate::domain::JobState,
) -> Result<crate::domain::JobState> {
    let derived = crate::domain::JobState::derive(current, tx.attempt_states(owner, job_id).await?);
    if derived != current {
        tx.set_job_state(owner, job_id, derived).await?;
    }
    Ok(derived)
}
