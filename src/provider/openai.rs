//! The OpenAI HTTP client: chat completions (`openai` providers) and the
//! Responses API in background mode (`openai-responses`, whose shapes are
//! in [`super::responses`]), for real endpoints and for the simulator's
//! `sim` providers alike.
//!
//! The attempt id travels as `X-Client-Request-Id` and `Idempotency-Key`,
//! so a provider that deduplicates sees one request per attempt (I6). The
//! API key is read from the environment once and never logged.
//!
//! Chat completions, as OpenAI's reference describes them: the limit is
//! `max_tokens`, or `max_completion_tokens` for the reasoning models that
//! refuse the first; a strict schema goes as `response_format`
//! `{"type": "json_schema", "json_schema": {name, schema, strict}}`; an
//! answer without content carries `message.refusal`; `finish_reason` is
//! `length` for an answer cut off at the limit and `content_filter` for one
//! withheld.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::answer::{content_filtered, parse_content, refused, schema_name, truncate, truncated_output, with_usage};
use super::{
    CancelAnswer, Completion, FailureClass, FailureFacts, FailureKind, Provider, ProviderError, ProviderRequest,
    REDIRECT_NOT_FOLLOWED, Reply, RequestRef, RequestStatus, classify_status, millis, responses,
};
use crate::config::{MaxTokensField, ProviderApi, ProviderSettings};
use crate::domain::OutputKind;

/// The largest answer read from a provider, in bytes: about a million
/// tokens of output, far more than any `max_output_tokens` allows. A larger
/// answer is not buffered; reading stops at this size.
pub(crate) const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// How much of an error answer is read (only its message is kept).
pub(super) const MAX_ERROR_BYTES: usize = 64 * 1024;

/// The longest `Retry-After` honoured: a day.
const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// An OpenAI-compatible endpoint.
pub struct HttpProvider {
    name: String,
    pub(super) settings: ProviderSettings,
    /// The surface it speaks.
    api: ProviderApi,
    chat_url: String,
    /// `POST` creates a response; `/{id}` reads one, `/{id}/cancel` cancels it.
    pub(super) responses_url: String,
    /// Chat completions: with `{id}` where the attempt id goes.
    status_url: Option<String>,
    /// Chat completions: the cancel call's URL, with `{id}` where the attempt id goes.
    cancel_url: Option<String>,
    api_key: Option<String>,
    pub(super) simulated: bool,
    pub(super) client: reqwest::Client,
}

impl HttpProvider {
    /// A `sim` provider served by the simulator at `base`.
    pub fn simulated(name: &str, settings: ProviderSettings, base: &str, client: reqwest::Client) -> Self {
        let base = base.trim_end_matches('/');
        let status_url = settings.has_status_lookup().then(|| format!("{base}/v1/requests/{{id}}"));
        let cancel_url = settings.has_cancel_call().then(|| format!("{base}/v1/requests/{{id}}/cancel"));
        Self {
            name: name.to_owned(),
            api: settings.api(),
            chat_url: format!("{base}/providers/{name}/v1/chat/completions"),
            responses_url: format!("{base}/providers/{name}/v1/responses"),
            status_url,
            cancel_url,
            api_key: None,
            simulated: true,
            settings,
            client,
        }
    }

    /// An `openai` or `openai-responses` provider; its key comes from the
    /// variable `api_key_env`.
    pub fn openai(name: &str, settings: ProviderSettings, client: reqwest::Client) -> Result<Self, String> {
        let base = settings.base_url.as_deref().ok_or_else(|| format!("provider {name} has no base_url"))?;
        let api_key = settings.api_key_env.as_deref().and_then(|var| std::env::var(var).ok()).filter(|k| !k.is_empty());
        if api_key.is_none() {
            tracing::warn!(provider = name, variable = ?settings.api_key_env, "the provider's API key variable is not set");
        }
        let status_url = if settings.has_status_lookup() { settings.status_url.clone() } else { None };
        let cancel_url = if settings.has_cancel_call() { settings.cancel_url.clone() } else { None };
        let base = base.trim_end_matches('/');
        Ok(Self {
            name: name.to_owned(),
            api: settings.api(),
            chat_url: format!("{base}/chat/completions"),
            responses_url: format!("{base}/responses"),
            status_url,
            cancel_url,
            api_key,
            simulated: false,
            settings,
            client,
        })
    }

    fn body(&self, request: &ProviderRequest) -> Value {
        let limit = match self.settings.max_tokens_field() {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        let mut body = json!({
            "model": self.settings.model,
            "messages": request.messages,
            "temperature": request.temperature,
        });
        body[limit] = json!(self.settings.max_output_tokens);
        if let Some(schema) = request
            .output_schema
            .as_ref()
            .filter(|_| self.settings.response_format && request.output_kind() == OutputKind::Json)
        {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": { "name": schema_name(&request.task), "schema": schema, "strict": true },
            });
        }
        if request.deltas.is_some() {
            body["stream"] = json!(true);
            body["stream_options"] = json!({ "include_usage": true });
        }
        if self.simulated {
            // The simulator computes its answer from the job's input itself.
            body["onejob_input"] =
                json!({ "task": request.task, "input": request.input, "output": request.output_kind().as_str() });
        }
        body
    }

    pub(super) fn authorize(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }
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
pub(super) fn transport_error(error: reqwest::Error) -> ProviderError {
    if error.is_connect() {
        ProviderError::new(
            FailureClass::Definitive { retryable: true },
            FailureKind::ConnectionFailed,
            None,
            truncate(error.to_string()),
        )
    } else {
        ProviderError::new(FailureClass::Ambiguous, FailureKind::ConnectionLost, None, truncate(error.to_string()))
    }
}

/// The `usage` object of a chat completion: prompt and completion tokens,
/// both present and non-negative, or nothing; with the prompt tokens
/// served from OpenAI's prompt cache (`prompt_tokens_details.cached_tokens`).
pub(crate) fn parse_usage(body: &Value) -> Option<crate::domain::Usage> {
    let usage = body.get("usage")?;
    let tokens = |name: &str| usage.get(name)?.as_i64().filter(|n| *n >= 0);
    let prompt_tokens = tokens("prompt_tokens")?;
    let cached = usage.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_i64).unwrap_or(0);
    Some(crate::domain::Usage {
        prompt_tokens,
        completion_tokens: tokens("completion_tokens")?,
        cache_read_tokens: cached.clamp(0, prompt_tokens),
        ..Default::default()
    })
}

/// Reads a chat completion body down to its output.
pub(crate) fn parse_completion(body: &[u8], kind: OutputKind) -> Result<Completion, ProviderError> {
    let bad = |message: &str| {
        ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::BadResponse, None, message)
    };
    let body: Value =
        serde_json::from_slice(body).map_err(|e| bad(&format!("the answer is not a chat completion: {e}")))?;
    // A 200 that carries an error object is still an error.
    if let Some(error) = body.get("error").filter(|e| !e.is_null()) {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("error object in a 200 answer");
        return Err(ProviderError::new(
            FailureClass::Definitive { retryable: false },
            FailureKind::ProviderError,
            Some(200),
            truncate(message.to_owned()),
        ));
    }
    let message = body.pointer("/choices/0/message").ok_or_else(|| bad("the answer has no choices[0].message"))?;
    if let Some(refusal) = message.get("refusal").and_then(Value::as_str) {
        return Err(with_usage(refused(refusal), parse_usage(&body)));
    }
    match body.pointer("/choices/0/finish_reason").and_then(Value::as_str) {
        Some("length") => return Err(with_usage(truncated_output(), parse_usage(&body))),
        Some("content_filter") => return Err(with_usage(content_filtered(), parse_usage(&body))),
        _ => {}
    }
    match message.get("content").and_then(Value::as_str) {
        // An answer that breaks the contract was still charged: its usage
        // travels with the error.
        Some(content) => match parse_content(content, kind) {
            Ok(completion) => Ok(Completion { usage: parse_usage(&body), ..completion }),
            Err(error) => Err(with_usage(error, parse_usage(&body))),
        },
        None => Err(with_usage(ProviderError::contract_violation("the answer has no content"), parse_usage(&body))),
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

    async fn send(&self, request: &ProviderRequest) -> Result<Reply, ProviderError> {
        let (url, body) = match self.api {
            // (A Messages API provider is a `MessagesProvider`, a Cog
            // server a `CogProvider`.)
            ProviderApi::ChatCompletions
            | ProviderApi::Messages
            | ProviderApi::Predictions
            | ProviderApi::Replicate
            | ProviderApi::HttpJob
            | ProviderApi::Fal
            | ProviderApi::Runpod => (&self.chat_url, self.body(request)),
            ProviderApi::Responses => (&self.responses_url, responses::body(&self.settings, request, self.simulated)),
        };
        let response = self.post(url, &body, request).await?;
        let status = response.status().as_u16();
        if let (ProviderApi::ChatCompletions, Some(deltas)) = (self.api, &request.deltas) {
            let whole = super::stream::read(response, deltas, MAX_RESPONSE_BYTES).await?;
            return parse_completion(&whole, request.output_kind()).map(Reply::Done);
        }
        let (body, complete) =
            read_bounded(response, MAX_RESPONSE_BYTES).await.map_err(transport_error_after_answer)?;
        if !complete {
            // The provider finished and answered: the outcome is known, it
            // is not `unknown`. But the answer cannot be used, and asking the
            // same provider again would most likely bring the same answer,
            // so the attempt fails for good (a failover may still go on).
            return Err(ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::ResponseTooLarge,
                Some(status),
                format!("the answer is larger than {MAX_RESPONSE_BYTES} bytes; it was not read"),
            ));
        }
        match self.api {
            ProviderApi::ChatCompletions
            | ProviderApi::Messages
            | ProviderApi::Predictions
            | ProviderApi::Replicate
            | ProviderApi::HttpJob
            | ProviderApi::Fal
            | ProviderApi::Runpod => parse_completion(&body, request.output_kind()).map(Reply::Done),
            ProviderApi::Responses => match responses::read(&body, request.output_kind())? {
                (id, RequestStatus::Running) => Ok(Reply::Accepted(id)),
                (_, RequestStatus::Succeeded(completion)) => Ok(Reply::Done(completion)),
                (_, RequestStatus::Failed(error)) => Err(error),
                (_, RequestStatus::Canceled(usage)) => Err(ProviderError::canceled_at_provider(usage)),
                (_, RequestStatus::NotFound) => unreachable!("a response object is never a missing request"),
            },
        }
    }

    async fn status(&self, request: RequestRef<'_>) -> Option<Result<RequestStatus, ProviderError>> {
        match self.api {
            ProviderApi::ChatCompletions
            | ProviderApi::Messages
            | ProviderApi::Predictions
            | ProviderApi::Replicate
            | ProviderApi::HttpJob
            | ProviderApi::Fal
            | ProviderApi::Runpod => {
                let url = self.status_url.as_ref()?.replace("{id}", request.client_id);
                Some(self.lookup(&url, request.output).await)
            }
            // Always askable: that is how its answer is read.
            ProviderApi::Responses => {
                let url = format!("{}/{}", self.responses_url, response_id(request.provider_id?)?);
                Some(self.read_response(self.client.get(url), request.output).await)
            }
        }
    }

    async fn stream_response(
        &self,
        request: &ProviderRequest,
        started: tokio::sync::oneshot::Sender<String>,
    ) -> Result<Completion, ProviderError> {
        self.follow_stream(request, started).await
    }

    async fn cancel(&self, request: RequestRef<'_>) -> Option<Result<CancelAnswer, ProviderError>> {
        match self.api {
            ProviderApi::ChatCompletions
            | ProviderApi::Messages
            | ProviderApi::Predictions
            | ProviderApi::Replicate
            | ProviderApi::HttpJob
            | ProviderApi::Fal
            | ProviderApi::Runpod => {
                let url = self.cancel_url.as_ref()?.replace("{id}", request.client_id);
                Some(self.cancel_at(&url).await)
            }
            ProviderApi::Responses if self.settings.has_cancel_call() => {
                let url = format!("{}/{}/cancel", self.responses_url, response_id(request.provider_id?)?);
                let answer =
                    self.read_response(self.client.post(url), request.output).await.map(|status| match status {
                        RequestStatus::Canceled(usage) => CancelAnswer { status: "canceled".into(), usage },
                        RequestStatus::Succeeded(completion) => {
                            CancelAnswer { status: "succeeded".into(), usage: completion.usage }
                        }
                        RequestStatus::Failed(error) => {
                            CancelAnswer { status: "failed".into(), usage: usage_in(&error) }
                        }
                        RequestStatus::Running | RequestStatus::NotFound => {
                            CancelAnswer { status: "running".into(), usage: None }
                        }
                    });
                Some(answer)
            }
            ProviderApi::Responses => None,
        }
    }
}

/// Reads at most `limit` bytes of the body: the bytes, and whether that was
/// all of it. Neither a declared length nor a stream of chunks makes it
/// buffer more.
pub(super) async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    if response.content_length().is_some_and(|length| length > limit as u64) {
        return Ok((Vec::new(), false));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

/// A `Retry-After` header: delay-seconds, or an HTTP date (RFC 9110).
pub(super) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<std::time::Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => std::time::Duration::from_secs(seconds),
        Err(_) => {
            let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
            (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().unwrap_or_default()
        }
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

pub(super) fn transport_error_after_answer(error: reqwest::Error) -> ProviderError {
    ProviderError::new(FailureClass::Ambiguous, FailureKind::ConnectionLost, None, truncate(error.to_string()))
}

/// A response id as a path segment: only the characters OpenAI's ids use,
/// so that a provider's answer cannot steer the next request elsewhere.
pub(super) fn response_id(id: &str) -> Option<&str> {
    let safe =
        !id.is_empty() && id.len() <= 200 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    safe.then_some(id)
}

/// The usage a failure carries (see [`with_usage`]).
fn usage_in(error: &ProviderError) -> Option<crate::domain::Usage> {
    error.facts.usage
}

impl HttpProvider {
    /// Sends `body` to `url` for `request`: the answer, when its status is a
    /// success; the failure its status and body mean otherwise.
    pub(super) async fn post(
        &self,
        url: &str,
        body: &Value,
        request: &ProviderRequest,
    ) -> Result<reqwest::Response, ProviderError> {
        let id = &request.request_id;
        let mut builder =
            self.client.post(url).header("x-client-request-id", id).header("idempotency-key", id).json(body);
        if let Some(trace) = &request.trace {
            builder = builder.header("traceparent", &trace.traceparent);
            if let Some(state) = &trace.tracestate {
                builder = builder.header("tracestate", state);
            }
        }
        let response = self.authorize(builder).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers());
        // The request was received; losing the body now leaves the outcome unknown.
        let (body, _) = read_bounded(response, MAX_ERROR_BYTES).await.map_err(transport_error_after_answer)?;
        let message = if (300..400).contains(&status) { REDIRECT_NOT_FOLLOWED.into() } else { error_message(&body) };
        let error = ProviderError::new(classify_status(status), FailureKind::ProviderError, Some(status), message);
        let facts = FailureFacts { retry_after_ms: retry_after.map(millis), ..FailureFacts::default() };
        Err(error.with_facts(facts))
    }

    /// Reads a response object from `GET /responses/{id}` or its cancel
    /// call; a 404 is [`RequestStatus::NotFound`].
    async fn read_response(
        &self,
        builder: reqwest::RequestBuilder,
        kind: OutputKind,
    ) -> Result<RequestStatus, ProviderError> {
        let response = self.authorize(builder).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let (body, complete) =
            read_bounded(response, MAX_RESPONSE_BYTES).await.map_err(transport_error_after_answer)?;
        if !complete {
            let message = format!("the response object is larger than {MAX_RESPONSE_BYTES} bytes");
            return Err(ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, Some(status), message));
        }
        match status {
            404 => Ok(RequestStatus::NotFound),
            200..=299 => Ok(responses::read(&body, kind)?.1),
            _ => Err(ProviderError::new(
                classify_status(status),
                FailureKind::ProviderError,
                Some(status),
                error_message(&body),
            )),
        }
    }

    async fn cancel_at(&self, url: &str) -> Result<CancelAnswer, ProviderError> {
        let response = self.authorize(self.client.post(url)).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let (body, _) = read_bounded(response, MAX_ERROR_BYTES).await.map_err(transport_error_after_answer)?;
        if !(200..300).contains(&status) {
            return Err(ProviderError::new(
                classify_status(status),
                FailureKind::ProviderError,
                Some(status),
                error_message(&body),
            ));
        }
        let report: Value = serde_json::from_slice(&body).map_err(|e| {
            ProviderError::new(
                FailureClass::Ambiguous,
                FailureKind::BadResponse,
                Some(status),
                format!("unreadable cancel answer: {e}"),
            )
        })?;
        let said = report.get("status").and_then(Value::as_str).unwrap_or("unknown");
        Ok(CancelAnswer { status: truncate(said.to_owned()), usage: parse_usage(&report) })
    }

    async fn lookup(&self, url: &str, kind: OutputKind) -> Result<RequestStatus, ProviderError> {
        let response = self.authorize(self.client.get(url)).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let (body, complete) =
            read_bounded(response, MAX_RESPONSE_BYTES).await.map_err(transport_error_after_answer)?;
        if !complete {
            let message = format!("the status answer is larger than {MAX_RESPONSE_BYTES} bytes");
            return Err(ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, Some(status), message));
        }
        if status == 404 {
            return Ok(RequestStatus::NotFound);
        }
        if !(200..300).contains(&status) {
            return Err(ProviderError::new(
                classify_status(status),
                FailureKind::ProviderError,
                Some(status),
                error_message(&body),
            ));
        }
        let report: Value = serde_json::from_slice(&body).map_err(|e| {
            ProviderError::new(
                FailureClass::Ambiguous,
                FailureKind::BadResponse,
                Some(status),
                format!("unreadable status: {e}"),
            )
        })?;
        match report.get("status").and_then(Value::as_str) {
            Some("running") => Ok(RequestStatus::Running),
            Some("succeeded") => {
                let content = report.get("content").and_then(Value::as_str).unwrap_or_default();
                let usage = parse_usage(&report);
                match parse_content(content, kind) {
                    Ok(completion) => Ok(RequestStatus::Succeeded(Completion { usage, ..completion })),
                    // The provider finished, but with an output that breaks the contract.
                    Err(error) => Ok(RequestStatus::Failed(with_usage(error, usage))),
                }
            }
            Some("failed") => {
                let said = report.get("error").and_then(Value::as_str).unwrap_or("no reason given");
                let error = ProviderError::new(
                    FailureClass::Definitive { retryable: false },
                    FailureKind::ProviderError,
                    None,
                    truncate(format!("the provider's status lookup says the request failed: {said}")),
                );
                Ok(RequestStatus::Failed(error))
            }
            // Stopped by a cancel before it finished.
            Some("canceled") => Ok(RequestStatus::Canceled(parse_usage(&report))),
            other => Err(ProviderError::new(
                FailureClass::Ambiguous,
                FailureKind::BadResponse,
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
    fn the_usage_object_is_read_and_travels_with_a_charged_contract_violation() {
        let body = br#"{"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}"#;
        let usage = crate::domain::Usage { prompt_tokens: 12, completion_tokens: 3, ..Default::default() };
        assert_eq!(parse_completion(body, OutputKind::Json).unwrap().usage, Some(usage));
        let not_json = br#"{"choices": [{"message": {"content": "Sure!"}}], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}"#;
        let error = parse_completion(not_json, OutputKind::Json).unwrap_err();
        assert_eq!((error.facts.usage, error.facts.received_text.as_deref()), (Some(usage), Some("Sure!")));
        let cached = br#"{"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}}"#;
        assert_eq!(parse_completion(cached, OutputKind::Json).unwrap().usage.map(|u| u.cache_read_tokens), Some(8));
        for partial in [r#"{"prompt_tokens": 12}"#, r#"{"prompt_tokens": -1, "completion_tokens": 3}"#, "null"] {
            let body = format!(r#"{{"choices": [{{"message": {{"content": "{{}}"}}}}], "usage": {partial}}}"#);
            assert_eq!(parse_completion(body.as_bytes(), OutputKind::Json).unwrap().usage, None, "{partial}");
        }
    }

    #[test]
    fn completions_are_read_down_to_their_json_output() {
        let body = br#"{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"summary\": \"hi\", \"word_count\": 1}"}, "finish_reason": "stop"}]}"#;
        assert_eq!(parse_completion(body, OutputKind::Json).unwrap().output, json!({"summary": "hi", "word_count": 1}));
        let not_json = br#"{"choices": [{"message": {"role": "assistant", "content": "Sure! Here is a summary"}}]}"#;
        assert_eq!(parse_completion(not_json, OutputKind::Json).unwrap_err().kind.as_str(), "contract-violation");
        let refusal = br#"{"choices": [{"message": {"role": "assistant", "content": null, "refusal": "I can't"}}]}"#;
        assert_eq!(parse_completion(refusal, OutputKind::Json).unwrap_err().kind.as_str(), "refusal");
        let cut =
            br#"{"choices": [{"message": {"role": "assistant", "content": "{\"summ"}, "finish_reason": "length"}]}"#;
        assert_eq!(parse_completion(cut, OutputKind::Json).unwrap_err().kind.as_str(), "output-truncated");
        assert_eq!(parse_completion(b"<html>", OutputKind::Json).unwrap_err().kind.as_str(), "bad-response");
        let error_in_200 = br#"{"error": {"message": "overloaded"}}"#;
        assert_eq!(parse_completion(error_in_200, OutputKind::Json).unwrap_err().kind.as_str(), "provider-error");
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_an_http_date() {
        let with = |value: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::RETRY_AFTER, value.parse().unwrap());
            retry_after(&headers)
        };
        assert_eq!(with("7"), Some(std::time::Duration::from_secs(7)));
        assert_eq!(with("Wed, 21 Oct 2015 07:28:00 GMT"), Some(std::time::Duration::ZERO), "a date in the past: now");
        let soon = (chrono::Utc::now() + chrono::Duration::seconds(90)).to_rfc2822();
        assert!(with(&soon).is_some_and(|wait| wait > std::time::Duration::from_secs(80)));
        assert_eq!(with("99999999999"), Some(MAX_RETRY_AFTER));
        assert_eq!(with("soon"), None);
    }
}
