//! Anthropic's Messages API, simulated (`api = "messages"`): `POST
//! /providers/{name}/v1/messages`, whole or streamed, and `POST
//! /providers/{name}/v1/messages/count_tokens`, with the plans, latencies,
//! tails, faults and errors of the other surfaces, answered in Anthropic's
//! shapes: content blocks, stop reasons, its error envelope, usage with
//! cache tokens, a `request-id` header on every answer.
//!
//! A request whose `tool_choice` forces one of its `tools` is answered with
//! that tool's `tool_use` block, its input the answer (`stop_reason:
//! "tool_use"`); any other with a `text` block. The provider's `output`
//! picks the stop reason: `refusal`, `truncated` (`max_tokens`: half the
//! answer), `pause_turn`, `context_window_exceeded`
//! (`model_context_window_exceeded`: half the answer).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::connection::Connection;
use super::stream::{Cut, event_stream, pace, pieces};
use super::{Answer, Arrival, Ending, Plan, SimState, Unanswered, admit, answer_for, misbehave, receive, request_id};
use crate::config::{ProviderSettings, SimFault, SimOutput};
use crate::provider::tokens;

/// An answer in Anthropic's error envelope, its type named by its status.
pub(super) fn anthropic_error(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_sim_error"});
    (status, Json(body)).into_response()
}

/// The answer with a `request-id` header for request `id`.
fn identified(mut response: Response, id: &str) -> Response {
    let request_id: String = id.chars().filter(char::is_ascii_alphanumeric).take(40).collect();
    if let Ok(value) = HeaderValue::from_str(&format!("req_sim{request_id}")) {
        response.headers_mut().insert("request-id", value);
    }
    response
}

/// A text block's or a message's content as one text: a string, or its
/// `text` blocks joined.
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => Some(blocks.iter().filter_map(|b| b["text"].as_str()).collect()),
        _ => None,
    }
}

/// A request's `system` and `messages` as chat messages, or why they cannot be.
fn chat_messages(body: &Value) -> Result<Vec<Value>, String> {
    let turns = body["messages"].as_array().filter(|m| !m.is_empty());
    let turns = turns.ok_or("messages: at least one message is required")?;
    let mut messages = Vec::with_capacity(turns.len() + 1);
    if let Some(system) = body.get("system").filter(|s| !s.is_null()) {
        messages.push(json!({"role": "system", "content": text_of(system).ok_or("system: must be text")?}));
    }
    for (n, turn) in turns.iter().enumerate() {
        let role = turn["role"].as_str().filter(|r| ["user", "assistant"].contains(r));
        let role = role.ok_or(format!("messages.{n}.role: must be 'user' or 'assistant'"))?;
        let content = text_of(&turn["content"]).ok_or(format!("messages.{n}.content: must be text"))?;
        messages.push(json!({"role": role, "content": content}));
    }
    Ok(messages)
}

/// The tool the request forces, when it forces one of its tools.
fn forced_tool(body: &Value) -> Result<Option<String>, String> {
    if body["tool_choice"]["type"] != "tool" {
        return Ok(None);
    }
    let name = body["tool_choice"]["name"].as_str().unwrap_or_default();
    let tools = body["tools"].as_array().into_iter().flatten();
    match tools.into_iter().find(|t| t["name"] == name) {
        Some(tool) if tool["input_schema"]["type"] == "object" => Ok(Some(name.to_owned())),
        Some(_) => Err(format!("tools: the input_schema of '{name}' must be of type object")),
        None => Err(format!("tool_choice: there is no tool named '{name}'")),
    }
}

/// The fields every request is checked for, as Anthropic checks them.
fn checked(headers: &HeaderMap, body: &Value) -> Result<(), String> {
    if !headers.contains_key("anthropic-version") {
        return Err("anthropic-version: header is required".into());
    }
    if !body["model"].is_string() {
        return Err("model: Field required".into());
    }
    Ok(())
}

/// `POST /providers/{name}/v1/messages/count_tokens`: the input tokens of
/// a request, as the simulated model counts them (a forced tool's schema
/// and the tool-use prompt included).
pub(super) async fn count_tokens(
    State(sim): State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (provider, body) = match receive(&sim, &name, connection, body, anthropic_error).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let counted = checked(&headers, &body).and_then(|()| {
        let tokenizer = super::answers::model_tokenizer(provider);
        let mut tokens = tokens::count_messages(tokenizer, &chat_messages(&body)?);
        if forced_tool(&body)?.is_some() {
            let schema = body["tools"][0]["input_schema"].to_string();
            tokens += tokens::count(tokenizer, &schema) + tokens::FORCED_TOOL_TOKENS;
        }
        Ok(tokens)
    });
    match counted {
        Ok(input_tokens) => identified(Json(json!({"input_tokens": input_tokens})).into_response(), "count"),
        Err(message) => anthropic_error(400, &message),
    }
}

/// `POST /providers/{name}/v1/messages`.
pub(super) async fn create(
    State(sim): State<Arc<SimState>>,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (provider, body) = match receive(&sim, &name, connection.clone(), body, anthropic_error).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let id = request_id(&headers);
    let (messages, tool) = match message_request(&headers, &body) {
        Ok(request) => request,
        Err(message) => return identified(anthropic_error(400, &message), &id),
    };
    if !id.starts_with("qualification-") && sim.refuses(&name, provider) {
        let response = anthropic_error(429, &format!("simulated rate limit of {name}"));
        return identified(with_retry_after(response, provider.retry_after), &id);
    }
    let model = body["model"].as_str().unwrap_or(&provider.model).to_owned();
    let ready = Instant::now() + provider.latency;
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let arrival = Arrival {
        name: &name,
        provider,
        id: &id,
        job: &body["onejob_input"],
        messages: &messages,
        // A forced tool's input is an object, whatever `output` would break.
        strict: tool.is_some() && provider.output == SimOutput::NotJson,
        asked_json: tool.is_some(),
        response_id: None,
        traceparent,
    };
    let (plan, _) = admit(&sim, arrival);
    let shape = Shape { id: &id, model: &model, tool: tool.as_deref(), provider };
    if body["stream"] == json!(true)
        && provider.fault.is_none()
        && let Plan::Answer { content, usage, ending, .. } = &plan
    {
        return stream_message(&sim, &shape, &body, content, *usage, *ending);
    }
    if let Some(fault) = provider.fault {
        return misbehave_at(fault, ready, connection, &id, &model).await;
    }
    let mut unanswered = Unanswered { sim: sim.clone(), id: id.clone(), armed: true };
    let response = answer_when_due(plan, &shape, &body, &name).await;
    unanswered.armed = false;
    identified(response, &id)
}

/// The chat messages of a message request and the tool it forces, or why
/// it cannot be answered.
fn message_request(headers: &HeaderMap, body: &Value) -> Result<(Vec<Value>, Option<String>), String> {
    checked(headers, body).and_then(|()| {
        if body["max_tokens"].as_u64().is_none_or(|n| n == 0) {
            return Err("max_tokens: Field required".into());
        }
        Ok((chat_messages(body)?, forced_tool(body)?))
    })
}

/// Streams a planned answer: its work lasts as long as its stream.
fn stream_message(
    sim: &SimState,
    shape: &Shape<'_>,
    body: &Value,
    content: &str,
    usage: (usize, usize),
    ending: Ending,
) -> Response {
    let arrived = Instant::now();
    let first_after = super::pace_stream(sim, shape.id, shape.provider, content, arrived);
    // Cut off, a tool's input streams as the part of it that came.
    let output = match ending {
        Ending::Truncated => Value::String(content.to_owned()),
        _ => output_of(body, content, shape.tool.is_some()),
    };
    identified(streamed(shape, &output, usage, ending, (arrived, first_after)), shape.id)
}

/// Answers wrongly, as the provider's `fault` says, when the answer is
/// `ready`: an error envelope with 200, or the fault on the wire.
async fn misbehave_at(
    fault: SimFault,
    ready: Instant,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    id: &str,
    model: &str,
) -> Response {
    match fault {
        SimFault::ErrorIn200 => {
            tokio::time::sleep_until(ready).await;
            let envelope = json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}});
            identified(Json(envelope).into_response(), id)
        }
        fault => {
            tokio::time::sleep_until(ready).await;
            misbehave(fault, connection, id, model).await
        }
    }
}

/// The answer `plan` makes, when it is due: the message, or the error of
/// provider `name`; a hanging request never answers.
async fn answer_when_due(plan: Plan, shape: &Shape<'_>, body: &Value, name: &str) -> Response {
    match plan {
        Plan::Answer { at, content, usage, ending } => {
            tokio::time::sleep_until(at).await;
            let output = output_of(body, &content, shape.tool.is_some());
            Json(message(shape, &output, usage, ending)).into_response()
        }
        Plan::Error { at, status } => {
            tokio::time::sleep_until(at).await;
            with_retry_after(
                anthropic_error(status, &format!("simulated {status} from {name}")),
                shape.provider.retry_after,
            )
        }
        Plan::Hang { .. } => std::future::pending().await,
    }
}

fn with_retry_after(mut response: Response, retry_after: Option<Duration>) -> Response {
    if let Some(wait) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, wait.as_secs().into());
    }
    response
}

/// The answer as the forced tool's input: the simulated answer for the
/// job, with the key an `extra_top_level_key` provider adds; as text, the
/// planned content.
fn output_of(body: &Value, content: &str, tool: bool) -> Value {
    if !tool {
        return Value::String(content.to_owned());
    }
    serde_json::from_str(content).unwrap_or_else(|_| {
        let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
        match answer_for(&body["onejob_input"], messages, true) {
            Answer::Json(output) => output,
            Answer::Text(text) => Value::String(text),
        }
    })
}

/// What an answer is shaped by.
struct Shape<'a> {
    id: &'a str,
    model: &'a str,
    tool: Option<&'a str>,
    provider: &'a ProviderSettings,
}

impl Shape<'_> {
    /// The stop reason, and whether the answer has its content block.
    fn stop(&self, ending: Ending) -> (&'static str, bool) {
        match (ending, self.provider.output) {
            (Ending::Refusal, _) => ("refusal", false),
            (Ending::Truncated, SimOutput::ContextWindowExceeded) => ("model_context_window_exceeded", true),
            (Ending::Truncated, _) => ("max_tokens", true),
            (Ending::Complete, SimOutput::PauseTurn) => ("pause_turn", false),
            (Ending::Complete, _) if self.tool.is_some() => ("tool_use", true),
            (Ending::Complete, _) => ("end_turn", true),
        }
    }

    /// The usage: of the prompt's tokens, the provider's cache reads and
    /// writes apart (at most all of them).
    fn usage(&self, (prompt, completion): (usize, usize)) -> Value {
        let read = (self.provider.cache_read_tokens as usize).min(prompt);
        let written = (self.provider.cache_write_tokens as usize).min(prompt - read);
        json!({"input_tokens": prompt - read - written, "output_tokens": completion,
               "cache_creation_input_tokens": written, "cache_read_input_tokens": read})
    }

    /// The message, its content and stop reason still to come.
    fn started(&self, usage: (usize, usize)) -> Value {
        json!({"id": format!("msg_sim{}", self.id.replace('-', "")), "type": "message", "role": "assistant",
               "model": self.model, "content": [], "stop_reason": null, "stop_sequence": null,
               "usage": self.usage(usage)})
    }

    /// The block the answer comes in, with nothing in it yet.
    fn empty_block(&self) -> Value {
        match self.tool {
            Some(name) => json!({"type": "tool_use", "id": format!("toolu_sim{}", self.id.replace('-', "")),
                                 "name": name, "input": {}}),
            None => json!({"type": "text", "text": ""}),
        }
    }
}

/// A whole message.
fn message(shape: &Shape<'_>, output: &Value, usage: (usize, usize), ending: Ending) -> Value {
    let (stop, has_block) = shape.stop(ending);
    let mut message = shape.started(usage);
    if has_block {
        let mut block = shape.empty_block();
        match (output, ending) {
            (Value::String(text), _) => block["text"] = json!(text),
            // Cut off inside the tool's input: what came of it.
            (_, Ending::Truncated) => block["input"] = json!({}),
            (input, _) => block["input"] = input.clone(),
        }
        message["content"] = json!([block]);
    }
    message["stop_reason"] = json!(stop);
    message
}

/// A streamed message, paced as the chat completions' streams are, cut
/// short by `stream_break_after` or `stream_stall_after`.
fn streamed(
    shape: &Shape<'_>,
    output: &Value,
    usage: (usize, usize),
    ending: Ending,
    (arrived, first_after): (Instant, Duration),
) -> Response {
    let (stop, has_block) = shape.stop(ending);
    let text = match output {
        Value::String(text) => text.clone(),
        input => input.to_string(),
    };
    let delta = |piece: String| match shape.tool {
        Some(_) => json!({"type": "input_json_delta", "partial_json": piece}),
        None => json!({"type": "text_delta", "text": piece}),
    };
    let mut start = shape.started(usage);
    start["usage"]["output_tokens"] = json!(1);
    let (first, every) = pace(shape.provider, first_after, arrived);
    let mut timed = vec![(first, event("message_start", &json!({"type": "message_start", "message": start})))];
    let mut deltas: Vec<Value> = if has_block { pieces(&text).into_iter().map(delta).collect() } else { vec![] };
    let provider = shape.provider;
    let cut_at = provider.stream_break_after.or(provider.stream_stall_after).map(|n| n as usize);
    let cut = cut_at.filter(|n| *n < deltas.len());
    if let Some(n) = cut {
        deltas.truncate(n);
    }
    if has_block {
        let block = json!({"type": "content_block_start", "index": 0, "content_block": shape.empty_block()});
        timed.push((first, event("content_block_start", &block)));
    }
    timed.push((first, event("ping", &json!({"type": "ping"}))));
    let count = deltas.len() as u32;
    for (n, delta) in (0..).zip(deltas) {
        let body = json!({"type": "content_block_delta", "index": 0, "delta": delta});
        timed.push((first + every * n, event("content_block_delta", &body)));
    }
    let end = first + every * count.saturating_sub(1);
    let cut = cut.map(|_| if provider.stream_break_after.is_some() { Cut::Break } else { Cut::Stall });
    if cut.is_none() {
        if has_block {
            timed.push((end, event("content_block_stop", &json!({"type": "content_block_stop", "index": 0}))));
        }
        let ended = json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                           "usage": shape.usage(usage)});
        timed.push((end, event("message_delta", &ended)));
        timed.push((end, event("message_stop", &json!({"type": "message_stop"}))));
    }
    event_stream(timed, cut)
}

fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}
