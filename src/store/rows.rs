//! How rows become values, once for both databases: the row types derive
//! `sqlx::FromRow`, the states, roles, origins and event kinds travel as
//! their stored names (the domain's `sqlx` feature), and [`Stamp`] reads a time as each database keeps it
//! (Postgres `timestamptz`, SQLite microseconds since the epoch).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::error::BoxDynError;
use sqlx::types::Json;
use sqlx::{Database, Decode, Encode, FromRow, Postgres, Row, Sqlite, Type};
use uuid::Uuid;

use super::usage::{StoredUsage, read_cost, read_usage};
use super::{
    ApiKey, AttemptRef, LiveKey, OpenUnknown, OwnedJobSummary, QualificationRecord, Result, UsageRow, corrupt,
};
use crate::domain::job::JobCost;
use crate::domain::{
    Attempt, AttemptId, AttemptOrigin, AttemptState, EventKind, Fingerprint, Job, JobEvent, JobId, JobState,
    JobSummary, KeyRole, OwnerId,
};

/// A point in time as a database stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp(pub DateTime<Utc>);

impl Type<Postgres> for Stamp {
    fn type_info() -> <Postgres as Database>::TypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl<'r> Decode<'r, Postgres> for Stamp {
    fn decode(value: <Postgres as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Stamp(<DateTime<Utc> as Decode<'r, Postgres>>::decode(value)?))
    }
}

impl<'q> Encode<'q, Postgres> for Stamp {
    fn encode_by_ref(
        &self,
        buf: &mut <Postgres as Database>::ArgumentBuffer<'q>,
    ) -> Result<sqlx::encode::IsNull, BoxDynError> {
        <DateTime<Utc> as Encode<'q, Postgres>>::encode_by_ref(&self.0, buf)
    }
}

impl<'q> Encode<'q, Sqlite> for Stamp {
    fn encode_by_ref(
        &self,
        buf: &mut <Sqlite as Database>::ArgumentBuffer<'q>,
    ) -> Result<sqlx::encode::IsNull, BoxDynError> {
        <i64 as Encode<'q, Sqlite>>::encode(self.0.timestamp_micros(), buf)
    }
}

impl Type<Sqlite> for Stamp {
    fn type_info() -> <Sqlite as Database>::TypeInfo {
        <i64 as Type<Sqlite>>::type_info()
    }
    fn compatible(ty: &<Sqlite as Database>::TypeInfo) -> bool {
        <i64 as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Sqlite> for Stamp {
    fn decode(value: <Sqlite as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let micros = <i64 as Decode<'r, Sqlite>>::decode(value)?;
        DateTime::from_timestamp_micros(micros)
            .map(Stamp)
            .ok_or_else(|| format!("time {micros} is out of range").into())
    }
}

fn time(stamp: Option<Stamp>) -> Option<DateTime<Utc>> {
    stamp.map(|s| s.0)
}

/// Binds an attempt's key to a statement: its owner, job and number, in
/// that order.
pub(crate) trait BindAttempt<'q>: Sized {
    /// The statement with the three bound.
    fn bind_attempt(self, attempt: &'q AttemptRef) -> Self;
}

macro_rules! bind_attempt_for {
    ($($query:ident $(<$o:ident>)?),+) => {$(
        impl<'q, DB: Database $(, $o)?> BindAttempt<'q> for sqlx::query::$query<'q, DB, $($o,)? <DB as Database>::Arguments<'q>>
        where
            &'q str: Encode<'q, DB> + Type<DB>,
            Uuid: Encode<'q, DB> + Type<DB>,
            i32: Encode<'q, DB> + Type<DB>,
        {
            fn bind_attempt(self, attempt: &'q AttemptRef) -> Self {
                self.bind(attempt.owner.as_str()).bind(attempt.job_id.0).bind(attempt.number)
            }
        }
    )+};
}

bind_attempt_for!(Query, QueryAs<O>, QueryScalar<O>);

/// The stored names of states, origins and event kinds, for statements
/// that must name them in their text (a partial index matches only a
/// literal): taken from the enums, never typed by hand.
pub(crate) mod names {
    use std::sync::LazyLock;

    use crate::domain::retention::{FINISHED, OPEN};
    use crate::domain::{AttemptOrigin, AttemptState, EventKind, JobState};

    pub(crate) const PENDING: &str = AttemptState::Pending.as_str();
    pub(crate) const RUNNING: &str = AttemptState::Running.as_str();
    pub(crate) const SUCCEEDED: &str = AttemptState::Succeeded.as_str();
    pub(crate) const UNKNOWN: &str = AttemptState::Unknown.as_str();
    pub(crate) const SUPERSEDED: &str = AttemptState::Superseded.as_str();
    pub(crate) const CANCELED: &str = AttemptState::Canceled.as_str();
    pub(crate) const JOB_QUEUED: &str = JobState::Queued.as_str();
    pub(crate) const JOB_SUCCEEDED: &str = JobState::Succeeded.as_str();
    pub(crate) const JOB_UNKNOWN: &str = JobState::Unknown.as_str();
    pub(crate) const ORIGIN_CLIENT: &str = AttemptOrigin::Client.as_str();
    pub(crate) const EVENT_JOB_CREATED: &str = EventKind::JobCreated.as_str();
    pub(crate) const EVENT_ATTEMPT_CLAIMED: &str = EventKind::AttemptClaimed.as_str();
    pub(crate) const EVENT_ATTEMPT_SUCCEEDED: &str = EventKind::AttemptSucceeded.as_str();
    pub(crate) const EVENT_RACE_LOST: &str = EventKind::RaceLost.as_str();

    /// The job states that never change ([`JobState::is_terminal`]), for
    /// `state in (…)`: a job in one takes no winner and starts no attempt.
    pub(crate) static JOB_TERMINAL: LazyLock<String> =
        LazyLock::new(|| quoted(JobState::ALL.iter().filter(|state| state.is_terminal()).map(|state| state.as_str())));

    /// The job states retention purges ([`FINISHED`]), for `state in (…)`.
    pub(crate) static JOB_FINISHED: LazyLock<String> =
        LazyLock::new(|| quoted(FINISHED.iter().map(|state| state.as_str())));

    /// The attempt states that keep a job from retention ([`OPEN`]), for
    /// `state in (…)`.
    pub(crate) static ATTEMPT_OPEN: LazyLock<String> =
        LazyLock::new(|| quoted(OPEN.iter().map(|state| state.as_str())));

    /// The job state a job of a started attempt takes, unless it has
    /// finished (a running attempt decides [`JobState::derive`]).
    pub(crate) const JOB_WITH_RUNNING_ATTEMPT: &str = JobState::Running.as_str();

    /// Stored names as an SQL list: `'a', 'b'`.
    fn quoted<'a>(names: impl Iterator<Item = &'a str>) -> String {
        names.map(|name| format!("'{name}'")).collect::<Vec<_>>().join(", ")
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_lists_in_statements_are_the_domains() {
            assert_eq!(*JOB_TERMINAL, "'succeeded', 'canceled'");
            assert_eq!(*JOB_FINISHED, "'succeeded', 'failed', 'canceled'");
            assert_eq!(*ATTEMPT_OPEN, "'pending', 'running', 'unknown'");
        }

        #[test]
        fn a_job_with_a_running_attempt_is_running_whatever_its_other_attempts() {
            for &current in JobState::ALL.iter().filter(|state| !state.is_terminal()) {
                for &other in AttemptState::ALL {
                    let derived = JobState::derive(current, [other, AttemptState::Running]);
                    assert_eq!(derived.as_str(), JOB_WITH_RUNNING_ATTEMPT, "{current:?} with {other:?}");
                }
            }
        }
    }
}

/// The columns of [`JobRow`], as both databases select them.
pub(crate) const JOB_COLUMNS: &str = r#"j.owner_id, j.id, j.idempotency_key, j.fingerprint, j.task, j.input, j.provider,
    j.state, j.winning_attempt, j.result, j.created_at, j.updated_at, cast(j.max_cost as text) as max_cost"#;

/// The columns of [`AttemptRow`], as both databases select them.
pub(crate) const ATTEMPT_COLUMNS: &str = r#"a.number as a_number, a.id as a_id, a.provider as a_provider, a.state as a_state,
    a.origin as a_origin, a.idempotency_key as a_idempotency_key, a.worker as a_worker,
    a.lease_until as a_lease_until, a.output as a_output, a.error as a_error,
    a.created_at as a_created_at, a.not_before as a_not_before, a.started_at as a_started_at,
    a.finished_at as a_finished_at, a.prompt_tokens as a_prompt_tokens,
    a.completion_tokens as a_completion_tokens, a.usage_estimated as a_usage_estimated,
    a.cache_write_tokens as a_cache_write_tokens, a.cache_read_tokens as a_cache_read_tokens,
    a.predict_ms as a_predict_ms, a.outputs as a_outputs,
    cast(a.cost as text) as a_cost, a.currency as a_currency, a.price_version as a_price_version,
    a.unapplied_output as a_unapplied_output, a.provider_request_id as a_provider_request_id,
    a.traceparent as a_traceparent, a.tracestate as a_tracestate"#;

/// A job with its attempts, in one statement (one snapshot), for
/// [`job_from_rows`].
pub(crate) fn select_job_where(condition: &str) -> String {
    format!(
        r#"select {JOB_COLUMNS}, {ATTEMPT_COLUMNS}
           from jobs j
           left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
           where {condition}
           order by a.number"#
    )
}

/// A row of `jobs`, as the job readers select it (`max_cost` as text).
#[derive(FromRow)]
pub(crate) struct JobRow {
    owner_id: String,
    id: Uuid,
    idempotency_key: String,
    fingerprint: Vec<u8>,
    task: String,
    input: Json<Value>,
    provider: String,
    state: JobState,
    winning_attempt: Option<i32>,
    result: Option<Json<Value>>,
    created_at: Stamp,
    updated_at: Stamp,
    max_cost: Option<String>,
}

impl JobRow {
    fn into_job(self, attempts: Vec<Attempt>) -> Result<Job> {
        Ok(Job {
            id: JobId(self.id),
            owner: OwnerId::from_trusted(self.owner_id),
            idempotency_key: self.idempotency_key,
            fingerprint: Fingerprint::from_slice(&self.fingerprint).ok_or_else(|| corrupt("fingerprint length"))?,
            task: self.task,
            input: self.input.0,
            provider: self.provider,
            state: self.state,
            winning_attempt: self.winning_attempt,
            result: self.result.map(|r| r.0),
            created_at: self.created_at.0,
            updated_at: self.updated_at.0,
            expires_at: None,
            max_cost: self.max_cost.map(|m| m.parse()).transpose().map_err(corrupt)?,
            cost: JobCost::of(&attempts),
            attempts,
            waiting: None,
            canceling: Vec::new(),
        })
    }
}

/// A row of `attempts`, its columns prefixed `a_` (they share rows with a
/// job's in the job readers).
#[derive(FromRow)]
pub(crate) struct AttemptRow {
    a_number: i32,
    a_id: Uuid,
    a_provider: String,
    a_state: AttemptState,
    a_origin: AttemptOrigin,
    a_idempotency_key: Option<String>,
    a_worker: Option<String>,
    a_lease_until: Option<Stamp>,
    a_output: Option<Json<Value>>,
    a_error: Option<Json<Value>>,
    a_created_at: Stamp,
    a_not_before: Stamp,
    a_started_at: Option<Stamp>,
    a_finished_at: Option<Stamp>,
    a_prompt_tokens: Option<i64>,
    a_completion_tokens: Option<i64>,
    a_usage_estimated: Option<bool>,
    a_cache_write_tokens: Option<i64>,
    a_cache_read_tokens: Option<i64>,
    a_predict_ms: Option<i64>,
    a_outputs: Option<i64>,
    a_cost: Option<String>,
    a_currency: Option<String>,
    a_price_version: Option<String>,
    a_unapplied_output: Option<Json<Value>>,
    a_provider_request_id: Option<String>,
    a_traceparent: Option<String>,
    a_tracestate: Option<String>,
}

impl AttemptRow {
    pub(crate) fn into_attempt(self) -> Result<Attempt> {
        Ok(Attempt {
            number: self.a_number,
            id: AttemptId(self.a_id),
            provider: self.a_provider,
            state: self.a_state,
            origin: self.a_origin,
            idempotency_key: self.a_idempotency_key,
            worker: self.a_worker,
            lease_until: time(self.a_lease_until),
            output: self.a_output.map(|o| o.0),
            error: self.a_error.map(|e| e.0),
            created_at: self.a_created_at.0,
            not_before: self.a_not_before.0,
            started_at: time(self.a_started_at),
            finished_at: time(self.a_finished_at),
            usage: read_usage(StoredUsage {
                prompt: self.a_prompt_tokens,
                completion: self.a_completion_tokens,
                cache_write: self.a_cache_write_tokens,
                cache_read: self.a_cache_read_tokens,
                predict_ms: self.a_predict_ms,
                outputs: self.a_outputs,
                estimated: self.a_usage_estimated,
            }),
            cost: read_cost(self.a_cost, self.a_currency, self.a_price_version)?,
            unapplied_output: self.a_unapplied_output.map(|o| o.0),
            provider_request_id: self.a_provider_request_id,
            trace: stored_trace(self.a_traceparent, self.a_tracestate),
        })
    }
}

/// Reads a job and its attempts from the rows of a `jobs left join
/// attempts` (one row per attempt, `a_number` null for a job without any).
pub(crate) fn job_from_rows<R: Row>(rows: &[R]) -> Result<Option<Job>>
where
    for<'r> JobRow: FromRow<'r, R>,
    for<'r> AttemptRow: FromRow<'r, R>,
    for<'r> Option<i32>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    let Some(first) = rows.first() else { return Ok(None) };
    let mut attempts = Vec::with_capacity(rows.len());
    for row in rows {
        if row.try_get::<Option<i32>, _>("a_number")?.is_some() {
            attempts.push(AttemptRow::from_row(row)?.into_attempt()?);
        }
    }
    JobRow::from_row(first)?.into_job(attempts).map(Some)
}

/// Reads attempts from rows of [`AttemptRow`]'s columns.
pub(crate) fn attempts_from_rows<R: Row>(rows: &[R]) -> Result<Vec<Attempt>>
where
    for<'r> AttemptRow: FromRow<'r, R>,
{
    rows.iter().map(|row| AttemptRow::from_row(row)?.into_attempt()).collect()
}

/// A row of `jobs` for listings, with its owner.
#[derive(FromRow)]
pub(crate) struct JobSummaryRow {
    owner_id: String,
    id: Uuid,
    idempotency_key: String,
    task: String,
    provider: String,
    state: JobState,
    winning_attempt: Option<i32>,
    created_at: Stamp,
    updated_at: Stamp,
}

impl From<JobSummaryRow> for OwnedJobSummary {
    fn from(row: JobSummaryRow) -> Self {
        OwnedJobSummary {
            owner: OwnerId::from_trusted(row.owner_id),
            job: JobSummary {
                id: JobId(row.id),
                idempotency_key: row.idempotency_key,
                task: row.task,
                provider: row.provider,
                state: row.state,
                winning_attempt: row.winning_attempt,
                created_at: row.created_at.0,
                updated_at: row.updated_at.0,
            },
        }
    }
}

/// The key of a row naming an attempt.
#[derive(FromRow)]
pub(crate) struct AttemptRefRow {
    owner_id: String,
    job_id: Uuid,
    number: i32,
}

impl From<AttemptRefRow> for AttemptRef {
    fn from(row: AttemptRefRow) -> Self {
        AttemptRef { owner: OwnerId::from_trusted(row.owner_id), job_id: JobId(row.job_id), number: row.number }
    }
}

/// A row of a job's audit log.
#[derive(FromRow)]
pub(crate) struct EventRow {
    id: i64,
    at: Stamp,
    kind: EventKind,
    attempt_number: Option<i32>,
    detail: Option<Json<Value>>,
}

impl From<EventRow> for JobEvent {
    fn from(row: EventRow) -> Self {
        JobEvent {
            id: row.id,
            at: row.at.0,
            kind: row.kind,
            attempt_number: row.attempt_number,
            detail: row.detail.map_or(Value::Null, |d| d.0),
        }
    }
}

/// A row of `api_keys` for listings.
#[derive(FromRow)]
pub(crate) struct ApiKeyRow {
    owner_id: String,
    id: Uuid,
    created_at: Stamp,
    revoked_at: Option<Stamp>,
    role: KeyRole,
    max_in_flight: Option<i32>,
}

impl From<ApiKeyRow> for ApiKey {
    fn from(row: ApiKeyRow) -> Self {
        ApiKey {
            id: row.id,
            owner: OwnerId::from_trusted(row.owner_id),
            created_at: row.created_at.0,
            revoked_at: time(row.revoked_at),
            role: row.role,
            max_in_flight: row.max_in_flight.and_then(|n| u32::try_from(n).ok()),
        }
    }
}

/// A live key found by its hash.
#[derive(FromRow)]
pub(crate) struct LiveKeyRow {
    owner_id: String,
    id: Uuid,
    role: KeyRole,
    token_hash: Vec<u8>,
}

impl TryFrom<LiveKeyRow> for LiveKey {
    type Error = super::StoreError;
    fn try_from(row: LiveKeyRow) -> Result<Self> {
        Ok(LiveKey {
            id: row.id,
            owner: OwnerId::from_trusted(row.owner_id),
            role: row.role,
            token_hash: row.token_hash.try_into().map_err(|_| corrupt("a stored token hash is not 32 bytes"))?,
        })
    }
}

/// A row of `qualifications`.
#[derive(FromRow)]
pub(crate) struct QualificationRow {
    id: Uuid,
    provider: String,
    task: String,
    contract_hash: Vec<u8>,
    passed: bool,
    report: Json<Value>,
    created_at: Stamp,
}

impl TryFrom<QualificationRow> for QualificationRecord {
    type Error = super::StoreError;
    fn try_from(row: QualificationRow) -> Result<Self> {
        Ok(QualificationRecord {
            id: row.id,
            provider: row.provider,
            task: row.task,
            contract_hash: row.contract_hash.try_into().map_err(|_| corrupt("contract hash length"))?,
            passed: row.passed,
            report: row.report.0,
            created_at: row.created_at.0,
        })
    }
}

/// The latest qualification of a provider for a task, against a hash.
#[derive(FromRow)]
pub(crate) struct QualificationStateRow {
    pub current: bool,
    pub passed: bool,
    pub created_at: Stamp,
    pub summary: Option<String>,
}

impl QualificationStateRow {
    /// What the latest row (if any) says of the provider for the task.
    pub(super) fn state(row: Option<Self>) -> super::QualificationState {
        use super::QualificationState;
        let Some(row) = row else { return QualificationState::Never };
        let at = row.created_at.0;
        match (row.current, row.passed) {
            (true, true) => QualificationState::Qualified { at },
            (true, false) => QualificationState::Failed { at, summary: row.summary.unwrap_or_default() },
            (false, _) => QualificationState::Stale { at },
        }
    }
}

/// An attempt with recorded usage, for the usage report.
#[derive(FromRow)]
pub(crate) struct UsageReportRow {
    task: String,
    provider: String,
    state: AttemptState,
    created_at: Stamp,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    usage_estimated: Option<bool>,
    cache_write_tokens: Option<i64>,
    cache_read_tokens: Option<i64>,
    predict_ms: Option<i64>,
    outputs: Option<i64>,
    cost: Option<String>,
    currency: Option<String>,
    price_version: Option<String>,
    attempts: i64,
    estimated_attempts: i64,
}

impl TryFrom<UsageReportRow> for UsageRow {
    type Error = super::StoreError;
    fn try_from(row: UsageReportRow) -> Result<Self> {
        Ok(UsageRow {
            task: row.task,
            provider: row.provider,
            state: row.state,
            created_at: row.created_at.0,
            usage: read_usage(StoredUsage {
                prompt: row.prompt_tokens,
                completion: row.completion_tokens,
                cache_write: row.cache_write_tokens,
                cache_read: row.cache_read_tokens,
                predict_ms: row.predict_ms,
                outputs: row.outputs,
                estimated: row.usage_estimated,
            })
            .ok_or_else(|| corrupt("a counted attempt without usage"))?,
            cost: read_cost(row.cost, row.currency, row.price_version)?,
            attempts: row.attempts,
            estimated_attempts: row.estimated_attempts,
        })
    }
}

/// An unknown attempt, for the operators' list.
#[derive(FromRow)]
pub(crate) struct OpenUnknownRow {
    #[sqlx(flatten)]
    attempt: AttemptRefRow,
    provider: String,
    task: String,
    finished_at: Option<Stamp>,
    error: Option<Json<Value>>,
    reconcile_count: i32,
}

impl From<OpenUnknownRow> for OpenUnknown {
    fn from(row: OpenUnknownRow) -> Self {
        OpenUnknown {
            attempt: row.attempt.into(),
            provider: row.provider,
            task: row.task,
            unknown_since: time(row.finished_at),
            error: row.error.map(|e| e.0),
            reconcile_count: row.reconcile_count,
        }
    }
}

/// Reads every row as `T` through its row type `R`.
pub(crate) fn read_all<'r, Db: Row, R: FromRow<'r, Db>, T: TryFrom<R, Error = super::StoreError>>(
    rows: &'r [Db],
) -> Result<Vec<T>> {
    rows.iter().map(|row| T::try_from(R::from_row(row)?)).collect()
}

/// A trace context as stored: its `traceparent` and `tracestate` columns.
pub(crate) fn stored_trace(
    traceparent: Option<String>,
    tracestate: Option<String>,
) -> Option<crate::domain::TraceContext> {
    traceparent.map(|traceparent| crate::domain::TraceContext { traceparent, tracestate })
}
