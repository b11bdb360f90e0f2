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

/// What the simulated model answers: JSON, or prose.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Answer {
    /// `summarize`'s answer: the first `max_words` words of the text.
    Json(Value),
    /// A few sentences made from the text.
    Text(String),
}

/// The simulated answer to a request. onejob tells a `sim` provider the
/// job's input and what its task answers (`onejob_input`, JSON unless its
/// `output` is `text`); any other
/// client is answered as a model reads a prompt: its input is the last user
/// message (with the limit an "at most N words" first line sets, the text
/// after the first blank line), and it answers JSON when asked for a schema
/// (`asked_json`) or when the prompt says JSON, prose otherwise.
pub(super) fn answer_for(job: &Value, messages: &[Value], asked_json: bool) -> Answer {
    let said = messages.iter().rev().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("");
    let (mut text, mut limit) = read_prompt(said);
    if let Some(input) = job.get("input") {
        text = input_text(input).unwrap_or_default();
        limit = input.get("max_words").and_then(Value::as_u64);
    }
    let text_wanted = match job.get("output").and_then(Value::as_str) {
        Some(kind) => kind == "text",
        None if job.get("input").is_some() => false,
        None => !asked_json && !messages.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains("JSON"))),
    };
    let limit = usize::try_from(limit.unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    if text_wanted {
        return Answer::Text(prose(&text, limit));
    }
    let words: Vec<&str> = text.split_whitespace().take(limit).collect();
    Answer::Json(json!({"summary": words.join(" "), "word_count": words.len()}))
}

/// The text a job's input gives: its `text` or `message`, or else its
/// first string member.
fn input_text(input: &Value) -> Option<String> {
    let members = input.as_object()?;
    let named = ["text", "message", "prompt"].iter().find_map(|name| members.get(*name)?.as_str());
    named.or_else(|| members.values().find_map(Value::as_str)).map(str::to_owned)
}

/// A prompt read as its instruction and its text: with a first paragraph
/// saying "at most N words", N and what follows it; otherwise the whole.
fn read_prompt(prompt: &str) -> (String, Option<u64>) {
    let limit = |instruction: &str| {
        let (_, rest) = instruction.split_once("at most ")?;
        let mut words = rest.split_whitespace();
        let n = words.next()?.parse().ok()?;
        words.next().filter(|w| w.starts_with("word")).map(|_| n)
    };
    match prompt.split_once("\n\n") {
        Some((instruction, text)) if let Some(n) = limit(instruction) => (text.to_owned(), Some(n)),
        _ => (prompt.to_owned(), None),
    }
}

/// What the simulated model says of `text`, in at most `limit` words: a
/// reply quoting its start, then sentences picked by its hash, the same
/// for the same text.
fn prose(text: &str, limit: usize) -> String {
    const SAYINGS: [&str; 8] = [
        "That is a fair thing to ask, and the short answer is that it depends on what you need next.",
        "A careful answer starts with what is already known and only then guesses at the rest.",
        "Here the simplest approach is usually the right one, at least until it stops being enough.",
        "It helps to write the question down once, so that every later try refers to the same thing.",
        "Whatever happens along the way, the result should arrive once and only once.",
        "If something fails in the middle, trying again should never cost twice.",
        "Most of the work is deciding what counts as done before anything is started.",
        "In the end the clearest explanation is the one that a newcomer can repeat.",
    ];
    let quoted: Vec<&str> = text.split_whitespace().take(12).collect();
    let mut reply = if quoted.is_empty() {
        "You said nothing, so here are a few thoughts.".to_owned()
    } else {
        format!("You said: \u{201c}{}\u{201d}.", quoted.join(" "))
    };
    let seed = text.bytes().fold(0usize, |hash, byte| hash.wrapping_mul(31).wrapping_add(usize::from(byte)));
    for k in 0..3 {
        reply.push(' ');
        reply.push_str(SAYINGS[(seed + 3 * k) % SAYINGS.len()]);
    }
    let words: Vec<&str> = reply.split(' ').take(limit.max(1)).collect();
    words.join(" ")
}

/// The content a provider of output `mode` sends for `answer`.
pub(super) fn render(answer: Answer, mode: SimOutput) -> String {
    let output = match answer {
        Answer::Text(text) => return render_text(text, mode),
        Answer::Json(output) => output,
    };
    match mode {
        SimOutput::ExtraTopLevelKey => {
            let mut output = output;
            output["note"] = json!("I also added this key");
            output.to_string()
        }
        SimOutput::NotJson => format!("Sure! Here is your summary: {}", output["summary"].as_str().unwrap_or_default()),
        SimOutput::Valid | SimOutput::Refusal | SimOutput::PauseTurn | SimOutput::Long => output.to_string(),
        SimOutput::Truncated | SimOutput::ContextWindowExceeded => first_half(&output.to_string()).to_owned(),
    }
}

/// Prose as a provider of output `mode` sends it: four times over when it
/// goes on too long, half of it when cut off, as it is otherwise.
fn render_text(text: String, mode: SimOutput) -> String {
    match mode {
        SimOutput::Long => [text.as_str(); 4].join(" "),
        SimOutput::Truncated | SimOutput::ContextWindowExceeded => first_half(&text).to_owned(),
        _ => text,
    }
}

fn first_half(whole: &str) -> &str {
    let mut half = whole.len() / 2;
    while !whole.is_char_boundary(half) {
        half -= 1;
    }
    &whole[..half]
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
        assert_eq!(answer_for(&job, &[], false), Answer::Json(json!({"summary": "the quick", "word_count": 2})));
        let all = json!({"input": {"text": "a b c"}, "output": "json"});
        assert_eq!(answer_for(&all, &[], false), Answer::Json(json!({"summary": "a b c", "word_count": 3})));
    }

    #[test]
    fn a_prompt_alone_is_read_as_a_model_reads_it() {
        let messages = [
            json!({"role": "system", "content": "Answer with one JSON object, and nothing else."}),
            json!({"role": "user", "content": "Summarize in at most 2 words:\n\nthe quick brown fox"}),
        ];
        assert_eq!(
            answer_for(&Value::Null, &messages, false),
            Answer::Json(json!({"summary": "the quick", "word_count": 2}))
        );
        let asked = [json!({"role": "user", "content": "Tell me about retries"})];
        let Answer::Text(prose) = answer_for(&Value::Null, &asked, false) else { panic!("prose is answered") };
        assert!(prose.starts_with("You said: \u{201c}Tell me about retries\u{201d}."), "{prose}");
        assert!(matches!(answer_for(&Value::Null, &asked, true), Answer::Json(_)));
    }

    #[test]
    fn prose_is_the_same_for_the_same_text_and_kept_within_its_words() {
        let job = |text: &str| json!({"input": {"message": text}, "output": "text"});
        let once = answer_for(&job("what is an idempotency key?"), &[], false);
        assert_eq!(once, answer_for(&job("what is an idempotency key?"), &[], false));
        let Answer::Text(prose) = once else { panic!("prose is answered") };
        assert!(prose.split(' ').count() > 40, "{prose}");
        let short = json!({"input": {"message": "hi", "max_words": 5}, "output": "text"});
        let Answer::Text(five) = answer_for(&short, &[], false) else { panic!("prose is answered") };
        assert_eq!(five.split(' ').count(), 5, "{five}");
    }

    #[test]
    fn output_modes_break_the_contract_as_named() {
        let output = json!({"summary": "a", "word_count": 1});
        let extra: Value =
            serde_json::from_str(&render(Answer::Json(output.clone()), SimOutput::ExtraTopLevelKey)).unwrap();
        assert!(extra.get("note").is_some());
        assert!(serde_json::from_str::<Value>(&render(Answer::Json(output), SimOutput::NotJson)).is_err());
        let prose = "one two three four".to_owned();
        assert_eq!(render(Answer::Text(prose.clone()), SimOutput::Long).len(), 4 * prose.len() + 3);
        assert_eq!(render(Answer::Text(prose.clone()), SimOutput::NotJson), prose);
    }
}
