//! The `Store` trait: every read and every state transition of jobs,
//! attempts, events, API keys, sessions, webhooks, usage and retention,
//! behind one interface (see the module `store` for how it is built).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::*;
use crate::domain::{
    AttemptError, AttemptTransition, IdempotencyKey, Job, JobEvent, JobId, JobSummary, KeyRole, OwnerId,
};

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
    async fn claim_attempts(&self, worker: &str, max: u32, leases: &Leases) -> Result<claims::Claimed> {
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
    async fn cancel_job(&self, owner: &OwnerId, id: JobId, rules: &dyn TaskRules) -> Result<Cancel> {
        transitions::cancel_job(self, owner, id, rules).await
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
        transitions::settle_with_output(
            self,
            attempt,
            output,
            AttemptTransition::Finish,
            None,
            Settlement { holder, usage },
        )
        .await
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
            Settlement { holder, usage },
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
        transitions::settle_without_output(
            self,
            attempt,
            AttemptTransition::Abort,
            error,
            None,
            None,
            Settlement { holder, usage },
        )
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
            Settlement { holder, usage },
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
