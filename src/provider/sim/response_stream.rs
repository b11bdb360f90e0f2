//! A streamed background response (`"stream": true`), as OpenAI sends
//! one: Server-Sent Events, each with its `event:` type and a `data:`
//! object carrying the same `type` and a `sequence_number` counted from 0.
//! `response.created` and `response.in_progress` come at once; the message
//! item and its text part open with the first token; the text comes as
//! `response.output_text.delta`s, a few characters each, paced as a
//! streamed chat completion is; the text, the part and the item close with
//! the last one; `response.completed` (or `response.incomplete`, or
//! `response.failed`) carries the final response object.
//!
//! `GET …/responses/{id}?stream=true&starting_after=N` sends the events
//! after N: those already due at once, the rest as they come. The faults
//! `stream_break_after` and `stream_stall_after` apply to the first
//! connection only: a client that resumes gets the rest.

use axum::body::Bytes;
use axum::response::Response;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::response_object::{message, shape, text_part};
use super::stream::{self, Cut};
use super::{Ending, Entry, Plan, REFUSAL};
use crate::config::ProviderSettings;

/// The events of response `id` (logged as `entry`), each with when it is due.
pub(super) fn events(id: &str, entry: &Entry, provider: &ProviderSettings, model: &str) -> Vec<(Instant, Value)> {
    let arrived = entry.arrived;
    let mut events: Vec<(Instant, Value)> = Vec::new();
    let mut push = |at: Instant, kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(events.len());
        events.push((at, data));
    };
    for (kind, status) in [("response.created", "queued"), ("response.in_progress", "in_progress")] {
        let mut response = shape(id, entry, model, arrived, false);
        response.as_object_mut().expect("an object").extend([
            ("status".to_owned(), json!(status)),
            ("output".to_owned(), json!([])),
            ("usage".to_owned(), Value::Null),
        ]);
        push(arrived, kind, json!({ "response": response }));
    }
    match &entry.plan {
        Plan::Answer { at, content, ending, .. } => {
            let (first, every) = stream::pace(provider, entry.first_token_after, arrived);
            let item = message(id, "in_progress", json!(null));
            let item_id = item["id"].clone();
            let place = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
            let with = |more: Value| {
                let mut data = place.clone();
                data.as_object_mut().expect("an object").extend(more.as_object().expect("an object").clone());
                data
            };
            let mut opened = item.clone();
            opened["content"] = json!([]);
            push(first, "response.output_item.added", json!({"output_index": 0, "item": opened}));
            let finished = shape(id, entry, model, *at, false);
            if *ending == Ending::Refusal {
                let part = json!({"type": "refusal", "refusal": ""});
                push(first, "response.content_part.added", with(json!({"part": part})));
                push(first, "response.refusal.delta", with(json!({"delta": REFUSAL})));
                push(first, "response.refusal.done", with(json!({"refusal": REFUSAL})));
            } else {
                push(first, "response.content_part.added", with(json!({"part": text_part("")})));
                let pieces = stream::pieces(content);
                for (n, piece) in (0..).zip(&pieces) {
                    push(
                        first + every * n,
                        "response.output_text.delta",
                        with(json!({"delta": piece, "logprobs": []})),
                    );
                }
            }
            let last =
                first + every * u32::try_from(stream::pieces(content).len()).unwrap_or(u32::MAX).saturating_sub(1);
            let end = (*at).max(last);
            if *ending != Ending::Refusal {
                push(end, "response.output_text.done", with(json!({"text": content, "logprobs": []})));
            }
            let done_item = finished["output"][0].clone();
            push(end, "response.content_part.done", with(json!({"part": done_item["content"][0]})));
            push(end, "response.output_item.done", json!({"output_index": 0, "item": done_item}));
            let kind = if *ending == Ending::Truncated { "response.incomplete" } else { "response.completed" };
            push(end, kind, json!({"response": finished}));
        }
        Plan::Error { at, .. } => {
            push(*at, "response.failed", json!({"response": shape(id, entry, model, *at, false)}))
        }
        Plan::Hang { gives_up_at } => {
            let failed = shape(id, entry, model, *gives_up_at, false);
            push(*gives_up_at, "response.failed", json!({"response": failed}));
        }
    }
    // A response canceled meanwhile sends nothing after its cancel.
    if let Some(after) = entry.canceled_after {
        events.retain(|(at, _)| *at <= arrived + after);
    }
    events
}

/// The answer that sends `events` after sequence number `after` (all of
/// them without one), each when it is due. On a first connection
/// (`faulty`), the provider's stream faults apply.
pub(super) fn send(
    provider: &ProviderSettings,
    events: Vec<(Instant, Value)>,
    after: Option<u64>,
    faulty: bool,
) -> Response {
    let mut events: Vec<(Instant, Value)> = events
        .into_iter()
        .filter(|(_, data)| after.is_none_or(|after| data["sequence_number"].as_u64() > Some(after)))
        .collect();
    let (broken, stalled) =
        if faulty { (provider.stream_break_after, provider.stream_stall_after) } else { (None, None) };
    let mut cut = None;
    if let Some(n) = broken.or(stalled) {
        let texts = events.iter().enumerate().filter(|(_, (_, data))| data["type"] == "response.output_text.delta");
        if let Some((index, _)) = texts.map(|(index, _)| (index, ())).nth(n as usize) {
            events.truncate(index);
            cut = Some(if broken.is_some() { Cut::Break } else { Cut::Stall });
        }
    }
    let timed = events
        .into_iter()
        .map(|(at, data)| {
            let kind = data["type"].as_str().unwrap_or_default().to_owned();
            (at, Bytes::from(format!("event: {kind}\ndata: {data}\n\n")))
        })
        .collect();
    stream::event_stream(timed, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_responses_events_are_numbered_from_zero_and_their_text_is_the_answer() {
        let provider: ProviderSettings =
            toml::from_str("kind = \"sim\"\nmodel = \"sim-1\"\napi = \"responses\"\nlatency_ms = 5").unwrap();
        let arrived = Instant::now();
        let content = r#"{"summary": "a b c", "word_count": 3}"#;
        let entry = Entry {
            provider: "sim".into(),
            received_at: chrono::Utc::now(),
            arrived,
            times: 1,
            plan: Plan::Answer { at: arrived, content: content.into(), usage: (10, 12), ending: Ending::Complete },
            closed_after: None,
            canceled_after: None,
            strict_schema: false,
            response_id: Some("resp_1".into()),
            traceparent: None,
            resumed: 0,
            paced: None,
            first_token_after: std::time::Duration::from_millis(5),
        };
        let events = events("resp_1", &entry, &provider, "sim-1");
        let numbers: Vec<u64> = events.iter().map(|(_, e)| e["sequence_number"].as_u64().unwrap()).collect();
        assert_eq!(numbers, (0..events.len() as u64).collect::<Vec<_>>());
        let kinds: Vec<&str> = events.iter().map(|(_, e)| e["type"].as_str().unwrap()).collect();
        assert_eq!((kinds[0], kinds[kinds.len() - 1]), ("response.created", "response.completed"));
        assert_eq!(events[0].1["response"]["status"], "queued");
        let text: String = events
            .iter()
            .filter(|(_, e)| e["type"] == "response.output_text.delta")
            .map(|(_, e)| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, content);
        let last = &events[events.len() - 1].1["response"];
        assert_eq!((&last["status"], &last["output"][0]["content"][0]["text"]), (&json!("completed"), &json!(content)));
        assert!(events.windows(2).all(|pair| pair[0].0 <= pair[1].0), "due in order");
    }
}
