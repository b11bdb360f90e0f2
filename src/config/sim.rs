//! How the simulator's providers misbehave: what they answer, and what
//! goes wrong on the wire.

use serde::Deserialize;

/// What a simulated provider answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimOutput {
    /// Output that meets the task's contract.
    #[default]
    Valid,
    /// Valid JSON with a top-level key the contract does not allow.
    ExtraTopLevelKey,
    /// Text that is not JSON.
    NotJson,
    /// A text task's answer four times over, past its `maxLength`; for a
    /// JSON task, the same as `valid`.
    Long,
    /// A refusal instead of an answer (`message.refusal`, or a `refusal`
    /// content part of a response).
    Refusal,
    /// An answer cut off at the token limit (`finish_reason = "length"`,
    /// an `incomplete` response for `max_output_tokens`, or
    /// `stop_reason = "max_tokens"`).
    Truncated,
    /// The Messages API: a turn paused by the model
    /// (`stop_reason = "pause_turn"`).
    PauseTurn,
    /// The Messages API: an answer stopped at the model's context window
    /// (`stop_reason = "model_context_window_exceeded"`).
    ContextWindowExceeded,
}

/// How a simulated provider misbehaves on the wire. Each one lands the
/// attempt in the state docs/design.md's failure classification gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimFault {
    /// Resets the connection without taking the request: the provider has
    /// no record of it, so its status lookup says it was never received.
    ResetBeforeRequest,
    /// Reads the request, does the work, then resets the connection.
    ResetAfterRequest,
    /// Reads the request and never sends the response's headers.
    NoHeaders,
    /// Sends the headers and half of the body, then stalls.
    StalledBody,
    /// Answers 200 with a 10 MiB body.
    HugeBody,
    /// Answers 200 with a body that is not UTF-8.
    InvalidUtf8,
    /// Answers 200 with an error object (OpenAI's, or Anthropic's
    /// envelope) as its body.
    #[serde(rename = "error_in_200")]
    ErrorIn200,
}
