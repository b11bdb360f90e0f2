//! Group commit of the worker's outputs ([`crate::store::GroupCommit`]): the
//! outputs queued when the [`WRITERS`] turn comes are settled in
//! one transaction ([`Store::settle_together`]: one compare-and-swap per
//! attempt, one commit).

use serde_json::Value;
use tokio::sync::oneshot;

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::store::{AttemptRef, AttemptUsage, Finish, GroupCommit, Result, Store, StoreError, Transition};

/// The most outputs one transaction settles.
const MAX_BATCH: usize = 64;

/// Batches written at once: one, so that the outputs that arrive while a
/// batch is written gather for the next. (With two, every other batch
/// was an output alone: on Postgres half the settling transactions, and
/// a seventh more CPU a job.)
const WRITERS: usize = 1;

/// An output waiting for its batch, and where its answer goes.
struct QueuedOutput {
    attempt: AttemptRef,
    output: Value,
    holder: String,
    usage: Option<AttemptUsage>,
    answer: oneshot::Sender<Result<Transition>>,
}

/// The queue of outputs waiting to be settled.
pub(crate) struct Finishes(GroupCommit<QueuedOutput>);

impl Default for Finishes {
    fn default() -> Self {
        Self(GroupCommit::new(Arc::new(Semaphore::new(WRITERS)), MAX_BATCH))
    }
}

impl Finishes {
    /// Settles `output` as `holder`'s for `attempt`, with `usage`, in the
    /// next batch: what [`Store::finish_attempt`] answers.
    pub(crate) async fn finish(
        &self,
        store: &Store,
        attempt: &AttemptRef,
        output: &Value,
        holder: &str,
        usage: Option<&AttemptUsage>,
    ) -> Result<Transition> {
        let (answer, answered) = oneshot::channel();
        let queued = QueuedOutput {
            attempt: attempt.clone(),
            output: output.clone(),
            holder: holder.to_owned(),
            usage: usage.cloned(),
            answer,
        };
        let write = |batch| {
            let store = store.clone();
            async move { settle(&store, batch).await }
        };
        // No answer: the task settling its batch ended without one, and
        // nothing of it is acknowledged.
        let interrupted = |_| StoreError::Interrupted("the settlement of this output was interrupted");
        self.0.submit(queued, answered, None, write).await.map_err(interrupted)?
    }
}

/// Settles a batch in one transaction and answers each output. An output
/// the transaction left (its job locked by another transaction, or the
/// batch failed) is settled alone by a task of its own, so that a lock held
/// elsewhere holds up that output only, not the turn.
async fn settle(store: &Store, batch: Vec<QueuedOutput>) {
    let finishes: Vec<Finish<'_>> = batch
        .iter()
        .map(|q| Finish {
            attempt: &q.attempt,
            output: &q.output,
            holder: Some(q.holder.as_str()),
            usage: q.usage.as_ref(),
        })
        .collect();
    let outcomes = store.settle_together(&finishes).await;
    drop(finishes);
    crate::process::metrics::settle_batch(batch.len());
    for (queued, outcome) in batch.into_iter().zip(outcomes) {
        match outcome {
            Some(outcome) => {
                let _ = queued.answer.send(Ok(outcome));
            }
            None => {
                let store = store.clone();
                tokio::spawn(async move {
                    let q = queued;
                    let alone = store.finish_attempt(&q.attempt, &q.output, Some(&q.holder), q.usage.as_ref()).await;
                    let _ = q.answer.send(alone);
                });
            }
        }
    }
}
