//! A Cog model server (`kind = "cog"`): `PUT /predictions/{id}` under the
//! attempt's id, asked to answer at once (`Prefer: respond-async`) and to
//! call onejob back with the outcome (`webhook`), or, without a callback
//! (a qualification call), to answer when the prediction is done;
//! `POST /predictions/{id}/cancel`.
//!
//! A Cog server keys a prediction by its id only while it runs: the same
//! PUT after it finished runs it again, and a prediction cannot be looked
//! up. So a PUT that may have reached the server is never sent again: an
//! answer that did not come is `unknown` (with what `/health-check` says
//! as evidence), and the outcome comes by the callback. A 409 "At
//! capacity" started nothing: the attempt waits and is sent again.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::answer::truncate;
use super::openai::{MAX_ERROR_BYTES, read_bounded, transport_error, transport_error_after_answer};
use super::{
    CancelAnswer, Completion, FailureClass, FailureFacts, FailureKind, Provider, ProviderError, ProviderRequest, Reply,
    RequestRef, RequestStatus, classify_status,
};
use crate::config::ProviderSettings;

/// The largest prediction read, in bytes, a PUT's answer or a callback's
/// body: its files come inline as `data:` URIs (a third larger than the
/// files) when the server has no upload URL.
pub(crate) const MAX_PREDICTION_BYTES: usize = 64 * 1024 * 1024;

/// How long a server at capacity is left alone before the attempt is sent
/// again (a Cog server says nothing of when a slot frees).
const AT_CAPACITY_WAIT_MS: u64 = 1_000;

/// A Cog model server.
pub struct CogProvider {
    name: String,
    settings: ProviderSettings,
    base: String,
    client: reqwest::Client,
}

impl CogProvider {
    /// A `cog` provider at its `base_url`.
    pub fn new(name: &str, settings: ProviderSettings, client: reqwest::Client) -> Result<Self, String> {
        let base = settings.base_url.as_deref().ok_or_else(|| format!("provider {name} has no base_url"))?;
        let base = base.trim_end_matches('/').to_owned();
        Ok(Self { name: name.to_owned(), settings, base, client })
    }

    /// A `sim` provider with `api = "predictions"`, served by the
    /// simulator at `base`.
    pub fn simulated(name: &str, settings: ProviderSettings, base: &str, client: reqwest::Client) -> Self {
        let base = format!("{}/providers/{name}", base.trim_end_matches('/'));
        Self { name: name.to_owned(), settings, base, client }
    }

    /// The URL of prediction `id`, when the id is one a path may carry.
    fn prediction_url(&self, id: &str) -> Result<String, ProviderError> {
        let safe = !id.is_empty() && id.len() <= 200 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !safe {
            return Err(ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::NotConfigured,
                None,
                format!("'{id}' cannot name a Cog prediction"),
            ));
        }
        Ok(format!("{}/predictions/{id}", self.base))
    }

    /// What `/health-check` says of the server (`READY`, `BUSY`, …), or
    /// why it could not be asked.
    async fn health(&self) -> String {
        let asked = self.client.get(format!("{}/health-check", self.base)).timeout(std::time::Duration::from_secs(2));
        let answer = match asked.send().await {
            Ok(answer) => read_bounded(answer, MAX_ERROR_BYTES).await,
            Err(error) => return format!("not answered: {}", truncate(error.to_string())),
        };
        let body = answer.ok().and_then(|(body, _)| serde_json::from_slice::<Value>(&body).ok());
        let status = body.as_ref().and_then(|body| body.get("status")?.as_str().map(str::to_owned));
        truncate(status.unwrap_or_else(|| "an answer without a status".to_owned()))
    }
}

/// Reads a prediction (a PUT's answer, or the body of a callback), taking
/// its output without a copy.
pub(crate) fn read_prediction(body: Value) -> RequestStatus {
    let Value::Object(mut fields) = body else { return RequestStatus::Running };
    let id = fields.get("id").and_then(Value::as_str).map(str::to_owned);
    let usage = compute_time(&fields);
    match fields.get("status").and_then(Value::as_str) {
        Some("succeeded") => RequestStatus::Succeeded(Completion {
            output: fields.remove("output").unwrap_or(Value::Null),
            usage,
            provider_request_id: id,
        }),
        Some("failed") => {
            let said = fields.get("error").and_then(Value::as_str).unwrap_or("the prediction failed");
            let error = ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::ProviderError,
                None,
                truncate(format!("the prediction failed: {said}")),
            );
            RequestStatus::Failed(error.with_facts(FailureFacts { usage, ..FailureFacts::default() }))
        }
        Some("canceled") => RequestStatus::Canceled(usage),
        // Replicate's: ended before it started (its deadline passed).
        Some("aborted") => RequestStatus::Failed(ProviderError::new(
            FailureClass::Definitive { retryable: true },
            FailureKind::ProviderError,
            None,
            "the prediction was aborted before it started".to_owned(),
        )),
        _ => RequestStatus::Running,
    }
}

/// The compute time a prediction reports (`metrics.predict_time`, in
/// seconds), by which GPU providers bill; none when it reports none.
fn compute_time(fields: &serde_json::Map<String, Value>) -> Option<crate::domain::Usage> {
    let seconds = fields.get("metrics")?.get("predict_time")?.as_f64().filter(|s| s.is_finite() && *s >= 0.0)?;
    Some(compute_usage(seconds * 1000.0))
}

/// The usage of a GPU job that reports `ms` milliseconds of compute time
/// (finite, not negative), at most a year: a figure past it is not a job's.
pub(crate) fn compute_usage(ms: f64) -> crate::domain::Usage {
    let predict_ms = ms.round().min(365.0 * 24.0 * 3_600_000.0) as i64;
    crate::domain::Usage { predict_ms, ..crate::domain::Usage::default() }
}

/// What an error status answering a PUT means. A server that is not ready
/// (503) and a refusal of the request (4xx) started nothing; any other
/// (500, 502, a proxy's 504) may come after the prediction was queued: its
/// outcome is unknown, and the PUT is never sent again.
fn classify_put(status: u16) -> FailureClass {
    match status {
        503 => FailureClass::Definitive { retryable: true },
        400..=499 if status != 408 => FailureClass::Definitive { retryable: false },
        _ => FailureClass::Ambiguous,
    }
}

/// The failure of an answer that is not a prediction.
fn not_a_prediction(status: u16, why: &str) -> ProviderError {
    // The server answered, but what it did is not known.
    ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, Some(status), truncate(why.to_owned()))
}

#[async_trait]
impl Provider for CogProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    async fn send(&self, request: &ProviderRequest) -> Result<Reply, ProviderError> {
        let url = self.prediction_url(&request.request_id)?;
        let mut body = json!({ "id": request.request_id, "input": request.input });
        let mut put = self.client.put(url);
        if let Some(callback) = &request.callback_url {
            body["webhook"] = json!(callback);
            body["webhook_events_filter"] = json!(["completed"]);
            put = put.header("Prefer", "respond-async");
        }
        let response = put.json(&body).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        if status == 409 {
            let (said, _) = read_bounded(response, MAX_ERROR_BYTES).await.unwrap_or_default();
            return Err(refused(&said));
        }
        let limit = if response.status().is_success() { MAX_PREDICTION_BYTES } else { MAX_ERROR_BYTES };
        let (said, complete) = read_bounded(response, limit).await.map_err(transport_error_after_answer)?;
        if !(200..300).contains(&status) {
            let message = truncate(String::from_utf8_lossy(&said).into_owned());
            return Err(ProviderError::new(classify_put(status), FailureKind::ProviderError, Some(status), message));
        }
        if !complete {
            return Err(ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::ResponseTooLarge,
                Some(status),
                format!("the prediction is larger than {MAX_PREDICTION_BYTES} bytes; it was not read"),
            ));
        }
        let prediction: Value =
            serde_json::from_slice(&said).map_err(|e| not_a_prediction(status, &format!("not a prediction: {e}")))?;
        match read_prediction(prediction) {
            RequestStatus::Running if request.callback_url.is_some() => Ok(Reply::Accepted(request.request_id.clone())),
            RequestStatus::Running => Err(not_a_prediction(status, "the prediction was not done when it was answered")),
            RequestStatus::Succeeded(completion) => Ok(Reply::Done(completion)),
            RequestStatus::Failed(error) => Err(error),
            RequestStatus::Canceled(usage) => Err(ProviderError::canceled_at_provider(usage)),
            RequestStatus::NotFound => unreachable!("a prediction read is never a missing request"),
        }
    }

    async fn stream_response(
        &self,
        request: &ProviderRequest,
        _started: tokio::sync::oneshot::Sender<String>,
    ) -> Result<Completion, ProviderError> {
        match self.send(request).await? {
            Reply::Done(completion) => Ok(completion),
            Reply::Accepted(id) => Err(not_a_prediction(202, &format!("prediction {id} runs in the background"))),
        }
    }

    async fn status(&self, _request: RequestRef<'_>) -> Option<Result<RequestStatus, ProviderError>> {
        None
    }

    async fn evidence(&self) -> Option<String> {
        Some(format!("/health-check says {}", self.health().await))
    }

    async fn cancel(&self, request: RequestRef<'_>) -> Option<Result<CancelAnswer, ProviderError>> {
        if !self.settings.has_cancel_call() {
            return None;
        }
        let url = match self.prediction_url(request.client_id) {
            Ok(url) => format!("{url}/cancel"),
            Err(error) => return Some(Err(error)),
        };
        let answer = match self.client.post(url).send().await {
            Ok(answer) => answer,
            Err(error) => return Some(Err(transport_error(error))),
        };
        let status = answer.status().as_u16();
        Some(match status {
            // Told to stop; its callback says what it used.
            200..=299 => Ok(CancelAnswer { status: "canceling".into(), usage: None }),
            // Not running there any more: finished, or never started.
            404 => Ok(CancelAnswer { status: "not running".into(), usage: None }),
            _ => Err(ProviderError::new(
                classify_status(status),
                FailureKind::ProviderError,
                Some(status),
                format!("the cancel call was answered {status}"),
            )),
        })
    }
}

/// A 409: "At capacity" started nothing, so the attempt may wait and be
/// sent again; any other conflict is the server's word against the request.
fn refused(said: &[u8]) -> ProviderError {
    let message = serde_json::from_slice::<Value>(said)
        .ok()
        .and_then(|body| body.get("error").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(said).into_owned());
    if message.to_ascii_lowercase().contains("at capacity") {
        let error = ProviderError::new(
            FailureClass::Definitive { retryable: true },
            FailureKind::AtCapacity,
            Some(409),
            truncate(message),
        );
        let facts = FailureFacts { retry_after_ms: Some(AT_CAPACITY_WAIT_MS), sent: Some(false), ..Default::default() };
        return error.with_facts(facts);
    }
    ProviderError::new(
        FailureClass::Definitive { retryable: false },
        FailureKind::ProviderError,
        Some(409),
        truncate(message),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prediction_reads_as_its_status_says_and_only_at_capacity_may_be_sent_again() {
        let done = json!({"id": "a", "status": "succeeded", "output": "data:image/png;base64,AA==",
            "metrics": {"predict_time": 0.3}});
        let RequestStatus::Succeeded(completion) = read_prediction(done) else { panic!("succeeded") };
        assert_eq!(completion.output, json!("data:image/png;base64,AA=="));
        assert_eq!(completion.provider_request_id.as_deref(), Some("a"));
        assert_eq!(completion.usage.map(|u| (u.predict_ms, u.prompt_tokens)), Some((300, 0)), "its compute time");
        let RequestStatus::Failed(error) = read_prediction(json!({"status": "failed", "error": "boom"})) else {
            panic!("failed")
        };
        assert!(error.message.contains("boom") && error.class == FailureClass::Definitive { retryable: false });
        assert_eq!(read_prediction(json!({"status": "canceled"})), RequestStatus::Canceled(None));
        let canceled = read_prediction(json!({"status": "canceled", "metrics": {"predict_time": 1.25}}));
        assert_eq!(
            canceled,
            RequestStatus::Canceled(Some(crate::domain::Usage { predict_ms: 1250, ..Default::default() }))
        );
        assert_eq!(read_prediction(json!({"status": "processing"})), RequestStatus::Running);
        assert_eq!(classify_put(503), FailureClass::Definitive { retryable: true });
        assert_eq!(classify_put(422), FailureClass::Definitive { retryable: false });
        for status in [500, 502, 504, 408] {
            assert_eq!(classify_put(status), FailureClass::Ambiguous, "{status}: perhaps queued");
        }
        let busy = refused(br#"{"error":"At capacity - all prediction slots busy","status":"failed"}"#);
        assert_eq!((busy.kind, busy.facts.retry_after_ms), (FailureKind::AtCapacity, Some(AT_CAPACITY_WAIT_MS)));
        let other = refused(br#"{"error":"prediction ID must match the ID supplied in the URL"}"#);
        assert_eq!(other.class, FailureClass::Definitive { retryable: false });
    }
}
