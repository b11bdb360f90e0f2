//! Whether one more attempt may join a job: decided by [`check_admission`]
//! from every fact it needs, which the store reads with the job's row
//! locked (so the answer holds until it commits). The rules, in the order
//! docs/design.md lists them: the job's and its attempts' states and the
//! task's limits ([`check_states`]), no running attempt streaming to the
//! job's output, then the provider: its qualification
//! (I5) and the job's budget ([`check_provider`], which the retry policy
//! also uses to pass over a candidate).

use serde_json::Value;

use super::state::check_states;
use super::{AdmissionRefusal, Attempt, AttemptState, JobState, Money, QualificationState, TaskRules};

/// What admission decides on.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionFacts<'a> {
    /// The job's task.
    pub task: &'a str,
    /// The job's own provider.
    pub primary: &'a str,
    /// The provider the attempt would go to.
    pub provider: &'a str,
    /// The job's state.
    pub job: JobState,
    /// The job's attempts.
    pub attempts: &'a [Attempt],
    /// Where `provider` stands for the task's contract, read when
    /// [`contract_to_check`] named one (`None` otherwise).
    pub qualification: Option<&'a QualificationState>,
    /// The job's budget (see [`budget_of`]) and its input, to cost attempts
    /// with; `None` without a budget.
    pub budget: Option<(Money, &'a Value)>,
    /// Whether a running attempt's streamed answer holds the job's output.
    pub output_held: bool,
}

/// A refusal, and why where there is more to say than its type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Which rule refused.
    pub refusal: AdmissionRefusal,
    /// Why, for people (the qualification's or the budget's account).
    pub reason: Option<String>,
}

impl From<AdmissionRefusal> for Refused {
    fn from(refusal: AdmissionRefusal) -> Self {
        Refused { refusal, reason: None }
    }
}

/// Every admission rule, in order.
pub fn check_admission(facts: &AdmissionFacts<'_>, rules: &dyn TaskRules) -> Result<(), Refused> {
    let states: Vec<AttemptState> = facts.attempts.iter().map(|a| a.state).collect();
    check_states(facts.job, &states, rules.limits(facts.task))?;
    if facts.output_held {
        return Err(AdmissionRefusal::OutputStreaming.into());
    }
    check_provider(facts, rules)
}

/// The rules about the provider alone: it is qualified for the task (I5),
/// and one more attempt on it fits the job's budget.
pub fn check_provider(facts: &AdmissionFacts<'_>, rules: &dyn TaskRules) -> Result<(), Refused> {
    let refused = |refusal, reason| Refused { refusal, reason: Some(reason) };
    check_qualified(facts, rules).map_err(|reason| refused(AdmissionRefusal::ProviderNotQualified, reason))?;
    if let Some((budget, input)) = facts.budget {
        check_budget(rules, facts.task, input, budget, facts.attempts, facts.provider)
            .map_err(|reason| refused(AdmissionRefusal::BudgetExceeded, reason))?;
    }
    Ok(())
}

/// The contract whose qualification an attempt of a `task` job whose own
/// provider is `primary` needs on `provider`: none on the job's own
/// provider, nor where either is not configured.
pub fn contract_to_check(rules: &dyn TaskRules, task: &str, primary: &str, provider: &str) -> Option<[u8; 32]> {
    if provider == primary {
        return None;
    }
    rules.contract_hash(task, provider)
}

/// Whether the attempt's provider may serve the job's task: the job's own
/// provider always may; any other needs a passing qualification of the
/// task's current contract (I5). `Err` says why not.
fn check_qualified(facts: &AdmissionFacts<'_>, rules: &dyn TaskRules) -> Result<(), String> {
    let (task, provider) = (facts.task, facts.provider);
    if provider == facts.primary {
        return Ok(());
    }
    if rules.contract_hash(task, provider).is_none() {
        return Err(format!("provider '{provider}' cannot serve task '{task}' here: one of them is not configured"));
    }
    let state = facts.qualification.unwrap_or(&QualificationState::Never);
    if !state.passed() && rules.being_qualified(task, provider) {
        return Err(format!(
            "provider '{provider}' is still being qualified for task '{task}'; it can serve attempts once it passes"
        ));
    }
    state.refusal(provider, task).map_or(Ok(()), Err)
}

/// The budget of a `task` job whose own `max_cost` is `job_max_cost`: the
/// lower of the two; `None` when neither is set.
pub fn budget_of(rules: &dyn TaskRules, task: &str, job_max_cost: Option<Money>) -> Option<Money> {
    match (job_max_cost, rules.max_cost(task)) {
        (Some(job), Some(task)) => Some(job.min(task)),
        (one, other) => one.or(other),
    }
}

/// Whether one more attempt on `provider` fits a job's `budget`: what its
/// attempts cost (their recorded cost; for one still pending, running or
/// unknown without a cost, its worst case) plus the new attempt's worst case
/// must not exceed it. `Err` says why, for the client and the job's events.
fn check_budget(
    rules: &dyn TaskRules,
    task: &str,
    input: &Value,
    budget: Money,
    attempts: &[Attempt],
    provider: &str,
) -> Result<(), String> {
    let Some(worst_case) = rules.worst_case_cost(task, provider, input) else { return Ok(()) };
    let open = [AttemptState::Pending, AttemptState::Running, AttemptState::Unknown];
    let committed: Money = attempts
        .iter()
        .map(|a| match &a.cost {
            Some(cost) => cost.amount,
            None if open.contains(&a.state) => rules.worst_case_cost(task, &a.provider, input).unwrap_or_default(),
            None => Money::ZERO,
        })
        .sum();
    if committed.checked_add(worst_case).is_some_and(|needed| needed <= budget) {
        return Ok(());
    }
    Err(format!(
        "an attempt on '{provider}' may cost up to {worst_case}; the job's attempts have spent or may spend {committed} \
         of its budget of {budget}, leaving {}",
        budget.saturating_sub(committed).max(Money::ZERO)
    ))
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::json;

    use super::*;
    use crate::AttemptLimits;
    use crate::policy::{NextAttempt, PastAttempt};

    /// Task `t` on `own`, with `other` configured; every attempt may cost
    /// up to 1.00; `other` is being qualified when `qualifying`.
    struct Rules {
        qualifying: bool,
    }

    impl TaskRules for Rules {
        fn limits(&self, _task: &str) -> AttemptLimits {
            AttemptLimits { max_attempts: 3, max_in_flight: 2 }
        }
        fn contract_hash(&self, _task: &str, provider: &str) -> Option<[u8; 32]> {
            ["own", "other"].contains(&provider).then_some([7; 32])
        }
        fn retry_candidates(&self, _task: &str, _primary: &str, _attempts: &[PastAttempt<'_>]) -> Vec<NextAttempt> {
            Vec::new()
        }
        fn being_qualified(&self, _task: &str, provider: &str) -> bool {
            self.qualifying && provider == "other"
        }
        fn worst_case_cost(&self, _task: &str, _provider: &str, _input: &Value) -> Option<Money> {
            Some("1.00".parse().unwrap())
        }
    }

    fn attempt(number: i32, state: AttemptState) -> Attempt {
        Attempt { number, provider: "own".into(), ..crate::job::tests::attempt(state) }
    }

    fn facts<'a>(provider: &'a str, attempts: &'a [Attempt]) -> AdmissionFacts<'a> {
        AdmissionFacts {
            task: "t",
            primary: "own",
            provider,
            job: JobState::Running,
            attempts,
            qualification: None,
            budget: None,
            output_held: false,
        }
    }

    #[test]
    fn a_running_attempt_streaming_to_the_output_refuses_a_new_attempt_after_the_states() {
        let running = [attempt(1, AttemptState::Running)];
        let held = AdmissionFacts { output_held: true, ..facts("own", &running) };
        let rules = Rules { qualifying: false };
        assert_eq!(refusal(check_admission(&held, &rules)), Some(AdmissionRefusal::OutputStreaming));
        assert_eq!(refusal(check_admission(&facts("own", &running), &rules)), None, "not held: admitted");
        // A finished job says so first.
        let finished = AdmissionFacts { job: JobState::Succeeded, ..held };
        assert_eq!(refusal(check_admission(&finished, &rules)), Some(AdmissionRefusal::JobFinished));
    }

    fn refusal(result: Result<(), Refused>) -> Option<AdmissionRefusal> {
        result.err().map(|refused| refused.refusal)
    }

    #[test]
    fn the_states_are_checked_before_the_provider() {
        let rules = Rules { qualifying: false };
        let attempts = [attempt(1, AttemptState::Unknown)];
        let unknown = AdmissionFacts { job: JobState::Unknown, ..facts("nowhere", &attempts) };
        assert_eq!(refusal(check_admission(&unknown, &rules)), Some(AdmissionRefusal::AttemptOutcomeUnknown));
        assert_eq!(refusal(check_provider(&unknown, &rules)), Some(AdmissionRefusal::ProviderNotQualified));
    }

    #[test]
    fn only_the_jobs_own_provider_needs_no_qualification() {
        let rules = Rules { qualifying: false };
        let attempts = [attempt(1, AttemptState::Running)];
        assert_eq!(check_admission(&facts("own", &attempts), &rules), Ok(()));
        assert_eq!(contract_to_check(&rules, "t", "own", "own"), None);
        assert_eq!(contract_to_check(&rules, "t", "own", "other"), Some([7; 32]));
        let never = check_admission(&facts("other", &attempts), &rules).unwrap_err();
        assert_eq!(never.refusal, AdmissionRefusal::ProviderNotQualified);
        assert_eq!(never.reason.as_deref(), Some("provider 'other' was never qualified for task 't'"));
        let unconfigured = check_admission(&facts("nowhere", &attempts), &rules).unwrap_err();
        assert!(unconfigured.reason.unwrap().contains("not configured"));
        let passed = QualificationState::Qualified { at: Utc::now() };
        let qualified = AdmissionFacts { qualification: Some(&passed), ..facts("other", &attempts) };
        assert_eq!(check_admission(&qualified, &rules), Ok(()));
    }

    #[test]
    fn a_provider_being_qualified_is_refused_saying_so() {
        let rules = Rules { qualifying: true };
        let refused = check_provider(&facts("other", &[]), &rules).unwrap_err();
        assert!(refused.reason.unwrap().contains("still being qualified"));
    }

    #[test]
    fn the_budget_counts_open_attempts_at_their_worst_case_and_settled_ones_at_their_cost() {
        let rules = Rules { qualifying: false };
        let input = json!({});
        let mut failed = attempt(1, AttemptState::Failed);
        failed.cost =
            Some(crate::Cost { amount: "0.50".parse().unwrap(), currency: "USD".into(), price_version: "v1".into() });
        let attempts = [failed, attempt(2, AttemptState::Running)];
        let budget = |amount: &str| Some((amount.parse::<Money>().unwrap(), &input));
        let fits = AdmissionFacts { budget: budget("2.50"), ..facts("own", &attempts) };
        assert_eq!(check_admission(&fits, &rules), Ok(()));
        let over = AdmissionFacts { budget: budget("2.49"), ..facts("own", &attempts) };
        let refused = check_admission(&over, &rules).unwrap_err();
        assert_eq!(refused.refusal, AdmissionRefusal::BudgetExceeded);
        // 0.50 spent, and 1.00 at worst by the attempt still running.
        let reason = refused.reason.unwrap();
        assert!(reason.contains("may spend 1.5 of its budget of 2.49"), "{reason}");
    }

    #[test]
    fn a_settled_attempt_without_a_cost_takes_nothing_from_the_budget() {
        let rules = Rules { qualifying: false };
        let input = json!({});
        // Failed before the provider answered, canceled before it was sent: no cost, no worst case.
        let attempts = [attempt(1, AttemptState::Failed), attempt(2, AttemptState::Canceled)];
        let budget = Some(("1.00".parse::<Money>().unwrap(), &input));
        assert_eq!(check_admission(&AdmissionFacts { budget, ..facts("own", &attempts) }, &rules), Ok(()));
    }

    #[test]
    fn a_budget_is_the_lower_of_the_jobs_and_the_tasks() {
        struct Capped;
        impl TaskRules for Capped {
            fn limits(&self, _task: &str) -> AttemptLimits {
                AttemptLimits::default()
            }
            fn contract_hash(&self, _task: &str, _provider: &str) -> Option<[u8; 32]> {
                None
            }
            fn retry_candidates(&self, _: &str, _: &str, _: &[PastAttempt<'_>]) -> Vec<NextAttempt> {
                Vec::new()
            }
            fn max_cost(&self, _task: &str) -> Option<Money> {
                Some("5".parse().unwrap())
            }
        }
        let money = |text: &str| text.parse::<Money>().unwrap();
        assert_eq!(budget_of(&Capped, "t", Some(money("3"))), Some(money("3")));
        assert_eq!(budget_of(&Capped, "t", Some(money("7"))), Some(money("5")));
        assert_eq!(budget_of(&Capped, "t", None), Some(money("5")));
        assert_eq!(budget_of(&Rules { qualifying: false }, "t", None), None);
    }
}
