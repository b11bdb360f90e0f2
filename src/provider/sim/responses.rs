//! The simulator's Responses API: `POST /providers/{name}/v1/responses`
//! (in the background, or answered when done), `GET …/responses/{id}` and
//! `POST …/responses/{id}/cancel`, shaped as OpenAI's reference shows them
//! (see `crate::provider::responses`). A request is planned and logged as a
//! chat completion is (by its client request id, with the same latency,
//! hang, late answer, errors, faults and output modes); a background
//! response's status at any moment follows from its plan.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::connection::Connection;
use super::{
    Arrival, Ending, Entry, Plan, REFUSAL, SimState, Unanswered, admit, misbehave, openai_error, receive, request_id,
    strict_schema,
};

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
    let (provider, body) = match receive(&sim, &name, connection.clone(), body).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    if !body["model"].is_string() {
        return openai_error(400, "Missing required parameter: 'model'.");
    }
    let Some(messages) = messages_of(&body) else {
        return openai_error(400, "Invalid type for 'input': expected a string or an array of input items.");
    };
    let background = body["background"] == true;
    if background && body["store"] == false {
        return openai_error(400, "Background mode requires the response to be stored: set store to true.");
    }
    let format = &body["text"]["format"];
    let strict = match strict_schema(format, &format["name"], &format["schema"]) {
        Ok(strict) => strict,
        Err(message) => return openai_error(400, &message),
    };
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
        response_id: Some(fresh),
        traceparent,
    };
    let (plan, response_id) = admit(&sim, arrival);
    let response_id = response_id.expect("a response is logged with its id");
    *sim.responses.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(&response_id, String::new) = id.clone();
    if let Some(fault) = provider.fault {
        return misbehave(fault, connection, &id, &model).await;
    }
    match plan {
        // Refused before any work: answered at once in the background,
        // after the latency otherwise.
        Plan::Error { at, status } => {
            if !background {
                tokio::time::sleep_until(at).await;
            }
            let mut response = openai_error(status, &format!("simulated {status} from {name}"));
            if let Some(seconds) = provider.retry_after_secs {
                response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
            }
            response
        }
        _ if background => object(&sim, &response_id, &model, true),
        plan => {
            // Answered when done; a client that gives up first is logged.
            let mut unanswered = Unanswered { sim: sim.clone(), id: id.clone(), armed: true };
            match plan {
                Plan::Answer { at, .. } => tokio::time::sleep_until(at).await,
                _ => std::future::pending().await,
            }
            unanswered.armed = false;
            object(&sim, &response_id, &model, false)
        }
    }
}

/// `GET /providers/{name}/v1/responses/{id}`.
pub(super) async fn retrieve(State(sim): State<Arc<SimState>>, Path((name, id)): Path<(String, String)>) -> Response {
    let model = sim.providers.get(&name).map(|p| p.model.clone()).unwrap_or_default();
    object(&sim, &id, &model, false)
}

/// `POST /providers/{name}/v1/responses/{id}/cancel`: stops a response that
/// has not finished; answers with the response either way.
pub(super) async fn cancel(State(sim): State<Arc<SimState>>, Path((name, id)): Path<(String, String)>) -> Response {
    let Some(request) = sim.responses.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned() else {
        return not_found(&id);
    };
    {
        let now = Instant::now();
        let mut log = sim.log.lock().unwrap_or_else(|p| p.into_inner());
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
    let Some(request) = sim.responses.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned() else {
        return not_found(id);
    };
    let log = sim.log.lock().unwrap_or_else(|p| p.into_inner());
    match log.get(&request) {
        Some(entry) => Json(shape(id, entry, model, just_created)).into_response(),
        None => not_found(id),
    }
}

fn usage_json((input, output): (usize, usize)) -> Value {
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
           "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
           "total_tokens": input + output})
}

fn message(id: &str, status: &str, part: Value) -> Value {
    json!({"type": "message", "id": format!("msg_{}", id.trim_start_matches("resp_")), "status": status,
           "role": "assistant", "content": [part]})
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The response object of `entry` at this moment.
fn shape(id: &str, entry: &Entry, model: &str, just_created: bool) -> Value {
    let now = Instant::now();
    let none = Value::Null;
    let (status, output, usage, error, incomplete) = match &entry.plan {
        _ if let Some(after) = entry.canceled_after => (
            "cancelled",
            json!([]),
            entry.usage_by(entry.arrived + after).map_or(none.clone(), usage_json),
            none.clone(),
            none.clone(),
        ),
        Plan::Answer { at, content, usage, ending } if now >= *at => match ending {
            Ending::Complete => (
                "completed",
                json!([message(id, "completed", text_part(content))]),
                usage_json(*usage),
                none.clone(),
                none.clone(),
            ),
            Ending::Refusal => {
                let part = json!({"type": "refusal", "refusal": REFUSAL});
                ("completed", json!([message(id, "completed", part)]), usage_json(*usage), none.clone(), none.clone())
            }
            Ending::Truncated => (
                "incomplete",
                json!([message(id, "incomplete", text_part(content))]),
                usage_json(*usage),
                none.clone(),
                json!({"reason": "max_output_tokens"}),
            ),
        },
        Plan::Error { at, status } if now >= *at => {
            let error = json!({"code": "server_error", "message": format!("simulated {status}")});
            ("failed", json!([]), none.clone(), error, none.clone())
        }
        Plan::Hang { gives_up_at } if now >= *gives_up_at => {
            let error = json!({"code": "server_error", "message": "The model stopped working on this response."});
            ("failed", json!([]), none.clone(), error, none.clone())
        }
        _ if just_created => ("queued", json!([]), none.clone(), none.clone(), none.clone()),
        _ => ("in_progress", json!([]), none.clone(), none.clone(), none.clone()),
    };
    json!({
        "id": id,
        "object": "response",
        "created_at": entry.received_at.timestamp(),
        "status": status,
        "background": true,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "store": true,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    })
}
