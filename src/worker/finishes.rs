//! Group commit of the worker's outputs: an attempt's output waits in a
//! queue; whoever gets one of the [`WRITERS`] turns takes every output
//! queued (its own among them) and settles them in one transaction
//! ([`Store::finish_attempts`]: one compare-and-swap per attempt, one
//! commit), while the outputs that arrive meanwhile queue for the next.
//! An output that arrives with a turn free is settled at once, alone;
//! under load, batches grow with the time a commit takes.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};

use crate::store::{AttemptRef, AttemptUsage, Finish, Result, Store, StoreError, Transition};

/// The most outputs one transaction settles.
const MAX_BATCH: usize = 64;

/// Batches written at once. Two keep Postgres busy while a batch's
/// statements travel (with one, it waits on round trips); on SQLite the
/// second waits for the write lock, already gathered.
const WRITERS: usize = 2;

/// An output waiting for its batch, and where its answer goes.
struct Queued {
    attempt: AttemptRef,
    output: Value,
    holder: String,
    usage: Option<AttemptUsage>,
    answer: oneshot::Sender<Result<Transition>>,
}

/// The queue of outputs waiting to be settled, and the turns to write a batch.
pub(crate) struct Finishes {
    queue: Mutex<Vec<Queued>>,
    writing: Arc<Semaphore>,
}

impl Default for Finishes {
    fn default() -> Self {
        Self { queue: Mutex::default(), writing: Arc::new(Semaphore::new(WRITERS)) }
    }
}

/// Why an output queued for a batch got no answer: the task settling its
/// batch ended without one (nothing of it is acknowledged).
fn interrupted() -> StoreError {
    StoreError::Interrupted("the settlement of this output was interrupted")
}

impl Finishes {
    /// Settles `output` as `holder`'s for `attempt`, with `usage`, in the
    /// next batch: what [`Store::finish_attempt`] answers. The batch is
    /// written by a task of its own, so that an attempt whose task ends
    /// while it waits cannot abandon the others.
    pub(crate) async fn finish(
        &self,
        store: &Store,
        attempt: &AttemptRef,
        output: &Value,
        holder: &str,
        usage: Option<&AttemptUsage>,
    ) -> Result<Transition> {
        let (answer, mut answered) = oneshot::channel();
        let queued = Queued {
            attempt: attempt.clone(),
            output: output.clone(),
            holder: holder.to_owned(),
            usage: usage.cloned(),
            answer,
        };
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).push(queued);
        loop {
            let turn = tokio::select! {
                biased;
                answer = &mut answered => return answer.map_err(|_| interrupted())?,
                turn = self.writing.clone().acquire_owned() => turn.map_err(|_| interrupted())?,
            };
            let batch: Vec<Queued> = {
                let mut queued = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                let take = queued.len().min(MAX_BATCH);
                queued.drain(..take).collect()
            };
            if batch.is_empty() {
                // Ours was taken by a batch being written: its answer comes.
                drop(turn);
                return answered.await.map_err(|_| interrupted())?;
            }
            let store = store.clone();
            tokio::spawn(async move {
                let _turn = turn;
                settle(&store, batch).await;
            });
            // Ours was in that batch, or (past MAX_BATCH) is in a later one.
        }
    }
}

/// Settles a batch in one transaction and answers each output.
async fn settle(store: &Store, batch: Vec<Queued>) {
    let finishes: Vec<Finish<'_>> = batch
        .iter()
        .map(|q| Finish {
            attempt: &q.attempt,
            output: &q.output,
            holder: Some(q.holder.as_str()),
            usage: q.usage.as_ref(),
        })
        .collect();
    let answers = store.finish_attempts(&finishes).await;
    drop(finishes);
    crate::process::metrics::settle_batch(batch.len());
    for (queued, answer) in batch.into_iter().zip(answers) {
        let _ = queued.answer.send(answer);
    }
}
