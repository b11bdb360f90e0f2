//! The statements of a purge on Postgres (the logic is in
//! [`crate::store::retention`]). The jobs of a batch travel as two arrays
//! (owners, ids), so that each step is one statement for the whole batch.

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::store::Result;
use crate::store::purge::{PurgeRule, RollupKey, RollupTotals, bind_rollup};
use crate::store::rows::names::*;
use crate::store::rows::{Stamp, UsageReportRow, read_all};
use crate::store::usage::UsageRow;
use crate::domain::{JobId, OwnerId};

type PgTransaction = Transaction<'static, Postgres>;

use crate::store::purge::PURGE_LOCK;

pub(super) async fn take_purge_lock(tx: &mut PgTransaction) -> Result<bool> {
    Ok(sqlx::query_scalar("select pg_try_advisory_xact_lock($1)").bind(PURGE_LOCK).fetch_one(&mut **tx).await?)
}

/// The finished jobs a rule may purge (binds: cutoff, task or null, the
/// other tasks), as `select what … tail`. The state list is written out so
/// that the `jobs_finished` partial index matches.
fn purgeable(what: &str, tail: &str) -> String {
    format!(
        r#"select {what} from jobs j
           where j.state in ('{JOB_SUCCEEDED}', '{JOB_FAILED}', '{JOB_CANCELED}') and j.updated_at < $1
             and (case when $2::text is null then not (j.task = any($3)) else j.task = $2 end)
             and not exists (select 1 from attempts a where a.owner_id = j.owner_id and a.job_id = j.id
                             and (a.state in ('{PENDING}', '{RUNNING}', '{UNKNOWN}') or a.finished_at >= $1))
           {tail}"#
    )
}

pub(super) async fn purgeable_jobs(tx: &mut PgTransaction, rule: &PurgeRule, max: u32) -> Result<Vec<(OwnerId, JobId)>> {
    let sql = purgeable("j.owner_id, j.id", "order by j.updated_at limit $4 for update of j skip locked");
    let rows: Vec<(String, Uuid)> = sqlx::query_as(&sql)
        .bind(Stamp(rule.before))
        .bind(rule.task.as_deref())
        .bind(&rule.others)
        .bind(i64::from(max))
        .fetch_all(&mut **tx)
        .await?;
    Ok(rows.into_iter().map(|(owner, id)| (OwnerId::from_trusted(owner), JobId(id))).collect())
}

pub(super) async fn count_purgeable(tx: &mut PgTransaction, rule: &PurgeRule) -> Result<u64> {
    let count: i64 = sqlx::query_scalar(&purgeable("count(*)", ""))
        .bind(Stamp(rule.before))
        .bind(rule.task.as_deref())
        .bind(&rule.others)
        .fetch_one(&mut **tx)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

fn arrays(jobs: &[(OwnerId, JobId)]) -> (Vec<&str>, Vec<Uuid>) {
    jobs.iter().map(|(owner, id)| (owner.as_str(), id.0)).unzip()
}

pub(super) async fn usage_of_jobs(tx: &mut PgTransaction, jobs: &[(OwnerId, JobId)]) -> Result<Vec<(OwnerId, UsageRow)>> {
    let (owners, ids) = arrays(jobs);
    let rows = sqlx::query(
        r#"select a.owner_id, j.task, a.provider, a.state, a.created_at, a.prompt_tokens, a.completion_tokens,
                  a.usage_estimated, a.cost::text as cost, a.currency, a.price_version,
                  1::bigint as attempts, (case when a.usage_estimated then 1 else 0 end)::bigint as estimated_attempts
           from unnest($1::text[], $2::uuid[]) as v(owner_id, id)
           join jobs j on j.owner_id = v.owner_id and j.id = v.id
           join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
           where a.prompt_tokens is not null"#,
    )
    .bind(&owners)
    .bind(&ids)
    .fetch_all(&mut **tx)
    .await?;
    let owners: Vec<String> = rows.iter().map(|row| sqlx::Row::try_get(row, "owner_id")).collect::<std::result::Result<_, _>>()?;
    let usage: Vec<UsageRow> = read_all::<_, UsageReportRow, _>(&rows)?;
    Ok(owners.into_iter().map(OwnerId::from_trusted).zip(usage).collect())
}

pub(super) async fn add_to_rollup(tx: &mut PgTransaction, key: &RollupKey, totals: &RollupTotals) -> Result<()> {
    bind_rollup!(sqlx::query(super::sql::ADD_TO_ROLLUP), key, totals)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

pub(super) async fn delete_jobs(tx: &mut PgTransaction, jobs: &[(OwnerId, JobId)]) -> Result<u64> {
    let (owners, ids) = arrays(jobs);
    // The audit log lets this transaction, and only it, delete events.
    sqlx::query("set local onejob.purging = 'on'").execute(&mut **tx).await?;
    let of_jobs = "(owner_id, job_id) in (select * from unnest($1::text[], $2::uuid[]))";
    for table in ["webhook_deliveries", "job_events", "attempts"] {
        sqlx::query(&format!("delete from {table} where {of_jobs}")).bind(&owners).bind(&ids).execute(&mut **tx).await?;
    }
    let deleted = sqlx::query("delete from jobs where (owner_id, id) in (select * from unnest($1::text[], $2::uuid[]))")
        .bind(&owners)
        .bind(&ids)
        .execute(&mut **tx)
        .await?;
    sqlx::query("set local onejob.purging = 'off'").execute(&mut **tx).await?;
    Ok(deleted.rows_affected())
}
