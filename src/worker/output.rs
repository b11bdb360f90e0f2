//! An attempt's streamed answer, written to its job's output as it comes
//! (`Store::append_output`): the first piece at once, so that a reader sees
//! the first token as soon as the worker does; after it, what came in the
//! meantime in one write at most every [`BATCH`], so that the writes per
//! stream do not grow with the provider's token rate. A piece the job's
//! output refuses (another attempt holds it and runs, or the job ended) is
//! dropped, and so is the rest of this attempt's.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use crate::process::signals::Signals;
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
        shown = write(&store, &attempt, &text).await;
        if shown {
            signals.job_changed(attempt.job_id);
        }
    }
}

/// One write, tried again on a database error; whether the pieces are in.
async fn write(store: &Store, attempt: &AttemptRef, text: &str) -> bool {
    for tried in 1..=TRIES {
        match store.append_output(attempt, text).await {
            Ok(true) => return true,
            Ok(false) => {
                tracing::info!(
                    "the job's output is another attempt's, or the job ended: this answer's pieces are not shown"
                );
                return false;
            }
            Err(error) if tried < TRIES => {
                tracing::warn!(%error, tried, "writing a piece of the job's output failed; trying again");
                tokio::time::sleep(BATCH).await;
            }
            Err(error) => {
                tracing::warn!(%error, "writing a piece of the job's output failed; the rest of this answer is not shown");
            }
        }
    }
    false
}
