//! Replicate's hosted predictions (`kind = "replicate"`): `POST
//! /predictions` (a version), `/models/{owner}/{name}/predictions` or
//! `/deployments/{owner}/{name}/predictions`, with the attempt's callback
//! URL as its `webhook`; `GET /predictions/{id}`; `POST
//! /predictions/{id}/cancel`. A qualification call, which has no callback,
//! asks to be answered when done (`Prefer: wait`).
//!
//! Replicate keeps no client key: a create sent twice is two billed
//! predictions. So a create whose answer may have been lost is never sent
//! again: the attempt is `unknown`, and the webhook, whose URL names the
//! attempt, settles it (with the prediction's id, which the lost answer
//! did not bring). A create answered with the prediction's id is followed
//! by asking for it as well, for the webhook that does not come.
//!
//! Replicate signs its webhooks the Standard Webhooks way, with the
//! account's signing secret (`GET /webhooks/default/secret`), fetched at
//! the first callback and again when a signature does not match it (the
//! secret was rotated).

use async_trait::async_trait;
use serde_json::{Value, json};

use super::answer::truncate;
use super::openai::{
    MAX_ERROR_BYTES, read_bounded, response_id, retry_after, transport_error, transport_error_after_answer,
};
use super::{
    CallbackRefusal, CancelAnswer, Completion, FailureClass, FailureFacts, FailureKind, Provider, ProviderError,
    ProviderRequest, Reply, RequestRef, RequestStatus, millis,
};
use crate::config::ProviderSettings;
use crate::config::ReplicateModel as Target;

/// The largest prediction read: its output is a list of URLs, or files
/// inline as `data:` URIs.
const MAX_PREDICTION_BYTES: usize = super::cog::MAX_PREDICTION_BYTES;

/// How long after fetching the signing secret a signature that does not
/// match it has it fetched again.
const SECRET_REFETCH_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a create without a callback asks to be held for its outcome
/// (`Prefer: wait`, at most 60 s on Replicate).
const WAIT_SECS: u64 = 60;

/// Where predictions of `target` are created: the path under the base
/// URL, and the body's `version`.
fn create_at(target: &Target) -> (String, Option<&str>) {
    match target {
        Target::Model(model) => (format!("/models/{model}/predictions"), None),
        Target::Version(version) => ("/predictions".to_owned(), Some(version)),
        Target::Deployment(deployment) => (format!("/deployments/{deployment}/predictions"), None),
    }
}

/// Replicate's API, or the simulator's copy of it.
pub struct ReplicateProvider {
    name: String,
    settings: ProviderSettings,
    base: String,
    target: Target,
    token: Option<String>,
    client: reqwest::Client,
    /// The account's webhook signing secret, and when it was fetched.
    secret: tokio::sync::Mutex<Option<(String, std::time::Instant)>>,
}

impl ReplicateProvider {
    /// A `replicate` provider at its `base_url`, its token from the
    /// variable `api_key_env`.
    pub fn new(name: &str, settings: ProviderSettings, client: reqwest::Client) -> Result<Self, String> {
        let base = settings.base_url.as_deref().ok_or_else(|| format!("provider {name} has no base_url"))?;
        let token = settings.api_key_env.as_deref().and_then(|var| std::env::var(var).ok()).filter(|k| !k.is_empty());
        if token.is_none() {
            tracing::warn!(provider = name, variable = ?settings.api_key_env, "the provider's API token variable is not set");
        }
        let base = base.trim_end_matches('/').to_owned();
        let target = Target::of(&settings.model)
            .ok_or_else(|| format!("provider {name}: '{}' names no Replicate model", settings.model))?;
        Ok(Self::with(name, settings, base, target, token, client))
    }

    /// A `sim` provider with `api = "replicate"`, served by the simulator
    /// at `base`; a `model` that names no Replicate model is `sim/painter`.
    pub fn simulated(name: &str, settings: ProviderSettings, base: &str, client: reqwest::Client) -> Self {
        let base = format!("{}/providers/{name}/v1", base.trim_end_matches('/'));
        let target = Target::of(&settings.model).unwrap_or_else(|| Target::Model("sim/painter".to_owned()));
        Self::with(name, settings, base, target, Some("simulated".to_owned()), client)
    }

    fn with(
        name: &str,
        settings: ProviderSettings,
        base: String,
        target: Target,
        token: Option<String>,
        client: reqwest::Client,
    ) -> Self {
        let secret = tokio::sync::Mutex::new(None);
        Self { name: name.to_owned(), settings, base, target, token, client, secret }
    }

    fn authorize(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// The URL of prediction `id` (and `tail`), when the id is one a path
    /// may carry: a provider's answer cannot steer a request elsewhere.
    fn prediction_url(&self, id: &str, tail: &str) -> Result<String, ProviderError> {
        let id = response_id(id).ok_or_else(|| {
            let message = truncate(format!("'{id}' cannot name a Replicate prediction"));
            ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::BadResponse, None, message)
        })?;
        Ok(format!("{}/predictions/{id}{tail}", self.base))
    }

    /// Reads a prediction from a lookup or a cancel call; a 404 is
    /// [`RequestStatus::NotFound`].
    async fn read(&self, builder: reqwest::RequestBuilder) -> Result<RequestStatus, ProviderError> {
        let response = self.authorize(builder).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        if status == 404 {
            return Ok(RequestStatus::NotFound);
        }
        let (said, complete) =
            read_bounded(response, MAX_PREDICTION_BYTES).await.map_err(transport_error_after_answer)?;
        if !(200..300).contains(&status) || !complete {
            let message = truncate(format!("answered {status}: {}", String::from_utf8_lossy(&said)));
            return Err(ProviderError::new(FailureClass::Ambiguous, FailureKind::ProviderError, Some(status), message));
        }
        let prediction: Value = serde_json::from_slice(&said).map_err(|e| not_a_prediction(status, &e.to_string()))?;
        Ok(super::cog::read_prediction(prediction))
    }

    /// The account's signing secret: the one fetched before, unless
    /// `again` (a signature did not match it, the secret may have been
    /// rotated) and that was over a minute ago: callbacks with bad
    /// signatures cannot make onejob ask for it at their pace.
    async fn signing_secret(&self, again: bool) -> Result<String, String> {
        let mut kept = self.secret.lock().await;
        if let Some((secret, fetched)) = kept.as_ref()
            && (!again || fetched.elapsed() < SECRET_REFETCH_AFTER)
        {
            return Ok(secret.clone());
        }
        let asked = self.authorize(self.client.get(format!("{}/webhooks/default/secret", self.base)));
        let answer = asked.timeout(std::time::Duration::from_secs(10)).send().await.map_err(|e| e.to_string())?;
        let status = answer.status().as_u16();
        let (said, _) = read_bounded(answer, MAX_ERROR_BYTES).await.map_err(|e| e.to_string())?;
        let key =
            serde_json::from_slice::<Value>(&said).ok().and_then(|body| body.get("key")?.as_str().map(str::to_owned));
        let key = key.filter(|_| status == 200).ok_or_else(|| format!("its signing secret was answered {status}"))?;
        *kept = Some((key.clone(), std::time::Instant::now()));
        Ok(key)
    }
}

/// What an error status answering a create means. A refusal (4xx) created
/// nothing, and a 429 may be sent again after its wait; a 5xx or a
/// proxy's timeout may come after the prediction was created: its outcome
/// is unknown, and the create is never sent again.
pub(super) fn classify_create(status: u16) -> FailureClass {
    match status {
        429 => FailureClass::Definitive { retryable: true },
        400..=499 if status != 408 => FailureClass::Definitive { retryable: false },
        _ => FailureClass::Ambiguous,
    }
}

/// The failure of a create (a `what`) answered with an error status, by
/// [`classify_create`], with its `Retry-After`.
pub(super) async fn refused_create(response: reqwest::Response, what: &str) -> ProviderError {
    let status = response.status().as_u16();
    let wait = retry_after(response.headers());
    let said = match read_bounded(response, MAX_ERROR_BYTES).await {
        Ok((said, _)) => said,
        Err(error) => return transport_error_after_answer(error),
    };
    let message = truncate(format!("the {what} was answered {status}: {}", String::from_utf8_lossy(&said)));
    let error = ProviderError::new(classify_create(status), FailureKind::ProviderError, Some(status), message);
    error.with_facts(FailureFacts { retry_after_ms: wait.map(millis), ..FailureFacts::default() })
}

/// The failure of an answer that is not a prediction: what was done is
/// not known.
fn not_a_prediction(status: u16, why: &str) -> ProviderError {
    let message = truncate(format!("not a prediction: {why}"));
    ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, Some(status), message)
}

#[async_trait]
impl Provider for ReplicateProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    async fn send(&self, request: &ProviderRequest) -> Result<Reply, ProviderError> {
        let (path, version) = create_at(&self.target);
        let mut body = json!({ "input": request.input });
        if let Some(version) = version {
            body["version"] = json!(version);
        }
        let mut create = self.client.post(format!("{}{path}", self.base));
        match &request.callback_url {
            Some(callback) => {
                body["webhook"] = json!(callback);
                body["webhook_events_filter"] = json!(["completed"]);
            }
            None => create = create.header("Prefer", format!("wait={WAIT_SECS}")),
        }
        let response = self.authorize(create.json(&body)).send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(refused_create(response, "create").await);
        }
        let (said, complete) =
            read_bounded(response, MAX_PREDICTION_BYTES).await.map_err(transport_error_after_answer)?;
        if !complete {
            return Err(not_a_prediction(status, &format!("larger than {MAX_PREDICTION_BYTES} bytes")));
        }
        let prediction: Value = serde_json::from_slice(&said).map_err(|e| not_a_prediction(status, &e.to_string()))?;
        let id = prediction.get("id").and_then(Value::as_str).map(str::to_owned);
        match super::cog::read_prediction(prediction) {
            RequestStatus::Succeeded(completion) => Ok(Reply::Done(completion)),
            RequestStatus::Failed(error) => Err(error),
            RequestStatus::Canceled(usage) => Err(ProviderError::canceled_at_provider(usage)),
            RequestStatus::Running | RequestStatus::NotFound => match id {
                Some(id) => Ok(Reply::Accepted(id)),
                None => Err(not_a_prediction(status, "it has no id")),
            },
        }
    }

    async fn stream_response(
        &self,
        request: &ProviderRequest,
        _started: tokio::sync::oneshot::Sender<String>,
    ) -> Result<Completion, ProviderError> {
        match self.send(request).await? {
            Reply::Done(completion) => Ok(completion),
            Reply::Accepted(id) => Err(not_a_prediction(201, &format!("prediction {id} runs in the background"))),
        }
    }

    async fn status(&self, request: RequestRef<'_>) -> Option<Result<RequestStatus, ProviderError>> {
        let url = match self.prediction_url(request.provider_id?, "") {
            Ok(url) => url,
            Err(error) => return Some(Err(error)),
        };
        Some(self.read(self.client.get(url)).await)
    }

    async fn cancel(&self, request: RequestRef<'_>) -> Option<Result<CancelAnswer, ProviderError>> {
        if !self.settings.has_cancel_call() {
            return None;
        }
        let url = match self.prediction_url(request.provider_id?, "/cancel") {
            Ok(url) => url,
            Err(error) => return Some(Err(error)),
        };
        // The prediction as the cancel left it, with the compute time it
        // was charged.
        Some(self.read(self.client.post(url)).await.map(|said| {
            let (status, usage) = match said {
                RequestStatus::Running => ("canceling", None),
                RequestStatus::Canceled(usage) => ("canceled", usage),
                RequestStatus::Succeeded(completion) => ("succeeded", completion.usage),
                RequestStatus::Failed(error) => ("failed", error.facts.usage),
                RequestStatus::NotFound => ("not found", None),
            };
            CancelAnswer { status: status.to_owned(), usage }
        }))
    }

    async fn verify_callback(&self, headers: &reqwest::header::HeaderMap, body: &[u8]) -> Result<(), CallbackRefusal> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let (id, timestamp, signatures) =
            (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"));
        let now = chrono::Utc::now().timestamp();
        let mut again = false;
        loop {
            let secret = self.signing_secret(again).await.map_err(CallbackRefusal::CannotVerify)?;
            match crate::domain::webhook::verify(&secret, id, timestamp, signatures, body, now) {
                Ok(()) => return Ok(()),
                Err(why) if again || !why.starts_with("no signature") => return Err(CallbackRefusal::NotSigned(why)),
                // The secret may have been rotated since it was fetched.
                Err(_) => again = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_names_where_its_predictions_are_created() {
        assert_eq!(
            create_at(&Target::of("black-forest-labs/flux-schnell").unwrap()).0,
            "/models/black-forest-labs/flux-schnell/predictions"
        );
        let version =
            Target::of("stability-ai/sdxl:7762fd07cf82c948538e41f63f77d685e02b063e37e496e96eefd46c929f9bdc").unwrap();
        assert_eq!(
            create_at(&version),
            ("/predictions".to_owned(), Some("7762fd07cf82c948538e41f63f77d685e02b063e37e496e96eefd46c929f9bdc"))
        );
        assert_eq!(
            create_at(&Target::of("deployments/acme/painter").unwrap()).0,
            "/deployments/acme/painter/predictions"
        );
        for bad in ["flux", "a/b/c", "a/../b", "a/..", "deployments/acme", "a/b:", "/b", "a b/c"] {
            assert_eq!(Target::of(bad), None, "{bad}");
        }
        assert_eq!(classify_create(429), FailureClass::Definitive { retryable: true });
        assert_eq!(classify_create(422), FailureClass::Definitive { retryable: false });
        for status in [500, 502, 503, 504, 408] {
            assert_eq!(classify_create(status), FailureClass::Ambiguous, "{status}: perhaps created");
        }
    }
}
