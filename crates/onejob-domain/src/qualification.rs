//! Where a provider stands for a task's current contract: what the
//! qualification gate (I5) decides on.

use chrono::{DateTime, Utc};

/// Where a provider stands for a task's current contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QualificationState {
    /// It passed a qualification of the current contract.
    Qualified {
        /// When.
        at: DateTime<Utc>,
    },
    /// Its latest qualification of the current contract failed.
    Failed {
        /// When.
        at: DateTime<Utc>,
        /// The report's summary.
        summary: String,
    },
    /// It was qualified only for an earlier contract.
    Stale {
        /// When that was.
        at: DateTime<Utc>,
    },
    /// It was never qualified for this task.
    Never,
}

impl QualificationState {
    /// Whether attempts may go to the provider.
    pub fn passed(&self) -> bool {
        matches!(self, QualificationState::Qualified { .. })
    }

    /// A stable name: `qualified`, `failed`, `stale`, `never`.
    pub fn name(&self) -> &'static str {
        match self {
            QualificationState::Qualified { .. } => "qualified",
            QualificationState::Failed { .. } => "failed",
            QualificationState::Stale { .. } => "stale",
            QualificationState::Never => "never",
        }
    }

    /// Why attempts may not go to the provider, for people.
    pub fn refusal(&self, provider: &str, task: &str) -> Option<String> {
        match self {
            QualificationState::Qualified { .. } => None,
            QualificationState::Failed { at, summary } => {
                Some(format!("provider '{provider}' failed qualification for task '{task}' at {at}: {summary}"))
            }
            QualificationState::Stale { at } => Some(format!(
                "the contract of task '{task}' changed since provider '{provider}' was qualified at {at}; qualify it again"
            )),
            QualificationState::Never => Some(format!("provider '{provider}' was never qualified for task '{task}'")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_qualified_provider_passes_and_each_state_has_its_documented_name() {
        let at = Utc::now();
        for (state, name, passed) in [
            (QualificationState::Qualified { at }, "qualified", true),
            (QualificationState::Failed { at, summary: "2 of 10 cases failed".into() }, "failed", false),
            (QualificationState::Stale { at }, "stale", false),
            (QualificationState::Never, "never", false),
        ] {
            assert_eq!((state.name(), state.passed()), (name, passed));
            assert_eq!(state.refusal("p", "t").is_none(), passed, "{name}");
        }
    }
}
