//! The statements of a purge on SQLite (the logic is in
//! [`crate::store::retention`]). The write transaction is SQLite's one
//! writer, so no lock is needed, and each job's rows are deleted by their
//! own statements (in-process, they cost microseconds).

use uuid::Uuid;

use crate::domain::{JobId, OwnerId};
use crate::store::Result;
use crate::store::purge::{PurgeRule, RollupKey, RollupTotals, bind_rollup};
use crate::store::rows::names::*;
use crate::store::rows::{Stamp, UsageReportRow, read_all};
use crate::store::usage::UsageRow;

use super::SqliteTransaction;

/// The finished jobs a rule may purge (binds: cutoff, task or null, the
/// other tasks as a JSON array), as `select what … tail`. The state list is
/// written out so that the `jobs_finished` partial index matches.
fn purgeable(what: &str, tail: &str) -> String {
    format!(
        r#"select {what} from jobs j
           where j.state in ({finished}) and j.updated_at < ?1
             and (case when ?2 is null then j.task not in (select value from json_each(?3)) else j.task = ?2 end)
             and not exists (select 1 from attempts a where a.owner_id = j.owner_id and a.job_id = j.id
                             and (a.state in ({open}) or a.finished_at >= ?1))
           {tail}"#,
        finished = JOB_FINISHED.as_str(),
        open = ATTEMPT_OPEN.as_str()
    )
}

pub(super) async fn purgeable_jobs(
    tx: &mut SqliteTransaction,
    rule: &PurgeRule,
    max: u32,
) -> Result<Vec<(OwnerId, JobId)>> {
    let others = serde_json::Value::from(rule.others.clone()).to_string();
    let rows: Vec<(String, Uuid)> = sqlx::query_as(&purgeable("j.owner_id, j.id", "order by j.updated_at limit ?4"))
        .bind(Stamp(rule.before))
        .bind(rule.task.as_deref())
        .bind(others)
        .bind(i64::from(max))
        .fetch_all(&mut **tx)
        .await?;
    Ok(rows.into_iter().map(|(owner, id)| (OwnerId::from_trusted(owner), JobId(id))).collect())
}

pub(super) async fn any_purgeable(pool: &sqlx::SqlitePool, rule: &PurgeRule) -> Result<bool> {
    let others = serde_json::Value::from(rule.others.clone()).to_string();
    let statement = format!("select exists ({})", purgeable("1", "limit 1"));
    let query = sqlx::query_scalar(&statement).bind(Stamp(rule.before)).bind(rule.task.as_deref());
    Ok(query.bind(others).fetch_one(pool).await?)
}

pub(super) async fn count_purgeable_jobs(tx: &mut SqliteTransaction, rule: &PurgeRule) -> Result<u64> {
    let others = serde_json::Value::from(rule.others.clone()).to_string();
    let count: i64 = sqlx::query_scalar(&purgeable("count(*)", ""))
        .bind(Stamp(rule.before))
        .bind(rule.task.as_deref())
        .bind(others)
        .fetch_one(&mut **tx)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

pub(super) async fn usage_of_jobs(
    tx: &mut SqliteTransaction,
    jobs: &[(OwnerId, JobId)],
) -> Result<Vec<(OwnerId, UsageRow)>> {
    let mut found = Vec::new();
    for (owner, id) in jobs {
        let rows = sqlx::query(
            r#"select j.task, a.provider, a.state, a.created_at, a.prompt_tokens, a.completion_tokens,
                      a.usage_estimated, a.cache_write_tokens, a.cache_read_tokens, a.predict_ms, a.outputs, a.cost,
                      a.currency,
                      a.price_version,
                      1 as attempts, coalesce(a.usage_estimated, 0) as estimated_attempts
               from jobs j join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
               where j.owner_id = ?1 and j.id = ?2 and a.prompt_tokens is not null"#,
        )
        .bind(owner.as_str())
        .bind(id.0)
        .fetch_all(&mut **tx)
        .await?;
        let usage: Vec<UsageRow> = read_all::<_, UsageReportRow, _>(&rows)?;
        found.extend(usage.into_iter().map(|row| (owner.clone(), row)));
    }
    Ok(found)
}

/// Adds to a rollup row: read, summed exactly here (the cost is decimal
/// text), written back; the write transaction is the only writer.
pub(super) async fn add_to_rollup(tx: &mut SqliteTransaction, key: &RollupKey, totals: &RollupTotals) -> Result<()> {
    let row: Option<crate::store::purge::StoredTotals> =
        bind_rollup!(sqlx::query_as(super::sql::ROLLUP_ROW), key).fetch_optional(&mut **tx).await?;
    let mut sum = row.map(crate::store::purge::totals_from).transpose()?.unwrap_or_default();
    sum.add(totals)?;
    bind_rollup!(sqlx::query(super::sql::ADD_TO_ROLLUP), key, sum).execute(&mut **tx).await?;
    Ok(())
}

pub(super) async fn delete_jobs(tx: &mut SqliteTransaction, jobs: &[(OwnerId, JobId)]) -> Result<u64> {
    // The audit log lets this transaction, and only it, delete events.
    sqlx::query("insert into purging (marker) values (1)").execute(&mut **tx).await?;
    let mut deleted = 0;
    for (owner, id) in jobs {
        for table in ["webhook_deliveries", "job_events", "job_output", "attempts"] {
            sqlx::query(&format!("delete from {table} where owner_id = ?1 and job_id = ?2"))
                .bind(owner.as_str())
                .bind(id.0)
                .execute(&mut **tx)
                .await?;
        }
        deleted += sqlx::query("delete from jobs where owner_id = ?1 and id = ?2")
            .bind(owner.as_str())
            .bind(id.0)
            .execute(&mut **tx)
            .await?
            .rows_affected();
    }
    sqlx::query("delete from purging").execute(&mut **tx).await?;
    Ok(deleted)
}
