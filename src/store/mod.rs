//! The store: every read and every state transition of jobs, attempts,
//! events, API keys, sessions, webhooks, usage and retention, behind the
//! [`Store`] struct (`facade.rs`). Callers never see SQL. The logic of each
//! transition is written once, in `transitions.rs`, over the per-backend
//! statements of `driver.rs`; `postgres/` and `sqlite/` hold only their SQL
//! and what truly differs between the two databases; `rows.rs` reads rows
//! into values for both. What the calls take and answer lives beside its
//! concern: `jobs.rs`, `claims.rs`, `keys.rs`, `sessions.rs`, `webhooks.rs`,
//! `qualifications.rs`, `usage.rs`, `retention.rs`. See `docs/design.md`,
//! "Storage".
//!
//! Every transition that touches an existing job locks the job's row first
//! (so the stored job state, derived with [`crate::domain::JobState::derive`],
//! is always the state of its attempts) and is guarded by the states it may
//! start from. A guard that matches zero rows is a typed outcome
//! ([`Transition::Stale`], [`Transition::Lost`]), never an error and never
//! ignored.

mod admission;
pub(crate) mod attempts;
pub(crate) mod breakers;
pub(crate) mod claims;
pub(crate) mod driver;
mod error;
mod events;
mod eviction;
mod facade;
pub(crate) mod groups;
pub(crate) mod jobs;
pub(crate) mod keys;
pub mod output;
pub mod postgres;
pub(crate) mod purge;
pub(crate) mod qualifications;
pub mod retention;
mod rows;
pub(crate) mod sessions;
mod shared;
pub mod sqlite;
mod transitions;
pub(crate) mod usage;
pub(crate) mod webhooks;

pub use crate::domain::rules::TaskRules;
pub use admission::Hedged;
pub use attempts::{
    Admission, AttemptRef, ClaimedAttempt, NewAttempt, OpenUnknown, Resolution, Resolved, Scheduled, SettleOptions,
    Transition, UnknownAttempt, WaitingFacts,
};
pub use claims::ClaimRules;
pub use driver::Driver;
pub use error::{DatabaseFailure, Result, StoreError, report_database_failures_to};
pub(crate) use error::{check_migrations, corrupt};
pub use facade::{Gauges, Replication, Store};
pub use groups::{GroupCommit, Unanswered};
pub use jobs::{Cancel, CreateJob, JobFilter, NewJob, OwnedJobSummary};
pub use keys::{ApiKey, KeyChange, LiveKey, NewKey};
pub use postgres::PostgresStore;
pub use qualifications::{NewQualificationRun, QualificationRecord, QualificationState};
pub use sessions::{NewSession, StoredSession};
pub use sqlite::SqliteStore;
pub use transitions::batches::Finish;
pub use usage::{AttemptUsage, UsageFilter, UsageRow};
pub use webhooks::{ClaimedDelivery, Delivery, DeliveryTry, Endpoint, NewEndpoint, TryOutcome};
