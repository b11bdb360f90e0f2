//! Anthropic's Messages API (`anthropic` providers, and the simulator's
//! providers with `api = "messages"`), as Anthropic's API reference
//! describes it:
//!
//! - `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version`;
//!   `max_tokens` is required; the system prompt is the `system` field,
//!   not a message; the answer's `content` is a list of blocks (`text`,
//!   `tool_use`).
//! - The task's output schema goes as a forced tool (`tools` with one tool
//!   whose `input_schema` is the schema, `tool_choice: {"type": "tool"}`):
//!   every Claude model supports it, and the answer is that block's `input`.
//! - `stop_reason`: `end_turn`, `stop_sequence` and `tool_use` end an
//!   answer; `max_tokens` cuts it off; `model_context_window_exceeded`
//!   stops it at the context; `refusal` withholds it; `pause_turn` pauses
//!   a turn the caller may send again.
//! - Errors are `{"type": "error", "error": {"type", "message"}}`: 400
//!   `invalid_request_error`, 401, 403, 404, 413 `request_too_large`, 429
//!   `rate_limit_error` (with `retry-after`), 500 `api_error` and 529
//!   `overloaded_error`. Every answer carries a `request-id` header, kept
//!   on the attempt.
//! - `usage`: `input_tokens` (those not read from or written to the prompt
//!   cache), `output_tokens`, `cache_creation_input_tokens` and
//!   `cache_read_input_tokens`.
//! - A stream (`"stream": true`) is `message_start`, then per block
//!   `content_block_start`, `content_block_delta` (`text_delta`,
//!   `input_json_delta`) and `content_block_stop`, then `message_delta`
//!   (the stop reason and the output tokens) and `message_stop`; `ping`
//!   and `error` events may come between. A broken stream cannot be
//!   resumed.
//! - `POST {base_url}/v1/messages/count_tokens` counts a request's input
//!   tokens (free of charge, rate limited on its own).
//!
//! There is no status lookup and no cancel call: an attempt whose answer is
//! lost stays `unknown` until an operator resolves it (the reconciler has
//! nothing to ask). With `prompt_cache`, the system prompt and the tool are
//! marked for Anthropic's prompt cache (`cache_control`).

use async_trait::async_trait;
use serde_json::{Value, json};

use super::answer::{refused, schema_name, truncate, truncated_output, with_usage};
use super::message_stream::read_stream;
use super::openai::{
    MAX_ERROR_BYTES, MAX_RESPONSE_BYTES, read_bounded, retry_after, transport_error, transport_error_after_answer,
};
use super::{
    CancelAnswer, Completion, FailureClass, FailureFacts, FailureKind, Provider, ProviderError, ProviderRequest, Reply,
    RequestRef, RequestStatus, classify_status, millis,
};
use crate::config::ProviderSettings;
use crate::domain::OutputKind;
use crate::domain::Usage;

/// The API version every request names.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Whether an output schema goes as a forced tool: a tool's input is an
/// object, so only an object schema can (another is asked for as text).
pub(crate) fn is_forced_tool(schema: &Value) -> bool {
    schema["type"] == "object"
}

/// A Messages API endpoint.
pub struct MessagesProvider {
    name: String,
    settings: ProviderSettings,
    messages_url: String,
    count_url: String,
    api_key: Option<String>,
    simulated: bool,
    client: reqwest::Client,
}

impl MessagesProvider {
    /// A `sim` provider with `api = "messages"`, served by the simulator at `base`.
    pub fn simulated(name: &str, settings: ProviderSettings, base: &str, client: reqwest::Client) -> Self {
        let base = format!("{}/providers/{name}", base.trim_end_matches('/'));
        Self::at(name, settings, &base, None, true, client)
    }

    /// An `anthropic` provider; its key comes from the variable `api_key_env`.
    pub fn anthropic(name: &str, settings: ProviderSettings, client: reqwest::Client) -> Result<Self, String> {
        let base = settings.base_url.clone().ok_or_else(|| format!("provider {name} has no base_url"))?;
        let api_key = settings.api_key_env.as_deref().and_then(|var| std::env::var(var).ok()).filter(|k| !k.is_empty());
        if api_key.is_none() {
            tracing::warn!(provider = name, variable = ?settings.api_key_env, "the provider's API key variable is not set");
        }
        Ok(Self::at(name, settings, base.trim_end_matches('/'), api_key, false, client))
    }

    fn at(
        name: &str,
        settings: ProviderSettings,
        base: &str,
        api_key: Option<String>,
        simulated: bool,
        client: reqwest::Client,
    ) -> Self {
        Self {
            name: name.to_owned(),
            messages_url: format!("{base}/v1/messages"),
            count_url: format!("{base}/v1/messages/count_tokens"),
            settings,
            api_key,
            simulated,
            client,
        }
    }

    /// The request's body: the rendered system messages as `system`, the
    /// others as `messages`, the output schema as a forced tool.
    pub fn body(&self, request: &ProviderRequest) -> Value {
        let (system, turns): (Vec<&Value>, Vec<&Value>) = request.messages.iter().partition(|m| m["role"] == "system");
        let system: Vec<&str> = system.iter().filter_map(|m| m["content"].as_str()).collect();
        let turns: Vec<Value> = turns.iter().map(|m| json!({"role": m["role"], "content": m["content"]})).collect();
        let mut body = json!({
            "model": self.settings.model,
            "max_tokens": self.settings.max_output_tokens,
            "messages": turns,
            "temperature": request.temperature,
        });
        let cached = self.settings.prompt_cache.then(|| json!({"type": "ephemeral"}));
        if !system.is_empty() {
            body["system"] = match &cached {
                Some(mark) => json!([{"type": "text", "text": system.join("\n\n"), "cache_control": mark}]),
                None => json!(system.join("\n\n")),
            };
        }
        if let Some(schema) = request.output_schema.as_ref().filter(|s| is_forced_tool(s)) {
            let name = schema_name(&request.task);
            let mut tool = json!({
                "name": name,
                "description": "Gives the answer: the tool's input is the whole answer, as its schema says.",
                "input_schema": schema,
            });
            if let Some(mark) = &cached {
                tool["cache_control"] = mark.clone();
            }
            body["tools"] = json!([tool]);
            body["tool_choice"] = json!({"type": "tool", "name": name});
        }
        if request.deltas.is_some() {
            body["stream"] = json!(true);
        }
        if self.simulated {
            body["onejob_input"] =
                json!({ "task": request.task, "input": request.input, "output": request.output_kind().as_str() });
        }
        body
    }

    /// Sends `body` to `url`: the answer and its `request-id` when its
    /// status is a success, the failure its status and error envelope mean
    /// otherwise.
    async fn post(
        &self,
        url: &str,
        body: &Value,
        request: &ProviderRequest,
    ) -> Result<(reqwest::Response, Option<String>), ProviderError> {
        let id = &request.request_id;
        let mut builder = self
            .client
            .post(url)
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header("x-client-request-id", id)
            .json(body);
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key);
        }
        if let Some(trace) = &request.trace {
            builder = builder.header("traceparent", &trace.traceparent);
            if let Some(state) = &trace.tracestate {
                builder = builder.header("tracestate", state);
            }
        }
        let response = builder.send().await.map_err(transport_error)?;
        let request_id = response
            .headers()
            .get("request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| v.len() <= 200)
            .map(str::to_owned);
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok((response, request_id));
        }
        let wait = retry_after(response.headers());
        // The status decides; a body lost on the way only loses the message.
        let body = read_bounded(response, MAX_ERROR_BYTES).await.map(|(body, _)| body).unwrap_or_default();
        let error =
            ProviderError::new(classify(status), FailureKind::ProviderError, Some(status), error_message(&body));
        let facts = FailureFacts {
            retry_after_ms: wait.map(millis),
            provider_request_id: request_id,
            ..FailureFacts::default()
        };
        Err(error.with_facts(facts))
    }
}

/// What a status from the Messages API means: its 529 (`overloaded_error`)
/// is retryable, as 429 and 500 are; the rest as any provider's.
pub(crate) fn classify(status: u16) -> FailureClass {
    match status {
        529 => FailureClass::Definitive { retryable: true },
        _ => classify_status(status),
    }
}

/// `type: message` of an error envelope, or the body itself.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let message = error.and_then(|e| e.get("message")).and_then(Value::as_str);
    truncate(match (error.and_then(|e| e.get("type")).and_then(Value::as_str), message) {
        (Some(kind), Some(message)) => format!("{kind}: {message}"),
        (None, Some(message)) => message.to_owned(),
        _ => String::from_utf8_lossy(body).into_owned(),
    })
}

/// The `usage` of a message: input and output tokens, both present and
/// non-negative, or nothing. The prompt's tokens are all of its input:
/// those Anthropic counts apart as written to or read from its cache too.
pub(crate) fn parse_usage(message: &Value) -> Option<Usage> {
    let usage = message.get("usage")?;
    let tokens = |name: &str| usage.get(name)?.as_i64().filter(|n| *n >= 0);
    let (written, read) =
        (tokens("cache_creation_input_tokens").unwrap_or(0), tokens("cache_read_input_tokens").unwrap_or(0));
    Some(Usage {
        prompt_tokens: tokens("input_tokens")?.checked_add(written)?.checked_add(read)?,
        completion_tokens: tokens("output_tokens")?,
        cache_write_tokens: written,
        cache_read_tokens: read,
        ..Usage::default()
    })
}

/// Reads a message down to its output: the forced tool's input, or the
/// text (parsed, for a JSON task); or to the failure its stop reason means.
pub(crate) fn parse_message(body: &[u8], tool: Option<&str>, kind: OutputKind) -> Result<Completion, ProviderError> {
    let bad = |message: String| {
        ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::BadResponse, None, message)
    };
    let message: Value = serde_json::from_slice(body).map_err(|e| bad(format!("the answer is not a message: {e}")))?;
    if message["type"] == "error" {
        let kind = message.pointer("/error/type").and_then(Value::as_str).unwrap_or("error");
        let text = message.pointer("/error/message").and_then(Value::as_str).unwrap_or("an error in a 200 answer");
        let retryable = matches!(kind, "overloaded_error" | "api_error" | "rate_limit_error");
        let message = truncate(format!("{kind}: {text}"));
        return Err(ProviderError::new(
            FailureClass::Definitive { retryable },
            FailureKind::ProviderError,
            Some(200),
            message,
        ));
    }
    let usage = parse_usage(&message);
    let blocks =
        message.get("content").and_then(Value::as_array).ok_or_else(|| bad("the message has no content".into()))?;
    let text: String = blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect();
    let charged = |error: ProviderError| Err(with_usage(error, usage));
    match message.get("stop_reason").and_then(Value::as_str) {
        Some("end_turn" | "stop_sequence" | "tool_use") => {}
        Some("max_tokens") => return charged(truncated_output()),
        Some("refusal") => return charged(refused(if text.is_empty() { "stop_reason refusal" } else { &text })),
        Some("model_context_window_exceeded") => {
            let message = "the answer stopped at the model's context window (model_context_window_exceeded)";
            let error = ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::PromptTooLong,
                None,
                message,
            );
            return charged(error);
        }
        Some("pause_turn") => {
            let message = "the model paused its turn (pause_turn) before it answered";
            let error = ProviderError::new(
                FailureClass::Definitive { retryable: true },
                FailureKind::Incomplete,
                None,
                message,
            );
            return charged(error);
        }
        other => return charged(bad(format!("the message has an unknown stop_reason {other:?}"))),
    }
    let used = tool.and_then(|name| blocks.iter().find(|b| b["type"] == "tool_use" && b["name"] == name));
    let completion = match used.map(|block| &block["input"]) {
        // A streamed input that did not parse comes as its text.
        Some(Value::String(partial)) => super::answer::parse_content(partial, OutputKind::Json),
        Some(input) => Ok(Completion { output: input.clone(), usage: None, provider_request_id: None }),
        None => super::answer::parse_content(&text, kind),
    };
    match completion {
        Ok(completion) => Ok(Completion { usage, ..completion }),
        Err(error) => charged(error),
    }
}

#[async_trait]
impl Provider for MessagesProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    async fn send(&self, request: &ProviderRequest) -> Result<Reply, ProviderError> {
        let body = self.body(request);
        let tool = body.pointer("/tool_choice/name").and_then(Value::as_str);
        let (response, request_id) = self.post(&self.messages_url, &body, request).await?;
        let with_id = |mut error: ProviderError| {
            error.facts.provider_request_id.clone_from(&request_id);
            error
        };
        let whole = match &request.deltas {
            Some(deltas) => read_stream(response, deltas, MAX_RESPONSE_BYTES).await.map_err(with_id)?,
            None => {
                let read = read_bounded(response, MAX_RESPONSE_BYTES).await;
                let (body, complete) = read.map_err(|error| with_id(transport_error_after_answer(error)))?;
                if !complete {
                    return Err(with_id(ProviderError::new(
                        FailureClass::Definitive { retryable: false },
                        FailureKind::ResponseTooLarge,
                        Some(200),
                        format!("the answer is larger than {MAX_RESPONSE_BYTES} bytes; it was not read"),
                    )));
                }
                body
            }
        };
        let completion = parse_message(&whole, tool, request.output_kind()).map_err(with_id)?;
        Ok(Reply::Done(Completion { provider_request_id: request_id, ..completion }))
    }

    async fn stream_response(
        &self,
        request: &ProviderRequest,
        _started: tokio::sync::oneshot::Sender<String>,
    ) -> Result<Completion, ProviderError> {
        // Streamed in `send`: a message is not a background response.
        match self.send(request).await? {
            Reply::Done(completion) => Ok(completion),
            Reply::Accepted(_) => unreachable!("a message is answered, never accepted"),
        }
    }

    async fn status(&self, _request: RequestRef<'_>) -> Option<Result<RequestStatus, ProviderError>> {
        None
    }

    async fn cancel(&self, _request: RequestRef<'_>) -> Option<Result<CancelAnswer, ProviderError>> {
        None
    }

    async fn count_tokens(&self, request: &ProviderRequest) -> Option<Result<usize, ProviderError>> {
        let mut body = self.body(request);
        if let Some(fields) = body.as_object_mut() {
            for field in ["max_tokens", "temperature", "stream", "onejob_input"] {
                fields.remove(field);
            }
        }
        let counted = async {
            let (response, _) = self.post(&self.count_url, &body, request).await?;
            let (body, _) = read_bounded(response, MAX_ERROR_BYTES).await.map_err(transport_error_after_answer)?;
            let answer: Option<Value> = serde_json::from_slice(&body).ok();
            let tokens = answer.as_ref().and_then(|a| a.get("input_tokens")).and_then(Value::as_u64);
            tokens.and_then(|t| usize::try_from(t).ok()).ok_or_else(|| {
                let message = "the token count has no input_tokens";
                ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, None, message)
            })
        };
        Some(counted.await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_land_in_their_outcomes() {
        let message = |stop: &str, content: Value| {
            json!({"type": "message", "content": content, "stop_reason": stop,
                   "usage": {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 6}})
            .to_string()
            .into_bytes()
        };
        let tool = json!([{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"a": 1}}]);
        let done = parse_message(&message("tool_use", tool), Some("t"), OutputKind::Json).unwrap();
        assert_eq!(done.output, json!({"a": 1}));
        let usage = done.usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.cache_read_tokens, usage.completion_tokens), (16, 6, 4));
        let text = json!([{"type": "text", "text": "{\"a\": 2}"}]);
        for stop in ["end_turn", "stop_sequence"] {
            assert_eq!(
                parse_message(&message(stop, text.clone()), None, OutputKind::Json).unwrap().output,
                json!({"a": 2})
            );
        }
        for (stop, kind, class) in [
            ("max_tokens", FailureKind::OutputTruncated, FailureClass::Definitive { retryable: false }),
            ("refusal", FailureKind::Refusal, FailureClass::Definitive { retryable: false }),
            (
                "model_context_window_exceeded",
                FailureKind::PromptTooLong,
                FailureClass::Definitive { retryable: false },
            ),
            ("pause_turn", FailureKind::Incomplete, FailureClass::Definitive { retryable: true }),
            ("something_new", FailureKind::BadResponse, FailureClass::Definitive { retryable: false }),
        ] {
            let error = parse_message(&message(stop, text.clone()), None, OutputKind::Json).unwrap_err();
            assert_eq!((error.kind, error.class), (kind, class), "{stop}");
            assert_eq!(error.facts.usage.map(|u| u.prompt_tokens), Some(16), "{stop}: charged");
        }
        for status in [429, 500, 529] {
            assert_eq!(classify(status), FailureClass::Definitive { retryable: true }, "{status}");
        }
        for status in [400, 401, 403, 404, 413] {
            assert_eq!(classify(status), FailureClass::Definitive { retryable: false }, "{status}");
        }
        let envelope = br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
        assert_eq!(error_message(envelope), "overloaded_error: Overloaded");
    }

    #[test]
    fn the_system_prompt_goes_apart_and_the_schema_as_a_forced_tool_marked_for_the_cache_when_asked() {
        let settings: ProviderSettings = toml::from_str(
            "kind = \"anthropic\"\nbase_url = \"https://api.anthropic.com\"\napi_key_env = \"K\"\nprompt_cache = true",
        )
        .unwrap();
        let provider =
            MessagesProvider::at("c", settings, "https://api.anthropic.com", None, false, reqwest::Client::new());
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let request = ProviderRequest {
            request_id: "r".into(),
            task: "sum up".into(),
            input: json!({}),
            messages: vec![json!({"role": "system", "content": "Be brief."}), json!({"role": "user", "content": "Hi"})],
            temperature: 0.0,
            output_schema: Some(schema.clone()),
            trace: None,
            deltas: None,
            callback_url: None,
        };
        let body = provider.body(&request);
        assert_eq!(provider.messages_url, "https://api.anthropic.com/v1/messages");
        assert_eq!(body["messages"], json!([{"role": "user", "content": "Hi"}]));
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(body["tools"][0]["input_schema"], schema);
        assert_eq!(body["tools"][0]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "sum_up"}));
        assert_eq!(body["max_tokens"], 1024);
        assert!(body.get("onejob_input").is_none() && body.get("stream").is_none(), "{body}");
    }
}
