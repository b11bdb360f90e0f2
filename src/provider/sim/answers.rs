//! What the simulator answers with: chat-completion bodies and their usage,
//! OpenAI-shaped errors, and the strict JSON schemas it honours as OpenAI's
//! structured outputs do.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Ending, REFUSAL};
use crate::config::{ProviderSettings, SimOutput, Tokenizer};

/// How the simulated model counts tokens: by its provider's tokenizer, but
/// where that is `approx_with_margin` (the estimate of a tokenizer that is
/// not published) by characters ÷ 4, which the estimate overcounts, as it
/// should a real model's count.
pub(super) fn model_tokenizer(provider: &ProviderSettings) -> Tokenizer {
    match provider.tokenizer() {
        Tokenizer::ApproxWithMargin => Tokenizer::Approx,
        tokenizer => tokenizer,
    }
}

pub(super) fn openai_error(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
    (status, Json(json!({"error": {"message": message, "type": kind, "param": null, "code": null}}))).into_response()
}

/// The simulated answer for a task's input: `summarize` keeps the first
/// `max_words` words of `text`.
pub(super) fn answer_for(job: &Value, messages: &Value) -> Value {
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

pub(super) fn render(output: Value, mode: SimOutput) -> String {
    match mode {
        SimOutput::ExtraTopLevelKey => {
            let mut output = output;
            output["note"] = json!("I also added this key");
            output.to_string()
        }
        SimOutput::NotJson => format!("Sure! Here is your summary: {}", output["summary"].as_str().unwrap_or_default()),
        SimOutput::Valid | SimOutput::Refusal | SimOutput::PauseTurn => output.to_string(),
        SimOutput::Truncated | SimOutput::ContextWindowExceeded => {
            let whole = output.to_string();
            let mut half = whole.len() / 2;
            while !whole.is_char_boundary(half) {
                half -= 1;
            }
            whole[..half].to_owned()
        }
    }
}

/// Whether a request's schema for its answer asks for strict structured
/// outputs: `Ok(false)` without one or without `strict`, an error message
/// (answered 400, as OpenAI does) for a name or a schema strict mode refuses.
pub(super) fn strict_schema(format: &Value, name: &Value, schema: &Value) -> Result<bool, String> {
    if format["type"] != "json_schema" {
        return Ok(false);
    }
    let name = name.as_str().unwrap_or_default();
    if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "Invalid 'name': '{name}'. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' (at most 64)."
        ));
    }
    if format.get("strict").or_else(|| format.pointer("/json_schema/strict")) != Some(&Value::Bool(true)) {
        return Ok(false);
    }
    strict_object(schema, "()").map_err(|why| format!("Invalid schema for response_format '{name}': {why}"))?;
    Ok(true)
}

/// Strict mode's rules for objects, everywhere in the schema: the root is
/// an object; every object lists all its properties as required and allows
/// no others.
pub(super) fn strict_object(schema: &Value, context: &str) -> Result<(), String> {
    if context == "()" && schema["type"] != "object" {
        return Err("schema must be a JSON Schema of 'type: \"object\"'.".into());
    }
    if schema["type"] == "object" {
        if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(format!(
                "In context={context}, 'additionalProperties' is required to be supplied and to be false."
            ));
        }
        let required: Vec<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        for (key, property) in schema["properties"].as_object().into_iter().flatten() {
            if !required.contains(&key.as_str()) {
                return Err(format!(
                    "In context={context}, 'required' is required to include every key in properties. Missing '{key}'."
                ));
            }
            strict_object(property, &format!("('properties', '{key}')"))?;
        }
    }
    if let Some(items) = schema.get("items") {
        strict_object(items, &format!("{context}, 'items'"))?;
    }
    Ok(())
}

pub(super) fn completion(
    id: &str,
    model: &str,
    content: &str,
    (prompt_tokens, completion_tokens): (usize, usize),
) -> Value {
    ended_completion(id, model, content, (prompt_tokens, completion_tokens), Ending::Complete)
}

pub(super) fn ended_completion(
    id: &str,
    model: &str,
    content: &str,
    (prompt_tokens, completion_tokens): (usize, usize),
    ending: Ending,
) -> Value {
    let (message, finish_reason) = match ending {
        Ending::Complete => (json!({"role": "assistant", "content": content, "refusal": null}), "stop"),
        Ending::Refusal => (json!({"role": "assistant", "content": null, "refusal": REFUSAL}), "stop"),
        Ending::Truncated => (json!({"role": "assistant", "content": content, "refusal": null}), "length"),
    };
    json!({
        "id": format!("chatcmpl-{id}"),
        "object": "chat.completion",
        "created": chrono::Utc::now().timestamp(),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })
}

pub(super) fn usage_json((prompt, completion): (usize, usize)) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
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
