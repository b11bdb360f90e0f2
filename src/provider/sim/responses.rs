//! The simulator's Responses API: `POST /providers/{name}/v1/responses`
//! (in the background, or answered when done), `GET …/responses/{id}` and
//! `POST …/responses/{id}/cancel`, shaped as OpenAI's reference shows them
//! (see `crate::provider::responses`). A request is planned and logged as a
//! chat completion is (by its client request id, with the same latency,
//! hang, late answer, errors, faults and output modes); a background
//! response's status at any moment follows from its plan.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::connection::Connection;
use super::response_object::shape;
use super::{Arrival, Plan, SimState, Unanswered, admit, misbehave, openai_error, receive, request_id, strict_schema};
use crate::config::ProviderSettings;
use crate::sync::LockAnyway;

/// The chat messages a response's `instructions` and `input` amount to.
fn messages_of(body: &Value) -> Option<Vec<Value>> {
    let mut messages = Vec::new();
    if let Some(instructions) = body["instructions"].as_str() {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    match &body["input"] {
        Value::String(text) => messages.push(json!({"role": "user", "content": text})),
        Value::Array(items) => {
            for item in items {
                // Content as text, or as parts of which the text ones count.
                let content = match &item["content"] {
                    Value::String(text) => text.clone(),
                    Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
                    _ => return None,
                };
                messages.push(json!({"role": item["role"].as_str().unwrap_or("user"), "content": content}));
            }
        }
        _ => return None,
    }
    Some(messages)
}

fn not_found(id: &str) -> Response {
    openai_error(404, &format!("Response with id '{id}' not found."))
}

/// `POST /providers/{name}/v1/responses`.
pub(super) async fn create(
    State(sim): State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (provider, body) = match receive(&sim, &name, connection.clone(), body, openai_error).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let (messages, strict) = match response_request(&body) {
        Ok(request) => request,
        Err(message) => return openai_error(400, &message),
    };
    let background = body["background"] == true;
    let id = request_id(&headers);
    let model = body["model"].as_str().unwrap_or(&provider.model).to_owned();
    let fresh = format!("resp_{}", uuid::Uuid::now_v7().simple());
    let job = &body["onejob_input"];
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let arrival = Arrival {
        name: &name,
        provider,
        id: &id,
        job,
        messages: &messages,
        strict,
        asked_json: body["text"]["format"]["type"] == "json_schema",
        response_id: Some(fresh),
        traceparent,
    };
    let (plan, response_id) = admit(&sim, arrival);
    let response_id = response_id.expect("a response is logged with its id");
    *sim.responses.lock_anyway().get_or_insert_with(&response_id, String::new) = id.clone();
    if let Some(fault) = provider.fault {
        return misbehave(fault, connection, &id, &model).await;
    }
    match plan {
        Plan::Error { at, status } => error_answer(at, status, background, &name, provider.retry_after).await,
        Plan::Answer { .. } | Plan::Hang { .. } if body["stream"] == true => {
            stream_response(&sim, &id, &response_id, provider, &model)
        }
        _ if background => object(&sim, &response_id, &model, true),
        plan => answer_when_done(&sim, plan, &id, &response_id, &model).await,
    }
}

/// The chat messages of a response request and whether it asks for a
/// strict JSON schema, or why it is refused (400).
fn response_request(body: &Value) -> Result<(Vec<Value>, bool), String> {
    if !body["model"].is_string() {
        return Err("Missing required parameter: 'model'.".into());
    }
    let Some(messages) = messages_of(body) else {
        return Err("Invalid type for 'input': expected a string or an array of input items.".into());
    };
    let background = body["background"] == true;
    if background && body["store"] == false {
        return Err("Background mode requires the response to be stored: set store to true.".into());
    }
    let format = &body["text"]["format"];
    let strict = strict_schema(format, &format["name"], &format["schema"])?;
    Ok((messages, strict))
}

/// The simulated error `status` of provider `name`: refused before any
/// work, it is answered at once in the background, at `at` otherwise.
async fn error_answer(
    at: Instant,
    status: u16,
    background: bool,
    name: &str,
    retry_after: Option<Duration>,
) -> Response {
    if !background {
        tokio::time::sleep_until(at).await;
    }
    let mut response = openai_error(status, &format!("simulated {status} from {name}"));
    if let Some(wait) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, wait.as_secs().into());
    }
    response
}

/// Streams the events of response `response_id` (request `id`).
fn stream_response(sim: &SimState, id: &str, response_id: &str, provider: &ProviderSettings, model: &str) -> Response {
    let streamed = {
        let mut log = sim.log.lock_anyway();
        let Some(entry) = log.get_mut(id) else { return not_found(response_id) };
        if let Plan::Answer { at, content, .. } = &mut entry.plan {
            // Its work lasts as long as its stream.
            *at = (*at).max(super::stream::ends_at(provider, entry.first_token_after, content, entry.arrived));
        }
        super::response_stream::events(response_id, entry, provider, model)
    };
    super::response_stream::send(provider, streamed, None, true)
}

/// Answers with the response object when it is done; a client that gives
/// up first is logged.
async fn answer_when_done(sim: &Arc<SimState>, plan: Plan, id: &str, response_id: &str, model: &str) -> Response {
    let mut unanswered = Unanswered { sim: sim.clone(), id: id.to_owned(), armed: true };
    match plan {
        Plan::Answer { at, .. } => tokio::time::sleep_until(at).await,
        _ => std::future::pending().await,
    }
    unanswered.armed = false;
    object(sim, response_id, model, false)
}

/// What `GET …/responses/{id}` is asked for.
#[derive(serde::Deserialize)]
pub(super) struct Retrieve {
    /// Its events, from the start or after `starting_after`.
    #[serde(default)]
    stream: bool,
    starting_after: Option<u64>,
}

/// `GET /providers/{name}/v1/responses/{id}`: the response object, or
/// (`?stream=true`) its events again, after `starting_after`.
pub(super) async fn retrieve(
    State(sim): State<Arc<SimState>>,
    Path((name, id)): Path<(String, String)>,
    Query(asked): Query<Retrieve>,
) -> Response {
    let Some(provider) = sim.providers.get(&name) else { return not_found(&id) };
    if !asked.stream {
        return object(&sim, &id, &provider.model, false);
    }
    let Some(request) = sim.responses.lock_anyway().get(&id).cloned() else {
        return not_found(&id);
    };
    let events = {
        let mut log = sim.log.lock_anyway();
        let Some(entry) = log.get_mut(&request) else { return not_found(&id) };
        entry.resumed += 1;
        super::response_stream::events(&id, entry, provider, &provider.model)
    };
    super::response_stream::send(provider, events, asked.starting_after, false)
}

/// `POST /providers/{name}/v1/responses/{id}/cancel`: stops a response that
/// has not finished; answers with the response either way.
pub(super) async fn cancel(State(sim): State<Arc<SimState>>, Path((name, id)): Path<(String, String)>) -> Response {
    let Some(request) = sim.responses.lock_anyway().get(&id).cloned() else {
        return not_found(&id);
    };
    {
        let now = Instant::now();
        let mut log = sim.log.lock_anyway();
        if let Some(entry) = log.get_mut(&request)
            && entry.working_at(now)
        {
            entry.canceled_after = Some(now.saturating_duration_since(entry.arrived));
        }
    }
    let model = sim.providers.get(&name).map(|p| p.model.clone()).unwrap_or_default();
    object(&sim, &id, &model, false)
}

/// Response `id` as it stands now, or 404.
fn object(sim: &SimState, id: &str, model: &str, just_created: bool) -> Response {
    let Some(request) = sim.responses.lock_anyway().get(id).cloned() else {
        return not_found(id);
    };
    let log = sim.log.lock_anyway();
    match log.get(&request) {
        Some(entry) => Json(shape(id, entry, model, Instant::now(), just_created)).into_response(),
        None => not_found(id),
    }
}
