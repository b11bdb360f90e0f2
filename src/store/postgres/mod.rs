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
use sqlx::{Postgres, Row};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::driver::{Driver, PendingOwner, Tx};
use super::groups::Creation;
use super::output::OutputPiece;
use super::purge::PurgeRule;
use super::rows::{AttemptRefRow, JobSummaryRow, QualificationRow, job_from_rows, stored_trace};
use super::shared;
use super::usage::{AttemptUsage, UsageFilter, UsageRow, bind_counts};
use super::webhooks::{ClaimedDelivery, Delivery, DeliveryTry, Endpoint, NewEndpoint};
use super::{
    ApiKey, AttemptRef, Gauges, JobFilter, KeyChange, LiveKey, NewKey, NewQualificationRun, OpenUnknown,
    OwnedJobSummary, QualificationRecord, QualificationState, Result, StoreError, UnknownAttempt,
};
use super::{NewSession, StoredSession};
use crate::domain::{AttemptId, AttemptState, IdempotencyKey, Job, JobEvent, JobId, JobSummary, OwnerId};
use crate::store::rows::BindAttempt;
use direct::DirectConnections;
use tx::PgTx;

mod bounded;
mod breakers;
mod catalogue;
mod citus;
mod claims;
mod connect;
mod creates;
mod direct;
mod keys;
mod pieces;
mod pooling;
mod reads;
mod retention;
mod sessions;
mod sql;
mod tx;
mod webhooks;

use crate::sync::AbortOnDrop;
pub use catalogue::{CROSS_OWNER, HotStatement, statements};
pub use citus::{PLACEMENT_STATEMENTS, Placement, REPLACED_ON_CITUS, SHARDING};
use sql::{CLAIM_RECONCILIATIONS, EXPIRED_LEASES, FIND_JOB_BY_KEY, SAMPLE_GAUGES};

/// A transaction on Postgres.
type PgTransaction = bounded::Transaction;

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

/// The Postgres [`super::Driver`], which a [`super::Store`] runs on.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: bounded::Pool,
    // The one-statement requests of the hot path (see `direct`).
    direct: Arc<DirectConnections>,
    // The turn of writing a group of new jobs (see `creates`).
    creation_turns: Arc<tokio::sync::Semaphore>,
    // The reads of jobs by id waiting for their group (see `reads`).
    job_reads: Arc<crate::store::GroupCommit<reads::JobRead>>,
    // Where new connections go (see `connect`).
    hosts: Arc<connect::Hosts>,
    // Whether the database is on Citus (see `citus`), asked once.
    citus: Arc<tokio::sync::OnceCell<bool>>,
    // Keeps the connections on a writable host when the URL names several;
    // stopped with the last clone of the store.
    _watcher: Option<Arc<AbortOnDrop>>,
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
        let patience = bounded::answer_patience(options.statement_timeout);
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
            .after_release(move |connection, _| Box::pin(bounded::check_released(connection, patience)))
            .after_connect({
                let session: Arc<str> = session.clone().into();
                let hosts = hosts.clone();
                move |connection, _| {
                    let (session, hosts) = (session.clone(), hosts.clone());
                    Box::pin(async move { hosts.prepare(connection, &session).await })
                }
            })
            .connect_lazy_with(hosts.options());
        let pool = bounded::Pool::new(pool, patience);
        let direct = DirectConnections::new(
            hosts.clone(),
            session.clone(),
            options.max_connections,
            options.acquire_timeout,
            patience,
        );
        let watcher = (hosts.several())
            .then(|| tokio::spawn(connect::watch_hosts(hosts.clone(), pool.sqlx().clone(), session)))
            .map(|task| Arc::new(AbortOnDrop(task)));
        Ok(Self {
            pool,
            direct: Arc::new(direct),
            creation_turns: Arc::new(tokio::sync::Semaphore::new(1)),
            job_reads: reads::job_reads(),
            hosts,
            citus: Arc::default(),
            _watcher: watcher,
        })
    }

    /// Wraps an existing pool (tests use this).
    pub fn from_pool(pool: PgPool) -> Self {
        let options = pool.options();
        let hosts = Arc::new(connect::Hosts::one((*pool.connect_options()).clone()));
        // The server's own statement timeout is left as it is set there;
        // answers are waited for as long as by default.
        let patience = bounded::answer_patience(crate::config::DatabaseSettings::default().statement_timeout);
        let direct = DirectConnections::new(
            hosts.clone(),
            String::new(),
            options.get_max_connections(),
            options.get_acquire_timeout(),
            patience,
        );
        Self {
            pool: bounded::Pool::new(pool, patience),
            direct: Arc::new(direct),
            creation_turns: Arc::new(tokio::sync::Semaphore::new(1)),
            job_reads: reads::job_reads(),
            hosts,
            citus: Arc::default(),
            _watcher: None,
        }
    }

    /// Whether the database is on Citus, asked the first time it matters.
    async fn on_citus(&self) -> Result<bool> {
        let ask = || async { Ok::<_, StoreError>(sqlx::query_scalar(citus::IS_CITUS).fetch_one(&self.pool).await?) };
        self.citus.get_or_try_init(ask).await.copied()
    }

    /// The pool, for tests that look at the tables directly.
    pub fn pool(&self) -> &PgPool {
        self.pool.sqlx()
    }
}

/// What every new connection runs first: the longest a statement may run,
/// and floats in text answers as precise as sqlx asks for in its startup
/// packet (which no longer carries it).
fn session_settings(options: &PostgresOptions) -> String {
    format!("set statement_timeout = {}; set extra_float_digits = 2", options.statement_timeout.as_millis())
}

/// Reads the job a statement of `rows::select_job_where` selects (binds: the
/// owner, then `key`), on a connection of the hot path.
async fn fetch_job<'q, T>(direct: &DirectConnections, sql: &'q str, owner: &'q OwnerId, key: T) -> Result<Option<Job>>
where
    T: 'q + Send + sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres>,
{
    let mut lent = direct.acquire().await?;
    let reading = sqlx::query(sql).bind(owner.as_str()).bind(key).fetch_all(lent.connection());
    let rows: std::result::Result<Vec<PgRow>, _> = bounded::answered(direct.patience(), reading).await;
    lent.keep_after(&rows);
    job_from_rows(&rows?)
}

#[async_trait::async_trait]
impl Driver for PostgresStore {
    async fn begin(&self) -> Result<Tx> {
        let on_citus = self.on_citus().await?;
        Ok(Box::new(PgTx { tx: self.pool.begin().await?, on_citus }))
    }

    fn creation_turns(&self) -> Arc<tokio::sync::Semaphore> {
        self.creation_turns.clone()
    }

    fn creation_deadline(&self) -> Option<Duration> {
        Some(self.direct.acquire_timeout())
    }

    async fn insert_jobs(&self, group: Vec<Creation>) {
        // The hot path: one statement and one commit per owner for a group
        // of new keys.
        creates::insert_jobs(&self.direct, group).await
    }

    async fn expired_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        let rows: Vec<AttemptRefRow> =
            sqlx::query_as(EXPIRED_LEASES.as_str()).bind(i64::from(max)).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(self.pool.sqlx()).await.map_err(super::error::migration_error)?;
        citus::place_tables(self.pool.sqlx()).await
    }

    async fn insert_api_key(&self, key: &NewKey<'_>) -> Result<()> {
        keys::insert_api_key(key).execute(&self.pool).await?;
        Ok(())
    }

    async fn replication(&self) -> Result<Option<super::Replication>> {
        connect::replication(&self.pool).await.map(Some)
    }

    async fn check_session_pooling(&self) -> Result<()> {
        pooling::check_session_pooling(&self.hosts.options()).await
    }

    async fn revoke_api_key(&self, id: Uuid, owner: Option<&OwnerId>) -> Result<bool> {
        keys::revoke_api_key(&self.pool, id, owner).await
    }

    async fn confirm_key_forgotten(&self, id: Uuid) -> Result<()> {
        keys::confirm_key_forgotten(&self.pool, id).await
    }

    fn follow_key_changes(&self) -> Option<mpsc::Receiver<KeyChange>> {
        let (changes, receiver) = mpsc::channel(256);
        tokio::spawn(keys::follow_key_changes(self.pool.clone(), changes));
        Some(receiver)
    }

    async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>> {
        // One statement, so the job and its attempts come from one snapshot.
        reads::get_job(&self.job_reads, &self.direct, owner, id).await
    }

    async fn find_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>> {
        fetch_job(&self.direct, FIND_JOB_BY_KEY.as_str(), owner, key.as_str()).await
    }

    async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>> {
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

    async fn reserve_tokens(&self, provider: &str, tokens: u64, per_minute: u32) -> Result<Option<Duration>> {
        claims::reserve_tokens(&self.pool, provider, tokens, per_minute).await
    }

    async fn list_breakers(&self) -> Result<Vec<crate::store::breakers::StoredBreaker>> {
        breakers::list_breakers(&self.pool).await
    }

    async fn change_breaker(&self, provider: &str, change: crate::store::breakers::BreakerChange<'_>) -> Result<bool> {
        breakers::change_breaker(&self.pool, provider, change).await
    }

    async fn waiting_facts(&self, owner: &OwnerId, job_id: JobId) -> Result<Option<super::WaitingFacts>> {
        claims::waiting_facts(&self.pool, owner.as_str(), job_id.0).await
    }

    async fn any_due_unknown(&self, providers: &[String]) -> Result<bool> {
        Ok(sqlx::query_scalar(sql::ANY_DUE_UNKNOWN.as_str()).bind(providers).fetch_one(&self.pool).await?)
    }

    async fn claim_reconciliations(
        &self,
        providers: &[String],
        max: u32,
        hold: Duration,
    ) -> Result<Vec<UnknownAttempt>> {
        let rows = if self.on_citus().await? {
            citus::claim_reconciliations(&self.pool, providers, max, hold).await?
        } else {
            let claim = sqlx::query(CLAIM_RECONCILIATIONS.as_str()).bind(providers).bind(i64::from(max));
            claim.bind(hold.as_secs_f64()).fetch_all(&self.pool).await?
        };
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

    async fn postpone_reconciliation(&self, attempt: &AttemptRef, delay: Duration) -> Result<()> {
        sqlx::query(sql::POSTPONE_RECONCILIATION)
            .bind_attempt(attempt)
            .bind(delay.as_secs_f64())
            .bind(AttemptState::Unknown)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn insert_qualification(&self, run: &NewQualificationRun<'_>) -> Result<QualificationRecord> {
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

    async fn sample_gauges(&self) -> Result<Gauges> {
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

    async fn record_usage(&self, attempt: &AttemptRef, usage: &AttemptUsage) -> Result<bool> {
        // One statement per settled attempt: on the hot path's connections.
        let mut lent = self.direct.acquire().await?;
        let query = bind_counts(sqlx::query(sql::RECORD_USAGE).bind_attempt(attempt), Some(usage));
        let changed = bounded::answered(self.direct.patience(), query.execute(lent.connection())).await;
        lent.keep_after(&changed);
        Ok(changed?.rows_affected() == 1)
    }

    async fn pending_owners(&self, after: &str, max: u32) -> Result<Vec<PendingOwner>> {
        let sql = if self.on_citus().await? { &citus::PENDING_OWNERS } else { &claims::PENDING_OWNERS };
        shared::pending_owners(&self.pool, sql, after, max).await
    }

    async fn any_purgeable(&self, rule: &PurgeRule) -> Result<bool> {
        retention::any_purgeable(&self.pool, rule).await
    }

    async fn check_ready(&self) -> Result<()> {
        shared::check_ready(&self.pool, MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)).await
    }

    async fn find_api_key(&self, token_hash: &[u8; 32]) -> Result<Option<LiveKey>> {
        shared::find_api_key(&self.pool, sql::FIND_API_KEY, token_hash).await
    }

    async fn list_api_keys(&self, owner: Option<&OwnerId>) -> Result<Vec<ApiKey>> {
        shared::list_api_keys(&self.pool, sql::LIST_API_KEYS, owner).await
    }

    async fn set_key_max_in_flight(&self, id: Uuid, max_in_flight: Option<u32>) -> Result<bool> {
        shared::set_key_max_in_flight(&self.pool, sql::SET_KEY_MAX_IN_FLIGHT, id, max_in_flight).await
    }

    async fn has_api_keys(&self) -> Result<bool> {
        shared::has_api_keys(&self.pool).await
    }

    async fn list_output(&self, owner: &OwnerId, job_id: JobId, after: i64) -> Result<Vec<OutputPiece>> {
        shared::list_output(&self.pool, sql::LIST_OUTPUT, owner, job_id, after).await
    }

    async fn append_to_held_outputs(&self, owner: &OwnerId, pieces: &[(JobId, i32, &str)]) -> Result<Vec<Option<i64>>> {
        pieces::append_to_held_outputs(&self.pool, owner, pieces).await
    }

    async fn list_events(&self, owner: &OwnerId, job_id: JobId) -> Result<Vec<JobEvent>> {
        shared::list_events(&self.pool, sql::LIST_EVENTS, owner, job_id).await
    }

    async fn qualification_state(&self, provider: &str, task: &str, hash: &[u8; 32]) -> Result<QualificationState> {
        shared::qualification_state(&self.pool, sql::QUALIFICATION_STATE, provider, task, hash).await
    }

    async fn latest_qualification(&self, provider: &str, task: &str) -> Result<Option<QualificationRecord>> {
        shared::latest_qualification(&self.pool, sql::LATEST_QUALIFICATION, provider, task).await
    }

    async fn list_qualified_pairs(&self) -> Result<Vec<(String, String)>> {
        shared::list_qualified_pairs(&self.pool, sql::LIST_QUALIFIED_PAIRS).await
    }

    async fn find_unknown_attempt_owner(&self, job_id: JobId, number: i32) -> Result<Option<OwnerId>> {
        shared::find_unknown_attempt_owner(&self.pool, &sql::FIND_UNKNOWN_ATTEMPT_OWNER, job_id, number).await
    }

    async fn list_usage(&self, owner: &OwnerId, filter: &UsageFilter) -> Result<Vec<UsageRow>> {
        shared::list_usage(&self.pool, sql::LIST_USAGE, owner, filter).await
    }

    async fn browse_jobs(
        &self,
        owner: Option<&OwnerId>,
        key: Option<&str>,
        filter: &JobFilter,
    ) -> Result<Vec<OwnedJobSummary>> {
        shared::browse_jobs(&self.pool, sql::BROWSE_JOBS, owner, key, filter).await
    }

    async fn finished_jobs_running_on(&self, worker: &str) -> Result<Vec<JobId>> {
        shared::finished_jobs_running_on(&self.pool, &sql::FINISHED_JOBS_RUNNING_ON, worker).await
    }

    async fn count_unknown_since(&self, before: DateTime<Utc>) -> Result<u64> {
        shared::count_unknown_since(&self.pool, &sql::COUNT_UNKNOWN_SINCE, before).await
    }

    async fn find_job_owner(&self, id: JobId) -> Result<Option<OwnerId>> {
        shared::find_job_owner(&self.pool, sql::FIND_JOB_OWNER, id).await
    }

    async fn callback_secret(&self) -> Result<Option<String>> {
        shared::callback_secret(&self.pool).await
    }

    async fn record_unapplied_output(&self, attempt: &AttemptRef, unapplied: &Value) -> Result<bool> {
        shared::record_unapplied_output(&self.pool, sql::RECORD_UNAPPLIED_OUTPUT, attempt, unapplied).await
    }

    async fn record_provider_request(&self, attempt: &AttemptRef, provider_request_id: &str) -> Result<bool> {
        shared::record_provider_request(&self.pool, sql::RECORD_PROVIDER_REQUEST, attempt, provider_request_id).await
    }

    async fn list_unknown_attempts(&self, owner: Option<&OwnerId>, limit: u32) -> Result<Vec<OpenUnknown>> {
        shared::list_unknown_attempts(&self.pool, &sql::LIST_UNKNOWN_ATTEMPTS, owner, limit).await
    }

    async fn insert_dashboard_session(&self, session: &NewSession) -> Result<()> {
        sessions::insert_dashboard_session(&self.pool, session).await
    }

    async fn find_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<Option<StoredSession>> {
        sessions::find_dashboard_session(&self.pool, token_hash).await
    }

    async fn touch_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<()> {
        sessions::touch_dashboard_session(&self.pool, token_hash).await
    }

    async fn delete_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<bool> {
        sessions::delete_dashboard_session(&self.pool, token_hash).await
    }

    async fn delete_expired_dashboard_sessions(&self, idle: Duration) -> Result<u64> {
        sessions::delete_expired_dashboard_sessions(&self.pool, idle).await
    }

    async fn insert_first_run_key(&self, key: &NewKey<'_>) -> Result<bool> {
        sessions::insert_first_run_key(self, key).await
    }

    async fn insert_webhook_endpoint(&self, new: &NewEndpoint, max_per_owner: u32) -> Result<Option<Endpoint>> {
        webhooks::insert_webhook_endpoint(&self.pool, new, max_per_owner).await
    }

    async fn list_webhook_endpoints(&self, owner: &OwnerId) -> Result<Vec<Endpoint>> {
        webhooks::list_webhook_endpoints(&self.pool, owner).await
    }

    async fn delete_webhook_endpoint(&self, owner: &OwnerId, id: Uuid) -> Result<bool> {
        shared::delete_webhook_endpoint(&self.pool, webhooks::DELETE_WEBHOOK_ENDPOINT, owner, id).await
    }

    async fn rotate_webhook_secret(
        &self,
        owner: &OwnerId,
        id: Uuid,
        secret: &str,
        keep_old: Duration,
    ) -> Result<Option<Endpoint>> {
        webhooks::rotate_webhook_secret(&self.pool, owner, id, secret, keep_old).await
    }

    async fn list_webhook_deliveries(
        &self,
        owner: &OwnerId,
        endpoint: Uuid,
        limit: u32,
    ) -> Result<Option<Vec<Delivery>>> {
        let statements = [webhooks::ENDPOINT_EXISTS, webhooks::LIST_DELIVERIES, webhooks::LIST_TRIES];
        shared::list_webhook_deliveries(&self.pool, statements, owner, endpoint, limit).await
    }

    async fn claim_webhook_deliveries(
        &self,
        max: u32,
        lease: Duration,
        skip: &[String],
    ) -> Result<Vec<ClaimedDelivery>> {
        if self.on_citus().await? {
            let rows = citus::claim_webhook_deliveries(&self.pool, max, lease, skip).await?;
            return Ok(rows.into_iter().map(Into::into).collect());
        }
        webhooks::claim_webhook_deliveries(&self.pool, max, lease, skip).await
    }

    async fn has_due_webhook_deliveries(&self) -> Result<bool> {
        webhooks::has_due_webhook_deliveries(&self.pool).await
    }

    async fn release_webhook_deliveries(&self, owner: &OwnerId, ids: &[Uuid]) -> Result<()> {
        webhooks::release_webhook_deliveries(&self.pool, owner, ids).await
    }

    async fn record_webhook_tries(&self, done: &[DeliveryTry]) -> Result<()> {
        webhooks::record_webhook_tries(&self.pool, done).await
    }
}
