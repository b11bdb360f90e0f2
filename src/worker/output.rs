//! An attempt's streamed answer, written to its job's output as it comes
//! (`Store::append_output`): the first piece at once, so that a reader sees
//! the first token as soon as the worker does; after it, what came in the
//! meantime in one write at most every [`BATCH`], so that the writes per
//! stream do not grow with the provider's token rate. A piece the job's
//! output refuses (another attempt holds it and runs, or the job ended)
//! means this attempt lost the race for the output: its call is aborted
//! (and, where the provider can, canceled there) as a loser's is, when the
//! task cancels losers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use crate::domain::AttemptId;
use crate::process::signals::Signals;
use crate::store::output::Appended;
use crate::store::{AttemptRef, Store};

/// The least time between two writes of one attempt's pieces.
pub const BATCH: Duration = Duration::from_millis(50);

/// Tries of one write before its pieces are given up.
const TRIES: u32 = 3;

/// Writes the pieces that come on `pieces` until the call ends (the sender
/// is dropped), waking this process's readers of the job after each write.
pub(super) async fn write_output(
    store: Store,
    signals: Arc<Signals>,
    attempt: AttemptRef,
    id: AttemptId,
    mut pieces: UnboundedReceiver<String>,
) {
    let mut shown = true;
    let mut next_write = Instant::now();
    while let Some(mut text) = pieces.recv().await {
        tokio::time::sleep_until(next_write).await;
        while let Ok(more) = pieces.try_recv() {
            text.push_str(&more);
        }
        if !shown {
            continue;
        }
        next_write = Instant::now() + BATCH;
        match write(&store, &attempt, &text).await {
            Some(Appended::Shown) => signals.job_changed(attempt.job_id),
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
}

/// One write, tried again on a database error; `None` when it failed.
async fn write(store: &Store, attempt: &AttemptRef, text: &str) -> Option<Appended> {
    for tried in 1..=TRIES {
        match store.append_output(attempt, text).await {
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
