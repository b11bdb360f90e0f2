//! Reading a streamed chat completion (`stream: true`): Server-Sent
//! Events whose `data:` are `chat.completion.chunk`s, then `[DONE]`. Each
//! piece of content goes to the attempt's [`Deltas`] as it comes; at the
//! end the pieces, the refusal, the finish reason and the usage (the last
//! chunk's, with `stream_options.include_usage`) make one completion, which
//! the caller reads as a whole answer (`openai::parse_completion`): the
//! same contract, the same failures.
//!
//! A stream that breaks before any content came leaves the outcome unknown,
//! as a lost answer does; one that breaks after some came fails the
//! attempt as `stream-broken` (retryable): the provider did the work, and
//! the rest of it cannot be asked for again.

use serde_json::{Value, json};

use super::{Deltas, FailureClass, FailureKind, ProviderError};

/// Reads `response`, a streamed chat completion of at most `limit` bytes,
/// sending each piece of content to `deltas`: the whole completion it
/// makes, as a chat completion's JSON body.
pub(super) async fn read(
    mut response: reqwest::Response,
    deltas: &Deltas,
    limit: usize,
) -> Result<Vec<u8>, ProviderError> {
    let mut pending: Vec<u8> = Vec::new();
    let mut read = 0usize;
    let mut answer = Streamed::default();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(error) => return Err(answer.broken(&error.to_string())),
        };
        read += chunk.len();
        if read > limit {
            return Err(ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::ResponseTooLarge,
                Some(200),
                format!("the streamed answer is larger than {limit} bytes; the rest was not read"),
            ));
        }
        pending.extend(chunk.iter().copied().filter(|&byte| byte != b'\r'));
        while let Some(end) = pending.windows(2).position(|pair| pair == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            answer.take(&event, deltas)?;
        }
    }
    answer.finish()
}

/// What a stream said so far.
#[derive(Default)]
struct Streamed {
    content: String,
    pieces: usize,
    refusal: Option<String>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    done: bool,
}

impl Streamed {
    fn take(&mut self, event: &[u8], deltas: &Deltas) -> Result<(), ProviderError> {
        let bad = |message: String| {
            ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::BadResponse, None, message)
        };
        let text = std::str::from_utf8(event).map_err(|_| bad("a streamed chunk is not UTF-8".into()))?;
        for line in text.lines() {
            let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
            if data == "[DONE]" {
                self.done = true;
                continue;
            }
            let chunk: Value =
                serde_json::from_str(data).map_err(|e| bad(format!("a streamed chunk is not JSON: {e}")))?;
            if let Some(error) = chunk.get("error").filter(|error| !error.is_null()) {
                let message = error.get("message").and_then(Value::as_str).unwrap_or("an error object in the stream");
                let class = FailureClass::Definitive { retryable: false };
                return Err(ProviderError::new(class, FailureKind::ProviderError, Some(200), message));
            }
            if let Some(usage) = chunk.get("usage").filter(|usage| !usage.is_null()) {
                self.usage = Some(usage.clone());
            }
            let Some(choice) = chunk.pointer("/choices/0") else { continue };
            if let Some(piece) = choice.pointer("/delta/content").and_then(Value::as_str).filter(|p| !p.is_empty()) {
                self.content.push_str(piece);
                self.pieces += 1;
                // The attempt may have stopped listening: the answer still counts.
                let _ = deltas.send(piece.to_owned());
            }
            if let Some(refusal) = choice.pointer("/delta/refusal").and_then(Value::as_str) {
                self.refusal.get_or_insert_with(String::new).push_str(refusal);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        Ok(())
    }

    /// The failure of a stream that broke: unknown before any content came.
    fn broken(&self, why: &str) -> ProviderError {
        match self.pieces {
            0 => ProviderError::new(FailureClass::Ambiguous, FailureKind::ConnectionLost, None, why),
            _ => ProviderError::new(
                FailureClass::Definitive { retryable: true },
                FailureKind::StreamBroken,
                None,
                format!("the stream broke after {} characters of the answer: {why}", self.content.chars().count()),
            ),
        }
    }

    fn finish(self) -> Result<Vec<u8>, ProviderError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(self.broken("it ended before its finish reason"));
        }
        let content = if self.content.is_empty() && self.refusal.is_some() { None } else { Some(self.content) };
        let whole = json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": self.refusal},
                         "finish_reason": self.finish_reason}],
            "usage": self.usage,
        });
        Ok(whole.to_string().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Completion;
    use crate::provider::openai::parse_completion;

    fn streamed(events: &[&str]) -> (Result<Completion, ProviderError>, Vec<String>) {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let mut answer = Streamed::default();
        let mut result = Ok(());
        for event in events {
            result = result.and_then(|()| answer.take(format!("data: {event}\n\n").as_bytes(), &sender));
        }
        let result = result.and_then(|()| answer.finish()).and_then(|whole| parse_completion(&whole));
        let mut pieces = Vec::new();
        while let Ok(piece) = receiver.try_recv() {
            pieces.push(piece);
        }
        (result, pieces)
    }

    #[test]
    fn a_streamed_answer_is_read_piece_by_piece_then_as_a_whole() {
        let chunk = |delta: Value, finish: Value| {
            json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
        };
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}).to_string();
        let (done, pieces) = streamed(&[
            &chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            &chunk(json!({"content": "{\"a\""}), Value::Null),
            &chunk(json!({"content": ": 1}"}), Value::Null),
            &chunk(json!({}), json!("stop")),
            &usage,
            "[DONE]",
        ]);
        assert_eq!(pieces, ["{\"a\"", ": 1}"]);
        let done = done.unwrap();
        assert_eq!(done.output, json!({"a": 1}));
        assert_eq!(done.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((7, 5)));
        // Cut off: the stream ends without a finish reason.
        let (cut, _) = streamed(&[&chunk(json!({"content": "{\"a\""}), Value::Null)]);
        assert_eq!(cut.unwrap_err().kind, FailureKind::StreamBroken);
        let (nothing, _) = streamed(&[]);
        assert_eq!(nothing.unwrap_err().class, FailureClass::Ambiguous);
        // A length stop is a truncated answer, as a whole one's would be.
        let (length, _) = streamed(&[&chunk(json!({"content": "{\"a\""}), json!("length")), "[DONE]"]);
        assert_eq!(length.unwrap_err().kind, FailureKind::OutputTruncated);
    }
}
