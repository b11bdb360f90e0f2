//! The SQLite statements of a claim ([`crate::store::claims`]), and of the
//! providers' shared state (pauses, token buckets). The write transaction
//! is the one writer: nothing needs a lock of its own. Times are
//! microseconds since the epoch.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use sqlx::types::Json;

use super::{SqliteTransaction, micros, time};
use crate::domain::AttemptId;
use crate::store::WaitingFacts;
use crate::store::driver::{Candidate, ProviderGate, RunningCounts};
use crate::store::rows::BindAttempt;
use crate::store::rows::names::*;
use crate::store::rows::{AttemptRefRow, stored_trace};
use crate::store::{AttemptRef, Result};

/// Up to ?2 owners with pending attempts after ?1, in owner order (a skip
/// scan of the `attempts_claimable` index), each with the largest
/// `max_in_flight` its live keys set.
pub(super) static PENDING_OWNERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with recursive owners (owner_id, n) as (
               select (select owner_id from attempts
                       where state = '{PENDING}' and owner_id > ?1 order by owner_id limit 1), 1
               union all
               select (select a.owner_id from attempts a
                       where a.state = '{PENDING}' and a.owner_id > o.owner_id order by a.owner_id limit 1),
                      o.n + 1
               from owners o where o.owner_id is not null and o.n < ?2
           )
           select o.owner_id,
                  (select max(k.max_in_flight) from api_keys k
                   where k.owner_id = o.owner_id and k.revoked_at is null) as max_in_flight
           from owners o where o.owner_id is not null"#
    )
});

/// Running attempts per owner of ?1 and per provider of ?2 (JSON arrays).
/// Counted through the index of running attempts: without statistics,
/// SQLite's planner would read every attempt an owner ever had by the
/// primary key instead (what a poll of a queued job cost: 300 ms at 50,000
/// jobs of one owner).
pub(super) static RUNNING_COUNTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select 'owner' as kind, owner_id as name, count(*) as running from attempts indexed by attempts_leased
           where state = '{RUNNING}' and owner_id in (select value from json_each(?1)) group by owner_id
           union all
           select 'provider', provider, count(*) from attempts
           where state = '{RUNNING}' and provider in (select value from json_each(?2)) group by provider"#
    )
});

/// The stored state of providers. Binds: now, providers (JSON array).
pub(super) const PROVIDER_GATES: &str = r#"select provider,
        max(0, coalesce(paused_until - ?1, 0)) / 1e6 as paused_for,
        requests,
        coalesce(?1 - requests_at, 0) / 1e6 as requests_idle
    from provider_state where provider in (select value from json_each(?2))"#;

/// One owner's due pending attempts on the given providers, whose jobs
/// have not finished, oldest first. Binds: owner, now, providers (JSON
/// array), how many.
pub(super) static CLAIM_CANDIDATES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.id, a.provider, a.origin, a.traceparent, a.tracestate, j.task, j.input,
                  (?2 - a.created_at) / 1e6 as waited
           from attempts a
           join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where a.owner_id = ?1 and a.state = '{PENDING}' and a.not_before <= ?2
             and a.provider in (select value from json_each(?3))
             and j.state not in ({terminal})
           order by a.not_before
           limit ?4"#,
        terminal = JOB_TERMINAL.as_str()
    )
});

/// Writes a provider's request bucket. Binds: provider, level, now.
pub(super) const PUT_REQUESTS: &str = r#"insert into provider_state (provider, requests, requests_at) values (?1, ?2, ?3)
    on conflict (provider) do update set requests = excluded.requests, requests_at = excluded.requests_at"#;

/// Pauses a provider until ?2; a longer pause stays.
pub(super) const PAUSE_PROVIDER: &str = r#"insert into provider_state (provider, paused_until) values (?1, ?2)
    on conflict (provider) do update
    set paused_until = max(coalesce(provider_state.paused_until, 0), excluded.paused_until)"#;

/// Moves a running attempt back to pending, due at ?4, unless it was ?5
/// times already (null: not counted). Binds: owner, job, number, due, most
/// requeues.
pub(super) static REQUEUE_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update attempts set state = '{PENDING}', worker = null, lease_until = null, started_at = null, not_before = ?4,
               requeues = requeues + (?5 is not null)
           where owner_id = ?1 and job_id = ?2 and number = ?3 and state = '{RUNNING}' and (?5 is null or requeues < ?5)"#
    )
});

/// A provider's token bucket. Binds: provider.
pub(super) const TOKENS: &str = r#"select tokens, tokens_at from provider_state where provider = ?1"#;

/// Writes a provider's token bucket. Binds: provider, level, now.
pub(super) const PUT_TOKENS: &str = r#"insert into provider_state (provider, tokens, tokens_at) values (?1, ?2, ?3)
    on conflict (provider) do update set tokens = excluded.tokens, tokens_at = excluded.tokens_at"#;

/// What a queued job waits for, its owner's running attempts counted as in
/// [`RUNNING_COUNTS`]. Binds: owner, job, now.
pub(super) static WAITING_FACTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.provider,
                  (a.not_before - ?3) / 1e6 as due_in,
                  max(0, coalesce(p.paused_until - ?3, 0)) / 1e6 as paused_for,
                  (select count(*) from attempts r indexed by attempts_leased
                   where r.owner_id = ?1 and r.state = '{RUNNING}') as owner_running,
                  (select count(*) from attempts r where r.state = '{RUNNING}' and r.provider = a.provider) as provider_running,
                  (select max(k.max_in_flight) from api_keys k where k.owner_id = ?1 and k.revoked_at is null) as owner_limit,
                  p.requests,
                  coalesce(?3 - p.requests_at, 0) / 1e6 as requests_idle
           from attempts a left join provider_state p on p.provider = a.provider
           where a.owner_id = ?1 and a.job_id = ?2 and a.state = '{PENDING}'"#
    )
});

pub(super) async fn waiting_facts(
    pool: &sqlx::SqlitePool,
    owner: &str,
    job: uuid::Uuid,
    at: i64,
) -> Result<Option<WaitingFacts>> {
    Ok(sqlx::query_as(WAITING_FACTS.as_str()).bind(owner).bind(job).bind(at).fetch_optional(pool).await?)
}

pub(super) async fn running_counts(
    tx: &mut SqliteTransaction,
    owners: &[String],
    providers: &[String],
) -> Result<RunningCounts> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(RUNNING_COUNTS.as_str())
        .bind(json!(owners).to_string())
        .bind(json!(providers).to_string())
        .fetch_all(&mut **tx)
        .await?;
    Ok(RunningCounts::from_rows(rows))
}

pub(super) async fn provider_gates(
    tx: &mut SqliteTransaction,
    at: i64,
    providers: &[String],
) -> Result<Vec<ProviderGate>> {
    Ok(sqlx::query_as(PROVIDER_GATES).bind(at).bind(json!(providers).to_string()).fetch_all(&mut **tx).await?)
}

pub(super) async fn claim_candidates(
    tx: &mut SqliteTransaction,
    at: i64,
    owner: &str,
    providers: &[String],
    max: u32,
) -> Result<Vec<Candidate>> {
    let rows = sqlx::query(CLAIM_CANDIDATES.as_str())
        .bind(owner)
        .bind(at)
        .bind(json!(providers).to_string())
        .bind(i64::from(max))
        .fetch_all(&mut **tx)
        .await?;
    rows.iter().map(candidate).collect()
}

fn candidate(row: &SqliteRow) -> Result<Candidate> {
    Ok(Candidate {
        attempt: AttemptRef::from(<AttemptRefRow as sqlx::FromRow<SqliteRow>>::from_row(row)?),
        id: AttemptId(row.try_get("id")?),
        provider: row.try_get("provider")?,
        origin: row.try_get("origin")?,
        task: row.try_get("task")?,
        input: row.try_get::<Option<Json<Value>>, _>("input")?.map_or(Value::Null, |i| i.0),
        trace: stored_trace(row.try_get("traceparent")?, row.try_get("tracestate")?),
        waited: row.try_get("waited")?,
    })
}

/// When each lease of `leases` ends, counted from `at`.
pub(super) fn lease_ends(at: i64, leases: &[Duration]) -> Result<Vec<DateTime<Utc>>> {
    leases.iter().map(|lease| time(at.saturating_add(micros(*lease)))).collect()
}

pub(super) async fn put_requests(tx: &mut SqliteTransaction, at: i64, provider: &str, level: f64) -> Result<()> {
    sqlx::query(PUT_REQUESTS).bind(provider).bind(level).bind(at).execute(&mut **tx).await?;
    Ok(())
}

pub(super) async fn pause_provider(tx: &mut SqliteTransaction, at: i64, provider: &str, pause: Duration) -> Result<()> {
    sqlx::query(PAUSE_PROVIDER).bind(provider).bind(at.saturating_add(micros(pause))).execute(&mut **tx).await?;
    Ok(())
}

pub(super) async fn requeue_attempt(
    tx: &mut SqliteTransaction,
    at: i64,
    attempt: &AttemptRef,
    delay: Duration,
    max: Option<u32>,
) -> Result<u64> {
    let done = sqlx::query(REQUEUE_ATTEMPT.as_str())
        .bind_attempt(attempt)
        .bind(at.saturating_add(micros(delay)))
        .bind(max.map(i64::from))
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected())
}

/// Takes `tokens` from the provider's bucket of `per_minute` if it holds
/// them (or is full, for a request larger than the bucket): `None` when
/// taken, else how long until it holds them.
pub(super) async fn reserve_tokens(
    tx: &mut SqliteTransaction,
    at: i64,
    provider: &str,
    tokens: u64,
    per_minute: u32,
) -> Result<Option<Duration>> {
    use crate::store::claims::{refill_wait, refilled};
    let row: Option<(Option<f64>, Option<i64>)> =
        sqlx::query_as(TOKENS).bind(provider).fetch_optional(&mut **tx).await?;
    let (level, since) = row.unwrap_or((None, None));
    let idle = since.map_or(0.0, |since| (at - since) as f64 / 1e6);
    let level = refilled(level, idle, per_minute);
    let needed = tokens as f64;
    if level < needed.min(f64::from(per_minute)) {
        return Ok(Some(refill_wait(level, needed, per_minute).max(Duration::from_millis(10))));
    }
    sqlx::query(PUT_TOKENS).bind(provider).bind(level - needed).bind(at).execute(&mut **tx).await?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Driver;
    use crate::store::sqlite::{SqliteOptions, SqliteStore};

    /// The counts of running attempts read the index of running attempts,
    /// never every attempt of an owner through the primary key (on a new
    /// file, without statistics, SQLite's planner picks the primary key for
    /// `owner_id = ?`).
    #[tokio::test]
    async fn running_attempts_are_counted_through_the_index_of_running_attempts() {
        let file = std::env::temp_dir().join(format!("onejob-plan-{}.db", uuid::Uuid::now_v7().simple()));
        let options = SqliteOptions {
            max_connections: 1,
            busy_timeout: std::time::Duration::from_secs(5),
            acquire_timeout: std::time::Duration::from_secs(5),
        };
        let store = SqliteStore::connect_lazy(&format!("sqlite://{}", file.display()), &options).unwrap();
        store.migrate().await.unwrap();
        for statement in [WAITING_FACTS.as_str(), RUNNING_COUNTS.as_str()] {
            let plan: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(&format!("explain query plan {statement}")).fetch_all(store.pool()).await.unwrap();
            let steps: Vec<&str> = plan.iter().map(|(_, _, _, step)| step.as_str()).collect();
            assert!(!steps.iter().any(|s| s.contains("PRIMARY KEY (owner_id=?)")), "{steps:?}");
            assert!(steps.iter().any(|s| s.contains("attempts_leased")), "{steps:?}");
        }
        store.pool().close().await;
        let _ = std::fs::remove_file(&file);
    }
}
