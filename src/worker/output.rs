//! An attempt's streamed answer, written to its job's output as it comes
//! (`Store::append_output`): the first piece at once, so that a reader sees
//! the first token as soon as the worker does; after it, what came in the
//! meantime in one write at most every [`BATCH`], so that the writes per
//! stream do not grow with the provider's token rate. The writes of all
//! the process's streams are grouped ([`Appends`]): one transaction writes
//! every piece waiting when its turn comes. A piece the job's
//! output refuses (another attempt holds it and runs, or the job ended)
//! means this attempt lost the race for the output: its call is aborted
//! (and, where the provider can, canceled there) as a loser's is, when the
//! task cancels losers.
//!
//! An answer is bounded: past the provider's `max_output_tokens` (counted
//! by its tokenizer, with a margin for the recount) or [`MAX_BYTES`], no
//! more of it is stored and its call is stopped (and canceled at the
//! provider, where it can be); the attempt then fails as
//! `response-too-large`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::config::Tokenizer;
use crate::domain::{AttemptId, Usage};
use crate::process::signals::Signals;
use crate::provider::{Completion, FailureClass, FailureFacts, FailureKind, ProviderError};
use crate::store::output::{Appended, OutputPiece};
use crate::store::{AttemptRef, GroupCommit, Store};

/// The least time between two writes of one attempt's pieces.
pub(crate) const BATCH: Duration = Duration::from_millis(50);

/// Tries of one write before its pieces are given up.
const TRIES: u32 = 3;

/// The most bytes of one attempt's answer stored.
pub(crate) const MAX_BYTES: usize = crate::provider::openai::MAX_RESPONSE_BYTES;

/// How long one attempt's answer may grow.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bound {
    /// The provider's `max_output_tokens`.
    pub max_tokens: u32,
    /// How the provider counts them.
    pub tokenizer: Tokenizer,
}

impl Bound {
    /// The most tokens allowed: `max_tokens`, and a margin, since a text
    /// counted again may split into a few more tokens than were generated.
    fn most_tokens(self) -> usize {
        let most = self.max_tokens as usize;
        most + most / 16 + 8
    }
}

/// What an attempt's writer saw of its answer.
#[derive(Debug, Default)]
pub(super) struct Written {
    /// The answer's text as it came, whether it was shown or not.
    pub text: String,
    /// Whether it passed its [`Bound`] (its call was then stopped).
    pub over: bool,
    /// When its first piece came.
    pub first_at: Option<Instant>,
}

/// Writes the pieces that come on `pieces` until the call ends (the sender
/// is dropped), waking this process's readers of the job's output after
/// each write: the whole text, and whether it passed `bound` (then `stop`
/// is told, and nothing more is written). Once the output refused this
/// attempt's pieces, only [`MAX_BYTES`] bounds what is kept of them: its
/// answer may still come whole and be recorded as a loser's.
pub(super) async fn write_output(
    (store, appends): (Store, Arc<Appends>),
    signals: Arc<Signals>,
    attempt: AttemptRef,
    id: AttemptId,
    (bound, stop): (Bound, oneshot::Sender<()>),
    mut pieces: UnboundedReceiver<String>,
) -> Written {
    let mut written = Written::default();
    let mut stop = Some(stop);
    let mut shown = true;
    let mut next_write = Instant::now();
    // Each token is at least one byte: until the text is this long, it
    // cannot have more tokens than allowed, and is not counted.
    let mut count_at = bound.most_tokens();
    while let Some(mut text) = pieces.recv().await {
        written.first_at.get_or_insert_with(Instant::now);
        tokio::time::sleep_until(next_write).await;
        while let Ok(more) = pieces.try_recv() {
            text.push_str(&more);
        }
        if written.over {
            continue;
        }
        written.text.push_str(&text);
        if shown && written.text.len() > count_at.min(MAX_BYTES) {
            let tokens = crate::provider::tokens::count(bound.tokenizer, &written.text);
            written.over = tokens > bound.most_tokens();
            count_at = written.text.len() + bound.most_tokens().saturating_sub(tokens).max(1);
        }
        written.over |= written.text.len() > MAX_BYTES;
        if written.over {
            tracing::warn!(bytes = written.text.len(), "the streamed answer passed its bound: its call is stopped");
            if let Some(stop) = stop.take() {
                let _ = stop.send(());
            }
            continue;
        }
        if !shown {
            continue;
        }
        next_write = Instant::now() + BATCH;
        match write(&appends, &store, &attempt, &text).await {
            Some(Appended::Shown { seq, restarted }) => {
                signals.output_grew(attempt.job_id, &written_pieces(attempt.number, seq, restarted, text))
            }
            Some(Appended::Refused) => {
                tracing::info!(
                    "another attempt's answer holds the job's output, or the job ended: this call is aborted"
                );
                signals.abort_call(attempt.job_id, id);
                shown = false;
            }
            None => shown = false,
        }
    }
    written
}

/// The pieces one write added to a job's output: `text`, numbered `seq`,
/// after a `restart` when the attempt took the output.
fn written_pieces(attempt_number: i32, seq: i64, restarted: bool, text: String) -> Vec<OutputPiece> {
    let delta = OutputPiece { seq, attempt_number, kind: "delta".into(), text };
    match restarted {
        true => vec![OutputPiece { seq: seq - 1, attempt_number, kind: "restart".into(), text: String::new() }, delta],
        false => vec![delta],
    }
}

/// The outcome of a streamed call, with what its writer saw: an answer
/// past its bound fails as `response-too-large`; usage the provider did
/// not send is counted from the streamed text by the provider's tokenizer
/// (`estimated`), with the prompt's `prompt_tokens`, for an answer and for
/// a definitive failure after some text came; a stream broken midway keeps
/// its partial text (as the attempt's unapplied output).
pub(super) fn streamed_outcome(
    outcome: Result<Completion, ProviderError>,
    written: Written,
    prompt_tokens: usize,
    bound: Bound,
) -> Result<Completion, ProviderError> {
    let counted = || Usage {
        prompt_tokens: i64::try_from(prompt_tokens).unwrap_or(i64::MAX),
        completion_tokens: i64::try_from(crate::provider::tokens::count(bound.tokenizer, &written.text))
            .unwrap_or(i64::MAX),
        estimated: true,
        ..Usage::default()
    };
    if written.over {
        let message = format!(
            "the streamed answer passed the provider's max_output_tokens ({}) or {MAX_BYTES} bytes: it was stopped",
            bound.max_tokens
        );
        let error = ProviderError::new(
            FailureClass::Definitive { retryable: false },
            FailureKind::ResponseTooLarge,
            None,
            message,
        );
        let usage = outcome.as_ref().map_or_else(|error| error.facts.usage, |completion| completion.usage);
        let facts = FailureFacts { usage: usage.or_else(|| Some(counted())), ..FailureFacts::default() };
        return Err(error.with_facts(facts));
    }
    match outcome {
        Ok(Completion { output, usage: None, provider_request_id }) if !written.text.is_empty() => {
            Ok(Completion { output, usage: Some(counted()), provider_request_id })
        }
        // The provider answered, and did not say what that used.
        Err(mut error) if matches!(error.class, FailureClass::Definitive { .. }) && !written.text.is_empty() => {
            error.facts.usage = error.facts.usage.or_else(|| Some(counted()));
            if error.kind == FailureKind::StreamBroken {
                error.facts.received_text = Some(written.text);
            }
            Err(error)
        }
        outcome => outcome,
    }
}

/// A piece waiting for its batch, and where its answer goes.
struct QueuedPiece {
    attempt: AttemptRef,
    text: String,
    answer: oneshot::Sender<crate::store::Result<Appended>>,
}

/// The pieces of this process's streams waiting to be written: those
/// queued when one of two writers' turns comes are written in one
/// transaction ([`crate::store::GroupCommit`], [`Store::append_outputs`]), so
/// that many streams cost a commit, not one each.
pub(crate) struct Appends(GroupCommit<QueuedPiece>);

/// The most pieces one transaction writes.
const MAX_BATCH: usize = 256;

impl Default for Appends {
    fn default() -> Self {
        Self(GroupCommit::new(Arc::new(tokio::sync::Semaphore::new(2)), MAX_BATCH))
    }
}

impl Appends {
    /// Appends `text` to `attempt`'s job's output in the next batch: what
    /// [`Store::append_output`] answers.
    async fn append(&self, store: &Store, attempt: &AttemptRef, text: &str) -> crate::store::Result<Appended> {
        let (answer, answered) = oneshot::channel();
        let queued = QueuedPiece { attempt: attempt.clone(), text: text.to_owned(), answer };
        let write = |batch| {
            let store = store.clone();
            async move { append(&store, batch).await }
        };
        self.0
            .submit(queued, answered, None, write)
            .await
            .map_err(|_| crate::store::StoreError::Interrupted("the write of this piece was interrupted"))?
    }
}

/// Writes a batch of pieces in one transaction and answers each.
async fn append(store: &Store, batch: Vec<QueuedPiece>) {
    let pieces: Vec<(&AttemptRef, &str)> = batch.iter().map(|q| (&q.attempt, q.text.as_str())).collect();
    let answers = store.append_outputs(&pieces).await;
    drop(pieces);
    for (queued, answer) in batch.into_iter().zip(answers) {
        let _ = queued.answer.send(answer);
    }
}

/// One write, tried again on a database error; `None` when it failed.
async fn write(appends: &Appends, store: &Store, attempt: &AttemptRef, text: &str) -> Option<Appended> {
    for tried in 1..=TRIES {
        match appends.append(store, attempt, text).await {
            Ok(appended) => return Some(appended),
            Err(error) if tried < TRIES => {
                tracing::warn!(%error, tried, "writing a piece of the job's output failed; trying again");
                tokio::time::sleep(BATCH).await;
            }
            Err(error) => {
                tracing::warn!(%error, "writing a piece of the job's output failed; the rest of this answer is not shown");
            }
        }
    }
    None
}
