//! What a claim reads through the driver: owners with pending attempts,
//! what the workers share about each provider, the candidates, and the
//! running counts the limits are checked against.

use std::collections::HashMap;

use serde_json::Value;

use crate::domain::{AttemptId, TraceContext};
use crate::store::AttemptRef;

/// An owner with pending attempts, and the limit its keys set, if any.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct PendingOwner {
    /// The owner.
    pub owner_id: String,
    /// The largest `max_in_flight` its live keys set.
    pub max_in_flight: Option<i32>,
}

/// What the workers share about a provider, as a claim reads it.
#[derive(Clone, Debug, Default, sqlx::FromRow)]
pub struct ProviderGate {
    /// The provider.
    pub provider: String,
    /// How much longer it is paused, in seconds (0: not paused).
    pub paused_for: f64,
    /// Its request bucket's level when last written (`None`: full).
    pub requests: Option<f64>,
    /// Seconds since then.
    pub requests_idle: f64,
}

/// A pending attempt a claim may take, locked by the claim's transaction.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Which attempt.
    pub attempt: AttemptRef,
    /// Its id.
    pub id: AttemptId,
    /// Its provider.
    pub provider: String,
    /// Who started it.
    pub origin: crate::domain::AttemptOrigin,
    /// The job's task.
    pub task: String,
    /// The job's input.
    pub input: Value,
    /// The trace context it was asked for under.
    pub trace: Option<TraceContext>,
    /// Seconds since it was admitted.
    pub waited: f64,
}

/// Running attempts per limited owner and per limited provider.
#[derive(Clone, Debug, Default)]
pub struct RunningCounts {
    /// Per owner.
    pub by_owner: HashMap<String, i64>,
    /// Per provider.
    pub by_provider: HashMap<String, i64>,
}

impl RunningCounts {
    /// From (`owner` or `provider`, name, count) rows.
    pub(in crate::store) fn from_rows(rows: Vec<(String, String, i64)>) -> RunningCounts {
        let (by_owner, by_provider) = by_kind(rows);
        RunningCounts { by_owner: by_owner.into_iter().collect(), by_provider: by_provider.into_iter().collect() }
    }
}

/// Counts by name.
pub(in crate::store) type Counts = Vec<(String, i64)>;

/// (`owner` or `provider`, name, count) rows, split: the owners' counts,
/// then the providers'.
pub(in crate::store) fn by_kind(rows: Vec<(String, String, i64)>) -> (Counts, Counts) {
    let (owners, providers): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(kind, _, _)| kind == "owner");
    let counts = |rows: Vec<(String, String, i64)>| rows.into_iter().map(|(_, name, count)| (name, count)).collect();
    (counts(owners), counts(providers))
}
