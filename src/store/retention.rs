//! Purging finished jobs, written once for both databases over the
//! statements of `super::driver`: a batch of jobs past their retention
//! (or one job an owner erases) is deleted with its attempts, events and
//! webhook deliveries in one transaction, after what its attempts used and
//! cost is added to the daily rollup the usage report reads, so that the
//! cost history outlives the jobs. A job with an open attempt (`pending`,
//! `running`, `unknown`) is never purged, whatever its age (see
//! [`crate::domain::retention`]).

use std::collections::BTreeMap;

use super::driver::Tx;
use super::usage::UsageRow;
use super::{Result, Store, corrupt};
use crate::domain::retention::{FINISHED, OPEN};
use crate::domain::{JobId, Money, OwnerId};

pub use super::purge::{Erasure, PURGE_LOCK, PurgeBatch, PurgeRule, RollupKey, RollupTotals};

impl Store {
    /// Purges up to `max` finished jobs under `rule` in one transaction,
    /// unless another process is purging.
    #[tracing::instrument(level = "debug", skip_all, fields(task = ?rule.task))]
    pub async fn purge_batch(&self, rule: &PurgeRule, max: u32) -> Result<PurgeBatch> {
        // A read first: with nothing to purge, a purger takes no lock (on
        // SQLite, not the writer).
        if !self.driver().any_purgeable(rule).await? {
            return Ok(PurgeBatch::Purged(Vec::new()));
        }
        let mut tx = self.begin().await?;
        if !tx.take_purge_lock().await? {
            return Ok(PurgeBatch::Busy);
        }
        let jobs = tx.purgeable_jobs(rule, max).await?;
        if jobs.is_empty() {
            return Ok(PurgeBatch::Purged(Vec::new()));
        }
        remove(&mut tx, &jobs).await?;
        tx.commit().await?;
        Ok(PurgeBatch::Purged(jobs.into_iter().map(|(_, id)| id).collect()))
    }

    /// How many finished jobs `rule` would purge now (nothing is changed).
    pub async fn count_purgeable(&self, rule: &PurgeRule) -> Result<u64> {
        self.begin().await?.count_purgeable_jobs(rule).await
    }

    /// Gives the space a large purge freed back to the disk where the
    /// database does not reuse it by itself: SQLite's incremental vacuum
    /// (a file made with it); nothing on Postgres, whose autovacuum does.
    pub async fn reclaim_space(&self) -> Result<()> {
        self.driver().reclaim_space().await
    }

    /// Erases one of `owner`'s jobs now (`DELETE /jobs/{id}`), if it is
    /// finished with no open attempt.
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %id))]
    pub async fn erase_job(&self, owner: &OwnerId, id: JobId) -> Result<Erasure> {
        let mut tx = self.begin().await?;
        let Some(job) = tx.lock_job(owner, id).await? else {
            return Ok(Erasure::NotFound);
        };
        let open = tx.attempt_states(owner, id).await?.iter().any(|state| OPEN.contains(state));
        if !FINISHED.contains(&job.state) || open {
            return Ok(Erasure::NotFinished(job.state));
        }
        remove(&mut tx, &[(owner.clone(), id)]).await?;
        tx.commit().await?;
        Ok(Erasure::Erased)
    }
}

/// Adds the jobs' usage to the rollup, then deletes them; how many went.
async fn remove(tx: &mut Tx, jobs: &[(OwnerId, JobId)]) -> Result<u64> {
    let mut rollup: BTreeMap<RollupKey, RollupTotals> = BTreeMap::new();
    for (owner, row) in tx.usage_of_jobs(jobs).await? {
        let (key, totals) = rollup_of(owner, &row)?;
        rollup.entry(key).or_default().add(&totals)?;
    }
    for (key, totals) in &rollup {
        tx.add_to_rollup(key, totals).await?;
    }
    tx.delete_jobs(jobs).await
}

/// The rollup row an attempt's usage counts in, and what it adds.
fn rollup_of(owner: OwnerId, row: &UsageRow) -> Result<(RollupKey, RollupTotals)> {
    let day =
        row.created_at.date_naive().and_hms_opt(0, 0, 0).ok_or_else(|| corrupt("a day without a midnight"))?.and_utc();
    let key = RollupKey {
        owner,
        day,
        task: row.task.clone(),
        provider: row.provider.clone(),
        state: row.state.as_str().to_owned(),
        currency: row.cost.as_ref().map(|c| c.currency.clone()).unwrap_or_default(),
    };
    let totals = RollupTotals {
        attempts: row.attempts,
        estimated_attempts: row.estimated_attempts,
        prompt_tokens: row.usage.prompt_tokens,
        completion_tokens: row.usage.completion_tokens,
        cache_write_tokens: row.usage.cache_write_tokens,
        cache_read_tokens: row.usage.cache_read_tokens,
        predict_ms: row.usage.predict_ms,
        outputs: row.usage.outputs,
        cost: row.cost.as_ref().map_or(Money::ZERO, |c| c.amount),
    };
    Ok((key, totals))
}
