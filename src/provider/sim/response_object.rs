//! The simulator's response object (OpenAI's Responses API), as it stands
//! at a given moment of its request's plan.

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Ending, Entry, Plan, REFUSAL};

fn usage_json((input, output): (usize, usize)) -> Value {
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
           "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
           "total_tokens": input + output})
}

pub(super) fn message(id: &str, status: &str, part: Value) -> Value {
    json!({"type": "message", "id": format!("msg_{}", id.trim_start_matches("resp_")), "status": status,
           "role": "assistant", "content": [part]})
}

pub(super) fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The response object of `entry` at moment `now`.
pub(super) fn shape(id: &str, entry: &Entry, model: &str, now: Instant, just_created: bool) -> Value {
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
