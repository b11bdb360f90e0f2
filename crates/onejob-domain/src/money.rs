//! Money, token usage and prices, with exact decimal arithmetic: no float
//! ever holds an amount. An amount is an integer count of 10⁻¹⁸ of its
//! currency (`i128`), written and stored as a decimal string (Postgres
//! `numeric(38, 18)`, SQLite `text`), so both databases hold every digit.
//! A price is per million tokens with at most 12 decimals, so the cost of
//! any number of tokens (`tokens × price / 10⁶`) is exact at 18 decimals,
//! and sums of costs are sums of integers.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::AttemptState;

/// Decimal places of an amount.
pub const SCALE: u32 = 18;
/// Decimal places a price per million tokens may have (`SCALE` − 6).
pub const PRICE_SCALE: u32 = SCALE - 6;
const ONE: i128 = 10i128.pow(SCALE);

/// An exact amount of some currency, in units of 10⁻¹⁸.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i128);

/// Why a decimal string is not an amount.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{text}' is not a decimal amount: {why}")]
pub struct MoneyError {
    text: String,
    why: &'static str,
}

impl Money {
    /// Zero.
    pub const ZERO: Money = Money(0);

    /// From units of 10⁻¹⁸.
    pub const fn from_units(units: i128) -> Self {
        Money(units)
    }

    /// In units of 10⁻¹⁸.
    pub const fn units(self) -> i128 {
        self.0
    }

    /// Parses a decimal with at most `max_scale` decimals; no exponent, no sign but `-`.
    pub fn parse_with_scale(text: &str, max_scale: u32) -> Result<Self, MoneyError> {
        let bad = |why| MoneyError { text: text.chars().take(64).collect(), why };
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("digits are expected before any decimal point"));
        }
        if digits.contains('.') && fraction.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("digits are expected after the decimal point"));
        }
        if fraction.len() > max_scale as usize {
            return Err(bad("too many decimals"));
        }
        if whole.len() > 20 {
            return Err(bad("too large"));
        }
        let whole: i128 = whole.parse().map_err(|_| bad("too large"))?;
        let mut units = whole * ONE;
        if !fraction.is_empty() {
            let scale = 10i128.pow(SCALE - fraction.len() as u32);
            units += fraction.parse::<i128>().map_err(|_| bad("not a number"))? * scale;
        }
        Ok(Money(if negative { -units } else { units }))
    }

    /// The sum, or `None` on overflow.
    pub fn checked_add(self, other: Money) -> Option<Money> {
        self.0.checked_add(other.0).map(Money)
    }

    /// `self − other`.
    pub fn saturating_sub(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0))
    }

    /// Whether this is more than zero.
    pub fn is_positive(self) -> bool {
        self.0 > 0
    }
}

impl std::ops::Add for Money {
    type Output = Money;
    fn add(self, other: Money) -> Money {
        self.checked_add(other).expect("an amount within ±1.7e20")
    }
}

impl std::ops::AddAssign for Money {
    fn add_assign(&mut self, other: Money) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, |a, b| a + b)
    }
}

impl FromStr for Money {
    type Err = MoneyError;
    fn from_str(text: &str) -> Result<Self, MoneyError> {
        Money::parse_with_scale(text, SCALE)
    }
}

/// The shortest exact decimal: `0`, `12`, `0.000125`.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let magnitude = self.0.unsigned_abs();
        let whole = magnitude / ONE as u128;
        let fraction = magnitude % ONE as u128;
        if fraction == 0 {
            return write!(f, "{sign}{whole}");
        }
        let digits = format!("{fraction:018}");
        write!(f, "{sign}{whole}.{}", digits.trim_end_matches('0'))
    }
}

impl Serialize for Money {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Tokens an attempt used (or, when `estimated`, may have used).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub prompt_tokens: i64,
    /// Completion (output) tokens.
    pub completion_tokens: i64,
    /// Of the prompt tokens, those written to the provider's prompt cache
    /// (Anthropic's `cache_creation_input_tokens`).
    #[serde(default)]
    pub cache_write_tokens: i64,
    /// Of the prompt tokens, those read from the provider's prompt cache
    /// (Anthropic's `cache_read_input_tokens`, OpenAI's `cached_tokens`).
    #[serde(default)]
    pub cache_read_tokens: i64,
    /// The provider's compute time, in milliseconds, by which a GPU
    /// provider bills (Cog's and Replicate's `metrics.predict_time`); 0 for
    /// a provider that bills by tokens, and then not shown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub predict_ms: i64,
    /// The files its output held (images, clips), by which a provider may
    /// bill per output; 0 for an output without files, and then not shown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outputs: i64,
    /// Not reported by the provider: the rendered prompt's tokens and the
    /// provider's `max_output_tokens`, the most it could have charged.
    pub estimated: bool,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// A provider's price, per million tokens, per second of compute and per
/// output, from the configuration: the token rates, or `per_second` or
/// `per_output` (a GPU provider's, whose token rates are then 0), or both.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "PriceFields")]
pub struct Price {
    /// Per million prompt tokens: a decimal string, at most 12 decimals.
    pub input_per_million: Money,
    /// Per million completion tokens: a decimal string, at most 12 decimals.
    pub output_per_million: Money,
    /// Per million prompt tokens written to the provider's prompt cache;
    /// without it, `input_per_million`.
    pub cache_write_per_million: Option<Money>,
    /// Per million prompt tokens read from the provider's prompt cache;
    /// without it, `input_per_million`.
    pub cache_read_per_million: Option<Money>,
    /// Per second of the provider's compute time (`predict_ms`), as GPU
    /// providers bill; without it, compute time costs nothing.
    pub per_second: Option<Money>,
    /// Per file of its output (`outputs`), as providers billing per image
    /// bill; without it, outputs cost nothing.
    pub per_output: Option<Money>,
    /// The currency, such as `USD`.
    pub currency: String,
}

/// A price as the configuration gives it, before it is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFields {
    #[serde(default, deserialize_with = "optional_price_amount")]
    input_per_million: Option<Money>,
    #[serde(default, deserialize_with = "optional_price_amount")]
    output_per_million: Option<Money>,
    #[serde(default, deserialize_with = "optional_price_amount")]
    cache_write_per_million: Option<Money>,
    #[serde(default, deserialize_with = "optional_price_amount")]
    cache_read_per_million: Option<Money>,
    #[serde(default, deserialize_with = "optional_price_amount")]
    per_second: Option<Money>,
    #[serde(default, deserialize_with = "optional_price_amount")]
    per_output: Option<Money>,
    currency: String,
}

impl TryFrom<PriceFields> for Price {
    type Error = String;

    fn try_from(fields: PriceFields) -> Result<Self, String> {
        let gpu = fields.per_second.is_some() || fields.per_output.is_some();
        let tokens = match (fields.input_per_million, fields.output_per_million) {
            (Some(input), Some(output)) => (input, output),
            (None, None) if gpu => (Money::ZERO, Money::ZERO),
            _ => {
                return Err("a price gives input_per_million and output_per_million, per_second or per_output, \
                            or them all"
                    .into());
            }
        };
        Ok(Price {
            input_per_million: tokens.0,
            output_per_million: tokens.1,
            cache_write_per_million: fields.cache_write_per_million,
            cache_read_per_million: fields.cache_read_per_million,
            per_second: fields.per_second,
            per_output: fields.per_output,
            currency: fields.currency,
        })
    }
}

fn optional_price_amount<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Money>, D::Error> {
    price_amount(deserializer).map(Some)
}

fn price_amount<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Money, D::Error> {
    let text = String::deserialize(deserializer)?;
    let amount = Money::parse_with_scale(&text, PRICE_SCALE).map_err(serde::de::Error::custom)?;
    if amount < Money::ZERO {
        return Err(serde::de::Error::custom(format!("'{text}' is negative")));
    }
    Ok(amount)
}

/// What an attempt cost, and by which price.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Cost {
    /// The exact amount, a decimal string.
    #[schema(value_type = String, example = "0.000123")]
    pub amount: Money,
    /// Its currency.
    pub currency: String,
    /// Which price was used: `sha256:` and 16 hex digits of the price.
    pub price_version: String,
}

impl Price {
    /// The cost of `usage`: exact, since a price has at most 12 decimals.
    /// The prompt's tokens written to or read from the provider's cache are
    /// costed at their own rates (at most all of the prompt), the rest of it
    /// at `input_per_million`. An estimate (usage never reported) costs the
    /// most the prompt could have: at the higher of the input and
    /// cache-write rates.
    pub fn cost(&self, usage: &Usage) -> Cost {
        let per_million = |tokens: i64, price: Money| i128::from(tokens.max(0)) * (price.units() / 1_000_000);
        let prompt = usage.prompt_tokens.max(0);
        let read = usage.cache_read_tokens.clamp(0, prompt);
        let written = usage.cache_write_tokens.clamp(0, prompt - read);
        let uncached = prompt - read - written;
        let input = match (usage.estimated, self.cache_write_per_million) {
            (true, Some(write)) => write.max(self.input_per_million),
            _ => self.input_per_million,
        };
        let amount = Money::from_units(
            per_million(uncached, input)
                + per_million(written, self.cache_write_per_million.unwrap_or(self.input_per_million))
                + per_million(read, self.cache_read_per_million.unwrap_or(self.input_per_million))
                + per_million(usage.completion_tokens, self.output_per_million)
                // Exact: a price has at most 12 decimals, a unit is 10⁻¹⁸.
                + self.per_second.map_or(0, |rate| i128::from(usage.predict_ms.max(0)) * (rate.units() / 1_000))
                + self.per_output.map_or(0, |rate| i128::from(usage.outputs.max(0)) * rate.units()),
        );
        Cost { amount, currency: self.currency.clone(), price_version: self.version() }
    }

    /// The price's version: a hash of its amounts and currency (and of its
    /// cache rates, when it has them).
    pub fn version(&self) -> String {
        let mut text = format!("{}|{}|{}", self.input_per_million, self.output_per_million, self.currency);
        if self.cache_write_per_million.is_some() || self.cache_read_per_million.is_some() {
            let rate = |rate: Option<Money>| rate.map_or_else(String::new, |r| r.to_string());
            text += &format!("|{}|{}", rate(self.cache_write_per_million), rate(self.cache_read_per_million));
        }
        if let Some(rate) = self.per_second {
            text += &format!("|s{rate}");
        }
        if let Some(rate) = self.per_output {
            text += &format!("|o{rate}");
        }
        let digest = Sha256::digest(text.as_bytes());
        format!("sha256:{}", hex::encode(&digest[..8]))
    }
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
/// sums of purged attempts of one day (the store's retention): their
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

#[cfg(test)]
mod tests {
    use super::*;

    fn money(text: &str) -> Money {
        text.parse().unwrap()
    }

    #[test]
    fn amounts_read_and_write_every_digit() {
        for text in ["0", "12", "0.000125", "123456789.123456789012345678", "-3.5"] {
            assert_eq!(money(text).to_string(), text);
        }
        assert_eq!(money("1.50").to_string(), "1.5");
        assert_eq!(money("007").to_string(), "7");
        for bad in ["", ".5", "5.", "1e3", "+1", "1.0000000000000000001", "abc", "1..2", "123456789012345678901"] {
            assert!(bad.parse::<Money>().is_err(), "{bad}");
        }
    }

    #[test]
    fn twenty_whole_digits_are_the_most_an_amount_may_have() {
        assert_eq!(money("99999999999999999999.5").to_string(), "99999999999999999999.5");
        assert_eq!(money("-99999999999999999999").to_string(), "-99999999999999999999");
    }

    #[test]
    fn a_difference_saturates_and_only_amounts_over_zero_are_positive() {
        assert_eq!(money("3").saturating_sub(money("1.25")), money("1.75"));
        assert_eq!(money("1").saturating_sub(money("1.5")), money("-0.5"));
        assert_eq!(Money::from_units(i128::MIN + 1).saturating_sub(money("2")), Money::from_units(i128::MIN));
        for (units, positive) in [(-1, false), (0, false), (1, true), (i128::MAX, true)] {
            assert_eq!(Money::from_units(units).is_positive(), positive, "{units}");
        }
    }

    #[test]
    fn an_amount_deserializes_from_its_decimal_string() {
        assert_eq!(serde_json::from_str::<Money>(r#""0.000125""#).unwrap(), money("0.000125"));
        assert_eq!(serde_json::to_string(&money("12.5")).unwrap(), r#""12.5""#);
        assert!(serde_json::from_str::<Money>(r#""1e3""#).is_err());
    }

    #[test]
    fn a_price_is_zero_or_more_per_million_with_at_most_twelve_decimals() {
        let price = |amount: &str| {
            let json = format!(r#"{{"input_per_million": "{amount}", "output_per_million": "1", "currency": "USD"}}"#);
            serde_json::from_str::<Price>(&json).map(|price| price.input_per_million)
        };
        assert_eq!(price("0").unwrap(), Money::ZERO);
        assert_eq!(price("0.150000000001").unwrap(), money("0.150000000001"));
        assert_eq!(price("2").unwrap(), money("2"));
        for bad in ["-0.01", "-1", "0.1234567890123"] {
            assert!(price(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cost_arithmetic_is_exact_for_prices_with_many_decimals() {
        let price = Price {
            input_per_million: Money::parse_with_scale("0.123456789012", PRICE_SCALE).unwrap(),
            output_per_million: Money::parse_with_scale("3.000000000007", PRICE_SCALE).unwrap(),
            cache_write_per_million: None,
            cache_read_per_million: None,
            per_second: None,
            per_output: None,
            currency: "USD".into(),
        };
        let cost = price.cost(&Usage { prompt_tokens: 1_234_567, completion_tokens: 7, ..Usage::default() });
        // 1,234,567 × 0.123456789012 / 10⁶ + 7 × 3.000000000007 / 10⁶, by hand:
        assert_eq!(cost.amount.to_string(), "0.152436677640177853");
        assert!(Money::parse_with_scale("0.1234567890123", PRICE_SCALE).is_err(), "13 decimals would not be exact");
    }

    #[test]
    fn compute_time_costs_its_price_per_second_to_the_millisecond() {
        let price: Price = serde_json::from_str(r#"{"per_second": "0.001400000001", "currency": "USD"}"#).unwrap();
        assert_eq!((price.input_per_million, price.output_per_million), (Money::ZERO, Money::ZERO));
        let cost = price.cost(&Usage { predict_ms: 2_345, ..Usage::default() });
        // 2.345 s × 0.001400000001, by hand:
        assert_eq!(cost.amount.to_string(), "0.003283000002345");
        assert_eq!(price.cost(&Usage { prompt_tokens: 1_000, ..Usage::default() }).amount, Money::ZERO);
        let tokens_only = Price { per_second: None, ..price.clone() };
        assert_ne!(price.version(), tokens_only.version(), "the rate is part of the price's version");
        assert_eq!(tokens_only.cost(&Usage { predict_ms: 2_345, ..Usage::default() }).amount, Money::ZERO);
        for incomplete in [r#"{"currency": "USD"}"#, r#"{"input_per_million": "1", "currency": "USD"}"#] {
            assert!(serde_json::from_str::<Price>(incomplete).is_err(), "{incomplete}: costs nothing by mistake");
        }
    }

    #[test]
    fn outputs_cost_their_price_per_output_beside_compute_time() {
        let text = r#"{"per_second": "0.001", "per_output": "0.003000000001", "currency": "USD"}"#;
        let price: Price = serde_json::from_str(text).unwrap();
        let cost = price.cost(&Usage { predict_ms: 1_500, outputs: 4, ..Usage::default() });
        // 1.5 s × 0.001 + 4 × 0.003000000001, by hand:
        assert_eq!(cost.amount.to_string(), "0.013500000004");
        let per_image: Price = serde_json::from_str(r#"{"per_output": "0.003", "currency": "USD"}"#).unwrap();
        assert_eq!(
            per_image.cost(&Usage { outputs: 2, predict_ms: 9_000, ..Usage::default() }).amount.to_string(),
            "0.006"
        );
        let without = Price { per_output: None, ..price.clone() };
        assert_ne!(price.version(), without.version(), "the rate is part of the price's version");
        assert_eq!(serde_json::to_value(Usage::default()).unwrap().get("outputs"), None, "no outputs, not shown");
    }

    #[test]
    fn totals_over_ten_thousand_attempts_equal_the_sum_of_their_parts_to_the_last_digit() {
        let price = Price {
            input_per_million: Money::parse_with_scale("0.150000000001", PRICE_SCALE).unwrap(),
            output_per_million: Money::parse_with_scale("0.600000000003", PRICE_SCALE).unwrap(),
            cache_write_per_million: None,
            cache_read_per_million: None,
            per_second: None,
            per_output: None,
            currency: "USD".into(),
        };
        let mut total = Money::ZERO;
        let (mut prompt, mut completion) = (0i64, 0i64);
        for i in 0..10_000i64 {
            let usage = Usage { prompt_tokens: 17 + i % 97, completion_tokens: 3 + i % 13, ..Usage::default() };
            prompt += usage.prompt_tokens;
            completion += usage.completion_tokens;
            // Through the stored form and back, as a report reads it.
            total += price.cost(&usage).amount.to_string().parse::<Money>().unwrap();
        }
        let whole = price.cost(&Usage { prompt_tokens: prompt, completion_tokens: completion, ..Usage::default() });
        assert_eq!(total, whole.amount);
        assert_eq!(total.to_string(), whole.amount.to_string());
    }

    #[test]
    fn the_price_version_changes_with_the_price() {
        let a = Price {
            input_per_million: money("1"),
            output_per_million: money("2"),
            cache_write_per_million: None,
            cache_read_per_million: None,
            per_second: None,
            per_output: None,
            currency: "USD".into(),
        };
        let mut b = a.clone();
        assert_eq!(a.version(), b.version());
        b.output_per_million = money("2.000000000001");
        assert_ne!(a.version(), b.version());
        assert!(a.version().starts_with("sha256:") && a.version().len() == 7 + 16);
        let cached = Price { cache_read_per_million: Some(money("0.1")), ..a.clone() };
        assert_ne!(a.version(), cached.version(), "a cache rate is part of the version");
    }

    #[test]
    fn cached_prompt_tokens_cost_their_own_rates_and_the_input_rate_without_them() {
        let price: Price = serde_json::from_str(
            r#"{"input_per_million": "3", "output_per_million": "15", "cache_write_per_million": "3.75",
                "cache_read_per_million": "0.3", "currency": "USD"}"#,
        )
        .unwrap();
        // 1,000 prompt tokens: 600 uncached, 300 written, 100 read; 200 out.
        let usage = Usage {
            prompt_tokens: 1_000,
            completion_tokens: 200,
            cache_write_tokens: 300,
            cache_read_tokens: 100,
            predict_ms: 0,
            outputs: 0,
            estimated: false,
        };
        // 600 × 3 + 300 × 3.75 + 100 × 0.3 + 200 × 15 = 5,955 per million.
        assert_eq!(price.cost(&usage).amount, money("0.005955"));
        let plain = Price { cache_write_per_million: None, cache_read_per_million: None, ..price.clone() };
        // 1,000 × 3 + 200 × 15 = 6,000 per million.
        assert_eq!(plain.cost(&usage).amount, money("0.006"));
        // Cache counts past the prompt are not charged twice.
        let over = Usage { cache_write_tokens: 2_000, ..usage };
        // 100 × 0.3 + 900 × 3.75 + 200 × 15 = 6,405 per million.
        assert_eq!(price.cost(&over).amount, money("0.006405"));
        // An estimate costs the prompt at the higher of the input and cache-write rates.
        let estimate = Usage { prompt_tokens: 1_000, completion_tokens: 200, estimated: true, ..Usage::default() };
        // 1,000 × 3.75 + 200 × 15 = 6,750 per million.
        assert_eq!(price.cost(&estimate).amount, money("0.00675"));
    }
}
