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

/// Reads `response`, a streamed chat completion of at most `limit` bytes
/// of content (and of any one event),
/// sending each piece of content to `deltas`: the whole completion it
/// makes, as a chat completion's JSON body.
pub(super) async fn read(response: reqwest::Response, deltas: &Deltas, limit: usize) -> Result<Vec<u8>, ProviderError> {
    let mut events = Events::new(response, limit);
    let mut answer = Streamed::default();
    loop {
        match events.next().await {
            Ok(Some(data)) => {
                answer.take(&data, deltas)?;
                if answer.content.len() > limit {
                    return Err(ProviderError::new(
                        FailureClass::Definitive { retryable: false },
                        FailureKind::ResponseTooLarge,
                        Some(200),
                        format!("the streamed answer is larger than {limit} bytes; the rest was not read"),
                    ));
                }
            }
            Ok(None) => break,
            Err(Interrupted::Broken(why)) => return Err(answer.broken(&why)),
            Err(Interrupted::Failed(error)) => return Err(error),
        }
    }
    answer.finish()
}

/// The events of a Server-Sent Events body, one at a time as they come,
/// each at most `limit` bytes.
pub(super) struct Events {
    response: reqwest::Response,
    pending: Vec<u8>,
    /// How much of `pending` holds no event's end.
    scanned: usize,
    limit: usize,
}

/// Why a stream of events stopped before its end.
pub(super) enum Interrupted {
    /// The connection broke: what the transport said.
    Broken(String),
    /// What came cannot be read: the attempt fails with this.
    Failed(ProviderError),
}

impl Events {
    pub(super) fn new(response: reqwest::Response, limit: usize) -> Self {
        Self { response, pending: Vec::new(), scanned: 0, limit }
    }

    /// The `data:` of the next event that has any (its lines joined by
    /// newlines, as the format says), or `None` at the end of the body.
    pub(super) async fn next(&mut self) -> Result<Option<String>, Interrupted> {
        loop {
            while let Some(end) = self.pending[self.scanned..].windows(2).position(|pair| pair == b"\n\n") {
                let event: Vec<u8> = self.pending.drain(..self.scanned + end + 2).collect();
                self.scanned = 0;
                let text = std::str::from_utf8(&event).map_err(|_| {
                    let class = FailureClass::Definitive { retryable: false };
                    Interrupted::Failed(ProviderError::new(
                        class,
                        FailureKind::BadResponse,
                        None,
                        "a streamed event is not UTF-8",
                    ))
                })?;
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if !data.is_empty() {
                    return Ok(Some(data.join("\n")));
                }
            }
            let chunk = match self.response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Ok(None),
                Err(error) => return Err(Interrupted::Broken(error.to_string())),
            };
            // What was looked through holds no end (the last byte may start one).
            self.scanned = self.pending.len().saturating_sub(1);
            if self.pending.len() + chunk.len() > self.limit {
                return Err(Interrupted::Failed(ProviderError::new(
                    FailureClass::Definitive { retryable: false },
                    FailureKind::ResponseTooLarge,
                    Some(200),
                    format!("a streamed event is larger than {} bytes; the rest was not read", self.limit),
                )));
            }
            self.pending.extend(chunk.iter().copied().filter(|&byte| byte != b'\r'));
        }
    }
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
    /// Takes one event's data: a chunk, or `[DONE]`.
    fn take(&mut self, data: &str, deltas: &Deltas) -> Result<(), ProviderError> {
        let bad = |message: String| {
            ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::BadResponse, None, message)
        };
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| bad(format!("a streamed chunk is not JSON: {e}")))?;
        if let Some(error) = chunk.get("error").filter(|error| !error.is_null()) {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("an error object in the stream");
            let class = FailureClass::Definitive { retryable: false };
            return Err(ProviderError::new(class, FailureKind::ProviderError, Some(200), message));
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| !usage.is_null()) {
            self.usage = Some(usage.clone());
        }
        let Some(choice) = chunk.pointer("/choices/0") else { return Ok(()) };
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
            result = result.and_then(|()| answer.take(event, &sender));
        }
        let result = result
            .and_then(|()| answer.finish())
            .and_then(|whole| parse_completion(&whole, crate::domain::OutputKind::Json));
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
