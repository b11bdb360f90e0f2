//! What a purge is made of (the logic is in [`super::retention`]): which
//! jobs a statement looks at, what a batch did, and the rows of the usage
//! rollup.

use chrono::{DateTime, Utc};

use super::{Result, corrupt};
use crate::domain::{JobId, JobState, Money, OwnerId};

/// Which finished jobs one purge statement looks at: those of `task` (or,
/// without one, of every task but `others`) whose last change is before
/// `before`.
#[derive(Clone, Debug)]
pub struct PurgeRule {
    /// One task, or `None`: every task not in `others`.
    pub task: Option<String>,
    /// The tasks that have rules of their own.
    pub others: Vec<String>,
    /// The cutoff.
    pub before: DateTime<Utc>,
}

/// The Postgres advisory lock one purger at a time holds, for its
/// transaction ("onejobpu").
pub const PURGE_LOCK: i64 = 0x6f6e_656a_6f62_7075;

/// What one purge batch did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PurgeBatch {
    /// Another process is purging (its advisory lock is held): nothing done.
    Busy,
    /// These jobs were purged (none: none is due under the rule).
    Purged(Vec<JobId>),
}

/// What erasing one job did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Erasure {
    /// The owner has no such job.
    NotFound,
    /// The job is not finished, or an attempt of it is open: kept.
    NotFinished(JobState),
    /// Deleted, with its attempts, events and deliveries.
    Erased,
}

/// A row of the usage rollup: one owner's attempts of one day, task,
/// provider, state and currency (`""`: not priced).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RollupKey {
    /// Whose.
    pub owner: OwnerId,
    /// The day's start (UTC) of the attempts' creation.
    pub day: DateTime<Utc>,
    /// The jobs' task.
    pub task: String,
    /// The attempts' provider.
    pub provider: String,
    /// Their state (winner or waste).
    pub state: String,
    /// Their cost's currency; `""` when not priced.
    pub currency: String,
}

/// The sums of a rollup row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RollupTotals {
    /// Attempts counted.
    pub attempts: i64,
    /// Of which with estimated usage.
    pub estimated_attempts: i64,
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Of the prompt tokens, written to the provider's cache.
    pub cache_write_tokens: i64,
    /// Of the prompt tokens, read from the provider's cache.
    pub cache_read_tokens: i64,
    /// The providers' compute time, in milliseconds.
    pub predict_ms: i64,
    /// The files of their outputs.
    pub outputs: i64,
    /// Cost, in `currency` (zero when not priced).
    pub cost: Money,
}

impl RollupTotals {
    pub(crate) fn add(&mut self, other: &RollupTotals) -> Result<()> {
        self.attempts += other.attempts;
        self.estimated_attempts += other.estimated_attempts;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.predict_ms += other.predict_ms;
        self.outputs += other.outputs;
        self.cost = self.cost.checked_add(other.cost).ok_or_else(|| corrupt("a rollup's cost overflows"))?;
        Ok(())
    }
}

/// A rollup row's sums as [`totals_from`] reads them.
pub(crate) type StoredTotals = (i64, i64, i64, i64, i64, i64, i64, i64, String);

/// A rollup row's sums as stored: attempts, estimated ones, prompt,
/// completion, cache-write and cache-read tokens, compute time, outputs,
/// and the cost as decimal text.
pub(crate) fn totals_from(
    (
        attempts,
        estimated_attempts,
        prompt_tokens,
        completion_tokens,
        cache_write_tokens,
        cache_read_tokens,
        predict_ms,
        outputs,
        cost,
    ): StoredTotals,
) -> Result<RollupTotals> {
    Ok(RollupTotals {
        attempts,
        estimated_attempts,
        prompt_tokens,
        completion_tokens,
        cache_write_tokens,
        cache_read_tokens,
        predict_ms,
        outputs,
        cost: cost.parse().map_err(corrupt)?,
    })
}

/// Binds a rollup row's key (owner, day, task, provider, state, currency)
/// to a statement, and its sums after it when given (attempts, estimated
/// attempts, prompt and completion tokens, cost as decimal text, cache-write
/// and cache-read tokens, compute time, outputs).
macro_rules! bind_rollup {
    ($query:expr, $key:expr) => {
        $query
            .bind($key.owner.as_str())
            .bind($crate::store::rows::Stamp($key.day))
            .bind(&$key.task)
            .bind(&$key.provider)
            .bind(&$key.state)
            .bind(&$key.currency)
    };
    ($query:expr, $key:expr, $totals:expr) => {
        $crate::store::purge::bind_rollup!($query, $key)
            .bind($totals.attempts)
            .bind($totals.estimated_attempts)
            .bind($totals.prompt_tokens)
            .bind($totals.completion_tokens)
            .bind($totals.cost.to_string())
            .bind($totals.cache_write_tokens)
            .bind($totals.cache_read_tokens)
            .bind($totals.predict_ms)
            .bind($totals.outputs)
    };
}
pub(crate) use bind_rollup;
