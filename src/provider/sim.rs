//! The provider simulator: a real OpenAI-compatible HTTP server whose
//! providers are slow, fast, flaky, hanging, late or contract-breaking on
//! purpose, so that timeouts, races and reconciliation are driven by a real
//! peer rather than by sleeps in tests. A provider's `fault` makes it
//! misbehave on the wire instead: reset the connection before or after
//! taking the request, never send headers, stall halfway through the body,
//! send 10 MiB, send bytes that are not UTF-8, or an error object with 200.
//!
//! Every request is logged by its client request id (the attempt id), and
//! what a request's status is at any moment follows from when it arrived and
//! its provider's settings, so `GET /v1/requests/{id}` answers the way a
//! provider's status lookup would, even after the client gave up waiting.
//! The log also says when a client closed its connection before the answer,
//! and `POST /v1/requests/{id}/cancel` stops a request that has not finished:
//! it is `canceled` from then on, charged for the prompt and for the part of
//! its answer produced by then.
//!
//! A provider speaks chat completions by default (`chat`); one with
//! `api = "responses"` speaks OpenAI's Responses API in background mode
//! instead (`responses`), one with `api = "messages"`
//! Anthropic's Messages API (`messages`), and one with `api =
//! "predictions"` a Cog server's predictions, which draw images
//! (`predictions`), and one with `api = "replicate"` Replicate's
//! (`replicate`), and ones with `api = "fal"` or `"runpod"` fal's queue
//! and RunPod's serverless jobs (`jobs`), with the same plans and faults.
//! Either surface honours a strict JSON schema as OpenAI's structured
//! outputs do: the schema must meet strict mode's rules (400 otherwise), and
//! the answer then follows it, whatever the provider's `output` would have
//! broken.

mod answers;
mod bounded;
mod chat;
mod connection;
mod faults;
mod image;
mod jobs;
mod messages;
mod predictions;
mod replicate;
mod response_object;
mod response_stream;
mod responses;
mod stream;

use answers::{Answer, answer_for, ended_completion, openai_error, render, strict_schema, usage_json};
use bounded::{Bounded, MOST_IDS_SEEN, MOST_REQUESTS, Seen};
use connection::{Connection, SimListener};
use faults::{misbehave, reset};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Extension, Json, Router};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::config::{ProviderKind, ProviderSettings, Settings, SimFault, SimOutput, duration};
use crate::provider::tokens;
use crate::sync::LockAnyway;

/// The size of a `huge_body` answer.
pub const HUGE_BODY_BYTES: usize = 10 * 1024 * 1024;

/// How an answer ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// With its whole content.
    Complete,
    /// With a refusal instead of content.
    Refusal,
    /// Cut off at the token limit: its content is half of the answer.
    Truncated,
}

/// What the simulated model says when it refuses.
const REFUSAL: &str = "I'm sorry, but I can't help with that request.";

/// What the simulator decided to do with one request.
#[derive(Clone, Debug)]
enum Plan {
    /// Answer 200 with `content` at `at`, reporting this `usage`
    /// (prompt and completion tokens by the provider's tokenizer).
    Answer { at: Instant, content: String, usage: (usize, usize), ending: Ending },
    /// Answer `status` with an error body at `at`.
    Error { at: Instant, status: u16 },
    /// Never answer; the status lookup says `running` until `gives_up_at`,
    /// then `failed`.
    Hang { gives_up_at: Instant },
}

struct Entry {
    provider: String,
    received_at: chrono::DateTime<chrono::Utc>,
    arrived: Instant,
    times: u32,
    plan: Plan,
    /// How long after its arrival its client closed the connection, when
    /// that came before the answer.
    closed_after: Option<Duration>,
    /// How long after its arrival it was canceled, when that came before
    /// it finished.
    canceled_after: Option<Duration>,
    /// Whether it came with a strict JSON schema for its answer.
    strict_schema: bool,
    /// The id of its background response, for the Responses API.
    response_id: Option<String>,
    /// The `traceparent` it came with.
    traceparent: Option<String>,
    /// How many times its stream was asked for again (the Responses API).
    resumed: u32,
    /// A streamed chat completion: when its first piece of content was due
    /// (by the wall clock), and the time between two.
    paced: Option<(chrono::DateTime<chrono::Utc>, Duration)>,
    /// A streamed answer's first piece comes this long after its arrival:
    /// `first_token_ms` (by default `latency_ms`), or in the tail
    /// `tail_latency_ms`.
    first_token_after: Duration,
}

impl Entry {
    /// When the request finished, or will; `None` for one that hangs.
    fn done_at(&self) -> Option<Instant> {
        match &self.plan {
            Plan::Answer { at, .. } | Plan::Error { at, .. } => Some(*at),
            Plan::Hang { .. } => None,
        }
    }

    /// Whether it was still being worked on at `moment`.
    fn working_at(&self, moment: Instant) -> bool {
        self.canceled_after.is_none() && self.done_at().is_none_or(|done| moment < done)
    }

    /// The tokens used by `moment`: the whole prompt, and the share of the
    /// answer produced by then (as if it came at an even pace).
    fn usage_by(&self, moment: Instant) -> Option<(usize, usize)> {
        let Plan::Answer { at, usage: (prompt, completion), .. } = &self.plan else { return None };
        let whole = at.saturating_duration_since(self.arrived).as_secs_f64();
        let done = moment.saturating_duration_since(self.arrived).as_secs_f64();
        let share = if whole > 0.0 { (done / whole).min(1.0) } else { 1.0 };
        Some((*prompt, (*completion as f64 * share) as usize))
    }
}

struct SimState {
    providers: HashMap<String, ProviderSettings>,
    /// The latest [`MOST_REQUESTS`] requests, by id.
    log: Mutex<Bounded<Entry>>,
    /// Every request id seen (up to [`MOST_IDS_SEEN`]): a repeat is counted
    /// even once `log` forgot the id.
    seen: Mutex<Seen>,
    /// Background responses' ids, to their requests' ids in `log` (as many).
    responses: Mutex<Bounded<String>>,
    random: Mutex<u64>,
    /// Requests refused so far per provider, for `refuse_first`.
    refused: Mutex<HashMap<String, u32>>,
    /// Requests planned so far per provider (qualification calls aside),
    /// for `tail_rate`.
    arrivals: Mutex<HashMap<String, u64>>,
    /// When it started, for `outage_ms`.
    started: Instant,
    /// Replicate's predictions, by id (as many as `log`).
    predictions: Mutex<Bounded<replicate::Created>>,
    /// The secret Replicate's webhooks are signed with (`whsec_…`).
    signing_secret: String,
    /// fal's and RunPod's jobs, by id (as many as `log`).
    jobs: Mutex<Bounded<jobs::Submitted>>,
    /// The key fal's webhooks are signed with.
    fal_key: ring::signature::Ed25519KeyPair,
}

impl SimState {
    /// A simulator of `providers`, with nothing logged yet.
    fn new(providers: HashMap<String, ProviderSettings>) -> Self {
        let mut seed = [0u8; 8];
        getrandom::fill(&mut seed).expect("the operating system's random source");
        let mut key_seed = [0u8; 32];
        getrandom::fill(&mut key_seed).expect("the operating system's random source");
        SimState {
            providers,
            log: Mutex::new(Bounded::new(MOST_REQUESTS)),
            seen: Mutex::new(Seen::new(MOST_IDS_SEEN)),
            responses: Mutex::new(Bounded::new(MOST_REQUESTS)),
            random: Mutex::new(u64::from_le_bytes(seed) | 1),
            refused: Mutex::new(HashMap::new()),
            arrivals: Mutex::new(HashMap::new()),
            started: Instant::now(),
            predictions: Mutex::new(Bounded::new(MOST_REQUESTS)),
            signing_secret: crate::domain::webhook::new_secret(),
            jobs: Mutex::new(Bounded::new(MOST_REQUESTS)),
            fal_key: ring::signature::Ed25519KeyPair::from_seed_unchecked(&key_seed).expect("any 32 bytes are a seed"),
        }
    }

    /// Whether provider `name` refuses this request before any work: one of
    /// its first `refuse_first`.
    fn refuses(&self, name: &str, provider: &ProviderSettings) -> bool {
        let mut refused = self.refused.lock_anyway();
        let count = refused.entry(name.to_owned()).or_default();
        let refuses = *count < provider.refuse_first;
        if refuses {
            *count += 1;
        }
        refuses
    }

    /// Whether the next request planned for provider `name` is in its
    /// tail: the n-th (from 0) is when ⌊(n + 1) × tail_rate⌋ passes
    /// ⌊n × tail_rate⌋, so exactly ⌊N × tail_rate⌋ of the first N are,
    /// spread evenly.
    fn in_tail(&self, name: &str, provider: &ProviderSettings) -> bool {
        if provider.tail_rate <= 0.0 {
            return false;
        }
        let mut arrivals = self.arrivals.lock_anyway();
        let n = arrivals.entry(name.to_owned()).or_default();
        let tails = |count: u64| (count as f64 * provider.tail_rate).floor();
        let in_tail = tails(*n + 1) > tails(*n);
        *n += 1;
        in_tail
    }

    /// A number in [0, 1) from a xorshift generator.
    fn roll(&self) -> f64 {
        let mut state = self.random.lock_anyway();
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The simulator's routes for the `sim` providers of `providers`.
pub fn router(providers: &std::collections::BTreeMap<String, ProviderSettings>) -> Router {
    let state = Arc::new(SimState::new(
        providers.iter().filter(|(_, p)| p.kind == ProviderKind::Sim).map(|(n, p)| (n.clone(), p.clone())).collect(),
    ));
    Router::new()
        .route("/providers/{name}/v1/chat/completions", post(chat::complete))
        .route("/providers/{name}/v1/messages", post(messages::create))
        .route("/providers/{name}/v1/messages/count_tokens", post(messages::count_tokens))
        .route("/providers/{name}/v1/responses", post(responses::create))
        .route("/providers/{name}/v1/responses/{id}", get(responses::retrieve))
        .route("/providers/{name}/v1/responses/{id}/cancel", post(responses::cancel))
        .route("/providers/{name}/predictions/{id}", put(predictions::put))
        .route("/providers/{name}/predictions/{id}/cancel", post(predictions::cancel))
        .route("/providers/{name}/health-check", get(predictions::health))
        .route("/providers/{name}/v1/predictions", post(replicate::create_version).get(replicate::list))
        .route("/providers/{name}/v1/models/{owner}/{model}/predictions", post(replicate::create_named))
        .route("/providers/{name}/v1/deployments/{owner}/{model}/predictions", post(replicate::create_named))
        .route("/providers/{name}/v1/predictions/{id}", get(replicate::get))
        .route("/providers/{name}/v1/predictions/{id}/cancel", post(replicate::cancel))
        .route("/providers/{name}/v1/webhooks/default/secret", get(replicate::secret))
        .route("/providers/{name}/fal/.well-known/jwks.json", get(jobs::fal_keys))
        .route("/providers/{name}/fal/{owner}/{alias}", post(jobs::fal_submit))
        .route("/providers/{name}/fal/{owner}/{alias}/{path}", post(jobs::fal_submit_path))
        .route("/providers/{name}/fal/{owner}/{alias}/requests/{id}", get(jobs::fal_result))
        .route("/providers/{name}/fal/{owner}/{alias}/requests/{id}/status", get(jobs::fal_status))
        .route("/providers/{name}/fal/{owner}/{alias}/requests/{id}/cancel", put(jobs::fal_cancel))
        .route("/providers/{name}/v2/{endpoint}/run", post(jobs::runpod_run))
        .route("/providers/{name}/v2/{endpoint}/status/{id}", get(jobs::runpod_get))
        .route("/providers/{name}/v2/{endpoint}/cancel/{id}", post(jobs::runpod_cancel))
        .route("/v1/requests/{id}", get(request_status))
        .route("/v1/requests/{id}/cancel", post(cancel_request))
        .route("/v1/requests", get(all_requests))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(state)
}

/// A simulator serving on its own listener.
pub struct RunningSimulator {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RunningSimulator {
    /// The base URL providers are given.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RunningSimulator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the simulator for the settings' `sim` providers on `listen`.
pub async fn spawn(settings: &Settings, listen: SocketAddr) -> std::io::Result<RunningSimulator> {
    let listener = SimListener(crate::process::listener::bind(listen)?);
    let addr = listener.0.local_addr()?;
    let app = router(&settings.providers).into_make_service_with_connect_info::<Connection>();
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "the simulator stopped");
        }
    });
    Ok(RunningSimulator { addr, task })
}

/// The id a request came with (`X-Client-Request-Id`), or a fresh one.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-client-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string())
}

/// One request as the simulator takes it.
struct Arrival<'a> {
    name: &'a str,
    provider: &'a ProviderSettings,
    id: &'a str,
    /// `onejob_input`: the task and the job's input.
    job: &'a Value,
    /// The chat messages (for the Responses API: its instructions and input as messages).
    messages: &'a [Value],
    strict: bool,
    /// Whether it asks for an answer of a JSON schema (`response_format`,
    /// the Responses API's `text.format`, a forced tool).
    asked_json: bool,
    /// The Responses API: the request's background response id, if it is one.
    response_id: Option<String>,
    /// The `traceparent` header it came with.
    traceparent: Option<String>,
}

/// Logs a request and plans its answer; a repeated request id keeps its
/// first plan (a provider that honours Idempotency-Key), and is counted.
/// Returns the plan and, for a background response, its id.
fn admit(sim: &SimState, arrival: Arrival<'_>) -> (Plan, Option<String>) {
    let Arrival { name, provider, id, job, messages, strict, asked_json, response_id, traceparent } = arrival;
    // Under a strict schema the answer follows it, as structured outputs
    // make a model's do; a refusal or a cut-off still happen.
    let mode = match provider.output {
        SimOutput::ExtraTopLevelKey | SimOutput::NotJson if strict => SimOutput::Valid,
        mode => mode,
    };
    let ending = match mode {
        SimOutput::Refusal => Ending::Refusal,
        SimOutput::Truncated | SimOutput::ContextWindowExceeded => Ending::Truncated,
        _ => Ending::Complete,
    };
    let content = render(answer_for(job, messages, asked_json), mode);
    // Counted once per request, as the provider's tokenizer counts (before
    // the clock starts: an encoding's first use takes a while to load).
    let answered = if ending == Ending::Refusal { REFUSAL } else { content.as_str() };
    let tokenizer = answers::model_tokenizer(provider);
    let usage = (tokens::count_messages(tokenizer, messages), tokens::count(tokenizer, answered));
    let now = Instant::now();
    let fresh_plan = |in_tail: bool, in_outage: bool| {
        let jitter_ms = duration::saturating_millis(provider.jitter);
        let jitter = if jitter_ms > 0 { (sim.roll() * jitter_ms as f64) as u64 } else { 0 };
        let latency = if in_tail { provider.tail_latency } else { provider.latency };
        let ready = now + latency + Duration::from_millis(jitter);
        if let Some(hang) = provider.hang {
            Plan::Hang { gives_up_at: now + hang }
        } else if in_outage || (provider.error_rate > 0.0 && sim.roll() < provider.error_rate) {
            Plan::Error { at: ready, status: provider.error_status }
        } else {
            let at = provider.late.map_or(ready, |late| now + late);
            Plan::Answer { at, content, usage, ending }
        }
    };
    sim.seen.lock_anyway().arrived(id);
    let mut log = sim.log.lock_anyway();
    // Planned only for a request not seen before: a repeated id keeps its plan.
    let entry = log.get_or_insert_with(id, || {
        let qualification = id.starts_with("qualification-");
        let in_tail = !qualification && sim.in_tail(name, provider);
        let in_outage = !qualification && provider.outage.is_some_and(|outage| sim.started.elapsed() < outage);
        let first_token_after =
            if in_tail { provider.tail_latency } else { provider.first_token.unwrap_or(provider.latency) };
        Entry {
            provider: name.to_owned(),
            received_at: chrono::Utc::now(),
            arrived: now,
            times: 0,
            plan: fresh_plan(in_tail, in_outage),
            first_token_after,
            closed_after: None,
            canceled_after: None,
            strict_schema: strict,
            response_id,
            traceparent,
            resumed: 0,
            paced: None,
        }
    });
    entry.times += 1;
    (entry.plan.clone(), entry.response_id.clone())
}

/// Reads a request to provider `name`: its settings and its JSON body, or
/// the answer instead (404, 400, or the reset of a provider that resets
/// before taking the request, which is then never logged: the status
/// lookup says the provider never received it). Errors are shaped by
/// `error`, the surface's own.
async fn receive<'s>(
    sim: &'s SimState,
    name: &str,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    body: Body,
    error: fn(u16, &str) -> Response,
) -> Result<(&'s ProviderSettings, Value), Response> {
    let Some(provider) = sim.providers.get(name) else {
        return Err(error(404, &format!("no simulated provider named '{name}'")));
    };
    if provider.fault == Some(SimFault::ResetBeforeRequest) {
        return Err(reset(connection));
    }
    let Ok(body) = axum::body::to_bytes(body, 2 * 1024 * 1024).await else {
        return Err(error(400, "the body could not be read"));
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return Err(error(400, "the body is not JSON"));
    };
    Ok((provider, body))
}

/// A streamed answer's work lasts as long as its stream: request `id`'s
/// plan ends with its last piece, and its pacing is logged. How long after
/// its arrival the first piece comes.
fn pace_stream(sim: &SimState, id: &str, provider: &ProviderSettings, content: &str, arrived: Instant) -> Duration {
    let mut log = sim.log.lock_anyway();
    let mut first_after = provider.first_token.unwrap_or(provider.latency);
    if let Some(entry) = log.get_mut(id)
        && let Plan::Answer { at, .. } = &mut entry.plan
    {
        first_after = entry.first_token_after;
        *at = (*at).max(stream::ends_at(provider, first_after, content, arrived));
        let (first, every) = stream::pace(provider, first_after, arrived);
        let due = chrono::Utc::now() + first.saturating_duration_since(Instant::now());
        entry.paced = Some((due, every));
    }
    first_after
}

/// Logs, when dropped, that the client of request `id` closed its
/// connection before its answer (a handler is dropped when that happens).
struct Unanswered {
    sim: Arc<SimState>,
    id: String,
    armed: bool,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let now = Instant::now();
        let mut log = self.sim.log.lock_anyway();
        if let Some(entry) = log.get_mut(&self.id)
            && entry.closed_after.is_none()
        {
            entry.closed_after = Some(now.saturating_duration_since(entry.arrived));
        }
    }
}

fn report(id: &str, entry: &Entry) -> Value {
    let now = Instant::now();
    let mut usage = Value::Null;
    let millis = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let (closed, canceled) = (millis(entry.closed_after), millis(entry.canceled_after));
    let (status, content, error) = match &entry.plan {
        _ if let Some(after) = entry.canceled_after => {
            usage = entry.usage_by(entry.arrived + after).map_or(Value::Null, usage_json);
            ("canceled", None, None)
        }
        Plan::Answer { at, content, usage: tokens, .. } if now >= *at => {
            usage = usage_json(*tokens);
            ("succeeded", Some(content.clone()), None)
        }
        Plan::Error { at, status } if now >= *at => ("failed", None, Some(format!("simulated {status}"))),
        Plan::Hang { gives_up_at } if now >= *gives_up_at => ("failed", None, Some("gave up".to_owned())),
        _ => ("running", None, None),
    };
    // When it stopped being worked on (by the wall clock, as received_at).
    let stopped = entry.canceled_after.map(|after| entry.arrived + after).or(entry.done_at());
    let finished_at = stopped.map(|at| entry.received_at + at.saturating_duration_since(entry.arrived));
    json!({"id": id, "provider": entry.provider, "status": status, "content": content, "error": error, "usage": usage,
           "received": entry.times, "received_at": entry.received_at, "finished_at": finished_at,
           "connection_closed_after_ms": closed, "canceled_after_ms": canceled,
           "strict_schema": entry.strict_schema, "response_id": entry.response_id, "traceparent": entry.traceparent,
           "stream_resumed": entry.resumed,
           "stream_first_piece_at": entry.paced.map(|(first, _)| first),
           "stream_piece_interval_us": entry.paced.map(|(_, every)| u64::try_from(every.as_micros()).unwrap_or(u64::MAX))})
}

/// Stops request `id` if it has not finished: it is `canceled` from now
/// on. Answers with its report either way (a finished one keeps its status).
async fn cancel_request(State(sim): State<Arc<SimState>>, Path(id): Path<String>) -> Response {
    match sim.cancel(&id) {
        Some(report) => Json(report).into_response(),
        None => openai_error(404, "no request with that id"),
    }
}

impl SimState {
    /// Stops request `id` if it has not finished, as a cancel call does:
    /// its report after, `None` for a request it does not have.
    fn cancel(&self, id: &str) -> Option<Value> {
        let now = Instant::now();
        let mut log = self.log.lock_anyway();
        let entry = log.get_mut(id)?;
        if entry.working_at(now) {
            entry.canceled_after = Some(now.saturating_duration_since(entry.arrived));
        }
        Some(report(id, entry))
    }
}

async fn request_status(State(sim): State<Arc<SimState>>, Path(id): Path<String>) -> Response {
    let log = sim.log.lock_anyway();
    match log.get(&id) {
        Some(entry) => Json(report(&id, entry)).into_response(),
        None => openai_error(404, "no request with that id"),
    }
}

/// `GET /v1/requests`: the requests in the log, and the counts of every id
/// seen ([`Seen::report`]: `repeats` counts an id that came again even
/// after the log forgot it).
async fn all_requests(State(sim): State<Arc<SimState>>) -> Json<Value> {
    let log = sim.log.lock_anyway();
    let requests: Vec<Value> = log.iter().map(|(id, entry)| report(id, entry)).collect();
    let mut answer = sim.seen.lock_anyway().report();
    answer["requests"] = Value::Array(requests);
    Json(answer)
}

#[cfg(test)]
mod tests;
