//! What a job waits for when nothing more happens to it on its own: the
//! streams say so at once, so that a UI never shows a spinner over an
//! answer that will not come unless someone acts.

use serde::Serialize;

use crate::job::{Attempt, Job};
use crate::state::{AttemptLimits, AttemptState, JobState, check_states};

/// Who may move a job that waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitingFor {
    /// The client: the job failed and may still take a new attempt (a
    /// retry, a fallback to another provider), or a cancel.
    Client,
    /// An operator (or the job's owner): an attempt's outcome is unknown
    /// and its provider cannot be asked, so a person resolves it.
    Operator,
    /// onejob's reconciler: an attempt's outcome is unknown and its
    /// provider is asked until it knows; no new attempt is taken meanwhile.
    Reconciliation,
}

/// A job that waits for someone (or, for an unknown attempt, for its
/// provider to be asked): its state, who may move it, and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Awaiting {
    /// `failed` or `unknown`.
    pub state: JobState,
    /// Who may move it.
    pub waiting_for: WaitingFor,
    /// The attempt it is about: the unknown one, or the last one that failed.
    pub attempt: Option<i32>,
    /// What may be done next, in a sentence.
    pub next: &'static str,
}

/// What `job` waits for, under its task's `limits`; `reconcilable` says
/// whether an attempt's provider can be asked about its request. `None`
/// while the job works (an attempt pending or running) or once it can
/// change no more. A failed job waits for its client while its attempts
/// allow one more; whether the job's budget affords the one asked for is
/// known only then (`409 budget-exceeded` otherwise).
pub fn awaiting(job: &Job, limits: AttemptLimits, reconcilable: impl Fn(&Attempt) -> bool) -> Option<Awaiting> {
    let open = |state: AttemptState| matches!(state, AttemptState::Pending | AttemptState::Running);
    if job.attempts.iter().any(|attempt| open(attempt.state)) {
        return None;
    }
    match job.state {
        JobState::Unknown => {
            let unknown = job.attempts.iter().find(|attempt| attempt.state == AttemptState::Unknown)?;
            let (waiting_for, next) = if reconcilable(unknown) {
                (WaitingFor::Reconciliation, "onejob asks the provider what became of the attempt; wait for its answer")
            } else {
                (
                    WaitingFor::Operator,
                    "the job's owner or an operator resolves the unknown attempt \
                     (POST /jobs/{id}/attempts/{number}/resolve) once they know what became of it",
                )
            };
            Some(Awaiting { state: job.state, waiting_for, attempt: Some(unknown.number), next })
        }
        JobState::Failed => {
            let states: Vec<AttemptState> = job.attempts.iter().map(|attempt| attempt.state).collect();
            check_states(job.state, &states, limits).ok()?;
            let failed = job.attempts.iter().rev().find(|attempt| attempt.state == AttemptState::Failed);
            Some(Awaiting {
                state: job.state,
                waiting_for: WaitingFor::Client,
                attempt: failed.map(|attempt| attempt.number),
                next: "retry or fall back with POST /jobs/{id}/attempts, or cancel the job",
            })
        }
        JobState::Queued | JobState::Running | JobState::Succeeded | JobState::Canceled => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::tests::job_in;

    const LIMITS: AttemptLimits = AttemptLimits { max_attempts: 3, max_in_flight: 2 };

    fn asked(_: &Attempt) -> bool {
        true
    }

    #[test]
    fn a_job_at_work_or_finished_waits_for_no_one() {
        for (state, attempts) in [
            (JobState::Running, vec![AttemptState::Running]),
            (JobState::Queued, vec![AttemptState::Failed, AttemptState::Pending]),
            (JobState::Succeeded, vec![AttemptState::Succeeded]),
            (JobState::Canceled, vec![AttemptState::Canceled]),
            // A fallback running beside an unknown attempt: it works.
            (JobState::Running, vec![AttemptState::Unknown, AttemptState::Running]),
        ] {
            assert_eq!(awaiting(&job_in(state, &attempts), LIMITS, asked), None, "{state:?} {attempts:?}");
        }
    }

    #[test]
    fn a_failed_job_waits_for_its_client_while_its_attempts_allow_one_more() {
        let failed = job_in(JobState::Failed, &[AttemptState::Failed, AttemptState::Canceled]);
        let waits = awaiting(&failed, LIMITS, asked).expect("it waits");
        assert_eq!((waits.waiting_for, waits.attempt), (WaitingFor::Client, Some(1)), "the last one that failed");
        let used_up = job_in(JobState::Failed, &[AttemptState::Failed; 3]);
        assert_eq!(awaiting(&used_up, LIMITS, asked), None, "its attempts are used up: it can change no more");
    }

    #[test]
    fn an_unknown_attempt_waits_for_the_reconciler_when_its_provider_can_be_asked_else_for_a_person() {
        let unknown = job_in(JobState::Unknown, &[AttemptState::Failed, AttemptState::Unknown]);
        let asked_about = awaiting(&unknown, LIMITS, asked).unwrap();
        assert_eq!((asked_about.waiting_for, asked_about.attempt), (WaitingFor::Reconciliation, Some(2)));
        let no_lookup = awaiting(&unknown, LIMITS, |attempt| attempt.number != 2).unwrap();
        assert_eq!(no_lookup.waiting_for, WaitingFor::Operator);
        assert_eq!(serde_json::to_value(&no_lookup).unwrap()["waiting_for"], "operator");
    }
}
