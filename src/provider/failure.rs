//! Why an attempt produced no output, as a typed value: what the failure
//! means for the attempt ([`FailureClass`]), a stable name
//! ([`FailureKind`]), and what it carries besides ([`FailureFacts`]). JSON
//! appears only where the failure is stored: [`ProviderError::stored_detail`].

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use crate::domain::{NOT_RECEIVED, Usage};

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

macro_rules! failure_kinds {
    ($($(#[$doc:meta])* $variant:ident => $name:expr,)*) => {
        /// A failure's stable name, stored as the attempt error's `type`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum FailureKind {
            $($(#[$doc])* $variant,)*
        }

        impl FailureKind {
            /// Its stored name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(FailureKind::$variant => $name,)*
                }
            }
        }
    };
}

failure_kinds! {
    /// The provider answered with an error status.
    ProviderError => "provider-error",
    /// No connection could be made: nothing was sent.
    ConnectionFailed => "connection-failed",
    /// The connection broke after the request left.
    ConnectionLost => "connection-lost",
    /// A streamed answer broke after some of it came: the provider did
    /// the work, the rest of it is lost.
    StreamBroken => "stream-broken",
    /// No complete answer within the attempt's deadline.
    Timeout => "timeout",
    /// An answer that cannot be read.
    BadResponse => "bad-response",
    /// An answer larger than the client reads.
    ResponseTooLarge => "response-too-large",
    /// A background response that ended incomplete for another reason, or
    /// a turn the Messages API paused (`pause_turn`).
    Incomplete => "incomplete",
    /// The output breaks the task's contract.
    ContractViolation => "contract-violation",
    /// The model refused.
    Refusal => "refusal",
    /// The answer was cut off at its token limit.
    OutputTruncated => "output-truncated",
    /// The provider's content filter stopped the answer.
    ContentFiltered => "content-filtered",
    /// A background response whose status cannot be looked up.
    NoStatusLookup => "no-status-lookup",
    /// The provider or task is not configured on this worker.
    NotConfigured => "not-configured",
    /// The task's prompt could not be rendered from the input.
    PromptRenderFailed => "prompt-render-failed",
    /// The prompt and the answer's tokens exceed the provider's context.
    PromptTooLong => "prompt-too-long",
    /// The call was aborted because its job had finished.
    Canceled => "canceled",
    /// Not sent: the attempt's lease ran out first.
    LeaseLost => "lease-lost",
    /// Not sent: the provider's tokens per minute were spent.
    TokensSpent => "provider-tokens-per-minute",
    /// Not sent: the provider's breaker is open (or another attempt is its probe).
    ProviderOpen => "provider-open",
    /// The provider has no record of the request: it never arrived.
    NotReceived => NOT_RECEIVED,
    /// Not started: every slot of the provider was busy (a Cog server's
    /// 409 "At capacity").
    AtCapacity => "provider-at-capacity",
    /// While its call waited for the provider's callback, the attempt was
    /// settled elsewhere (by that callback, perhaps in another process, or
    /// made `unknown` by the reaper): nothing is left to record.
    SettledElsewhere => "settled-elsewhere",
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of the cancel call of an aborted attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CancelCall {
    /// The provider has none.
    None,
    /// Made, and answered.
    Made,
    /// Made, and failed or not answered in time.
    Failed,
}

impl CancelCall {
    /// Its stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            CancelCall::None => "none",
            CancelCall::Made => "made",
            CancelCall::Failed => "failed",
        }
    }
}

/// What a failure carries besides its class, kind and message. Each field
/// that is set is stored under its own name in the attempt error's detail;
/// what the failure carries is added here and nowhere else.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FailureFacts {
    /// The tokens the provider says the request used (an answer it
    /// charged, or a canceled request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The provider answered about the request's end (its cancel call, or
    /// its status saying canceled): `usage` is then stored even when it is
    /// none, as `null`, the provider having said nothing of it.
    #[serde(skip)]
    pub usage_said: bool,
    /// How long the provider asked to wait (`Retry-After`), or how long
    /// until its tokens per minute hold the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The tokens a request refused for the tokens per minute needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// The prompt's tokens, for a prompt too long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<usize>,
    /// The provider's `max_output_tokens`, for a prompt too long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// The provider's context, for a prompt too long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u32>,
    /// The validator's findings, for an output that breaks the contract.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<String>,
    /// Whether the request had left, for an aborted call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent: Option<bool>,
    /// What became of the cancel call, for an aborted call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_call: Option<CancelCall>,
    /// The request's status as the cancel call's answer gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_status: Option<String>,
    /// Why the cancel call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_error: Option<String>,
    /// The provider's id of the request: a background response's, for an
    /// unknown outcome; the Messages API's `request-id`, for any answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_request_id: Option<String>,
    /// The answer's text when it was not JSON: kept on the attempt as its
    /// unapplied output, never in the error's detail.
    #[serde(skip)]
    pub received_text: Option<String>,
}

/// Why an attempt did not produce an output.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ProviderError {
    /// What the failure means for the attempt.
    pub class: FailureClass,
    /// Its stable name.
    pub kind: FailureKind,
    /// The provider's HTTP status, when it answered.
    pub status: Option<u16>,
    /// What the provider said, or what went wrong.
    pub message: String,
    /// What else it carries (boxed: most failures carry little, and a
    /// `Result` stays small).
    pub facts: Box<FailureFacts>,
}

impl ProviderError {
    /// A failure of the given class.
    pub fn new(class: FailureClass, kind: FailureKind, status: Option<u16>, message: impl Into<String>) -> Self {
        Self { class, kind, status, message: message.into(), facts: Box::default() }
    }

    /// The same failure carrying `facts`.
    pub fn with_facts(self, facts: FailureFacts) -> Self {
        Self { facts: Box::new(facts), ..self }
    }

    /// The attempt's deadline passed: the provider may still be working.
    /// `timeout` is the configured one; `given`, what the call had of it
    /// (a worker counts it from the claim, so the send gets less).
    pub fn deadline(timeout: Duration, given: Duration) -> Self {
        let mut message = format!("no complete answer within the timeout of {} ms", timeout.as_millis());
        if given < timeout {
            message += &format!(", counted from the attempt's claim (the call itself had {} ms)", given.as_millis());
        }
        Self::new(FailureClass::Ambiguous, FailureKind::Timeout, None, message)
    }

    /// The output breaks the task's contract.
    pub fn contract_violation(message: impl Into<String>) -> Self {
        Self::new(FailureClass::Definitive { retryable: false }, FailureKind::ContractViolation, None, message)
    }

    /// The provider stopped the request before it finished (a cancel
    /// call, ours or anyone's), having used `usage` by then, as it says.
    pub fn canceled_at_provider(usage: Option<Usage>) -> Self {
        let message = "the provider reports the request canceled before it finished";
        Self::new(FailureClass::Canceled, FailureKind::Canceled, None, message).with_facts(FailureFacts {
            sent: Some(true),
            usage,
            usage_said: true,
            ..FailureFacts::default()
        })
    }

    /// The attempt error's detail as stored: the provider's status, whether
    /// a retry may pass, and every fact the failure carries.
    pub fn stored_detail(&self) -> Value {
        let retryable = matches!(self.class, FailureClass::Definitive { retryable: true });
        let mut detail = json!({ "status": self.status, "retryable": retryable });
        let stored = detail.as_object_mut().expect("an object");
        if let Ok(Value::Object(facts)) = serde_json::to_value(&*self.facts) {
            stored.extend(facts);
        }
        if self.facts.usage_said {
            stored.entry("usage").or_insert(Value::Null);
        }
        detail
    }
}

/// A duration as stored, in whole milliseconds.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fact_a_failure_carries_is_stored_under_its_own_name_and_the_answers_text_is_not() {
        let facts = FailureFacts {
            usage: Some(Usage { prompt_tokens: 3, completion_tokens: 4, ..Usage::default() }),
            retry_after_ms: Some(2_000),
            cancel_call: Some(CancelCall::Made),
            received_text: Some("Sure!".into()),
            ..FailureFacts::default()
        };
        let error =
            ProviderError::new(FailureClass::Definitive { retryable: true }, FailureKind::ProviderError, None, "")
                .with_facts(facts);
        let detail = error.stored_detail();
        assert_eq!(detail["retryable"], true);
        assert_eq!(detail["retry_after_ms"], 2_000);
        assert_eq!(detail["usage"]["completion_tokens"], 4);
        assert_eq!(detail["cancel_call"], "made");
        assert!(detail.get("received_text").is_none() && detail.get("violations").is_none(), "{detail}");
        assert_eq!(error.to_string(), "provider-error: ");
        let canceled = ProviderError::canceled_at_provider(None).stored_detail();
        assert_eq!((&canceled["sent"], canceled.get("usage")), (&json!(true), Some(&Value::Null)), "{canceled}");
    }
}
