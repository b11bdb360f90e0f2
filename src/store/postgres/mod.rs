//! The Postgres store, the system of record: its SQL, one statement per
//! purpose, and what only Postgres does (the one-statement create and
//! settle, `skip locked` claims, LISTEN/NOTIFY for key changes). The logic
//! of the transitions is in `transitions.rs`.
//!
//! Lock order, which every transition follows so that no two can deadlock:
//! the job row first (`for no key update`), then its attempts. Claims take
//! both with `skip locked` and so never wait.
//!
//! State names are bound as parameters, or, in statements that must match a
//! partial index (`where state = 'pending'`), written into the statement
//! from the enums when it is first built.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{Postgres, Row, Transaction};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::driver::{LockedAttempt, LockedAttemptRow, LockedJob, Outcome, OutputSettlement, Settled, Tx};
use super::events::NewEvent;
use super::rows::{AttemptRefRow, JobSummaryRow, QualificationRow, attempts_from_rows, job_from_rows, stored_trace};
use super::shared::{impl_driver, impl_driver_tx};
use super::usage::{AttemptUsage, UsageFilter, UsageRow, bind_counts, bind_usage};
use super::webhooks::Outgoing;
use super::{
    ApiKey, AttemptRef, Gauges, JobFilter, KeyChange, LiveKey, NewAttempt, NewJob, NewKey, NewQualificationRun,
    OpenUnknown, OwnedJobSummary, QualificationRecord, QualificationState, Result, StoreError, UnknownAttempt, corrupt,
};
use crate::domain::{
    Attempt, AttemptId, AttemptState, IdempotencyKey, Job, JobEvent, JobId, JobState, JobSummary, OwnerId,
};
use crate::store::rows::BindAttempt;
use hot::HotConnections;

mod breakers;
mod catalogue;
mod claims;
mod connect;
mod creates;
mod hot;
mod keys;
mod pooling;
mod retention;
mod sessions;
mod sql;
mod webhooks;

pub use catalogue::{CROSS_OWNER, HotStatement, statements};
use sql::{CLAIM_RECONCILIATIONS, EXPIRED_LEASES, FIND_JOB_BY_KEY, GET_JOB, SAMPLE_GAUGES, SETTLE_WITH_OUTPUT};

/// The embedded migrations of `migrations/postgres`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// How to reach Postgres.
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// The most connections the pool opens.
    pub max_connections: u32,
    /// How long a request waits for a free connection before it is told the
    /// database is unavailable.
    pub acquire_timeout: Duration,
    /// The longest any one statement may run.
    pub statement_timeout: Duration,
}

/// The Postgres implementation of [`super::Store`].
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    // The one-statement requests of the hot path (see `hot`).
    hot: Arc<HotConnections>,
    // New jobs waiting for their group commit (see `creates`).
    creates: Arc<creates::Creates>,
    // Where new connections go (see `connect`).
    hosts: Arc<connect::Hosts>,
    // Keeps the connections on a writable host when the URL names several;
    // stopped with the last clone of the store.
    _watcher: Option<Arc<AbortOnDrop>>,
}

/// A task that stops when this is dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PostgresStore {
    /// Opens a pool on `url`. Connections are made lazily, so a server that is
    /// down at start-up is reported on first use, not here. A URL may name
    /// several hosts; connections then go to the writable one (`connect`).
    ///
    /// The startup packet carries nothing a connection pooler could refuse:
    /// the session's settings (the statement timeout) are set by a first
    /// statement on each new connection instead, so that PgBouncer in session
    /// mode needs no `ignore_startup_parameters` (docs/operations.md).
    pub fn connect_lazy(url: &str, options: &PostgresOptions) -> Result<Self> {
        let hosts = Arc::new(connect::Hosts::parse(url, |connect| {
            connect.application_name("onejob").extra_float_digits(None)
        })?);
        let session = session_settings(options);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            // No ping before each use: it would be a second round trip per
            // request. A connection broken since its last use fails its next
            // statement, is dropped by the pool, and that request answers
            // 503 (retryable with the same key); the error also makes every
            // connection opened before it stale, dropped here when asked for.
            .test_before_acquire(false)
            .before_acquire(|_, meta| Box::pin(async move { Ok(!super::eviction::is_stale_by_age(meta.age)) }))
            .after_connect({
                let session: Arc<str> = session.clone().into();
                let hosts = hosts.clone();
                move |connection, _| {
                    let (session, hosts) = (session.clone(), hosts.clone());
                    Box::pin(async move { hosts.prepare(connection, &session).await })
                }
            })
            .connect_lazy_with(hosts.options());
        let hot = HotConnections::new(hosts.clone(), session.clone(), options.max_connections, options.acquire_timeout);
        let watcher = (hosts.several())
            .then(|| tokio::spawn(connect::watch_hosts(hosts.clone(), pool.clone(), session)))
            .map(|task| Arc::new(AbortOnDrop(task)));
        Ok(Self { pool, hot: Arc::new(hot), creates: Arc::default(), hosts, _watcher: watcher })
    }

    /// Wraps an existing pool (tests use this).
    pub fn from_pool(pool: PgPool) -> Self {
        let options = pool.options();
        let hosts = Arc::new(connect::Hosts::one((*pool.connect_options()).clone()));
        let hot = HotConnections::new(
            hosts.clone(),
            String::new(),
            options.get_max_connections(),
            options.get_acquire_timeout(),
        );
        Self { pool, hot: Arc::new(hot), creates: Arc::default(), hosts, _watcher: None }
    }

    /// The pool, for tests that look at the tables directly.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// What every new connection runs first: the longest a statement may run,
/// and floats in text answers as precise as sqlx asks for in its startup
/// packet (which no longer carries it).
fn session_settings(options: &PostgresOptions) -> String {
    format!("set statement_timeout = {}; set extra_float_digits = 2", options.statement_timeout.as_millis())
}

fn state_names(states: &[AttemptState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

/// A transaction on Postgres.
type PgTransaction = Transaction<'static, Postgres>;

/// A Postgres write transaction; times are the database's `now()`.
struct PgTx {
    tx: PgTransaction,
}

impl_driver_tx!(PgTx, {
    async fn lock_claims(&mut self, owners: &[String], providers: &[String]) -> Result<()> {
        claims::lock_claims(&mut self.tx, owners, providers).await
    }

    async fn running_counts(&mut self, owners: &[String], providers: &[String]) -> Result<super::driver::Running> {
        claims::running_counts(&mut self.tx, owners, providers).await
    }

    async fn provider_gates(&mut self, providers: &[String]) -> Result<Vec<super::driver::ProviderGate>> {
        claims::provider_gates(&mut self.tx, providers).await
    }

    async fn claim_candidates(
        &mut self,
        owner: &str,
        providers: &[String],
        max: u32,
    ) -> Result<Vec<super::driver::Candidate>> {
        claims::claim_candidates(&mut self.tx, owner, providers, max).await
    }

    async fn start_attempts(
        &mut self,
        worker: &str,
        candidates: &[super::driver::Candidate],
        leases: &[Duration],
    ) -> Result<Vec<DateTime<Utc>>> {
        claims::start_attempts(&mut self.tx, worker, candidates, leases).await
    }

    async fn put_requests(&mut self, provider: &str, level: f64) -> Result<()> {
        claims::put_requests(&mut self.tx, provider, level).await
    }

    async fn update_provider_pause(&mut self, provider: &str, pause: Duration) -> Result<()> {
        claims::pause_provider(&mut self.tx, provider, pause).await
    }

    async fn set_attempt_requeued(&mut self, attempt: &AttemptRef, delay: Duration, max: Option<u32>) -> Result<u64> {
        claims::requeue_attempt(&mut self.tx, attempt, delay, max).await
    }

    async fn take_purge_lock(&mut self) -> Result<bool> {
        retention::take_purge_lock(&mut self.tx).await
    }

    async fn set_job_state(&mut self, owner: &OwnerId, job_id: JobId, state: JobState) -> Result<()> {
        sqlx::query(sql::SET_JOB_STATE).bind(owner.as_str()).bind(job_id.0).bind(state).execute(&mut *self.tx).await?;
        Ok(())
    }

    async fn insert_attempt(&mut self, attempt: &AttemptRef, new: &NewAttempt, provider: &str) -> Result<Attempt> {
        let rows = sqlx::query(sql::INSERT_ATTEMPT.as_str())
            .bind_attempt(attempt)
            .bind(new.id.0)
            .bind(provider)
            .bind(new.origin)
            .bind(new.idempotency_key.as_ref().map(IdempotencyKey::as_str))
            .bind(new.delay.as_secs_f64())
            .bind(AttemptState::Pending)
            .bind(new.trace.as_ref().map(|t| t.traceparent.as_str()))
            .bind(new.trace.as_ref().and_then(|t| t.tracestate.as_deref()))
            .fetch_all(&mut *self.tx)
            .await?;
        attempts_from_rows(&rows)?.pop().ok_or_else(|| corrupt("an inserted attempt returned no row"))
    }

    async fn append_event(&mut self, event: NewEvent<'_>) -> Result<()> {
        sqlx::query(sql::APPEND_EVENT)
            .bind(event.owner.as_str())
            .bind(event.job_id.0)
            .bind(event.kind)
            .bind(event.attempt_number)
            .bind(event.detail)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn enqueue_webhook(&mut self, message: &Outgoing<'_>) -> Result<()> {
        sqlx::query(sql::ENQUEUE_WEBHOOK)
            .bind(message.owner.as_str())
            .bind(message.job_id.0)
            .bind(message.event.as_str())
            .bind(&message.payload)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn lock_attempt_job(&mut self, attempt: &AttemptRef, skip_locked: bool) -> Result<Option<LockedAttempt>> {
        let statement = if skip_locked { sql::LOCK_ATTEMPT_JOB_SKIP_LOCKED.as_str() } else { sql::LOCK_ATTEMPT_JOB };
        let row: Option<LockedAttemptRow> =
            sqlx::query_as(statement).bind_attempt(attempt).fetch_optional(&mut *self.tx).await?;
        Ok(row.map(Into::into))
    }

    async fn lock_attempt_jobs(&mut self, attempts: &[&AttemptRef]) -> Result<Vec<Option<LockedAttempt>>> {
        let Some(first) = attempts.first() else { return Ok(Vec::new()) };
        let jobs: Vec<Uuid> = attempts.iter().map(|a| a.job_id.0).collect();
        let numbers: Vec<i32> = attempts.iter().map(|a| a.number).collect();
        let rows = sqlx::query(sql::LOCK_ATTEMPT_JOBS)
            .bind(first.owner.as_str())
            .bind(&jobs)
            .bind(&numbers)
            .fetch_all(&mut *self.tx)
            .await?;
        let mut locked: Vec<Option<LockedAttempt>> = vec![None; attempts.len()];
        for row in &rows {
            let n: i64 = row.try_get("n")?;
            let slot = usize::try_from(n - 1).ok().and_then(|i| locked.get_mut(i));
            let slot = slot.ok_or_else(|| crate::store::corrupt("a locked row names no attempt asked for"))?;
            *slot = Some(<LockedAttemptRow as sqlx::FromRow<PgRow>>::from_row(row)?.into());
        }
        Ok(locked)
    }

    async fn set_attempt_outcome(&mut self, attempt: &AttemptRef, outcome: &Outcome<'_>) -> Result<u64> {
        let query = sqlx::query(sql::SET_ATTEMPT_OUTCOME.as_str())
            .bind_attempt(attempt)
            .bind(outcome.to)
            .bind(Json(outcome.error))
            .bind(state_names(outcome.from))
            .bind(outcome.to == AttemptState::Unknown);
        Ok(bind_usage(query, outcome.usage).execute(&mut *self.tx).await?.rows_affected())
    }

    async fn settle_by_compare_and_swap(&mut self, settlement: &OutputSettlement<'_>) -> Result<Settled> {
        // One statement, under the job's lock: the compare-and-swap, the
        // attempt settled as won or superseded with its usage, the winner's pending
        // siblings canceled, and the event.
        let attempt = settlement.attempt;
        let query = sqlx::query(SETTLE_WITH_OUTPUT.as_str())
            .bind_attempt(attempt)
            .bind(settlement.output)
            .bind(state_names(settlement.from))
            .bind(&settlement.won)
            .bind(&settlement.lost);
        let row = bind_usage(query, settlement.usage).fetch_one(&mut *self.tx).await?;
        settled_row(&row)
    }

    async fn settle_outputs(&mut self, settlements: &[OutputSettlement<'_>]) -> Result<Vec<Settled>> {
        let Some(first) = settlements.first() else { return Ok(Vec::new()) };
        if settlements.iter().any(|s| s.attempt.owner != first.attempt.owner || s.from != first.from) {
            // One statement binds one owner and one list of states.
            return super::driver::settle_each(self, settlements).await;
        }
        let usages: Vec<Option<&AttemptUsage>> = settlements.iter().map(|s| s.usage).collect();
        let costs: Vec<_> = usages.iter().map(|u| u.and_then(|u| u.cost.as_ref())).collect();
        let rows = sqlx::query(sql::SETTLE_OUTPUTS.as_str())
            .bind(first.attempt.owner.as_str())
            .bind(settlements.iter().map(|s| s.attempt.job_id.0).collect::<Vec<_>>())
            .bind(settlements.iter().map(|s| s.attempt.number).collect::<Vec<_>>())
            .bind(settlements.iter().map(|s| s.output).collect::<Vec<_>>())
            .bind(state_names(first.from))
            .bind(settlements.iter().map(|s| &s.won).collect::<Vec<_>>())
            .bind(settlements.iter().map(|s| &s.lost).collect::<Vec<_>>())
            .bind(usages.iter().map(Option::is_some).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.prompt_tokens)).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.completion_tokens)).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.estimated)).collect::<Vec<_>>())
            .bind(costs.iter().map(|c| c.map(|c| c.amount.to_string())).collect::<Vec<_>>())
            .bind(costs.iter().map(|c| c.map(|c| c.currency.clone())).collect::<Vec<_>>())
            .bind(costs.iter().map(|c| c.map(|c| c.price_version.clone())).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.cache_write_tokens)).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.cache_read_tokens)).collect::<Vec<_>>())
            .fetch_all(&mut *self.tx)
            .await?;
        if rows.len() != settlements.len() {
            return Err(corrupt("a settlement of several outputs answered for another number of them"));
        }
        rows.iter().map(settled_row).collect()
    }

    async fn cancel_job_and_pending(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<i32>> {
        sqlx::query(sql::SET_JOB_STATE)
            .bind(owner.as_str())
            .bind(job_id.0)
            .bind(JobState::Canceled)
            .execute(&mut *self.tx)
            .await?;
        Ok(sqlx::query_scalar(sql::CANCEL_PENDING_ATTEMPTS)
            .bind(owner.as_str())
            .bind(job_id.0)
            .bind(AttemptState::Pending)
            .bind(AttemptState::Canceled)
            .fetch_all(&mut *self.tx)
            .await?)
    }
});

/// A settlement's answer: whether it won, how many attempts it settled, the
/// siblings it canceled.
fn settled_row(row: &PgRow) -> Result<Settled> {
    Ok(Settled {
        won: row.try_get("won")?,
        settled: row.try_get::<i64, _>("settled")?.try_into().map_err(corrupt)?,
        canceled: row.try_get("canceled")?,
    })
}

/// Reads the job a statement of `rows::select_job_where` selects (binds: the
/// owner, then `key`), on a connection of the hot path.
async fn fetch_job<'q, T>(hot: &HotConnections, sql: &'q str, owner: &'q OwnerId, key: T) -> Result<Option<Job>>
where
    T: 'q + Send + sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres>,
{
    let mut lease = hot.acquire().await?;
    let rows: std::result::Result<Vec<PgRow>, _> =
        sqlx::query(sql).bind(owner.as_str()).bind(key).fetch_all(lease.connection()).await;
    lease.keep_after(&rows);
    job_from_rows(&rows?)
}

impl_driver!(PostgresStore, {
    async fn begin(&self) -> Result<Tx> {
        Ok(Box::new(PgTx { tx: self.pool.begin().await? }))
    }

    async fn insert_job(&self, new: &NewJob) -> Result<Option<DateTime<Utc>>> {
        // The hot path: one statement and one commit for a group of new keys.
        self.create_in_group(new).await
    }

    async fn expired_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        let rows: Vec<AttemptRefRow> =
            sqlx::query_as(EXPIRED_LEASES.as_str()).bind(i64::from(max)).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn run_migrations(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await.map_err(super::error::migration_error)?;
        Ok(())
    }

    async fn insert_key(&self, key: &NewKey<'_>) -> Result<()> {
        keys::insert_key(key).execute(&self.pool).await?;
        Ok(())
    }

    async fn select_replication(&self) -> Result<Option<super::Replication>> {
        connect::replication(&self.pool).await.map(Some)
    }

    async fn check_pooling(&self) -> Result<()> {
        pooling::check_session_pooling(&self.hosts.options()).await
    }

    async fn revoke_key_and_wait(&self, id: Uuid, owner: Option<&OwnerId>) -> Result<bool> {
        keys::revoke_and_wait(&self.pool, id, owner).await
    }

    async fn notify_key_forgotten(&self, id: Uuid) -> Result<()> {
        keys::confirm_forgotten(&self.pool, id).await
    }

    fn listen_key_changes(&self) -> Option<mpsc::Receiver<KeyChange>> {
        let (changes, receiver) = mpsc::channel(256);
        tokio::spawn(keys::follow_key_changes(self.pool.clone(), changes));
        Some(receiver)
    }

    async fn select_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>> {
        // One statement, so the job and its attempts come from one snapshot.
        fetch_job(&self.hot, GET_JOB.as_str(), owner, id.0).await
    }

    async fn select_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>> {
        fetch_job(&self.hot, FIND_JOB_BY_KEY.as_str(), owner, key.as_str()).await
    }

    async fn select_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>> {
        let rows: Vec<JobSummaryRow> = sqlx::query_as(sql::LIST_JOBS)
            .bind(owner.as_str())
            .bind(filter.state)
            .bind(filter.task.as_deref())
            .bind(filter.before.map(|id| id.0))
            .bind(i64::from(filter.limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|row| OwnedJobSummary::from(row).job).collect())
    }

    async fn take_tokens(&self, provider: &str, tokens: u64, per_minute: u32) -> Result<Option<Duration>> {
        claims::reserve_tokens(&self.pool, provider, tokens, per_minute).await
    }

    async fn select_breakers(&self) -> Result<Vec<crate::store::breakers::StoredBreaker>> {
        breakers::read(&self.pool).await
    }

    async fn change_breaker(&self, provider: &str, change: crate::store::breakers::BreakerChange<'_>) -> Result<bool> {
        breakers::change(&self.pool, provider, change).await
    }

    async fn select_waiting_facts(&self, owner: &OwnerId, job_id: JobId) -> Result<Option<super::WaitingFacts>> {
        claims::waiting_facts(&self.pool, owner.as_str(), job_id.0).await
    }

    async fn select_any_due_unknown(&self, providers: &[String]) -> Result<bool> {
        Ok(sqlx::query_scalar(sql::ANY_DUE_UNKNOWN.as_str()).bind(providers).fetch_one(&self.pool).await?)
    }

    async fn claim_due_unknown(&self, providers: &[String], max: u32, hold: Duration) -> Result<Vec<UnknownAttempt>> {
        let rows = sqlx::query(CLAIM_RECONCILIATIONS.as_str())
            .bind(providers)
            .bind(i64::from(max))
            .bind(hold.as_secs_f64())
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(UnknownAttempt {
                    attempt: AttemptRef::from(<AttemptRefRow as sqlx::FromRow<PgRow>>::from_row(row)?),
                    id: AttemptId(row.try_get("id")?),
                    provider: row.try_get("provider")?,
                    task: row.try_get("task")?,
                    unknown_for: Duration::from_secs_f64(row.try_get::<f64, _>("unknown_for")?.max(0.0)),
                    reconcile_count: row.try_get("reconcile_count")?,
                    provider_request_id: row.try_get("provider_request_id")?,
                    trace: stored_trace(row.try_get("traceparent")?, row.try_get("tracestate")?),
                })
            })
            .collect()
    }

    async fn update_reconcile_after(&self, attempt: &AttemptRef, delay: Duration) -> Result<()> {
        sqlx::query(sql::POSTPONE_RECONCILIATION)
            .bind_attempt(attempt)
            .bind(delay.as_secs_f64())
            .bind(AttemptState::Unknown)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn insert_qualification_run(&self, run: &NewQualificationRun<'_>) -> Result<QualificationRecord> {
        let row: QualificationRow = sqlx::query_as(sql::INSERT_QUALIFICATION)
            .bind(Uuid::now_v7())
            .bind(run.provider)
            .bind(run.task)
            .bind(&run.contract_hash[..])
            .bind(run.passed)
            .bind(run.report)
            .fetch_one(&self.pool)
            .await?;
        row.try_into()
    }

    async fn select_gauges(&self) -> Result<Gauges> {
        let row = sqlx::query(SAMPLE_GAUGES.as_str()).fetch_one(&self.pool).await?;
        let pending = sqlx::query_as(super::shared::PENDING_BY.as_str()).fetch_all(&self.pool).await?;
        let (pending_by_owner, pending_by_provider) = super::driver::by_kind(pending);
        Ok(Gauges {
            pending_due: row.try_get("pending_due")?,
            unknown_open: row.try_get("unknown_open")?,
            oldest_unknown: Duration::from_secs_f64(row.try_get::<f64, _>("oldest")?.max(0.0)),
            pending_by_owner,
            pending_by_provider,
        })
    }

    async fn update_usage(&self, attempt: &AttemptRef, usage: &AttemptUsage) -> Result<bool> {
        // One statement per settled attempt: on the hot path's connections.
        let mut lease = self.hot.acquire().await?;
        let query = bind_counts(sqlx::query(sql::RECORD_USAGE).bind_attempt(attempt), Some(usage));
        let changed = query.execute(lease.connection()).await;
        lease.keep_after(&changed);
        Ok(changed?.rows_affected() == 1)
    }
});
