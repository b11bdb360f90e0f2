//! The SQLite store: the embedded default for one machine, keeping every
//! invariant by SQLite's own means. All of its SQL is in this file.
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
//!
//! - New jobs are committed in groups: whoever gets the write turn writes
//!   every creation queued while the previous transaction was committing, in
//!   one transaction, so one log sync covers them all; each request is
//!   answered only after that commit (see `create_job`).
//!
//! Times are stored as microseconds since the Unix epoch, read from this
//! process's clock (one machine, one clock).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::types::Json;
use sqlx::{Row, Sqlite, Transaction};
use uuid::Uuid;

use super::{
    Admission, ApiKey, AttemptRef, LiveKey, Cancel, ClaimedAttempt, CreateJob, Gauges, JobFilter, Leases, NewAttempt, NewJob,
    QualificationRecord, QualificationState, Resolution, Result, Scheduled, Store, StoreError, TaskRules, Transition,
    UnknownAttempt, corrupt, earlier_attempt, log_race_lost, parse_state, past_attempts,
};
use super::usage::{AttemptUsage, UsageFilter, UsageRow, check_budget, read_cost, stored_budget, read_usage};
use crate::domain::Money;
use crate::domain::job::JobCost;
use crate::domain::{
    AdmissionRefusal, Attempt, AttemptError, AttemptId, AttemptOrigin, AttemptState, Fingerprint, IdempotencyKey, Job,
    JobEvent, JobId, JobState, JobSummary, KeyRole, OwnerId, check_admission,
};

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

/// The SQLite implementation of [`Store`].
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    // Writers of this process queue here, first come first served, without
    // holding a connection; SQLite's busy timeout is left for writers in
    // other processes.
    writer: Arc<tokio::sync::Mutex<()>>,
    // Creations waiting for the next group commit.
    creates: Arc<std::sync::Mutex<Vec<PendingCreate>>>,
}

/// A creation waiting for its group commit, and where its answer goes: the
/// time it was inserted at, or `None` when its key was taken.
#[derive(Debug)]
struct PendingCreate {
    new: NewJob,
    answer: tokio::sync::oneshot::Sender<Result<Option<i64>>>,
}

/// The most creations one group commit writes.
const MAX_GROUP: usize = 256;

/// A write transaction and this process's turn to write.
type Write = (tokio::sync::OwnedMutexGuard<()>, Transaction<'static, Sqlite>);

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
            .connect_lazy_with(connect);
        Ok(Self { pool, writer: Arc::new(tokio::sync::Mutex::new(())), creates: Arc::default() })
    }

    /// The pool, for tests that look at the tables directly.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Waits for this process's turn to write, then begins a transaction
    /// holding SQLite's write lock. Keep the guard until the transaction ends.
    async fn write(&self) -> Result<Write> {
        let turn = self.writer.clone().lock_owned().await;
        Ok((turn, self.pool.begin_with("BEGIN IMMEDIATE").await?))
    }
}

/// Why a request queued for a group commit got no answer: the task writing
/// its group ended without one (nothing of it is acknowledged).
fn interrupted() -> StoreError {
    StoreError::Unavailable(sqlx::Error::Protocol("the write of this request was interrupted".into()))
}

impl SqliteStore {
    /// Waits for the answer to a queued creation. Whoever gets the write turn
    /// first with its creation still queued takes every queued creation
    /// (its own among them) and writes them in one transaction; the others
    /// find their answer while they wait. The group is written by a task of
    /// its own, so a client that hangs up cannot abandon the others.
    async fn group_commit(&self, mut answered: tokio::sync::oneshot::Receiver<Result<Option<i64>>>) -> Result<Option<i64>> {
        loop {
            let turn = tokio::select! {
                biased;
                answer = &mut answered => return answer.map_err(|_| interrupted())?,
                turn = self.writer.clone().lock_owned() => turn,
            };
            // Whoever wrote before us answered everything it took before
            // giving up the turn; no answer yet means ours is still queued.
            match answered.try_recv() {
                Ok(answer) => return answer,
                Err(tokio::sync::oneshot::error::TryRecvError::Closed) => return Err(interrupted()),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
            }
            let group: Vec<PendingCreate> = {
                let mut queued = self.creates.lock().unwrap_or_else(|p| p.into_inner());
                let take = queued.len().min(MAX_GROUP);
                queued.drain(..take).collect()
            };
            let store = self.clone();
            tokio::spawn(async move {
                let _turn = turn;
                store.write_group(group).await;
            });
            // Ours was in that group, or (past MAX_GROUP) is in a later one:
            // wait for the answer or the next turn.
        }
    }

    /// Writes a group of creations in one transaction and answers each. If
    /// the group fails, each creation is written alone, so that one bad
    /// request cannot fail the others.
    async fn write_group(&self, group: Vec<PendingCreate>) {
        let together = async {
            let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
            let mut inserted = Vec::with_capacity(group.len());
            for pending in &group {
                inserted.push(insert_new_job(&mut tx, &pending.new).await?);
            }
            tx.commit().await?;
            Ok::<_, StoreError>(inserted)
        };
        match together.await {
            Ok(inserted) => {
                for (pending, inserted) in group.into_iter().zip(inserted) {
                    let _ = pending.answer.send(Ok(inserted));
                }
            }
            Err(error) if group.len() == 1 => {
                let _ = group.into_iter().next().map(|pending| pending.answer.send(Err(error)));
            }
            Err(error) => {
                tracing::debug!(%error, size = group.len(), "a group commit failed; writing its creations one by one");
                for pending in group {
                    let alone = async {
                        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
                        let inserted = insert_new_job(&mut tx, &pending.new).await?;
                        tx.commit().await?;
                        Ok::<_, StoreError>(inserted)
                    };
                    let _ = pending.answer.send(alone.await);
                }
            }
        }
    }
}

/// Inserts a job, its first attempt and its event, unless its key is taken
/// (the unique constraint decides, I1): the time it was inserted at, or
/// `None`.
async fn insert_new_job(tx: &mut Transaction<'static, Sqlite>, new: &NewJob) -> Result<Option<i64>> {
    let created = now();
    let inserted = sqlx::query(
        r#"insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider,
                             state, created_at, updated_at, max_cost)
           values (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', ?8, ?8, ?9)
           on conflict (owner_id, idempotency_key) do nothing"#,
    )
    .bind(new.owner.as_str())
    .bind(new.id.0)
    .bind(new.idempotency_key.as_str())
    .bind(&new.fingerprint.as_bytes()[..])
    .bind(&new.task)
    .bind(Json(&new.input))
    .bind(&new.provider)
    .bind(created)
    .bind(new.max_cost.map(|m| m.to_string()))
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if !inserted {
        return Ok(None);
    }
    sqlx::query(
        r#"insert into attempts (owner_id, job_id, number, id, provider, state, origin, created_at, not_before)
           values (?1, ?2, 1, ?3, ?4, 'pending', 'client', ?5, ?5)"#,
    )
    .bind(new.owner.as_str())
    .bind(new.id.0)
    .bind(new.first_attempt_id.0)
    .bind(&new.provider)
    .bind(created)
    .execute(&mut **tx)
    .await?;
    let detail = json!({ "attempt_id": new.first_attempt_id, "provider": new.provider });
    append_event(tx, created, &new.owner, new.id, "job-created", Some(1), detail).await?;
    Ok(Some(created))
}

fn now() -> i64 {
    Utc::now().timestamp_micros()
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

fn time(micros: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros).ok_or_else(|| corrupt(format!("time {micros}")))
}

fn optional_time(micros: Option<i64>) -> Result<Option<DateTime<Utc>>> {
    micros.map(time).transpose()
}

fn json_column(row: &SqliteRow, column: &str) -> Result<Option<Value>> {
    Ok(row.try_get::<Option<Json<Value>>, _>(column)?.map(|Json(value)| value))
}

const JOB_COLUMNS: &str = r#"j.owner_id, j.id, j.idempotency_key, j.fingerprint, j.task, j.input, j.provider,
    j.state, j.winning_attempt, j.result, j.created_at, j.updated_at, j.max_cost as max_cost"#;

const ATTEMPT_COLUMNS: &str = r#"a.number as a_number, a.id as a_id, a.provider as a_provider, a.state as a_state,
    a.origin as a_origin, a.idempotency_key as a_idempotency_key, a.worker as a_worker,
    a.lease_until as a_lease_until, a.output as a_output, a.error as a_error,
    a.created_at as a_created_at, a.not_before as a_not_before, a.started_at as a_started_at,
    a.finished_at as a_finished_at, a.prompt_tokens as a_prompt_tokens,
    a.completion_tokens as a_completion_tokens, a.usage_estimated as a_usage_estimated,
    a.cost as a_cost, a.currency as a_currency, a.price_version as a_price_version"#;

fn read_job(row: &SqliteRow, attempts: Vec<Attempt>) -> Result<Job> {
    let fingerprint: Vec<u8> = row.try_get("fingerprint")?;
    Ok(Job {
        id: JobId(row.try_get("id")?),
        owner: OwnerId::from_trusted(row.try_get("owner_id")?),
        idempotency_key: row.try_get("idempotency_key")?,
        fingerprint: Fingerprint::from_slice(&fingerprint).ok_or_else(|| corrupt("fingerprint length"))?,
        task: row.try_get("task")?,
        input: json_column(row, "input")?.ok_or_else(|| corrupt("a job without input"))?,
        provider: row.try_get("provider")?,
        state: parse_state(row.try_get("state")?)?,
        winning_attempt: row.try_get("winning_attempt")?,
        result: json_column(row, "result")?,
        created_at: time(row.try_get("created_at")?)?,
        updated_at: time(row.try_get("updated_at")?)?,
        max_cost: row.try_get::<Option<String>, _>("max_cost")?.map(|m| m.parse()).transpose().map_err(corrupt)?,
        cost: JobCost::of(&attempts),
        attempts,
    })
}

fn read_attempt(row: &SqliteRow) -> Result<Attempt> {
    let origin: &str = row.try_get("a_origin")?;
    Ok(Attempt {
        number: row.try_get("a_number")?,
        id: AttemptId(row.try_get("a_id")?),
        provider: row.try_get("a_provider")?,
        state: parse_state(row.try_get("a_state")?)?,
        origin: AttemptOrigin::parse(origin).ok_or_else(|| corrupt(format!("attempt origin '{origin}'")))?,
        idempotency_key: row.try_get("a_idempotency_key")?,
        worker: row.try_get("a_worker")?,
        lease_until: optional_time(row.try_get("a_lease_until")?)?,
        output: json_column(row, "a_output")?,
        error: json_column(row, "a_error")?,
        created_at: time(row.try_get("a_created_at")?)?,
        not_before: time(row.try_get("a_not_before")?)?,
        started_at: optional_time(row.try_get("a_started_at")?)?,
        finished_at: optional_time(row.try_get("a_finished_at")?)?,
        usage: read_usage(row.try_get("a_prompt_tokens")?, row.try_get("a_completion_tokens")?, row.try_get("a_usage_estimated")?),
        cost: read_cost(row.try_get("a_cost")?, row.try_get("a_currency")?, row.try_get("a_price_version")?)?,
    })
}

/// A row of `jobs` without its attempts, for listings.
fn read_job_summary(row: &SqliteRow) -> Result<JobSummary> {
    Ok(JobSummary {
        id: JobId(row.try_get("id")?),
        idempotency_key: row.try_get("idempotency_key")?,
        task: row.try_get("task")?,
        provider: row.try_get("provider")?,
        state: parse_state(row.try_get("state")?)?,
        winning_attempt: row.try_get("winning_attempt")?,
        created_at: time(row.try_get("created_at")?)?,
        updated_at: time(row.try_get("updated_at")?)?,
    })
}

/// The (owner_id, job_id, number) of a row naming an attempt.
fn read_attempt_ref(row: &SqliteRow) -> Result<AttemptRef> {
    Ok(AttemptRef {
        owner: OwnerId::from_trusted(row.try_get("owner_id")?),
        job_id: JobId(row.try_get("job_id")?),
        number: row.try_get("number")?,
    })
}

fn read_job_with_attempts(rows: &[SqliteRow]) -> Result<Option<Job>> {
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
    tx: &mut Transaction<'_, Sqlite>,
    at: i64,
    owner: &OwnerId,
    job_id: JobId,
    kind: &str,
    attempt_number: Option<i32>,
    detail: Value,
) -> Result<()> {
    sqlx::query(
        r#"insert into job_events (owner_id, job_id, at, kind, attempt_number, detail)
           values (?, ?, ?, ?, ?, ?)"#,
    )
    .bind(owner.as_str())
    .bind(job_id.0)
    .bind(at)
    .bind(kind)
    .bind(attempt_number)
    .bind(Json(detail))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Reads the job a transition is about; the write lock the transaction
/// holds keeps it as read until commit.
async fn read_job_row(tx: &mut Transaction<'_, Sqlite>, owner: &OwnerId, job_id: JobId) -> Result<Option<SqliteRow>> {
    Ok(sqlx::query(r#"select state, task, provider, winning_attempt from jobs where owner_id = ? and id = ?"#)
        .bind(owner.as_str())
        .bind(job_id.0)
        .fetch_optional(&mut **tx)
        .await?)
}

/// The budget of a job (its own `max_cost` or its task's, the lower) and
/// its input, to cost attempts with; `None` when it has no budget.
async fn read_budget(
    tx: &mut Transaction<'_, Sqlite>,
    owner: &OwnerId,
    job_id: JobId,
    task: &str,
    rules: &dyn TaskRules,
) -> Result<Option<(Money, Value)>> {
    let row = sqlx::query(r#"select max_cost, input from jobs where owner_id = ? and id = ?"#)
        .bind(owner.as_str())
        .bind(job_id.0)
        .fetch_one(&mut **tx)
        .await?;
    stored_budget(rules, task, row.try_get("max_cost")?, || json_column(&row, "input")?.ok_or_else(|| corrupt("a job without input")))
}

async fn attempt_state(tx: &mut Transaction<'_, Sqlite>, attempt: &AttemptRef) -> Result<Option<AttemptState>> {
    let state: Option<String> =
        sqlx::query_scalar(r#"select state from attempts where owner_id = ? and job_id = ? and number = ?"#)
            .bind(attempt.owner.as_str())
            .bind(attempt.job_id.0)
            .bind(attempt.number)
            .fetch_optional(&mut **tx)
            .await?;
    state.map(|s| parse_state(&s)).transpose()
}

async fn read_attempts(tx: &mut Transaction<'_, Sqlite>, owner: &OwnerId, job_id: JobId) -> Result<Vec<Attempt>> {
    let rows = sqlx::query(&format!(
        r#"select {ATTEMPT_COLUMNS} from attempts a where a.owner_id = ? and a.job_id = ? order by a.number"#
    ))
    .bind(owner.as_str())
    .bind(job_id.0)
    .fetch_all(&mut **tx)
    .await?;
    rows.iter().map(read_attempt).collect()
}

/// Stores the job state that its attempts now imply (a terminal one stays).
async fn update_job_state(
    tx: &mut Transaction<'_, Sqlite>,
    at: i64,
    owner: &OwnerId,
    job_id: JobId,
    current: JobState,
) -> Result<JobState> {
    let states: Vec<String> = sqlx::query_scalar(r#"select state from attempts where owner_id = ? and job_id = ?"#)
        .bind(owner.as_str())
        .bind(job_id.0)
        .fetch_all(&mut **tx)
        .await?;
    let states = states.iter().map(|s| parse_state(s)).collect::<Result<Vec<AttemptState>>>()?;
    let derived = JobState::derive(current, states);
    if derived != current {
        sqlx::query(r#"update jobs set state = ?, updated_at = ? where owner_id = ? and id = ?"#)
            .bind(derived.as_str())
            .bind(at)
            .bind(owner.as_str())
            .bind(job_id.0)
            .execute(&mut **tx)
            .await?;
    }
    Ok(derived)
}

/// `state in (…)` for a guard, as a JSON array for `json_each`.
fn state_list(states: &[AttemptState]) -> String {
    Value::from(states.iter().map(|s| s.as_str()).collect::<Vec<_>>()).to_string()
}

async fn insert_attempt(
    tx: &mut Transaction<'_, Sqlite>,
    at: i64,
    owner: &OwnerId,
    job_id: JobId,
    number: i32,
    new: &NewAttempt,
    provider: &str,
) -> Result<Attempt> {
    let created = at;
    sqlx::query(
        r#"insert into attempts (owner_id, job_id, number, id, provider, state, origin, idempotency_key,
                                 created_at, not_before)
           values (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)"#,
    )
    .bind(owner.as_str())
    .bind(job_id.0)
    .bind(number)
    .bind(new.id.0)
    .bind(provider)
    .bind(new.origin.as_str())
    .bind(new.idempotency_key.as_ref().map(IdempotencyKey::as_str))
    .bind(created)
    .bind(created.saturating_add(micros(new.delay)))
    .execute(&mut **tx)
    .await?;
    // SQLite's RETURNING cannot name columns through an alias: read it back.
    let row = sqlx::query(&format!(
        r#"select {ATTEMPT_COLUMNS} from attempts a where a.owner_id = ? and a.job_id = ? and a.number = ?"#
    ))
    .bind(owner.as_str())
    .bind(job_id.0)
    .bind(number)
    .fetch_one(&mut **tx)
    .await?;
    read_attempt(&row)
}

async fn read_qualification_state<'e>(
    executor: impl sqlx::SqliteExecutor<'e>,
    provider: &str,
    task: &str,
    hash: &[u8; 32],
) -> Result<QualificationState> {
    let row = sqlx::query(
        r#"select contract_hash = ?3 as current, passed, created_at, json_extract(report, '$.summary') as summary
           from qualifications
           where provider = ?1 and task = ?2
           order by contract_hash = ?3 desc, created_at desc
           limit 1"#,
    )
    .bind(provider)
    .bind(task)
    .bind(&hash[..])
    .fetch_optional(executor)
    .await?;
    let Some(row) = row else { return Ok(QualificationState::Never) };
    let at = time(row.try_get("created_at")?)?;
    Ok(match (row.try_get::<bool, _>("current")?, row.try_get::<bool, _>("passed")?) {
        (true, true) => QualificationState::Qualified { at },
        (true, false) => {
            QualificationState::Failed { at, summary: row.try_get::<Option<String>, _>("summary")?.unwrap_or_default() }
        }
        (false, _) => QualificationState::Stale { at },
    })
}

/// The job's own provider always may serve it; any other needs a passing
/// qualification of the task's current contract (I5). `Err` says why not.
async fn check_qualified(
    tx: &mut Transaction<'_, Sqlite>,
    rules: &dyn TaskRules,
    task: &str,
    primary: &str,
    provider: &str,
) -> Result<std::result::Result<(), String>> {
    if provider == primary {
        return Ok(Ok(()));
    }
    let Some(hash) = rules.contract_hash(task, provider) else {
        return Ok(Err(format!("provider '{provider}' cannot serve task '{task}' here: one of them is not configured")));
    };
    let state = read_qualification_state(&mut **tx, provider, task, &hash).await?;
    Ok(state.refusal(provider, task).map_or(Ok(()), Err))
}

/// The retry policy's next attempt after a failure, admitted in the same
/// transaction: the first qualified candidate; skipped ones are recorded.
async fn schedule_next_attempt(
    tx: &mut Transaction<'_, Sqlite>,
    at: i64,
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
                let detail = json!({ "provider": candidate.provider, "reason": reason, "after": failed.number });
                append_event(tx, at, &failed.owner, failed.job_id, "failover-skipped", None, detail).await?;
            }
        }
    }
    let Some(next) = chosen else { return Ok(None) };
    if let Err(refusal) = check_admission(JobState::Failed, &states, rules.limits(task), true) {
        let detail = json!({ "problem": refusal.problem_type(), "provider": next.provider, "origin": "policy" });
        append_event(tx, at, &failed.owner, failed.job_id, "admission-refused", None, detail).await?;
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
    insert_attempt(tx, at, &failed.owner, failed.job_id, number, &new, &next.provider).await?;
    let job_state = update_job_state(tx, at, &failed.owner, failed.job_id, JobState::Failed).await?;
    let detail = json!({ "attempt_id": new.id, "provider": next.provider, "origin": "policy", "after": failed.number,
                         "delay_ms": next.delay.as_millis() as u64, "job_state": job_state.as_str() });
    append_event(tx, at, &failed.owner, failed.job_id, "attempt-admitted", Some(number), detail).await?;
    Ok(Some(Scheduled { number, provider: next.provider, delay: next.delay }))
}

impl SqliteStore {
    /// Settles a running or unknown attempt with an output through the job's
    /// compare-and-swap (I3).
    async fn settle_with_output(
        &self,
        attempt: &AttemptRef,
        output: &Value,
        from: &[AttemptState],
        resolution_reason: Option<&str>,
    ) -> Result<Transition> {
        let (_turn, mut tx) = self.write().await?;
        let at = now();
        let Some(job) = read_job_row(&mut tx, &attempt.owner, attempt.job_id).await? else {
            return Ok(Transition::NotFound);
        };
        let Some(current) = attempt_state(&mut tx, attempt).await? else {
            return Ok(Transition::NotFound);
        };
        if !from.contains(&current) {
            return Ok(Transition::Stale(current));
        }
        // The compare-and-swap: only a job that has not finished takes a winner.
        let won = sqlx::query(
            r#"update jobs set state = 'succeeded', winning_attempt = ?, result = ?, updated_at = ?
               where owner_id = ? and id = ? and state not in ('succeeded', 'canceled')"#,
        )
        .bind(attempt.number)
        .bind(Json(output))
        .bind(at)
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        let next = if won { AttemptState::Succeeded } else { AttemptState::Superseded };
        let settled = sqlx::query(
            r#"update attempts
               set state = ?, output = ?, finished_at = ?, lease_until = null, reconcile_after = null
               where owner_id = ? and job_id = ? and number = ? and state in (select value from json_each(?))"#,
        )
        .bind(next.as_str())
        .bind(Json(output))
        .bind(at)
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .bind(state_list(from))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if settled != 1 {
            return Err(corrupt("attempt changed under the write lock"));
        }
        let outcome = if won {
            let canceled: Vec<i32> = sqlx::query_scalar(
                r#"update attempts set state = 'canceled', finished_at = ?
                   where owner_id = ? and job_id = ? and state = 'pending'
                   returning number"#,
            )
            .bind(at)
            .bind(attempt.owner.as_str())
            .bind(attempt.job_id.0)
            .fetch_all(&mut *tx)
            .await?;
            let detail = json!({ "from": current.as_str(), "canceled": canceled, "reason": resolution_reason });
            append_event(&mut tx, at, &attempt.owner, attempt.job_id, "attempt-succeeded", Some(attempt.number), detail).await?;
            Transition::Won { canceled }
        } else {
            let winner: Option<i32> = job.try_get("winning_attempt")?;
            let detail = json!({ "loser": attempt.number, "winner": winner, "job_state": job.try_get::<String, _>("state")?,
                                 "reason": resolution_reason });
            append_event(&mut tx, at, &attempt.owner, attempt.job_id, "race-lost", Some(attempt.number), detail).await?;
            Transition::Lost { winner }
        };
        tx.commit().await?;
        if let Transition::Lost { winner } = outcome {
            log_race_lost(attempt, winner);
        }
        Ok(outcome)
    }

    /// Moves an attempt to `failed` or `unknown`, the job to the state that
    /// implies, and after a failure admits the retry policy's next attempt
    /// in the same transaction.
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
        let (_turn, mut tx) = self.write().await?;
        let at = now();
        let Some(job) = read_job_row(&mut tx, &attempt.owner, attempt.job_id).await? else {
            return Ok(Transition::NotFound);
        };
        let changed = sqlx::query(
            r#"update attempts
               set state = ?1, error = ?2, finished_at = ?3, lease_until = null,
                   reconcile_after = case when ?1 = 'unknown' then ?3 end
               where owner_id = ?4 and job_id = ?5 and number = ?6 and state in (select value from json_each(?7))"#,
        )
        .bind(next.as_str())
        .bind(Json(error))
        .bind(at)
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .bind(state_list(from))
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
        let job_state = update_job_state(&mut tx, at, &attempt.owner, attempt.job_id, current).await?;
        let detail = json!({ "error": error, "job_state": job_state.as_str(), "reason": reason });
        append_event(&mut tx, at, &attempt.owner, attempt.job_id, event, Some(attempt.number), detail).await?;
        let outcome = match (next, rules) {
            (AttemptState::Failed, Some(rules)) if job_state == JobState::Failed => {
                let task: String = job.try_get("task")?;
                let primary: String = job.try_get("provider")?;
                Transition::Failed { next: schedule_next_attempt(&mut tx, at, attempt, &task, &primary, rules).await? }
            }
            (AttemptState::Failed, _) => Transition::Failed { next: None },
            _ => Transition::Applied,
        };
        tx.commit().await?;
        Ok(outcome)
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn check_ready(&self) -> Result<()> {
        let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        let applied: Option<i64> = sqlx::query_scalar(r#"select max(version) from _sqlx_migrations where success"#)
            .fetch_one(&self.pool)
            .await?;
        if applied.unwrap_or(0) < latest {
            return Err(corrupt(format!("migrations not applied: database at {applied:?}, program at {latest}")));
        }
        Ok(())
    }

    async fn insert_api_key(&self, id: Uuid, owner: &OwnerId, role: KeyRole, token_hash: &[u8; 32]) -> Result<()> {
        sqlx::query(r#"insert into api_keys (owner_id, id, role, token_hash, created_at) values (?, ?, ?, ?, ?)"#)
            .bind(owner.as_str())
            .bind(id)
            .bind(role.as_str())
            .bind(&token_hash[..])
            .bind(now())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn find_api_key(&self, token_hash: &[u8; 32]) -> Result<Option<LiveKey>> {
        let row = sqlx::query(
            r#"select owner_id, id, role, token_hash from api_keys where token_hash = ? and revoked_at is null"#,
        )
        .bind(&token_hash[..])
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let hash: Vec<u8> = row.try_get("token_hash")?;
        Ok(Some(LiveKey {
            id: row.try_get("id")?,
            owner: OwnerId::from_trusted(row.try_get("owner_id")?),
            role: parse_state(row.try_get("role")?)?,
            token_hash: hash.try_into().map_err(|_| corrupt("a stored token hash is not 32 bytes"))?,
        }))
    }

    async fn revoke_api_key(&self, id: Uuid) -> Result<bool> {
        let changed = sqlx::query(r#"update api_keys set revoked_at = ? where id = ? and revoked_at is null"#)
            .bind(now())
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(changed > 0)
    }

    async fn list_api_keys(&self, owner: Option<&OwnerId>) -> Result<Vec<ApiKey>> {
        let rows = sqlx::query(
            r#"select owner_id, id, created_at, revoked_at, role from api_keys
               where ?1 is null or owner_id = ?1
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
                    created_at: time(row.try_get("created_at")?)?,
                    revoked_at: optional_time(row.try_get("revoked_at")?)?,
                    role: parse_state(row.try_get("role")?)?,
                })
            })
            .collect()
    }

    async fn has_api_keys(&self) -> Result<bool> {
        Ok(sqlx::query_scalar(r#"select exists (select 1 from api_keys)"#).fetch_one(&self.pool).await?)
    }

    async fn create_job(&self, new: &NewJob) -> Result<CreateJob> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.creates.lock().unwrap_or_else(|p| p.into_inner()).push(PendingCreate { new: new.clone(), answer });
        if let Some(created) = self.group_commit(answered).await? {
            return Ok(CreateJob::Created(new.created(time(created)?)));
        }
        match self.find_job_by_key(&new.owner, &new.idempotency_key).await? {
            Some(job) => Ok(CreateJob::Existing(job)),
            None => Err(corrupt("an idempotency key conflicted, but no job holds it")),
        }
    }

    async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>> {
        // One statement, so the job and its attempts come from one snapshot.
        let rows = sqlx::query(&format!(
            r#"select {JOB_COLUMNS}, {ATTEMPT_COLUMNS}
               from jobs j
               left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
               where j.owner_id = ? and j.id = ?
               order by a.number"#
        ))
        .bind(owner.as_str())
        .bind(id.0)
        .fetch_all(&self.pool)
        .await?;
        read_job_with_attempts(&rows)
    }

    async fn find_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>> {
        let rows = sqlx::query(&format!(
            r#"select {JOB_COLUMNS}, {ATTEMPT_COLUMNS}
               from jobs j
               left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
               where j.owner_id = ? and j.idempotency_key = ?
               order by a.number"#
        ))
        .bind(owner.as_str())
        .bind(key.as_str())
        .fetch_all(&self.pool)
        .await?;
        read_job_with_attempts(&rows)
    }

    async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>> {
        let rows = sqlx::query(
            r#"select id, idempotency_key, task, provider, state, winning_attempt, created_at, updated_at
               from jobs
               where owner_id = ?1
                 and (?2 is null or state = ?2)
                 and (?3 is null or task = ?3)
                 and (?4 is null or id < ?4)
               order by id desc
               limit ?5"#,
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
               where owner_id = ? and job_id = ?
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
                    at: time(row.try_get("at")?)?,
                    kind: row.try_get("kind")?,
                    attempt_number: row.try_get("attempt_number")?,
                    detail: json_column(row, "detail")?.unwrap_or(Value::Null),
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
        let (_turn, mut tx) = self.write().await?;
        let at = now();
        let Some(job) = read_job_row(&mut tx, owner, job_id).await? else {
            return Ok(Admission::JobNotFound);
        };
        let job_state: JobState = parse_state(job.try_get("state")?)?;
        let task: String = job.try_get("task")?;
        let primary: String = job.try_get("provider")?;
        let provider = new.provider.as_deref().unwrap_or(&primary);
        let attempts = read_attempts(&mut tx, owner, job_id).await?;

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
            let detail = json!({ "problem": refusal.problem_type(), "provider": provider, "reason": reason,
                                 "idempotency_key": new.idempotency_key.as_ref().map(IdempotencyKey::as_str),
                                 "origin": new.origin.as_str() });
            append_event(&mut tx, at, owner, job_id, "admission-refused", None, detail).await?;
            tx.commit().await?;
            return Ok(Admission::Refused { refusal, reason });
        }

        let number = i32::try_from(attempts.len() + 1).map_err(corrupt)?;
        let attempt = insert_attempt(&mut tx, at, owner, job_id, number, new, provider).await?;
        let job_state = update_job_state(&mut tx, at, owner, job_id, job_state).await?;
        let detail = json!({ "attempt_id": new.id, "provider": provider, "origin": new.origin.as_str(),
                             "job_state": job_state.as_str() });
        append_event(&mut tx, at, owner, job_id, "attempt-admitted", Some(number), detail).await?;
        tx.commit().await?;
        Ok(Admission::Admitted(attempt))
    }

    async fn claim_attempts(&self, worker: &str, max: u32, leases: &Leases) -> Result<Vec<ClaimedAttempt>> {
        let names = Value::from(leases.by_provider.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>()).to_string();
        // The write lock makes the claim atomic: no other claimer runs between
        // the select and the updates.
        let (_turn, mut tx) = self.write().await?;
        let at = now();
        let rows = sqlx::query(
            r#"select a.owner_id, a.job_id, a.number, a.id, a.provider, j.task, j.input
               from attempts a
               join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
               where a.state = 'pending' and a.not_before <= ?1
                 and a.provider in (select value from json_each(?2))
                 and j.state not in ('succeeded', 'canceled')
               order by a.not_before
               limit ?3"#,
        )
        .bind(at)
        .bind(&names)
        .bind(i64::from(max))
        .fetch_all(&mut *tx)
        .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let attempt = read_attempt_ref(row)?;
            let provider: String = row.try_get("provider")?;
            let lease = leases.by_provider.iter().find(|(name, _)| *name == provider).map_or(leases.default, |(_, l)| *l);
            let lease_until = at.saturating_add(micros(lease));
            sqlx::query(
                r#"update attempts set state = 'running', worker = ?, started_at = ?, lease_until = ?
                   where owner_id = ? and job_id = ? and number = ? and state = 'pending'"#,
            )
            .bind(worker)
            .bind(at)
            .bind(lease_until)
            .bind(attempt.owner.as_str())
            .bind(attempt.job_id.0)
            .bind(attempt.number)
            .execute(&mut *tx)
            .await?;
            sqlx::query(r#"update jobs set state = 'running', updated_at = ? where owner_id = ? and id = ?"#)
                .bind(at)
                .bind(attempt.owner.as_str())
                .bind(attempt.job_id.0)
                .execute(&mut *tx)
                .await?;
            let id = AttemptId(row.try_get("id")?);
            let detail = json!({ "worker": worker, "attempt_id": id, "lease_until": time(lease_until)? });
            append_event(&mut tx, at, &attempt.owner, attempt.job_id, "attempt-claimed", Some(attempt.number), detail).await?;
            claimed.push(ClaimedAttempt {
                attempt,
                id,
                provider,
                task: row.try_get("task")?,
                input: json_column(row, "input")?.unwrap_or(Value::Null),
                lease_until: time(lease_until)?,
            });
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn expire_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        let rows = sqlx::query(
            r#"select owner_id, job_id, number from attempts
               where state = 'running' and lease_until < ?
               order by lease_until
               limit ?"#,
        )
        .bind(now())
        .bind(i64::from(max))
        .fetch_all(&self.pool)
        .await?;
        let error = AttemptError::new("lease-expired", "the worker running this attempt stopped answering before it finished");
        let mut expired = Vec::with_capacity(rows.len());
        for row in rows {
            let attempt = read_attempt_ref(&row)?;
            let outcome = self
                .settle_without_output(&attempt, AttemptState::Unknown, &[AttemptState::Running], &error, "attempt-unknown", None, None)
                .await?;
            if outcome == Transition::Applied {
                expired.push(attempt);
            }
        }
        Ok(expired)
    }

    async fn claim_reconciliations(&self, providers: &[String], max: u32, hold: Duration) -> Result<Vec<UnknownAttempt>> {
        let names = Value::from(providers.iter().map(String::as_str).collect::<Vec<_>>()).to_string();
        let (_turn, mut tx) = self.write().await?;
        let at = now();
        let rows = sqlx::query(
            r#"select a.owner_id, a.job_id, a.number, a.id, a.provider, a.reconcile_count, a.finished_at, j.task
               from attempts a
               join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
               where a.state = 'unknown' and a.provider in (select value from json_each(?1)) and a.reconcile_after <= ?2
               order by a.reconcile_after
               limit ?3"#,
        )
        .bind(&names)
        .bind(at)
        .bind(i64::from(max))
        .fetch_all(&mut *tx)
        .await?;
        let mut due = Vec::with_capacity(rows.len());
        for row in &rows {
            let attempt = read_attempt_ref(row)?;
            sqlx::query(
                r#"update attempts set reconcile_after = ?, reconcile_count = reconcile_count + 1
                   where owner_id = ? and job_id = ? and number = ?"#,
            )
            .bind(at.saturating_add(micros(hold)))
            .bind(attempt.owner.as_str())
            .bind(attempt.job_id.0)
            .bind(attempt.number)
            .execute(&mut *tx)
            .await?;
            let finished: Option<i64> = row.try_get("finished_at")?;
            due.push(UnknownAttempt {
                attempt,
                id: AttemptId(row.try_get("id")?),
                provider: row.try_get("provider")?,
                task: row.try_get("task")?,
                unknown_for: Duration::from_micros(u64::try_from(at - finished.unwrap_or(at)).unwrap_or(0)),
                reconcile_count: row.try_get::<i32, _>("reconcile_count")? + 1,
            });
        }
        tx.commit().await?;
        Ok(due)
    }

    async fn postpone_reconciliation(&self, attempt: &AttemptRef, delay: Duration) -> Result<()> {
        sqlx::query(
            r#"update attempts set reconcile_after = ?
               where owner_id = ? and job_id = ? and number = ? and state = 'unknown'"#,
        )
        .bind(now().saturating_add(micros(delay)))
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn sample_gauges(&self) -> Result<Gauges> {
        let at = now();
        let row = sqlx::query(
            r#"select
                   (select count(*) from attempts where state = 'pending' and not_before <= ?1) as pending_due,
                   (select count(*) from attempts where state = 'unknown') as unknown_open,
                   (select min(finished_at) from attempts where state = 'unknown') as oldest"#,
        )
        .bind(at)
        .fetch_one(&self.pool)
        .await?;
        let oldest: Option<i64> = row.try_get("oldest")?;
        Ok(Gauges {
            pending_due: row.try_get("pending_due")?,
            unknown_open: row.try_get("unknown_open")?,
            oldest_unknown: Duration::from_micros(oldest.map_or(0, |o| u64::try_from(at - o).unwrap_or(0))),
        })
    }

    async fn cancel_job(&self, owner: &OwnerId, id: JobId) -> Result<Cancel> {
        let (turn, mut tx) = self.write().await?;
        let at = now();
        let Some(job) = read_job_row(&mut tx, owner, id).await? else {
            return Ok(Cancel::NotFound);
        };
        let state: JobState = parse_state(job.try_get("state")?)?;
        if state == JobState::Canceled || state == JobState::Succeeded {
            drop(tx);
            drop(turn);
            let job = self.get_job(owner, id).await?.ok_or_else(|| corrupt("a job vanished"))?;
            return Ok(if state == JobState::Canceled { Cancel::AlreadyCanceled(job) } else { Cancel::Succeeded(job) });
        }
        sqlx::query(r#"update jobs set state = 'canceled', updated_at = ? where owner_id = ? and id = ?"#)
            .bind(at)
            .bind(owner.as_str())
            .bind(id.0)
            .execute(&mut *tx)
            .await?;
        let canceled: Vec<i32> = sqlx::query_scalar(
            r#"update attempts set state = 'canceled', finished_at = ?
               where owner_id = ? and job_id = ? and state = 'pending'
               returning number"#,
        )
        .bind(at)
        .bind(owner.as_str())
        .bind(id.0)
        .fetch_all(&mut *tx)
        .await?;
        append_event(&mut tx, at, owner, id, "job-canceled", None, json!({ "from": state.as_str(), "canceled": canceled })).await?;
        tx.commit().await?;
        drop(turn);
        let job = self.get_job(owner, id).await?.ok_or_else(|| corrupt("a canceled job vanished"))?;
        Ok(Cancel::Canceled(job))
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
        let created = now();
        sqlx::query(
            r#"insert into qualifications (id, provider, task, contract_hash, passed, report, created_at)
               values (?, ?, ?, ?, ?, ?, ?)"#,
        )
        .bind(id)
        .bind(provider)
        .bind(task)
        .bind(&contract_hash[..])
        .bind(passed)
        .bind(Json(report))
        .bind(created)
        .execute(&self.pool)
        .await?;
        Ok(QualificationRecord {
            id,
            provider: provider.to_owned(),
            task: task.to_owned(),
            contract_hash: *contract_hash,
            passed,
            report: report.clone(),
            created_at: time(created)?,
        })
    }

    async fn qualification_state(&self, provider: &str, task: &str, contract_hash: &[u8; 32]) -> Result<QualificationState> {
        read_qualification_state(&self.pool, provider, task, contract_hash).await
    }

    async fn latest_qualification(&self, provider: &str, task: &str) -> Result<Option<QualificationRecord>> {
        let row = sqlx::query(
            r#"select id, contract_hash, passed, report, created_at from qualifications
               where provider = ? and task = ?
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
                report: json_column(&row, "report")?.unwrap_or(Value::Null),
                created_at: time(row.try_get("created_at")?)?,
            })
        })
        .transpose()
    }

    async fn finish_attempt(&self, attempt: &AttemptRef, output: &Value) -> Result<Transition> {
        self.settle_with_output(attempt, output, &[AttemptState::Running, AttemptState::Unknown], None).await
    }

    async fn fail_attempt(&self, attempt: &AttemptRef, error: &AttemptError, rules: &dyn TaskRules) -> Result<Transition> {
        let from = [AttemptState::Running, AttemptState::Unknown];
        self.settle_without_output(attempt, AttemptState::Failed, &from, error, "attempt-failed", None, Some(rules)).await
    }

    async fn mark_unknown(&self, attempt: &AttemptRef, error: &AttemptError) -> Result<Transition> {
        let from = [AttemptState::Running];
        self.settle_without_output(attempt, AttemptState::Unknown, &from, error, "attempt-unknown", None, None).await
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
                let from = [AttemptState::Unknown];
                self.settle_without_output(attempt, AttemptState::Failed, &from, &error, "attempt-resolved", Some(reason), Some(rules))
                    .await
            }
        }
    }

    async fn find_unknown_attempt_owner(&self, job_id: JobId, number: i32) -> Result<Option<OwnerId>> {
        let owner: Option<String> =
            sqlx::query_scalar(r#"select owner_id from attempts where job_id = ? and number = ? and state = 'unknown'"#)
                .bind(job_id.0)
                .bind(number)
                .fetch_optional(&self.pool)
                .await?;
        Ok(owner.map(OwnerId::from_trusted))
    }

    async fn record_usage(&self, attempt: &AttemptRef, usage: &AttemptUsage) -> Result<bool> {
        let cost = usage.cost.as_ref();
        let changed = sqlx::query(
            r#"update attempts
               set prompt_tokens = ?, completion_tokens = ?, usage_estimated = ?, cost = ?, currency = ?, price_version = ?
               where owner_id = ? and job_id = ? and number = ?"#,
        )
        .bind(usage.usage.prompt_tokens)
        .bind(usage.usage.completion_tokens)
        .bind(usage.usage.estimated)
        .bind(cost.map(|c| c.amount.to_string()))
        .bind(cost.map(|c| c.currency.as_str()))
        .bind(cost.map(|c| c.price_version.as_str()))
        .bind(attempt.owner.as_str())
        .bind(attempt.job_id.0)
        .bind(attempt.number)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(changed == 1)
    }

    async fn list_usage(&self, owner: &OwnerId, filter: &UsageFilter) -> Result<Vec<UsageRow>> {
        let rows = sqlx::query(
            r#"select j.task, a.provider, a.state, a.created_at, a.prompt_tokens, a.completion_tokens,
                      a.usage_estimated, a.cost, a.currency, a.price_version
               from attempts a
               join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
               where a.owner_id = ? and a.created_at >= ? and a.created_at < ? and a.prompt_tokens is not null
               order by a.created_at"#,
        )
        .bind(owner.as_str())
        .bind(filter.from.timestamp_micros())
        .bind(filter.to.timestamp_micros())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(UsageRow {
                    task: row.try_get("task")?,
                    provider: row.try_get("provider")?,
                    state: parse_state(row.try_get("state")?)?,
                    created_at: time(row.try_get("created_at")?)?,
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
               where (?1 is null or owner_id = ?1)
                 and (?2 is null or idempotency_key = ?2)
                 and (?3 is null or state = ?3)
                 and (?4 is null or task = ?4)
                 and (?5 is null or id < ?5)
               order by id desc
               limit ?6"#,
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
        let owner: Option<String> = sqlx::query_scalar(r#"select owner_id from jobs where id = ?"#)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(owner.map(OwnerId::from_trusted))
    }

    async fn list_unknown_attempts(&self, owner: Option<&OwnerId>, limit: u32) -> Result<Vec<super::OpenUnknown>> {
        let rows = sqlx::query(
            r#"select a.owner_id, a.job_id, a.number, a.provider, j.task, a.finished_at, a.error, a.reconcile_count
               from attempts a join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
               where (?1 is null or a.owner_id = ?1) and a.state = 'unknown'
               order by a.finished_at, a.job_id, a.number
               limit ?2"#,
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
                    unknown_since: optional_time(row.try_get("finished_at")?)?,
                    error: json_column(row, "error")?,
                    reconcile_count: row.try_get("reconcile_count")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_in_memory_database_is_refused_because_it_cannot_keep_a_job() {
        let options =
            SqliteOptions { max_connections: 1, busy_timeout: Duration::from_secs(1), acquire_timeout: Duration::from_secs(1) };
        for url in ["sqlite::memory:", "sqlite://file.db?mode=memory"] {
            let error = SqliteStore::connect_lazy(url, &options).unwrap_err();
            assert!(error.to_string().contains("in-memory"), "{error}");
        }
    }
}
