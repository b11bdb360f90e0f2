//! The SQLite side of the driver interface: one write transaction holding
//! this process's turn to write, whose statements are the ones
//! [`crate::store::driver::DriverTx`] names.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::types::Json;

use super::super::driver::DriverTx;
use super::super::driver::{
    AttemptOutcome, LockedAttempt, LockedAttemptRow, LockedJob, SettleWithOutput, SettledWithOutput,
};
use super::super::events::NewEvent;
use super::super::output::{OutputLock, OutputPiece};
use super::super::purge::{PurgeRule, RollupKey, RollupTotals};
use super::super::rows::attempts_from_rows;
use super::super::shared;
use super::super::usage::UsageRow;
use super::super::usage::bind_usage;
use super::super::webhooks::Outgoing;
use super::super::{AttemptRef, NewAttempt, QualificationState, Result, corrupt};
use super::{append_event, claims, json_list, micros, retention, sql};
use crate::domain::{Attempt, AttemptState, EventKind, IdempotencyKey, JobId, JobState, OwnerId};
use crate::store::rows::BindAttempt;

/// A SQLite write transaction with this process's turn to write; `at` is
/// the time every change it makes is stamped with.
pub(super) struct SqliteTx {
    pub(super) tx: super::SqliteTransaction,
    pub(super) at: i64,
    pub(super) _turn: tokio::sync::OwnedSemaphorePermit,
}

#[async_trait::async_trait]
impl DriverTx for SqliteTx {
    async fn lock_claims(&mut self, _owners: &[String], _providers: &[String]) -> Result<()> {
        Ok(())
    }

    async fn running_counts(
        &mut self,
        owners: &[String],
        providers: &[String],
    ) -> Result<super::super::driver::RunningCounts> {
        claims::running_counts(&mut self.tx, owners, providers).await
    }

    async fn provider_gates(&mut self, providers: &[String]) -> Result<Vec<super::super::driver::ProviderGate>> {
        claims::provider_gates(&mut self.tx, self.at, providers).await
    }

    async fn claim_candidates(
        &mut self,
        owner: &str,
        providers: &[String],
        max: u32,
    ) -> Result<Vec<super::super::driver::Candidate>> {
        claims::claim_candidates(&mut self.tx, self.at, owner, providers, max).await
    }

    async fn start_attempts(
        &mut self,
        worker: &str,
        candidates: &[super::super::driver::Candidate],
        leases: &[Duration],
    ) -> Result<Vec<DateTime<Utc>>> {
        let ends = claims::lease_ends(self.at, leases)?;
        for (candidate, lease_until) in candidates.iter().zip(&ends) {
            let attempt = &candidate.attempt;
            sqlx::query(&sql::START_ATTEMPT)
                .bind(worker)
                .bind(self.at)
                .bind(lease_until.timestamp_micros())
                .bind_attempt(attempt)
                .execute(&mut *self.tx)
                .await?;
            self.set_job_state(&attempt.owner, attempt.job_id, JobState::Running).await?;
            let detail = json!({ "worker": worker, "attempt_id": candidate.id, "lease_until": lease_until });
            self.append_event(NewEvent::of_attempt(attempt, EventKind::AttemptClaimed, detail)).await?;
        }
        Ok(ends)
    }

    async fn put_requests(&mut self, provider: &str, level: f64) -> Result<()> {
        claims::put_requests(&mut self.tx, self.at, provider, level).await
    }

    async fn pause_provider(&mut self, provider: &str, pause: Duration) -> Result<()> {
        claims::pause_provider(&mut self.tx, self.at, provider, pause).await
    }

    async fn requeue_attempt(&mut self, attempt: &AttemptRef, delay: Duration, max: Option<u32>) -> Result<u64> {
        claims::requeue_attempt(&mut self.tx, self.at, attempt, delay, max).await
    }

    async fn take_purge_lock(&mut self) -> Result<bool> {
        Ok(true)
    }

    async fn set_job_state(&mut self, owner: &OwnerId, job_id: JobId, state: JobState) -> Result<()> {
        sqlx::query(sql::SET_JOB_STATE)
            .bind(state)
            .bind(self.at)
            .bind(owner.as_str())
            .bind(job_id.0)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn insert_attempt(&mut self, attempt: &AttemptRef, new: &NewAttempt, provider: &str) -> Result<Attempt> {
        sqlx::query(sql::INSERT_ATTEMPT)
            .bind_attempt(attempt)
            .bind(new.id.0)
            .bind(provider)
            .bind(AttemptState::Pending)
            .bind(new.origin)
            .bind(new.idempotency_key.as_ref().map(IdempotencyKey::as_str))
            .bind(self.at)
            .bind(self.at.saturating_add(micros(new.delay)))
            .bind(new.trace.as_ref().map(|t| t.traceparent.as_str()))
            .bind(new.trace.as_ref().and_then(|t| t.tracestate.as_deref()))
            .execute(&mut *self.tx)
            .await?;
        // SQLite's RETURNING cannot name columns through an alias: read it back.
        let rows = sqlx::query(&sql::READ_ATTEMPT).bind_attempt(attempt).fetch_all(&mut *self.tx).await?;
        attempts_from_rows(&rows)?.pop().ok_or_else(|| corrupt("an inserted attempt cannot be read back"))
    }

    async fn append_event(&mut self, event: NewEvent<'_>) -> Result<()> {
        append_event(&mut self.tx, self.at, event).await
    }

    async fn enqueue_webhook(&mut self, message: &Outgoing<'_>) -> Result<()> {
        sqlx::query(sql::ENQUEUE_WEBHOOK)
            .bind(message.owner.as_str())
            .bind(message.job_id.0)
            .bind(message.event.as_str())
            .bind(&message.payload)
            .bind(self.at)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    // The write lock held, no other transaction holds a row: `skip_locked`
    // changes nothing.
    async fn lock_attempt_job(&mut self, attempt: &AttemptRef, _skip_locked: bool) -> Result<Option<LockedAttempt>> {
        let row: Option<LockedAttemptRow> = sqlx::query_as(sql::LOCK_ATTEMPT_JOB)
            .bind_attempt(attempt)
            .bind(self.at)
            .fetch_optional(&mut *self.tx)
            .await?;
        Ok(row.map(Into::into))
    }

    async fn set_attempt_outcome(&mut self, attempt: &AttemptRef, outcome: &AttemptOutcome<'_>) -> Result<u64> {
        let query = sqlx::query(&sql::SET_ATTEMPT_OUTCOME)
            .bind(outcome.to)
            .bind(Json(outcome.error))
            .bind(self.at)
            .bind_attempt(attempt)
            .bind(json_list(outcome.from.iter().map(|s| s.as_str())))
            .bind(outcome.to == AttemptState::Unknown);
        Ok(bind_usage(query, outcome.usage).execute(&mut *self.tx).await?.rows_affected())
    }

    async fn settle_with_output(&mut self, settlement: &SettleWithOutput<'_>) -> Result<SettledWithOutput> {
        let (attempt, at) = (settlement.attempt, self.at);
        // The compare-and-swap: only a job that has not finished takes a winner.
        let won = sqlx::query(&sql::SETTLE_JOB)
            .bind(JobState::Succeeded)
            .bind(attempt.number)
            .bind(Json(settlement.output))
            .bind(at)
            .bind(attempt.owner.as_str())
            .bind(attempt.job_id.0)
            .execute(&mut *self.tx)
            .await?
            .rows_affected()
            == 1;
        let query = sqlx::query(&sql::SETTLE_ATTEMPT)
            .bind(if won { AttemptState::Succeeded } else { AttemptState::Superseded })
            .bind(Json(settlement.output))
            .bind(at)
            .bind_attempt(attempt)
            .bind(json_list(settlement.from.iter().map(|s| s.as_str())));
        let settled = bind_usage(query, settlement.usage).execute(&mut *self.tx).await?.rows_affected();
        let (kind, detail, canceled) = if won {
            let canceled = self.cancel_pending_attempts(attempt.owner.as_str(), attempt.job_id).await?;
            let mut detail = settlement.won.clone();
            detail["canceled"] = json!(canceled);
            (EventKind::AttemptSucceeded, detail, canceled)
        } else {
            (EventKind::RaceLost, settlement.lost.clone(), Vec::new())
        };
        if settled == 1 {
            append_event(&mut self.tx, at, NewEvent::of_attempt(attempt, kind, detail)).await?;
        }
        Ok(SettledWithOutput { won, settled, canceled })
    }

    async fn cancel_job_and_pending(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<i32>> {
        sqlx::query(sql::SET_JOB_STATE)
            .bind(JobState::Canceled)
            .bind(self.at)
            .bind(owner.as_str())
            .bind(job_id.0)
            .execute(&mut *self.tx)
            .await?;
        self.cancel_pending_attempts(owner.as_str(), job_id).await
    }

    async fn lock_job(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<LockedJob>> {
        shared::lock_job(&mut *self.tx, sql::LOCK_JOB, owner, job_id).await
    }

    async fn job_budget(&mut self, owner: &OwnerId, job_id: JobId) -> Result<(Option<String>, Value)> {
        shared::job_budget(&mut *self.tx, sql::JOB_BUDGET, owner, job_id).await
    }

    async fn forget_usage(&mut self, attempt: &AttemptRef) -> Result<()> {
        shared::forget_usage(&mut *self.tx, sql::FORGET_USAGE, attempt).await
    }

    async fn lock_output(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Option<OutputLock>> {
        shared::lock_output(&mut *self.tx, sql::LOCK_OUTPUT, owner, job_id).await
    }

    async fn set_output_attempt(&mut self, owner: &OwnerId, job_id: JobId, number: i32) -> Result<()> {
        shared::set_output_attempt(&mut *self.tx, sql::SET_OUTPUT_ATTEMPT, owner, job_id, number).await
    }

    async fn insert_output(&mut self, owner: &OwnerId, job_id: JobId, piece: &OutputPiece) -> Result<()> {
        shared::insert_output(&mut *self.tx, sql::INSERT_OUTPUT, owner, job_id, piece).await
    }

    async fn attempt_state(&mut self, attempt: &AttemptRef) -> Result<Option<AttemptState>> {
        shared::attempt_state(&mut *self.tx, sql::ATTEMPT_STATE, attempt).await
    }

    async fn attempt_states(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<AttemptState>> {
        shared::attempt_states(&mut *self.tx, sql::ATTEMPT_STATES, owner, job_id).await
    }

    async fn read_attempts(&mut self, owner: &OwnerId, job_id: JobId) -> Result<Vec<Attempt>> {
        shared::read_attempts(&mut *self.tx, &sql::READ_ATTEMPTS, owner, job_id).await
    }

    async fn qualification_state(&mut self, provider: &str, task: &str, hash: &[u8; 32]) -> Result<QualificationState> {
        shared::qualification_state(&mut *self.tx, sql::QUALIFICATION_STATE, provider, task, hash).await
    }

    async fn purgeable_jobs(&mut self, rule: &PurgeRule, max: u32) -> Result<Vec<(OwnerId, JobId)>> {
        retention::purgeable_jobs(&mut self.tx, rule, max).await
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

impl SqliteTx {
    /// Cancels a job's pending attempts: their numbers.
    async fn cancel_pending_attempts(&mut self, owner: &str, job_id: JobId) -> Result<Vec<i32>> {
        // The states are in the statement's text, not bound: SQLite 3.46.0
        // (the bundled one) crashes running this `update … returning` on a
        // table with partial indexes when they are bound parameters.
        Ok(sqlx::query_scalar(&sql::CANCEL_PENDING_ATTEMPTS)
            .bind(self.at)
            .bind(owner)
            .bind(job_id.0)
            .fetch_all(&mut *self.tx)
            .await?)
    }
}
