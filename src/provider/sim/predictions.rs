//! The simulator's Cog predictions (`api = "predictions"`): `PUT
//! /providers/{name}/predictions/{id}`, answered at once with `Prefer:
//! respond-async` (the outcome then goes to the request's `webhook`), or
//! when done without it; `POST …/predictions/{id}/cancel`; `GET
//! …/health-check`. A prediction is planned and logged as any request is,
//! by its id: latency, errors (a failed prediction), hangs, `refuse_first`
//! (409 "At capacity", nothing started), `reset_after_request` (the answer
//! lost after the prediction started). The same PUT while it runs starts
//! nothing; after it finished, it runs again, as a Cog server does (the
//! log counts it). A succeeded prediction's output is a PNG the prompt
//! picks, inline as a `data:` URI (output modes other than `valid`: a text
//! file instead), with its `predict_time`.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::connection::Connection;
use super::{Arrival, Plan, SimState, admit, image, receive, reset};
use crate::config::{ProviderSettings, SimFault, SimOutput};
use crate::sync::LockAnyway;

/// How often a prediction is looked at while it runs (for a cancel).
const TICK: Duration = Duration::from_millis(20);

/// How many times a webhook is sent before it is given up, the first wait
/// between two, doubled each time.
const WEBHOOK_TRIES: u32 = 6;
const WEBHOOK_FIRST_WAIT: Duration = Duration::from_millis(100);

/// The client that sends the predictions' webhooks.
static WEBHOOKS: LazyLock<reqwest::Client> =
    LazyLock::new(|| reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("an HTTP client"));

/// An error as a Cog server answers one.
fn cog_error(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(json!({"error": message, "status": "failed"}))).into_response()
}

/// `PUT /providers/{name}/predictions/{id}`.
pub(super) async fn put(
    State(sim): State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (provider, body) = match receive(&sim, &name, connection.clone(), body, cog_error).await {
        Ok(received) => received,
        Err(answer) => return answer,
    };
    if !id.starts_with("qualification-") && sim.refuses(&name, provider) {
        return cog_error(409, "At capacity - all prediction slots busy");
    }
    let input = body.get("input").cloned().unwrap_or(Value::Null);
    let Admitted { plan, arrived, times, working } = admit_prediction(&sim, &name, provider, &id, &input);
    let output = picture(provider, &input);
    let webhook = body.get("webhook").and_then(Value::as_str).filter(|_| asks_async(&headers));
    let Some(webhook) = webhook else {
        let done = settled(&sim, &id, &plan, arrived, output).await;
        return Json(done).into_response();
    };
    // Running already: the same PUT starts nothing.
    if times == 1 || !working {
        tokio::spawn(follow(sim.clone(), id.clone(), plan, arrived, output, webhook.to_owned()));
    }
    if provider.fault == Some(SimFault::ResetAfterRequest) {
        return reset(connection);
    }
    let status = if times == 1 || !working { "starting" } else { "processing" };
    (StatusCode::ACCEPTED, Json(json!({"id": id, "status": status}))).into_response()
}

/// A prediction as the simulator's log has it once admitted.
pub(super) struct Admitted {
    pub(super) plan: Plan,
    pub(super) arrived: Instant,
    /// How many times its id was sent.
    pub(super) times: u32,
    /// Whether it is still being worked on.
    pub(super) working: bool,
}

/// Logs prediction `id` of `input` and plans it as any request (a
/// repeated id keeps its first plan).
pub(super) fn admit_prediction(
    sim: &SimState,
    name: &str,
    provider: &ProviderSettings,
    id: &str,
    input: &Value,
) -> Admitted {
    let job = json!({"task": "", "input": input, "output": "json"});
    let arrival = Arrival {
        name,
        provider,
        id,
        job: &job,
        messages: &[],
        strict: false,
        asked_json: false,
        response_id: None,
        traceparent: None,
    };
    let (plan, _) = admit(sim, arrival);
    let log = sim.log.lock_anyway();
    let entry = log.get(id).expect("admitted just now");
    Admitted { plan, arrived: entry.arrived, times: entry.times, working: entry.working_at(Instant::now()) }
}

/// Whether the request asks to be answered at once (`Prefer: respond-async`).
fn asks_async(headers: &HeaderMap) -> bool {
    headers.get_all("prefer").iter().filter_map(|v| v.to_str().ok()).any(|v| v.contains("respond-async"))
}

/// The output of a succeeded prediction of `input`: a PNG (`size` or
/// `width` pixels a side, 8 to 512, 64 by default) for output `valid`, a
/// text file otherwise.
pub(super) fn picture(provider: &ProviderSettings, input: &Value) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    if provider.output != SimOutput::Valid {
        return json!(format!("data:text/plain;base64,{}", engine.encode("not an image")));
    }
    let side = input.get("size").or_else(|| input.get("width")).and_then(Value::as_u64).unwrap_or(64).clamp(8, 512);
    let seed = input.get("prompt").and_then(Value::as_str).map_or_else(|| input.to_string(), str::to_owned);
    let png = image::draw(seed.as_bytes(), u32::try_from(side).expect("clamped"));
    json!(format!("data:image/png;base64,{}", engine.encode(png)))
}

/// The prediction `id` once it is done (or canceled): its final form.
pub(super) async fn settled(sim: &SimState, id: &str, plan: &Plan, arrived: Instant, output: Value) -> Value {
    loop {
        if let Some(done) = final_state(sim, id, plan, arrived, &output) {
            return done;
        }
        tokio::time::sleep(TICK).await;
    }
}

/// The prediction's final form, when it is done or canceled by now.
pub(super) fn final_state(sim: &SimState, id: &str, plan: &Plan, arrived: Instant, output: &Value) -> Option<Value> {
    let now = Instant::now();
    let seconds = |at: Instant| at.saturating_duration_since(arrived).as_secs_f64();
    let canceled = sim.log.lock_anyway().get(id).and_then(|entry| entry.canceled_after);
    let metrics = |at: Instant| json!({"predict_time": seconds(at)});
    if let Some(after) = canceled {
        return Some(json!({"id": id, "status": "canceled", "logs": "", "metrics": metrics(arrived + after)}));
    }
    match plan {
        Plan::Answer { at, .. } if now >= *at => {
            Some(json!({"id": id, "status": "succeeded", "output": output, "logs": "", "metrics": metrics(*at)}))
        }
        Plan::Error { at, status } if now >= *at => Some(json!({"id": id, "status": "failed",
            "error": format!("simulated {status}"), "logs": "", "metrics": metrics(*at)})),
        Plan::Hang { gives_up_at } if now >= *gives_up_at => Some(
            json!({"id": id, "status": "failed", "error": "gave up", "logs": "", "metrics": metrics(*gives_up_at)}),
        ),
        _ => None,
    }
}

/// Waits for the prediction's end and sends it to `webhook`.
async fn follow(sim: Arc<SimState>, id: String, plan: Plan, arrived: Instant, output: Value, webhook: String) {
    let done = settled(&sim, &id, &plan, arrived, output).await;
    send_webhook(&webhook, &id, &done, None).await;
}

/// Sends prediction `id`'s final form `done` to `webhook`, signed the
/// Standard Webhooks way with `secret` if given (as Replicate signs).
pub(super) async fn send_webhook(webhook: &str, id: &str, done: &Value, secret: Option<&str>) {
    let body = done.to_string();
    let mut headers = Vec::new();
    if let Some(secret) = secret {
        // One message, one id, however many times it is sent.
        let message = format!("msg_{id}");
        let timestamp = chrono::Utc::now().timestamp();
        let signed = crate::domain::webhook::signature(&[secret], &message, timestamp, body.as_bytes());
        headers.push(("webhook-id", message));
        headers.push(("webhook-timestamp", timestamp.to_string()));
        headers.push(("webhook-signature", signed));
    }
    deliver(webhook, id, &body, &headers).await;
}

/// Posts `body` with `headers` to `webhook` (of job or prediction `id`),
/// tried again with doubling waits while it is not answered 2xx.
pub(super) async fn deliver(webhook: &str, id: &str, body: &str, headers: &[(&'static str, String)]) {
    let mut wait = WEBHOOK_FIRST_WAIT;
    for _ in 0..WEBHOOK_TRIES {
        let mut post = WEBHOOKS.post(webhook).header("content-type", "application/json").body(body.to_owned());
        for (name, value) in headers {
            post = post.header(*name, value);
        }
        match post.send().await {
            Ok(answer) if answer.status().is_success() => return,
            Ok(answer) => tracing::debug!(status = answer.status().as_u16(), prediction = %id, "a webhook was refused"),
            Err(error) => tracing::debug!(%error, prediction = %id, "a webhook was not answered"),
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
    tracing::debug!(prediction = %id, "the prediction's webhook was given up");
}

/// `POST /providers/{name}/predictions/{id}/cancel`.
pub(super) async fn cancel(State(sim): State<Arc<SimState>>, Path((_, id)): Path<(String, String)>) -> Response {
    match sim.cancel(&id) {
        Some(_) => Json(json!({})).into_response(),
        None => cog_error(404, "Prediction not found"),
    }
}

/// `GET /providers/{name}/health-check`: `BUSY` while a prediction of the
/// provider runs, `READY` otherwise.
pub(super) async fn health(State(sim): State<Arc<SimState>>, Path(name): Path<String>) -> Response {
    let now = Instant::now();
    let busy = sim.log.lock_anyway().iter().any(|(_, entry)| entry.provider == name && entry.working_at(now));
    Json(json!({"status": if busy { "BUSY" } else { "READY" }})).into_response()
}
