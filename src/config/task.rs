//! A task's settings: its contract (input and output schemas, prompt,
//! examples), where it runs and fails over to, and how many tries it may
//! take.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::Span;

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
    #[serde(default = "default_retry_backoff_ms")]
    pub retry_backoff_ms: u64,
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
    /// How long this task's finished jobs are kept (instead of
    /// `retention.finished_jobs`).
    #[serde(default)]
    pub retain_finished: Option<Span>,
    /// JSON Schema (2020-12) of the input: a TOML table, or JSON text.
    #[serde(default = "any_object_schema", deserialize_with = "json_or_table")]
    pub input_schema: Value,
    /// JSON Schema (2020-12) every output must meet before it may win.
    #[serde(default = "any_object_schema", deserialize_with = "json_or_table")]
    pub output_schema: Value,
    /// How the input becomes chat messages.
    #[serde(default)]
    pub prompt: PromptSettings,
    /// Inputs, and expected properties of their outputs, that qualification
    /// sends to a provider to prove it meets this contract.
    #[serde(default)]
    pub examples: Vec<ExampleSettings>,
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
    /// Members the output must have, with these values.
    #[serde(default)]
    pub expect: serde_json::Map<String, Value>,
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

fn default_retry_backoff_ms() -> u64 {
    200
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
