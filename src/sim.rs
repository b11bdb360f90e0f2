//! The provider simulator: a real OpenAI-compatible HTTP server whose
//! providers are slow, fast, flaky, hanging, late or contract-breaking on
//! purpose, so that timeouts, races and reconciliation are driven by a real
//! peer rather than by sleeps in tests.
//!
//! Every request is logged by its client request id (the attempt id), and
//! what a request's status is at any moment follows from when it arrived and
//! its provider's settings, so `GET /v1/requests/{id}` answers the way a
//! provider's status lookup would, even after the client gave up waiting.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::config::{ProviderKind, ProviderSettings, Settings, SimOutput};

/// What the simulator decided to do with one request.
#[derive(Clone, Debug)]
enum Plan {
    /// Answer 200 with `content` at `at`.
    Answer { at: Instant, content: String },
    /// Answer `status` with an error body at `at`.
    Error { at: Instant, status: u16 },
    /// Never answer; the status lookup says `running` until `gives_up_at`,
    /// then `failed`.
    Hang { gives_up_at: Instant },
}

struct Entry {
    provider: String,
    received_at: chrono::DateTime<chrono::Utc>,
    times: u32,
    plan: Plan,
}

struct SimState {
    providers: HashMap<String, ProviderSettings>,
    log: Mutex<HashMap<String, Entry>>,
    random: Mutex<u64>,
}

impl SimState {
    /// A number in [0, 1) from a xorshift generator.
    fn roll(&self) -> f64 {
        let mut state = self.random.lock().unwrap_or_else(|p| p.into_inner());
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The simulator's routes for the `sim` providers of `providers`.
pub fn router(providers: &std::collections::BTreeMap<String, ProviderSettings>) -> Router {
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).expect("the operating system's random source");
    let state = Arc::new(SimState {
        providers: providers.iter().filter(|(_, p)| p.kind == ProviderKind::Sim).map(|(n, p)| (n.clone(), p.clone())).collect(),
        log: Mutex::new(HashMap::new()),
        random: Mutex::new(u64::from_le_bytes(seed) | 1),
    });
    Router::new()
        .route("/providers/{name}/v1/chat/completions", post(complete))
        .route("/v1/requests/{id}", get(request_status))
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
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let app = router(&settings.providers);
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "the simulator stopped");
        }
    });
    Ok(RunningSimulator { addr, task })
}

fn openai_error(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
    (status, Json(json!({"error": {"message": message, "type": kind, "param": null, "code": null}}))).into_response()
}

/// The simulated answer for a task's input: `summarize` keeps the first
/// `max_words` words of `text`.
fn answer_for(job: &Value, messages: &Value) -> Value {
    let input = job.get("input");
    let text = input
        .and_then(|i| i.get("text"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            let last = messages.as_array()?.iter().rev().find(|m| m["role"] == "user")?;
            last["content"].as_str().map(str::to_owned)
        })
        .unwrap_or_default();
    let limit = input.and_then(|i| i.get("max_words")).and_then(Value::as_u64).unwrap_or(u64::MAX);
    let words: Vec<&str> = text.split_whitespace().take(usize::try_from(limit).unwrap_or(usize::MAX)).collect();
    json!({"summary": words.join(" "), "word_count": words.len()})
}

fn render(output: Value, mode: SimOutput) -> String {
    match mode {
        SimOutput::Valid => output.to_string(),
        SimOutput::ExtraTopLevelKey => {
            let mut output = output;
            output["note"] = json!("I also added this key");
            output.to_string()
        }
        SimOutput::NotJson => format!("Sure! Here is your summary: {}", output["summary"].as_str().unwrap_or_default()),
    }
}

fn completion(id: &str, model: &str, content: &str) -> Value {
    let prompt_tokens = 20;
    let completion_tokens = content.len().div_ceil(4);
    json!({
        "id": format!("chatcmpl-{id}"),
        "object": "chat.completion",
        "created": chrono::Utc::now().timestamp(),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })
}

async fn complete(
    State(sim): State<Arc<SimState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(provider) = sim.providers.get(&name) else {
        return openai_error(404, &format!("no simulated provider named '{name}'"));
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return openai_error(400, "the body is not JSON");
    };
    if !body["messages"].is_array() {
        return openai_error(400, "messages must be an array");
    }
    let id = headers
        .get("x-client-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let model = body["model"].as_str().unwrap_or(&provider.model).to_owned();

    let now = Instant::now();
    let jitter = if provider.jitter_ms > 0 { (sim.roll() * provider.jitter_ms as f64) as u64 } else { 0 };
    let ready = now + Duration::from_millis(provider.latency_ms + jitter);
    let fresh_plan = if let Some(hang_ms) = provider.hang_ms {
        Plan::Hang { gives_up_at: now + Duration::from_millis(hang_ms) }
    } else if provider.error_rate > 0.0 && sim.roll() < provider.error_rate {
        Plan::Error { at: ready, status: provider.error_status }
    } else {
        let at = provider.late_ms.map_or(ready, |late| now + Duration::from_millis(late));
        Plan::Answer { at, content: render(answer_for(&body["onejob_input"], &body["messages"]), provider.output) }
    };
    // A repeated request id is answered as the first was (a provider that
    // honours Idempotency-Key), and counted.
    let plan = {
        let mut log = sim.log.lock().unwrap_or_else(|p| p.into_inner());
        let entry = log.entry(id.clone()).or_insert_with(|| Entry {
            provider: name.clone(),
            received_at: chrono::Utc::now(),
            times: 0,
            plan: fresh_plan,
        });
        entry.times += 1;
        entry.plan.clone()
    };
    match plan {
        Plan::Hang { .. } => std::future::pending().await,
        Plan::Error { at, status } => {
            tokio::time::sleep_until(at).await;
            openai_error(status, &format!("simulated {status} from {name}"))
        }
        Plan::Answer { at, content } => {
            tokio::time::sleep_until(at).await;
            Json(completion(&id, &model, &content)).into_response()
        }
    }
}

fn report(id: &str, entry: &Entry) -> Value {
    let now = Instant::now();
    let (status, content, error) = match &entry.plan {
        Plan::Answer { at, content } if now >= *at => ("succeeded", Some(content.clone()), None),
        Plan::Error { at, status } if now >= *at => ("failed", None, Some(format!("simulated {status}"))),
        Plan::Hang { gives_up_at } if now >= *gives_up_at => ("failed", None, Some("gave up".to_owned())),
        _ => ("running", None, None),
    };
    json!({"id": id, "provider": entry.provider, "status": status, "content": content, "error": error,
           "received": entry.times, "received_at": entry.received_at})
}

async fn request_status(State(sim): State<Arc<SimState>>, Path(id): Path<String>) -> Response {
    let log = sim.log.lock().unwrap_or_else(|p| p.into_inner());
    match log.get(&id) {
        Some(entry) => Json(report(&id, entry)).into_response(),
        None => openai_error(404, "no request with that id"),
    }
}

async fn all_requests(State(sim): State<Arc<SimState>>) -> Json<Value> {
    let log = sim.log.lock().unwrap_or_else(|p| p.into_inner());
    let requests: Vec<Value> = log.iter().map(|(id, entry)| report(id, entry)).collect();
    Json(json!({ "requests": requests }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarize_keeps_the_first_max_words_words() {
        let job = json!({"task": "summarize", "input": {"text": "the quick  brown fox", "max_words": 2}});
        assert_eq!(answer_for(&job, &json!([])), json!({"summary": "the quick", "word_count": 2}));
        let all = json!({"input": {"text": "a b c"}});
        assert_eq!(answer_for(&all, &json!([]))["word_count"], 3);
    }

    #[test]
    fn output_modes_break_the_contract_as_named() {
        let output = json!({"summary": "a", "word_count": 1});
        let extra: Value = serde_json::from_str(&render(output.clone(), SimOutput::ExtraTopLevelKey)).unwrap();
        assert!(extra.get("note").is_some());
        assert!(serde_json::from_str::<Value>(&render(output, SimOutput::NotJson)).is_err());
    }
}
