//! Chat completions, simulated (the default surface): `POST
//! /providers/{name}/v1/chat/completions`, whole or streamed, answered by
//! the request's plan, its provider's faults and errors in OpenAI's shapes,
//! and its prompt-cache tokens when the provider reports some.

use std::sync::Arc;
use std::time::Duration;

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
    Arrival, Plan, SimState, Unanswered, admit, ended_completion, misbehave, openai_error, pace_stream, receive,
    request_id, stream, strict_schema,
};
use crate::sync::LockAnyway;

/// `POST /providers/{name}/v1/chat/completions`.
pub(super) async fn complete(
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
    let Some(messages) = body["messages"].as_array() else {
        return openai_error(400, "messages must be an array");
    };
    let format = &body["response_format"];
    let strict = match strict_schema(format, &format["json_schema"]["name"], &format["json_schema"]["schema"]) {
        Ok(strict) => strict,
        Err(message) => return openai_error(400, &message),
    };
    let id = request_id(&headers);
    if !id.starts_with("qualification-") && sim.refuses(&name, provider) {
        // Refused before any work, as a provider over its rate limit does:
        // nothing is recorded, the status lookup knows nothing of it.
        let mut response = openai_error(429, &format!("simulated rate limit of {name}"));
        if let Some(wait) = provider.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, wait.as_secs().into());
        }
        return response;
    }
    let model = body["model"].as_str().unwrap_or(&provider.model).to_owned();
    let ready = Instant::now() + provider.latency;
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let arrival = Arrival {
        name: &name,
        provider,
        id: &id,
        job: &body["onejob_input"],
        messages,
        strict,
        asked_json: matches!(format["type"].as_str(), Some("json_schema" | "json_object")),
        response_id: None,
        traceparent,
    };
    let (plan, _) = admit(&sim, arrival);
    if body["stream"] == json!(true)
        && provider.fault.is_none()
        && let Plan::Answer { content, usage, ending, .. } = &plan
    {
        let include_usage = body["stream_options"]["include_usage"] == json!(true);
        let (content, usage, ending, arrived) = (content.as_str(), *usage, *ending, Instant::now());
        let first_after = pace_stream(&sim, &id, provider, content, arrived);
        let streamed =
            stream::Streamed { id: &id, model: &model, content, usage, ending, include_usage, arrived, first_after };
        return stream::answer(provider, streamed);
    }
    if let Some(fault) = provider.fault {
        // The request was taken and the work is done (the status lookup says
        // so); only the answer goes wrong.
        tokio::time::sleep_until(ready).await;
        return misbehave(fault, connection, &id, &model).await;
    }
    // Dropped before the answer is made: the client closed the connection.
    let mut unanswered = Unanswered { sim: sim.clone(), id: id.clone(), armed: true };
    let mut response = answer(&sim, &id, &name, &model, plan, provider.retry_after).await;
    unanswered.armed = false;
    if provider.cache_read_tokens > 0 && response.status().is_success() {
        response = with_cached_tokens(response, provider.cache_read_tokens).await;
    }
    response
}

/// A chat completion's answer saying that `cached` of its prompt tokens
/// (at most all of them) were read from the prompt cache.
async fn with_cached_tokens(response: Response, cached: u32) -> Response {
    let Ok(body) = axum::body::to_bytes(response.into_body(), usize::MAX).await else {
        return openai_error(500, "the answer could not be read back");
    };
    let mut completion: Value = serde_json::from_slice(&body).unwrap_or_default();
    let prompt = completion["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    completion["usage"]["prompt_tokens_details"] = json!({"cached_tokens": u64::from(cached).min(prompt)});
    Json(completion).into_response()
}

/// The answer its plan makes for request `id`, when it is due; a request
/// canceled meanwhile is answered as canceled.
async fn answer(
    sim: &SimState,
    id: &str,
    name: &str,
    model: &str,
    plan: Plan,
    retry_after: Option<Duration>,
) -> Response {
    let canceled = || {
        let log = sim.log.lock_anyway();
        log.get(id).is_some_and(|entry| entry.canceled_after.is_some())
    };
    let (Plan::Error { at, .. } | Plan::Answer { at, .. }) = &plan else {
        return std::future::pending().await;
    };
    tokio::time::sleep_until(*at).await;
    if canceled() {
        return openai_error(409, "the request was canceled before it finished");
    }
    match plan {
        Plan::Answer { content, usage, ending, .. } => {
            Json(ended_completion(id, model, &content, usage, ending)).into_response()
        }
        Plan::Error { status, .. } => {
            let mut response = openai_error(status, &format!("simulated {status} from {name}"));
            if let Some(wait) = retry_after {
                response.headers_mut().insert(header::RETRY_AFTER, wait.as_secs().into());
            }
            response
        }
        Plan::Hang { .. } => unreachable!("a hanging request never answers"),
    }
}
