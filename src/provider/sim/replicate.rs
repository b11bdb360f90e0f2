//! The simulator's Replicate API (`api = "replicate"`), under
//! `/providers/{name}/v1`: `POST /predictions` (with a `version`),
//! `/models/{owner}/{model}/predictions` and
//! `/deployments/{owner}/{model}/predictions` create a prediction under a
//! new id of the simulator's, answered at once (201 `starting`), or, with
//! `Prefer: wait`, when done or when the wait is over; `GET
//! /predictions/{id}`, `GET /predictions` (the latest first),
//! `POST /predictions/{id}/cancel`, and `GET /webhooks/default/secret`,
//! the secret the final webhook is signed with (Standard Webhooks, as
//! Replicate signs). Every create is a new prediction, as on Replicate: a
//! create sent twice is two predictions, each logged (by its id) with the
//! same plans and faults as any request: latency, errors, hangs,
//! `refuse_first` (429, nothing created), `reset_after_request` (the
//! answer lost after the prediction was created), and `drop_webhooks`.
//! Each prediction reports its `predict_time`, which Replicate bills by.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::connection::Connection;
use super::predictions::{Admitted, admit_prediction, final_state, picture, send_webhook, settled};
use super::{SimState, receive, reset};
use crate::config::SimFault;
use crate::sync::LockAnyway;

/// The longest `Prefer: wait` holds a create, as on Replicate.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// A prediction as created: what never changes, and its output when it
/// succeeds (its plan and arrival are in the simulator's log, by its id).
pub(super) struct Created {
    /// The prediction object's fields that never change (`id`, `model`,
    /// `version`, `input`, `created_at`, `urls`).
    fields: Value,
    output: Value,
}

/// An error as Replicate answers one.
fn replicate_error(status: u16, detail: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(json!({"title": code.canonical_reason().unwrap_or("Error"), "detail": detail, "status": status})))
        .into_response()
}

/// Whether the request carries an API token, as every call to Replicate must.
fn authorized(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()).is_some_and(|v| v.split_once(' ').is_some())
}

/// `POST /providers/{name}/v1/predictions` (a version's).
pub(super) async fn create_version(
    State(sim): State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    create(sim, connection, name, None, headers, body).await
}

/// `POST /providers/{name}/v1/models/{owner}/{model}/predictions` and the
/// deployments' path of the same shape.
pub(super) async fn create_named(
    State(sim): State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path((name, owner, model)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    create(sim, connection, name, Some(format!("{owner}/{model}")), headers, body).await
}

async fn create(
    sim: Arc<SimState>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    name: String,
    model: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !authorized(&headers) {
        return replicate_error(401, "You did not pass an authentication token");
    }
    let (provider, body) = match receive(&sim, &name, connection.clone(), body, replicate_error).await {
        Ok(received) => received,
        Err(answer) => return answer,
    };
    let Some(input) = body.get("input").filter(|input| input.is_object()).cloned() else {
        return replicate_error(422, "input is required and must be an object");
    };
    let version = body.get("version").and_then(Value::as_str);
    if model.is_none() && version.is_none() {
        return replicate_error(422, "version is required");
    }
    if sim.refuses(&name, provider) {
        let mut refused = replicate_error(429, "Request was throttled. Expected available in 1 second.");
        refused.headers_mut().insert("retry-after", 1.into());
        return refused;
    }
    let id = new_id();
    let Admitted { plan, arrived, .. } = admit_prediction(&sim, &name, provider, &id, &input);
    let base = format!("/providers/{name}/v1/predictions/{id}");
    let fields = json!({"id": id, "model": model.as_deref().unwrap_or("sim/versioned"), "version": version.unwrap_or("sim"),
        "input": input, "created_at": chrono::Utc::now(), "data_removed": false,
        "urls": {"get": base, "cancel": format!("{base}/cancel"), "web": format!("https://replicate.com/p/{id}")}});
    // A list of files, as most of Replicate's image models answer.
    let created = Created { fields, output: json!([picture(provider, &input)]) };
    let output = created.output.clone();
    let fields = created.fields.clone();
    sim.predictions.lock_anyway().get_or_insert_with(&id, || created);
    let webhook = body.get("webhook").and_then(Value::as_str).filter(|_| !provider.drop_webhooks);
    if let Some(webhook) = webhook {
        let (sim, id, plan, output, webhook) =
            (sim.clone(), id.clone(), plan.clone(), output.clone(), webhook.to_owned());
        tokio::spawn(async move {
            let done = settled(&sim, &id, &plan, arrived, output).await;
            let done = merged(&sim, &id, done);
            send_webhook(&webhook, &id, &done, Some(&sim.signing_secret)).await;
        });
    }
    if let Some(wait) = waits(&headers) {
        let ended = tokio::time::timeout(wait, settled(&sim, &id, &plan, arrived, output)).await;
        if let Ok(done) = ended {
            return (StatusCode::CREATED, Json(merged(&sim, &id, done))).into_response();
        }
    }
    if provider.fault == Some(SimFault::ResetAfterRequest) {
        return reset(connection);
    }
    let mut starting = fields;
    starting["status"] = json!("starting");
    (StatusCode::CREATED, Json(starting)).into_response()
}

/// How long `Prefer: wait` (or `wait=N`) asks the create to be held.
fn waits(headers: &HeaderMap) -> Option<Duration> {
    let prefer = headers.get_all("prefer").iter().filter_map(|v| v.to_str().ok()).find(|v| v.starts_with("wait"))?;
    let seconds = prefer.strip_prefix("wait=").and_then(|n| n.trim().parse::<u64>().ok());
    Some(seconds.map_or(LONGEST_WAIT, |n| Duration::from_secs(n).min(LONGEST_WAIT)))
}

/// A new prediction id, of the characters Replicate's use.
fn new_id() -> String {
    let mut bytes = [0u8; 13];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    hex::encode(bytes)
}

/// The whole prediction object: the created fields with what `state` (a
/// final form, or `None` while it runs) says.
fn merged(sim: &SimState, id: &str, state: Value) -> Value {
    let predictions = sim.predictions.lock_anyway();
    let mut whole = predictions.get(id).map_or_else(|| json!({"id": id}), |created| created.fields.clone());
    if let (Value::Object(whole), Value::Object(state)) = (&mut whole, state) {
        whole.extend(state);
        if whole.get("status").and_then(Value::as_str).is_some_and(|status| status != "processing") {
            whole.insert("completed_at".into(), json!(chrono::Utc::now()));
        }
    }
    whole
}

/// Prediction `id` as it is now.
fn current(sim: &SimState, id: &str) -> Option<Value> {
    let output = sim.predictions.lock_anyway().get(id)?.output.clone();
    let (plan, arrived) = {
        let log = sim.log.lock_anyway();
        let entry = log.get(id)?;
        (entry.plan.clone(), entry.arrived)
    };
    let state = final_state(sim, id, &plan, arrived, &output)
        .unwrap_or_else(|| json!({"status": "processing", "output": null, "error": null, "logs": ""}));
    Some(merged(sim, id, state))
}

/// `GET /providers/{name}/v1/predictions/{id}`.
pub(super) async fn get(
    State(sim): State<Arc<SimState>>,
    Path((_, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return replicate_error(401, "You did not pass an authentication token");
    }
    answer(&sim, &id)
}

/// Prediction `id` as it is now, or 404.
fn answer(sim: &SimState, id: &str) -> Response {
    match current(sim, id) {
        Some(prediction) => Json(prediction).into_response(),
        None => replicate_error(404, "Not found."),
    }
}

/// `GET /providers/{name}/v1/predictions`: the provider's predictions, the
/// latest first, in one page.
pub(super) async fn list(State(sim): State<Arc<SimState>>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return replicate_error(401, "You did not pass an authentication token");
    }
    let mut ids: Vec<(Instant, String)> = {
        let log = sim.log.lock_anyway();
        let predictions = sim.predictions.lock_anyway();
        predictions
            .iter()
            .filter_map(|(id, _)| log.get(id).filter(|e| e.provider == name).map(|e| (e.arrived, id.clone())))
            .collect()
    };
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let results: Vec<Value> = ids.iter().filter_map(|(_, id)| current(&sim, id)).collect();
    Json(json!({"next": null, "previous": null, "results": results})).into_response()
}

/// `POST /providers/{name}/v1/predictions/{id}/cancel`.
pub(super) async fn cancel(
    State(sim): State<Arc<SimState>>,
    Path((_, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return replicate_error(401, "You did not pass an authentication token");
    }
    if sim.predictions.lock_anyway().get(&id).is_some() {
        sim.cancel(&id);
    }
    answer(&sim, &id)
}

/// `GET /providers/{name}/v1/webhooks/default/secret`.
pub(super) async fn secret(State(sim): State<Arc<SimState>>, headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return replicate_error(401, "You did not pass an authentication token");
    }
    Json(json!({"key": sim.signing_secret})).into_response()
}
