//! The Postgres store, the system of record. All of its SQL is in this file,
//! one statement per purpose.
//!
//! Lock order, which every transition follows so that no two can deadlock:
//! the job row first (`for update`), then its attempts. Claims take both with
//! `skip locked` and so never wait.

use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use tokio::sync::mpsc;
use sqlx::{PgExecutor, Postgres, Row, Transaction};
use uuid::Uuid;

use super::hot::HotConnections;
use super::{
    Admission, ApiKey, AttemptRef, KeyChange, LiveKey, Cancel, ClaimedAttempt, CreateJob, Gauges, JobFilter, Leases, NewAttempt, NewJob,
    QualificationRecord, QualificationState, Resolution, Result, Scheduled, Store, StoreError, TaskRules, Transition,
    UnknownAttempt, corrupt, earlier_attempt, log_race_lost, parse_state, past_attempts,
};
use super::usage::{AttemptUsage, UsageFilter, UsageRow, check_budget, read_cost, stored_budget, read_usage};
use crate::domain::Money;
use crate::domain::job::JobCost;
use crate::domain::{
    AdmissionRefusal, Attempt, AttemptError, AttemptId, AttemptOrigin, AttemptState, Fingerprint, IdempotencyKey, Job, JobEvent, JobId,
    JobState, JobSummary, KeyRole, OwnerId, check_admission,
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
pub const CREATE_JOB: &str = r#"with new_job as (
        insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider,
                          state, created_at, updated_at, max_cost)
        values ($1, $2, $3, $4, $5, $6, $7, 'queued', now(), now(), $9::numeric)
        on conflict (owner_id, idempotency_key) do nothing
        returning owner_id, id, created_at
    ), first_attempt as (
        insert into attempts (owner_id, job_id, number, id, provider, state, origin, created_at, not_before)
        select owner_id, id, 1, $8, $7, 'pending', 'client', created_at, created_at from new_job
    ), created_event as (
        insert into job_events (owner_id, job_id, at, kind, attempt_number, detail)
        select owner_id, id, created_at, 'job-created', 1,
               jsonb_build_object('attempt_id', $8::uuid, 'provider', $7::text)
        from new_job
    )
    select created_at from new_job"#;

/// Settling an attempt with an output, once its job is locked and the
/// attempt's state checked: the compare-and-swap on the job, the attempt
/// settled, the winner's pending siblings canceled, the event. Binds: owner,
/// job id, attempt number, output, the states it may settle from, the state
/// it was in, the resolution reason, the job's winner and state as locked.
const SETTLE_WITH_OUTPUT: &str = r#"
    with won as (
        update jobs set state = 'succeeded', winning_attempt = $3, result = $4, updated_at = now()
        where owner_id = $1 and id = $2 and state not in ('succeeded', 'canceled')
        returning id
    ), settled as (
        update attempts
        set state = case when exists (select from won) then 'succeeded' else 'superseded' end,
            output = $4, finished_at = now(), lease_until = null, reconcile_after = null
        where owner_id = $1 and job_id = $2 and number = $3 and state = any($5)
        returning number
    ), canceled as (
        update attempts set state = 'canceled', finished_at = now()
        where owner_id = $1 and job_id = $2 and number <> $3 and state = 'pending' and exists (select from won)
        returning number
    ), event as (
        insert into job_events (owner_id, job_id, kind, attempt_number, detail)
        select $1, $2, 'attempt-succeeded', $3,
               jsonb_build_object('from', $6::text, 'reason', $7::text,
                                  'canceled', coalesce((select jsonb_agg(number order by number) from canceled), '[]'))
        where exists (select from won) and exists (select from settled)
        union all
        select $1, $2, 'race-lost', $3,
               jsonb_build_object('loser', $3, 'winner', $8::int, 'job_state', $9::text, 'reason', $7::text)
        where not exists (select from won) and exists (select from settled)
    )
    select exists (select from won) as won,
           (select count(*) from settled) as settled,
           coalesce((select array_agg(number order by number) from canceled), '{}') as canceled"#;

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

fn read_job(row: &PgRow, attempts: Vec<Attempt>) -> Result<Job> {
    let fingerprint: Vec<u8> = row.try_get("fingerprint")?;
    Ok(Job {
        id: JobId(row.try_get("id")?),
        owner: OwnerId::from_trusted(row.try_get("owner_id")?),
        idempotency_key: row.try_get("idempotency_key")?,
        fingerprint: Fingerprint::from_slice(&fingerprint).ok_or_else(|| corrupt("fingerprint length"))?,
        task: row.try_get("task")?,
        input: row.try_get("input")?,
        provider: row.try_get("provider")?,
        state: parse_state(row.try_get("state")?)?,
        winning_attempt: row.try_get("winning_attempt")?,
        result: row.try_get("result")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        max_cost: row.try_get::<Option<String>, _>("max_cost")?.map(|m| m.parse()).transpose().map_err(corrupt)?,
        cost: JobCost::of(&attempts),
        attempts,
    })
}

fn read_attempt(row: &PgRow) -> Result<Attempt> {
    let origin: &str = row.try_get("a_origin")?;
    Ok(Attempt {
        number: row.try_get("a_number")?,
        id: AttemptId(row.try_get("a_id")?),
        provider: row.try_get("a_provider")?,
        state: parse_state(row.try_get("a_state")?)?,
        origin: AttemptOrigin::parse(origin).ok_or_else(|| corrupt(format!("attempt origin '{origin}'")))?,
        idempotency_key: row.try_get("a_idempotency_key")?,
        worker: row.try_get("a_worker")?,
        lease_until: row.try_get("a_lease_until")?,
        output: row.try_get("a_output")?,
        error: row.try_get("a_error")?,
        created_at: row.try_get("a_created_at")?,
        not_before: row.try_get("a_not_before")?,
        started_at: row.try_get("a_started_at")?,
        finished_at: row.try_get("a_finished_at")?,
        usage: read_usage(row.try_get("a_prompt_tokens")?, row.try_get("a_completion_tokens")?, row.try_get("a_usage_estimated")?),
        cost: read_cost(row.try_get("a_cost")?, row.try_get("a_currency")?, row.try_get("a_price_version")?)?,
    })
}

/// A row of `jobs` without its attempts, for listings.
fn read_job_summary(row: &PgRow) -> Result<JobSummary> {
    Ok(JobSummary {
        id: JobId(row.try_get("id")?),
        idempotency_key: row.try_get("idempotency_key")?,
        task: row.try_get("task")?,
        provider: row.try_get("provider")?,
        state: parse_state(row.try_get("state")?)?,
        winning_attempt: row.try_get("winning_attempt")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// Reads a job and its attempts from the rows of a `jobs left join attempts`.
/// The (owner_id, job_id, number) of a row naming an attempt.
fn read_attempt_ref(row: &PgRow) -> Result<AttemptRef> {
    Ok(AttemptRef {
        owner: OwnerId::from_trusted(row.try_get("owner_id")?),
        job_id: JobId(row.try_get("job_id")?),
        number: row.try_get("number")?,
    })
}

fn read_job_with_attempts(rows: &[PgRow]) -> Result<Option<Job>> {
    let Some(first) = rows.first() else { return Ok(None) };
    let mut attempts = Vec::with_capacity(rows.len());
    for row in rows {
        if row.try_get::<Option<i32>, _>("a_number")?.is_some() {
            attempts.push(read_attempt(row)?);
        }
    }
    read_job(first, attempts).map(Some)
}

async fn append_event(
    tx: &mut Transaction<'_, Postgres>,
    owner: &OwnerId,
    job_id: JobId,
    kind: &str,
    attempt_number: Option<i32>,
    detail: Value,
) -> Result<()> {
    sqlx::query(
        r#"insert into job_events (owner_id, job_id, kind, attempt_number, detail)
           values ($1, $2, $3, $4, $5)"#,
    )
    .bind(owner.as_str())
    .bind(job_id.0)
    .bind(kind)
    .bind(attempt_number)
    .bind(detail)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Locks the job's row; every transition on an existing job starts here.
async fn lock_job(tx: &mut Transaction<'_, Postgres>, owner: &OwnerId, job_id: JobId) -> Result<Option<PgRow>> {
    Ok(sqlx::query(
        r#"select state, task, provider, winning_attempt from jobs
           where owner_id = $1 and id = $2
           for no key update"#,
    )
    .bind(owner.as_str())
    .bind(job_id.0)
    .fetch_optional(&mut **tx)
    .await?)
}

async fn attempt_state(tx: &mut Transaction<'_, Postgres>, attempt: &AttemptRef) -> Result<Option<AttemptState>> {
    let state: Option<String> = sqlx::query_scalar(
        r#"select state from attempts where owner_id = $1 and job_id = $2 and number = $3"#,
    )
    .bind(attempt.owner.as_str())
    .bind(attempt.job_id.0)
    .bind(attempt.number)
    .fetch_optional(&mut **tx)
    .await?;
    state.map(|s| parse_state(&s)).transpose()
}

/// Stores the job state that its attempts now imply (a terminal one stays).
async fn update_job_state(
    tx: &mut Transaction<'_, Postgres>,
    owner: &OwnerId,
    job_id: JobId,
    current: JobState,
) -> Result<JobState> {
    let states: Vec<String> = sqlx::query_scalar(
        r#"select state from attempts where owner_id = $1 and job_id = $2"#,
    )
    .bind(owner.as_str())
    .bind(job_id.0)
    .fetch_all(&mut **tx)
    .await?;
    let states = states.iter().map(|s| parse_state(s)).collect::<Result<Vec<AttemptState>>>()?;
    let derived = JobState::derive(current, states);
    if derived != current {
        sqlx::query(r#"update jobs set state = $3, updated_at = now() where owner_id = $1 and id = $2"#)
            .bind(owner.as_str())
            .bind(job_id.0)
            .bind(derived.as_str())
            .execute(&mut **tx)
            .await?;
    }
    Ok(derived)
}

fn state_names(states: &[AttemptState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

/// Where `provider` stands for `task`'s contract with hash `hash`.
async fn read_qualification_state<'e>(
    executor: impl PgExecutor<'e>,
    provider: &str,
    task: &str,
    hash: &[u8; 32],
) -> Result<QualificationState> {
    let row = sqlx::query(
        r#"select contract_hash = $3 as current, passed, created_at, report ->> 'summary' as summary
           from qualifications
           where provider = $1 and task = $2
           order by contract_hash = $3 desc, created_at desc
           limit 1"#,
    )
    .bind(provider)
    .bind(task)
    .bind(&hash[..])
    .fetch_optional(executor)
    .await?;
    let Some(row) = row else { return Ok(QualificationState::Never) };
    let at = row.try_get("created_at")?;
    Ok(match (row.try_get::<bool, _>("current")?, row.try_get::<bool, _>("passed")?) {
        (true, true) => QualificationState::Qualified { at },
        (true, false) => {
            QualificationState::Failed { at, summary: row.try_get::<Option<String>, _>("summary")?.unwrap_or_default() }
        }
        (false, _) => QualificationState::Stale { at },
    })
}

/// Whether `provider` may serve an attempt of a `task` job whose own
/// provider is `primary`: the job's own provider always may; any other needs
/// a passing qualification of the task's current contract (I5). `Err` says why not.
async fn check_qualified(
    tx: &mut Transaction<'_, Postgres>,
    rules: &dyn TaskRules,
    task: &str,
    primary: &str,
    provider: &str,
) -> Result<Result<(), String>> {
    if provider == primary {
        return Ok(Ok(()));
    }
    let Some(hash) = rules.contract_hash(task, provider) else {
        return Ok(Err(format!("provider '{provider}' cannot serve task '{task}' here: one of them is not configured")));
    };
    let state = read_qualification_state(&mut **tx, provider, task, &hash).await?;
    Ok(state.refusal(provider, task).map_or(Ok(()), Err))
}

impl PostgresStore {
    /// Settles a running or unknown attempt with an output through the job's
    /// compare-and-swap (I3).
    async fn settle_with_output(
        &self,
        attempt: &AttemptRef,
        output: &Value,
        from: &[AttemptState],
        resolution_reason: Option<&str>,
    ) -> Result<Transition> {
        let mut tx = self.pool.begin().await?;
        let Some(job) = lock_job(&mut tx, &attempt.owner, attempt.job_id).await? else {
            return Ok(Transition::NotFound);
        };
        let Some(current) = attempt_state(&mut tx, attempt).await? else {
            return Ok(Transition::NotFound);
        };
        if !from.contains(&current) {
            return Ok(Transition::Stale(current));
        }
        // One statement, under the job's lock: the compare-and-swap (only a
        // job that has not finished takes a winner; zero rows touched means
        // this attempt lost), the attempt settled as won or superseded, the
        // winner's pending siblings canceled, and the event.
        let winner: Option<i32> = job.try_get("winning_attempt")?;
        let job_state: String = job.try_get("state")?;
        let row = sqlx::query(SETTLE_WITH_OUTPUT)
            .bind(attempt.owner.as_str())
            .bind(attempt.job_id.0)
            .bind(attempt.number)
            .bind(output)
            .bind(state_names(from))
            .bind(current.as_str())
            .bind(resolution_reason)
            .bind(winner)
            .bind(&job_state)
            .fetch_one(&mut *tx)
            .await?;
        let settled: i64 = row.try_get("settled")?;
        if settled != 1 {
            // Cannot happen with the job locked; refuse to commit if it does.
            return Err(corrupt("attempt changed under a locked job"));
        }
        let outcome = if row.try_get("won")? {
            Transition::Won { canceled: row.try_get("canceled")? }
        } else {
            Transition::Lost { winner }
        };
        tx.commit().await?;
        if let Transition::Lost { winner } = outcome {
            log_race_lost(attempt, winner);
        }
        Ok(outcome)
    }

    /// Moves an attempt to `failed` or `unknown`, and the job to the state
    /// that implies. After a failure, when `rules` are given and nothing
    /// else of the job is open, the retry policy's next attempt is admitted
    /// in the same transaction, so that it cannot be lost between the two.
    #[allow(clippy::too_many_arguments)]
    async fn settle_without_output(
        &self,
        attempt: &AttemptRef,
        next: AttemptState,
        from: &[AttemptState],
        error: &AttemptError,
        event: &str,
        reason: Option<&str>,
        rules: Option<&dyn TaskRules>,
    ) -> Result<Transition> {
        let mut tx = self.pool.begin().await?;
        let Some(job) = lock_job(&mut tx, &attempt.owner, attempt.job_id).await? else {
            return Ok(Transition::NotFound);
        };
        let changed = sqlx::query(
            r#"update attempts
               set state = $4, error = $5, finished_at = now(), lease_until = null,
                   reconcile_after = case when $4 = 'unknown' then now() end
               where owner_id = $1 and job_id = $2 and number = $3 and state = any($6)"#,
        )
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .bind(next.as_str())
        .bind(sqlx::types::Json(error))
        .bind(state_names(from))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed == 0 {
            return Ok(match attempt_state(&mut tx, attempt).await? {
                Some(state) => Transition::Stale(state),
                None => Transition::NotFound,
            });
        }
        let current: JobState = parse_state(job.try_get("state")?)?;
        let job_state = update_job_state(&mut tx, &attempt.owner, attempt.job_id, current).await?;
        append_event(
            &mut tx,
            &attempt.owner,
            attempt.job_id,
            event,
            Some(attempt.number),
            json!({ "error": error, "job_state": job_state.as_str(), "reason": reason }),
        )
        .await?;
        let outcome = match (next, rules) {
            (AttemptState::Failed, Some(rules)) if job_state == JobState::Failed => {
                let task: String = job.try_get("task")?;
                let primary: String = job.try_get("provider")?;
                let next = schedule_next_attempt(&mut tx, attempt, &task, &primary, rules).await?;
                Transition::Failed { next }
            }
            (AttemptState::Failed, _) => Transition::Failed { next: None },
            _ => Transition::Applied,
        };
        tx.commit().await?;
        Ok(outcome)
    }
}

/// The budget of a job (its own `max_cost` or its task's, the lower) and
/// its input, to cost attempts with; `None` when it has no budget.
async fn read_budget(
    tx: &mut Transaction<'_, Postgres>,
    owner: &OwnerId,
    job_id: JobId,
    task: &str,
    rules: &dyn TaskRules,
) -> Result<Option<(Money, Value)>> {
    let row = sqlx::query(r#"select max_cost::text as max_cost, input from jobs where owner_id = $1 and id = $2"#)
        .bind(owner.as_str())
        .bind(job_id.0)
        .fetch_one(&mut **tx)
        .await?;
    stored_budget(rules, task, row.try_get("max_cost")?, || Ok(row.try_get("input")?))
}

/// Inserts a pending attempt numbered `number`.
async fn insert_attempt(
    tx: &mut Transaction<'_, Postgres>,
    owner: &OwnerId,
    job_id: JobId,
    number: i32,
    new: &NewAttempt,
    provider: &str,
) -> Result<Attempt> {
    let row = sqlx::query(&format!(
        r#"insert into attempts as a (owner_id, job_id, number, id, provider, state, origin, idempotency_key,
                                      created_at, not_before)
           values ($1, $2, $3, $4, $5, 'pending', $6, $7, now(), now() + make_interval(secs => $8))
           returning {ATTEMPT_COLUMNS}"#
    ))
    .bind(owner.as_str())
    .bind(job_id.0)
    .bind(number)
    .bind(new.id.0)
    .bind(provider)
    .bind(new.origin.as_str())
    .bind(new.idempotency_key.as_ref().map(IdempotencyKey::as_str))
    .bind(new.delay.as_secs_f64())
    .fetch_one(&mut **tx)
    .await?;
    read_attempt(&row)
}

async fn read_attempts(tx: &mut Transaction<'_, Postgres>, owner: &OwnerId, job_id: JobId) -> Result<Vec<Attempt>> {
    let rows = sqlx::query(&format!(
        r#"select {ATTEMPT_COLUMNS} from attempts a
           where a.owner_id = $1 and a.job_id = $2
           order by a.number"#
    ))
    .bind(owner.as_str())
    .bind(job_id.0)
    .fetch_all(&mut **tx)
    .await?;
    rows.iter().map(read_attempt).collect()
}

/// Asks the retry policy for the next attempt of a job whose attempt just
/// failed, and admits it under the same rules as a client's. The job row is
/// locked by the caller.
async fn schedule_next_attempt(
    tx: &mut Transaction<'_, Postgres>,
    failed: &AttemptRef,
    task: &str,
    primary: &str,
    rules: &dyn TaskRules,
) -> Result<Option<Scheduled>> {
    let attempts = read_attempts(tx, &failed.owner, failed.job_id).await?;
    let past = past_attempts(&attempts);
    let states: Vec<AttemptState> = attempts.iter().map(|a| a.state).collect();
    let budget = read_budget(tx, &failed.owner, failed.job_id, task, rules).await?;
    let mut chosen = None;
    for candidate in rules.retry_candidates(task, primary, &past) {
        let mut verdict = check_qualified(tx, rules, task, primary, &candidate.provider).await?;
        if verdict.is_ok()
            && let Some((budget, input)) = &budget
        {
            verdict = check_budget(rules, task, input, *budget, &attempts, &candidate.provider);
        }
        match verdict {
            Ok(()) => {
                chosen = Some(candidate);
                break;
            }
            Err(reason) => {
                tracing::info!(owner = %failed.owner, job.id = %failed.job_id, provider = %candidate.provider, %reason,
                               "failover skipped a provider that is not qualified or over the budget");
                append_event(
                    tx,
                    &failed.owner,
                    failed.job_id,
                    "failover-skipped",
                    None,
                    json!({ "provider": candidate.provider, "reason": reason, "after": failed.number }),
                )
                .await?;
            }
        }
    }
    let Some(next) = chosen else { return Ok(None) };
    if let Err(refusal) = check_admission(JobState::Failed, &states, rules.limits(task), true) {
        append_event(
            tx,
            &failed.owner,
            failed.job_id,
            "admission-refused",
            None,
            json!({ "problem": refusal.problem_type(), "provider": next.provider, "origin": "policy" }),
        )
        .await?;
        return Ok(None);
    }
    let number = i32::try_from(attempts.len() + 1).map_err(corrupt)?;
    let new = NewAttempt {
        id: AttemptId::new(),
        provider: Some(next.provider.clone()),
        idempotency_key: None,
        origin: AttemptOrigin::Policy,
        delay: next.delay,
    };
    insert_attempt(tx, &failed.owner, failed.job_id, number, &new, &next.provider).await?;
    let job_state = update_job_state(tx, &failed.owner, failed.job_id, JobState::Failed).await?;
    append_event(
        tx,
        &failed.owner,
        failed.job_id,
        "attempt-admitted",
        Some(number),
        json!({ "attempt_id": new.id, "provider": next.provider, "origin": "policy", "after": failed.number,
                "delay_ms": next.delay.as_millis() as u64, "job_state": job_state.as_str() }),
    )
    .await?;
    Ok(Some(Scheduled { number, provider: next.provider, delay: next.delay }))
}

#[async_trait]
impl Store for PostgresStore {
    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn check_ready(&self) -> Result<()> {
        let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        let applied: Option<i64> = sqlx::query_scalar(
            r#"select max(version) from _sqlx_migrations where success"#,
        )
        .fetch_one(&self.pool)
        .await?;
        if applied.unwrap_or(0) < latest {
            return Err(corrupt(format!("migrations not applied: database at {applied:?}, program at {latest}")));
        }
        Ok(())
    }

    async fn insert_api_key(&self, id: Uuid, owner: &OwnerId, role: KeyRole, token_hash: &[u8; 32]) -> Result<()> {
        sqlx::query(r#"insert into api_keys (owner_id, id, role, token_hash) values ($1, $2, $3, $4)"#)
            .bind(owner.as_str())
            .bind(id)
            .bind(role.as_str())
            .bind(&token_hash[..])
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn find_api_key(&self, token_hash: &[u8; 32]) -> Result<Option<LiveKey>> {
        let row = sqlx::query(
            r#"select owner_id, id, role, token_hash from api_keys where token_hash = $1 and revoked_at is null"#,
        )
        .bind(&token_hash[..])
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| read_live_key(&row)).transpose()
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

    async fn list_api_keys(&self, owner: Option<&OwnerId>) -> Result<Vec<ApiKey>> {
        let rows = sqlx::query(
            r#"select owner_id, id, created_at, revoked_at, role from api_keys
               where $1::text is null or owner_id = $1
               order by created_at, id"#,
        )
        .bind(owner.map(OwnerId::as_str))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ApiKey {
                    id: row.try_get("id")?,
                    owner: OwnerId::from_trusted(row.try_get("owner_id")?),
                    created_at: row.try_get("created_at")?,
                    revoked_at: row.try_get("revoked_at")?,
                    role: parse_state(row.try_get("role")?)?,
                })
            })
            .collect()
    }

    async fn has_api_keys(&self) -> Result<bool> {
        Ok(sqlx::query_scalar(r#"select exists (select 1 from api_keys)"#).fetch_one(&self.pool).await?)
    }

    fn follow_key_changes(&self) -> Option<mpsc::Receiver<KeyChange>> {
        let (changes, receiver) = mpsc::channel(256);
        tokio::spawn(follow_key_changes(self.pool.clone(), changes));
        Some(receiver)
    }

    async fn create_job(&self, new: &NewJob) -> Result<CreateJob> {
        // The hot path: one statement, one round trip for a new key. The
        // unique constraint decides (I1); a taken key inserts nothing.
        let mut lease = self.hot.acquire().await?;
        let created_at = sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(CREATE_JOB)
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
        drop(lease);
        let created_at = created_at?;

        if let Some(created_at) = created_at {
            return Ok(CreateJob::Created(new.created(created_at)));
        }
        // The key is taken. The insert's snapshot may predate the racing
        // insert it waited for, so read the holder in a new statement.
        match self.find_job_by_key(&new.owner, &new.idempotency_key).await? {
            Some(job) => Ok(CreateJob::Existing(job)),
            None => Err(corrupt("an idempotency key conflicted, but no job holds it")),
        }
    }

    async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>> {
        // One statement, so the job and its attempts come from one snapshot.
        let mut lease = self.hot.acquire().await?;
        let rows = sqlx::query(GET_JOB.as_str()).bind(owner.as_str()).bind(id.0).fetch_all(lease.connection()).await;
        lease.keep_after(&rows);
        read_job_with_attempts(&rows?)
    }

    async fn find_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>> {
        let mut lease = self.hot.acquire().await?;
        let rows =
            sqlx::query(FIND_JOB_BY_KEY.as_str()).bind(owner.as_str()).bind(key.as_str()).fetch_all(lease.connection()).await;
        lease.keep_after(&rows);
        read_job_with_attempts(&rows?)
    }

    async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>> {
        let rows = sqlx::query(
            r#"select id, idempotency_key, task, provider, state, winning_attempt, created_at, updated_at
               from jobs
               where owner_id = $1
                 and ($2::text is null or state = $2)
                 and ($3::text is null or task = $3)
                 and ($4::uuid is null or id < $4)
               order by id desc
               limit $5"#,
        )
        .bind(owner.as_str())
        .bind(filter.state.map(JobState::as_str))
        .bind(filter.task.as_deref())
        .bind(filter.before.map(|id| id.0))
        .bind(i64::from(filter.limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(read_job_summary).collect()
    }

    async fn list_events(&self, owner: &OwnerId, job_id: JobId) -> Result<Vec<JobEvent>> {
        let rows = sqlx::query(
            r#"select id, at, kind, attempt_number, detail from job_events
               where owner_id = $1 and job_id = $2
               order by id"#,
        )
        .bind(owner.as_str())
        .bind(job_id.0)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(JobEvent {
                    id: row.try_get("id")?,
                    at: row.try_get("at")?,
                    kind: row.try_get("kind")?,
                    attempt_number: row.try_get("attempt_number")?,
                    detail: row.try_get("detail")?,
                })
            })
            .collect()
    }

    async fn admit_attempt(
        &self,
        owner: &OwnerId,
        job_id: JobId,
        new: &NewAttempt,
        rules: &dyn TaskRules,
    ) -> Result<Admission> {
        let mut tx = self.pool.begin().await?;
        let Some(job) = lock_job(&mut tx, owner, job_id).await? else {
            return Ok(Admission::JobNotFound);
        };
        let job_state: JobState = parse_state(job.try_get("state")?)?;
        let task: String = job.try_get("task")?;
        let primary: String = job.try_get("provider")?;
        let provider = new.provider.as_deref().unwrap_or(&primary);

        let attempts = read_attempts(&mut tx, owner, job_id).await?;

        // A key seen before on this job answers with what it made, whatever
        // the job's state is now.
        if let Some(answer) = earlier_attempt(&attempts, new.idempotency_key.as_ref(), provider) {
            return Ok(answer);
        }

        let states: Vec<AttemptState> = attempts.iter().map(|a| a.state).collect();
        let qualification = check_qualified(&mut tx, rules, &task, &primary, provider).await?;
        let mut verdict = check_admission(job_state, &states, rules.limits(&task), qualification.is_ok());
        let mut reason = None;
        if verdict.is_ok()
            && let Some((budget, input)) = read_budget(&mut tx, owner, job_id, &task, rules).await?
            && let Err(why) = check_budget(rules, &task, &input, budget, &attempts, provider)
        {
            (verdict, reason) = (Err(AdmissionRefusal::BudgetExceeded), Some(why));
        }
        if let Err(refusal) = verdict {
            let reason = match refusal {
                AdmissionRefusal::ProviderNotQualified => qualification.err(),
                _ => reason,
            };
            append_event(
                &mut tx,
                owner,
                job_id,
                "admission-refused",
                None,
                json!({ "problem": refusal.problem_type(), "provider": provider, "reason": reason,
                        "idempotency_key": new.idempotency_key.as_ref().map(IdempotencyKey::as_str),
                        "origin": new.origin.as_str() }),
            )
            .await?;
            tx.commit().await?;
            return Ok(Admission::Refused { refusal, reason });
        }

        let number = i32::try_from(attempts.len() + 1).map_err(corrupt)?;
        let attempt = insert_attempt(&mut tx, owner, job_id, number, new, provider).await?;
        let job_state = update_job_state(&mut tx, owner, job_id, job_state).await?;
        append_event(
            &mut tx,
            owner,
            job_id,
            "attempt-admitted",
            Some(number),
            json!({ "attempt_id": new.id, "provider": provider, "origin": new.origin.as_str(),
                    "job_state": job_state.as_str() }),
        )
        .await?;
        tx.commit().await?;
        Ok(Admission::Admitted(attempt))
    }

    async fn claim_attempts(&self, worker: &str, max: u32, leases: &Leases) -> Result<Vec<ClaimedAttempt>> {
        let (names, seconds): (Vec<&str>, Vec<f64>) =
            leases.by_provider.iter().map(|(name, lease)| (name.as_str(), lease.as_secs_f64())).unzip();
        // Rows another claimer or a transition holds are skipped, not waited
        // for: claims never block and never take the same attempt twice.
        let rows = sqlx::query(
            r#"with picked as (
                   select a.owner_id, a.job_id, a.number
                   from attempts a
                   join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
                   where a.state = 'pending' and a.not_before <= now()
                     and a.provider = any($4::text[])
                     and j.state not in ('succeeded', 'canceled')
                   order by a.not_before
                   limit $1
                   for update of a, j skip locked
               ), claimed as (
                   update attempts a
                   set state = 'running', worker = $2, started_at = now(),
                       lease_until = now() + make_interval(secs => coalesce(
                           (select l.seconds from unnest($4::text[], $5::float8[]) as l(provider, seconds)
                            where l.provider = a.provider),
                           $3))
                   from picked p
                   where a.owner_id = p.owner_id and a.job_id = p.job_id and a.number = p.number
                   returning a.owner_id, a.job_id, a.number, a.id, a.provider, a.lease_until
               ), running_jobs as (
                   update jobs j set state = 'running', updated_at = now()
                   from claimed c
                   where j.owner_id = c.owner_id and j.id = c.job_id
               ), claimed_events as (
                   insert into job_events (owner_id, job_id, kind, attempt_number, detail)
                   select owner_id, job_id, 'attempt-claimed', number,
                          jsonb_build_object('worker', $2::text, 'attempt_id', id, 'lease_until', lease_until)
                   from claimed
               )
               select c.owner_id, c.job_id, c.number, c.id, c.provider, c.lease_until, j.task, j.input
               from claimed c
               join jobs j on j.owner_id = c.owner_id and j.id = c.job_id
               order by c.number"#,
        )
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
                    attempt: read_attempt_ref(row)?,
                    id: AttemptId(row.try_get("id")?),
                    provider: row.try_get("provider")?,
                    task: row.try_get("task")?,
                    input: row.try_get("input")?,
                    lease_until: row.try_get("lease_until")?,
                })
            })
            .collect()
    }

    async fn expire_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        let rows = sqlx::query(
            r#"select owner_id, job_id, number from attempts
               where state = 'running' and lease_until < now()
               order by lease_until
               limit $1"#,
        )
        .bind(i64::from(max))
        .fetch_all(&self.pool)
        .await?;
        let error = AttemptError::new("lease-expired", "the worker running this attempt stopped answering before it finished");
        let mut expired = Vec::with_capacity(rows.len());
        for row in rows {
            let attempt = read_attempt_ref(&row)?;
            let outcome = self
                .settle_without_output(
                    &attempt,
                    AttemptState::Unknown,
                    &[AttemptState::Running],
                    &error,
                    "attempt-unknown",
                    None,
                    None,
                )
                .await?;
            if outcome == Transition::Applied {
                expired.push(attempt);
            }
        }
        Ok(expired)
    }

    async fn claim_reconciliations(&self, providers: &[String], max: u32, hold: Duration) -> Result<Vec<UnknownAttempt>> {
        let rows = sqlx::query(
            r#"with due as (
                   select owner_id, job_id, number from attempts
                   where state = 'unknown' and provider = any($1) and reconcile_after <= now()
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
        )
        .bind(providers)
        .bind(i64::from(max))
        .bind(hold.as_secs_f64())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(UnknownAttempt {
                    attempt: read_attempt_ref(row)?,
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
               where owner_id = $1 and job_id = $2 and number = $3 and state = 'unknown'"#,
        )
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .bind(delay.as_secs_f64())
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
        let id = Uuid::now_v7();
        let created_at = sqlx::query_scalar(
            r#"insert into qualifications (id, provider, task, contract_hash, passed, report)
               values ($1, $2, $3, $4, $5, $6)
               returning created_at"#,
        )
        .bind(id)
        .bind(provider)
        .bind(task)
        .bind(&contract_hash[..])
        .bind(passed)
        .bind(report)
        .fetch_one(&self.pool)
        .await?;
        Ok(QualificationRecord {
            id,
            provider: provider.to_owned(),
            task: task.to_owned(),
            contract_hash: *contract_hash,
            passed,
            report: report.clone(),
            created_at,
        })
    }

    async fn qualification_state(&self, provider: &str, task: &str, contract_hash: &[u8; 32]) -> Result<QualificationState> {
        read_qualification_state(&self.pool, provider, task, contract_hash).await
    }

    async fn latest_qualification(&self, provider: &str, task: &str) -> Result<Option<QualificationRecord>> {
        let row = sqlx::query(
            r#"select id, contract_hash, passed, report, created_at from qualifications
               where provider = $1 and task = $2
               order by created_at desc
               limit 1"#,
        )
        .bind(provider)
        .bind(task)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            let hash: Vec<u8> = row.try_get("contract_hash")?;
            Ok(QualificationRecord {
                id: row.try_get("id")?,
                provider: provider.to_owned(),
                task: task.to_owned(),
                contract_hash: hash.try_into().map_err(|_| corrupt("contract hash length"))?,
                passed: row.try_get("passed")?,
                report: row.try_get("report")?,
                created_at: row.try_get("created_at")?,
            })
        })
        .transpose()
    }

    async fn sample_gauges(&self) -> Result<Gauges> {
        let row = sqlx::query(
            r#"select
                   (select count(*) from attempts where state = 'pending' and not_before <= now()) as pending_due,
                   (select count(*) from attempts where state = 'unknown') as unknown_open,
                   coalesce(extract(epoch from now() - (select min(finished_at) from attempts where state = 'unknown')),
                            0)::float8 as oldest"#,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(Gauges {
            pending_due: row.try_get("pending_due")?,
            unknown_open: row.try_get("unknown_open")?,
            oldest_unknown: Duration::from_secs_f64(row.try_get::<f64, _>("oldest")?.max(0.0)),
        })
    }

    async fn cancel_job(&self, owner: &OwnerId, id: JobId) -> Result<Cancel> {
        let mut tx = self.pool.begin().await?;
        let Some(job) = lock_job(&mut tx, owner, id).await? else {
            return Ok(Cancel::NotFound);
        };
        let state: JobState = parse_state(job.try_get("state")?)?;
        if state == JobState::Canceled || state == JobState::Succeeded {
            drop(tx);
            let job = self.get_job(owner, id).await?.ok_or_else(|| corrupt("a locked job vanished"))?;
            return Ok(if state == JobState::Canceled { Cancel::AlreadyCanceled(job) } else { Cancel::Succeeded(job) });
        }
        sqlx::query(r#"update jobs set state = 'canceled', updated_at = now() where owner_id = $1 and id = $2"#)
            .bind(owner.as_str())
            .bind(id.0)
            .execute(&mut *tx)
            .await?;
        let canceled: Vec<i32> = sqlx::query_scalar(
            r#"update attempts set state = 'canceled', finished_at = now()
               where owner_id = $1 and job_id = $2 and state = 'pending'
               returning number"#,
        )
        .bind(owner.as_str())
        .bind(id.0)
        .fetch_all(&mut *tx)
        .await?;
        append_event(&mut tx, owner, id, "job-canceled", None, json!({ "from": state.as_str(), "canceled": canceled }))
            .await?;
        tx.commit().await?;
        let job = self.get_job(owner, id).await?.ok_or_else(|| corrupt("a canceled job vanished"))?;
        Ok(Cancel::Canceled(job))
    }

    async fn finish_attempt(&self, attempt: &AttemptRef, output: &Value) -> Result<Transition> {
        self.settle_with_output(attempt, output, &[AttemptState::Running, AttemptState::Unknown], None).await
    }

    async fn fail_attempt(&self, attempt: &AttemptRef, error: &AttemptError, rules: &dyn TaskRules) -> Result<Transition> {
        self.settle_without_output(
            attempt,
            AttemptState::Failed,
            &[AttemptState::Running, AttemptState::Unknown],
            error,
            "attempt-failed",
            None,
            Some(rules),
        )
        .await
    }

    async fn mark_unknown(&self, attempt: &AttemptRef, error: &AttemptError) -> Result<Transition> {
        self.settle_without_output(
            attempt,
            AttemptState::Unknown,
            &[AttemptState::Running],
            error,
            "attempt-unknown",
            None,
            None,
        )
        .await
    }

    async fn resolve_unknown(
        &self,
        attempt: &AttemptRef,
        resolution: &Resolution,
        reason: &str,
        rules: &dyn TaskRules,
    ) -> Result<Transition> {
        match resolution {
            Resolution::Succeeded(output) => {
                self.settle_with_output(attempt, output, &[AttemptState::Unknown], Some(reason)).await
            }
            Resolution::Failed => {
                let error = AttemptError::new("resolved-failed", reason);
                self.settle_without_output(
                    attempt,
                    AttemptState::Failed,
                    &[AttemptState::Unknown],
                    &error,
                    "attempt-resolved",
                    Some(reason),
                    Some(rules),
                )
                .await
            }
        }
    }

    async fn find_unknown_attempt_owner(&self, job_id: JobId, number: i32) -> Result<Option<OwnerId>> {
        let owner: Option<String> = sqlx::query_scalar(
            r#"select owner_id from attempts where job_id = $1 and number = $2 and state = 'unknown'"#,
        )
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
        rows.iter()
            .map(|row| {
                Ok(UsageRow {
                    task: row.try_get("task")?,
                    provider: row.try_get("provider")?,
                    state: parse_state(row.try_get("state")?)?,
                    created_at: row.try_get("created_at")?,
                    usage: read_usage(row.try_get("prompt_tokens")?, row.try_get("completion_tokens")?, row.try_get("usage_estimated")?)
                        .ok_or_else(|| corrupt("a counted attempt without usage"))?,
                    cost: read_cost(row.try_get("cost")?, row.try_get("currency")?, row.try_get("price_version")?)?,
                })
            })
            .collect()
    }

    async fn browse_jobs(
        &self,
        owner: Option<&OwnerId>,
        key: Option<&str>,
        filter: &JobFilter,
    ) -> Result<Vec<super::OwnedJobSummary>> {
        let rows = sqlx::query(
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
        .bind(filter.state.map(JobState::as_str))
        .bind(filter.task.as_deref())
        .bind(filter.before.map(|id| id.0))
        .bind(i64::from(filter.limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(super::OwnedJobSummary {
                    owner: OwnerId::from_trusted(row.try_get("owner_id")?),
                    job: read_job_summary(row)?,
                })
            })
            .collect()
    }

    async fn find_job_owner(&self, id: JobId) -> Result<Option<OwnerId>> {
        let owner: Option<String> = sqlx::query_scalar(r#"select owner_id from jobs where id = $1"#)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(owner.map(OwnerId::from_trusted))
    }

    async fn list_unknown_attempts(&self, owner: Option<&OwnerId>, limit: u32) -> Result<Vec<super::OpenUnknown>> {
        let rows = sqlx::query(
            r#"select a.owner_id, a.job_id, a.number, a.provider, j.task, a.finished_at, a.error, a.reconcile_count
               from attempts a join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
               where ($1::text is null or a.owner_id = $1) and a.state = 'unknown'
               order by a.finished_at, a.job_id, a.number
               limit $2"#,
        )
        .bind(owner.map(OwnerId::as_str))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(super::OpenUnknown {
                    attempt: read_attempt_ref(row)?,
                    provider: row.try_get("provider")?,
                    task: row.try_get("task")?,
                    unknown_since: row.try_get("finished_at")?,
                    error: row.try_get("error")?,
                    reconcile_count: row.try_get("reconcile_count")?,
                })
            })
            .collect()
    }
}

/// The channel the `api_keys_changed` trigger notifies with a key's id.
const KEY_CHANNEL: &str = "onejob_api_keys";
/// The channel on which servers confirm they forgot a changed key.
const KEY_ACK_CHANNEL: &str = "onejob_api_keys_forgotten";
/// How long a revocation waits for those confirmations.
const KEY_ACK_TIMEOUT: Duration = Duration::from_secs(2);

fn read_live_key(row: &PgRow) -> Result<LiveKey> {
    let hash: Vec<u8> = row.try_get("token_hash")?;
    Ok(LiveKey {
        id: row.try_get("id")?,
        owner: OwnerId::from_trusted(row.try_get("owner_id")?),
        role: parse_state(row.try_get("role")?)?,
        token_hash: hash.try_into().map_err(|_| corrupt("a stored token hash is not 32 bytes"))?,
    })
}

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
