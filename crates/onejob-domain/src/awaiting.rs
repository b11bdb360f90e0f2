//! What a job waits for when nothing more happens to it on its own: the
//! streams say so at once, so that a UI never shows a spinner over an
//! answer that will not come unless someone acts.

use serde::Serialize;

use crate::job::Job;
use crate::state::{AttemptLimits, AttemptState, JobState, check_states};

/// A job that waits for someone (or, for an unknown attempt, for the
/// provider to be asked): its state, who may move it, and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Awaiting {
    /// `failed` or `unknown`.
    pub state: JobState,
    /// `client`: the job failed and may still take a new attempt (a retry,
    /// a fallback to another provider) or a cancel; `operator`: an
    /// attempt's outcome is unknown and its provider cannot be asked, so
    /// an operator resolves it; `reconciliation`: an attempt's outcome is
    /// unknown and onejob asks its provider until it knows (no new attempt
    /// is taken meanwhile).
    pub waiting_for: &'static str,
    /// The attempt it is about: the unknown one, or the last one that failed.
    pub attempt: Option<i32>,
    /// What may be done next, in a sentence.
    pub next: &'static str,
}

/// What `job` waits for, under its task's `limits`; `reconcilable` says
/// whether a provider can be asked about a request. `None` while the job
/// works (an attempt pending or running) or once it can change no more.
pub fn awaiting(job: &Job, limits: AttemptLimits, reconcilable: impl Fn(&str) -> bool) -> Option<Awaiting> {
    let open = |state: AttemptState| matches!(state, AttemptState::Pending | AttemptState::Running);
    if job.attempts.iter().any(|attempt| open(attempt.state)) {
        return None;
    }
    match job.state {
        JobState::Unknown => {
            let unknown = job.attempts.iter().find(|attempt| attempt.state == AttemptState::Unknown)?;
            let (waiting_for, next) = if reconcilable(&unknown.provider) {
                ("reconciliation", "onejob asks the provider what became of the attempt; wait for its answer")
            } else {
                ("operator", "an operator resolves the unknown attempt (POST /jobs/{id}/attempts/{number}/resolve)")
            };
            Some(Awaiting { state: job.state, waiting_for, attempt: Some(unknown.number), next })
        }
        JobState::Failed => {
            let states: Vec<AttemptState> = job.attempts.iter().map(|attempt| attempt.state).collect();
            check_states(job.state, &states, limits).ok()?;
            Some(Awaiting {
                state: job.state,
                waiting_for: "client",
                attempt: job.attempts.last().map(|attempt| attempt.number),
                next: "retry or fall back with POST /jobs/{id}/attempts, or cancel the job",
            })
        }
        JobState::Queued | JobState::Running | JobState::Succeeded | JobState::Canceled => None,
    }
}
