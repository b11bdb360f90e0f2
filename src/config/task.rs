//! A task's settings: its contract (input and output schemas, prompt,
//! examples), where it runs and fails over to, and how many tries it may
//! take.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{Span, duration};

/// `[tasks.NAME]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSettings {
    /// The provider of a job that names none.
    pub default_provider: String,
    /// Providers to fall over to, in order.
    #[serde(default)]
    pub failover: Vec<String>,
    /// Attempts per job, the first included.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Attempts running at once per job.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: u32,
    /// The most one job's attempts may cost together (a decimal string in
    /// the providers' currency); a job's own `max_cost` may only lower it.
    #[serde(default)]
    pub max_cost: Option<crate::domain::Money>,
    /// Retries on the same provider after a retryable failure (429, 500,
    /// 502, 503, a refused connection) before failing over.
    #[serde(default = "default_retries_per_provider")]
    pub retries_per_provider: u32,
    /// Backoff before the first retry; doubled for each further one.
    #[serde(default = "default_retry_backoff", rename = "retry_backoff_ms", with = "duration::millis")]
    pub retry_backoff: Duration,
    /// Whether a job's end (a win, or the owner's cancel) aborts the calls
    /// of its attempts still running, and cancels them at the provider
    /// where it has a cancel call; off, they run to their answer, which is
    /// kept as superseded.
    #[serde(default = "default_cancel_losers")]
    pub cancel_losers: bool,
    /// Whether its attempts stream the provider's answer (chat completions
    /// with `stream: true`), each piece stored as it comes and shown on
    /// `GET /jobs/{id}/output` before the attempt ends.
    #[serde(default)]
    pub stream: bool,
    /// Hedged attempts: a second try raced against a running attempt that
    /// has not answered in time.
    #[serde(default)]
    pub hedge: Option<HedgeSettings>,
    /// How long this task's finished jobs are kept (instead of
    /// `retention.finished_jobs`).
    #[serde(default)]
    pub retain_finished: Option<Span>,
    /// JSON Schema (2020-12) of the input: a TOML table, or JSON text.
    #[serde(default = "any_object_schema", deserialize_with = "json_or_table")]
    pub input_schema: Value,
    /// JSON Schema (2020-12) every output must meet before it may win; a
    /// string schema makes a text task (see [`crate::domain::OutputKind`]).
    #[serde(default = "any_object_schema", deserialize_with = "json_or_table")]
    pub output_schema: Value,
    /// How the input becomes chat messages.
    #[serde(default)]
    pub prompt: PromptSettings,
    /// The output holds files (`data:` URIs) that onejob keeps, and what
    /// they may be; without it, the output is only JSON or text.
    #[serde(default)]
    pub files: Option<super::FileRules>,
    /// Inputs, and expected properties of their outputs, that qualification
    /// sends to a provider to prove it meets this contract.
    #[serde(default)]
    pub examples: Vec<ExampleSettings>,
}

/// `[tasks.NAME.hedge]`: when a running attempt is raced by a hedge, where
/// hedges go, and how many.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HedgeSettings {
    /// Hedge an attempt sent this long ago without an answer (a streaming
    /// one: without its first piece stored).
    #[serde(default, rename = "after_ms", with = "duration::option_millis")]
    pub after: Option<Duration>,
    /// Or: after the provider's recent latency at this percentile (as this
    /// process measured its last answers).
    #[serde(default)]
    pub after_percentile: Option<f64>,
    /// Hedges per job.
    #[serde(default = "default_max_hedges")]
    pub max_hedges: u32,
    /// Where hedges go, in order; the task's failover list when absent.
    #[serde(default)]
    pub providers: Option<Vec<String>>,
    /// The largest share of the task's jobs, over a sliding minute, that
    /// may be hedged.
    #[serde(default = "default_max_share")]
    pub max_share: f64,
}

impl HedgeSettings {
    /// When a running attempt is hedged.
    pub fn delay(&self) -> crate::domain::hedge::HedgeDelay {
        use crate::domain::hedge::HedgeDelay;
        match (self.after, self.after_percentile) {
            (Some(after), _) => HedgeDelay::Fixed(after),
            (None, Some(p)) => HedgeDelay::Percentile(p),
            (None, None) => unreachable!("checked: one of after_ms and after_percentile is set"),
        }
    }

    /// What serde cannot check; `task` names the task in the message.
    pub fn check(&self, task: &str, settings: &TaskSettings) -> Result<(), String> {
        let at = format!("tasks.{task}.hedge");
        match (self.after, self.after_percentile) {
            (Some(after), None) if after.is_zero() => return Err(format!("{at}.after_ms must be at least 1")),
            (Some(_), None) => {}
            (None, Some(p)) if p > 0.0 && p < 100.0 => {}
            (None, Some(_)) => return Err(format!("{at}.after_percentile must be above 0 and below 100")),
            _ => return Err(format!("{at} needs exactly one of after_ms and after_percentile")),
        }
        if self.max_hedges == 0 {
            return Err(format!("{at}.max_hedges must be at least 1"));
        }
        if !(self.max_share > 0.0 && self.max_share <= 1.0) {
            return Err(format!("{at}.max_share must be above 0 and at most 1"));
        }
        if settings.max_in_flight < 2 {
            return Err(format!(
                "{at}: a hedge runs beside its attempt, so tasks.{task}.max_in_flight must be at least 2"
            ));
        }
        if self.providers_of(settings).is_empty() {
            return Err(format!(
                "{at}: hedges go to hedge.providers, or else to the task's failover list: it is empty"
            ));
        }
        Ok(())
    }

    /// Where hedges of a task with these `settings` go, in order.
    pub fn providers_of<'a>(&'a self, settings: &'a TaskSettings) -> &'a [String] {
        self.providers.as_deref().unwrap_or(&settings.failover)
    }
}

/// `[tasks.NAME.prompt]`: minijinja templates rendered with the input's
/// fields (and the whole input as `input`). An undefined variable is an error.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PromptSettings {
    /// The system message, if any.
    #[serde(default)]
    pub system: Option<String>,
    /// The user message.
    pub user: String,
}

/// `[[tasks.NAME.examples]]`
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExampleSettings {
    /// An input of the task.
    pub input: Value,
    /// A JSON task's: members the output must have, with these values. A
    /// text task's: `min_chars`, `max_chars`, `contains` and `excludes`
    /// (lists of strings), its answer never empty.
    #[serde(default)]
    pub expect: serde_json::Map<String, Value>,
}

fn default_max_hedges() -> u32 {
    1
}

fn default_max_share() -> f64 {
    0.1
}

fn default_max_attempts() -> u32 {
    5
}

fn default_max_in_flight() -> u32 {
    2
}

fn default_cancel_losers() -> bool {
    true
}

fn default_retries_per_provider() -> u32 {
    1
}

fn default_retry_backoff() -> Duration {
    Duration::from_millis(200)
}

fn any_object_schema() -> Value {
    serde_json::json!({ "type": "object" })
}

fn json_or_table<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::String(text) => serde_json::from_str(&text).map_err(serde::de::Error::custom),
        table => Ok(table),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Settings;

    /// The built-in configuration with `[tasks.summarize.hedge]` holding
    /// `hedge`, and summarize's `max_in_flight` line replaced by `in_flight`
    /// when given; what its check says.
    fn checked(hedge: &str, in_flight: &str) -> Result<(), String> {
        let mut text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.toml")).unwrap();
        if !in_flight.is_empty() {
            text = text.replacen("max_in_flight = 2", in_flight, 1);
        }
        text.push_str(&format!("\n[tasks.summarize.hedge]\n{hedge}\n"));
        Settings::parse(&text).map_err(|e| e.to_string())?.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn a_hedge_needs_one_delay_a_share_within_one_room_to_run_and_known_providers() {
        assert_eq!(checked("after_ms = 200", ""), Ok(()));
        assert_eq!(checked("after_percentile = 95\nmax_hedges = 2\nmax_share = 1", ""), Ok(()));
        let refused = [
            ("", "", "exactly one of after_ms and after_percentile"),
            ("after_ms = 200\nafter_percentile = 95", "", "exactly one"),
            ("after_ms = 0", "", "after_ms must be at least 1"),
            ("after_percentile = 100", "", "above 0 and below 100"),
            ("after_ms = 200\nmax_share = 0", "", "max_share"),
            ("after_ms = 200\nmax_share = 1.5", "", "max_share"),
            ("after_ms = 200\nmax_hedges = 0", "", "max_hedges"),
            ("after_ms = 200", "max_in_flight = 1", "max_in_flight must be at least 2"),
            ("after_ms = 200\nproviders = []", "", "it is empty"),
            ("after_ms = 200\nproviders = [\"nowhere\"]", "", "'nowhere', which is not configured"),
        ];
        for (hedge, extra, says) in refused {
            let error = checked(hedge, extra).unwrap_err();
            assert!(error.contains(says), "{hedge:?} {extra:?}: {error}");
        }
    }
}
