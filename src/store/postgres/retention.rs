//! The statements of a purge on Postgres (the logic is in
//! [`crate::store::retention`]). The jobs of a batch travel as two arrays
//! (owners, ids), so that each step is one statement for the whole batch.

use std::sync::LazyLock;

use uuid::Uuid;

use crate::domain::{JobId, OwnerId};
use crate::store::Result;
use crate::store::purge::{PurgeRule, RollupKey, RollupTotals, bind_rollup};
use crate::store::rows::names::*;
use crate::store::rows::{Stamp, UsageReportRow, read_all};
use crate::store::usage::UsageRow;

use super::PgTransaction;

use crate::store::purge::PURGE_LOCK;

/// Takes the purge's advisory lock for the transaction, if free. Binds: the lock.
pub(super) const TAKE_PURGE_LOCK: &str = "select pg_try_advisory_xact_lock($1)";

pub(super) async fn take_purge_lock(tx: &mut PgTransaction) -> Result<bool> {
    Ok(sqlx::query_scalar(TAKE_PURGE_LOCK).bind(PURGE_LOCK).fetch_one(&mut *tx).await?)
}

/// The finished jobs a rule may purge (binds: cutoff, task or null, the
/// other tasks), as `select what … tail`. A job finished before the cutoff
/// was created before it: the scan reads the jobs created before the
/// cutoff (`jobs_created`), oldest first, since no index of jobs holds its
/// state or its last change (their rewrites stay HOT).
fn purgeable(what: &str, tail: &str) -> String {
    format!(
        r#"select {what} from jobs j
           where j.created_at < $1 and j.state in ({finished}) and j.updated_at < $1
             and (case when $2::text is null then not (j.task = any($3)) else j.task = $2 end)
             and not exists (select 1 from attempts a where a.owner_id = j.owner_id and a.job_id = j.id
                             and (a.state in ({open}) or a.finished_at >= $1))
           {tail}"#,
        finished = JOB_FINISHED.as_str(),
        open = ATTEMPT_OPEN.as_str()
    )
}

/// A batch of purgeable jobs, locked. Binds: cutoff, task or null, the
/// other tasks, how many.
pub(super) static PURGEABLE_JOBS: LazyLock<String> =
    LazyLock::new(|| purgeable("j.owner_id, j.id", "order by j.created_at limit $4 for update of j skip locked"));

/// On Citus, which locks rows only in a statement pinned to one shard: a
/// batch of purgeable jobs, unlocked (then locked owner by owner with
/// [`LOCK_OWNER_PURGEABLE`]). Binds: as [`PURGEABLE_JOBS`].
pub(super) static PURGEABLE_CANDIDATES: LazyLock<String> =
    LazyLock::new(|| purgeable("j.owner_id, j.id", "order by j.created_at limit $4"));

/// On Citus, one owner's jobs of a batch, locked if still finished and
/// free (a finished job takes no new attempt, so the rest of the check
/// holds). Binds: owner, job ids.
pub(super) static LOCK_OWNER_PURGEABLE: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select id from jobs where owner_id = $1 and id = any($2) and state in ({finished})
           for update skip locked"#,
        finished = JOB_FINISHED.as_str()
    )
});

/// Whether a rule may purge any job. Binds: as [`PURGEABLE_JOBS`] without the count.
pub(super) static ANY_PURGEABLE: LazyLock<String> =
    LazyLock::new(|| format!("select exists ({})", purgeable("1", "limit 1")));

/// How many jobs a rule may purge. Binds: as [`PURGEABLE_JOBS`] without the count.
pub(super) static COUNT_PURGEABLE: LazyLock<String> = LazyLock::new(|| purgeable("count(*)", ""));

/// The usage of a batch of jobs' attempts. Binds: owners, job ids.
pub(super) const USAGE_OF_JOBS: &str = r#"select a.owner_id, j.task, a.provider, a.state, a.created_at, a.prompt_tokens,
        a.completion_tokens, a.usage_estimated, a.cache_write_tokens, a.cache_read_tokens, a.predict_ms, a.outputs,
        a.cost::text as cost, a.currency, a.price_version,
        1::bigint as attempts, (case when a.usage_estimated then 1 else 0 end)::bigint as estimated_attempts
    from unnest($1::text[], $2::uuid[]) as v(owner_id, id)
    join jobs j on j.owner_id = v.owner_id and j.id = v.id
    join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
    where a.prompt_tokens is not null"#;

/// The audit log lets the purging transaction, and only it, delete events.
/// On Citus the events' shards are on the workers, where the guard runs:
/// Citus passes a transaction's `set local` on to them only when asked
/// (`citus.propagate_set_commands`), which is asked first. On plain
/// Postgres that setting is a name nothing reads.
pub(super) const PASS_ON_SETTINGS: &str = "set local citus.propagate_set_commands = 'local'";
pub(super) const PURGING_ON: &str = "set local onejob.purging = 'on'";
pub(super) const PURGING_OFF: &str = "set local onejob.purging = 'off'";

/// A batch of jobs' rows, table by table, children first. Binds: owners, job ids.
pub(super) const DELETE_DELIVERIES_OF_JOBS: &str =
    "delete from webhook_deliveries where (owner_id, job_id) in (select * from unnest($1::text[], $2::uuid[]))";
pub(super) const DELETE_EVENTS_OF_JOBS: &str =
    "delete from job_events where (owner_id, job_id) in (select * from unnest($1::text[], $2::uuid[]))";
pub(super) const DELETE_OUTPUT_OF_JOBS: &str =
    "delete from job_output where (owner_id, job_id) in (select * from unnest($1::text[], $2::uuid[]))";
pub(super) const DELETE_ATTEMPTS_OF_JOBS: &str =
    "delete from attempts where (owner_id, job_id) in (select * from unnest($1::text[], $2::uuid[]))";
pub(super) const DELETE_JOBS: &str =
    "delete from jobs where (owner_id, id) in (select * from unnest($1::text[], $2::uuid[]))";

pub(super) async fn purgeable_jobs(
    tx: &mut PgTransaction,
    rule: &PurgeRule,
    max: u32,
    on_citus: bool,
) -> Result<Vec<(OwnerId, JobId)>> {
    let scan = if on_citus { &PURGEABLE_CANDIDATES } else { &PURGEABLE_JOBS };
    let rows: Vec<(String, Uuid)> = sqlx::query_as(scan.as_str())
        .bind(Stamp(rule.before))
        .bind(rule.task.as_deref())
        .bind(&rule.others)
        .bind(i64::from(max))
        .fetch_all(&mut *tx)
        .await?;
    let jobs = rows.into_iter().map(|(owner, id)| (OwnerId::from_trusted(owner), JobId(id)));
    if !on_citus {
        return Ok(jobs.collect());
    }
    let mut by_owner: std::collections::BTreeMap<OwnerId, Vec<Uuid>> = std::collections::BTreeMap::new();
    for (owner, id) in jobs {
        by_owner.entry(owner).or_default().push(id.0);
    }
    let mut locked = Vec::new();
    for (owner, ids) in by_owner {
        let lock = sqlx::query_scalar(LOCK_OWNER_PURGEABLE.as_str()).bind(owner.as_str()).bind(&ids);
        let held: Vec<Uuid> = lock.fetch_all(&mut *tx).await?;
        locked.extend(held.into_iter().map(|id| (owner.clone(), JobId(id))));
    }
    Ok(locked)
}

pub(super) async fn any_purgeable(pool: &super::bounded::Pool, rule: &PurgeRule) -> Result<bool> {
    let query = sqlx::query_scalar(ANY_PURGEABLE.as_str()).bind(Stamp(rule.before)).bind(rule.task.as_deref());
    Ok(query.bind(&rule.others).fetch_one(pool).await?)
}

pub(super) async fn count_purgeable_jobs(tx: &mut PgTransaction, rule: &PurgeRule) -> Result<u64> {
    let count: i64 = sqlx::query_scalar(COUNT_PURGEABLE.as_str())
        .bind(Stamp(rule.before))
        .bind(rule.task.as_deref())
        .bind(&rule.others)
        .fetch_one(&mut *tx)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

fn arrays(jobs: &[(OwnerId, JobId)]) -> (Vec<&str>, Vec<Uuid>) {
    jobs.iter().map(|(owner, id)| (owner.as_str(), id.0)).unzip()
}

pub(super) async fn usage_of_jobs(
    tx: &mut PgTransaction,
    jobs: &[(OwnerId, JobId)],
) -> Result<Vec<(OwnerId, UsageRow)>> {
    let (owners, ids) = arrays(jobs);
    let rows = sqlx::query(USAGE_OF_JOBS).bind(&owners).bind(&ids).fetch_all(&mut *tx).await?;
    let owners: Vec<String> =
        rows.iter().map(|row| sqlx::Row::try_get(row, "owner_id")).collect::<std::result::Result<_, _>>()?;
    let usage: Vec<UsageRow> = read_all::<_, UsageReportRow, _>(&rows)?;
    Ok(owners.into_iter().map(OwnerId::from_trusted).zip(usage).collect())
}

pub(super) async fn add_to_rollup(tx: &mut PgTransaction, key: &RollupKey, totals: &RollupTotals) -> Result<()> {
    bind_rollup!(sqlx::query(super::sql::ADD_TO_ROLLUP), key, totals).execute(&mut *tx).await?;
    Ok(())
}

pub(super) async fn delete_jobs(tx: &mut PgTransaction, jobs: &[(OwnerId, JobId)]) -> Result<u64> {
    let (owners, ids) = arrays(jobs);
    sqlx::query(PASS_ON_SETTINGS).execute(&mut *tx).await?;
    sqlx::query(PURGING_ON).execute(&mut *tx).await?;
    for statement in [DELETE_DELIVERIES_OF_JOBS, DELETE_EVENTS_OF_JOBS, DELETE_OUTPUT_OF_JOBS, DELETE_ATTEMPTS_OF_JOBS]
    {
        sqlx::query(statement).bind(&owners).bind(&ids).execute(&mut *tx).await?;
    }
    let deleted = sqlx::query(DELETE_JOBS).bind(&owners).bind(&ids).execute(&mut *tx).await?;
    sqlx::query(PURGING_OFF).execute(&mut *tx).await?;
    Ok(deleted.rows_affected())
}
