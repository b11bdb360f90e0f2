//! Group commit: an item (an output to settle, a piece of a streamed
//! answer) waits in a queue; whoever gets one of the writers' turns takes
//! every item queued (its own among them, up to a batch's most) and writes
//! them in one transaction, in a task of its own, while the items that
//! arrive meanwhile queue for the next turn. An item that arrives with a
//! turn free is written at once, alone; under load, batches grow with the
//! time a commit takes.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio::sync::{Semaphore, oneshot};

use crate::store::Store;

/// Writes one batch and answers each of its items.
pub(crate) type WriteBatch<T> = fn(Store, Vec<T>) -> BoxFuture<'static, ()>;

/// The queue of items waiting to be written, and the turns to write a batch.
pub(crate) struct GroupCommit<T> {
    queue: Mutex<Vec<T>>,
    writing: Arc<Semaphore>,
    most: usize,
    write: WriteBatch<T>,
}

impl<T: Send + 'static> GroupCommit<T> {
    /// `writers` batches written at once, each of at most `most` items, by `write`.
    pub(crate) fn new(writers: usize, most: usize, write: WriteBatch<T>) -> Self {
        Self { queue: Mutex::default(), writing: Arc::new(Semaphore::new(writers)), most, write }
    }

    /// Queues `item`, whose answer comes on `answered`, and waits for that
    /// answer; `None` when the task writing its batch ended without one
    /// (nothing of it is acknowledged). The batch is written by a task of
    /// its own, so that a caller whose task ends while it waits cannot
    /// abandon the others.
    pub(crate) async fn submit<R>(&self, store: &Store, item: T, mut answered: oneshot::Receiver<R>) -> Option<R> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).push(item);
        loop {
            let turn = tokio::select! {
                biased;
                answer = &mut answered => return answer.ok(),
                turn = self.writing.clone().acquire_owned() => turn.ok()?,
            };
            let batch: Vec<T> = {
                let mut queued = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                let take = queued.len().min(self.most);
                queued.drain(..take).collect()
            };
            if batch.is_empty() {
                // Ours was taken by a batch being written: its answer comes.
                drop(turn);
                return answered.await.ok();
            }
            let (store, write) = (store.clone(), self.write);
            tokio::spawn(async move {
                let _turn = turn;
                write(store, batch).await;
            });
            // Ours was in that batch, or (past the most) is in a later one.
        }
    }
}
