//! What the stores keep of usage and cost: the usage recorded on an
//! attempt, and the rows the usage report sums. Amounts travel as exact
//! decimal strings between Rust and both databases (see
//! [`crate::domain::money`]).

use chrono::{DateTime, Utc};

use super::{Result, corrupt};
use crate::domain::{AttemptState, Cost, Money, Usage};

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

/// One attempt with recorded usage, as the usage report reads it.
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
}

/// Reads an attempt's stored usage columns.
pub(crate) fn read_usage(prompt: Option<i64>, completion: Option<i64>, estimated: Option<bool>) -> Option<Usage> {
    Some(Usage { prompt_tokens: prompt?, completion_tokens: completion?, estimated: estimated? })
}

/// Reads an attempt's stored cost columns.
pub(crate) fn read_cost(amount: Option<String>, currency: Option<String>, price_version: Option<String>) -> Result<Option<Cost>> {
    let (Some(amount), Some(currency), Some(price_version)) = (amount, currency, price_version) else {
        return Ok(None);
    };
    let amount: Money = amount.parse().map_err(corrupt)?;
    Ok(Some(Cost { amount, currency, price_version }))
}
