//! The kinds of rows in a job's append-only audit log. The stores write
//! them, the dashboard's timeline reads them; both name them only through
//! this enum.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::JobState;

/// An event kind's name that no kind has.
#[derive(Debug, thiserror::Error)]
#[error("unknown event kind '{0}'")]
pub struct UnknownEventKind(pub String);

macro_rules! event_kinds {
    ($($(#[$doc:meta])* $variant:ident = $text:literal),+ $(,)?) => {
        /// What happened to a job.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(rename_all = "kebab-case")]
        pub enum EventKind {
            $($(#[$doc])* $variant),+
        }

        impl EventKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant),+];

            /// The name stored in the database and shown by the API.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(EventKind::$variant => $text),+
                }
            }
        }

        impl FromStr for EventKind {
            type Err = UnknownEventKind;
            fn from_str(text: &str) -> Result<Self, UnknownEventKind> {
                match text {
                    $($text => Ok(EventKind::$variant),)+
                    _ => Err(UnknownEventKind(text.to_owned())),
                }
            }
        }
    };
}

event_kinds!(
    /// The job was created with its first attempt.
    JobCreated = "job-created",
    /// An attempt was admitted, by a client or by the retry policy.
    AttemptAdmitted = "attempt-admitted",
    /// An admission rule refused an attempt.
    AdmissionRefused = "admission-refused",
    /// The failover policy passed over a provider (unqualified, over budget).
    FailoverSkipped = "failover-skipped",
    /// A worker claimed an attempt.
    AttemptClaimed = "attempt-claimed",
    /// The provider refused a claimed attempt before doing any work (a 429
    /// with `Retry-After`, or its tokens per minute spent): it is pending again.
    AttemptRequeued = "attempt-requeued",
    /// An attempt's output won the job's compare-and-swap.
    AttemptSucceeded = "attempt-succeeded",
    /// An attempt's output came after another had won; kept as superseded.
    RaceLost = "race-lost",
    /// An attempt failed definitively.
    AttemptFailed = "attempt-failed",
    /// An attempt's outcome became unknown.
    AttemptUnknown = "attempt-unknown",
    /// An operator settled an unknown attempt as not done.
    AttemptResolved = "attempt-resolved",
    /// The owner canceled the job.
    JobCanceled = "job-canceled",
    /// A running attempt's call was aborted because its job had finished
    /// (won by another attempt, or canceled).
    AttemptCanceled = "attempt-canceled",
);

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for EventKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl EventKind {
    /// The job's state after an event of this kind with this `detail`,
    /// given its state `before`: what the event's detail records
    /// (`job_state`), else what the kind implies (a creation leaves the job
    /// queued, a claim running, a win succeeded, a cancel canceled), else
    /// unchanged (a skip or a refusal changes nothing).
    pub fn job_state_after(self, detail: &serde_json::Value, before: Option<JobState>) -> Option<JobState> {
        if let Some(recorded) =
            detail.get("job_state").and_then(|state| state.as_str()).and_then(|state| state.parse().ok())
        {
            return Some(recorded);
        }
        match self {
            EventKind::JobCreated => Some(JobState::Queued),
            EventKind::AttemptClaimed => Some(JobState::Running),
            EventKind::AttemptSucceeded => Some(JobState::Succeeded),
            EventKind::JobCanceled => Some(JobState::Canceled),
            _ => before,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_job_state_after_an_event_is_its_recorded_one_else_its_kinds_else_the_last() {
        let none = json!({});
        assert_eq!(EventKind::JobCreated.job_state_after(&none, None), Some(JobState::Queued));
        assert_eq!(EventKind::AttemptClaimed.job_state_after(&none, Some(JobState::Queued)), Some(JobState::Running));
        let failed = json!({"job_state": "failed"});
        assert_eq!(EventKind::AttemptFailed.job_state_after(&failed, Some(JobState::Running)), Some(JobState::Failed));
        assert_eq!(EventKind::FailoverSkipped.job_state_after(&none, Some(JobState::Failed)), Some(JobState::Failed));
        assert_eq!(
            EventKind::AttemptSucceeded.job_state_after(&none, Some(JobState::Running)),
            Some(JobState::Succeeded)
        );
        let lost = json!({"job_state": "succeeded", "loser": 2});
        assert_eq!(EventKind::RaceLost.job_state_after(&lost, Some(JobState::Succeeded)), Some(JobState::Succeeded));
        assert_eq!(
            EventKind::JobCanceled.job_state_after(&json!({"from": "running"}), Some(JobState::Running)),
            Some(JobState::Canceled)
        );
    }

    #[test]
    fn event_kinds_round_trip_through_their_names_and_serde_agrees() {
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>().unwrap(), *kind);
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        assert!("job-done".parse::<EventKind>().is_err());
    }

    #[test]
    fn an_event_kind_shows_and_compares_as_its_stored_name() {
        for kind in EventKind::ALL {
            assert_eq!(kind.to_string(), kind.as_str());
            assert!(*kind == kind.as_str());
        }
        assert_eq!(EventKind::RaceLost.to_string(), "race-lost");
        assert!(EventKind::RaceLost == "race-lost");
        assert!(EventKind::RaceLost != "attempt-succeeded");
    }
}
