//! The simulator's job APIs: fal's queue (`api = "fal"`, under
//! `/providers/{name}/fal`) and RunPod serverless (`api = "runpod"`, under
//! `/providers/{name}/v2/{endpoint}`). Every submit is a new job under a
//! new id of the simulator's, as on both: a submit sent twice is two jobs,
//! each logged (by its id) with the same plans and faults as any request:
//! latency, errors, hangs, `refuse_first` (429, nothing queued),
//! `reset_after_request` (the answer lost after the job was queued) and
//! `drop_webhooks`. A finished job reports its compute time (fal's
//! `metrics.inference_time`, RunPod's `executionTime`).
//!
//! fal: `POST /{owner}/{alias}[/{path}]` with the input as the body and the
//! webhook in `?fal_webhook=`; `GET …/requests/{id}/status` (202 until
//! done), `GET …/requests/{id}` (the result), `PUT …/requests/{id}/cancel`;
//! webhooks signed with ED25519 by the key `GET /.well-known/jwks.json`
//! publishes. RunPod: `POST /run` (`{"input", "webhook"}`), `GET
//! /status/{id}`, `POST /cancel/{id}`; webhooks unsigned, their body the
//! job's status.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::Digest as _;

use super::connection::Connection;
use super::predictions::{Admitted, admit_prediction, deliver, final_state, picture, settled};
use super::{SimState, receive, reset};
use crate::config::SimFault;
use crate::sync::LockAnyway;

/// The user id fal's webhooks carry.
const FAL_USER: &str = "sim-user";

/// A job as submitted: its output when it succeeds (its plan and arrival
/// are in the simulator's log, by its id).
pub(super) struct Submitted {
    output: Value,
}

fn error(status: u16, detail: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(json!({"detail": detail}))).into_response()
}

/// Whether the request carries a key, as every call to both must.
fn authorized(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()).is_some_and(|v| !v.trim().is_empty())
}

/// A new job id (a UUID, as both use).
fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// A webhook's headers.
type Headers = Vec<(&'static str, String)>;

/// How a surface shapes (and signs) a job's webhook from its final form
/// and its output: the body and its headers.
type Shape = fn(&SimState, &str, &Value, &Value) -> (Value, Headers);

/// A job as submitted: its id, input and output.
struct NewJob<'a> {
    id: &'a str,
    input: &'a Value,
    output: Value,
}

/// Admits `job` for provider `name`, and sends its webhook, shaped by
/// `shape`, when it ends (unless the provider drops them).
fn submit(
    sim: &Arc<SimState>,
    name: &str,
    provider: &crate::config::ProviderSettings,
    job: NewJob<'_>,
    webhook: Option<(String, Shape)>,
) {
    let NewJob { id, input, output } = job;
    let Admitted { plan, arrived, .. } = admit_prediction(sim, name, provider, id, input);
    sim.jobs.lock_anyway().get_or_insert_with(id, || Submitted { output: output.clone() });
    if let Some((webhook, shape)) = webhook.filter(|_| !provider.drop_webhooks) {
        let (sim, id) = (sim.clone(), id.to_owned());
        tokio::spawn(async move {
            let done = settled(&sim, &id, &plan, arrived, output.clone()).await;
            let (body, headers) = shape(&sim, &id, &done, &output);
            deliver(&webhook, &id, &body.to_string(), &headers).await;
        });
    }
}

/// Job `id`'s final form (Cog-shaped: `status`, `metrics.predict_time`,
/// `error`) once it ended, `None` while it runs; `Err` for no such job.
fn ended(sim: &SimState, id: &str) -> Result<(Option<Value>, Value), ()> {
    let output = sim.jobs.lock_anyway().get(id).ok_or(())?.output.clone();
    let (plan, arrived) = {
        let log = sim.log.lock_anyway();
        let entry = log.get(id).ok_or(())?;
        (entry.plan.clone(), entry.arrived)
    };
    Ok((final_state(sim, id, &plan, arrived, &output), output))
}

fn seconds(done: &Value) -> f64 {
    done["metrics"]["predict_time"].as_f64().unwrap_or_default()
}

/// `POST /providers/{name}/fal/{owner}/{alias}`.
pub(super) async fn fal_submit(
    state: State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path((name, owner, alias)): Path<(String, String, String)>,
    query: Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    fal_submit_to(state, connection, name, format!("{owner}/{alias}"), query, headers, body).await
}

/// `POST /providers/{name}/fal/{owner}/{alias}/{path}`.
pub(super) async fn fal_submit_path(
    state: State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path((name, owner, alias, _)): Path<(String, String, String, String)>,
    query: Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    fal_submit_to(state, connection, name, format!("{owner}/{alias}"), query, headers, body).await
}

async fn fal_submit_to(
    State(sim): State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    name: String,
    app: String,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !authorized(&headers) {
        return error(401, "No authorization header");
    }
    let (provider, input) = match receive(&sim, &name, connection.clone(), body, error).await {
        Ok(received) => received,
        Err(answer) => return answer,
    };
    if !input.is_object() {
        return error(422, "the body must be an object of the app's arguments");
    }
    if sim.refuses(&name, provider) {
        let mut refused = error(429, "Too many requests");
        refused.headers_mut().insert("retry-after", 1.into());
        return refused;
    }
    let id = new_id();
    let engine = base64::engine::general_purpose::STANDARD;
    let picture = picture(provider, &input);
    let (content_type, width) = match picture.as_str().and_then(|uri| uri.strip_prefix("data:image/png;base64,")) {
        Some(png) => ("image/png", engine.decode(png).ok().and_then(|b| png_width(&b))),
        None => ("text/plain", None),
    };
    let output = json!({"images": [{"url": picture, "content_type": content_type, "file_name": "image.png",
        "width": width, "height": width}], "seed": 42, "has_nsfw_concepts": [false], "prompt": input.get("prompt")});
    let webhook = query.get("fal_webhook").map(|url| (url.clone(), fal_webhook as Shape));
    submit(&sim, &name, provider, NewJob { id: &id, input: &input, output }, webhook);
    if provider.fault == Some(SimFault::ResetAfterRequest) {
        return reset(connection);
    }
    let base = format!("{}/providers/{name}/fal/{app}/requests/{id}", origin(&headers));
    Json(
        json!({"request_id": id, "gateway_request_id": id, "response_url": base, "status_url": format!("{base}/status"),
        "cancel_url": format!("{base}/cancel"), "queue_position": 0}),
    )
    .into_response()
}

/// The width of a PNG, from its header.
fn png_width(png: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(png.get(16..20)?.try_into().ok()?))
}

/// Where the request came to: its scheme (`X-Forwarded-Proto`, by default
/// `http`) and host, for the URLs an answer gives.
fn origin(headers: &HeaderMap) -> String {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let scheme = header("x-forwarded-proto").filter(|s| *s == "https").unwrap_or("http");
    format!("{scheme}://{}", header("host").unwrap_or("localhost"))
}

/// A fal job's webhook body, and its signature's headers.
fn fal_webhook(sim: &SimState, id: &str, done: &Value, output: &Value) -> (Value, Headers) {
    let body = match done["status"].as_str() {
        Some("succeeded") => json!({"request_id": id, "gateway_request_id": id, "status": "OK", "payload": output}),
        _ => json!({"request_id": id, "gateway_request_id": id, "status": "ERROR",
            "error": done["error"].as_str().unwrap_or("canceled"), "payload": {"detail": done["error"]}}),
    };
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let digest = hex::encode(sha2::Sha256::digest(body.to_string().as_bytes()));
    let message = format!("{id}\n{FAL_USER}\n{timestamp}\n{digest}");
    let signature = hex::encode(sim.fal_key.sign(message.as_bytes()).as_ref());
    let headers = vec![
        ("x-fal-webhook-request-id", id.to_owned()),
        ("x-fal-webhook-user-id", FAL_USER.to_owned()),
        ("x-fal-webhook-timestamp", timestamp),
        ("x-fal-webhook-signature", signature),
    ];
    (body, headers)
}

/// fal job `id` as [`ended`] tells it, for a request with a key; the
/// status and detail of the error answering one without, or for no such
/// job, otherwise.
fn fal_job(sim: &SimState, headers: &HeaderMap, id: &str) -> Result<(Option<Value>, Value), (u16, &'static str)> {
    if !authorized(headers) {
        return Err((401, "No authorization header"));
    }
    ended(sim, id).map_err(|()| (404, "Request not found"))
}

/// `GET /providers/{name}/fal/{owner}/{alias}/requests/{id}/status`: 202
/// until done.
pub(super) async fn fal_status(
    State(sim): State<Arc<SimState>>,
    Path((_, _, _, id)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    match fal_job(&sim, &headers, &id) {
        Err((status, detail)) => error(status, detail),
        Ok((None, _)) => (StatusCode::ACCEPTED, Json(json!({"status": "IN_PROGRESS", "request_id": id, "logs": null})))
            .into_response(),
        Ok((Some(done), _)) => {
            let error =
                (done["status"] != "succeeded").then(|| done["error"].as_str().unwrap_or("canceled").to_owned());
            Json(json!({"status": "COMPLETED", "request_id": id, "logs": null,
                "metrics": {"inference_time": seconds(&done)}, "error": error}))
            .into_response()
        }
    }
}

/// `GET /providers/{name}/fal/{owner}/{alias}/requests/{id}`: the result.
pub(super) async fn fal_result(
    State(sim): State<Arc<SimState>>,
    Path((_, _, _, id)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    match fal_job(&sim, &headers, &id) {
        Err((status, detail)) => error(status, detail),
        Ok((None, _)) => error(400, "Request is still in progress"),
        Ok((Some(done), output)) if done["status"] == "succeeded" => Json(output).into_response(),
        Ok((Some(done), _)) => error(422, done["error"].as_str().unwrap_or("the request was canceled")),
    }
}

/// `PUT /providers/{name}/fal/{owner}/{alias}/requests/{id}/cancel`.
pub(super) async fn fal_cancel(
    State(sim): State<Arc<SimState>>,
    Path((_, _, _, id)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    match fal_job(&sim, &headers, &id) {
        Err((status, detail)) => error(status, detail),
        Ok((Some(_), _)) => (StatusCode::BAD_REQUEST, Json(json!({"status": "ALREADY_COMPLETED"}))).into_response(),
        Ok((None, _)) => {
            sim.cancel(&id);
            (StatusCode::ACCEPTED, Json(json!({"status": "CANCELLATION_REQUESTED"}))).into_response()
        }
    }
}

/// `GET /providers/{name}/fal/.well-known/jwks.json`: the key fal's
/// webhooks are signed by.
pub(super) async fn fal_keys(State(sim): State<Arc<SimState>>) -> Response {
    use ring::signature::KeyPair as _;
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sim.fal_key.public_key().as_ref());
    Json(json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "sim", "alg": "EdDSA", "use": "sig"}]}))
        .into_response()
}

/// `POST /providers/{name}/v2/{endpoint}/run`.
pub(super) async fn runpod_run(
    State(sim): State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path((name, _)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !authorized(&headers) {
        return error(401, "Unauthorized");
    }
    let (provider, body) = match receive(&sim, &name, connection.clone(), body, error).await {
        Ok(received) => received,
        Err(answer) => return answer,
    };
    let Some(input) = body.get("input").filter(|input| input.is_object()).cloned() else {
        return error(400, "input is required and must be an object");
    };
    if sim.refuses(&name, provider) {
        let mut refused = error(429, "Too many requests");
        refused.headers_mut().insert("retry-after", 1.into());
        return refused;
    }
    let id = new_id();
    let output = json!({"images": [picture(provider, &input)], "seed": 42});
    let webhook = body.get("webhook").and_then(Value::as_str).map(|url| (url.to_owned(), runpod_webhook as Shape));
    submit(&sim, &name, provider, NewJob { id: &id, input: &input, output }, webhook);
    if provider.fault == Some(SimFault::ResetAfterRequest) {
        return reset(connection);
    }
    Json(json!({"id": id, "status": "IN_QUEUE"})).into_response()
}

/// A RunPod job's status as `done` (or running, without it) says.
fn runpod_status(id: &str, done: Option<&Value>, output: &Value) -> Value {
    let Some(done) = done else { return json!({"id": id, "status": "IN_PROGRESS", "delayTime": 12}) };
    let execution = (seconds(done) * 1000.0).round() as u64;
    match done["status"].as_str() {
        Some("succeeded") => {
            json!({"id": id, "status": "COMPLETED", "delayTime": 12, "executionTime": execution, "output": output})
        }
        Some("canceled") => json!({"id": id, "status": "CANCELLED", "delayTime": 12, "executionTime": execution}),
        _ => json!({"id": id, "status": "FAILED", "delayTime": 12, "executionTime": execution, "error": done["error"]}),
    }
}

/// A RunPod job's webhook body: its status, unsigned.
fn runpod_webhook(_: &SimState, id: &str, done: &Value, output: &Value) -> (Value, Headers) {
    (runpod_status(id, Some(done), output), Vec::new())
}

/// `GET /providers/{name}/v2/{endpoint}/status/{id}`.
pub(super) async fn runpod_get(
    State(sim): State<Arc<SimState>>,
    Path((_, _, id)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    runpod_answer(&sim, &id, &headers, false)
}

/// `POST /providers/{name}/v2/{endpoint}/cancel/{id}`.
pub(super) async fn runpod_cancel(
    State(sim): State<Arc<SimState>>,
    Path((_, _, id)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    runpod_answer(&sim, &id, &headers, true)
}

/// RunPod job `id`'s status, after a cancel if `cancel`.
fn runpod_answer(sim: &SimState, id: &str, headers: &HeaderMap, cancel: bool) -> Response {
    if !authorized(headers) {
        return error(401, "Unauthorized");
    }
    if cancel && ended(sim, id).is_ok() {
        sim.cancel(id);
    }
    match ended(sim, id) {
        Err(()) => error(404, "job not found"),
        Ok((done, output)) => Json(runpod_status(id, done.as_ref(), &output)).into_response(),
    }
}
