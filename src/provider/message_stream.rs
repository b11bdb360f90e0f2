//! Reading a streamed message of Anthropic's Messages API: named
//! Server-Sent Events (`message_start`, `content_block_start`,
//! `content_block_delta`, `content_block_stop`, `message_delta`,
//! `message_stop`, `ping`, `error`), each piece of text or of the forced
//! tool's input sent to the attempt's [`Deltas`] as it comes, then put
//! together as one message, which [`super::anthropic::parse_message`]
//! reads as a whole answer: the same stop reasons, the same failures.

use serde_json::{Value, json};

use super::answer::truncate;
use super::stream::{Events, Interrupted};
use super::{Deltas, FailureClass, FailureKind, ProviderError};

/// Reads a streamed message of at most `limit` bytes, sending each piece of
/// text or of the tool's input to `deltas`: the whole message it makes, as
/// a message's JSON body. A stream that breaks before any piece came leaves
/// the outcome unknown; after, it is `stream-broken` (there is no resume).
pub(super) async fn read_stream(
    response: reqwest::Response,
    deltas: &Deltas,
    limit: usize,
) -> Result<Vec<u8>, ProviderError> {
    let mut events = Events::new(response, limit);
    let mut message = Streamed::default();
    loop {
        match events.next().await {
            Ok(Some(data)) => {
                if message.take(&data, deltas)? {
                    return Ok(message.whole());
                }
                if message.bytes > limit {
                    return Err(ProviderError::new(
                        FailureClass::Definitive { retryable: false },
                        FailureKind::ResponseTooLarge,
                        Some(200),
                        format!("the streamed answer is larger than {limit} bytes; the rest was not read"),
                    ));
                }
            }
            Ok(None) => return Err(message.broken("it ended before message_stop")),
            Err(Interrupted::Broken(why)) => return Err(message.broken(&why)),
            Err(Interrupted::Failed(error)) => return Err(error),
        }
    }
}

/// What a streamed message said so far.
#[derive(Default)]
struct Streamed {
    /// `message_start`'s message, its content filled in at the end.
    message: Value,
    /// The blocks as they started, with the text (or a tool's input as
    /// JSON text) that came for each.
    blocks: Vec<(Value, String)>,
    pieces: usize,
    bytes: usize,
}

impl Streamed {
    /// Takes one event's data; `true` at `message_stop`.
    fn take(&mut self, data: &str, deltas: &Deltas) -> Result<bool, ProviderError> {
        let bad = |message: String| {
            ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::BadResponse, None, message)
        };
        let event: Value = serde_json::from_str(data).map_err(|e| bad(format!("a streamed event is not JSON: {e}")))?;
        let index = event["index"].as_u64().and_then(|i| usize::try_from(i).ok());
        match event["type"].as_str() {
            Some("message_start") => self.message = event["message"].clone(),
            Some("content_block_start") => {
                if index != Some(self.blocks.len()) {
                    return Err(bad(format!("a content block starts out of order at {index:?}")));
                }
                self.blocks.push((event["content_block"].clone(), String::new()));
            }
            Some("content_block_delta") => {
                let Some((_, text)) = index.and_then(|i| self.blocks.get_mut(i)) else {
                    return Err(bad(format!("a delta for a block that did not start: {index:?}")));
                };
                let piece = match event.pointer("/delta/type").and_then(Value::as_str) {
                    Some("text_delta") => event.pointer("/delta/text").and_then(Value::as_str).unwrap_or_default(),
                    Some("input_json_delta") => {
                        event.pointer("/delta/partial_json").and_then(Value::as_str).unwrap_or_default()
                    }
                    // Thinking, signatures: not part of the answer.
                    _ => "",
                };
                text.push_str(piece);
                if !piece.is_empty() {
                    self.pieces += 1;
                    self.bytes += piece.len();
                    // The attempt may have stopped listening: the answer still counts.
                    let _ = deltas.send(piece.to_owned());
                }
            }
            Some("message_delta") => {
                if let Some(reason) = event.pointer("/delta/stop_reason").filter(|r| !r.is_null()) {
                    self.message["stop_reason"] = reason.clone();
                }
                if let Some(usage) = event["usage"].as_object() {
                    for (name, count) in usage.iter().filter(|(_, count)| !count.is_null()) {
                        self.message["usage"][name] = count.clone();
                    }
                }
            }
            Some("message_stop") => return Ok(true),
            Some("error") => {
                let kind = event.pointer("/error/type").and_then(Value::as_str).unwrap_or("error");
                let text = event.pointer("/error/message").and_then(Value::as_str).unwrap_or_default();
                if self.pieces > 0 {
                    return Err(self.broken(&format!("{kind}: {text}")));
                }
                let retryable = matches!(kind, "overloaded_error" | "api_error" | "rate_limit_error");
                return Err(ProviderError::new(
                    FailureClass::Definitive { retryable },
                    FailureKind::ProviderError,
                    Some(200),
                    truncate(format!("{kind}: {text}")),
                ));
            }
            // `ping`, and events this client does not know.
            _ => {}
        }
        Ok(false)
    }

    /// The failure of a stream that broke: unknown before any piece came.
    fn broken(&self, why: &str) -> ProviderError {
        match self.pieces {
            0 => ProviderError::new(FailureClass::Ambiguous, FailureKind::ConnectionLost, None, truncate(why.into())),
            pieces => ProviderError::new(
                FailureClass::Definitive { retryable: true },
                FailureKind::StreamBroken,
                None,
                truncate(format!("the stream broke after {pieces} pieces of the answer (no resume): {why}")),
            ),
        }
    }

    /// The message the stream made. A tool's input is parsed here, after
    /// the stop reason came (an input cut off at `max_tokens` is not JSON);
    /// one that does not parse stays its text, which [`super::anthropic::parse_message`]
    /// reads as an answer that is not JSON.
    fn whole(mut self) -> Vec<u8> {
        let blocks: Vec<Value> = self
            .blocks
            .into_iter()
            .map(|(mut block, text)| {
                if block["type"] == "text" {
                    block["text"] = Value::String(text);
                } else if block["type"] == "tool_use" && !text.is_empty() {
                    block["input"] = serde_json::from_str(&text).unwrap_or(Value::String(text));
                }
                block
            })
            .collect();
        self.message["content"] = json!(blocks);
        self.message.to_string().into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::anthropic::parse_message;

    #[test]
    fn a_streamed_message_is_read_piece_by_piece_then_as_a_whole() {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let mut streamed = Streamed::default();
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "content": [],
                   "stop_reason": null, "usage": {"input_tokens": 9, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ": 1}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
        ];
        for event in &events {
            assert!(!streamed.take(&event.to_string(), &sender).unwrap());
        }
        assert!(streamed.broken("reset").kind == FailureKind::StreamBroken, "pieces came: no resume");
        assert!(streamed.take(r#"{"type": "message_stop"}"#, &sender).unwrap());
        let done = parse_message(&streamed.whole(), Some("t"), crate::domain::OutputKind::Json).unwrap();
        assert_eq!(done.output, json!({"a": 1}));
        assert_eq!(done.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((9, 7)));
        let pieces: Vec<String> = std::iter::from_fn(|| receiver.try_recv().ok()).collect();
        assert_eq!(pieces, ["{\"a\"", ": 1}"]);
        assert_eq!(Streamed::default().broken("reset").class, FailureClass::Ambiguous, "nothing came: unknown");

        // A tool's input cut off at max_tokens: truncated, not a contract
        // violation; the same input under tool_use breaks the contract.
        let cut = |stop: &str| {
            let mut streamed = Streamed::default();
            for event in &events[..4] {
                streamed.take(&event.to_string(), &sender).unwrap();
            }
            let ended = json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 3}});
            streamed.take(&ended.to_string(), &sender).unwrap();
            parse_message(&streamed.whole(), Some("t"), crate::domain::OutputKind::Json).unwrap_err()
        };
        assert_eq!(cut("max_tokens").kind, FailureKind::OutputTruncated);
        let broken = cut("tool_use");
        assert_eq!(broken.kind, FailureKind::ContractViolation);
        assert_eq!(broken.facts.usage.map(|u| u.completion_tokens), Some(3), "charged");
    }
}
