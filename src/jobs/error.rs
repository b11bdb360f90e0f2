//! How a job use case can fail: each variant is one outcome a client can be
//! told about (the HTTP layer gives each its problem type), except
//! [`JobError::Store`], the database's.

use crate::domain::{AdmissionRefusal, AttemptState, JobId, JobState};
use crate::store::StoreError;
use crate::task::catalog::Violation;

/// Why a use case did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// No such job (or attempt) for this owner; another owner's looks the same.
    #[error("not found")]
    NotFound,
    /// The request breaks these rules.
    #[error("the request is not valid")]
    Invalid(Vec<Violation>),
    /// The named provider is not configured.
    #[error("no provider named '{0}' is configured")]
    ProviderUnknown(String),
    /// The key made a job of another intent (task, input, provider or
    /// budget): I2.
    #[error("this Idempotency-Key was used for a job with another task, input, provider or max_cost")]
    JobKeyReused {
        /// The job it made.
        job_id: JobId,
    },
    /// The key added an attempt on another provider to this job.
    #[error("this Idempotency-Key added an attempt on another provider")]
    AttemptKeyReused {
        /// That attempt's number.
        attempt: i32,
    },
    /// An admission rule refused an attempt.
    #[error("{}", .refusal.problem_type())]
    Refused {
        /// Which rule.
        refusal: AdmissionRefusal,
        /// Why, when there is more to say.
        reason: Option<String>,
        /// When to ask again, in seconds, where the use case knows: an
        /// unknown outcome's wait (`server.unknown_retry_after_secs`).
        retry_after: Option<u64>,
    },
    /// An operator's output breaks the task's output contract.
    #[error("the output breaks the contract")]
    ContractViolation(Vec<String>),
    /// Only an unknown attempt can be resolved; this one is in that state.
    #[error("only an unknown attempt can be resolved; this one is {0}")]
    AttemptNotUnknown(AttemptState),
    /// A job that succeeded cannot be canceled.
    #[error("the job succeeded; a finished job cannot be canceled")]
    JobSucceeded,
    /// Only a finished job with no attempt open can be erased; this one is in that state.
    #[error(
        "only a finished job (succeeded, failed or canceled) with no attempt pending, running or unknown can be erased; this one is {0}"
    )]
    JobNotFinished(JobState),
    /// The owner holds as many long-polls open in this process as it may.
    #[error(
        "this API key's owner holds {per_owner} long-polls and event streams open on this server, as many as it may; \
         retry after the time given, or read the job without waiting"
    )]
    TooManyLongPolls {
        /// How many one owner may hold at once (`server.max_long_polls_per_owner`).
        per_owner: usize,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl JobError {
    /// One field is wrong.
    pub fn invalid(pointer: &str, detail: impl Into<String>) -> Self {
        JobError::Invalid(vec![Violation { pointer: pointer.to_owned(), detail: detail.into() }])
    }
}
