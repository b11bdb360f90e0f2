//! [`Store`]: every read and every state transition of jobs, attempts,
//! events, API keys, sessions, webhooks, usage and retention, over one
//! backend's [`Driver`] (see the module `store` for how it is built).

use std::sync::Arc;
use std::time::Duration;

use super::driver::Tx;
use super::groups::{Creation, GroupCommit};
use super::*;

/// Every operation onejob performs on its database, over a backend's
/// [`Driver`]. A method either runs one of the driver's statements or is a
/// transition (creating a job, admitting, settling, reaping, resolving,
/// canceling) whose logic is written once, in `transitions.rs`, for both
/// backends. Cloning is cheap: every clone shares the backend's pools.
#[derive(Clone)]
pub struct Store {
    driver: Arc<dyn Driver>,
    // New jobs waiting for their group (`groups.rs`).
    creations: Arc<GroupCommit<Creation>>,
}

impl Store {
    /// A store over `driver`.
    pub fn new(driver: impl Driver) -> Self {
        let creations = Arc::new(super::groups::creations(driver.creation_turns()));
        Store { driver: Arc::new(driver), creations }
    }

    /// Begins a write transaction (for the transitions).
    pub(super) async fn begin(&self) -> Result<Tx> {
        self.driver.begin().await
    }

    /// The backend (for the transitions).
    pub(super) fn driver(&self) -> &dyn Driver {
        self.driver.as_ref()
    }

    /// The backend, for a task of its own (a group of new jobs).
    pub(super) fn driver_arc(&self) -> Arc<dyn Driver> {
        self.driver.clone()
    }

    /// The queue of new jobs.
    pub(super) fn creations(&self) -> &GroupCommit<Creation> {
        &self.creations
    }

    /// Applies the pending migrations.
    pub async fn migrate(&self) -> Result<()> {
        self.driver.migrate().await
    }

    /// Answers when the database does and the migrations are applied.
    pub async fn check_ready(&self) -> Result<()> {
        self.driver.check_ready().await
    }

    /// Fails when the connections do not keep their server sessions (a
    /// pooler in transaction mode): checked once at start.
    pub async fn check_session_pooling(&self) -> Result<()> {
        self.driver.check_session_pooling().await
    }

    /// Whether the database's commits wait for a standby, and what says so;
    /// `None` on a database without replication (SQLite).
    pub async fn replication(&self) -> Result<Option<Replication>> {
        self.driver.replication().await
    }

    /// Queue depth and unknown attempts, for the metrics gauges.
    pub async fn sample_gauges(&self) -> Result<Gauges> {
        self.driver.sample_gauges().await
    }
}

/// What a Postgres server says of its replication.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Replication {
    /// Whether a commit returns only once a synchronous standby has it: a
    /// failover to that standby then loses no acknowledged write.
    pub commit_waits_for_standby: bool,
    /// The server's `synchronous_commit`.
    pub synchronous_commit: String,
    /// The server's `synchronous_standby_names` (empty: none).
    pub standby_names: String,
    /// Standbys streaming from the server now (`pg_stat_replication`).
    pub standbys: i64,
}

/// What the metrics gauges show of the attempts table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    /// Pending attempts due for a worker now.
    pub pending_due: i64,
    /// Attempts whose outcome is unknown.
    pub unknown_open: i64,
    /// How long the oldest unknown attempt has been unknown.
    pub oldest_unknown: Duration,
    /// Pending attempts (due or not) per owner that has any.
    pub pending_by_owner: Vec<(String, i64)>,
    /// Pending attempts per provider that has any.
    pub pending_by_provider: Vec<(String, i64)>,
}
