//! Qualification runs as stored, and where a provider stands for a task's
//! current contract.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

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

/// A stored qualification run.
#[derive(Clone, Debug)]
pub struct QualificationRecord {
    /// Its id.
    pub id: Uuid,
    /// The provider qualified.
    pub provider: String,
    /// Against this task's contract.
    pub task: String,
    /// The contract hash it ran against.
    pub contract_hash: [u8; 32],
    /// Whether every example passed.
    pub passed: bool,
    /// The report, per example.
    pub report: Value,
    /// When it ran.
    pub created_at: DateTime<Utc>,
}
