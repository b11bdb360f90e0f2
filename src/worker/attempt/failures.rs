//! The failures of a provider call as this side makes and reads them: a
//! call its provider's breaker does not let through, what a failure says
//! to the breaker, and a refusal before any work that asks for a wait.

use std::time::Duration;

use serde_json::{Value, json};

use crate::provider::{Completion, FailureClass, FailureFacts, FailureKind, ProviderError};

/// The longest a provider's `Retry-After` pauses it and puts an attempt off.
const MAX_PAUSE: Duration = Duration::from_secs(15 * 60);

/// A refusal that did no work and says how long to wait: the provider's
/// 429 with `Retry-After`, a Cog server at capacity (its 409), or this
/// provider's tokens per minute spent before the send. How long (at most [`MAX_PAUSE`]), and the detail of
/// the `attempt-requeued` event.
pub(super) fn refused_before_any_work(error: &ProviderError) -> Option<(Duration, Value)> {
    let reason = match (error.status, error.kind) {
        (Some(429), _) => "provider-rate-limited",
        (_, FailureKind::AtCapacity) => FailureKind::AtCapacity.as_str(),
        (None, FailureKind::TokensSpent) => FailureKind::TokensSpent.as_str(),
        _ => return None,
    };
    let wait = Duration::from_millis(error.facts.retry_after_ms?).min(MAX_PAUSE);
    Some((wait, json!({ "reason": reason, "status": error.status, "message": error.message })))
}

/// The failure of an attempt not sent because its provider's breaker is
/// open: retryable, so that the retry policy goes on to the next provider.
pub(super) fn provider_open(why: &str) -> ProviderError {
    let error = ProviderError::new(
        FailureClass::Definitive { retryable: true },
        FailureKind::ProviderOpen,
        None,
        format!("the provider was not called: {why}"),
    );
    error.with_facts(FailureFacts { sent: Some(false), ..FailureFacts::default() })
}

/// What a call's outcome says to its provider's breaker: `Some(true)` for
/// a failure of the provider's (an error status of its own, a broken or
/// unreadable answer, a timeout, an output that breaks the contract),
/// `Some(false)` for an answer, `None` for what says nothing of it (the
/// request's own fault, a limit of this side, a refusal).
pub(super) fn breaker_outcome(result: &Result<Completion, ProviderError>) -> Option<bool> {
    let Err(error) = result else { return Some(false) };
    match error.kind {
        FailureKind::ProviderError => Some(error.status.is_none_or(|status| status >= 500 || status == 429)),
        FailureKind::ConnectionFailed
        | FailureKind::ConnectionLost
        | FailureKind::StreamBroken
        | FailureKind::Timeout
        | FailureKind::BadResponse
        | FailureKind::Incomplete
        | FailureKind::ContractViolation => Some(true),
        _ => None,
    }
}
