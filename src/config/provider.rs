//! `[providers.NAME]`: where attempts are sent, and how the simulator's
//! providers misbehave.

use std::time::Duration;

use serde::Deserialize;

pub use super::breaker::BreakerSettings;
use super::duration;

mod checks;
mod job;
pub use super::sim::{SimFault, SimOutput};
pub use crate::domain::limits::ProviderLimits;
pub use job::{JobApi, JobCall, JobMethod, JobReading, JobSignature, JobState, SignatureScheme};

/// How a provider counts tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// OpenAI's o200k_base (GPT-4o and later).
    O200kBase,
    /// OpenAI's cl100k_base (GPT-4, GPT-3.5).
    Cl100kBase,
    /// Characters divided by four, rounded up.
    #[default]
    Approx,
    /// Characters divided by three, rounded up: for models whose tokenizer
    /// is not published (Anthropic's), a margin over their average of about
    /// 3.5 characters per token of English text.
    ApproxWithMargin,
}

impl Tokenizer {
    /// The encoding of an OpenAI model family by its name: `o200k_base`
    /// for GPT-4o, GPT-4.1, GPT-5 and the o-series; `cl100k_base` for
    /// GPT-4 and GPT-3.5; characters ÷ 3 for Claude; characters ÷ 4 for
    /// any other model.
    pub fn for_model(model: &str) -> Tokenizer {
        let model = model.to_ascii_lowercase();
        let model = model.rsplit('/').next().unwrap_or_default();
        let o200k = ["gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4"];
        if o200k.iter().any(|family| model.starts_with(family)) {
            Tokenizer::O200kBase
        } else if model.starts_with("gpt-4") || model.starts_with("gpt-3.5") {
            Tokenizer::Cl100kBase
        } else if model.starts_with("claude") {
            Tokenizer::ApproxWithMargin
        } else {
            Tokenizer::Approx
        }
    }
}

/// Which API a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderApi {
    /// `POST /chat/completions`, answered when the answer is ready.
    ChatCompletions,
    /// `POST /responses` in background mode: answered at once with a
    /// response id, which is then asked for until the response is done.
    Responses,
    /// Anthropic's `POST /v1/messages`, answered when the answer is ready.
    Messages,
    /// A Cog server's `PUT /predictions/{id}`: accepted at once, its
    /// outcome brought by a callback.
    Predictions,
    /// Replicate's `POST /v1/predictions` (or a model's, or a
    /// deployment's): accepted at once under Replicate's id, its outcome
    /// brought by a signed callback or asked for by that id.
    Replicate,
    /// An asynchronous job API described by the provider's `job` table:
    /// submitted, then asked for by the provider's id or called back.
    HttpJob,
    /// The simulator's copy of fal's queue API (spoken by the `job` table).
    Fal,
    /// The simulator's copy of RunPod's serverless API (spoken by the `job`
    /// table).
    Runpod,
}

/// Which redirects a provider's calls follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Redirects {
    /// None: a 3xx is the call's answer (a failure; 303 leaves the attempt
    /// `unknown`).
    #[default]
    None,
    /// Up to 5 to the same scheme, host and port as the call's URL; one
    /// elsewhere is the call's answer.
    SameOrigin,
}

/// The name chat completions give the answer's token limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens`: what most OpenAI-compatible servers read.
    MaxTokens,
    /// `max_completion_tokens`: what OpenAI's reasoning models require.
    MaxCompletionTokens,
}

/// What a provider is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The built-in simulator.
    Sim,
    /// An OpenAI-compatible chat completions endpoint.
    Openai,
    /// OpenAI's Responses API, in background mode.
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    /// Anthropic's Messages API.
    Anthropic,
    /// A Cog model server.
    Cog,
    /// Replicate's hosted predictions.
    Replicate,
    /// An asynchronous job API described by a `job` table (fal's queue,
    /// RunPod serverless).
    #[serde(rename = "http-job")]
    HttpJob,
}

/// `[providers.NAME]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    /// `sim`, `openai`, `openai-responses`, `anthropic`, `cog`, `replicate`
    /// or `http-job`.
    pub kind: ProviderKind,
    /// sim: which surface the simulated provider speaks (the kind says it
    /// for the others).
    #[serde(default)]
    pub api: Option<ProviderApi>,
    /// The model asked for.
    #[serde(default = "default_model")]
    pub model: String,
    /// The deadline of one attempt: connect, headers and body.
    #[serde(default = "default_timeout", rename = "timeout_ms", with = "duration::millis")]
    pub timeout: Duration,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: f64,
    /// The base URL, such as `https://api.openai.com/v1`, or
    /// `https://api.anthropic.com` (to which `/v1/messages` is added).
    #[serde(default)]
    pub base_url: Option<String>,
    /// openai: the environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Which redirects its calls follow: `none` (the default) or
    /// `same-origin`.
    #[serde(default)]
    pub redirects: Redirects,
    /// The HTTP proxy its calls go through (`http://host:port`); none by
    /// default, whatever `HTTP_PROXY` or `HTTPS_PROXY` say.
    #[serde(default)]
    pub proxy: Option<String>,
    /// How the provider counts tokens; by default the encoding of its
    /// model's family (see [`Tokenizer::for_model`]).
    #[serde(default)]
    pub tokenizer: Option<Tokenizer>,
    /// The provider's context window, in tokens: the rendered prompt plus
    /// `max_output_tokens` must fit.
    #[serde(default = "default_context_tokens")]
    pub context_tokens: u32,
    /// The most tokens the provider may answer with (sent as
    /// `max_output_tokens` to the Responses API, as `max_tokens_field` to
    /// chat completions).
    #[serde(default = "default_max_output_tokens")]
    pub max_output_tokens: u32,
    /// Chat completions: the name of that limit; by default
    /// `max_completion_tokens` for OpenAI's reasoning models (o1, o3, o4,
    /// gpt-5), which refuse `max_tokens`, and `max_tokens` for the rest.
    #[serde(default)]
    pub max_tokens_field: Option<MaxTokensField>,
    /// Whether the provider enforces a strict JSON schema: the task's
    /// output schema is then sent with `strict: true`, as `response_format`
    /// to chat completions and as `text.format` to the Responses API.
    #[serde(default)]
    pub response_format: bool,
    /// The Messages API: whether the prompt's tokens are asked of the
    /// provider's token-counting endpoint before each call, instead of
    /// estimated (`approx_with_margin`).
    #[serde(default)]
    pub count_tokens: bool,
    /// The Messages API: whether the system prompt and the output schema's
    /// tool are marked for Anthropic's prompt cache (`cache_control`).
    #[serde(default)]
    pub prompt_cache: bool,
    /// The Responses API: how often a background response is asked for
    /// while its attempt waits for it.
    #[serde(default = "default_poll_interval", rename = "poll_interval_ms", with = "duration::millis")]
    pub poll_interval: Duration,
    /// What its tokens cost; none: usage is counted, not costed.
    #[serde(default)]
    pub price: Option<crate::domain::Price>,
    /// The temperature qualification runs at; part of the contract hash.
    #[serde(default)]
    pub qualification_temperature: f64,
    /// Whether `serve` qualifies this provider for every task at start
    /// (unless a passing qualification of the current contract exists).
    #[serde(default)]
    pub qualify_on_start: bool,
    /// Whether the provider can be asked for the status of a request by its
    /// client request id (default: yes for `sim`, no for `openai`).
    #[serde(default)]
    pub status_lookup: Option<bool>,
    /// openai: the URL of that status lookup; `{id}` is the attempt id.
    #[serde(default)]
    pub status_url: Option<String>,
    /// Whether the provider can be told to stop working on a request by
    /// its client request id, which a worker does after aborting the call
    /// of an attempt nobody wants any more (default: yes for `sim`, no for
    /// `openai`: chat completions has no such call).
    #[serde(default)]
    pub cancel_call: Option<bool>,
    /// openai: the URL of that cancel call (`POST`); `{id}` is the attempt id.
    #[serde(default)]
    pub cancel_url: Option<String>,
    /// Whether the status lookup's "no such request" (404) is final: the
    /// provider records every request before it acts on it, so absence
    /// means it never received the request (default: yes for `sim`, which
    /// does; no for `openai`). Only then is an unknown attempt settled as
    /// `failed` (`not-received`, retryable); otherwise it stays `unknown`.
    #[serde(default)]
    pub absence_is_final: Option<bool>,
    /// How long past the attempt's deadline the lookup must keep saying
    /// "no such request" before that is believed (a provider may index
    /// requests late).
    #[serde(default = "default_absence_grace", rename = "absence_grace_ms", with = "duration::millis")]
    pub absence_grace: Duration,
    /// sim: fixed latency before answering.
    #[serde(default, rename = "latency_ms", with = "duration::millis")]
    pub latency: Duration,
    /// sim: random extra latency, up to this.
    #[serde(default, rename = "jitter_ms", with = "duration::millis")]
    pub jitter: Duration,
    /// sim: share of requests, 0 to 1, that take `tail_latency_ms`
    /// instead of `latency_ms`: the first of every `1 / tail_rate` in
    /// arrival order, so that a run's count of them is exact.
    #[serde(default)]
    pub tail_rate: f64,
    /// sim: the latency of the requests in the tail.
    #[serde(default, rename = "tail_latency_ms", with = "duration::millis")]
    pub tail_latency: Duration,
    /// sim: share of requests answered with `error_status`, 0 to 1.
    #[serde(default)]
    pub error_rate: f64,
    /// sim: the status of those errors.
    #[serde(default = "default_error_status")]
    pub error_status: u16,
    /// sim: every call (qualification calls aside) that arrives within this
    /// long of the simulator's start is answered with `error_status`.
    #[serde(default, rename = "outage_ms", with = "duration::option_millis")]
    pub outage: Option<Duration>,
    /// sim: accept and never answer; status lookup says running this long.
    #[serde(default, rename = "hang_ms", with = "duration::option_millis")]
    pub hang: Option<Duration>,
    /// sim: answer after this long.
    #[serde(default, rename = "late_ms", with = "duration::option_millis")]
    pub late: Option<Duration>,
    /// sim: what the answer looks like.
    #[serde(default)]
    pub output: SimOutput,
    /// sim: of each answer's prompt tokens, this many are reported as read
    /// from the provider's prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u32,
    /// sim, the Messages API: of each answer's prompt tokens, this many are
    /// reported as written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u32,
    /// sim: a transport fault instead of a well-formed answer.
    #[serde(default)]
    pub fault: Option<SimFault>,
    /// sim, predictions: never sends a prediction's webhook (its outcome is
    /// then known only to the status lookup).
    #[serde(default)]
    pub drop_webhooks: bool,
    /// sim: the `Retry-After` (seconds) sent with the simulated error statuses.
    #[serde(default, rename = "retry_after_secs", with = "duration::option_secs")]
    pub retry_after: Option<Duration>,
    /// sim, streamed answers: when the first token comes (by default
    /// `latency_ms` after the request).
    #[serde(default, rename = "first_token_ms", with = "duration::option_millis")]
    pub first_token: Option<Duration>,
    /// sim, streamed answers: how fast the rest comes, a chunk of a few
    /// characters counted as a token.
    #[serde(default = "default_tokens_per_second")]
    pub tokens_per_second: u32,
    /// sim, streamed answers: the connection breaks after this many
    /// chunks of content.
    #[serde(default)]
    pub stream_break_after: Option<u32>,
    /// sim, streamed answers: nothing more comes after this many chunks of
    /// content.
    #[serde(default)]
    pub stream_stall_after: Option<u32>,
    /// sim: the first this many requests of attempts (qualification runs
    /// aside) are refused with 429 (and `retry_after_secs`) before any
    /// work, and not recorded.
    #[serde(default)]
    pub refuse_first: u32,
    /// Requests in flight at once across the cluster.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Requests per minute across the cluster.
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Tokens per minute across the cluster: each request's counted prompt
    /// plus its `max_output_tokens`.
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
    /// Its breaker: taken out of service while its calls mostly fail.
    #[serde(default)]
    pub breaker: Option<BreakerSettings>,
    /// http-job (and the simulator's fal and RunPod): how its API is spoken.
    #[serde(default)]
    pub job: Option<JobApi>,
}

impl ProviderSettings {
    /// Its limits, as the claims enforce them.
    pub fn limits(&self) -> ProviderLimits {
        ProviderLimits {
            max_concurrent: self.max_concurrent,
            requests_per_minute: self.requests_per_minute,
            tokens_per_minute: self.tokens_per_minute,
        }
    }
}

fn default_tokens_per_second() -> u32 {
    1_000
}

fn default_model() -> String {
    "sim-1".to_owned()
}

fn default_context_tokens() -> u32 {
    128_000
}

fn default_max_output_tokens() -> u32 {
    1024
}

fn default_timeout() -> Duration {
    Duration::from_millis(30_000)
}

fn default_absence_grace() -> Duration {
    Duration::from_millis(60_000)
}

fn default_poll_interval() -> Duration {
    Duration::from_millis(1000)
}

fn default_error_status() -> u16 {
    503
}

impl ProviderSettings {
    /// The surface it speaks.
    pub fn api(&self) -> ProviderApi {
        match self.kind {
            ProviderKind::Sim => self.api.unwrap_or(ProviderApi::ChatCompletions),
            ProviderKind::Openai => ProviderApi::ChatCompletions,
            ProviderKind::OpenaiResponses => ProviderApi::Responses,
            ProviderKind::Anthropic => ProviderApi::Messages,
            ProviderKind::Cog => ProviderApi::Predictions,
            ProviderKind::Replicate => ProviderApi::Replicate,
            ProviderKind::HttpJob => ProviderApi::HttpJob,
        }
    }

    /// How it counts tokens: `tokenizer`, or its model family's encoding
    /// (for the Messages API, whose tokenizer is not published, characters
    /// ÷ 3).
    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer.unwrap_or_else(|| match self.api() {
            ProviderApi::Messages => Tokenizer::ApproxWithMargin,
            _ => Tokenizer::for_model(&self.model),
        })
    }

    /// The name chat completions give the answer's token limit.
    pub fn max_tokens_field(&self) -> MaxTokensField {
        self.max_tokens_field.unwrap_or_else(|| {
            let model = self.model.to_ascii_lowercase();
            let reasoning = ["o1", "o3", "o4", "gpt-5"].iter().any(|family| model.starts_with(family));
            if reasoning { MaxTokensField::MaxCompletionTokens } else { MaxTokensField::MaxTokens }
        })
    }

    /// Whether the provider speaks OpenAI's API itself: its kind is not `sim`.
    fn is_real(&self) -> bool {
        self.kind != ProviderKind::Sim
    }

    /// Whether unknown attempts on this provider can be reconciled by
    /// asking it (default: yes, but for chat completions outside the
    /// simulator, which have no status lookup, and for the Messages API,
    /// which has none).
    pub fn has_status_lookup(&self) -> bool {
        let none = self.kind == ProviderKind::Openai || self.api() == ProviderApi::Predictions;
        self.status_lookup.unwrap_or(!none && self.api() != ProviderApi::Messages)
    }

    /// Whether the outcome of a request this provider accepted comes by a
    /// callback to onejob: a Cog server's predictions (which cannot be
    /// asked about), Replicate's (which can be, too).
    pub fn answers_by_callback(&self) -> bool {
        matches!(self.api(), ProviderApi::Predictions | ProviderApi::Replicate) || self.speaks_jobs()
    }

    /// Whether it speaks a job API by its `job` table (`http-job`, and the
    /// simulator's fal and RunPod).
    pub fn speaks_jobs(&self) -> bool {
        matches!(self.api(), ProviderApi::HttpJob | ProviderApi::Fal | ProviderApi::Runpod)
    }

    /// Whether the reconciler can ask the provider about a request whose
    /// provider id is `provider_request_id`: with a status lookup, and, on
    /// the Responses API, the response's id (which a lost answer may never
    /// have brought).
    pub fn can_be_asked_about(&self, provider_request_id: Option<&str>) -> bool {
        let by_own_id = matches!(self.api(), ProviderApi::Responses | ProviderApi::Replicate) || self.speaks_jobs();
        self.has_status_lookup() && (!by_own_id || provider_request_id.is_some())
    }

    /// Whether an aborted call is followed by the provider's cancel call
    /// (the same default).
    pub fn has_cancel_call(&self) -> bool {
        if self.speaks_jobs() {
            return self.job.as_ref().is_some_and(|job| job.cancel.is_some());
        }
        self.cancel_call.unwrap_or(self.kind != ProviderKind::Openai && self.api() != ProviderApi::Messages)
    }

    /// Whether a "no such request" from the status lookup may settle an
    /// attempt as never received (see `absence_is_final`). Never for the
    /// Responses API, nor for the job APIs: a request asked for by its
    /// own id was received (and RunPod forgets a job 30 minutes after it).
    pub fn absence_is_final(&self) -> bool {
        !matches!(self.api(), ProviderApi::Responses | ProviderApi::Replicate)
            && !self.speaks_jobs()
            && self.absence_is_final.unwrap_or(!self.is_real())
    }
}

/// What a `replicate` provider's `model` names: where its predictions are
/// created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicateModel {
    /// `owner/name`: an official model's latest version.
    Model(String),
    /// `owner/name:version`: that version of a model.
    Version(String),
    /// `deployments/owner/name`: a deployment.
    Deployment(String),
}

impl ReplicateModel {
    /// What `model` names, when it has one of the three shapes.
    pub fn of(model: &str) -> Option<ReplicateModel> {
        let segment = |s: &str| {
            s.bytes().any(|b| b != b'.')
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        let pair = |s: &str| s.split_once('/').filter(|(o, n)| segment(o) && segment(n)).is_some();
        if let Some(deployment) = model.strip_prefix("deployments/") {
            return pair(deployment).then(|| ReplicateModel::Deployment(deployment.to_owned()));
        }
        match model.split_once(':') {
            Some((named, version)) if pair(named) && segment(version) => {
                Some(ReplicateModel::Version(version.to_owned()))
            }
            None if pair(model) => Some(ReplicateModel::Model(model.to_owned())),
            _ => None,
        }
    }
}

impl ProviderKind {
    /// Its name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Sim => "sim",
            ProviderKind::Openai => "openai",
            ProviderKind::OpenaiResponses => "openai-responses",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Cog => "cog",
            ProviderKind::Replicate => "replicate",
            ProviderKind::HttpJob => "http-job",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(text: &str) -> ProviderSettings {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_known_model_counts_with_its_familys_encoding_and_reasoning_models_take_max_completion_tokens() {
        for (model, tokenizer, field) in [
            ("gpt-4o-mini", Tokenizer::O200kBase, MaxTokensField::MaxTokens),
            ("openai/gpt-4.1", Tokenizer::O200kBase, MaxTokensField::MaxTokens),
            ("o4-mini", Tokenizer::O200kBase, MaxTokensField::MaxCompletionTokens),
            ("gpt-5", Tokenizer::O200kBase, MaxTokensField::MaxCompletionTokens),
            ("gpt-4-turbo", Tokenizer::Cl100kBase, MaxTokensField::MaxTokens),
            ("gpt-3.5-turbo", Tokenizer::Cl100kBase, MaxTokensField::MaxTokens),
            ("llama3.1:8b", Tokenizer::Approx, MaxTokensField::MaxTokens),
        ] {
            let settings = provider(&format!("kind = \"openai\"\nmodel = \"{model}\""));
            assert_eq!((settings.tokenizer(), settings.max_tokens_field()), (tokenizer, field), "{model}");
        }
        let set =
            provider("kind = \"openai\"\nmodel = \"o3\"\ntokenizer = \"approx\"\nmax_tokens_field = \"max_tokens\"");
        assert_eq!(
            (set.tokenizer(), set.max_tokens_field()),
            (Tokenizer::Approx, MaxTokensField::MaxTokens),
            "settings win"
        );
    }

    #[test]
    fn each_kind_has_the_lookup_and_cancel_call_its_api_has() {
        let responses =
            provider("kind = \"openai-responses\"\nbase_url = \"https://api.openai.com/v1\"\napi_key_env = \"K\"");
        assert_eq!(responses.api(), ProviderApi::Responses);
        assert!(responses.has_status_lookup() && responses.has_cancel_call() && !responses.absence_is_final());
        assert!(responses.check("r").is_ok());
        let chat = provider("kind = \"openai\"\nbase_url = \"http://127.0.0.1:8000/v1\"\napi_key_env = \"K\"");
        assert!(!chat.has_status_lookup() && !chat.has_cancel_call() && !chat.absence_is_final());
        let sim = provider("kind = \"sim\"\napi = \"responses\"");
        assert!(sim.has_status_lookup() && !sim.absence_is_final(), "a response asked for by its id was received");
        assert!(provider("kind = \"sim\"").absence_is_final());
        let claude = provider("kind = \"anthropic\"\nbase_url = \"https://api.anthropic.com\"\napi_key_env = \"K\"");
        assert_eq!((claude.api(), claude.tokenizer()), (ProviderApi::Messages, Tokenizer::ApproxWithMargin));
        assert!(!claude.has_status_lookup() && !claude.has_cancel_call() && !claude.absence_is_final());
        assert!(claude.check("c").is_ok());
        let refused = [
            "kind = \"anthropic\"\nbase_url = \"https://api.anthropic.com/v1\"\napi_key_env = \"K\"",
            "kind = \"anthropic\"\nbase_url = \"u\"\napi_key_env = \"K\"\ntemperature = 1.5",
            "kind = \"anthropic\"\nbase_url = \"u\"\napi_key_env = \"K\"\nresponse_format = true",
            "kind = \"sim\"\napi = \"messages\"\nstatus_lookup = true",
            "kind = \"sim\"\ncount_tokens = true",
            "kind = \"sim\"\noutput = \"pause_turn\"",
            "kind = \"openai\"\napi = \"responses\"\nbase_url = \"u\"\napi_key_env = \"K\"",
            "kind = \"openai-responses\"\nbase_url = \"u\"\napi_key_env = \"K\"\nstatus_url = \"u/{id}\"",
            "kind = \"openai-responses\"\napi_key_env = \"K\"",
            "kind = \"sim\"\npoll_interval_ms = 0",
        ];
        for text in refused {
            assert!(provider(text).check("p").is_err(), "{text}");
        }
    }
}
