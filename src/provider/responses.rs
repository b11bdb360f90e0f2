//! OpenAI's Responses API in background mode: the request's body, and what
//! a response object means for the attempt. The HTTP calls are made by
//! [`super::HttpProvider`], for `openai-responses` providers and for the
//! simulator's providers with `api = "responses"` alike.
//!
//! The shapes follow OpenAI's reference and guides:
//!
//! - Background mode (<https://developers.openai.com/docs/guides/background>):
//!   `POST /responses` with `"background": true` (which needs `"store":
//!   true`) answers at once with the response object, `status: "queued"`;
//!   `GET /responses/{response_id}` is asked while the status is `queued`
//!   or `in_progress`; any other status is final. `POST
//!   /responses/{response_id}/cancel` cancels a background response and
//!   answers with the response object (`status: "cancelled"`).
//! - The response object (API reference, "Responses", "The response
//!   object"): `id`, `status` (`completed`, `failed`, `in_progress`,
//!   `cancelled`, `queued`, `incomplete`), `output` (items; a `message`
//!   item's `content` holds `output_text` parts with `text`, or `refusal`
//!   parts with `refusal`), `error` (`{code, message}`, codes such as
//!   `server_error` and `rate_limit_exceeded`), `incomplete_details`
//!   (`{reason}`: `max_output_tokens` or `content_filter`) and `usage`
//!   (`input_tokens`, `output_tokens`, `total_tokens`).
//! - Structured outputs (<https://developers.openai.com/docs/guides/structured-outputs>):
//!   `text.format` is `{"type": "json_schema", "name", "schema", "strict"}`;
//!   the name is at most 64 of a-z, A-Z, 0-9, `_` and `-`.

use serde_json::{Value, json};

use super::answer::{self, parse_content, truncated_output, with_usage};
use super::{Completion, FailureClass, FailureKind, ProviderError, ProviderRequest, RequestStatus};
use crate::config::ProviderSettings;
use crate::domain::OutputKind;
use crate::domain::Usage;

/// The body of `POST /responses` for one attempt: the rendered system
/// messages as `instructions`, the others as `input`, in the background and
/// stored (background mode needs both). The attempt id travels as
/// metadata too, so that the response can be told apart on OpenAI's side.
pub(crate) fn body(settings: &ProviderSettings, request: &ProviderRequest, simulated: bool) -> Value {
    let (system, input): (Vec<&Value>, Vec<&Value>) = request.messages.iter().partition(|m| m["role"] == "system");
    let instructions: Vec<&str> = system.iter().filter_map(|m| m["content"].as_str()).collect();
    let mut body = json!({
        "model": settings.model,
        "input": input,
        "temperature": request.temperature,
        "max_output_tokens": settings.max_output_tokens,
        "background": true,
        "store": true,
        "metadata": { "onejob_request_id": request.request_id },
    });
    if request.deltas.is_some() {
        // Resumable: a broken stream is taken up again after its last event.
        body["stream"] = json!(true);
    }
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if let Some(schema) =
        request.output_schema.as_ref().filter(|_| settings.response_format && request.output_kind() == OutputKind::Json)
    {
        body["text"] = json!({ "format": {
            "type": "json_schema", "name": answer::schema_name(&request.task), "schema": schema, "strict": true,
        }});
    }
    if simulated {
        body["onejob_input"] =
            json!({ "task": request.task, "input": request.input, "output": request.output_kind().as_str() });
    }
    body
}

/// The `usage` of a response object: input and output tokens, both
/// present and non-negative, or nothing; with the input tokens served
/// from OpenAI's prompt cache (`input_tokens_details.cached_tokens`).
pub(crate) fn parse_usage(response: &Value) -> Option<Usage> {
    let usage = response.get("usage")?;
    let tokens = |name: &str| usage.get(name)?.as_i64().filter(|n| *n >= 0);
    let prompt_tokens = tokens("input_tokens")?;
    let cached = usage.pointer("/input_tokens_details/cached_tokens").and_then(Value::as_i64).unwrap_or(0);
    Some(Usage {
        prompt_tokens,
        completion_tokens: tokens("output_tokens")?,
        cache_read_tokens: cached.clamp(0, prompt_tokens),
        ..Usage::default()
    })
}

/// What a response object says: its id and its status. A `completed` one
/// is read down to its output (or to why it has none usable); the others
/// carry their reason, and what they used.
pub(crate) fn read(body: &[u8], kind: OutputKind) -> Result<(String, RequestStatus), ProviderError> {
    let response: Value = serde_json::from_slice(body).map_err(|e| {
        let message = format!("the answer is not a response object: {e}");
        ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, None, message)
    })?;
    read_object(&response, kind)
}

/// What a response object, already parsed, says (see [`read`]).
pub(crate) fn read_object(response: &Value, kind: OutputKind) -> Result<(String, RequestStatus), ProviderError> {
    let bad = |message: String| ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, None, message);
    let id = response
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("the response object has no id".into()))?
        .to_owned();
    let usage = parse_usage(response);
    let status = match response.get("status").and_then(Value::as_str) {
        Some("queued" | "in_progress") => RequestStatus::Running,
        Some("completed") => match output_of(response, kind) {
            Ok(completion) => RequestStatus::Succeeded(Completion { usage, ..completion }),
            Err(error) => RequestStatus::Failed(with_usage(error, usage)),
        },
        Some("failed") => {
            let code = response.pointer("/error/code").and_then(Value::as_str).unwrap_or("unknown");
            let message =
                response.pointer("/error/message").and_then(Value::as_str).unwrap_or("the provider reports a failure");
            // A failure of the provider's own may pass on another try; a
            // refused prompt will not.
            let retryable = matches!(code, "server_error" | "rate_limit_exceeded" | "vector_store_timeout");
            let error = ProviderError::new(
                FailureClass::Definitive { retryable },
                FailureKind::ProviderError,
                None,
                answer::truncate(format!("the response failed ({code}): {message}")),
            );
            RequestStatus::Failed(with_usage(error, usage))
        }
        Some("incomplete") => {
            let reason = response.pointer("/incomplete_details/reason").and_then(Value::as_str).unwrap_or("unknown");
            let error = match reason {
                "max_output_tokens" => truncated_output(),
                "content_filter" => answer::content_filtered(),
                other => ProviderError::new(
                    FailureClass::Definitive { retryable: false },
                    FailureKind::Incomplete,
                    None,
                    answer::truncate(format!("the response is incomplete: {other}")),
                ),
            };
            RequestStatus::Failed(with_usage(error, usage))
        }
        Some("cancelled") => RequestStatus::Canceled(usage),
        other => return Err(bad(format!("unknown response status {other:?}"))),
    };
    Ok((id, status))
}

/// The output of a completed response: its message's text (parsed, for a
/// JSON task), or a refusal.
fn output_of(response: &Value, kind: OutputKind) -> Result<Completion, ProviderError> {
    let parts = response
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "message")
        .filter_map(|item| item["content"].as_array())
        .flatten();
    let mut text = String::new();
    for part in parts {
        match part["type"].as_str() {
            Some("output_text") => text.push_str(part["text"].as_str().unwrap_or_default()),
            Some("refusal") => return Err(answer::refused(part["refusal"].as_str().unwrap_or_default())),
            _ => {}
        }
    }
    if text.is_empty() {
        let message = "the completed response has no output text";
        return Err(ProviderError::new(
            FailureClass::Definitive { retryable: false },
            FailureKind::BadResponse,
            None,
            message,
        ));
    }
    parse_content(&text, kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: &str, extra: Value) -> Vec<u8> {
        let mut body = json!({"id": "resp_1", "object": "response", "status": status, "output": [],
                              "usage": {"input_tokens": 30, "output_tokens": 7, "total_tokens": 37}});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body.to_string().into_bytes()
    }

    #[test]
    fn response_statuses_mean_what_the_reference_says() {
        for running in ["queued", "in_progress"] {
            assert_eq!(
                read(&response(running, json!({})), OutputKind::Json).unwrap(),
                ("resp_1".into(), RequestStatus::Running)
            );
        }
        let text = json!({"output": [{"type": "message", "role": "assistant",
                                      "content": [{"type": "output_text", "text": "{\"summary\": \"a\", \"word_count\": 1}"}]}]});
        let RequestStatus::Succeeded(done) = read(&response("completed", text), OutputKind::Json).unwrap().1 else {
            panic!()
        };
        assert_eq!(done.output, json!({"summary": "a", "word_count": 1}));
        assert_eq!(done.usage, Some(Usage { prompt_tokens: 30, completion_tokens: 7, ..Usage::default() }));
        let failed = json!({"error": {"code": "server_error", "message": "boom"}});
        let RequestStatus::Failed(error) = read(&response("failed", failed), OutputKind::Json).unwrap().1 else {
            panic!()
        };
        assert_eq!(
            (error.class, error.kind.as_str()),
            (FailureClass::Definitive { retryable: true }, "provider-error")
        );
        let cut = json!({"incomplete_details": {"reason": "max_output_tokens"}});
        let RequestStatus::Failed(error) = read(&response("incomplete", cut), OutputKind::Json).unwrap().1 else {
            panic!()
        };
        assert_eq!(error.kind.as_str(), "output-truncated");
        assert_eq!(error.facts.usage.map(|u| u.completion_tokens), Some(7), "a cut-off answer was charged");
        let refusal =
            json!({"output": [{"type": "message", "content": [{"type": "refusal", "refusal": "I can't help"}]}]});
        let RequestStatus::Failed(error) = read(&response("completed", refusal), OutputKind::Json).unwrap().1 else {
            panic!()
        };
        assert_eq!(error.kind.as_str(), "refusal");
        assert!(matches!(
            read(&response("cancelled", json!({})), OutputKind::Json).unwrap().1,
            RequestStatus::Canceled(Some(_))
        ));
        assert_eq!(read(b"<html>", OutputKind::Json).unwrap_err().class, FailureClass::Ambiguous);
        assert_eq!(read(&response("thinking", json!({})), OutputKind::Json).unwrap_err().kind.as_str(), "bad-response");
    }
}
