//! Providers: where attempts are sent. One HTTP client speaks the OpenAI
//! chat completions protocol to real endpoints and to the built-in
//! simulator alike. Every failure says what it means for the attempt:
//! definitive (nothing was done; retryable or not) or ambiguous (the
//! provider may still be working: the attempt becomes `unknown`). That
//! distinction is the product (I4).

pub mod contract;
pub mod openai;
pub mod tokens;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::config::{ProviderKind, ProviderSettings, Settings};
use crate::domain::AttemptId;

pub use openai::HttpProvider;

/// One attempt's request.
#[derive(Clone, Debug)]
pub struct ProviderRequest {
    /// Sent as `X-Client-Request-Id` and `Idempotency-Key`: the attempt id
    /// (I6), or `qualification-…` for a qualification call.
    pub request_id: String,
    /// The task's name.
    pub task: String,
    /// The job's input.
    pub input: Value,
    /// The chat messages rendered from the input.
    pub messages: Vec<Value>,
    /// The sampling temperature (the provider's, or its qualification temperature).
    pub temperature: f64,
    /// The task's output schema, sent as `response_format` where the
    /// provider supports it.
    pub output_schema: Option<Value>,
}

/// A provider's answer that carries an output.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The output, parsed from the assistant message as JSON.
    pub output: Value,
    /// The tokens the provider says it used (its `usage` object), if it said.
    pub usage: Option<crate::domain::Usage>,
}

/// How a failure bears on the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// Nothing was done. `retryable`: the same request may pass later.
    Definitive {
        /// 429, 500, 502, 503, or a connection refused before sending.
        retryable: bool,
    },
    /// The provider may have done the work: the outcome is unknown.
    Ambiguous,
    /// The call was aborted because its job had finished (another attempt
    /// won, or the owner canceled it); the provider may have done part of
    /// the work, which it was told to stop where it can be.
    Canceled,
}

/// Why an attempt did not produce an output.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ProviderError {
    /// What the failure means for the attempt.
    pub class: FailureClass,
    /// A stable name: `provider-error`, `connection-failed`, `timeout`,
    /// `connection-lost`, `contract-violation`, `bad-response`.
    pub kind: &'static str,
    /// The provider's HTTP status, when it answered.
    pub status: Option<u16>,
    /// What the provider said, or what went wrong.
    pub message: String,
    /// Anything else worth keeping (token counts, validator paths).
    pub detail: Value,
}

impl ProviderError {
    /// A failure of the given class.
    pub fn new(class: FailureClass, kind: &'static str, status: Option<u16>, message: impl Into<String>) -> Self {
        Self { class, kind, status, message: message.into(), detail: Value::Null }
    }

    /// The attempt's deadline passed: the provider may still be working.
    pub fn deadline(timeout: Duration) -> Self {
        Self::new(
            FailureClass::Ambiguous,
            "timeout",
            None,
            format!("no complete answer within the attempt's deadline of {} ms", timeout.as_millis()),
        )
    }

    /// The output breaks the task's contract.
    pub fn contract_violation(message: impl Into<String>) -> Self {
        Self::new(FailureClass::Definitive { retryable: false }, "contract-violation", None, message)
    }
}

/// What an HTTP status from a provider means, as docs/design.md classifies it.
pub fn classify_status(status: u16) -> FailureClass {
    match status {
        429 | 500 | 502 | 503 => FailureClass::Definitive { retryable: true },
        408 | 504 => FailureClass::Ambiguous,
        400..=499 => FailureClass::Definitive { retryable: false },
        // Other server errors say nothing about whether the work was done.
        _ => FailureClass::Ambiguous,
    }
}

/// What a provider says of a request it was sent, by its client request id.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestStatus {
    /// Still working on it.
    Running,
    /// Done, with this output.
    Succeeded(Completion),
    /// It failed; nothing was produced.
    Failed(String),
    /// It has no such request.
    NotFound,
}

/// What a provider said when told to stop working on a request.
#[derive(Clone, Debug, PartialEq)]
pub struct CancelAnswer {
    /// Its status of the request after the cancel: `canceled`, or the
    /// status it had reached first (`succeeded`, `failed`).
    pub status: String,
    /// What the request used until it stopped, when the provider says.
    pub usage: Option<crate::domain::Usage>,
}

/// A configured provider.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The provider's name in the configuration.
    fn name(&self) -> &str;

    /// Its settings.
    fn settings(&self) -> &ProviderSettings;

    /// Sends one attempt. The caller enforces the deadline.
    async fn call(&self, request: &ProviderRequest) -> Result<Completion, ProviderError>;

    /// Asks for the status of an earlier request; `None` when this provider
    /// cannot be asked.
    async fn status(&self, attempt_id: AttemptId) -> Option<Result<RequestStatus, ProviderError>>;

    /// Tells the provider to stop working on an earlier request whose call
    /// was aborted; `None` when this provider has no cancel call.
    async fn cancel(&self, attempt_id: AttemptId) -> Option<Result<CancelAnswer, ProviderError>>;
}

/// Every configured provider by name.
pub type Providers = HashMap<String, Arc<dyn Provider>>;

/// Builds the providers of the settings. `simulator` is the base URL of the
/// simulator that serves the `sim` providers.
pub fn build(settings: &Settings, simulator: Option<&str>) -> Result<Providers, String> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let mut providers = Providers::new();
    for (name, provider) in &settings.providers {
        let built = match provider.kind {
            ProviderKind::Sim => {
                let base = simulator.ok_or_else(|| format!("provider {name} is simulated, but no simulator runs"))?;
                HttpProvider::simulated(name, provider.clone(), base, client.clone())
            }
            ProviderKind::Openai => HttpProvider::openai(name, provider.clone(), client.clone())?,
        };
        providers.insert(name.clone(), Arc::new(built));
    }
    Ok(providers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_the_design_says() {
        for status in [400, 401, 403, 404, 422] {
            assert_eq!(classify_status(status), FailureClass::Definitive { retryable: false }, "{status}");
        }
        for status in [429, 500, 502, 503] {
            assert_eq!(classify_status(status), FailureClass::Definitive { retryable: true }, "{status}");
        }
        for status in [408, 504] {
            assert_eq!(classify_status(status), FailureClass::Ambiguous, "{status}");
        }
    }
}
