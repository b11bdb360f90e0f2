//! The SQLite store: the embedded default for one machine, keeping every
//! invariant by SQLite's own means. Its SQL, and what only SQLite does
//! (the single writer, group commit); the logic of the transitions is in
//! `transitions.rs`.
//!
//! - Every write transaction begins `BEGIN IMMEDIATE`: it takes SQLite's one
//!   write lock up front, so transactions never deadlock upgrading a read
//!   lock, and a transaction's checks hold until it commits (the role the
//!   job's row lock plays on Postgres). Claims are atomic the same way,
//!   without `skip locked`.
//! - WAL, a busy timeout (writers queue rather than fail), and
//!   `synchronous = FULL`: in WAL mode, FULL syncs the log at every commit,
//!   so an acknowledged job survives a power cut (NORMAL would not).
//! - The unique constraint on (owner_id, idempotency_key), the partial unique
//!   index of pending attempts and compare-and-swap updates checked by rows
//!   changed, as on Postgres.
//! - New jobs are committed in groups: whoever gets the write turn writes
//!   every creation queued while the previous transaction was committing, in
//!   one transaction, so one log sync covers them all; each request is
//!   answered only after that commit (see `insert_job`).
//!
//! Times are stored as microseconds since the Unix epoch, read from this
//! process's clock (one machine, one clock). State names are bound as
//! parameters, or written into a statement from the enums where it must
//! match a partial index.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::types::Json;
use sqlx::{Row, Sqlite, Transaction};
use tokio::sync::Semaphore;
use uuid::Uuid;

use super::driver::{Driver, PendingOwner, Tx};
use super::events::NewEvent;
use super::groups::Creation;
use super::output::OutputPiece;
use super::purge::PurgeRule;
use super::rows::{AttemptRefRow, QualificationRow, job_from_rows, stored_trace};
use super::shared;
use super::usage::{AttemptUsage, UsageFilter, UsageRow, bind_counts};
use super::webhooks::{ClaimedDelivery, Delivery, DeliveryTry, Endpoint, NewEndpoint};
use super::{
    ApiKey, AttemptRef, Gauges, JobFilter, LiveKey, NewKey, NewQualificationRun, OpenUnknown, OwnedJobSummary,
    QualificationRecord, QualificationState, Result, StoreError, UnknownAttempt, corrupt,
};
use super::{NewSession, StoredSession};
use crate::domain::{AttemptId, IdempotencyKey, Job, JobEvent, JobId, JobSummary, OwnerId};
use crate::store::rows::BindAttempt;
use tx::SqliteTx;

mod breakers;
mod claims;
mod creates;
mod keys;
mod retention;
mod sessions;
mod sql;
mod tx;
mod webhooks;

use sql::{CLAIM_RECONCILIATIONS, EXPIRED_LEASES, FIND_JOB_BY_KEY, GET_JOB, SAMPLE_GAUGES};

/// A transaction on SQLite.
type SqliteTransaction = Transaction<'static, Sqlite>;

/// The embedded migrations of `migrations/sqlite`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// How to open the database file.
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// The most connections the pool opens.
    pub max_connections: u32,
    /// How long a writer waits for the write lock before giving up (503).
    pub busy_timeout: Duration,
    /// How long a request waits for a free connection.
    pub acquire_timeout: Duration,
}

/// The SQLite [`super::Driver`], which a [`super::Store`] runs on.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    // Writers of this process queue here, first come first served, without
    // holding a connection; SQLite's busy timeout is left for writers in
    // other processes.
    // Groups of new jobs are written in its turn too (see `creates`).
    writer: Arc<Semaphore>,
}

impl SqliteStore {
    /// Opens (creating it if needed) the database at `url` (`sqlite://PATH`).
    pub fn connect_lazy(url: &str, options: &SqliteOptions) -> Result<Self> {
        if url.contains(":memory:") || url.contains("mode=memory") {
            // It would vanish with its last connection, and every job with it (I8).
            return Err(StoreError::Database(sqlx::Error::Configuration(
                "an in-memory SQLite database loses every job when it closes: name a file (sqlite://PATH)".into(),
            )));
        }
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(StoreError::Database)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            // An embedded file does not go away between uses: no ping.
            .test_before_acquire(false)
            // A connection whose transaction SQLite rolled back by itself
            // (as it does when the disk is full) still counts as in one
            // for sqlx, whose ROLLBACK then failed: it could never begin
            // another, so it is closed rather than used again.
            .before_acquire(|connection, _| {
                Box::pin(async move { Ok(!sqlx::Connection::is_in_transaction(connection)) })
            })
            .connect_lazy_with(connect);
        Ok(Self { pool, writer: Arc::new(Semaphore::new(1)) })
    }

    /// Whether the database file that `url` names exists (the commands that
    /// only use a database must not create an empty one).
    pub fn file_exists(url: &str) -> Result<bool> {
        let options = SqliteConnectOptions::from_str(url).map_err(StoreError::Database)?;
        Ok(options.get_filename().exists())
    }

    /// The pool, for tests that look at the tables directly.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Waits for this process's turn to write, then begins a transaction
    /// holding SQLite's write lock; the transaction keeps the turn until it ends.
    async fn write(&self) -> Result<SqliteTx> {
        let turn =
            self.writer.clone().acquire_owned().await.map_err(|_| StoreError::Interrupted("the writer closed"))?;
        // For whoever counts the writer's use (sqlx does not log a BEGIN).
        tracing::trace!(target: "onejob::sqlite::writer", "BEGIN IMMEDIATE");
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        Ok(SqliteTx { tx, at: now(), _turn: turn })
    }
}

fn now() -> i64 {
    Utc::now().timestamp_micros()
}

/// The statement that stores `key`, made at `at`.
fn insert_api_key<'a>(key: &NewKey<'a>, at: i64) -> Query<'a, Sqlite, SqliteArguments<'a>> {
    sqlx::query(sql::INSERT_API_KEY)
        .bind(key.owner.as_str())
        .bind(key.id)
        .bind(key.role)
        .bind(&key.token_hash[..])
        .bind(at)
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

fn time(micros: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros).ok_or_else(|| corrupt(format!("time {micros}")))
}

/// `state in (…)` for a guard, as a JSON array for `json_each`.
fn json_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    Value::from(names.into_iter().collect::<Vec<_>>()).to_string()
}

async fn append_event(tx: &mut SqliteTransaction, at: i64, event: NewEvent<'_>) -> Result<()> {
    sqlx::query(sql::APPEND_EVENT)
        .bind(event.owner.as_str())
        .bind(event.job_id.0)
        .bind(at)
        .bind(event.kind)
        .bind(event.attempt_number)
        .bind(Json(event.detail))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[async_trait::async_trait]
impl Driver for SqliteStore {
    async fn begin(&self) -> Result<Tx> {
        Ok(Box::new(self.write().await?))
    }

    fn creation_turns(&self) -> Arc<Semaphore> {
        self.writer.clone()
    }

    fn creation_deadline(&self) -> Option<Duration> {
        None
    }

    async fn insert_jobs(&self, group: Vec<Creation>) {
        // In the one writer's turn, which the group holds.
        creates::insert_jobs(&self.pool, group).await
    }

    async fn expired_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        let rows: Vec<AttemptRefRow> =
            sqlx::query_as(EXPIRED_LEASES.as_str()).bind(now()).bind(i64::from(max)).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn migrate(&self) -> Result<()> {
        let mut connection = self.pool.acquire().await?;
        // A new file is switched to incremental vacuum before its first
        // table, so that pages a purge frees can go back to the disk
        // ([`Store::reclaim_space`]); a `vacuum` of the empty file applies
        // it. A file with tables keeps its mode. It is not a setting of
        // every connection: setting it waits for the write lock, and a
        // connection opened under a steady write load would wait for a turn
        // to write before it could read.
        let tables: i64 = sqlx::query_scalar("select count(*) from sqlite_master").fetch_one(&mut *connection).await?;
        if tables == 0 {
            sqlx::query("pragma auto_vacuum = incremental").execute(&mut *connection).await?;
            sqlx::query("vacuum").execute(&mut *connection).await?;
        }
        MIGRATOR.run_direct(&mut *connection).await?;
        Ok(())
    }

    async fn reclaim_space(&self) -> Result<()> {
        let mut tx = self.write().await?;
        sqlx::query("pragma incremental_vacuum").execute(&mut *tx.tx).await?;
        tx.tx.commit().await?;
        Ok(())
    }

    async fn insert_api_key(&self, key: &NewKey<'_>) -> Result<()> {
        insert_api_key(key, now()).execute(&self.pool).await?;
        Ok(())
    }

    fn follow_key_changes(&self) -> Option<tokio::sync::mpsc::Receiver<super::KeyChange>> {
        let (changes, receiver) = tokio::sync::mpsc::channel(256);
        tokio::spawn(keys::follow_key_changes(self.pool.clone(), changes));
        Some(receiver)
    }

    async fn revoke_api_key(&self, id: Uuid, owner: Option<&OwnerId>) -> Result<bool> {
        let changed = sqlx::query(keys::REVOKE_API_KEY)
            .bind(now())
            .bind(id)
            .bind(owner.map(OwnerId::as_str))
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(changed > 0)
    }

    async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>> {
        // One statement, so the job and its attempts come from one snapshot.
        let rows = sqlx::query(GET_JOB.as_str()).bind(owner.as_str()).bind(id.0).fetch_all(&self.pool).await?;
        job_from_rows(&rows)
    }

    async fn find_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>> {
        let rows =
            sqlx::query(FIND_JOB_BY_KEY.as_str()).bind(owner.as_str()).bind(key.as_str()).fetch_all(&self.pool).await?;
        job_from_rows(&rows)
    }

    async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>> {
        Ok(self.browse_jobs(Some(owner), None, filter).await?.into_iter().map(|owned| owned.job).collect())
    }

    async fn reserve_tokens(&self, provider: &str, tokens: u64, per_minute: u32) -> Result<Option<Duration>> {
        let mut write = self.write().await?;
        let reserved = claims::reserve_tokens(&mut write.tx, write.at, provider, tokens, per_minute).await?;
        write.tx.commit().await?;
        Ok(reserved)
    }

    async fn list_breakers(&self) -> Result<Vec<crate::store::breakers::StoredBreaker>> {
        breakers::list_breakers(&self.pool, now()).await
    }

    async fn change_breaker(&self, provider: &str, change: crate::store::breakers::BreakerChange<'_>) -> Result<bool> {
        let mut write = self.write().await?;
        let changed = breakers::change_breaker(&mut write, provider, change).await?;
        write.tx.commit().await?;
        Ok(changed)
    }

    async fn waiting_facts(&self, owner: &OwnerId, job_id: JobId) -> Result<Option<super::WaitingFacts>> {
        claims::waiting_facts(&self.pool, owner.as_str(), job_id.0, now()).await
    }

    async fn any_due_unknown(&self, providers: &[String]) -> Result<bool> {
        let names = json_list(providers.iter().map(String::as_str));
        Ok(sqlx::query_scalar(sql::ANY_DUE_UNKNOWN.as_str()).bind(names).bind(now()).fetch_one(&self.pool).await?)
    }

    async fn claim_reconciliations(
        &self,
        providers: &[String],
        max: u32,
        hold: Duration,
    ) -> Result<Vec<UnknownAttempt>> {
        let names = json_list(providers.iter().map(String::as_str));
        let mut write = self.write().await?;
        let at = write.at;
        let rows = sqlx::query(CLAIM_RECONCILIATIONS.as_str())
            .bind(&names)
            .bind(at)
            .bind(i64::from(max))
            .fetch_all(&mut *write.tx)
            .await?;
        let mut due = Vec::with_capacity(rows.len());
        for row in &rows {
            let attempt = AttemptRef::from(<AttemptRefRow as sqlx::FromRow<_>>::from_row(row)?);
            sqlx::query(sql::HOLD_RECONCILIATION)
                .bind(at.saturating_add(micros(hold)))
                .bind_attempt(&attempt)
                .execute(&mut *write.tx)
                .await?;
            let finished: Option<i64> = row.try_get("finished_at")?;
            due.push(UnknownAttempt {
                attempt,
                id: AttemptId(row.try_get("id")?),
                provider: row.try_get("provider")?,
                task: row.try_get("task")?,
                unknown_for: Duration::from_micros(u64::try_from(at - finished.unwrap_or(at)).unwrap_or(0)),
                reconcile_count: row.try_get::<i32, _>("reconcile_count")? + 1,
                provider_request_id: row.try_get("provider_request_id")?,
                trace: stored_trace(row.try_get("traceparent")?, row.try_get("tracestate")?),
            });
        }
        write.tx.commit().await?;
        Ok(due)
    }

    async fn postpone_reconciliation(&self, attempt: &AttemptRef, delay: Duration) -> Result<()> {
        sqlx::query(&sql::POSTPONE_RECONCILIATION)
            .bind(now().saturating_add(micros(delay)))
            .bind_attempt(attempt)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn sample_gauges(&self) -> Result<Gauges> {
        let at = now();
        let row = sqlx::query(SAMPLE_GAUGES.as_str()).bind(at).fetch_one(&self.pool).await?;
        let pending = sqlx::query_as(super::shared::PENDING_BY.as_str()).fetch_all(&self.pool).await?;
        let (pending_by_owner, pending_by_provider) = super::driver::by_kind(pending);
        let oldest: Option<i64> = row.try_get("oldest")?;
        Ok(Gauges {
            pending_due: row.try_get("pending_due")?,
            unknown_open: row.try_get("unknown_open")?,
            oldest_unknown: Duration::from_micros(oldest.map_or(0, |o| u64::try_from(at - o).unwrap_or(0))),
            pending_by_owner,
            pending_by_provider,
        })
    }

    async fn insert_qualification(&self, run: &NewQualificationRun<'_>) -> Result<QualificationRecord> {
        let row: QualificationRow = sqlx::query_as(sql::INSERT_QUALIFICATION)
            .bind(Uuid::now_v7())
            .bind(run.provider)
            .bind(run.task)
            .bind(&run.contract_hash[..])
            .bind(run.passed)
            .bind(Json(run.report))
            .bind(now())
            .fetch_one(&self.pool)
            .await?;
        row.try_into()
    }

    async fn record_usage(&self, attempt: &AttemptRef, usage: &AttemptUsage) -> Result<bool> {
        let query = bind_counts(sqlx::query(sql::RECORD_USAGE).bind_attempt(attempt), Some(usage));
        Ok(query.execute(&self.pool).await?.rows_affected() == 1)
    }

    async fn pending_owners(&self, after: &str, max: u32) -> Result<Vec<PendingOwner>> {
        shared::pending_owners(&self.pool, &claims::PENDING_OWNERS, after, max).await
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

    async fn append_to_held_outputs(
        &self,
        _owner: &OwnerId,
        pieces: &[(JobId, i32, &str)],
    ) -> Result<Vec<Option<i64>>> {
        Ok(vec![None; pieces.len()])
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_in_memory_database_is_refused_because_it_cannot_keep_a_job() {
        let options = SqliteOptions {
            max_connections: 1,
            busy_timeout: Duration::from_secs(1),
            acquire_timeout: Duration::from_secs(1),
        };
        for url in ["sqlite::memory:", "sqlite://file.db?mode=memory"] {
            let error = SqliteStore::connect_lazy(url, &options).unwrap_err();
            assert!(error.to_string().contains("in-memory"), "{error}");
        }
    }
}
