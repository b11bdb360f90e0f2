//! Qualification runs as stored, and where a provider stands for a task's
//! current contract.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

pub use crate::domain::QualificationState;

use super::{Result, Store};

/// A qualification run to store.
#[derive(Debug)]
pub struct NewQualificationRun<'a> {
    /// The provider qualified.
    pub provider: &'a str,
    /// Against this task's contract.
    pub task: &'a str,
    /// The contract hash it ran against.
    pub contract_hash: &'a [u8; 32],
    /// Whether every example passed.
    pub passed: bool,
    /// The report, per example.
    pub report: &'a Value,
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

impl Store {
    /// Stores a qualification run.
    pub async fn insert_qualification(
        &self,
        provider: &str,
        task: &str,
        contract_hash: &[u8; 32],
        passed: bool,
        report: &Value,
    ) -> Result<QualificationRecord> {
        self.driver().insert_qualification(&NewQualificationRun { provider, task, contract_hash, passed, report }).await
    }

    /// Where `provider` stands for `task`'s contract with this hash.
    pub async fn qualification_state(
        &self,
        provider: &str,
        task: &str,
        contract_hash: &[u8; 32],
    ) -> Result<QualificationState> {
        self.driver().qualification_state(provider, task, contract_hash).await
    }

    /// The latest qualification run of `provider` for `task`, of any contract.
    pub async fn latest_qualification(&self, provider: &str, task: &str) -> Result<Option<QualificationRecord>> {
        self.driver().latest_qualification(provider, task).await
    }

    /// Every (provider, task) pair with a qualification run, in order: what
    /// the database knows of providers and tasks.
    pub async fn list_qualified_pairs(&self) -> Result<Vec<(String, String)>> {
        self.driver().list_qualified_pairs().await
    }
}
