//! What a resolve answers. Its owner gets the job; an operator resolving
//! another owner's attempt gets only where the job and that attempt now
//! stand: never the owner's name, input, idempotency key or output.

use serde::Serialize;

use crate::domain::{AttemptState, Job, JobState, OwnerId};

/// The answer to `POST /jobs/{id}/attempts/{number}/resolve`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ResolveAnswer {
    /// To a key of the job's owner: the job as it is after.
    Job(Box<Job>),
    /// To an operator of another owner: where the job stands.
    Elsewhere(ResolvedElsewhere),
}

/// Where another owner's job stands after an operator resolved one of its
/// attempts.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ResolvedElsewhere {
    /// The job's id.
    #[schema(value_type = uuid::Uuid)]
    pub job_id: crate::domain::JobId,
    /// Its state now.
    pub state: JobState,
    /// The resolved attempt's number.
    pub attempt: i32,
    /// That attempt's state now.
    pub attempt_state: AttemptState,
    /// The attempt that won, if one has.
    pub winning_attempt: Option<i32>,
}

impl ResolveAnswer {
    /// The answer for `caller_owner` about attempt `number` of `job`;
    /// `None` when the job has no such attempt (erased meanwhile).
    pub fn for_caller(job: Job, number: i32, caller_owner: &OwnerId) -> Option<ResolveAnswer> {
        if &job.owner == caller_owner {
            return Some(ResolveAnswer::Job(Box::new(job)));
        }
        let attempt_state = job.attempts.iter().find(|a| a.number == number)?.state;
        Some(ResolveAnswer::Elsewhere(ResolvedElsewhere {
            job_id: job.id,
            state: job.state,
            attempt: number,
            attempt_state,
            winning_attempt: job.winning_attempt,
        }))
    }
}
