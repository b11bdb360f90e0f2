//! What the transitions' statements take and answer: a job locked for a
//! transition, who holds an attempt, a settlement with or without an
//! output, and what a settlement did.

use serde_json::Value;

use crate::domain::{AttemptError, AttemptState, JobState};
use crate::store::AttemptRef;
use crate::store::usage::AttemptUsage;

/// What a transition needs of its locked job.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct LockedJob {
    /// Its state as stored.
    pub state: JobState,
    /// Its task.
    pub task: String,
    /// Its own provider.
    pub provider: String,
    /// The attempt that won, if one has.
    pub winning_attempt: Option<i32>,
    /// Whether its owner has any webhook subscription, as the lock read it:
    /// a transition of an owner with none writes no delivery.
    pub hooked: bool,
}

/// Who holds an attempt, read under its job's lock.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct AttemptHolder {
    /// Its state.
    pub state: AttemptState,
    /// The worker that claimed it, if one has.
    pub worker: Option<String>,
    /// Whether its lease has not yet expired (false without one).
    pub lease_live: bool,
}

/// A job locked for a transition of one of its attempts, and who holds
/// that attempt (`None` without the attempt).
pub(crate) type LockedAttempt = (LockedJob, Option<AttemptHolder>);

/// A row of [`super::DriverTx::lock_attempt_job`]: the job, and its attempt's
/// holder (all null without the attempt).
#[derive(sqlx::FromRow)]
pub(in crate::store) struct LockedAttemptRow {
    #[sqlx(flatten)]
    job: LockedJob,
    attempt_state: Option<AttemptState>,
    worker: Option<String>,
    lease_live: Option<bool>,
}

impl From<LockedAttemptRow> for LockedAttempt {
    fn from(row: LockedAttemptRow) -> Self {
        let holder = row.attempt_state.map(|state| AttemptHolder {
            state,
            worker: row.worker,
            lease_live: row.lease_live.unwrap_or(false),
        });
        (row.job, holder)
    }
}

impl AttemptHolder {
    /// Whether `worker` may still settle the attempt: it is `running`
    /// under `worker`'s lease, and the lease has not expired.
    pub fn held_by(&self, worker: &str) -> bool {
        self.state == AttemptState::Running && self.worker.as_deref() == Some(worker) && self.lease_live
    }
}

/// An attempt to settle with an output.
#[derive(Debug)]
pub struct SettleWithOutput<'a> {
    /// Which attempt.
    pub attempt: &'a AttemptRef,
    /// Its output.
    pub output: &'a Value,
    /// What it used, recorded on it as it settles, when given.
    pub usage: Option<&'a AttemptUsage>,
    /// The states it may be settled from.
    pub from: &'static [AttemptState],
    /// The detail of the `attempt-succeeded` event, should it win.
    pub won: Value,
    /// The detail of the `race-lost` event, should it lose.
    pub lost: Value,
}

/// How an attempt ends without an output.
#[derive(Debug)]
pub struct AttemptOutcome<'a> {
    /// The state it ends in: `failed` or `unknown`.
    pub to: AttemptState,
    /// The states it may end from.
    pub from: &'a [AttemptState],
    /// Why.
    pub error: &'a AttemptError,
    /// What it used, when known.
    pub usage: Option<&'a AttemptUsage>,
}

/// What [`super::DriverTx::settle_with_output`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettledWithOutput {
    /// Whether the compare-and-swap took this attempt's output.
    pub won: bool,
    /// How many attempts were settled: 1, or the guard failed.
    pub settled: u64,
    /// The pending siblings canceled by the win.
    pub canceled: Vec<i32>,
}
