//! What the stores keep of usage and cost: the usage recorded on an
//! attempt, and the rows the usage report sums. Amounts travel as exact
//! decimal strings between Rust and both databases (see
//! [`crate::domain::money`]).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::query::Query;
use sqlx::{Database, Encode, Type};

use super::{Result, TaskRules, corrupt};
use crate::domain::{Attempt, AttemptState, Cost, Money, Usage};

/// The usage and cost to record on an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptUsage {
    /// The tokens.
    pub usage: Usage,
    /// Their cost, when the provider has a price.
    pub cost: Option<Cost>,
}

/// Which of an owner's attempts the usage report covers: created in
/// `[from, to)`.
#[derive(Clone, Copy, Debug)]
pub struct UsageFilter {
    /// From this time on.
    pub from: DateTime<Utc>,
    /// Before this time.
    pub to: DateTime<Utc>,
}

/// One attempt with recorded usage, as the usage report reads it, or the
/// sums of purged attempts of one day (see [`super::retention`]): their
/// `usage` and `cost` are then the sums, `created_at` the day's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    /// The job's task.
    pub task: String,
    /// The attempt's provider.
    pub provider: String,
    /// Its state: which part of the bill it is (winner or waste).
    pub state: AttemptState,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Its tokens.
    pub usage: Usage,
    /// Its cost, when its provider had a price.
    pub cost: Option<Cost>,
    /// How many attempts: 1, or a rollup's count.
    pub attempts: i64,
    /// How many of them have estimated usage.
    pub estimated_attempts: i64,
}

/// Reads an attempt's stored usage columns.
pub(crate) fn read_usage(prompt: Option<i64>, completion: Option<i64>, estimated: Option<bool>) -> Option<Usage> {
    Some(Usage { prompt_tokens: prompt?, completion_tokens: completion?, estimated: estimated? })
}

/// Reads an attempt's stored cost columns.
pub(crate) fn read_cost(
    amount: Option<String>,
    currency: Option<String>,
    price_version: Option<String>,
) -> Result<Option<Cost>> {
    let (Some(amount), Some(currency), Some(price_version)) = (amount, currency, price_version) else {
        return Ok(None);
    };
    let amount: Money = amount.parse().map_err(corrupt)?;
    Ok(Some(Cost { amount, currency, price_version }))
}

/// The assignments of a settling `update` that record an attempt's usage:
/// when the flag bound at `{sigil}{flag}` is true, the six values bound
/// after it (see [`bind_usage`]); the columns as they were otherwise.
/// `cost_cast` types the cost (`::numeric` on Postgres).
pub(crate) fn usage_assignments(sigil: char, flag: usize, cost_cast: &str) -> String {
    ["prompt_tokens", "completion_tokens", "usage_estimated", "cost", "currency", "price_version"]
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let cast = if *column == "cost" { cost_cast } else { "" };
            format!("{column} = case when {sigil}{flag} then {sigil}{}{cast} else {column} end", flag + 1 + i)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Binds what [`usage_assignments`] reads: whether there is a usage to
/// record, then its tokens in and out, whether they are estimated, and its
/// cost, currency and price version.
pub(crate) fn bind_usage<'q, DB: Database>(
    query: Query<'q, DB, <DB as Database>::Arguments<'q>>,
    usage: Option<&AttemptUsage>,
) -> Query<'q, DB, <DB as Database>::Arguments<'q>>
where
    bool: Encode<'q, DB> + Type<DB>,
    Option<bool>: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    Option<String>: Encode<'q, DB> + Type<DB>,
{
    let cost = usage.and_then(|u| u.cost.as_ref());
    query
        .bind(usage.is_some())
        .bind(usage.map(|u| u.usage.prompt_tokens))
        .bind(usage.map(|u| u.usage.completion_tokens))
        .bind(usage.map(|u| u.usage.estimated))
        .bind(cost.map(|c| c.amount.to_string()))
        .bind(cost.map(|c| c.currency.clone()))
        .bind(cost.map(|c| c.price_version.clone()))
}

/// The budget of a `task` job whose own `max_cost` is `job_max_cost`: the
/// lower of the two; `None` when neither is set.
pub fn budget_of(rules: &dyn TaskRules, task: &str, job_max_cost: Option<Money>) -> Option<Money> {
    match (job_max_cost, rules.max_cost(task)) {
        (Some(job), Some(task)) => Some(job.min(task)),
        (one, other) => one.or(other),
    }
}

/// A job's budget and input from its stored `max_cost` (decimal text) and
/// its input (read only when there is a budget).
pub(crate) fn stored_budget(
    rules: &dyn TaskRules,
    task: &str,
    max_cost: Option<String>,
    input: impl FnOnce() -> Result<Value>,
) -> Result<Option<(Money, Value)>> {
    let max_cost = max_cost.map(|m| m.parse::<Money>()).transpose().map_err(corrupt)?;
    let Some(budget) = budget_of(rules, task, max_cost) else { return Ok(None) };
    Ok(Some((budget, input()?)))
}

/// Whether one more attempt on `provider` fits a job's `budget`: what its
/// attempts cost (their recorded cost; for one still pending, running or
/// unknown without a cost, its worst case) plus the new attempt's worst case
/// must not exceed it. `Err` says why, for the client and the job's events.
pub(crate) fn check_budget(
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
