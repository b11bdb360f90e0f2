//! What the stores keep of usage and cost: the usage recorded on an
//! attempt, and the rows the usage report sums. Amounts travel as exact
//! decimal strings between Rust and both databases (see
//! [`crate::domain::money`]).

use serde_json::Value;
use sqlx::query::Query;
use sqlx::{Database, Encode, Type};

use super::{AttemptRef, Store};
use super::{Result, TaskRules, corrupt};
use crate::domain::OwnerId;
use crate::domain::{Cost, Money, Usage};

/// The usage and cost to record on an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptUsage {
    /// The tokens.
    pub usage: Usage,
    /// Their cost, when the provider has a price.
    pub cost: Option<Cost>,
}

pub use crate::domain::money::{UsageFilter, UsageRow};

/// An attempt's stored usage columns: tokens in, out, written to and read
/// from the provider's cache (none: 0), the provider's compute time (none:
/// 0), and whether they are estimated.
pub(crate) struct StoredUsage {
    pub prompt: Option<i64>,
    pub completion: Option<i64>,
    pub cache_write: Option<i64>,
    pub cache_read: Option<i64>,
    pub predict_ms: Option<i64>,
    pub outputs: Option<i64>,
    pub estimated: Option<bool>,
}

/// Reads an attempt's stored usage columns.
pub(crate) fn read_usage(stored: StoredUsage) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: stored.prompt?,
        completion_tokens: stored.completion?,
        cache_write_tokens: stored.cache_write.unwrap_or(0),
        cache_read_tokens: stored.cache_read.unwrap_or(0),
        predict_ms: stored.predict_ms.unwrap_or(0),
        outputs: stored.outputs.unwrap_or(0),
        estimated: stored.estimated?,
    })
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
/// when the flag bound at `{sigil}{flag}` is true, the ten values bound
/// after it (see [`bind_usage`]); the columns as they were otherwise.
/// `cost_cast` types the cost (`::numeric` on Postgres).
pub(crate) fn usage_assignments(sigil: char, flag: usize, cost_cast: &str) -> String {
    assignments_of(&format!("{sigil}{flag}"), |i, _| format!("{sigil}{}", flag + 1 + i), "", cost_cast)
}

/// [`usage_assignments`] in general: when `flag` is true, each column set
/// to `value(its index, its name)`; otherwise kept, named as `current`
/// (a table alias and its dot, or nothing) prefixes it.
pub(crate) fn assignments_of(
    flag: &str,
    value: impl Fn(usize, &str) -> String,
    current: &str,
    cost_cast: &str,
) -> String {
    USAGE_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let cast = if *column == "cost" { cost_cast } else { "" };
            format!("{column} = case when {flag} then {}{cast} else {current}{column} end", value(i, column))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns [`bind_counts`] binds, in its order.
pub(crate) const USAGE_COLUMNS: [&str; 10] = [
    "prompt_tokens",
    "completion_tokens",
    "usage_estimated",
    "cost",
    "currency",
    "price_version",
    "cache_write_tokens",
    "cache_read_tokens",
    "predict_ms",
    "outputs",
];

/// Binds what [`usage_assignments`] reads: whether there is a usage to
/// record, then its tokens in and out, whether they are estimated, its
/// cost, currency and price version, its cached tokens, compute time and
/// outputs.
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
    bind_counts(query.bind(usage.is_some()), usage)
}

/// Binds `usage`'s [`USAGE_COLUMNS`]: tokens in and out, whether they are
/// estimated, its cost, currency and price version, and the prompt's
/// tokens written to and read from the provider's cache, and the
/// provider's compute time (each null without it).
pub(crate) fn bind_counts<'q, DB: Database>(
    query: Query<'q, DB, <DB as Database>::Arguments<'q>>,
    usage: Option<&AttemptUsage>,
) -> Query<'q, DB, <DB as Database>::Arguments<'q>>
where
    Option<bool>: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    Option<String>: Encode<'q, DB> + Type<DB>,
{
    let cost = usage.and_then(|u| u.cost.as_ref());
    query
        .bind(usage.map(|u| u.usage.prompt_tokens))
        .bind(usage.map(|u| u.usage.completion_tokens))
        .bind(usage.map(|u| u.usage.estimated))
        .bind(cost.map(|c| c.amount.to_string()))
        .bind(cost.map(|c| c.currency.clone()))
        .bind(cost.map(|c| c.price_version.clone()))
        .bind(usage.map(|u| u.usage.cache_write_tokens))
        .bind(usage.map(|u| u.usage.cache_read_tokens))
        .bind(usage.map(|u| u.usage.predict_ms))
        .bind(usage.map(|u| u.usage.outputs))
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
    let Some(budget) = crate::domain::budget_of(rules, task, max_cost) else { return Ok(None) };
    Ok(Some((budget, input()?)))
}

impl Store {
    /// Records the tokens an attempt used and their cost, whatever its
    /// state; a later record (the provider's own count after an estimate)
    /// replaces an earlier one. `false`: no such attempt for this owner.
    pub async fn record_usage(&self, attempt: &AttemptRef, usage: &AttemptUsage) -> Result<bool> {
        self.driver().record_usage(attempt, usage).await
    }

    /// The owner's attempts with recorded usage created in the filter's
    /// range, oldest first, for the usage report.
    pub async fn list_usage(&self, owner: &OwnerId, filter: &UsageFilter) -> Result<Vec<UsageRow>> {
        self.driver().list_usage(owner, filter).await
    }
}
