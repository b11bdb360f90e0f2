//! The Postgres side of the driver's transactions: one write transaction,
//! whose statements are the ones [`crate::store::driver::DriverTx`] names.
//! Times are the database's `now()`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use uuid::Uuid;

use super::super::driver::{
    AttemptOutcome, LockedAttempt, LockedAttemptRow, LockedJob, SettleWithOutput, SettledWithOutput,
};
use super::super::events::NewEvent;
use super::super::output::{OutputLock, OutputPiece};
use super::super::purge::{PurgeRule, RollupKey, RollupTotals};
use super::super::rows::attempts_from_rows;
use super::super::shared;
use super::super::usage::{AttemptUsage, UsageRow, bind_usage};
use super::super::webhooks::Outgoing;
use super::super::{AttemptRef, NewAttempt, QualificationState, Result, corrupt};
use super::{PgTransaction, claims, retention, sql};
use crate::domain::{Attempt, AttemptState, IdempotencyKey, JobId, JobState, OwnerId};
use crate::store::driver::DriverTx;
use crate::store::rows::BindAttempt;

/// A Postgres write transaction; times are the database's `now()`.
pub(super) struct PgTx {
    pub(super) tx: PgTransaction,
    /// Whether the database is on Citus (see `citus`).
    pub(super) on_citus: bool,
}

#[async_trait::async_trait]
impl DriverTx for PgTx {
    async fn lock_claims(&mut self, owners: &[String], providers: &[String]) -> Result<()> {
        claims::lock_claims(&mut self.tx, owners, providers).await
    }

    async fn running_counts(
        &mut self,
        owners: &[String],
        providers: &[String],
    ) -> Result<super::super::driver::RunningCounts> {
        claims::running_counts(&mut self.tx, owners, providers).await
    }

    async fn provider_gates(&mut self, providers: &[String]) -> Result<Vec<super::super::driver::ProviderGate>> {
        claims::provider_gates(&mut self.tx, providers).await
    }

    async fn claim_candidates(
        &mut self,
        owner: &str,
        providers: &[String],
        max: u32,
    ) -> Result<Vec<super::super::driver::Candidate>> {
        claims::claim_candidates(&mut self.tx, owner, providers, max).await
    }

    async fn start_attempts(
        &mut self,
        worker: &str,
        candidates: &[super::super::driver::Candidate],
        leases: &[Duration],
    ) -> Result<Vec<DateTime<Utc>>> {
        claims::start_attempts(&mut self.tx, worker, candidates, leases).await
    }

    async fn put_requests(&mut self, provider: &str, level: f64) -> Result<()> {
        claims::put_requests(&mut self.tx, provider, level).await
    }

    async fn pause_provider(&mut self, provider: &str, pause: Duration) -> Result<()> {
        claims::pause_provider(&mut self.tx, provider, pause).await
    }

    async fn requeue_attempt(&mut self, attempt: &AttemptRef, delay: Duration, max: Option<u32>) -> Result<u64> {
        claims::requeue_attempt(&mut self.tx, attempt, delay, max).await
    }

    async fn take_purge_lock(&mut self) -> Result<bool> {
        retention::take_purge_lock(&mut self.tx).await
    }

    async fn set_job_state(&mut self, owner: &OwnerId, job_id: JobId, state: JobState) -> Result<()> {
        sqlx::query(sql::SET_JOB_STATE).bind(owner.as_str()).bind(job_id.0).bind(state).execute(&mut self.tx).await?;
        Ok(())
    }

    async fn insert_attempt(&mut self, attempt: &AttemptRef, new: &NewAttempt, provider: &str) -> Result<Attempt> {
        let rows = sqlx::query(sql::INSERT_ATTEMPT.as_str())
            .bind_attempt(attempt)
            .bind(new.id.0)
            .bind(provider)
            .bind(new.origin)
            .bind(new.idempotency_key.as_ref().map(IdempotencyKey::as_str))
            .bind(new.delay.as_secs_f64())
            .bind(AttemptState::Pending)
            .bind(new.trace.as_ref().map(|t| t.traceparent.as_str()))
            .bind(new.trace.as_ref().and_then(|t| t.tracestate.as_deref()))
            .fetch_all(&mut self.tx)
            .await?;
        attempts_from_rows(&rows)?.pop().ok_or_else(|| corrupt("an inserted attempt returned no row"))
    }

    async fn append_event(&mut self, event: NewEvent<'_>) -> Result<()> {
        sqlx::query(sql::APPEND_EVENT)
            .bind(event.owner.as_str())
            .bind(event.job_id.0)
            .bind(event.kind)
            .bind(event.attempt_number)
            .bind(event.detail)
            .execute(&mut self.tx)
            .await?;
        Ok(())
    }

    async fn enqueue_webhook(&mut self, message: &Outgoing<'_>) -> Result<()> {
        sqlx::query(sql::ENQUEUE_WEBHOOK)
            .bind(message.owner.as_str())
            .bind(message.job_id.0)
            .bind(message.event.as_str())
            .bind(&message.payload)
            .bind(Uuid::now_v7())
            .execute(&mut self.tx)
            .await?;
        Ok(())
    }

    async fn lock_attempt_job(&mut self, attempt: &AttemptRef, skip_locked: bool) -> Result<Option<LockedAttempt>> {
        let statement = if skip_locked { sql::LOCK_ATTEMPT_JOB_SKIP_LOCKED.as_str() } else { sql::LOCK_ATTEMPT_JOB };
        let row: Option<LockedAttemptRow> =
            sqlx::query_as(statement).bind_attempt(attempt).fetch_optional(&mut self.tx).await?;
        Ok(row.map(Into::into))
    }

    async fn lock_attempt_jobs(&mut self, attempts: &[&AttemptRef]) -> Result<Vec<Option<LockedAttempt>>> {
        let Some(first) = attempts.first() else { return Ok(Vec::new()) };
        let jobs: Vec<Uuid> = attempts.iter().map(|a| a.job_id.0).collect();
        let numbers: Vec<i32> = attempts.iter().map(|a| a.number).collect();
        let rows = sqlx::query(sql::LOCK_ATTEMPT_JOBS)
            .bind(first.owner.as_str())
            .bind(&jobs)
            .bind(&numbers)
            .fetch_all(&mut self.tx)
            .await?;
        let mut locked: Vec<Option<LockedAttempt>> = vec![None; attempts.len()];
        for row in &rows {
            let n: i64 = row.try_get("n")?;
            let slot = usize::try_from(n - 1).ok().and_then(|i| locked.get_mut(i));
            let slot = slot.ok_or_else(|| crate::store::corrupt("a locked row names no attempt asked for"))?;
            *slot = Some(<LockedAttemptRow as sqlx::FromRow<PgRow>>::from_row(row)?.into());
        }
        Ok(locked)
    }

    async fn set_attempt_outcome(&mut self, attempt: &AttemptRef, outcome: &AttemptOutcome<'_>) -> Result<u64> {
        let query = sqlx::query(sql::SET_ATTEMPT_OUTCOME.as_str())
            .bind_attempt(attempt)
            .bind(outcome.to)
            .bind(Json(outcome.error))
            .bind(state_names(outcome.from))
            .bind(outcome.to == AttemptState::Unknown);
        Ok(bind_usage(query, outcome.usage).execute(&mut self.tx).await?.rows_affected())
    }

    async fn settle_with_output(&mut self, settlement: &SettleWithOutput<'_>) -> Result<SettledWithOutput> {
        // One statement, under the job's lock: the compare-and-swap, the
        // attempt settled as won or superseded with its usage, the winner's pending
        // siblings canceled, and the event.
        let attempt = settlement.attempt;
        let query = sqlx::query(sql::SETTLE_WITH_OUTPUT.as_str())
            .bind_attempt(attempt)
            .bind(settlement.output)
            .bind(state_names(settlement.from))
            .bind(&settlement.won)
            .bind(&settlement.lost);
        let row = bind_usage(query, settlement.usage).fetch_one(&mut self.tx).await?;
        settled_row(&row)
    }

    async fn settle_outputs(&mut self, settlements: &[SettleWithOutput<'_>]) -> Result<Vec<SettledWithOutput>> {
        let Some(first) = settlements.first() else { return Ok(Vec::new()) };
        if settlements.iter().any(|s| s.attempt.owner != first.attempt.owner || s.from != first.from) {
            // One statement binds one owner and one list of states.
            return super::super::driver::settle_each(self, settlements).await;
        }
        let usages: Vec<Option<&AttemptUsage>> = settlements.iter().map(|s| s.usage).collect();
        let costs: Vec<_> = usages.iter().map(|u| u.and_then(|u| u.cost.as_ref())).collect();
        let rows = sqlx::query(sql::SETTLE_OUTPUTS.as_str())
            .bind(first.attempt.owner.as_str())
            .bind(settlements.iter().map(|s| s.attempt.job_id.0).collect::<Vec<_>>())
            .bind(settlements.iter().map(|s| s.attempt.number).collect::<Vec<_>>())
            .bind(settlements.iter().map(|s| s.output).collect::<Vec<_>>())
            .bind(state_names(first.from))
            .bind(settlements.iter().map(|s| &s.won).collect::<Vec<_>>())
            .bind(settlements.iter().map(|s| &s.lost).collect::<Vec<_>>())
            .bind(usages.iter().map(Option::is_some).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.prompt_tokens)).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.completion_tokens)).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.estimated)).collect::<Vec<_>>())
            .bind(costs.iter().map(|c| c.map(|c| c.amount.to_string())).collect::<Vec<_>>())
            .bind(costs.iter().map(|c| c.map(|c| c.currency.clone())).collect::<Vec<_>>())
            .bind(costs.iter().map(|c| c.map(|c| c.price_version.clone())).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.cache_write_tokens)).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.cache_read_tokens)).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.predict_ms)).collect::<Vec<_>>())
            .bind(usages.iter().map(|u| u.map(|u| u.usage.outputs)).collect::<Vec<_>>())
            .fetch_all(&mut self.tx)
            .await?;
        if rows.len() != settlements.len() {
            return Err(corrupt("a settlement of several outputs answered for another number of them"));
        }
        rows.iter().map(settled_row).collect()
    }

    async fn cancel_job_and_pending(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<i32>> {
        sqlx::query(sql::SET_JOB_STATE)
            .bind(owner.as_str())
            .bind(job_id.0)
            .bind(JobState::Canceled)
            .execute(&mut self.tx)
            .await?;
        Ok(sqlx::query_scalar(sql::CANCEL_PENDING_ATTEMPTS)
            .bind(owner.as_str())
            .bind(job_id.0)
            .bind(AttemptState::Pending)
            .bind(AttemptState::Canceled)
            .fetch_all(&mut self.tx)
            .await?)
    }
    async fn lock_job(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<LockedJob>> {
        shared::lock_job(&mut self.tx, sql::LOCK_JOB, owner, job_id).await
    }

    async fn job_budget(&mut self, owner: &OwnerId, job_id: JobId) -> Result<(Option<String>, Value)> {
        shared::job_budget(&mut self.tx, sql::JOB_BUDGET, owner, job_id).await
    }

    async fn forget_usage(&mut self, attempt: &AttemptRef) -> Result<()> {
        shared::forget_usage(&mut self.tx, sql::FORGET_USAGE, attempt).await
    }

    async fn lock_output(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<OutputLock>> {
        shared::lock_output(&mut self.tx, sql::LOCK_OUTPUT, owner, job_id).await
    }

    async fn set_output_attempt(&mut self, owner: &OwnerId, job_id: JobId, number: i32) -> Result<()> {
        shared::set_output_attempt(&mut self.tx, sql::SET_OUTPUT_ATTEMPT, owner, job_id, number).await
    }

    async fn insert_output(&mut self, owner: &OwnerId, job_id: JobId, piece: &OutputPiece) -> Result<()> {
        shared::insert_output(&mut self.tx, sql::INSERT_OUTPUT, owner, job_id, piece).await
    }

    async fn attempt_state(&mut self, attempt: &AttemptRef) -> Result<Option<AttemptState>> {
        shared::attempt_state(&mut self.tx, sql::ATTEMPT_STATE, attempt).await
    }

    async fn attempt_states(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<AttemptState>> {
        shared::attempt_states(&mut self.tx, sql::ATTEMPT_STATES, owner, job_id).await
    }

    async fn read_attempts(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<Attempt>> {
        shared::read_attempts(&mut self.tx, &sql::READ_ATTEMPTS, owner, job_id).await
    }

    async fn qualification_state(&mut self, provider: &str, task: &str, hash: &[u8; 32]) -> Result<QualificationState> {
        shared::qualification_state(&mut self.tx, sql::QUALIFICATION_STATE, provider, task, hash).await
    }

    async fn purgeable_jobs(&mut self, rule: &PurgeRule, max: u32) -> Result<Vec<(OwnerId, JobId)>> {
        retention::purgeable_jobs(&mut self.tx, rule, max, self.on_citus).await
    }

    async fn count_purgeable_jobs(&mut self, rule: &PurgeRule) -> Result<u64> {
        retention::count_purgeable_jobs(&mut self.tx, rule).await
    }

    async fn usage_of_jobs(&mut self, jobs: &[(OwnerId, JobId)]) -> Result<Vec<(OwnerId, UsageRow)>> {
        retention::usage_of_jobs(&mut self.tx, jobs).await
    }

    async fn add_to_rollup(&mut self, key: &RollupKey, totals: &RollupTotals) -> Result<()> {
        retention::add_to_rollup(&mut self.tx, key, totals).await
    }

    async fn delete_jobs(&mut self, jobs: &[(OwnerId, JobId)]) -> Result<u64> {
        retention::delete_jobs(&mut self.tx, jobs).await
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        Ok(self.tx.commit().await?)
    }
}

/// A settlement's answer: whether it won, how many attempts it settled, the
/// siblings it canceled.
fn settled_row(row: &PgRow) -> Result<SettledWithOutput> {
    Ok(SettledWithOutput {
        won: row.try_get("won")?,
        settled: row.try_get::<i64, _>("settled")?.try_into().map_err(corrupt)?,
        canceled: row.try_get("canceled")?,
    })
}

fn state_names(states: &[AttemptState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}
