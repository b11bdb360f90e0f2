//! Providers: where attempts are sent. One HTTP client speaks OpenAI's
//! chat completions and its Responses API (in background mode), another
//! Anthropic's Messages API (`anthropic`), to real endpoints and to the
//! built-in simulator ([`sim`]) alike. Every failure says what
//! it means for the attempt: definitive (nothing was done; retryable or
//! not) or ambiguous (the provider may still be working: the attempt
//! becomes `unknown`). That distinction is the product (I4).
//!
//! A chat completion is answered when it is done. A background response is
//! answered at once with its id ([`Reply::Accepted`]), which [`call`]
//! hands to its caller (a worker stores it on the attempt before anything
//! else) and then asks the provider about until the response is done.

pub(crate) mod answer;
pub(crate) mod anthropic;
mod bpe;
pub(crate) mod cog;
mod failure;
mod fal_signature;
pub(crate) mod http_job;
mod message_stream;
pub(crate) mod openai;
pub(crate) mod replicate;
mod response_stream;
pub(crate) mod responses;
pub mod sim;
mod stream;
pub mod tokens;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::config::{ProviderKind, ProviderSettings, Redirects, Settings};

pub use anthropic::MessagesProvider;
pub use cog::CogProvider;
pub use failure::{CancelCall, FailureClass, FailureFacts, FailureKind, ProviderError, millis};
pub use http_job::HttpJobProvider;
pub use openai::HttpProvider;
pub use replicate::ReplicateProvider;

/// One attempt's request.
#[derive(Clone, Debug)]
pub struct ProviderRequest {
    /// Sent as `X-Client-Request-Id` and `Idempotency-Key`: the attempt id
    /// (I6), or `qualification-…` for a qualification call.
    pub request_id: String,
    /// The task's name.
    pub task: String,
    /// The job's input.
    pub input: Value,
    /// The chat messages rendered from the input.
    pub messages: Vec<Value>,
    /// The sampling temperature (the provider's, or its qualification temperature).
    pub temperature: f64,
    /// The task's output schema, sent as `response_format` where the
    /// provider supports it.
    pub output_schema: Option<Value>,
    /// The W3C trace context the call carries (`traceparent`: the attempt's
    /// trace, with this call as its parent).
    pub trace: Option<crate::domain::TraceContext>,
    /// Where the pieces of a streamed answer go as they come: with it, a
    /// chat completion is asked for with `stream: true`.
    pub deltas: Option<Deltas>,
    /// Where a provider that answers by callback (a Cog server) sends the
    /// outcome: the attempt's callback URL. Without it, such a provider is
    /// asked to answer when it is done.
    pub callback_url: Option<String>,
}

impl ProviderRequest {
    /// What the task answers (by its output schema; JSON without one).
    pub fn output_kind(&self) -> crate::domain::OutputKind {
        self.output_schema.as_ref().map_or(crate::domain::OutputKind::Json, crate::domain::OutputKind::of_schema)
    }
}

/// The receiving end of a streamed answer's pieces.
pub type Deltas = tokio::sync::mpsc::UnboundedSender<String>;

/// A provider's answer that carries an output.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The output, parsed from the assistant message as JSON.
    pub output: Value,
    /// The tokens the provider says it used (its `usage` object), if it said.
    pub usage: Option<crate::domain::Usage>,
    /// The provider's id of the request, when its answer gave one (the
    /// Messages API's `request-id`), to keep on the attempt.
    pub provider_request_id: Option<String>,
}

/// What an HTTP status from a provider means, as docs/design.md classifies it.
pub fn classify_status(status: u16) -> FailureClass {
    match status {
        429 | 500 | 502 | 503 => FailureClass::Definitive { retryable: true },
        408 | 504 => FailureClass::Ambiguous,
        // A redirect not followed: the request was not taken here; but 303
        // ("see the result there") may follow work done.
        303 => FailureClass::Ambiguous,
        300..=399 => FailureClass::Definitive { retryable: false },
        400..=499 => FailureClass::Definitive { retryable: false },
        // Other server errors say nothing about whether the work was done.
        _ => FailureClass::Ambiguous,
    }
}

/// How a provider knows a request it was sent: by the client request id
/// it came with, and by the id the provider gave it, when it gave one (a
/// background response's id).
#[derive(Clone, Copy, Debug)]
pub struct RequestRef<'a> {
    /// The attempt id (or `qualification-…`).
    pub client_id: &'a str,
    /// The provider's own id of the request.
    pub provider_id: Option<&'a str>,
    /// What the request's task answers: how its output is read.
    pub output: crate::domain::OutputKind,
}

/// A provider's first answer to a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// The answer, with its output.
    Done(Completion),
    /// Accepted to run in the background under this id, by which the
    /// provider is then asked for the answer.
    Accepted(String),
}

/// What a provider says of a request it was sent.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestStatus {
    /// Still working on it (or it has not started yet).
    Running,
    /// Done, with this output.
    Succeeded(Completion),
    /// Done without a usable output: a definitive failure (the provider's
    /// error, a refusal, an answer cut off or breaking the contract).
    Failed(ProviderError),
    /// Stopped by a cancel call before it finished, having used this much.
    Canceled(Option<crate::domain::Usage>),
    /// It has no such request.
    NotFound,
}

/// What a provider said when told to stop working on a request.
#[derive(Clone, Debug, PartialEq)]
pub struct CancelAnswer {
    /// Its status of the request after the cancel: `canceled`, or the
    /// status it had reached first (`succeeded`, `failed`).
    pub status: String,
    /// What the request used until it stopped, when the provider says.
    pub usage: Option<crate::domain::Usage>,
}

/// Why a callback said to come from a provider was not taken as its.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallbackRefusal {
    /// It is not signed by the provider.
    NotSigned(String),
    /// Its signature could not be checked now (the provider's signing
    /// secret could not be had): the sender should send it again.
    CannotVerify(String),
}

/// A configured provider.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The provider's name in the configuration.
    fn name(&self) -> &str;

    /// Its settings.
    fn settings(&self) -> &ProviderSettings;

    /// Sends one request: its answer, or the id it runs under in the
    /// background. The caller enforces the deadline; [`call`] follows a
    /// background request to its end.
    async fn send(&self, request: &ProviderRequest) -> Result<Reply, ProviderError>;

    /// Sends a request whose answer streams in the background (the
    /// Responses API with the request's deltas) and follows the stream to
    /// its end, resuming it where it broke: `started` is told the
    /// provider's id of the request as soon as it comes.
    async fn stream_response(
        &self,
        request: &ProviderRequest,
        started: tokio::sync::oneshot::Sender<String>,
    ) -> Result<Completion, ProviderError>;

    /// Asks for the status of an earlier request; `None` when this provider
    /// cannot be asked (it has no status lookup, or the request has no id
    /// it could be asked by).
    async fn status(&self, request: RequestRef<'_>) -> Option<Result<RequestStatus, ProviderError>>;

    /// Tells the provider to stop working on an earlier request whose call
    /// was aborted; `None` when this provider has no cancel call (or the
    /// request no id to cancel it by).
    async fn cancel(&self, request: RequestRef<'_>) -> Option<Result<CancelAnswer, ProviderError>>;

    /// What the provider says of itself (a Cog server's `/health-check`:
    /// `READY`, `BUSY`), asked when the outcome of a request did not come
    /// in time, as evidence for whoever settles it; `None` when it has
    /// nothing to say.
    async fn evidence(&self) -> Option<String> {
        None
    }

    /// What a callback's body says: the provider's id of the request it is
    /// of, and its status (a Cog prediction, by default); an error when
    /// what it tells cannot be had yet (its output is to be fetched, and
    /// could not be).
    async fn read_callback(&self, body: Value) -> Result<(Option<String>, RequestStatus), ProviderError> {
        let id = body.get("id").and_then(Value::as_str).map(str::to_owned);
        Ok((id, cog::read_prediction(body)))
    }

    /// Whether a callback with `headers` and `body` comes from this
    /// provider, by its signature where it signs them (Replicate). The
    /// callback URL's token has been checked first; a provider that does
    /// not sign has nothing more to check.
    async fn verify_callback(
        &self,
        _headers: &reqwest::header::HeaderMap,
        _body: &[u8],
    ) -> Result<(), CallbackRefusal> {
        Ok(())
    }

    /// The input tokens of `request` as the provider counts them; `None`
    /// when it has no token-counting endpoint.
    async fn count_tokens(&self, _request: &ProviderRequest) -> Option<Result<usize, ProviderError>> {
        None
    }
}

/// Sends `request` and waits for its answer: for a request accepted to run
/// in the background, `accepted` is told its id first, then the provider is
/// asked every `poll_interval_ms` until the request is done (or, for one
/// whose answer streams, followed by its stream). A lookup that
/// fails or does not find the request yet says nothing of the request:
/// the next one asks again. The outcome of a request accepted by a
/// provider that answers by callback is awaited from `settled_by_callback`,
/// which ends once that callback settled the attempt. The caller enforces
/// the deadline.
pub async fn call(
    provider: &dyn Provider,
    request: &ProviderRequest,
    accepted: impl AsyncFnOnce(&str),
    settled_by_callback: impl Future<Output = ProviderError>,
) -> Result<Completion, ProviderError> {
    if request.deltas.is_some() && provider.settings().api() == crate::config::ProviderApi::Responses {
        // The id is kept while the stream goes on.
        let (started, id) = tokio::sync::oneshot::channel::<String>();
        let keeping = async {
            if let Ok(id) = id.await {
                accepted(&id).await;
            }
        };
        let (answer, ()) = tokio::join!(provider.stream_response(request, started), keeping);
        return answer;
    }
    let id = match provider.send(request).await? {
        Reply::Done(completion) => return Ok(completion),
        Reply::Accepted(id) => id,
    };
    accepted(&id).await;
    let settings = provider.settings();
    if settings.answers_by_callback() && !settings.has_status_lookup() {
        return Err(settled_by_callback.await);
    }
    // Where the outcome may come by callback too, whichever comes first.
    let asked = RequestRef { client_id: &request.request_id, provider_id: Some(&id), output: request.output_kind() };
    let callback =
        async { if settings.answers_by_callback() { settled_by_callback.await } else { std::future::pending().await } };
    tokio::select! {
        error = callback => Err(error),
        outcome = follow(provider, asked, &id) => outcome,
    }
}

/// Asks the provider about background request `id` every `poll_interval_ms`
/// until it is done.
async fn follow(provider: &dyn Provider, asked: RequestRef<'_>, id: &str) -> Result<Completion, ProviderError> {
    loop {
        tokio::time::sleep(provider.settings().poll_interval).await;
        match provider.status(asked).await {
            Some(Ok(RequestStatus::Succeeded(completion))) => return Ok(completion),
            Some(Ok(RequestStatus::Failed(error))) => return Err(error),
            Some(Ok(RequestStatus::Canceled(usage))) => return Err(ProviderError::canceled_at_provider(usage)),
            Some(Ok(RequestStatus::Running | RequestStatus::NotFound)) => {}
            Some(Err(error)) => {
                tracing::debug!(%error, provider_request_id = %id, "asking for a background request failed; asking again")
            }
            None => {
                let message =
                    format!("the request runs in the background as {id}, and the provider cannot be asked about it");
                return Err(ProviderError::new(FailureClass::Ambiguous, FailureKind::NoStatusLookup, None, message));
            }
        }
    }
}

/// What a redirect not followed is said to be.
pub(crate) const REDIRECT_NOT_FOLLOWED: &str = "a redirect, which is not followed (see the provider's `redirects`)";

/// The most redirects a call follows where its provider allows them.
const MOST_REDIRECTS: usize = 5;

/// The client of providers' calls: no proxy but the one configured, whatever
/// the environment says, and no redirect unless allowed, then only to the
/// call's own origin (a prompt, its key and its Idempotency-Key go nowhere
/// the configuration does not name).
fn client(redirects: Redirects, proxy: Option<&str>) -> Result<reqwest::Client, String> {
    let policy = match redirects {
        Redirects::None => reqwest::redirect::Policy::none(),
        Redirects::SameOrigin => reqwest::redirect::Policy::custom(|attempt| {
            let same = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
            if same && attempt.previous().len() <= MOST_REDIRECTS { attempt.follow() } else { attempt.stop() }
        }),
    };
    let mut builder = reqwest::Client::builder().pool_max_idle_per_host(256).no_proxy().redirect(policy);
    if let Some(proxy) = proxy {
        builder = builder.proxy(reqwest::Proxy::all(proxy).map_err(|e| format!("its proxy: {e}"))?);
    }
    builder.build().map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Every configured provider by name.
pub type Providers = HashMap<String, Arc<dyn Provider>>;

/// Builds the providers of the settings. `simulator` is the base URL of the
/// simulator that serves the `sim` providers.
pub fn build(settings: &Settings, simulator: Option<&str>) -> Result<Providers, String> {
    let shared = client(Redirects::None, None)?;
    let mut providers = Providers::new();
    for (name, provider) in &settings.providers {
        let client = match (provider.redirects, &provider.proxy) {
            (Redirects::None, None) => shared.clone(),
            (redirects, proxy) => client(redirects, proxy.as_deref()).map_err(|e| format!("providers.{name}: {e}"))?,
        };
        let built = match provider.kind {
            ProviderKind::Sim => {
                let base = simulator.ok_or_else(|| format!("provider {name} is simulated, but no simulator runs"))?;
                match provider.api() {
                    crate::config::ProviderApi::Messages => {
                        Arc::new(MessagesProvider::simulated(name, provider.clone(), base, client.clone()))
                            as Arc<dyn Provider>
                    }
                    crate::config::ProviderApi::Predictions => {
                        Arc::new(CogProvider::simulated(name, provider.clone(), base, client.clone()))
                    }
                    crate::config::ProviderApi::Replicate => {
                        Arc::new(ReplicateProvider::simulated(name, provider.clone(), base, client.clone()))
                    }
                    crate::config::ProviderApi::Fal | crate::config::ProviderApi::Runpod => {
                        Arc::new(HttpJobProvider::simulated(name, provider.clone(), base, client.clone()))
                    }
                    _ => Arc::new(HttpProvider::simulated(name, provider.clone(), base, client.clone()))
                        as Arc<dyn Provider>,
                }
            }
            ProviderKind::Openai | ProviderKind::OpenaiResponses => {
                Arc::new(HttpProvider::openai(name, provider.clone(), client.clone())?)
            }
            ProviderKind::Anthropic => Arc::new(MessagesProvider::anthropic(name, provider.clone(), client.clone())?),
            ProviderKind::Cog => Arc::new(CogProvider::new(name, provider.clone(), client.clone())?),
            ProviderKind::Replicate => Arc::new(ReplicateProvider::new(name, provider.clone(), client.clone())?),
            ProviderKind::HttpJob => Arc::new(HttpJobProvider::new(name, provider.clone(), client.clone())?),
        };
        providers.insert(name.clone(), built);
    }
    Ok(providers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_the_design_says() {
        for status in [301, 302, 307, 308, 400, 401, 403, 404, 422] {
            assert_eq!(classify_status(status), FailureClass::Definitive { retryable: false }, "{status}");
        }
        for status in [429, 500, 502, 503] {
            assert_eq!(classify_status(status), FailureClass::Definitive { retryable: true }, "{status}");
        }
        for status in [303, 408, 504] {
            assert_eq!(classify_status(status), FailureClass::Ambiguous, "{status}");
        }
    }
}
