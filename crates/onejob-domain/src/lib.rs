//! The pure core of onejob: identities, states, the admission rules and the
//! idempotency primitives. Nothing here does I/O, so every rule is unit-tested
//! beside its code and shared by every store and every caller. The service
//! reaches it as `onejob::domain`.

#![warn(missing_docs)]

pub mod admission;
pub mod awaiting;
pub mod breaker;
pub mod event;
pub mod hedge;
pub mod idempotency;
pub mod ids;
pub mod job;
pub mod limits;
pub mod money;
pub mod output;
pub mod policy;
pub mod qualification;
pub mod retention;
pub mod role;
pub mod rules;
pub mod state;
#[cfg(feature = "sqlx")]
mod stored;
pub mod trace;
pub mod webhook;

pub use admission::{AdmissionFacts, Refused, budget_of, check_admission};
pub use awaiting::{Awaiting, WaitingFor, awaiting};
pub use event::EventKind;
pub use idempotency::{Fingerprint, IdempotencyKey, JobIntent};
pub use ids::{AttemptId, JobId, OwnerId};
pub use job::{
    Attempt, AttemptError, AttemptOrigin, Job, JobEvent, JobFilter, JobSummary, MAX_UNAPPLIED_OUTPUT, NOT_RECEIVED,
    Resolution, Waiting, attempts_being_canceled, unapplied_output,
};
pub use money::{Cost, Money, Price, Usage, UsageFilter, UsageRow};
pub use output::OutputKind;
pub use qualification::QualificationState;
pub use role::KeyRole;
pub use rules::TaskRules;
pub use state::{AdmissionRefusal, AttemptLimits, AttemptState, AttemptTransition, JobState};
pub use trace::TraceContext;
