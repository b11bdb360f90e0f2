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

use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{PgExecutor, Postgres, Row, Transaction};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::driver::{Driver, DriverTx, LockedJob, OutputSettlement, Settled, Tx};
use super::hot::HotConnections;
use super::rows::{
    ApiKeyRow, AttemptRefRow, EventRow, JobSummaryRow, LiveKeyRow, OpenUnknownRow, QualificationRow, QualificationStateRow,
    UsageReportRow, attempts_from_rows, job_from_rows, read_all,
};
use super::usage::{AttemptUsage, UsageFilter, UsageRow};
use super::{
    ApiKey, AttemptRef, ClaimedAttempt, Gauges, JobFilter, KeyChange, Leases, LiveKey, NewAttempt, NewJob, OpenUnknown,
    OwnedJobSummary, QualificationRecord, QualificationState, Result, Store, StoreError, UnknownAttempt, corrupt,
};
use crate::domain::{
    Attempt, AttemptError, AttemptId, AttemptOrigin, AttemptState, EventKind, IdempotencyKey, Job, JobEvent, JobId,
    JobState, JobSummary, KeyRole, OwnerId,
};

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

/// The Postgres implementation of [`Store`].
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    // The one-statement requests of the hot path (see `hot`).
    hot: Arc<HotConnections>,
}

impl PostgresStore {
    /// Opens a pool on `url`. Connections are made lazily, so a server that is
    /// down at start-up is reported on first use, not here.
    pub fn connect_lazy(url: &str, options: &PostgresOptions) -> Result<Self> {
        let statement_timeout = format!("{}ms", options.statement_timeout.as_millis());
        let connect = PgConnectOptions::from_str(url)
            .map_err(StoreError::Database)?
            .application_name("onejob")
            .options([("statement_timeout", statement_timeout.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            // No ping before each use: it would be a second round trip per
            // request. A connection broken since its last use fails its next
            // statement, is dropped by the pool, and that request answers
            // 503 (retryable with the same key).
            .test_before_acquire(false)
            .connect_lazy_with(connect.clone());
        let hot = HotConnections::new(connect, options.max_connections, options.acquire_timeout);
        Ok(Self { pool, hot: Arc::new(hot) })
    }

    /// Wraps an existing pool (tests use this).
    pub fn from_pool(pool: PgPool) -> Self {
        let options = pool.options();
        let hot = HotConnections::new((*pool.connect_options()).clone(), options.get_max_connections(), options.get_acquire_timeout());
        Self { pool, hot: Arc::new(hot) }
    }

    /// The pool, for tests that look at the tables directly.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

const JOB_COLUMNS: &str = r#"j.owner_id, j.id, j.idempotency_key, j.fingerprint, j.task, j.input, j.provider,
    j.state, j.winning_attempt, j.result, j.created_at, j.updated_at, j.max_cost::text as max_cost"#;

const ATTEMPT_COLUMNS: &str = r#"a.number as a_number, a.id as a_id, a.provider as a_provider, a.state as a_state,
    a.origin as a_origin, a.idempotency_key as a_idempotency_key, a.worker as a_worker,
    a.lease_until as a_lease_until, a.output as a_output, a.error as a_error,
    a.created_at as a_created_at, a.not_before as a_not_before, a.started_at as a_started_at,
    a.finished_at as a_finished_at, a.prompt_tokens as a_prompt_tokens,
    a.completion_tokens as a_completion_tokens, a.usage_estimated as a_usage_estimated,
    a.cost::text as a_cost, a.currency as a_currency, a.price_version as a_price_version"#;

/// The statements of the hot path, public so that `bench/ceiling.sh` runs
/// exactly these under pgbench (`onejob bench-sql`).
///
/// Creating a job: one statement inserts the job, its first attempt and its
/// event; a taken key inserts nothing (I1). Binds: owner, job id, key,
/// fingerprint, task, input, provider, first attempt id, budget (text or null).
pub static CREATE_JOB: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with new_job as (
        insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider,
                          state, created_at, updated_at, max_cost)
        values ($1, $2, $3, $4, $5, $6, $7, '{queued}', now(), now(), $9::numeric)
        on conflict (owner_id, idempotency_key) do nothing
        returning owner_id, id, created_at
    ), first_attempt as (
        insert into attempts (owner_id, job_id, number, id, provider, state, origin, created_at, not_before)
        select owner_id, id, 1, $8, $7, '{pending}', '{client}', created_at, created_at from new_job
    ), created_event as (
        insert into job_events (owner_id, job_id, at, kind, attempt_number, detail)
        select owner_id, id, created_at, '{created}', 1,
               jsonb_build_object('attempt_id', $8::uuid, 'provider', $7::text)
        from new_job
    )
    select created_at from new_job"#,
        queued = JobState::Queued,
        pending = AttemptState::Pending,
        client = AttemptOrigin::Client.as_str(),
        created = EventKind::JobCreated,
    )
});

/// A job with its attempts, in one statement (one snapshot).
fn select_job_where(condition: &str) -> String {
    format!(
        r#"select {JOB_COLUMNS}, {ATTEMPT_COLUMNS}
           from jobs j
           left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
           where {condition}
           order by a.number"#
    )
}

/// Reading a job by id. Binds: owner, job id.
pub static GET_JOB: LazyLock<String> = LazyLock::new(|| select_job_where("j.owner_id = $1 and j.id = $2"));

/// Reading the job that holds a key. Binds: owner, key.
static FIND_JOB_BY_KEY: LazyLock<String> =
    LazyLock::new(|| select_job_where("j.owner_id = $1 and j.idempotency_key = $2"));

/// Settling an attempt with an output, once its job is locked and the
/// attempt's state checked: the compare-and-swap on the job, the attempt
/// settled, the winner's pending siblings canceled, the event. Binds: owner,
/// job id, attempt number, output, the states it may settle from, the
/// `attempt-succeeded` detail (without `canceled`), the `race-lost` detail.
static SETTLE_WITH_OUTPUT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
    with won as (
        update jobs set state = '{succeeded}', winning_attempt = $3, result = $4, updated_at = now()
        where owner_id = $1 and id = $2 and state not in ('{succeeded}', '{job_canceled}')
        returning id
    ), settled as (
        update attempts
        set state = case when exists (select from won) then '{succeeded}' else '{superseded}' end,
            output = $4, finished_at = now(), lease_until = null, reconcile_after = null
        where owner_id = $1 and job_id = $2 and number = $3 and state = any($5)
        returning number
    ), canceled as (
        update attempts set state = '{canceled}', finished_at = now()
        where owner_id = $1 and job_id = $2 and number <> $3 and state = '{pending}' and exists (select from won)
        returning number
    ), event as (
        insert into job_events (owner_id, job_id, kind, attempt_number, detail)
        select $1, $2, '{won_event}', $3,
               $6::jsonb || jsonb_build_object('canceled',
                   coalesce((select jsonb_agg(number order by number) from canceled), '[]'))
        where exists (select from won) and exists (select from settled)
        union all
        select $1, $2, '{lost_event}', $3, $7::jsonb
        where not exists (select from won) and exists (select from settled)
    )
    select exists (select from won) as won,
           (select count(*) from settled) as settled,
           coalesce((select array_agg(number order by number) from canceled), '{{}}') as canceled"#,
        succeeded = AttemptState::Succeeded,
        job_canceled = JobState::Canceled,
        superseded = AttemptState::Superseded,
        canceled = AttemptState::Canceled,
        pending = AttemptState::Pending,
        won_event = EventKind::AttemptSucceeded,
        lost_event = EventKind::RaceLost,
    )
});

/// Running attempts past their lease (the `attempts_leased` partial index).
static EXPIRED_LEASES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id, job_id, number from attempts
           where state = '{running}' and lease_until < now()
           order by lease_until
           limit $1"#,
        running = AttemptState::Running,
    )
});

/// Claiming due pending attempts (the `attempts_claimable` partial index):
/// they become running under their provider's lease, their jobs running,
/// each with its event. Rows another claimer or a transition holds are
/// skipped, not waited for: claims never block and never take one attempt
/// twice. Binds: how many, worker, default lease (s), provider names, their
/// leases (s).
static CLAIM_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with picked as (
               select a.owner_id, a.job_id, a.number
               from attempts a
               join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
               where a.state = '{pending}' and a.not_before <= now()
                 and a.provider = any($4::text[])
                 and j.state not in ('{succeeded}', '{canceled}')
               order by a.not_before
               limit $1
               for update of a, j skip locked
           ), claimed as (
               update attempts a
               set state = '{running}', worker = $2, started_at = now(),
                   lease_until = now() + make_interval(secs => coalesce(
                       (select l.seconds from unnest($4::text[], $5::float8[]) as l(provider, seconds)
                        where l.provider = a.provider),
                       $3))
               from picked p
               where a.owner_id = p.owner_id and a.job_id = p.job_id and a.number = p.number
               returning a.owner_id, a.job_id, a.number, a.id, a.provider, a.lease_until
           ), running_jobs as (
               update jobs j set state = '{job_running}', updated_at = now()
               from claimed c
               where j.owner_id = c.owner_id and j.id = c.job_id
           ), claimed_events as (
               insert into job_events (owner_id, job_id, kind, attempt_number, detail)
               select owner_id, job_id, '{claimed_event}', number,
                      jsonb_build_object('worker', $2::text, 'attempt_id', id, 'lease_until', lease_until)
               from claimed
           )
           select c.owner_id, c.job_id, c.number, c.id, c.provider, c.lease_until, j.task, j.input
           from claimed c
           join jobs j on j.owner_id = c.owner_id and j.id = c.job_id
           order by c.number"#,
        pending = AttemptState::Pending,
        succeeded = JobState::Succeeded,
        canceled = JobState::Canceled,
        running = AttemptState::Running,
        job_running = JobState::Running,
        claimed_event = EventKind::AttemptClaimed,
    )
});

/// Claiming unknown attempts due for a status lookup (the
/// `attempts_unknown` partial index) and holding them. Binds: providers,
/// how many, hold (s).
static CLAIM_RECONCILIATIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with due as (
               select owner_id, job_id, number from attempts
               where state = '{unknown}' and provider = any($1) and reconcile_after <= now()
               order by reconcile_after
               limit $2
               for update skip locked
           ), held as (
               update attempts a
               set reconcile_after = now() + make_interval(secs => $3), reconcile_count = a.reconcile_count + 1
               from due d
               where a.owner_id = d.owner_id and a.job_id = d.job_id and a.number = d.number
               returning a.owner_id, a.job_id, a.number, a.id, a.provider, a.reconcile_count,
                         extract(epoch from now() - a.finished_at)::float8 as unknown_for
           )
           select h.*, j.task from held h join jobs j on j.owner_id = h.owner_id and j.id = h.job_id"#,
        unknown = AttemptState::Unknown,
    )
});

/// The metrics gauges (the partial indexes of pending and unknown attempts).
static SAMPLE_GAUGES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select
               (select count(*) from attempts where state = '{pending}' and not_before <= now()) as pending_due,
               (select count(*) from attempts where state = '{unknown}') as unknown_open,
               coalesce(extract(epoch from now() - (select min(finished_at) from attempts where state = '{unknown}')),
                        0)::float8 as oldest"#,
        pending = AttemptState::Pending,
        unknown = AttemptState::Unknown,
    )
});

/// The owner of an unknown attempt (the `attempts_unknown_by_job` index).
static FIND_UNKNOWN_ATTEMPT_OWNER: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id from attempts where job_id = $1 and number = $2 and state = '{unknown}'"#,
        unknown = AttemptState::Unknown,
    )
});

/// Unknown attempts of one owner or all, the longest unknown first.
static LIST_UNKNOWN_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.provider, j.task, a.finished_at, a.error, a.reconcile_count
           from attempts a join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where ($1::text is null or a.owner_id = $1) and a.state = '{unknown}'
           order by a.finished_at, a.job_id, a.number
           limit $2"#,
        unknown = AttemptState::Unknown,
    )
});

/// Where a provider stands for a task's contract with a hash.
const QUALIFICATION_STATE: &str = r#"select contract_hash = $3 as current, passed, created_at, report ->> 'summary' as summary
    from qualifications
    where provider = $1 and task = $2
    order by contract_hash = $3 desc, created_at desc
    limit 1"#;

async fn read_qualification_state<'e>(
    executor: impl PgExecutor<'e>,
    provider: &str,
    task: &str,
    hash: &[u8; 32],
) -> Result<QualificationState> {
    let row: Option<QualificationStateRow> =
        sqlx::query_as(QUALIFICATION_STATE).bind(provider).bind(task).bind(&hash[..]).fetch_optional(executor).await?;
    Ok(row.into())
}

fn state_names(states: &[AttemptState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

/// A Postgres write transaction; times are the database's `now()`.
struct PgTx(Transaction<'static, Postgres>);

#[async_trait]
impl DriverTx for PgTx {
    async fn lock_job(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<LockedJob>> {
        Ok(sqlx::query_as(
            r#"select state, task, provider, winning_attempt from jobs
               where owner_id = $1 and id = $2
               for no key update"#,
        )
        .bind(owner.as_str())
        .bind(job_id.0)
        .fetch_optional(&mut *self.0)
        .await?)
    }

    async fn job_budget(&mut self, owner: &OwnerId, job_id: JobId) -> Result<(Option<String>, Value)> {
        let (max_cost, Json(input)) =
            sqlx::query_as(r#"select max_cost::text, input from jobs where owner_id = $1 and id = $2"#)
                .bind(owner.as_str())
                .bind(job_id.0)
                .fetch_one(&mut *self.0)
                .await?;
        Ok((max_cost, input))
    }

    async fn attempt_state(&mut self, attempt: &AttemptRef) -> Result<Option<AttemptState>> {
        Ok(sqlx::query_scalar(r#"select state from attempts where owner_id = $1 and job_id = $2 and number = $3"#)
            .bind(attempt.owner.as_str())
            .bind(attempt.job_id.0)
            .bind(attempt.number)
            .fetch_optional(&mut *self.0)
            .await?)
    }

    async fn attempt_states(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<AttemptState>> {
        Ok(sqlx::query_scalar(r#"select state from attempts where owner_id = $1 and job_id = $2"#)
            .bind(owner.as_str())
            .bind(job_id.0)
            .fetch_all(&mut *self.0)
            .await?)
    }

    async fn read_attempts(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<Attempt>> {
        let rows = sqlx::query(&format!(
            r#"select {ATTEMPT_COLUMNS} from attempts a where a.owner_id = $1 and a.job_id = $2 order by a.number"#
        ))
        .bind(owner.as_str())
        .bind(job_id.0)
        .fetch_all(&mut *self.0)
        .await?;
        attempts_from_rows(&rows)
    }

    async fn set_job_state(&mut self, owner: &OwnerId, job_id: JobId, state: JobState) -> Result<()> {
        sqlx::query(r#"update jobs set state = $3, updated_at = now() where owner_id = $1 and id = $2"#)
            .bind(owner.as_str())
            .bind(job_id.0)
            .bind(state)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn insert_attempt(
        &mut self,
        owner: &OwnerId,
        job_id: JobId,
        number: i32,
        new: &NewAttempt,
        provider: &str,
    ) -> Result<Attempt> {
        let rows = sqlx::query(&format!(
            r#"insert into attempts as a (owner_id, job_id, number, id, provider, state, origin, idempotency_key,
                                          created_at, not_before)
               values ($1, $2, $3, $4, $5, $9, $6, $7, now(), now() + make_interval(secs => $8))
               returning {ATTEMPT_COLUMNS}"#
        ))
        .bind(owner.as_str())
        .bind(job_id.0)
        .bind(number)
        .bind(new.id.0)
        .bind(provider)
        .bind(new.origin)
        .bind(new.idempotency_key.as_ref().map(IdempotencyKey::as_str))
        .bind(new.delay.as_secs_f64())
        .bind(AttemptState::Pending)
        .fetch_all(&mut *self.0)
        .await?;
        attempts_from_rows(&rows)?.pop().ok_or_else(|| corrupt("an inserted attempt returned no row"))
    }

    async fn append_event(
        &mut self,
        owner: &OwnerId,
        job_id: JobId,
        kind: EventKind,
        attempt_number: Option<i32>,
        detail: Value,
    ) -> Result<()> {
        sqlx::query(r#"insert into job_events (owner_id, job_id, kind, attempt_number, detail) values ($1, $2, $3, $4, $5)"#)
            .bind(owner.as_str())
            .bind(job_id.0)
            .bind(kind)
            .bind(attempt_number)
            .bind(detail)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn qualification_state(&mut self, provider: &str, task: &str, hash: &[u8; 32]) -> Result<QualificationState> {
        read_qualification_state(&mut *self.0, provider, task, hash).await
    }

    async fn set_attempt_outcome(
        &mut self,
        attempt: &AttemptRef,
        to: AttemptState,
        from: &[AttemptState],
        error: &AttemptError,
    ) -> Result<u64> {
        Ok(sqlx::query(
            r#"update attempts
               set state = $4, error = $5, finished_at = now(), lease_until = null,
                   reconcile_after = case when $7 then now() end
               where owner_id = $1 and job_id = $2 and number = $3 and state = any($6)"#,
        )
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .bind(to)
        .bind(Json(error))
        .bind(state_names(from))
        .bind(to == AttemptState::Unknown)
        .execute(&mut *self.0)
        .await?
        .rows_affected())
    }

    async fn settle_with_output(&mut self, settlement: &OutputSettlement<'_>) -> Result<Settled> {
        // One statement, under the job's lock: the compare-and-swap, the
        // attempt settled as won or superseded, the winner's pending
        // siblings canceled, and the event.
        let attempt = settlement.attempt;
        let row = sqlx::query(SETTLE_WITH_OUTPUT.as_str())
            .bind(attempt.owner.as_str())
            .bind(attempt.job_id.0)
            .bind(attempt.number)
            .bind(settlement.output)
            .bind(state_names(settlement.from))
            .bind(&settlement.won)
            .bind(&settlement.lost)
            .fetch_one(&mut *self.0)
            .await?;
        Ok(Settled {
            won: row.try_get("won")?,
            settled: row.try_get::<i64, _>("settled")?.try_into().map_err(corrupt)?,
            canceled: row.try_get("canceled")?,
        })
    }

    async fn cancel_job(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<i32>> {
        sqlx::query(r#"update jobs set state = $3, updated_at = now() where owner_id = $1 and id = $2"#)
            .bind(owner.as_str())
            .bind(job_id.0)
            .bind(JobState::Canceled)
            .execute(&mut *self.0)
            .await?;
        Ok(sqlx::query_scalar(
            r#"update attempts set state = $4, finished_at = now()
               where owner_id = $1 and job_id = $2 and state = $3
               returning number"#,
        )
        .bind(owner.as_str())
        .bind(job_id.0)
        .bind(AttemptState::Pending)
        .bind(AttemptState::Canceled)
        .fetch_all(&mut *self.0)
        .await?)
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        Ok(self.0.commit().await?)
    }
}

#[async_trait]
impl Driver for PostgresStore {
    async fn begin(&self) -> Result<Tx> {
        Ok(Box::new(PgTx(self.pool.begin().await?)))
    }

    async fn insert_job(&self, new: &NewJob) -> Result<Option<DateTime<Utc>>> {
        // The hot path: one statement, one round trip for a new key.
        let mut lease = self.hot.acquire().await?;
        let created_at = sqlx::query_scalar(CREATE_JOB.as_str())
            .bind(new.owner.as_str())
            .bind(new.id.0)
            .bind(new.idempotency_key.as_str())
            .bind(&new.fingerprint.as_bytes()[..])
            .bind(&new.task)
            .bind(&new.input)
            .bind(&new.provider)
            .bind(new.first_attempt_id.0)
            .bind(new.max_cost.map(|m| m.to_string()))
            .fetch_optional(lease.connection())
            .await;
        lease.keep_after(&created_at);
        Ok(created_at?)
    }

    async fn expired_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        let rows: Vec<AttemptRefRow> =
            sqlx::query_as(EXPIRED_LEASES.as_str()).bind(i64::from(max)).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }
}

/// Reads the job a statement of [`select_job_where`] selects (binds: the
/// owner, then `key`), on a connection of the hot path.
async fn fetch_job<'q, T>(hot: &HotConnections, sql: &'q str, owner: &'q OwnerId, key: T) -> Result<Option<Job>>
where
    T: 'q + Send + sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres>,
{
    let mut lease = hot.acquire().await?;
    let rows: std::result::Result<Vec<PgRow>, _> = sqlx::query(sql).bind(owner.as_str()).bind(key).fetch_all(lease.connection()).await;
    lease.keep_after(&rows);
    job_from_rows(&rows?)
}

#[async_trait]
impl Store for PostgresStore {
    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn check_ready(&self) -> Result<()> {
        let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        let applied: Option<i64> =
            sqlx::query_scalar(r#"select max(version) from _sqlx_migrations where success"#).fetch_one(&self.pool).await?;
        super::check_migrations(applied, latest)
    }

    async fn insert_api_key(&self, id: Uuid, owner: &OwnerId, role: KeyRole, token_hash: &[u8; 32]) -> Result<()> {
        sqlx::query(r#"insert into api_keys (owner_id, id, role, token_hash) values ($1, $2, $3, $4)"#)
            .bind(owner.as_str())
            .bind(id)
            .bind(role)
            .bind(&token_hash[..])
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn find_api_key(&self, token_hash: &[u8; 32]) -> Result<Option<LiveKey>> {
        let row: Option<LiveKeyRow> = sqlx::query_as(
            r#"select owner_id, id, role, token_hash from api_keys where token_hash = $1 and revoked_at is null"#,
        )
        .bind(&token_hash[..])
        .fetch_optional(&self.pool)
        .await?;
        row.map(LiveKey::try_from).transpose()
    }

    async fn revoke_api_key(&self, id: Uuid) -> Result<bool> {
        // Every serving process caches checked keys and LISTENs for changes;
        // each forgets the key when the trigger's notification reaches it and
        // confirms on KEY_ACK_CHANNEL. Waiting for those confirmations makes
        // "revoked" mean that no listening server accepts the key any more.
        let mut confirmations = PgListener::connect_with(&self.pool).await?;
        confirmations.listen(KEY_ACK_CHANNEL).await?;
        let listening: i64 = sqlx::query_scalar(
            r#"select count(*) from pg_stat_activity where datname = current_database() and query = $1"#,
        )
        .bind(format!(r#"LISTEN "{KEY_CHANNEL}""#))
        .fetch_one(&self.pool)
        .await?;
        let changed = sqlx::query(r#"update api_keys set revoked_at = now() where id = $1 and revoked_at is null"#)
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        let key = id.to_string();
        let deadline = tokio::time::Instant::now() + KEY_ACK_TIMEOUT;
        let mut confirmed = 0;
        while confirmed < listening {
            match tokio::time::timeout_at(deadline, confirmations.try_recv()).await {
                Ok(Ok(Some(notification))) if notification.payload() == key => confirmed += 1,
                Ok(Ok(Some(_))) => {}
                _ => break,
            }
        }
        if confirmed < listening {
            tracing::warn!(key = %id, listening, confirmed,
                "not every listening server confirmed in time that it forgot the revoked key");
        }
        Ok(true)
    }

    async fn confirm_key_forgotten(&self, id: Uuid) -> Result<()> {
        sqlx::query(r#"select pg_notify($1, $2)"#).bind(KEY_ACK_CHANNEL).bind(id.to_string()).execute(&self.pool).await?;
        Ok(())
    }

    fn follow_key_changes(&self) -> Option<mpsc::Receiver<KeyChange>> {
        let (changes, receiver) = mpsc::channel(256);
        tokio::spawn(follow_key_changes(self.pool.clone(), changes));
        Some(receiver)
    }

    async fn list_api_keys(&self, owner: Option<&OwnerId>) -> Result<Vec<ApiKey>> {
        let rows: Vec<ApiKeyRow> = sqlx::query_as(
            r#"select owner_id, id, created_at, revoked_at, role from api_keys
               where $1::text is null or owner_id = $1
               order by created_at, id"#,
        )
        .bind(owner.map(OwnerId::as_str))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn has_api_keys(&self) -> Result<bool> {
        Ok(sqlx::query_scalar(r#"select exists (select 1 from api_keys)"#).fetch_one(&self.pool).await?)
    }

    async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>> {
        // One statement, so the job and its attempts come from one snapshot.
        fetch_job(&self.hot, GET_JOB.as_str(), owner, id.0).await
    }

    async fn find_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>> {
        fetch_job(&self.hot, FIND_JOB_BY_KEY.as_str(), owner, key.as_str()).await
    }

    async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>> {
        let rows: Vec<JobSummaryRow> = sqlx::query_as(
            r#"select owner_id, id, idempotency_key, task, provider, state, winning_attempt, created_at, updated_at
               from jobs
               where owner_id = $1
                 and ($2::text is null or state = $2)
                 and ($3::text is null or task = $3)
                 and ($4::uuid is null or id < $4)
               order by id desc
               limit $5"#,
        )
        .bind(owner.as_str())
        .bind(filter.state)
        .bind(filter.task.as_deref())
        .bind(filter.before.map(|id| id.0))
        .bind(i64::from(filter.limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|row| OwnedJobSummary::from(row).job).collect())
    }

    async fn list_events(&self, owner: &OwnerId, job_id: JobId) -> Result<Vec<JobEvent>> {
        let rows: Vec<EventRow> = sqlx::query_as(
            r#"select id, at, kind, attempt_number, detail from job_events where owner_id = $1 and job_id = $2 order by id"#,
        )
        .bind(owner.as_str())
        .bind(job_id.0)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn claim_attempts(&self, worker: &str, max: u32, leases: &Leases) -> Result<Vec<ClaimedAttempt>> {
        let (names, seconds): (Vec<&str>, Vec<f64>) =
            leases.by_provider.iter().map(|(name, lease)| (name.as_str(), lease.as_secs_f64())).unzip();
        let rows = sqlx::query(CLAIM_ATTEMPTS.as_str())
            .bind(i64::from(max))
            .bind(worker)
            .bind(leases.default.as_secs_f64())
            .bind(names)
            .bind(seconds)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ClaimedAttempt {
                    attempt: AttemptRef::from(<AttemptRefRow as sqlx::FromRow<PgRow>>::from_row(row)?),
                    id: AttemptId(row.try_get("id")?),
                    provider: row.try_get("provider")?,
                    task: row.try_get("task")?,
                    input: row.try_get("input")?,
                    lease_until: row.try_get("lease_until")?,
                })
            })
            .collect()
    }

    async fn claim_reconciliations(&self, providers: &[String], max: u32, hold: Duration) -> Result<Vec<UnknownAttempt>> {
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
                })
            })
            .collect()
    }

    async fn postpone_reconciliation(&self, attempt: &AttemptRef, delay: Duration) -> Result<()> {
        sqlx::query(
            r#"update attempts set reconcile_after = now() + make_interval(secs => $4)
               where owner_id = $1 and job_id = $2 and number = $3 and state = $5"#,
        )
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .bind(delay.as_secs_f64())
        .bind(AttemptState::Unknown)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn insert_qualification(
        &self,
        provider: &str,
        task: &str,
        contract_hash: &[u8; 32],
        passed: bool,
        report: &Value,
    ) -> Result<QualificationRecord> {
        let row: QualificationRow = sqlx::query_as(
            r#"insert into qualifications (id, provider, task, contract_hash, passed, report)
               values ($1, $2, $3, $4, $5, $6)
               returning id, provider, task, contract_hash, passed, report, created_at"#,
        )
        .bind(Uuid::now_v7())
        .bind(provider)
        .bind(task)
        .bind(&contract_hash[..])
        .bind(passed)
        .bind(report)
        .fetch_one(&self.pool)
        .await?;
        row.try_into()
    }

    async fn qualification_state(&self, provider: &str, task: &str, contract_hash: &[u8; 32]) -> Result<QualificationState> {
        read_qualification_state(&self.pool, provider, task, contract_hash).await
    }

    async fn latest_qualification(&self, provider: &str, task: &str) -> Result<Option<QualificationRecord>> {
        let row: Option<QualificationRow> = sqlx::query_as(
            r#"select id, provider, task, contract_hash, passed, report, created_at from qualifications
               where provider = $1 and task = $2
               order by created_at desc
               limit 1"#,
        )
        .bind(provider)
        .bind(task)
        .fetch_optional(&self.pool)
        .await?;
        row.map(QualificationRecord::try_from).transpose()
    }

    async fn sample_gauges(&self) -> Result<Gauges> {
        let row = sqlx::query(SAMPLE_GAUGES.as_str()).fetch_one(&self.pool).await?;
        Ok(Gauges {
            pending_due: row.try_get("pending_due")?,
            unknown_open: row.try_get("unknown_open")?,
            oldest_unknown: Duration::from_secs_f64(row.try_get::<f64, _>("oldest")?.max(0.0)),
        })
    }

    async fn find_unknown_attempt_owner(&self, job_id: JobId, number: i32) -> Result<Option<OwnerId>> {
        let owner: Option<String> = sqlx::query_scalar(FIND_UNKNOWN_ATTEMPT_OWNER.as_str())
            .bind(job_id.0)
            .bind(number)
            .fetch_optional(&self.pool)
            .await?;
        Ok(owner.map(OwnerId::from_trusted))
    }

    async fn record_usage(&self, attempt: &AttemptRef, usage: &AttemptUsage) -> Result<bool> {
        let cost = usage.cost.as_ref();
        // One statement per settled attempt: on the hot path's connections.
        let mut lease = self.hot.acquire().await?;
        let changed = sqlx::query(
            r#"update attempts
               set prompt_tokens = $4, completion_tokens = $5, usage_estimated = $6,
                   cost = $7::numeric, currency = $8, price_version = $9
               where owner_id = $1 and job_id = $2 and number = $3"#,
        )
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .bind(usage.usage.prompt_tokens)
        .bind(usage.usage.completion_tokens)
        .bind(usage.usage.estimated)
        .bind(cost.map(|c| c.amount.to_string()))
        .bind(cost.map(|c| c.currency.as_str()))
        .bind(cost.map(|c| c.price_version.as_str()))
        .execute(lease.connection())
        .await;
        lease.keep_after(&changed);
        Ok(changed?.rows_affected() == 1)
    }

    async fn list_usage(&self, owner: &OwnerId, filter: &UsageFilter) -> Result<Vec<UsageRow>> {
        let rows = sqlx::query(
            r#"select j.task, a.provider, a.state, a.created_at, a.prompt_tokens, a.completion_tokens,
                      a.usage_estimated, a.cost::text as cost, a.currency, a.price_version
               from attempts a
               join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
               where a.owner_id = $1 and a.created_at >= $2 and a.created_at < $3 and a.prompt_tokens is not null
               order by a.created_at"#,
        )
        .bind(owner.as_str())
        .bind(filter.from)
        .bind(filter.to)
        .fetch_all(&self.pool)
        .await?;
        read_all::<_, UsageReportRow, _>(&rows)
    }

    async fn browse_jobs(&self, owner: Option<&OwnerId>, key: Option<&str>, filter: &JobFilter) -> Result<Vec<OwnedJobSummary>> {
        let rows: Vec<JobSummaryRow> = sqlx::query_as(
            r#"select owner_id, id, idempotency_key, task, provider, state, winning_attempt, created_at, updated_at
               from jobs
               where ($1::text is null or owner_id = $1)
                 and ($2::text is null or idempotency_key = $2)
                 and ($3::text is null or state = $3)
                 and ($4::text is null or task = $4)
                 and ($5::uuid is null or id < $5)
               order by id desc
               limit $6"#,
        )
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

    async fn find_job_owner(&self, id: JobId) -> Result<Option<OwnerId>> {
        let owner: Option<String> =
            sqlx::query_scalar(r#"select owner_id from jobs where id = $1"#).bind(id.0).fetch_optional(&self.pool).await?;
        Ok(owner.map(OwnerId::from_trusted))
    }

    async fn list_unknown_attempts(&self, owner: Option<&OwnerId>, limit: u32) -> Result<Vec<OpenUnknown>> {
        let rows: Vec<OpenUnknownRow> = sqlx::query_as(LIST_UNKNOWN_ATTEMPTS.as_str())
            .bind(owner.map(OwnerId::as_str))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }
}

/// The channel the `api_keys_changed` trigger notifies with a key's id.
const KEY_CHANNEL: &str = "onejob_api_keys";
/// The channel on which servers confirm they forgot a changed key.
const KEY_ACK_CHANNEL: &str = "onejob_api_keys_forgotten";
/// How long a revocation waits for those confirmations.
const KEY_ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// LISTENs on [`KEY_CHANNEL`] over a connection of its own and reports what
/// it hears, reconnecting (and saying so) whenever the connection is lost,
/// until `changes` is closed.
async fn follow_key_changes(pool: PgPool, changes: mpsc::Sender<KeyChange>) {
    const FIRST_RETRY: Duration = Duration::from_millis(100);
    let mut retry = FIRST_RETRY;
    loop {
        let listening = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            // A lost connection is reported, not mended behind our back: the
            // cache must hear that notifications may have been missed.
            listener.eager_reconnect(false);
            listener.listen(KEY_CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        }
        .await;
        match listening {
            Ok(mut listener) => {
                retry = FIRST_RETRY;
                if changes.send(KeyChange::Following).await.is_err() {
                    return;
                }
                loop {
                    let next = tokio::select! {
                        () = changes.closed() => return,
                        next = listener.try_recv() => next,
                    };
                    let change = match next {
                        Ok(Some(notification)) => match Uuid::try_parse(notification.payload()) {
                            Ok(id) => KeyChange::Changed(id),
                            Err(_) => {
                                tracing::warn!(payload = notification.payload(), "ignored a key notification that names no key");
                                continue;
                            }
                        },
                        Ok(None) => {
                            tracing::warn!("lost the connection that listens for key changes; reconnecting");
                            break;
                        }
                        Err(error) => {
                            tracing::warn!(%error, "the connection that listens for key changes failed; reconnecting");
                            break;
                        }
                    };
                    if changes.send(change).await.is_err() {
                        return;
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "cannot listen for key changes; checked keys are not cached until then"),
        }
        if changes.send(KeyChange::Lost).await.is_err() {
            return;
        }
        tokio::select! {
            () = changes.closed() => return,
            () = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(Duration::from_secs(5));
    }
}
