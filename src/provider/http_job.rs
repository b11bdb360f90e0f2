//! An asynchronous job API described by configuration (`kind =
//! "http-job"`, and the simulator's copies of fal's queue and RunPod
//! serverless): the submit's path and body, the status, result and cancel
//! calls by the provider's id of the job, and where each answer holds the
//! id, state, output and error (`[providers.NAME.job]`).
//!
//! No job API keeps a client's key: a submit sent twice is two billed
//! jobs. So a submit whose answer may have been lost is never sent again:
//! the attempt is `unknown`, and the callback, whose URL names the attempt
//! (in the body or the query, as the table says), settles it with the
//! provider's id. A submit answered with its id is followed by asking the
//! status call as well, for the callback that does not come. A job the
//! status call does not find is not taken as never received: RunPod
//! forgets a job half an hour after it ended.

use async_trait::async_trait;
use serde_json::Value;

use super::answer::truncate;
use super::openai::{MAX_ERROR_BYTES, read_bounded, response_id, transport_error, transport_error_after_answer};
use super::{
    CallbackRefusal, CancelAnswer, Completion, FailureClass, FailureFacts, FailureKind, Provider, ProviderError,
    ProviderRequest, Reply, RequestRef, RequestStatus,
};
use crate::config::{JobApi, JobCall, JobReading, JobState, ProviderApi, ProviderSettings};

/// The largest answer read: a status or result may hold files inline.
const MAX_ANSWER_BYTES: usize = super::cog::MAX_PREDICTION_BYTES;

/// A job API.
pub struct HttpJobProvider {
    name: String,
    settings: ProviderSettings,
    job: JobApi,
    base: String,
    key: Option<String>,
    client: reqwest::Client,
    /// The callbacks' signing keys, where the provider signs them.
    keys: Option<super::fal_signature::Keys>,
}

impl HttpJobProvider {
    /// An `http-job` provider at its `base_url`, its key from `api_key_env`.
    pub fn new(name: &str, settings: ProviderSettings, client: reqwest::Client) -> Result<Self, String> {
        let base = settings.base_url.as_deref().ok_or_else(|| format!("provider {name} has no base_url"))?;
        let key = settings.api_key_env.as_deref().and_then(|var| std::env::var(var).ok()).filter(|k| !k.is_empty());
        if key.is_none() {
            tracing::warn!(provider = name, variable = ?settings.api_key_env, "the provider's API key variable is not set");
        }
        let base = base.trim_end_matches('/').to_owned();
        let job = settings.job.clone().ok_or_else(|| format!("provider {name} has no job table"))?;
        let keys = job.signature.as_ref().map(|s| super::fal_signature::Keys::new(&s.jwks_url, client.clone()));
        Ok(Self { name: name.to_owned(), settings, job, base, key, client, keys })
    }

    /// A `sim` provider with `api = "fal"` or `"runpod"`, served by the
    /// simulator at `base` (its callbacks signed by the simulator's keys).
    pub fn simulated(name: &str, settings: ProviderSettings, base: &str, client: reqwest::Client) -> Self {
        let base = base.trim_end_matches('/');
        let base = match settings.api() {
            ProviderApi::Runpod => format!("{base}/providers/{name}/v2/{}", settings.model.replace('/', "-")),
            _ => format!("{base}/providers/{name}/fal"),
        };
        let job = settings.job.clone().expect("checked: a simulated job API has its job table");
        let jwks = format!("{base}/.well-known/jwks.json");
        let keys = job.signature.as_ref().map(|_| super::fal_signature::Keys::new(&jwks, client.clone()));
        Self { name: name.to_owned(), settings, job, base, key: Some("simulated".to_owned()), client, keys }
    }

    /// A request of `call` for job `id` (none for the submit).
    fn request(&self, call: &JobCall, id: Option<&str>) -> Result<reqwest::RequestBuilder, ProviderError> {
        let path = match id {
            Some(id) => {
                let id = response_id(id).ok_or_else(|| {
                    let message = truncate(format!("'{id}' cannot name a job"));
                    ProviderError::new(
                        FailureClass::Definitive { retryable: false },
                        FailureKind::BadResponse,
                        None,
                        message,
                    )
                })?;
                call.path.replace("{id}", id)
            }
            None => call.path.clone(),
        };
        let builder = self.client.request(call.method.as_http(), format!("{}{path}", self.base));
        Ok(match &self.key {
            Some(key) => builder.header(self.job.key_header.as_str(), format!("{}{key}", self.job.key_prefix)),
            None => builder,
        })
    }

    /// Sends `builder`: the answer's status and JSON body (`Value::Null`
    /// when it has none), or why it could not be read.
    async fn exchange(&self, builder: reqwest::RequestBuilder) -> Result<(u16, Value), ProviderError> {
        let response = builder.send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let limit = if (200..300).contains(&status) { MAX_ANSWER_BYTES } else { MAX_ERROR_BYTES };
        let (said, complete) = read_bounded(response, limit).await.map_err(transport_error_after_answer)?;
        if !complete && (200..300).contains(&status) {
            return Err(not_an_answer(status, &format!("larger than {limit} bytes")));
        }
        Ok((status, serde_json::from_slice(&said).unwrap_or(Value::Null)))
    }

    /// What an answer (a status, or a callback's body) says of its job, by
    /// `reading`. A succeeded job's output is fetched by the result call
    /// where there is one, unless the answer is a callback's read by its
    /// own reading and holds the output (fal's webhook carries none when
    /// its payload could not be sent).
    async fn read(&self, mut answer: Value, reading: &JobReading, id: &str) -> Result<RequestStatus, ProviderError> {
        let is_status = std::ptr::eq(reading, &self.job.read);
        let state = text_at(&answer, &reading.state).unwrap_or_default();
        let usage = compute_time(&answer, reading);
        let error = reading.error.as_deref().and_then(|pointer| answer.pointer(pointer)).filter(|e| !is_empty(e));
        let failed = |said: Option<&Value>| {
            let said = said
                .map_or_else(|| format!("the job ended {state}"), |e| e.as_str().map_or(e.to_string(), str::to_owned));
            let error = ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::ProviderError,
                None,
                truncate(format!("the job failed: {said}")),
            );
            RequestStatus::Failed(error.with_facts(FailureFacts { usage, ..FailureFacts::default() }))
        };
        Ok(match reading.meaning(&state) {
            JobState::Running => RequestStatus::Running,
            JobState::Canceled => RequestStatus::Canceled(usage),
            JobState::Failed => failed(error),
            JobState::Succeeded if error.is_some() => failed(error),
            JobState::Succeeded => {
                let inline = match (&self.job.result, is_status) {
                    (Some(_), true) => Value::Null,
                    _ => answer.pointer_mut(&reading.output).map(Value::take).unwrap_or(Value::Null),
                };
                let output = match (&self.job.result, inline) {
                    (Some(call), Value::Null) => value_at(self.result(call, id).await?, &self.job.read.output),
                    (_, inline) => inline,
                };
                let completion = Completion { output, usage, provider_request_id: Some(id.to_owned()) };
                RequestStatus::Succeeded(completion)
            }
        })
    }

    /// The result call's answer for job `id`, whose status said it
    /// succeeded: anything but JSON with 2xx says nothing yet (a key being
    /// rotated, a proxy's error), and the job is asked about again, never
    /// failed for it.
    async fn result(&self, call: &JobCall, id: &str) -> Result<Value, ProviderError> {
        let (status, answer) = self.exchange(self.request(call, Some(id))?).await?;
        if (200..300).contains(&status) && !answer.is_null() {
            return Ok(answer);
        }
        let message = truncate(format!("the succeeded job's result was answered {status}: {answer}"));
        Err(ProviderError::new(FailureClass::Ambiguous, FailureKind::ProviderError, Some(status), message))
    }
}

/// The text at `pointer` in `value` (a number as its digits).
fn text_at(value: &Value, pointer: &str) -> Option<String> {
    match value.pointer(pointer)? {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// `value` at `pointer`, taken out.
fn value_at(mut value: Value, pointer: &str) -> Value {
    value.pointer_mut(pointer).map(Value::take).unwrap_or(Value::Null)
}

/// Whether an error field says nothing.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.is_empty(),
        _ => false,
    }
}

/// The compute time an answer reports, where the reading says.
fn compute_time(answer: &Value, reading: &JobReading) -> Option<crate::domain::Usage> {
    let number = |pointer: &Option<String>| {
        pointer.as_deref().and_then(|p| answer.pointer(p)?.as_f64()).filter(|n| n.is_finite() && *n >= 0.0)
    };
    let ms = number(&reading.compute_ms).or_else(|| number(&reading.compute_seconds).map(|s| s * 1000.0))?;
    Some(super::cog::compute_usage(ms))
}

/// The failure of an answer that is not what the table says: what was
/// done is not known.
fn not_an_answer(status: u16, why: &str) -> ProviderError {
    let message = truncate(format!("not a job: {why}"));
    ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, Some(status), message)
}

#[async_trait]
impl Provider for HttpJobProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    async fn send(&self, request: &ProviderRequest) -> Result<Reply, ProviderError> {
        let callback = request.callback_url.as_deref();
        let body = self.job.render_body(&request.input, &request.request_id, callback).map_err(|why| {
            ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::NotConfigured, None, why)
        })?;
        let mut submit = self.request(&self.job.submit, None)?;
        if let (Some(parameter), Some(callback)) = (&self.job.callback_query, callback) {
            submit = submit.query(&[(parameter.as_str(), callback)]);
        }
        // The callback URL may be in the query: an error never shows it.
        let response = submit.json(&body).send().await.map_err(|e| transport_error(e.without_url()))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            // A 5xx or a proxy's timeout may come after the job was queued.
            return Err(super::replicate::refused_create(response, "submit").await);
        }
        let (said, complete) = read_bounded(response, MAX_ANSWER_BYTES).await.map_err(transport_error_after_answer)?;
        if !complete {
            return Err(not_an_answer(status, &format!("larger than {MAX_ANSWER_BYTES} bytes")));
        }
        let answer: Value = serde_json::from_slice(&said).map_err(|e| not_an_answer(status, &e.to_string()))?;
        match text_at(&answer, &self.job.id).filter(|id| response_id(id).is_some()) {
            Some(id) => Ok(Reply::Accepted(id)),
            None => Err(not_an_answer(status, &format!("the submit's answer has no id at '{}'", self.job.id))),
        }
    }

    async fn stream_response(
        &self,
        request: &ProviderRequest,
        _started: tokio::sync::oneshot::Sender<String>,
    ) -> Result<Completion, ProviderError> {
        match self.send(request).await? {
            Reply::Done(completion) => Ok(completion),
            Reply::Accepted(id) => Err(not_an_answer(200, &format!("job {id} runs in the background"))),
        }
    }

    async fn status(&self, request: RequestRef<'_>) -> Option<Result<RequestStatus, ProviderError>> {
        let id = request.provider_id?;
        let asked = async {
            let (status, answer) = self.exchange(self.request(&self.job.status, Some(id))?).await?;
            match status {
                200..=299 => self.read(answer, &self.job.read, id).await,
                404 => Ok(RequestStatus::NotFound),
                _ => Err(ProviderError::new(
                    FailureClass::Ambiguous,
                    FailureKind::ProviderError,
                    Some(status),
                    truncate(format!("the status call was answered {status}: {answer}")),
                )),
            }
        };
        Some(asked.await)
    }

    async fn cancel(&self, request: RequestRef<'_>) -> Option<Result<CancelAnswer, ProviderError>> {
        let (call, id) = (self.job.cancel.as_ref()?, request.provider_id?);
        let asked = async {
            let (status, answer) = self.exchange(self.request(call, Some(id))?).await?;
            if !(200..300).contains(&status) {
                let message = truncate(format!("the cancel call was answered {status}: {answer}"));
                return Err(ProviderError::new(
                    FailureClass::Ambiguous,
                    FailureKind::ProviderError,
                    Some(status),
                    message,
                ));
            }
            let state = text_at(&answer, &self.job.read.state);
            let usage = compute_time(&answer, &self.job.read);
            let said = match state.as_deref().map(|state| self.job.read.meaning(state)) {
                Some(JobState::Canceled) => "canceled".to_owned(),
                Some(JobState::Succeeded) => "succeeded".to_owned(),
                Some(JobState::Failed) => "failed".to_owned(),
                Some(JobState::Running) | None => "canceling".to_owned(),
            };
            Ok(CancelAnswer { status: said, usage })
        };
        Some(asked.await)
    }

    async fn read_callback(&self, body: Value) -> Result<(Option<String>, RequestStatus), ProviderError> {
        let reading = self.job.read_callback.as_ref().unwrap_or(&self.job.read);
        let Some(id) = reading.id.as_deref().and_then(|pointer| text_at(&body, pointer)) else {
            return Ok((None, RequestStatus::Running));
        };
        let status = self.read(body, reading, &id).await?;
        Ok((Some(id), status))
    }

    async fn verify_callback(&self, headers: &reqwest::header::HeaderMap, body: &[u8]) -> Result<(), CallbackRefusal> {
        match &self.keys {
            Some(keys) => keys.verify(headers, body).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider of `body` on a port nothing listens on.
    fn unreachable(body: &str) -> HttpJobProvider {
        let settings: ProviderSettings = toml::from_str(&format!(
            "kind = \"http-job\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"CARGO_PKG_NAME\"\n\
             [job]\nsubmit = {{ method = \"POST\", path = \"/run\" }}\ncallback_query = \"hook\"\nid = \"/id\"\n\
             body = '{body}'\nstatus = {{ method = \"GET\", path = \"/status/{{id}}\" }}\n\
             [job.read]\nid = \"/id\"\nstate = \"/status\"\nsucceeded = [\"COMPLETED\"]"
        ))
        .unwrap();
        settings.check("p").unwrap();
        HttpJobProvider::new("p", settings, reqwest::Client::new()).unwrap()
    }

    fn request(input: Value) -> ProviderRequest {
        ProviderRequest {
            request_id: "attempt".into(),
            task: "picture".into(),
            input,
            messages: Vec::new(),
            temperature: 0.0,
            output_schema: None,
            trace: None,
            deltas: None,
            callback_url: Some("https://onejob.example/callbacks/job/1/the-secret-token".into()),
        }
    }

    #[tokio::test]
    async fn a_submit_that_fails_never_shows_the_callback_url_of_its_query() {
        let error = unreachable("{{ input | tojson }}").send(&request(serde_json::json!({}))).await.unwrap_err();
        assert!(!format!("{error} {error:?}").contains("the-secret-token"), "{error:?}");
        assert_eq!(error.class, FailureClass::Definitive { retryable: true }, "refused: nothing was sent");
    }

    #[tokio::test]
    async fn a_body_reads_the_input_and_one_that_does_not_render_to_json_is_not_sent() {
        let provider = unreachable("{\"prompt\": {{ input.prompt | tojson }}}");
        let sent = provider.send(&request(serde_json::json!({"prompt": "a fox"}))).await.unwrap_err();
        assert_ne!(sent.kind, FailureKind::NotConfigured, "rendered, then refused by the closed port: {sent}");
        let bare = unreachable("{{ input.prompt }}").send(&request(serde_json::json!({"prompt": "a fox"}))).await;
        let error = bare.unwrap_err();
        assert_eq!(error.kind, FailureKind::NotConfigured, "{error}");
        assert_eq!(error.class, FailureClass::Definitive { retryable: false }, "never sent, never retried");
    }

    #[test]
    fn an_answer_is_read_by_its_pointers() {
        let reading: JobReading = toml::from_str(
            "state = \"/status\"\nsucceeded = [\"COMPLETED\"]\nfailed = [\"FAILED\"]\noutput = \"/output\"\n\
             error = \"/error\"\ncompute_ms = \"/executionTime\"",
        )
        .unwrap();
        let answer = serde_json::json!({"status": "COMPLETED", "executionTime": 1250, "output": {"x": 1}});
        assert_eq!(text_at(&answer, "/status").as_deref(), Some("COMPLETED"));
        assert_eq!(compute_time(&answer, &reading).unwrap().predict_ms, 1250);
        assert_eq!(reading.meaning("IN_QUEUE"), JobState::Running, "a state no list names still runs");
        assert!(is_empty(&Value::Null) && is_empty(&serde_json::json!("")) && !is_empty(&serde_json::json!("x")));
        assert_eq!(value_at(answer, "/output"), serde_json::json!({"x": 1}));
    }
}
