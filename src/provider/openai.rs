//! The OpenAI-compatible chat completions client, used for `openai`
//! providers and for the simulator's `sim` providers alike.
//!
//! The attempt id travels as `X-Client-Request-Id` and `Idempotency-Key`,
//! so a provider that deduplicates sees one request per attempt (I6). The
//! API key is read from the environment once and never logged.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{
    Completion, FailureClass, Provider, ProviderError, ProviderRequest, RequestStatus, classify_status,
};
use crate::config::ProviderSettings;
use crate::domain::AttemptId;

/// The longest error message kept from a provider's answer.
const MAX_MESSAGE: usize = 500;

/// An OpenAI-compatible endpoint.
pub struct HttpProvider {
    name: String,
    settings: ProviderSettings,
    chat_url: String,
    /// With `{id}` where the attempt id goes.
    status_url: Option<String>,
    api_key: Option<String>,
    simulated: bool,
    client: reqwest::Client,
}

impl HttpProvider {
    /// A `sim` provider served by the simulator at `base`.
    pub fn simulated(name: &str, settings: ProviderSettings, base: &str, client: reqwest::Client) -> Self {
        let base = base.trim_end_matches('/');
        let status_url = settings.has_status_lookup().then(|| format!("{base}/v1/requests/{{id}}"));
        Self {
            name: name.to_owned(),
            chat_url: format!("{base}/providers/{name}/v1/chat/completions"),
            status_url,
            api_key: None,
            simulated: true,
            settings,
            client,
        }
    }

    /// An `openai` provider; its key comes from the variable `api_key_env`.
    pub fn openai(name: &str, settings: ProviderSettings, client: reqwest::Client) -> Result<Self, String> {
        let base = settings.base_url.as_deref().ok_or_else(|| format!("provider {name} has no base_url"))?;
        let api_key = settings.api_key_env.as_deref().and_then(|var| std::env::var(var).ok()).filter(|k| !k.is_empty());
        if api_key.is_none() {
            tracing::warn!(provider = name, variable = ?settings.api_key_env, "the provider's API key variable is not set");
        }
        let status_url = if settings.has_status_lookup() { settings.status_url.clone() } else { None };
        Ok(Self {
            name: name.to_owned(),
            chat_url: format!("{}/chat/completions", base.trim_end_matches('/')),
            status_url,
            api_key,
            simulated: false,
            settings,
            client,
        })
    }

    fn body(&self, request: &ProviderRequest) -> Value {
        let mut body = json!({
            "model": self.settings.model,
            "messages": request.messages,
            "temperature": request.temperature,
            "max_tokens": self.settings.max_output_tokens,
        });
        if let Some(schema) = request.output_schema.as_ref().filter(|_| self.settings.response_format) {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": { "name": request.task, "schema": schema, "strict": true },
            });
        }
        if self.simulated {
            // The simulator computes its answer from the job's input itself.
            body["onejob_input"] = json!({ "task": request.task, "input": request.input });
        }
        body
    }

    fn authorize(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }
}

fn truncate(mut text: String) -> String {
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

/// The message of an OpenAI-style error body, or the body itself.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message").or_else(|| v.get("message")).or_else(|| v.get("error")).and_then(Value::as_str)
    });
    truncate(match message {
        Some(message) => message.to_owned(),
        None => String::from_utf8_lossy(body).into_owned(),
    })
}

/// A transport error: before the request left (safe to retry) or after (unknown).
fn transport_error(error: reqwest::Error) -> ProviderError {
    if error.is_connect() {
        ProviderError::new(FailureClass::Definitive { retryable: true }, "connection-failed", None, truncate(error.to_string()))
    } else {
        ProviderError::new(FailureClass::Ambiguous, "connection-lost", None, truncate(error.to_string()))
    }
}

/// Parses the assistant message's content as the output.
pub fn parse_content(content: &str) -> Result<Completion, ProviderError> {
    match serde_json::from_str::<Value>(content) {
        Ok(output) => Ok(Completion { output }),
        Err(error) => Err(ProviderError::contract_violation(format!("the answer is not JSON: {error}"))),
    }
}

/// Reads a chat completion body down to its output.
pub fn parse_completion(body: &[u8]) -> Result<Completion, ProviderError> {
    let bad = |message: &str| ProviderError::new(FailureClass::Definitive { retryable: false }, "bad-response", None, message);
    let body: Value = serde_json::from_slice(body).map_err(|e| bad(&format!("the answer is not a chat completion: {e}")))?;
    // A 200 that carries an error object is still an error.
    if let Some(error) = body.get("error").filter(|e| !e.is_null()) {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("error object in a 200 answer");
        return Err(ProviderError::new(FailureClass::Definitive { retryable: false }, "provider-error", Some(200), truncate(message.to_owned())));
    }
    let message = body.pointer("/choices/0/message").ok_or_else(|| bad("the answer has no choices[0].message"))?;
    match message.get("content").and_then(Value::as_str) {
        Some(content) => parse_content(content),
        None => {
            let refusal = message.get("refusal").and_then(Value::as_str).unwrap_or("no content");
            Err(ProviderError::contract_violation(format!("the answer has no content: {refusal}")))
        }
    }
}

#[async_trait]
impl Provider for HttpProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    async fn call(&self, request: &ProviderRequest) -> Result<Completion, ProviderError> {
        let id = &request.request_id;
        let builder = self
            .client
            .post(&self.chat_url)
            .header("x-client-request-id", id)
            .header("idempotency-key", id)
            .json(&self.body(request));
        let response = self.authorize(builder).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        // The request was received; losing the body now leaves the outcome unknown.
        let body = response.bytes().await.map_err(transport_error_after_answer)?;
        if !(200..300).contains(&status) {
            return Err(ProviderError::new(classify_status(status), "provider-error", Some(status), error_message(&body)));
        }
        parse_completion(&body)
    }

    async fn status(&self, attempt_id: AttemptId) -> Option<Result<RequestStatus, ProviderError>> {
        let url = self.status_url.as_ref()?.replace("{id}", &attempt_id.to_string());
        Some(self.lookup(&url).await)
    }
}

fn transport_error_after_answer(error: reqwest::Error) -> ProviderError {
    ProviderError::new(FailureClass::Ambiguous, "connection-lost", None, truncate(error.to_string()))
}

impl HttpProvider {
    async fn lookup(&self, url: &str) -> Result<RequestStatus, ProviderError> {
        let response = self.authorize(self.client.get(url)).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(transport_error_after_answer)?;
        if status == 404 {
            return Ok(RequestStatus::NotFound);
        }
        if !(200..300).contains(&status) {
            return Err(ProviderError::new(classify_status(status), "provider-error", Some(status), error_message(&body)));
        }
        let report: Value = serde_json::from_slice(&body).map_err(|e| {
            ProviderError::new(FailureClass::Ambiguous, "bad-response", Some(status), format!("unreadable status: {e}"))
        })?;
        match report.get("status").and_then(Value::as_str) {
            Some("running") => Ok(RequestStatus::Running),
            Some("succeeded") => {
                let content = report.get("content").and_then(Value::as_str).unwrap_or_default();
                match parse_content(content) {
                    Ok(completion) => Ok(RequestStatus::Succeeded(completion)),
                    // The provider finished, but with an output that breaks the contract.
                    Err(error) => Ok(RequestStatus::Failed(error.message)),
                }
            }
            Some("failed") => {
                let message = report.get("error").and_then(Value::as_str).unwrap_or("the provider reports a failure");
                Ok(RequestStatus::Failed(message.to_owned()))
            }
            other => Err(ProviderError::new(
                FailureClass::Ambiguous,
                "bad-response",
                Some(status),
                format!("unknown request status {other:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_error_bodies_give_their_message() {
        let body = br#"{"error": {"message": "Incorrect API key provided: sk-abc***.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}"#;
        assert_eq!(error_message(body), "Incorrect API key provided: sk-abc***.");
        assert_eq!(error_message(b"upstream connect error"), "upstream connect error");
        assert!(error_message("x".repeat(2000).as_bytes()).len() < 600);
    }

    #[test]
    fn completions_are_read_down_to_their_json_output() {
        let body = br#"{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"summary\": \"hi\", \"word_count\": 1}"}, "finish_reason": "stop"}]}"#;
        assert_eq!(parse_completion(body).unwrap().output, json!({"summary": "hi", "word_count": 1}));
        let not_json = br#"{"choices": [{"message": {"role": "assistant", "content": "Sure! Here is a summary"}}]}"#;
        assert_eq!(parse_completion(not_json).unwrap_err().kind, "contract-violation");
        let refusal = br#"{"choices": [{"message": {"role": "assistant", "content": null, "refusal": "I can't"}}]}"#;
        assert_eq!(parse_completion(refusal).unwrap_err().kind, "contract-violation");
        assert_eq!(parse_completion(b"<html>").unwrap_err().kind, "bad-response");
        let error_in_200 = br#"{"error": {"message": "overloaded"}}"#;
        assert_eq!(parse_completion(error_in_200).unwrap_err().kind, "provider-error");
    }
}
