//! The statements whose Rust is the same on both databases, written once as
//! functions generic over the database: a backend's driver method of the
//! same name calls one with its own SQL (its `sql.rs` or concern module,
//! under the method's name) and its pool or transaction. Each function's
//! bounds name what it binds and reads, which both databases provide. What
//! differs between the databases (the hot path's connections, whose clock
//! stamps a row, claims, group commit) stays in the backend.

mod transaction;

pub(crate) use transaction::{
    attempt_state, attempt_states, forget_usage, insert_output, job_budget, lock_job, lock_output, read_attempts,
    set_output_attempt,
};

use std::sync::LazyLock;

use serde_json::Value;
use sqlx::types::Json;
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Type};
use uuid::Uuid;

use super::driver::PendingOwner;
use super::output::OutputPiece;
use super::rows::names::PENDING;
use super::rows::{
    ApiKeyRow, EventRow, JobSummaryRow, LiveKeyRow, OpenUnknownRow, QualificationRow, QualificationStateRow, Stamp,
    UsageReportRow, read_all,
};
use super::webhooks::{DeliveryRow, TryRow, attach_tries};
use super::{
    ApiKey, AttemptRef, Delivery, JobFilter, LiveKey, OpenUnknown, OwnedJobSummary, QualificationRecord,
    QualificationState, Result, UsageFilter, UsageRow,
};
use crate::domain::{JobEvent, JobId, JobState, OwnerId};
use crate::store::rows::BindAttempt;

/// The latest migration applied (the same SQL on both databases).
pub(crate) const MIGRATED_VERSION: &str = r#"select max(version) from _sqlx_migrations where success"#;

/// Whether any key was ever made (the same SQL on both databases).
pub(crate) const HAS_API_KEYS: &str = r#"select exists (select 1 from api_keys)"#;

/// The key of the callbacks' tokens (the same SQL on both databases).
pub(crate) const CALLBACK_SECRET: &str = r#"select secret from server_secrets where name = 'callbacks'"#;

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

/// How many rows a statement changed: what both databases' results tell,
/// each by a method of its own.
pub(crate) trait RowsAffected {
    /// The number of rows changed.
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

/// Up to `max` owners with pending attempts after `after`, with their keys'
/// limit.
pub(crate) async fn pending_owners<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    after: &'e str,
    max: u32,
) -> Result<Vec<PendingOwner>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    PendingOwner: for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as(sql).bind(after).bind(i64::from(max)).fetch_all(db).await?)
}

/// Answers when the database does and the latest migration `latest` is
/// applied.
pub(crate) async fn check_ready<'e, DB>(db: impl Executor<'e, Database = DB>, latest: i64) -> Result<()>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (Option<i64>,): for<'r> FromRow<'r, DB::Row>,
{
    let applied: std::result::Result<Option<i64>, sqlx::Error> =
        sqlx::query_scalar(MIGRATED_VERSION).fetch_one(db).await;
    super::check_migrations(applied, latest)
}

/// The live key with this hash.
pub(crate) async fn find_api_key<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    token_hash: &'e [u8; 32],
) -> Result<Option<LiveKey>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    LiveKeyRow: for<'r> FromRow<'r, DB::Row>,
{
    let row: Option<LiveKeyRow> = sqlx::query_as(sql).bind(&token_hash[..]).fetch_optional(db).await?;
    row.map(LiveKey::try_from).transpose()
}

/// Every key, or one owner's.
pub(crate) async fn list_api_keys<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: Option<&'e OwnerId>,
) -> Result<Vec<ApiKey>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    ApiKeyRow: for<'r> FromRow<'r, DB::Row>,
{
    let rows: Vec<ApiKeyRow> = sqlx::query_as(sql).bind(owner.map(OwnerId::as_str)).fetch_all(db).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Sets a live key's limit of attempts in flight: whether it has that id.
pub(crate) async fn set_key_max_in_flight<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    id: Uuid,
    max_in_flight: Option<u32>,
) -> Result<bool>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    Option<i64>: for<'q> Encode<'q, DB> + Type<DB>,
{
    let done = sqlx::query(sql).bind(id).bind(max_in_flight.map(i64::from)).execute(db).await?;
    Ok(done.rows_affected() > 0)
}

/// Whether any API key exists at all.
pub(crate) async fn has_api_keys<'e, DB>(db: impl Executor<'e, Database = DB>) -> Result<bool>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (bool,): for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_scalar(HAS_API_KEYS).fetch_one(db).await?)
}

/// The key of the callbacks' tokens, which the migrations made.
pub(crate) async fn callback_secret<'e, DB>(db: impl Executor<'e, Database = DB>) -> Result<Option<String>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (String,): for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_scalar(CALLBACK_SECRET).fetch_optional(db).await?)
}

/// A job's output after piece `after`, in order.
pub(crate) async fn list_output<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
    after: i64,
) -> Result<Vec<OutputPiece>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    OutputPiece: for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as(sql).bind(owner.as_str()).bind(job_id.0).bind(after).fetch_all(db).await?)
}

/// A job's audit log, oldest first.
pub(crate) async fn list_events<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
) -> Result<Vec<JobEvent>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    EventRow: for<'r> FromRow<'r, DB::Row>,
{
    let rows: Vec<EventRow> = sqlx::query_as(sql).bind(owner.as_str()).bind(job_id.0).fetch_all(db).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Where `provider` stands for `task`'s contract with this hash.
pub(crate) async fn qualification_state<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    provider: &'e str,
    task: &'e str,
    hash: &'e [u8; 32],
) -> Result<QualificationState>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    QualificationStateRow: for<'r> FromRow<'r, DB::Row>,
{
    let row: Option<QualificationStateRow> =
        sqlx::query_as(sql).bind(provider).bind(task).bind(&hash[..]).fetch_optional(db).await?;
    Ok(QualificationStateRow::state(row))
}

/// The latest qualification run of `provider` for `task`.
pub(crate) async fn latest_qualification<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    provider: &'e str,
    task: &'e str,
) -> Result<Option<QualificationRecord>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    QualificationRow: for<'r> FromRow<'r, DB::Row>,
{
    let row: Option<QualificationRow> = sqlx::query_as(sql).bind(provider).bind(task).fetch_optional(db).await?;
    row.map(QualificationRecord::try_from).transpose()
}

/// Every (provider, task) pair with a qualification run, in order.
pub(crate) async fn list_qualified_pairs<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
) -> Result<Vec<(String, String)>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    (String, String): for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as(sql).fetch_all(db).await?)
}

/// The owner of job `job_id` whose attempt `number` is unknown.
pub(crate) async fn find_unknown_attempt_owner<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    job_id: JobId,
    number: i32,
) -> Result<Option<OwnerId>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    (String,): for<'r> FromRow<'r, DB::Row>,
{
    let owner: Option<String> = sqlx::query_scalar(sql).bind(job_id.0).bind(number).fetch_optional(db).await?;
    Ok(owner.map(OwnerId::from_trusted))
}

/// The owner's attempts with recorded usage in the filter's range.
pub(crate) async fn list_usage<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    filter: &'e UsageFilter,
) -> Result<Vec<UsageRow>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Stamp: for<'q> Encode<'q, DB> + Type<DB>,
    UsageReportRow: for<'r> FromRow<'r, DB::Row>,
{
    let rows =
        sqlx::query(sql).bind(owner.as_str()).bind(Stamp(filter.from)).bind(Stamp(filter.to)).fetch_all(db).await?;
    read_all::<_, UsageReportRow, _>(&rows)
}

/// A page of jobs of one owner or of every owner, or the one holding `key`.
pub(crate) async fn browse_jobs<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: Option<&'e OwnerId>,
    key: Option<&'e str>,
    filter: &'e JobFilter,
) -> Result<Vec<OwnedJobSummary>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    Option<JobState>: for<'q> Encode<'q, DB> + Type<DB>,
    Option<Uuid>: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    JobSummaryRow: for<'r> FromRow<'r, DB::Row>,
{
    let rows: Vec<JobSummaryRow> = sqlx::query_as(sql)
        .bind(owner.map(OwnerId::as_str))
        .bind(key)
        .bind(filter.state)
        .bind(filter.task.as_deref())
        .bind(filter.before.map(|id| id.0))
        .bind(i64::from(filter.limit))
        .fetch_all(db)
        .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// The jobs that finished while attempts of theirs run under `worker`.
pub(crate) async fn finished_jobs_running_on<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    worker: &'e str,
) -> Result<Vec<JobId>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    (Uuid,): for<'r> FromRow<'r, DB::Row>,
{
    let rows: Vec<(Uuid,)> = sqlx::query_as(sql).bind(worker).fetch_all(db).await?;
    Ok(rows.into_iter().map(|(id,)| JobId(id)).collect())
}

/// How many jobs are `unknown` and unchanged since `before`.
pub(crate) async fn count_unknown_since<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    before: chrono::DateTime<chrono::Utc>,
) -> Result<u64>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    Stamp: for<'q> Encode<'q, DB> + Type<DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
{
    let count: i64 = sqlx::query_scalar(sql).bind(Stamp(before)).fetch_one(db).await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// The owner of job `id`, of any owner.
pub(crate) async fn find_job_owner<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    id: JobId,
) -> Result<Option<OwnerId>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    (String,): for<'r> FromRow<'r, DB::Row>,
{
    let owner: Option<String> = sqlx::query_scalar(sql).bind(id.0).fetch_optional(db).await?;
    Ok(owner.map(OwnerId::from_trusted))
}

/// Keeps an output that did not become the attempt's on it, for audit.
pub(crate) async fn record_unapplied_output<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    attempt: &'e AttemptRef,
    unapplied: &'e Value,
) -> Result<bool>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q Value>: Encode<'q, DB> + Type<DB>,
{
    let changed = sqlx::query(sql).bind_attempt(attempt).bind(Json(unapplied)).execute(db).await?;
    Ok(changed.rows_affected() == 1)
}

/// Keeps the provider's own id of an attempt's request on the attempt.
pub(crate) async fn record_provider_request<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    attempt: &'e AttemptRef,
    provider_request_id: &'e str,
) -> Result<bool>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
{
    let changed = sqlx::query(sql).bind_attempt(attempt).bind(provider_request_id).execute(db).await?;
    Ok(changed.rows_affected() == 1)
}

/// The attempts whose outcome is unknown, of one owner or of every owner.
pub(crate) async fn list_unknown_attempts<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: Option<&'e OwnerId>,
    limit: u32,
) -> Result<Vec<OpenUnknown>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    OpenUnknownRow: for<'r> FromRow<'r, DB::Row>,
{
    let rows: Vec<OpenUnknownRow> =
        sqlx::query_as(sql).bind(owner.map(OwnerId::as_str)).bind(i64::from(limit)).fetch_all(db).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Deletes an owner's endpoint with its deliveries: whether it had one.
pub(crate) async fn delete_webhook_endpoint<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    id: Uuid,
) -> Result<bool>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
{
    let deleted = sqlx::query(sql).bind(owner.as_str()).bind(id).execute(db).await?;
    Ok(deleted.rows_affected() > 0)
}

/// The latest `limit` deliveries to an owner's endpoint with their tries;
/// `None` when it has no such endpoint. Its statements: whether the owner
/// has the endpoint, the deliveries, their tries.
pub(crate) async fn list_webhook_deliveries<'e, DB>(
    pool: impl Executor<'e, Database = DB> + Copy,
    [endpoint_exists, deliveries, tries]: [&str; 3],
    owner: &OwnerId,
    endpoint: Uuid,
    limit: u32,
) -> Result<Option<Vec<Delivery>>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    (bool,): for<'r> FromRow<'r, DB::Row>,
    DeliveryRow: for<'r> FromRow<'r, DB::Row>,
    TryRow: for<'r> FromRow<'r, DB::Row>,
{
    let exists: bool = sqlx::query_scalar(endpoint_exists).bind(owner.as_str()).bind(endpoint).fetch_one(pool).await?;
    if !exists {
        return Ok(None);
    }
    let rows: Vec<DeliveryRow> =
        sqlx::query_as(deliveries).bind(owner.as_str()).bind(endpoint).bind(i64::from(limit)).fetch_all(pool).await?;
    let tries: Vec<TryRow> = sqlx::query_as(tries).bind(owner.as_str()).bind(endpoint).fetch_all(pool).await?;
    Ok(Some(attach_tries(rows, tries)))
}
