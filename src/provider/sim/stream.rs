//! A streamed chat completion (`"stream": true`), as OpenAI sends one:
//! Server-Sent Events, each `data:` a `chat.completion.chunk`; the first
//! with the assistant's role, then the content a few characters at a time,
//! then the finish reason, then (with `stream_options.include_usage`) the
//! usage in a chunk without choices, then `data: [DONE]`.
//!
//! The first content comes `first_token_ms` after the request (by default
//! its `latency_ms`; for a request in the provider's tail, its
//! `tail_latency_ms`), the rest at `tokens_per_second`, a chunk counted as a
//! token. Faults: `stream_break_after = N` breaks the connection after N
//! content chunks; `stream_stall_after = N` sends nothing more after N.

use std::io;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Ending, REFUSAL};
use crate::config::ProviderSettings;

/// Characters of content per chunk.
const CHUNK_CHARS: usize = 4;

/// The pieces of `content` the stream sends, a few characters each.
pub(super) fn pieces(content: &str) -> Vec<String> {
    let chars: Vec<char> = content.chars().collect();
    chars.chunks(CHUNK_CHARS).map(|chunk| chunk.iter().collect()).collect()
}

/// When the last piece of a streamed answer of `content` is sent, for a
/// request that arrived at `arrived`: the provider's work is done then (a
/// cancel before it stops the work, as the status lookup reports).
pub(super) fn ends_at(provider: &ProviderSettings, first_after: Duration, content: &str, arrived: Instant) -> Instant {
    let (first, every) = pace(provider, first_after, arrived);
    let pieces = u32::try_from(pieces(content).len()).unwrap_or(u32::MAX);
    first + every * pieces.saturating_sub(1)
}

/// When the first token comes, and the time between two.
pub(super) fn pace(provider: &ProviderSettings, first_after: Duration, arrived: Instant) -> (Instant, Duration) {
    (arrived + first_after, Duration::from_secs(1) / provider.tokens_per_second.max(1))
}

/// One streamed request's answer.
pub(super) struct Streamed<'a> {
    pub id: &'a str,
    pub model: &'a str,
    pub content: &'a str,
    pub usage: (usize, usize),
    pub ending: Ending,
    pub include_usage: bool,
    /// When the request arrived.
    pub arrived: Instant,
    /// How long after it the first piece comes.
    pub first_after: Duration,
}

/// The streamed answer of `provider` (its pacing and faults).
pub(super) fn answer(provider: &ProviderSettings, streamed: Streamed<'_>) -> Response {
    let Streamed { id, model, content, usage, ending, include_usage, arrived, first_after } = streamed;
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": format!("chatcmpl-{id}"),
            "object": "chat.completion.chunk",
            "created": chrono::Utc::now().timestamp(),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut content_chunks = match ending {
        Ending::Refusal => vec![chunk(json!({"refusal": REFUSAL}), None)],
        Ending::Complete | Ending::Truncated => {
            pieces(content).into_iter().map(|piece| chunk(json!({"content": piece}), None)).collect()
        }
    };
    let finish = if ending == Ending::Truncated { "length" } else { "stop" };
    let mut tail = vec![chunk(json!({}), Some(finish))];
    if include_usage {
        let (prompt, completion) = usage;
        let mut last = chunk(json!({}), None);
        last["choices"] = json!([]);
        last["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion});
        tail.push(last);
    }
    let (broken, stalled) = (provider.stream_break_after, provider.stream_stall_after);
    let cut = broken.or(stalled).map(|n| n as usize);
    if let Some(n) = cut.filter(|n| *n < content_chunks.len()) {
        content_chunks.truncate(n);
        tail.clear();
    }
    let (first, every) = pace(provider, first_after, arrived);
    // The role first, with the first token; each further content chunk a
    // token later; the ending with the last one.
    let mut timed: Vec<(Instant, Bytes)> =
        vec![(first, event(&chunk(json!({"role": "assistant", "content": ""}), None)))];
    let count = content_chunks.len() as u32;
    for (n, body) in (0..).zip(content_chunks) {
        timed.push((first + every * n, event(&body)));
    }
    let end = first + every * count.saturating_sub(1);
    let cut_short = tail.is_empty();
    for body in tail {
        timed.push((end, event(&body)));
    }
    if !cut_short {
        timed.push((end, Bytes::from_static(b"data: [DONE]\n\n")));
    }
    let cut = match (broken.is_some() && cut_short, stalled.is_some() && cut_short) {
        (true, _) => Some(Cut::Break),
        (_, true) => Some(Cut::Stall),
        _ => None,
    };
    event_stream(timed, cut)
}

/// How a stream cut short ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cut {
    /// The connection breaks.
    Break,
    /// Nothing more comes.
    Stall,
}

/// A `text/event-stream` answer that sends each of `timed` when it is due,
/// then ends, or (cut short) breaks or stalls.
pub(super) fn event_stream(timed: Vec<(Instant, Bytes)>, cut: Option<Cut>) -> Response {
    let last = timed.last().map_or_else(Instant::now, |(at, _)| *at);
    let sent = futures_util::stream::iter(timed).then(|(at, bytes)| async move {
        tokio::time::sleep_until(at).await;
        Ok::<_, io::Error>(bytes)
    });
    let body = match cut {
        // An error ends the body mid-stream: the connection is dropped.
        // (A moment after the last event, so that it leaves first.)
        Some(Cut::Break) => Body::from_stream(sent.chain(futures_util::stream::once(async move {
            tokio::time::sleep_until(last + Duration::from_millis(50)).await;
            Err(io::Error::other("simulated broken stream"))
        }))),
        Some(Cut::Stall) => Body::from_stream(sent.chain(futures_util::stream::pending())),
        None => Body::from_stream(sent),
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("a well-formed response")
}

fn event(chunk: &Value) -> Bytes {
    Bytes::from(format!("data: {chunk}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_sent_a_few_characters_at_a_time_and_put_together_again() {
        let content = r#"{"summary": "é, ü — ok", "word_count": 3}"#;
        let pieces = pieces(content);
        assert!(pieces.iter().all(|p| (1..=CHUNK_CHARS).contains(&p.chars().count())), "{pieces:?}");
        assert_eq!(pieces.concat(), content);
    }
}
