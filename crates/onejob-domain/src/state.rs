//! The state machines of jobs and attempts, and the attempt admission rules.
//! This file is the one place that says which transitions exist; the stores
//! carry them out with guarded updates and call [`JobState::derive`] and
//! [`super::admission::check_admission`] under the job's row lock.
//!
//! Attempt (the edges are [`AttemptTransition::edge`]):
//! `pending → running → succeeded | failed | unknown | superseded`;
//! `unknown → succeeded | failed | superseded` (reconciliation);
//! `pending → canceled`; `running → canceled` (its call aborted, `cancel_losers`);
//! `running → pending` (refused before any work: a 429 with `Retry-After`);
//! `unknown → canceled` (the provider reports it canceled).
//!
//! Job, the first that applies: `succeeded` · `canceled` · `running` ·
//! `queued` · `unknown` · `failed`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use super::event::EventKind;

macro_rules! named_states {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(rename_all = "lowercase")]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every state, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name stored in the database and shown by the API.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownState;
            fn from_str(text: &str) -> Result<Self, UnknownState> {
                match text {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownState(text.to_owned())),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// A state name that no state machine knows.
#[derive(Debug, thiserror::Error)]
#[error("unknown state '{0}'")]
pub struct UnknownState(pub String);

named_states!(
    /// The state of one try.
    AttemptState {
        /// Admitted, waiting for a worker.
        Pending = "pending",
        /// Claimed by a worker under a lease; the provider may be working.
        Running = "running",
        /// Finished with an output that won the job's compare-and-swap.
        Succeeded = "succeeded",
        /// Finished with a definitive error; nothing was produced.
        Failed = "failed",
        /// The outcome cannot be known yet (timeout, lost connection, lost lease).
        Unknown = "unknown",
        /// Finished with an output after another attempt had won; kept for audit.
        Superseded = "superseded",
        /// The job finished or was canceled first: never sent, or its call
        /// was aborted (and canceled at the provider where it can be).
        Canceled = "canceled",
    }
);

named_states!(
    /// The state of one intent, derived from its attempts and stored with them.
    JobState {
        /// An attempt is pending and none is running.
        Queued = "queued",
        /// An attempt is running.
        Running = "running",
        /// The outcome of an attempt is unknown and none is running or pending.
        Unknown = "unknown",
        /// Every attempt failed; a new attempt may be started.
        Failed = "failed",
        /// Terminal: exactly one attempt won.
        Succeeded = "succeeded",
        /// Terminal: canceled by the owner.
        Canceled = "canceled",
    }
);

impl AttemptState {
    /// Whether an attempt in this state may be settled with an output or a
    /// failure: a running one by its worker, an unknown one by reconciliation.
    pub fn is_settleable(self) -> bool {
        AttemptTransition::Finish.from().contains(&self)
    }

    /// Whether the attempt will never change again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            AttemptState::Succeeded | AttemptState::Failed | AttemptState::Superseded | AttemptState::Canceled
        )
    }
}

impl JobState {
    /// Whether the job is finished for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Canceled)
    }

    /// The job's state from its current one and its attempts' states: the
    /// first that applies of succeeded, canceled, running, queued, unknown,
    /// failed. A terminal state never changes.
    pub fn derive(current: JobState, attempts: impl IntoIterator<Item = AttemptState>) -> JobState {
        if current.is_terminal() {
            return current;
        }
        let (mut running, mut pending, mut unknown) = (false, false, false);
        for state in attempts {
            match state {
                AttemptState::Running => running = true,
                AttemptState::Pending => pending = true,
                AttemptState::Unknown => unknown = true,
                _ => {}
            }
        }
        if running {
            JobState::Running
        } else if pending {
            JobState::Queued
        } else if unknown {
            JobState::Unknown
        } else {
            JobState::Failed
        }
    }
}

/// A move of the attempt state machine. [`AttemptTransition::edge`] is the
/// table of allowed edges: the stores guard every update with its `from`
/// states and move the attempt to one of its `to` states, and nothing else
/// changes an attempt's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptTransition {
    /// A worker claims a due pending attempt under a lease.
    Claim,
    /// The provider answered with an output; the job's compare-and-swap
    /// decides between `succeeded` (it won) and `superseded` (I3).
    Finish,
    /// A definitive failure: the provider did not do the work.
    Fail,
    /// A timeout or a lost answer: the outcome cannot be known (I4).
    MarkUnknown,
    /// The lease of a running attempt ran out: its worker died or stalled (I4).
    ExpireLease,
    /// An operator settles an unknown attempt with the provider's output,
    /// through the same compare-and-swap as [`AttemptTransition::Finish`].
    ResolveSucceeded,
    /// An operator settles an unknown attempt as not done.
    ResolveFailed,
    /// The job won or was canceled before a worker claimed the attempt.
    Cancel,
    /// The job won or was canceled while the attempt was running, and its
    /// worker aborted the call (the task's `cancel_losers`): what the call
    /// used is recorded as the provider said or as its worst case. Also an
    /// attempt whose request the provider reports canceled (a running one
    /// followed by its worker, an unknown one by reconciliation).
    Abort,
    /// The provider refused the request before doing any work (a 429 with
    /// `Retry-After`), or its tokens per minute were spent before the send:
    /// the same attempt waits again, `pending`, for as long as it was told.
    Requeue,
}

impl AttemptTransition {
    /// Every transition, in declaration order.
    pub const ALL: &'static [AttemptTransition] = &[
        AttemptTransition::Claim,
        AttemptTransition::Finish,
        AttemptTransition::Fail,
        AttemptTransition::MarkUnknown,
        AttemptTransition::ExpireLease,
        AttemptTransition::ResolveSucceeded,
        AttemptTransition::ResolveFailed,
        AttemptTransition::Cancel,
        AttemptTransition::Abort,
        AttemptTransition::Requeue,
    ];

    /// The edge: the states it may start from, and the states it may end in.
    pub const fn edge(self) -> (&'static [AttemptState], &'static [AttemptState]) {
        use AttemptState::*;
        match self {
            AttemptTransition::Claim => (&[Pending], &[Running]),
            AttemptTransition::Finish => (&[Running, Unknown], &[Succeeded, Superseded]),
            AttemptTransition::Fail => (&[Running, Unknown], &[Failed]),
            AttemptTransition::MarkUnknown => (&[Running], &[Unknown]),
            AttemptTransition::ExpireLease => (&[Running], &[Unknown]),
            AttemptTransition::ResolveSucceeded => (&[Unknown], &[Succeeded, Superseded]),
            AttemptTransition::ResolveFailed => (&[Unknown], &[Failed]),
            AttemptTransition::Cancel => (&[Pending], &[Canceled]),
            AttemptTransition::Abort => (&[Running, Unknown], &[Canceled]),
            AttemptTransition::Requeue => (&[Running], &[Pending]),
        }
    }

    /// The states it may start from: the guard of its update.
    pub const fn from(self) -> &'static [AttemptState] {
        self.edge().0
    }

    /// The states it may end in.
    pub const fn to(self) -> &'static [AttemptState] {
        self.edge().1
    }

    /// The event a job's log records when an attempt makes this move
    /// without an output (a win or a lost race is recorded as such).
    pub const fn event(self) -> EventKind {
        match self {
            AttemptTransition::Claim => EventKind::AttemptClaimed,
            AttemptTransition::Finish | AttemptTransition::ResolveSucceeded => EventKind::AttemptSucceeded,
            AttemptTransition::Fail => EventKind::AttemptFailed,
            AttemptTransition::MarkUnknown | AttemptTransition::ExpireLease => EventKind::AttemptUnknown,
            AttemptTransition::ResolveFailed => EventKind::AttemptResolved,
            AttemptTransition::Cancel => EventKind::JobCanceled,
            AttemptTransition::Abort => EventKind::AttemptCanceled,
            AttemptTransition::Requeue => EventKind::AttemptRequeued,
        }
    }
}

/// The per-task limits that admission enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptLimits {
    /// Attempts a job may ever have, the first included.
    pub max_attempts: u32,
    /// Attempts that may be running at once.
    pub max_in_flight: u32,
}

impl Default for AttemptLimits {
    fn default() -> Self {
        Self { max_attempts: 5, max_in_flight: 2 }
    }
}

/// Why a new attempt was not admitted. Each has a stable problem type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionRefusal {
    /// The job succeeded or was canceled.
    JobFinished,
    /// An attempt is still waiting for a worker.
    AttemptPending,
    /// An attempt's outcome is unknown; reconciliation must clear it first (I4).
    AttemptOutcomeUnknown,
    /// As many attempts are running as the task allows.
    TooManyAttemptsInFlight,
    /// The job has used its whole attempt budget.
    AttemptLimitReached,
    /// The provider has not been proven against the task's contract (I5).
    ProviderNotQualified,
    /// The attempt's worst-case cost would exceed what is left of the job's
    /// budget (its `max_cost`, or its task's).
    BudgetExceeded,
    /// A running attempt's streamed answer holds the job's output: a new
    /// attempt could only lose to it.
    OutputStreaming,
}

impl AdmissionRefusal {
    /// Every refusal, in declaration order.
    pub const ALL: &'static [AdmissionRefusal] = &[
        AdmissionRefusal::JobFinished,
        AdmissionRefusal::AttemptPending,
        AdmissionRefusal::AttemptOutcomeUnknown,
        AdmissionRefusal::TooManyAttemptsInFlight,
        AdmissionRefusal::AttemptLimitReached,
        AdmissionRefusal::ProviderNotQualified,
        AdmissionRefusal::BudgetExceeded,
        AdmissionRefusal::OutputStreaming,
    ];

    /// The problem type, also the name stored in refusal events.
    pub fn problem_type(self) -> &'static str {
        match self {
            AdmissionRefusal::JobFinished => "job-finished",
            AdmissionRefusal::AttemptPending => "attempt-pending",
            AdmissionRefusal::AttemptOutcomeUnknown => "attempt-outcome-unknown",
            AdmissionRefusal::TooManyAttemptsInFlight => "too-many-attempts-in-flight",
            AdmissionRefusal::AttemptLimitReached => "attempt-limit-reached",
            AdmissionRefusal::ProviderNotQualified => "provider-not-qualified",
            AdmissionRefusal::BudgetExceeded => "budget-exceeded",
            AdmissionRefusal::OutputStreaming => "output-streaming",
        }
    }
}

/// The admission rules on states and limits, in the order docs/design.md
/// lists them: the first part of [`super::admission::check_admission`].
pub fn check_states(job: JobState, attempts: &[AttemptState], limits: AttemptLimits) -> Result<(), AdmissionRefusal> {
    let count = |wanted: AttemptState| attempts.iter().filter(|&&s| s == wanted).count();
    if job.is_terminal() {
        return Err(AdmissionRefusal::JobFinished);
    }
    if count(AttemptState::Pending) > 0 {
        return Err(AdmissionRefusal::AttemptPending);
    }
    if count(AttemptState::Unknown) > 0 {
        return Err(AdmissionRefusal::AttemptOutcomeUnknown);
    }
    if count(AttemptState::Running) >= limits.max_in_flight as usize {
        return Err(AdmissionRefusal::TooManyAttemptsInFlight);
    }
    if attempts.len() >= limits.max_attempts as usize {
        return Err(AdmissionRefusal::AttemptLimitReached);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::AttemptState::*;
    use super::*;

    #[test]
    fn the_edge_table_is_the_documented_state_machine() {
        // The module's header, edge by edge.
        let mut edges: Vec<(AttemptState, AttemptState)> = AttemptTransition::ALL
            .iter()
            .flat_map(|t| t.from().iter().flat_map(move |&from| t.to().iter().map(move |&to| (from, to))))
            .collect();
        edges.sort_by_key(|&(from, to)| (from as u8, to as u8));
        edges.dedup();
        let documented = [
            (Pending, Running),
            (Pending, Canceled),
            (Running, Succeeded),
            (Running, Failed),
            (Running, Unknown),
            (Running, Superseded),
            (Running, Canceled),
            (Running, Pending),
            (Unknown, Succeeded),
            (Unknown, Failed),
            (Unknown, Superseded),
            (Unknown, Canceled),
        ];
        let mut documented = documented.to_vec();
        documented.sort_by_key(|&(from, to)| (from as u8, to as u8));
        assert_eq!(edges, documented);
    }

    #[test]
    fn final_states_have_no_way_out_and_every_state_is_reachable() {
        for transition in AttemptTransition::ALL {
            assert!(transition.from().iter().all(|s| !s.is_final()), "{transition:?} leaves a final state");
        }
        let mut reached = vec![Pending];
        while let Some(next) = AttemptTransition::ALL
            .iter()
            .filter(|t| t.from().iter().any(|s| reached.contains(s)))
            .flat_map(|t| t.to())
            .find(|s| !reached.contains(s))
        {
            reached.push(*next);
        }
        assert_eq!(reached.len(), AttemptState::ALL.len(), "reached only {reached:?}");
    }

    #[test]
    fn names_round_trip_through_text() {
        for state in AttemptState::ALL {
            assert_eq!(state.as_str().parse::<AttemptState>().unwrap(), *state);
        }
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>().unwrap(), *state);
        }
        assert!("done".parse::<JobState>().is_err());
    }

    #[test]
    fn every_admission_refusal_is_in_all() {
        // One arm per variant, numbered in declaration order: a new variant
        // fails to compile here until it has an arm and a number, and then
        // this test fails until ALL lists it (and the 8 below counts it).
        let position = |refusal: AdmissionRefusal| match refusal {
            AdmissionRefusal::JobFinished => 0,
            AdmissionRefusal::AttemptPending => 1,
            AdmissionRefusal::AttemptOutcomeUnknown => 2,
            AdmissionRefusal::TooManyAttemptsInFlight => 3,
            AdmissionRefusal::AttemptLimitReached => 4,
            AdmissionRefusal::ProviderNotQualified => 5,
            AdmissionRefusal::BudgetExceeded => 6,
            AdmissionRefusal::OutputStreaming => 7,
        };
        let positions: Vec<usize> = AdmissionRefusal::ALL.iter().map(|r| position(*r)).collect();
        assert_eq!(positions, (0..8).collect::<Vec<_>>(), "ALL lists each refusal once, in declaration order");
    }

    #[test]
    fn admission_refusals_have_the_documented_problem_types_and_serialize_as_them() {
        let types: Vec<&str> = AdmissionRefusal::ALL.iter().map(|r| r.problem_type()).collect();
        assert_eq!(
            types,
            [
                "job-finished",
                "attempt-pending",
                "attempt-outcome-unknown",
                "too-many-attempts-in-flight",
                "attempt-limit-reached",
                "provider-not-qualified",
                "budget-exceeded",
                "output-streaming",
            ]
        );
        for refusal in AdmissionRefusal::ALL {
            assert_eq!(serde_json::to_value(refusal).unwrap(), refusal.problem_type());
        }
    }

    #[test]
    fn job_state_is_the_first_that_applies() {
        let derive = |states: &[AttemptState]| JobState::derive(JobState::Queued, states.iter().copied());
        assert_eq!(derive(&[Running, Pending, Unknown]), JobState::Running);
        assert_eq!(derive(&[Failed, Pending, Unknown]), JobState::Queued);
        assert_eq!(derive(&[Failed, Unknown]), JobState::Unknown);
        assert_eq!(derive(&[Failed, Failed]), JobState::Failed);
        assert_eq!(derive(&[]), JobState::Failed);
    }

    #[test]
    fn terminal_job_states_never_change() {
        assert_eq!(JobState::derive(JobState::Succeeded, [Running]), JobState::Succeeded);
        assert_eq!(JobState::derive(JobState::Canceled, [Pending]), JobState::Canceled);
    }

    #[test]
    fn admission_follows_the_documented_order() {
        let limits = AttemptLimits { max_attempts: 3, max_in_flight: 2 };
        let check = |job, attempts: &[AttemptState]| check_states(job, attempts, limits);
        assert_eq!(check(JobState::Succeeded, &[Pending]), Err(AdmissionRefusal::JobFinished));
        assert_eq!(check(JobState::Canceled, &[]), Err(AdmissionRefusal::JobFinished));
        assert_eq!(check(JobState::Queued, &[Pending, Unknown]), Err(AdmissionRefusal::AttemptPending));
        assert_eq!(check(JobState::Unknown, &[Unknown]), Err(AdmissionRefusal::AttemptOutcomeUnknown));
        assert_eq!(check(JobState::Running, &[Running, Running]), Err(AdmissionRefusal::TooManyAttemptsInFlight));
        assert_eq!(check(JobState::Failed, &[Failed, Failed, Failed]), Err(AdmissionRefusal::AttemptLimitReached));
        assert_eq!(check(JobState::Running, &[Running]), Ok(()));
        assert_eq!(check(JobState::Failed, &[Failed, Failed]), Ok(()));
    }

    #[test]
    fn a_running_attempt_does_not_block_a_fallback() {
        let limits = AttemptLimits::default();
        assert_eq!(check_states(JobState::Running, &[Running], limits), Ok(()));
    }

    #[test]
    fn only_running_and_unknown_attempts_can_be_settled() {
        let settleable: Vec<_> = AttemptState::ALL.iter().filter(|s| s.is_settleable()).collect();
        assert_eq!(settleable, [&Running, &Unknown]);
        assert!(Superseded.is_final() && Canceled.is_final() && !Pending.is_final());
    }
}
