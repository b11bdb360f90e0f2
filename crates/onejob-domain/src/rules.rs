//! What admission and the retry policy need to know about tasks, as the
//! catalogue of configured tasks and providers answers it.

use serde_json::Value;

use super::policy::{NextAttempt, PastAttempt};
use super::{AttemptLimits, Money};

/// What the store needs to know about tasks to admit attempts and to
/// schedule the next one after a failure, inside the same transaction.
pub trait TaskRules: Send + Sync {
    /// The limits of a task.
    fn limits(&self, task: &str) -> AttemptLimits;
    /// The current contract hash of `task` for `provider`; `None` when either
    /// is not configured. A provider other than a job's own needs a passing
    /// qualification with this hash (I5).
    fn contract_hash(&self, task: &str, provider: &str) -> Option<[u8; 32]>;
    /// The retry and failover policy: where the next automatic attempt of a
    /// `task` job whose attempts (in number order) are these could go, best
    /// first. The store takes the first qualified one.
    fn retry_candidates(&self, task: &str, primary: &str, attempts: &[PastAttempt<'_>]) -> Vec<NextAttempt>;
    /// Whether a qualification of `provider` for `task` is running in this
    /// process (a refusal for want of a passing one says so).
    fn being_qualified(&self, _task: &str, _provider: &str) -> bool {
        false
    }
    /// Whether the task aborts the calls of attempts that can no longer
    /// win (`cancel_losers`).
    fn cancels_losers(&self, _task: &str) -> bool {
        true
    }
    /// The task's budget per job, if it has one.
    fn max_cost(&self, _task: &str) -> Option<Money> {
        None
    }
    /// The most an attempt of a `task` job with this input may cost on
    /// `provider`: its prompt's tokens and the provider's
    /// `max_output_tokens` at its price. `None` when the provider has no
    /// price (such attempts are never refused for budget).
    fn worst_case_cost(&self, _task: &str, _provider: &str, _input: &Value) -> Option<Money> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rules that answer only what every implementation must.
    struct Plain;

    impl TaskRules for Plain {
        fn limits(&self, _task: &str) -> AttemptLimits {
            AttemptLimits::default()
        }
        fn contract_hash(&self, _task: &str, _provider: &str) -> Option<[u8; 32]> {
            None
        }
        fn retry_candidates(&self, _task: &str, _primary: &str, _attempts: &[PastAttempt<'_>]) -> Vec<NextAttempt> {
            Vec::new()
        }
    }

    #[test]
    fn unless_told_otherwise_a_task_cancels_losers_and_has_no_budget_or_price_or_qualification_running() {
        let input = serde_json::json!({});
        assert!(Plain.cancels_losers("t"), "cancel_losers defaults to true");
        assert!(!Plain.being_qualified("t", "p"));
        assert_eq!(Plain.max_cost("t"), None);
        assert_eq!(Plain.worst_case_cost("t", "p", &input), None, "an unpriced provider is never refused for budget");
    }
}
