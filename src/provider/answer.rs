//! What an answer means, on either OpenAI surface: its text as the output
//! (parsed, for a JSON task), or the definitive failure it amounts to (a refusal, a cut-off, a
//! withheld answer), with the usage a charged answer carries.

use serde_json::Value;

use crate::domain::OutputKind;

use super::{Completion, FailureClass, FailureFacts, FailureKind, ProviderError};

/// The longest error message kept from a provider's answer.
const MAX_MESSAGE: usize = 500;

/// A task's name as a schema's name: a-z, A-Z, 0-9, `_` and `-`, at most
/// 64 of them (other characters become `_`).
pub(crate) fn schema_name(task: &str) -> String {
    let name: String = task
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    if name.is_empty() { "output".to_owned() } else { name }
}

/// The model refused to answer; another model may not.
pub(crate) fn refused(refusal: &str) -> ProviderError {
    let message = truncate(format!("the model refused to answer: {refusal}"));
    ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::Refusal, None, message)
}

/// The answer was cut off at the provider's token limit.
pub(crate) fn truncated_output() -> ProviderError {
    let message = "the answer was cut off at the token limit (max_output_tokens) before it was complete";
    ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::OutputTruncated, None, message)
}

/// The provider withheld the answer by its content filter.
pub(crate) fn content_filtered() -> ProviderError {
    let message = "the provider's content filter withheld the answer";
    ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::ContentFiltered, None, message)
}

/// At most 500 bytes of a message, cut at a character boundary.
pub(crate) fn truncate(mut text: String) -> String {
    if text.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// The assistant message's content as the output: for a text task the
/// text itself, for a JSON task the text parsed.
pub(crate) fn parse_content(content: &str, kind: OutputKind) -> Result<Completion, ProviderError> {
    if kind == OutputKind::Text {
        return Ok(Completion { output: Value::String(content.to_owned()), usage: None, provider_request_id: None });
    }
    match serde_json::from_str::<Value>(content) {
        Ok(output) => Ok(Completion { output, usage: None, provider_request_id: None }),
        Err(error) => {
            // What the provider said is kept for the attempt's audit (as its
            // unapplied output; see `worker::record`).
            let facts = FailureFacts { received_text: Some(content.to_owned()), ..FailureFacts::default() };
            Err(ProviderError::contract_violation(format!("the answer is not JSON: {error}")).with_facts(facts))
        }
    }
}

/// Adds the usage of a charged answer to its error.
pub(crate) fn with_usage(mut error: ProviderError, usage: Option<crate::domain::Usage>) -> ProviderError {
    if usage.is_some() {
        error.facts.usage = usage;
    }
    error
}
