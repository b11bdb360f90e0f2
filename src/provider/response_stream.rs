//! A streamed background response (the Responses API with `"stream":
//! true` and `"background": true`): Server-Sent Events, each a JSON object
//! with its `type` and `sequence_number`. `response.created` carries the
//! response's id; `response.output_text.delta` a piece of the answer's
//! text; `response.completed`, `response.incomplete`, `response.failed`
//! (and `response.cancelled`) the final response object, read as a
//! background response's status is ([`responses::read_object`]); an
//! `error` event ends the stream with the provider's error.
//!
//! A broken connection does not break the answer: the provider keeps
//! working in the background, and `GET /responses/{id}?stream=true&
//! starting_after=N` sends the events after the last one read, so the
//! pieces go on with no gap and none twice. Only a stream that breaks
//! before it gave its id, or breaks [`MOST_RESUMES`] times in a row with
//! nothing new, leaves the outcome unknown (the reconciler then asks by
//! the id, if there is one).

use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;

use super::openai::{HttpProvider, MAX_RESPONSE_BYTES};
use super::stream::{Events, Interrupted};
use super::{Completion, Deltas, FailureClass, FailureKind, ProviderError, ProviderRequest, RequestStatus, responses};

/// Resumes in a row that bring nothing new before the stream is given up.
const MOST_RESUMES: u32 = 3;

/// What the events read so far said.
#[derive(Default)]
struct Followed {
    /// The response's id, once `response.created` gave it.
    id: Option<String>,
    /// The sequence number of the last event read.
    last: Option<u64>,
    /// The characters of text received.
    characters: usize,
    /// Whether an event came without its sequence number.
    unnumbered: bool,
    /// What the task answers.
    output: crate::domain::OutputKind,
}

impl HttpProvider {
    /// Sends `request` as a streamed background response and follows it to
    /// its end (see the module's documentation): `started` is told the
    /// response's id as soon as it comes.
    pub(super) async fn follow_stream(
        &self,
        request: &ProviderRequest,
        started: oneshot::Sender<String>,
    ) -> Result<Completion, ProviderError> {
        let Some(deltas) = &request.deltas else {
            unreachable!("a streamed response is asked for with somewhere to send its pieces")
        };
        let body = responses::body(&self.settings, request, self.simulated);
        let mut next = Ok(self.post(&self.responses_url, &body, request).await?);
        let mut followed = Followed { output: request.output_kind(), ..Followed::default() };
        let mut started = Some(started);
        let lost =
            |message: String| ProviderError::new(FailureClass::Ambiguous, FailureKind::ConnectionLost, None, message);
        let mut idle = 0;
        loop {
            let before = followed.last;
            let why = match next {
                Ok(connection) => match followed.read(connection, deltas, &mut started).await {
                    Ok(end) => return end,
                    // What came cannot be read; once the response has an id,
                    // the provider may still be working on it: unknown, and
                    // the reconciler asks by the id.
                    Err(Interrupted::Failed(error)) if followed.id.is_some() => {
                        return Err(ProviderError { class: FailureClass::Ambiguous, ..error });
                    }
                    Err(Interrupted::Failed(error)) => return Err(error),
                    Err(Interrupted::Broken(why)) => why,
                },
                Err(why) => why,
            };
            let Some(id) = followed.id.clone() else { return Err(lost(why)) };
            if followed.unnumbered {
                // Without sequence numbers, a resumed stream would repeat it all.
                return Err(lost(format!("the stream of {id} broke, and its events have no sequence numbers: {why}")));
            }
            idle = if followed.last == before { idle + 1 } else { 1 };
            if idle > MOST_RESUMES {
                return Err(lost(format!(
                    "the stream of {id} broke {MOST_RESUMES} times in a row with nothing new: {why}"
                )));
            }
            tracing::info!(provider_request_id = %id, after = ?followed.last, %why, "the response's stream broke: resuming it");
            tokio::time::sleep(Duration::from_millis(100) * (idle - 1)).await;
            next = self.resume(&id, followed.last).await;
        }
    }

    /// Opens the stream of response `id` again, after event `after`: the
    /// connection, or why not.
    async fn resume(&self, id: &str, after: Option<u64>) -> Result<reqwest::Response, String> {
        let id = super::openai::response_id(id).ok_or("the response's id cannot be asked by")?;
        let mut url = format!("{}/{id}?stream=true", self.responses_url);
        if let Some(after) = after {
            url.push_str(&format!("&starting_after={after}"));
        }
        let response = self.authorize(self.client.get(url)).send().await.map_err(|e| e.to_string())?;
        match response.status().as_u16() {
            200..=299 => Ok(response),
            status => Err(format!("resuming the stream was answered {status}")),
        }
    }
}

impl Followed {
    /// Reads one connection's events to the end of the response, or until
    /// it breaks.
    async fn read(
        &mut self,
        connection: reqwest::Response,
        deltas: &Deltas,
        started: &mut Option<oneshot::Sender<String>>,
    ) -> Result<Result<Completion, ProviderError>, Interrupted> {
        // The final events repeat the whole text: one may be that large.
        let mut events = Events::new(connection, MAX_RESPONSE_BYTES + 64 * 1024);
        while let Some(data) = events.next().await? {
            let event: Value =
                serde_json::from_str(&data).map_err(|e| bad(format!("a streamed event is not JSON: {e}")))?;
            if !self.mark_read(&event) {
                // Already read before the stream was resumed.
                continue;
            }
            match event.get("type").and_then(Value::as_str).unwrap_or_default() {
                "response.created" | "response.in_progress" | "response.queued" => self.take_id(&event, started)?,
                "response.output_text.delta" => self.take_delta(&event, deltas)?,
                "response.completed" | "response.incomplete" | "response.failed" | "response.cancelled" => {
                    return final_outcome(&event, self.output);
                }
                "error" => return Ok(Err(self.stream_error(&event))),
                _ => {}
            }
        }
        Err(Interrupted::Broken("the stream ended before the response did".into()))
    }

    /// Notes `event`'s sequence number: false for an event read before, one
    /// the stream repeats after it was resumed.
    fn mark_read(&mut self, event: &Value) -> bool {
        let sequence = event.get("sequence_number").and_then(Value::as_u64);
        if let (Some(sequence), Some(last)) = (sequence, self.last)
            && sequence <= last
        {
            return false;
        }
        self.unnumbered |= sequence.is_none();
        self.last = sequence.or(self.last);
        true
    }

    /// Takes the response's id from its first event that gives one, and
    /// tells `started`; an id that cannot be asked by fails the stream.
    fn take_id(&mut self, event: &Value, started: &mut Option<oneshot::Sender<String>>) -> Result<(), Interrupted> {
        if self.id.is_none()
            && let Some(id) = event.pointer("/response/id").and_then(Value::as_str)
        {
            // An id that cannot be asked by could not be reconciled.
            let Some(id) = super::openai::response_id(id) else {
                let message = "the response's id is not one that can be asked by".to_owned();
                let error = ProviderError::new(FailureClass::Ambiguous, FailureKind::BadResponse, None, message);
                return Err(Interrupted::Failed(error));
            };
            self.id = Some(id.to_owned());
            if let Some(started) = started.take() {
                let _ = started.send(id.to_owned());
            }
        }
        Ok(())
    }

    /// Counts a piece of the answer's text and sends it on; an answer that
    /// grows past [`MAX_RESPONSE_BYTES`] characters fails the stream.
    fn take_delta(&mut self, event: &Value, deltas: &Deltas) -> Result<(), Interrupted> {
        let piece = event.get("delta").and_then(Value::as_str).unwrap_or_default();
        self.characters += piece.chars().count();
        if self.characters > MAX_RESPONSE_BYTES {
            return Err(Interrupted::Failed(ProviderError::new(
                FailureClass::Definitive { retryable: false },
                FailureKind::ResponseTooLarge,
                Some(200),
                format!("the streamed answer is longer than {MAX_RESPONSE_BYTES} characters"),
            )));
        }
        if !piece.is_empty() {
            // The attempt may have stopped listening: the answer still counts.
            let _ = deltas.send(piece.to_owned());
        }
        Ok(())
    }

    /// The provider's error that an `error` event ends the stream with.
    fn stream_error(&self, event: &Value) -> ProviderError {
        let code = event.get("code").and_then(Value::as_str).unwrap_or("unknown");
        let message = event.get("message").and_then(Value::as_str).unwrap_or("an error in the stream");
        // Before the response had an id, nothing was started;
        // after, the response's own status says how it ended
        // (the reconciler asks by the id).
        let class = match self.id {
            None => FailureClass::Definitive { retryable: matches!(code, "server_error" | "rate_limit_exceeded") },
            Some(_) => FailureClass::Ambiguous,
        };
        ProviderError::new(
            class,
            FailureKind::ProviderError,
            Some(200),
            super::answer::truncate(format!("the stream ended with an error ({code}): {message}")),
        )
    }
}

/// A stream that cannot be read: a bad response, not to be retried.
fn bad(message: String) -> Interrupted {
    Interrupted::Failed(ProviderError::new(
        FailureClass::Definitive { retryable: false },
        FailureKind::BadResponse,
        None,
        message,
    ))
}

/// How a final event's response ended, read as a background response's
/// status is.
fn final_outcome(
    event: &Value,
    kind: crate::domain::OutputKind,
) -> Result<Result<Completion, ProviderError>, Interrupted> {
    let response = event.get("response").ok_or_else(|| bad("a final event without its response".into()))?;
    Ok(match responses::read_object(response, kind).map_err(Interrupted::Failed)?.1 {
        RequestStatus::Succeeded(completion) => Ok(completion),
        RequestStatus::Failed(error) => Err(error),
        RequestStatus::Canceled(usage) => Err(ProviderError::canceled_at_provider(usage)),
        RequestStatus::Running | RequestStatus::NotFound => {
            Err(bad("a final event whose response is not final".into()))?
        }
    })
}
