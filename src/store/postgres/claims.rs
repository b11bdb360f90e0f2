//! The Postgres statements of a claim ([`crate::store::claims`]), and of
//! the providers' shared state (pauses, token buckets).

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PgTransaction;

use crate::domain::AttemptId;
use crate::store::WaitingFacts;
use crate::store::driver::{Candidate, ProviderGate, RunningCounts};
use crate::store::rows::BindAttempt;
use crate::store::rows::names::*;
use crate::store::rows::{AttemptRefRow, stored_trace};
use crate::store::{AttemptRef, Result};

/// Up to `$2` owners with pending attempts after `$1`, in owner order: one
/// probe of the `attempts_claimable` index per owner (a skip scan), each
/// with the largest `max_in_flight` its live keys set.
pub(super) static PENDING_OWNERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with recursive owners (owner_id, n) as (
               (select owner_id, 1 from attempts
                where state = '{PENDING}' and not_before is not null and owner_id > $1 order by owner_id limit 1)
               union all
               select (select a.owner_id from attempts a
                       where a.state = '{PENDING}' and a.not_before is not null and a.owner_id > o.owner_id
                       order by a.owner_id limit 1),
                      o.n + 1
               from owners o where o.owner_id is not null and o.n < $2
           )
           select o.owner_id,
                  (select max(k.max_in_flight) from api_keys k
                   where k.owner_id = o.owner_id and k.revoked_at is null) as max_in_flight
           from owners o where o.owner_id is not null"#
    )
});

/// Each owner's claim lock, in the order given (name order). Binds: owners.
pub(super) const LOCK_OWNERS: &str = r#"select count(pg_advisory_xact_lock(hashtextextended('onejob.claim:' || owner_id, 0)))
       from unnest($1::text[]) with ordinality as o(owner_id, n)"#;

/// Each provider's state row, made if missing, locked in name order.
/// Binds: providers.
pub(super) const LOCK_PROVIDERS: &str = r#"insert into provider_state (provider)
    select provider from unnest($1::text[]) as p(provider) order by provider
    on conflict (provider) do update set provider = excluded.provider"#;

/// Running attempts per owner of `$1` and per provider of `$2` (the
/// `attempts_leased` index holds every running attempt).
pub(super) static RUNNING_COUNTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select 'owner' as kind, owner_id as name, count(*) as running from attempts
           where state = '{RUNNING}' and owner_id = any($1::text[]) group by owner_id
           union all
           select 'provider', provider, count(*) from attempts
           where state = '{RUNNING}' and provider = any($2::text[]) group by provider"#
    )
});

/// The stored state of providers. Binds: providers. (The buckets' times
/// are the clock's, not the transaction's start: a claim may have waited
/// for the row's lock, and must not refill from before the last write.)
pub(super) const PROVIDER_GATES: &str = r#"select provider,
        greatest(0, coalesce(extract(epoch from paused_until - now()), 0))::float8 as paused_for,
        requests,
        coalesce(extract(epoch from clock_timestamp() - requests_at), 0)::float8 as requests_idle
    from provider_state where provider = any($1::text[])"#;

/// One owner's due pending attempts on the given providers, whose jobs
/// have not finished, oldest first, locked; rows another claimer holds are
/// skipped. Binds: owner, providers, how many.
pub(super) static CLAIM_CANDIDATES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.id, a.provider, a.origin, a.traceparent, a.tracestate, j.task, j.input,
                  extract(epoch from now() - a.created_at)::float8 as waited
           from attempts a
           join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where a.owner_id = $1 and a.state = '{PENDING}' and a.not_before <= now()
             and a.provider = any($2::text[])
             and j.state not in ({terminal})
           order by a.not_before
           limit $3
           for update of a, j skip locked"#,
        terminal = JOB_TERMINAL.as_str()
    )
});

/// Starts one owner's locked candidates: running under the worker's
/// leases, their jobs running, an event each. Binds: owner, worker, job
/// ids, numbers, leases (s). Each table is read by the job ids as an
/// index condition (`= any($3)`), whatever join the planner picks: never
/// the owner's whole backlog. A lease's end is `to_timestamp(… + s)`,
/// not `now() + interval`: Citus refuses a stable function of a column in
/// an update, which `timestamptz + interval` is.
pub(super) static START_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with started as (
               update attempts a
               set state = '{RUNNING}', worker = $2, started_at = now(),
                   lease_until = to_timestamp(extract(epoch from now()) + s.seconds)
               from unnest($3::uuid[], $4::int[], $5::float8[]) as s(job_id, number, seconds)
               where a.owner_id = $1 and a.job_id = any($3) and a.job_id = s.job_id and a.number = s.number
                 and a.state = '{PENDING}'
               returning a.job_id, a.number, a.id, a.lease_until
           ), running_jobs as (
               update jobs j set state = '{JOB_WITH_RUNNING_ATTEMPT}', updated_at = now()
               from started s
               where j.owner_id = $1 and j.id = any($3) and j.id = s.job_id
           ), started_events as (
               insert into job_events (owner_id, job_id, kind, attempt_number, detail)
               select $1, job_id, '{EVENT_ATTEMPT_CLAIMED}', number,
                      jsonb_build_object('worker', $2::text, 'attempt_id', id, 'lease_until', lease_until)
               from started
           )
           select job_id, number, lease_until from started"#
    )
});

/// Writes a provider's request bucket. Binds: provider, level. (An
/// upsert, the clock read in the row to insert: Citus refuses a volatile
/// function in an update.)
pub(super) const PUT_REQUESTS: &str = r#"insert into provider_state (provider, requests, requests_at)
    values ($1, $2, clock_timestamp())
    on conflict (provider) do update set requests = excluded.requests, requests_at = excluded.requests_at"#;

/// Pauses a provider; a longer pause stays. Binds: provider, seconds.
pub(super) const PAUSE_PROVIDER: &str = r#"insert into provider_state (provider, paused_until)
    values ($1, now() + make_interval(secs => $2))
    on conflict (provider) do update
    set paused_until = greatest(provider_state.paused_until, excluded.paused_until)"#;

/// Moves a running attempt back to pending, unless it was as many times
/// as allowed (a null limit: not counted). Binds: owner, job, number,
/// delay (s), most requeues.
pub(super) static REQUEUE_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update attempts
           set state = '{PENDING}', worker = null, lease_until = null, started_at = null,
               not_before = now() + make_interval(secs => $4),
               requeues = requeues + case when $5::int8 is null then 0 else 1 end
           where owner_id = $1 and job_id = $2 and number = $3 and state = '{RUNNING}'
             and ($5::int8 is null or requeues < $5::int8)"#
    )
});

/// Takes `$2` tokens from a provider's token bucket of `$3` per minute if
/// it holds them (or is full, for a request larger than the bucket):
/// the level left, or no row. Binds: provider, tokens, per minute. The
/// clock is read once, in the row to insert (`excluded.tokens_at`): Citus
/// refuses a function that is not immutable in an upsert's update.
pub(super) const RESERVE_TOKENS: &str = r#"insert into provider_state (provider, tokens, tokens_at)
    values ($1, $3::float8 - $2::float8, clock_timestamp())
    on conflict (provider) do update
    set tokens = least($3::float8, coalesce(provider_state.tokens, $3::float8)
                           + coalesce(extract(epoch from excluded.tokens_at - provider_state.tokens_at), 0) * $3::float8 / 60.0) - $2::float8,
        tokens_at = excluded.tokens_at
    where least($3::float8, coalesce(provider_state.tokens, $3::float8)
                    + coalesce(extract(epoch from excluded.tokens_at - provider_state.tokens_at), 0) * $3::float8 / 60.0) >= least($2::float8, $3::float8)
    returning tokens"#;

/// A provider's token bucket level now. Binds: provider, per minute.
pub(super) const TOKENS_LEFT: &str = r#"select least($2::float8, coalesce(tokens, $2::float8)
        + coalesce(extract(epoch from clock_timestamp() - tokens_at), 0) * $2::float8 / 60.0)::float8
    from provider_state where provider = $1"#;

/// What a queued job waits for. Binds: owner, job.
pub(super) static WAITING_FACTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with waiting as (
               select a.provider, a.not_before from attempts a
               where a.owner_id = $1 and a.job_id = $2 and a.state = '{PENDING}'
               limit 1
           )
           select w.provider,
                  extract(epoch from w.not_before - now())::float8 as due_in,
                  greatest(0, coalesce(extract(epoch from p.paused_until - now()), 0))::float8 as paused_for,
                  (select count(*) from attempts r where r.owner_id = $1 and r.state = '{RUNNING}') as owner_running,
                  (select count(*) from attempts r
                   where r.state = '{RUNNING}' and r.provider = (select provider from waiting)) as provider_running,
                  (select max(k.max_in_flight) from api_keys k where k.owner_id = $1 and k.revoked_at is null) as owner_limit,
                  p.requests,
                  coalesce(extract(epoch from now() - p.requests_at), 0)::float8 as requests_idle
           from waiting w left join provider_state p on p.provider = w.provider"#
    )
});

pub(super) async fn waiting_facts(
    pool: &super::bounded::Pool,
    owner: &str,
    job: uuid::Uuid,
) -> Result<Option<WaitingFacts>> {
    Ok(sqlx::query_as(WAITING_FACTS.as_str()).bind(owner).bind(job).fetch_optional(pool).await?)
}

pub(super) async fn lock_claims(tx: &mut PgTransaction, owners: &[String], providers: &[String]) -> Result<()> {
    if !providers.is_empty() {
        sqlx::query(LOCK_PROVIDERS).bind(providers).execute(&mut *tx).await?;
    }
    if !owners.is_empty() {
        sqlx::query(LOCK_OWNERS).bind(owners).execute(&mut *tx).await?;
    }
    Ok(())
}

pub(super) async fn running_counts(
    tx: &mut PgTransaction,
    owners: &[String],
    providers: &[String],
) -> Result<RunningCounts> {
    let rows: Vec<(String, String, i64)> =
        sqlx::query_as(RUNNING_COUNTS.as_str()).bind(owners).bind(providers).fetch_all(&mut *tx).await?;
    Ok(RunningCounts::from_rows(rows))
}

pub(super) async fn provider_gates(tx: &mut PgTransaction, providers: &[String]) -> Result<Vec<ProviderGate>> {
    Ok(sqlx::query_as(PROVIDER_GATES).bind(providers).fetch_all(&mut *tx).await?)
}

pub(super) async fn claim_candidates(
    tx: &mut PgTransaction,
    owner: &str,
    providers: &[String],
    max: u32,
) -> Result<Vec<Candidate>> {
    let rows = sqlx::query(CLAIM_CANDIDATES.as_str())
        .bind(owner)
        .bind(providers)
        .bind(i64::from(max))
        .fetch_all(&mut *tx)
        .await?;
    rows.iter().map(candidate).collect()
}

fn candidate(row: &PgRow) -> Result<Candidate> {
    Ok(Candidate {
        attempt: AttemptRef::from(<AttemptRefRow as sqlx::FromRow<PgRow>>::from_row(row)?),
        id: AttemptId(row.try_get("id")?),
        provider: row.try_get("provider")?,
        origin: row.try_get("origin")?,
        task: row.try_get("task")?,
        input: row.try_get("input")?,
        trace: stored_trace(row.try_get("traceparent")?, row.try_get("tracestate")?),
        waited: row.try_get("waited")?,
    })
}

pub(super) async fn start_attempts(
    tx: &mut PgTransaction,
    worker: &str,
    candidates: &[Candidate],
    leases: &[Duration],
) -> Result<Vec<DateTime<Utc>>> {
    let Some(first) = candidates.first() else { return Ok(Vec::new()) };
    let jobs: Vec<uuid::Uuid> = candidates.iter().map(|c| c.attempt.job_id.0).collect();
    let numbers: Vec<i32> = candidates.iter().map(|c| c.attempt.number).collect();
    let seconds: Vec<f64> = leases.iter().map(Duration::as_secs_f64).collect();
    let rows: Vec<(uuid::Uuid, i32, DateTime<Utc>)> = sqlx::query_as(START_ATTEMPTS.as_str())
        .bind(first.attempt.owner.as_str())
        .bind(worker)
        .bind(&jobs)
        .bind(&numbers)
        .bind(&seconds)
        .fetch_all(&mut *tx)
        .await?;
    // Each candidate was locked by this transaction: every one started.
    candidates
        .iter()
        .map(|c| {
            rows.iter()
                .find(|(job, number, _)| *job == c.attempt.job_id.0 && *number == c.attempt.number)
                .map(|(_, _, until)| *until)
                .ok_or_else(|| crate::store::corrupt("a locked pending attempt did not start"))
        })
        .collect()
}

pub(super) async fn put_requests(tx: &mut PgTransaction, provider: &str, level: f64) -> Result<()> {
    sqlx::query(PUT_REQUESTS).bind(provider).bind(level).execute(&mut *tx).await?;
    Ok(())
}

pub(super) async fn pause_provider(tx: &mut PgTransaction, provider: &str, pause: Duration) -> Result<()> {
    sqlx::query(PAUSE_PROVIDER).bind(provider).bind(pause.as_secs_f64()).execute(&mut *tx).await?;
    Ok(())
}

pub(super) async fn requeue_attempt(
    tx: &mut PgTransaction,
    attempt: &AttemptRef,
    delay: Duration,
    max: Option<u32>,
) -> Result<u64> {
    let done = sqlx::query(REQUEUE_ATTEMPT.as_str())
        .bind_attempt(attempt)
        .bind(delay.as_secs_f64())
        .bind(max.map(i64::from))
        .execute(&mut *tx)
        .await?;
    Ok(done.rows_affected())
}

/// Takes `tokens` from the provider's bucket of `per_minute`: `None` when
/// taken, else how long until the bucket holds them.
pub(super) async fn reserve_tokens(
    pool: &super::bounded::Pool,
    provider: &str,
    tokens: u64,
    per_minute: u32,
) -> Result<Option<Duration>> {
    let needed = tokens as f64;
    let size = f64::from(per_minute);
    let taken: Option<f64> =
        sqlx::query_scalar(RESERVE_TOKENS).bind(provider).bind(needed).bind(size).fetch_optional(pool).await?;
    if taken.is_some() {
        return Ok(None);
    }
    let level: Option<f64> = sqlx::query_scalar(TOKENS_LEFT).bind(provider).bind(size).fetch_optional(pool).await?;
    let wait = crate::store::claims::refill_wait(level.unwrap_or(size), needed, per_minute);
    Ok(Some(wait.max(Duration::from_millis(10))))
}
