//! A row of a job's audit log, as a transition appends it in its own
//! transaction.

use serde_json::Value;

use super::AttemptRef;
use crate::domain::{EventKind, JobId, OwnerId};

/// A row to append to a job's audit log.
#[derive(Debug)]
pub struct NewEvent<'a> {
    /// The job's owner.
    pub owner: &'a OwnerId,
    /// The job.
    pub job_id: JobId,
    /// What happened.
    pub kind: EventKind,
    /// The attempt it happened to, if it is about one.
    pub attempt_number: Option<i32>,
    /// Its detail.
    pub detail: Value,
}

impl<'a> NewEvent<'a> {
    /// An event about the job as a whole.
    pub fn of_job(owner: &'a OwnerId, job_id: JobId, kind: EventKind, detail: Value) -> Self {
        NewEvent { owner, job_id, kind, attempt_number: None, detail }
    }

    /// An event about one attempt.
    pub fn of_attempt(attempt: &'a AttemptRef, kind: EventKind, detail: Value) -> Self {
        let (owner, job_id, attempt_number) = (&attempt.owner, attempt.job_id, Some(attempt.number));
        NewEvent { owner, job_id, kind, attempt_number, detail }
    }
}
