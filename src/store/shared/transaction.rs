//! The statements of a transition's transaction whose Rust is the same on
//! both databases (see the module `shared`).

use serde_json::Value;
use sqlx::types::Json;
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Type};
use uuid::Uuid;

use crate::domain::{Attempt, AttemptState, JobId, OwnerId};
use crate::store::driver::LockedJob;
use crate::store::output::{OutputLock, OutputPiece};
use crate::store::rows::{AttemptRow, BindAttempt, attempts_from_rows};
use crate::store::{AttemptRef, Result};

/// Locks the job's row and reads what the transitions need of it.
pub(crate) async fn lock_job<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
) -> Result<Option<LockedJob>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    LockedJob: for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as(sql).bind(owner.as_str()).bind(job_id.0).fetch_optional(db).await?)
}

/// The job's budget column (decimal text) and its input.
pub(crate) async fn job_budget<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
) -> Result<(Option<String>, Value)>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    (Option<String>, Json<Value>): for<'r> FromRow<'r, DB::Row>,
{
    let (max_cost, Json(input)) = sqlx::query_as(sql).bind(owner.as_str()).bind(job_id.0).fetch_one(db).await?;
    Ok((max_cost, input))
}

/// The attempt's usage becomes zero, and its cost zero if it had one.
pub(crate) async fn forget_usage<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    attempt: &'e AttemptRef,
) -> Result<()>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
{
    sqlx::query(sql).bind_attempt(attempt).execute(db).await?;
    Ok(())
}

/// Locks a job for a piece of its output.
pub(crate) async fn lock_output<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
) -> Result<Option<OutputLock>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    OutputLock: for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as(sql).bind(owner.as_str()).bind(job_id.0).fetch_optional(db).await?)
}

/// Makes attempt `number` the one the job's output shows.
pub(crate) async fn set_output_attempt<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
    number: i32,
) -> Result<()>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
{
    sqlx::query(sql).bind(owner.as_str()).bind(job_id.0).bind(number).execute(db).await?;
    Ok(())
}

/// Writes a piece of the job's output.
pub(crate) async fn insert_output<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
    piece: &'e OutputPiece,
) -> Result<()>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> &'q String: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
{
    sqlx::query(sql)
        .bind(owner.as_str())
        .bind(job_id.0)
        .bind(piece.seq)
        .bind(piece.attempt_number)
        .bind(&piece.kind)
        .bind(&piece.text)
        .execute(db)
        .await?;
    Ok(())
}

/// The state of one attempt.
pub(crate) async fn attempt_state<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    attempt: &'e AttemptRef,
) -> Result<Option<AttemptState>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    (AttemptState,): for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_scalar(sql).bind_attempt(attempt).fetch_optional(db).await?)
}

/// The states of a job's attempts.
pub(crate) async fn attempt_states<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
) -> Result<Vec<AttemptState>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    (AttemptState,): for<'r> FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_scalar(sql).bind(owner.as_str()).bind(job_id.0).fetch_all(db).await?)
}

/// A job's attempts, by number.
pub(crate) async fn read_attempts<'e, DB>(
    db: impl Executor<'e, Database = DB>,
    sql: &'e str,
    owner: &'e OwnerId,
    job_id: JobId,
) -> Result<Vec<Attempt>>
where
    DB: Database,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Uuid: for<'q> Encode<'q, DB> + Type<DB>,
    AttemptRow: for<'r> FromRow<'r, DB::Row>,
{
    let rows = sqlx::query(sql).bind(owner.as_str()).bind(job_id.0).fetch_all(db).await?;
    attempts_from_rows(&rows)
}
