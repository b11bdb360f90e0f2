//! The statements whose Rust is the same on both databases, written once:
//! each backend instantiates these templates with its own SQL (its
//! `sql.rs`, under the same names) and its own pool and transaction types.
//! What differs between the databases (the hot path's connections, whose
//! clock stamps a row, claims, group commit) stays in the backend.

use std::sync::LazyLock;

use crate::store::rows::names::PENDING;

/// The latest migration applied (the same SQL on both databases).
pub(crate) const MIGRATED_VERSION: &str = r#"select max(version) from _sqlx_migrations where success"#;

/// Whether any key was ever made (the same SQL on both databases).
pub(crate) const ANY_API_KEY: &str = r#"select exists (select 1 from api_keys)"#;

/// Pending attempts per owner and per provider, for the gauges (the same
/// SQL on both databases).
pub(crate) static PENDING_BY: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select 'owner' as kind, owner_id as name, count(*) as pending from attempts
           where state = '{PENDING}' group by owner_id
           union all
           select 'provider', provider, count(*) from attempts where state = '{PENDING}' group by provider"#
    )
});

/// Implements [`crate::store::Driver`] for a backend: its own methods, given
/// as the second argument, and the shared reads, run on `self.pool` with
/// the backend's `sql` module and `MIGRATOR` in scope; and the dashboard
/// sessions and the first run, handed to the backend's `sessions` module,
/// whose functions have the same names and arguments on both.
macro_rules! impl_driver {
    ($store:ty, { $($own:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::store::Driver for $store {
            $($own)*

            async fn select_pending_owners(&self, after: &str, max: u32) -> Result<Vec<$crate::store::driver::PendingOwner>> {
                Ok(sqlx::query_as(claims::PENDING_OWNERS.as_str()).bind(after).bind(i64::from(max)).fetch_all(&self.pool).await?)
            }

            async fn select_any_purgeable(&self, rule: &$crate::store::purge::PurgeRule) -> Result<bool> {
                retention::any_purgeable(&self.pool, rule).await
            }

            async fn check_migrated(&self) -> Result<()> {
                let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
                let applied: std::result::Result<Option<i64>, sqlx::Error> =
                    sqlx::query_scalar($crate::store::shared::MIGRATED_VERSION).fetch_one(&self.pool).await;
                $crate::store::check_migrations(applied, latest)
            }

            async fn select_live_key(&self, token_hash: &[u8; 32]) -> Result<Option<LiveKey>> {
                let row: Option<$crate::store::rows::LiveKeyRow> =
                    sqlx::query_as(&*sql::FIND_API_KEY).bind(&token_hash[..]).fetch_optional(&self.pool).await?;
                row.map(LiveKey::try_from).transpose()
            }

            async fn select_keys(&self, owner: Option<&OwnerId>) -> Result<Vec<ApiKey>> {
                let rows: Vec<$crate::store::rows::ApiKeyRow> =
                    sqlx::query_as(&*sql::LIST_API_KEYS).bind(owner.map(OwnerId::as_str)).fetch_all(&self.pool).await?;
                Ok(rows.into_iter().map(Into::into).collect())
            }

            async fn update_key_max_in_flight(&self, id: Uuid, max_in_flight: Option<u32>) -> Result<bool> {
                let done = sqlx::query(sql::SET_KEY_MAX_IN_FLIGHT)
                    .bind(id).bind(max_in_flight.map(i64::from)).execute(&self.pool).await?;
                Ok(done.rows_affected() > 0)
            }

            async fn any_key(&self) -> Result<bool> {
                Ok(sqlx::query_scalar($crate::store::shared::ANY_API_KEY).fetch_one(&self.pool).await?)
            }

            async fn select_output(&self, owner: &OwnerId, job_id: JobId, after: i64) -> Result<Vec<$crate::store::output::OutputPiece>> {
                Ok(sqlx::query_as(sql::LIST_OUTPUT).bind(owner.as_str()).bind(job_id.0).bind(after).fetch_all(&self.pool).await?)
            }

            async fn select_events(&self, owner: &OwnerId, job_id: JobId) -> Result<Vec<JobEvent>> {
                let rows: Vec<$crate::store::rows::EventRow> =
                    sqlx::query_as(&*sql::LIST_EVENTS).bind(owner.as_str()).bind(job_id.0).fetch_all(&self.pool).await?;
                Ok(rows.into_iter().map(Into::into).collect())
            }

            async fn select_qualification_state(&self, provider: &str, task: &str, hash: &[u8; 32]) -> Result<QualificationState> {
                let row: Option<$crate::store::rows::QualificationStateRow> = sqlx::query_as(&*sql::QUALIFICATION_STATE)
                    .bind(provider).bind(task).bind(&hash[..]).fetch_optional(&self.pool).await?;
                Ok($crate::store::rows::QualificationStateRow::state(row))
            }

            async fn select_latest_qualification(&self, provider: &str, task: &str) -> Result<Option<QualificationRecord>> {
                let row: Option<$crate::store::rows::QualificationRow> =
                    sqlx::query_as(&*sql::LATEST_QUALIFICATION).bind(provider).bind(task).fetch_optional(&self.pool).await?;
                row.map(QualificationRecord::try_from).transpose()
            }

            async fn select_unknown_attempt_owner(&self, job_id: JobId, number: i32) -> Result<Option<OwnerId>> {
                let owner: Option<String> = sqlx::query_scalar(&*sql::FIND_UNKNOWN_ATTEMPT_OWNER)
                    .bind(job_id.0).bind(number).fetch_optional(&self.pool).await?;
                Ok(owner.map(OwnerId::from_trusted))
            }

            async fn select_usage(&self, owner: &OwnerId, filter: &UsageFilter) -> Result<Vec<UsageRow>> {
                let rows = sqlx::query(&*sql::LIST_USAGE)
                    .bind(owner.as_str())
                    .bind($crate::store::rows::Stamp(filter.from))
                    .bind($crate::store::rows::Stamp(filter.to))
                    .fetch_all(&self.pool)
                    .await?;
                $crate::store::rows::read_all::<_, $crate::store::rows::UsageReportRow, _>(&rows)
            }

            async fn select_jobs_of_any_owner(
                &self, owner: Option<&OwnerId>, key: Option<&str>, filter: &JobFilter,
            ) -> Result<Vec<OwnedJobSummary>> {
                let rows: Vec<$crate::store::rows::JobSummaryRow> = sqlx::query_as(&*sql::BROWSE_JOBS)
                    .bind(owner.map(OwnerId::as_str))
                    .bind(key)
                    .bind(filter.state)
                    .bind(filter.task.as_deref())
                    .bind(filter.before.map(|id| id.0))
                    .bind(i64::from(filter.limit))
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.into_iter().map(Into::into).collect())
            }

            async fn select_finished_with_calls(&self, worker: &str) -> Result<Vec<JobId>> {
                let rows: Vec<(uuid::Uuid,)> =
                    sqlx::query_as(sql::FINISHED_WITH_CALLS.as_str()).bind(worker).fetch_all(&self.pool).await?;
                Ok(rows.into_iter().map(|(id,)| JobId(id)).collect())
            }

            async fn count_stale_unknown(&self, before: chrono::DateTime<chrono::Utc>) -> Result<u64> {
                let count: i64 = sqlx::query_scalar(&*sql::COUNT_UNKNOWN_SINCE)
                    .bind($crate::store::rows::Stamp(before))
                    .fetch_one(&self.pool)
                    .await?;
                Ok(u64::try_from(count).unwrap_or(0))
            }

            async fn select_job_owner(&self, id: JobId) -> Result<Option<OwnerId>> {
                let owner: Option<String> = sqlx::query_scalar(&*sql::FIND_JOB_OWNER).bind(id.0).fetch_optional(&self.pool).await?;
                Ok(owner.map(OwnerId::from_trusted))
            }

            async fn update_unapplied_output(&self, attempt: &AttemptRef, unapplied: &Value) -> Result<bool> {
                let changed = sqlx::query(sql::RECORD_UNAPPLIED_OUTPUT)
                    .bind_attempt(attempt)
                    .bind(sqlx::types::Json(unapplied))
                    .execute(&self.pool).await?;
                Ok(changed.rows_affected() == 1)
            }

            async fn update_provider_request(&self, attempt: &AttemptRef, provider_request_id: &str) -> Result<bool> {
                let changed = sqlx::query(sql::RECORD_PROVIDER_REQUEST)
                    .bind_attempt(attempt).bind(provider_request_id)
                    .execute(&self.pool).await?;
                Ok(changed.rows_affected() == 1)
            }

            async fn select_unknown_attempts(&self, owner: Option<&OwnerId>, limit: u32) -> Result<Vec<OpenUnknown>> {
                let rows: Vec<$crate::store::rows::OpenUnknownRow> = sqlx::query_as(&*sql::LIST_UNKNOWN_ATTEMPTS)
                    .bind(owner.map(OwnerId::as_str)).bind(i64::from(limit)).fetch_all(&self.pool).await?;
                Ok(rows.into_iter().map(Into::into).collect())
            }

            async fn insert_session(&self, session: &$crate::store::NewSession) -> Result<()> {
                sessions::insert(&self.pool, session).await
            }

            async fn select_session(&self, token_hash: &[u8; 32]) -> Result<Option<$crate::store::StoredSession>> {
                sessions::find(&self.pool, token_hash).await
            }

            async fn update_session_used(&self, token_hash: &[u8; 32]) -> Result<()> {
                sessions::touch(&self.pool, token_hash).await
            }

            async fn delete_session(&self, token_hash: &[u8; 32]) -> Result<bool> {
                sessions::delete(&self.pool, token_hash).await
            }

            async fn delete_expired_sessions(&self, idle: std::time::Duration) -> Result<u64> {
                sessions::delete_expired(&self.pool, idle).await
            }

            async fn insert_bootstrap_key(&self, key: &$crate::store::NewKey<'_>) -> Result<bool> {
                sessions::insert_first_run_key(self, key).await
            }

            async fn insert_endpoint(&self, new: &$crate::store::NewEndpoint, max_per_owner: u32) -> Result<Option<$crate::store::Endpoint>> {
                webhooks::insert_endpoint(&self.pool, new, max_per_owner).await
            }

            async fn select_endpoints(&self, owner: &OwnerId) -> Result<Vec<$crate::store::Endpoint>> {
                webhooks::list_endpoints(&self.pool, owner).await
            }

            async fn delete_endpoint(&self, owner: &OwnerId, id: Uuid) -> Result<bool> {
                let deleted = sqlx::query(webhooks::DELETE_ENDPOINT).bind(owner.as_str()).bind(id).execute(&self.pool).await?;
                Ok(deleted.rows_affected() > 0)
            }

            async fn update_endpoint_secret(&self, owner: &OwnerId, id: Uuid, secret: &str, keep_old: std::time::Duration) -> Result<Option<$crate::store::Endpoint>> {
                webhooks::rotate_secret(&self.pool, owner, id, secret, keep_old).await
            }

            async fn select_deliveries(&self, owner: &OwnerId, endpoint: Uuid, limit: u32) -> Result<Option<Vec<$crate::store::Delivery>>> {
                let exists: bool =
                    sqlx::query_scalar(webhooks::ENDPOINT_EXISTS).bind(owner.as_str()).bind(endpoint).fetch_one(&self.pool).await?;
                if !exists {
                    return Ok(None);
                }
                let rows: Vec<$crate::store::webhooks::DeliveryRow> = sqlx::query_as(webhooks::LIST_DELIVERIES)
                    .bind(owner.as_str()).bind(endpoint).bind(i64::from(limit)).fetch_all(&self.pool).await?;
                let tries: Vec<$crate::store::webhooks::TryRow> =
                    sqlx::query_as(webhooks::LIST_TRIES).bind(owner.as_str()).bind(endpoint).fetch_all(&self.pool).await?;
                Ok(Some($crate::store::webhooks::attach_tries(rows, tries)))
            }

            async fn claim_due_deliveries(&self, max: u32, lease: std::time::Duration, skip: &[String]) -> Result<Vec<$crate::store::ClaimedDelivery>> {
                webhooks::claim_deliveries(&self.pool, max, lease, skip).await
            }

            async fn select_any_due_delivery(&self) -> Result<bool> {
                webhooks::any_due(&self.pool).await
            }

            async fn update_deliveries_released(&self, owner: &OwnerId, ids: &[Uuid]) -> Result<()> {
                webhooks::release_deliveries(&self.pool, owner, ids).await
            }

            async fn insert_delivery_tries(&self, done: &[$crate::store::DeliveryTry]) -> Result<()> {
                webhooks::record_tries(&self.pool, done).await
            }
        }
    };
}

/// Implements [`crate::store::driver::DriverTx`] for a backend's
/// transaction type: its own methods, given as the second argument, and the
/// shared ones, run on `self.tx` with the backend's `sql` module in scope.
macro_rules! impl_driver_tx {
    ($tx:ty, { $($own:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::store::driver::DriverTx for $tx {
            $($own)*

            async fn lock_job(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<LockedJob>> {
                Ok(sqlx::query_as(&*sql::LOCK_JOB).bind(owner.as_str()).bind(job_id.0).fetch_optional(&mut *self.tx).await?)
            }

            async fn job_budget(&mut self, owner: &OwnerId, job_id: JobId) -> Result<(Option<String>, Value)> {
                let (max_cost, sqlx::types::Json(input)) =
                    sqlx::query_as(&*sql::JOB_BUDGET).bind(owner.as_str()).bind(job_id.0).fetch_one(&mut *self.tx).await?;
                Ok((max_cost, input))
            }

            async fn forget_usage(&mut self, attempt: &AttemptRef) -> Result<()> {
                sqlx::query(sql::FORGET_USAGE)
                    .bind_attempt(attempt)
                    .execute(&mut *self.tx).await?;
                Ok(())
            }

            async fn lock_output(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<$crate::store::output::OutputLock>> {
                Ok(sqlx::query_as(sql::LOCK_OUTPUT).bind(owner.as_str()).bind(job_id.0).fetch_optional(&mut *self.tx).await?)
            }

            async fn set_output_attempt(&mut self, owner: &OwnerId, job_id: JobId, number: i32) -> Result<()> {
                sqlx::query(sql::SET_OUTPUT_ATTEMPT).bind(owner.as_str()).bind(job_id.0).bind(number).execute(&mut *self.tx).await?;
                Ok(())
            }

            async fn insert_output(&mut self, owner: &OwnerId, job_id: JobId, piece: &$crate::store::output::OutputPiece) -> Result<()> {
                sqlx::query(sql::INSERT_OUTPUT)
                    .bind(owner.as_str()).bind(job_id.0).bind(piece.seq).bind(piece.attempt_number).bind(&piece.kind).bind(&piece.text)
                    .execute(&mut *self.tx).await?;
                Ok(())
            }

            async fn attempt_state(&mut self, attempt: &AttemptRef) -> Result<Option<AttemptState>> {
                Ok(sqlx::query_scalar(&*sql::ATTEMPT_STATE)
                    .bind_attempt(attempt)
                    .fetch_optional(&mut *self.tx).await?)
            }

            async fn attempt_states(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<AttemptState>> {
                Ok(sqlx::query_scalar(&*sql::ATTEMPT_STATES).bind(owner.as_str()).bind(job_id.0).fetch_all(&mut *self.tx).await?)
            }

            async fn read_attempts(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<Attempt>> {
                let rows = sqlx::query(&*sql::READ_ATTEMPTS).bind(owner.as_str()).bind(job_id.0).fetch_all(&mut *self.tx).await?;
                $crate::store::rows::attempts_from_rows(&rows)
            }

            async fn select_qualification_state(&mut self, provider: &str, task: &str, hash: &[u8; 32]) -> Result<QualificationState> {
                let row: Option<$crate::store::rows::QualificationStateRow> = sqlx::query_as(&*sql::QUALIFICATION_STATE)
                    .bind(provider).bind(task).bind(&hash[..]).fetch_optional(&mut *self.tx).await?;
                Ok($crate::store::rows::QualificationStateRow::state(row))
            }

            async fn purgeable_jobs(&mut self, rule: &$crate::store::purge::PurgeRule, max: u32) -> Result<Vec<(OwnerId, JobId)>> {
                retention::purgeable_jobs(&mut self.tx, rule, max).await
            }

            async fn count_purgeable_jobs(&mut self, rule: &$crate::store::purge::PurgeRule) -> Result<u64> {
                retention::count_purgeable(&mut self.tx, rule).await
            }

            async fn usage_of_jobs(&mut self, jobs: &[(OwnerId, JobId)]) -> Result<Vec<(OwnerId, $crate::store::usage::UsageRow)>> {
                retention::usage_of_jobs(&mut self.tx, jobs).await
            }

            async fn add_to_rollup(&mut self, key: &$crate::store::purge::RollupKey, totals: &$crate::store::purge::RollupTotals) -> Result<()> {
                retention::add_to_rollup(&mut self.tx, key, totals).await
            }

            async fn delete_jobs(&mut self, jobs: &[(OwnerId, JobId)]) -> Result<u64> {
                retention::delete_jobs(&mut self.tx, jobs).await
            }

            async fn commit(self: Box<Self>) -> Result<()> {
                Ok(self.tx.commit().await?)
            }
        }
    };
}

pub(crate) use {impl_driver, impl_driver_tx};
